//! The sample events next to each function (`functions/<name>/events/*.json`, for
//! `cargo lambda invoke --data-file` and `sam local invoke -e`) are real: each decodes as the
//! event its function receives and does what it says when handled.

use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use collections::{CollectionsHandler, Notifier};
use integration_tests::Engine;
use integration_tests::routing::RoutedBus;
use integration_tests::servicing::Servicing;
use outbox_relay::OutboxRelay;
use serde_json::{Value, json};

use crate::collections::Receiver;

fn sample(function: &str, file: &str) -> String {
    let path = format!(
        "{}/../functions/{function}/events/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_sample_events_are_handled_should_open_pay_relay_and_notify() {
    let servicing = Servicing::new(Engine::MiniStack).await;

    // account-state: the SQS record opens acc_9001.
    let opening: SqsEvent =
        serde_json::from_str(&sample("account-state", "sqs-loan-opened.json")).expect("SQS event");
    let report = servicing.handler().process(&opening.records).await;
    assert_eq!(report.counts.applied, 1, "{report:?}");
    assert!(servicing.loan("acc_9001").await.is_some());

    // payments-api: the HTTP API request is accepted for that account.
    let request = lambda_http::request::from_str(&sample("payments-api", "http-post-payment.json"))
        .expect("API Gateway v2 request");
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    assert_eq!(api.handle(request).await.status().as_u16(), 202);

    // outbox-relay: the stream record is an outbox insert it publishes.
    let config = Engine::MiniStack.sdk_config().await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;
    let stream: StreamEvent =
        serde_json::from_str(&sample("outbox-relay", "stream-outbox-insert.json"))
            .expect("stream event");
    let relay = OutboxRelay::new(
        aws_sdk_eventbridge::Client::new(&config),
        servicing.store(outbox_relay::CONSUMER),
        &routed.bus,
    );
    let report = relay.relay(&stream.records).await;
    assert_eq!(
        (report.published, report.checkpoint.clone()),
        (1, None),
        "{report:?}"
    );
    assert_eq!(routed.drain().await.len(), 1);

    // collections: the DelinquencyChanged envelope is one notification.
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let collections = CollectionsHandler::new(
        servicing.store(collections::CONSUMER),
        Notifier::new(&server.uri(), Duration::from_secs(2)).expect("notifier"),
    );
    let delinquency: SqsEvent =
        serde_json::from_str(&sample("collections", "sqs-delinquency-changed.json"))
            .expect("SQS event");
    let response = collections.handle(delinquency).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(receiver.distinct().len(), 1);

    // reconciler: the schedule sends no input.
    let schedule: Value =
        serde_json::from_str(&sample("reconciler", "schedule.json")).expect("json");
    assert_eq!(schedule, json!({}));
}
