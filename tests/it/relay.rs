//! The outbox relay against MiniStack: real stream records (written by the account-state
//! handler) → PutEvents → a rule → a queue. Failures are injected by a stand-in EventBridge
//! endpoint that forwards what it does not fail to MiniStack.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use integration_tests::http_server::{LocalServer, respond, serve};
use integration_tests::routing::RoutedBus;
use integration_tests::servicing::{Servicing, attr_s};
use integration_tests::{Engine, streams};
use outbox_relay_handler::{CONSUMER, OutboxRelay};
use serde_json::{Value, json};

fn event_ids(envelopes: &[Value]) -> BTreeSet<String> {
    envelopes
        .iter()
        .map(|e| e["detail"]["eventId"].as_str().expect("eventId").to_owned())
        .collect()
}

/// The basic sample applied through the account-state handler; returns the stream records
/// and the outbox event ids, in stream order.
async fn sample_stream(servicing: &Servicing) -> (Vec<EventRecord>, Vec<String>) {
    servicing.deliver_fixture("basic.jsonl").await;
    let config = servicing.engine.sdk_config().await;
    let records = streams::read_all(
        &aws_sdk_dynamodbstreams::Client::new(&config),
        &servicing.client,
        &servicing.table,
    )
    .await;
    let outbox: Vec<String> = records
        .iter()
        .filter(|r| r.event_name == "INSERT")
        .filter_map(|r| match r.change.new_image.get("eventId") {
            Some(serde_dynamo::AttributeValue::S(id))
                if r.change.new_image.get("itemType")
                    == Some(&serde_dynamo::AttributeValue::S("OUTBOX".into())) =>
            {
                Some(id.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(outbox.len(), 11, "9 domain events + 2 delinquency changes");
    (records, outbox)
}

fn relay_with(servicing: &Servicing, config: &aws_config::SdkConfig, bus: &str) -> OutboxRelay {
    let store = servicing.store(CONSUMER);
    OutboxRelay::new(aws_sdk_eventbridge::Client::new(config), store, bus)
}

/// A stream INSERT of an outbox item, as Lambda delivers it: `(source, detail type)`, the
/// account when the item names one, and the detail JSON.
fn outbox_record(
    seq: &str,
    event_id: &str,
    (source, detail_type): (&str, &str),
    account: Option<&str>,
    detail: String,
) -> EventRecord {
    let mut image = json!({"pk": {"S": format!("OUTBOX#{event_id}")}, "sk": {"S": "OUTBOX"}, "itemType": {"S": "OUTBOX"},
        "eventId": {"S": event_id}, "source": {"S": source}, "detailType": {"S": detail_type}, "detail": {"S": detail}});
    if let Some(account) = account {
        image["accountId"] = json!({"S": account});
    }
    serde_json::from_value(json!({
        "eventID": format!("rec-{seq}"), "eventName": "INSERT", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"SequenceNumber": seq, "SizeBytes": 1, "StreamViewType": "NEW_IMAGE", "ApproximateCreationDateTime": 0,
            "Keys": {"pk": {"S": format!("OUTBOX#{event_id}")}, "sk": {"S": "OUTBOX"}},
            "NewImage": image}
    }))
    .expect("record")
}

fn sequence_of(records: &[EventRecord], event_id: &str) -> String {
    records
        .iter()
        .find(|r| {
            r.change.new_image.get("eventId")
                == Some(&serde_dynamo::AttributeValue::S(event_id.into()))
        })
        .and_then(|r| r.change.sequence_number.clone())
        .expect("record of the event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_stream_records_are_relayed_should_route_every_outbox_event_to_the_queue() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let (records, outbox) = sample_stream(&servicing).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;

    let report = relay_with(&servicing, &config, &routed.bus)
        .relay(&records)
        .await;
    assert_eq!(report.checkpoint, None);
    assert_eq!(report.published, 11);
    assert_eq!(
        report.skipped as usize,
        records.len() - 11,
        "claims, loans, allocations are not relayed"
    );
    assert!(report.response().batch_item_failures.is_empty());

    let envelopes = routed.drain().await;
    assert_eq!(event_ids(&envelopes), outbox.iter().cloned().collect());
    let applied = envelopes
        .iter()
        .find(|e| e["detail-type"] == "PaymentApplied")
        .expect("PaymentApplied");
    assert_eq!(applied["source"], "servicing.account-state");
    assert_eq!(applied["detail"]["allocation"]["principal"], 21000);
}

/// What the stand-in does with its next `PutEvents` call.
#[derive(Debug, Clone, Copy)]
enum Injected {
    /// Fails the entry at this index (ThrottlingException), forwards the others.
    FailEntry(usize),
    /// Answers HTTP 500 without forwarding anything.
    ServerError,
}

/// A stand-in EventBridge endpoint: applies the queued faults, forwards the rest to MiniStack,
/// and notes each entry's `TraceHeader` in `traces`.
async fn faulty_eventbridge(
    real: aws_sdk_eventbridge::Client,
    plan: Arc<Mutex<VecDeque<Injected>>>,
    traces: Arc<Mutex<Vec<Option<String>>>>,
) -> LocalServer {
    serve(move |_parts, body| {
        let real = real.clone();
        let next = plan.lock().expect("plan").pop_front();
        let traces = Arc::clone(&traces);
        async move {
            if let Some(Injected::ServerError) = next {
                return respond(
                    500,
                    "application/x-amz-json-1.1",
                    r#"{"__type":"InternalException","message":"injected"}"#,
                );
            }
            let request: Value = serde_json::from_slice(&body).expect("PutEvents JSON");
            let entries = request["Entries"].as_array().expect("entries");
            traces.lock().expect("traces").extend(
                entries
                    .iter()
                    .map(|e| e["TraceHeader"].as_str().map(str::to_owned)),
            );
            let failing = match next {
                Some(Injected::FailEntry(i)) => Some(i),
                _ => None,
            };
            let forwarded: Vec<PutEventsRequestEntry> = entries
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != failing)
                .map(|(_, e)| {
                    PutEventsRequestEntry::builder()
                        .set_event_bus_name(e["EventBusName"].as_str().map(str::to_owned))
                        .set_source(e["Source"].as_str().map(str::to_owned))
                        .set_detail_type(e["DetailType"].as_str().map(str::to_owned))
                        .set_detail(e["Detail"].as_str().map(str::to_owned))
                        .build()
                })
                .collect();
            let output = real
                .put_events()
                .set_entries(Some(forwarded))
                .send()
                .await
                .expect("forward");
            let mut answers: Vec<Value> = output
                .entries()
                .iter()
                .map(|r| match r.error_code() {
                    Some(code) => json!({"ErrorCode": code, "ErrorMessage": r.error_message()}),
                    None => json!({"EventId": r.event_id()}),
                })
                .collect();
            if let Some(i) = failing {
                answers.insert(
                    i,
                    json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "injected"}),
                );
            }
            let failed = answers
                .iter()
                .filter(|a| a.get("ErrorCode").is_some())
                .count();
            respond(
                200,
                "application/x-amz-json-1.1",
                json!({"FailedEntryCount": failed, "Entries": answers}).to_string(),
            )
        }
    })
    .await
}

/// Notes the body of every request its SQS client sends (MiniStack keeps no `AWSTraceHeader`, so
/// the trace is checked on the way out).
#[derive(Debug, Default, Clone)]
struct SentBodies(Arc<Mutex<Vec<Value>>>);

impl aws_sdk_sqs::config::Intercept for SentBodies {
    fn name(&self) -> &'static str {
        "SentBodies"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(body) = context.request().body().bytes() {
            self.0
                .lock()
                .expect("bodies")
                .push(serde_json::from_slice(body).unwrap_or(Value::Null));
        }
        Ok(())
    }
}

