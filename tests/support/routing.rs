//! EventBridge rules routing matching events into queues, and a fresh bus with one such rule.

use serde_json::Value;

use crate::lambda::queue;
use crate::unique_name;

/// A rule on `bus` sending the events that match `pattern` to `target_arn` (a queue).
pub async fn route(
    events: &aws_sdk_eventbridge::Client,
    bus: &str,
    pattern: &Value,
    target_arn: &str,
) {
    let rule = unique_name("rule");
    events
        .put_rule()
        .name(&rule)
        .event_bus_name(bus)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .expect("rule");
    events
        .put_targets()
        .rule(&rule)
        .event_bus_name(bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("target")
                .arn(target_arn)
                .build()
                .expect("target"),
        )
        .send()
        .await
        .expect("targets");
}

/// A fresh custom event bus; its name.
pub async fn create_bus(events: &aws_sdk_eventbridge::Client) -> String {
    let bus = unique_name("bus");
    events
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("bus");
    bus
}

/// A fresh bus whose rule (`pattern`) routes matching events into a fresh queue.
#[derive(Debug)]
pub struct RoutedBus {
    pub bus: String,
    pub queue_url: String,
    sqs: aws_sdk_sqs::Client,
}

impl RoutedBus {
    pub async fn new(config: &aws_config::SdkConfig, pattern: Value) -> Self {
        let sqs = aws_sdk_sqs::Client::new(config);
        let events = aws_sdk_eventbridge::Client::new(config);
        let (queue_url, queue_arn) = queue(&sqs, "routed", false).await;
        let bus = create_bus(&events).await;
        route(&events, &bus, &pattern, &queue_arn).await;
        Self {
            bus,
            queue_url,
            sqs,
        }
    }

    /// Every envelope that arrived (drains the queue until it stays empty).
    pub async fn drain(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut empty = 0;
        while empty < 2 {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            if got.messages().is_empty() {
                empty += 1;
                continue;
            }
            for m in got.messages() {
                out.push(serde_json::from_str(m.body().unwrap_or_default()).expect("envelope"));
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
        out
    }
}