/// The stand-in endpoint and an SDK config whose EventBridge calls go through it.
async fn proxied_eventbridge(
    config: &aws_config::SdkConfig,
    plan: Arc<Mutex<VecDeque<Injected>>>,
    traces: Arc<Mutex<Vec<Option<String>>>>,
) -> (LocalServer, aws_config::SdkConfig) {
    let proxy = faulty_eventbridge(aws_sdk_eventbridge::Client::new(config), plan, traces).await;
    let proxied = aws_setup::loader()
        .endpoint_url(proxy.url())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await;
    (proxy, proxied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_put_events_fails_partly_or_totally_should_checkpoint_at_the_first_failed_record_and_lose_nothing()
 {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let (records, outbox) = sample_stream(&servicing).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;
    let plan = Arc::new(Mutex::new(VecDeque::new()));
    let (_proxy, proxied) = proxied_eventbridge(&config, Arc::clone(&plan), Arc::default()).await;
    let relay = relay_with(&servicing, &proxied, &routed.bus);

    // Partial failure: the 4th entry of the first request is refused.
    plan.lock().expect("plan").push_back(Injected::FailEntry(3));
    let report = relay.relay(&records).await;
    let checkpoint = sequence_of(&records, &outbox[3]);
    assert_eq!(report.checkpoint.as_deref(), Some(checkpoint.as_str()));
    let failures = report.response().batch_item_failures;
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].item_identifier.as_deref(),
        Some(checkpoint.as_str())
    );
    assert_eq!(report.published, 3);

    // Lambda retries from the checkpoint; this time EventBridge is down for every SDK attempt.
    let from = records
        .iter()
        .position(|r| r.change.sequence_number.as_deref() == Some(&checkpoint))
        .expect("position");
    for _ in 0..3 {
        plan.lock().expect("plan").push_back(Injected::ServerError);
    }
    let report = relay.relay(&records[from..]).await;
    assert_eq!(
        report.checkpoint.as_deref(),
        Some(checkpoint.as_str()),
        "total failure: checkpoint stays"
    );
    assert_eq!(report.published, 0);
    assert_eq!(
        plan.lock().expect("plan").len(),
        0,
        "the SDK retried before giving up"
    );

    // And again, now healthy: everything from the checkpoint on is published.
    let report = relay.relay(&records[from..]).await;
    assert_eq!(report.checkpoint, None);
    assert_eq!(report.published, 8);

    let envelopes = routed.drain().await;
    assert_eq!(
        event_ids(&envelopes),
        outbox.iter().cloned().collect(),
        "nothing lost"
    );
    assert!(
        envelopes.len() > outbox.len(),
        "entries after the failed one were published twice (accepted)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_an_outbox_record_can_never_be_published_should_quarantine_it_and_move_on() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;
    let record = |seq: &str, event_id: &str, detail: String| -> EventRecord {
        outbox_record(
            seq,
            event_id,
            ("servicing.account-state", "FeeAssessed"),
            None,
            detail,
        )
    };
    let huge = json!({"eventId": "evt_huge", "blob": "x".repeat(300 * 1024)}).to_string();
    let mut broken = record("2", "evt_broken", "{}".into());
    broken.change.new_image.remove("detailType");
    let records = vec![
        record("1", "evt_a", json!({"eventId": "evt_a"}).to_string()),
        broken,
        record("3", "evt_huge", huge),
        record("4", "evt_b", json!({"eventId": "evt_b"}).to_string()),
    ];
    let report = relay_with(&servicing, &config, &routed.bus)
        .relay(&records)
        .await;
    assert_eq!(
        (
            report.published,
            report.quarantined,
            report.checkpoint.clone()
        ),
        (2, 2, None)
    );
    let quarantined = servicing.quarantine().await;
    let reasons: Vec<&str> = quarantined
        .iter()
        .filter_map(|q| attr_s(q, "reason"))
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("undecodable outbox image")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("over EventBridge's 262144-byte entry limit")),
        "{reasons:?}"
    );
    assert_eq!(
        event_ids(&routed.drain().await),
        ["evt_a", "evt_b"].map(String::from).into_iter().collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_api_payments_are_relayed_should_reach_the_fifo_servicing_queue_per_account() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (servicing_url, _) = integration_tests::lambda::queue(&sqs, "servicing", true).await;
    let sent = SentBodies::default();
    let relay_sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&config)
            .interceptor(sent.clone())
            .build(),
    );
    let payment = |seq: &str, event_id: &str, account: &str| -> EventRecord {
        let detail = json!({"sourceSystem": "api:scope", "sourceEventId": event_id, "eventType": "PAYMENT_SETTLED",
            "accountId": account, "eventTime": "2026-09-10T10:00:00Z", "amountMinor": 100, "currency": "EUR",
            "eventId": event_id});
        let kind = ("servicing.payments-api", "PaymentSettled");
        let mut record = outbox_record(seq, event_id, kind, Some(account), detail.to_string());
        record.change.new_image.insert(
            "traceHeader".into(),
            serde_dynamo::AttributeValue::S(format!(
                "Root=1-5759e988-bd862e3fe1be46a994272{seq:0>3}"
            )),
        );
        record
    };
    let records = vec![
        payment("1", "op_a", "acc_api_1"),
        payment("2", "op_b", "acc_api_2"),
    ];
    let traces = Arc::new(Mutex::new(Vec::new()));
    let (_proxy, proxied) = proxied_eventbridge(&config, Arc::default(), Arc::clone(&traces)).await;
    let relay = relay_with(&servicing, &proxied, &routed.bus)
        .with_servicing_queue(relay_sqs, &servicing_url);
    let report = relay.relay(&records).await;
    assert_eq!(
        (report.published, report.checkpoint.clone()),
        (2, None),
        "{report:?}"
    );
    let got = sqs
        .receive_message()
        .queue_url(&servicing_url)
        .max_number_of_messages(10)
        .wait_time_seconds(2)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .expect("receive");
    let mut seen: Vec<(String, String, String)> = got
        .messages()
        .iter()
        .map(|m| {
            let attr = |name: aws_sdk_sqs::types::MessageSystemAttributeName| {
                m.attributes()
                    .and_then(|a| a.get(&name))
                    .cloned()
                    .unwrap_or_default()
            };
            let body: Value = serde_json::from_str(m.body().unwrap_or_default()).expect("json");
            (
                body["sourceEventId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId),
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageDeduplicationId),
            )
        })
        .collect();
    seen.sort();
    // Each account in its own group (before: one static group for every API payment), the
    // deduplication id a FIFO queue requires (before: none — AWS refuses such a send), and the
    // trace of the invocation that accepted the payment (before: none).
    let trace = |seq: &str| format!("Root=1-5759e988-bd862e3fe1be46a994272{seq}");
    assert_eq!(
        seen,
        [
            ("op_a".to_owned(), "acc_api_1".to_owned(), "op_a".to_owned(),),
            ("op_b".to_owned(), "acc_api_2".to_owned(), "op_b".to_owned(),),
        ]
    );
    let sent_traces: Vec<Value> = sent
        .0
        .lock()
        .expect("bodies")
        .iter()
        .flat_map(|b| b["Entries"].as_array().cloned().unwrap_or_default())
        .map(|e| e["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"].clone())
        .collect();
    assert_eq!(
        sent_traces,
        [json!(trace("001")), json!(trace("002"))],
        "SendMessageBatch carries each API payment's trace header"
    );
    assert_eq!(
        *traces.lock().expect("traces"),
        [Some(trace("001")), Some(trace("002"))],
        "PutEvents carries each outbox item's trace header"
    );
    // The bus still gets them (other consumers may listen), as before.
    assert_eq!(event_ids(&routed.drain().await).len(), 2);
}
