//! The outbox relay: against MiniStack, real stream records (written by the account-state
//! handler) → PutEvents → a rule → a queue, and quarantine and API payments through its store
//! and SQS; with no engine, chunking, checkpoints and failures against an in-process
//! EventBridge (wiremock) that fails on cue.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::EventRecord;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::routing::RoutedBus;
use integration_tests::servicing::Servicing;
use integration_tests::{Engine, streams};
use outbox_relay::{CONSUMER, OutboxRelay};
use serde_json::{Value, json};

fn event_ids(envelopes: &[Value]) -> BTreeSet<String> {
    envelopes
        .iter()
        .map(|e| e["detail"]["eventId"].as_str().expect("eventId").to_owned())
        .collect()
}

/// The event ids a stream record's image carries for the relay (its `outbox`), if any.
fn carried_ids(record: &EventRecord) -> Vec<String> {
    match record.change.new_image.get("outbox") {
        Some(serde_dynamo::AttributeValue::S(json)) => {
            servicing_store::OutboxEvent::decode(Some(json))
                .expect("outbox events")
                .iter()
                .map(|e| e.event_id().to_owned())
                .collect()
        }
        _ => Vec::new(),
    }
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
        .flat_map(carried_ids)
        .collect();
    assert_eq!(outbox.len(), 11, "9 domain events + 2 delinquency changes");
    (records, outbox)
}

fn relay_with(servicing: &Servicing, config: &aws_config::SdkConfig, bus: &str) -> OutboxRelay {
    let store = servicing.store(CONSUMER);
    OutboxRelay::new(aws_sdk_eventbridge::Client::new(config), store, bus)
}

/// A stream INSERT of a record carrying one event, as the store writes it and Lambda delivers
/// it: `(source, detail type)`, its account (`acc_relay` unless given) and the detail JSON. A
/// fact's record (claim) for account-state's events, an idempotency record for the API's.
fn outbox_record(
    seq: &str,
    event_id: &str,
    (source, detail_type): (&str, &str),
    account: Option<&str>,
    detail: String,
) -> EventRecord {
    let mut detail: Value = serde_json::from_str(&detail).expect("detail JSON");
    // What the relay admits from such a record (the fields the tests leave out).
    let account = account.unwrap_or("acc_relay");
    let (event_type, origin) = if source == payments_api::EVENT_SOURCE {
        ("PAYMENT_SETTLED", json!({"sourceSystem": "api:scope"}))
    } else {
        (detail_type, json!({}))
    };
    if let Some(fields) = detail.as_object_mut() {
        fields.entry("eventType").or_insert(json!(event_type));
        fields.entry("accountId").or_insert(json!(account));
        for (k, v) in origin.as_object().into_iter().flatten() {
            fields.entry(k.clone()).or_insert(v.clone());
        }
    }
    let outbox =
        json!([{"source": source, "detailType": detail_type, "detail": detail}]).to_string();
    let (pk, sk, item_type) = if source == payments_api::EVENT_SOURCE {
        (
            format!("IDEMPOTENCY#scope#{event_id}"),
            "IDEMPOTENCY",
            "IDEMPOTENCY",
        )
    } else {
        (
            format!("CLAIM#account-state#relay#{event_id}"),
            "CLAIM",
            "CLAIM",
        )
    };
    let image = json!({"pk": {"S": pk}, "sk": {"S": sk}, "itemType": {"S": item_type},
        "outbox": {"S": outbox}, "accountId": {"S": account},
        "claimedAt": {"N": "1796000000"}, "expiresAt": {"N": "1799024000"}});
    serde_json::from_value(json!({
        "eventID": format!("rec-{seq}"), "eventName": "INSERT", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"SequenceNumber": seq, "SizeBytes": 1, "StreamViewType": "NEW_IMAGE", "ApproximateCreationDateTime": 0,
            "Keys": {"pk": {"S": pk}, "sk": {"S": sk}},
            "NewImage": image}
    }))
    .expect("record")
}

fn sequence_of(records: &[EventRecord], event_id: &str) -> String {
    records
        .iter()
        .find(|r| carried_ids(r).iter().any(|id| id == event_id))
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
    // The reversal's mark on its payment's record carries the payment's events: not again.
    let marked = |r: &&&EventRecord| r.change.new_image.contains_key("reversedBy");
    let carrying: Vec<&EventRecord> = records
        .iter()
        .filter(|r| !carried_ids(r).is_empty())
        .collect();
    let seen: Vec<(String, Vec<String>)> = carrying
        .iter()
        .map(|r| (r.event_name.clone(), carried_ids(r)))
        .collect();
    assert_eq!(
        carrying.iter().filter(marked).count(),
        1,
        "one reversal: {seen:?}"
    );
    assert_eq!(
        report.published, 9,
        "two facts moved the bucket: two events on their record; {seen:?}"
    );
    assert_eq!(
        report.skipped as usize,
        records.len() - 9,
        "loans, records without events and the reversal's mark are not relayed"
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

/// The relay lists every fact's record of a batch in the record log (events or none) before it
/// publishes anything: a failed log write checkpoints at the batch's first record with nothing
/// published, and the batch delivered again lists them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_batch_is_relayed_should_list_every_facts_record_in_the_record_log_first() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let (records, outbox) = sample_stream(&servicing).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;

    let plan = FaultPlan::default();
    plan.at_request(1, Fault::ServerError);
    let failing = OutboxRelay::new(
        aws_sdk_eventbridge::Client::new(&config),
        servicing.faulty_store(CONSUMER, &plan),
        &routed.bus,
    );
    let report = failing.relay(&records).await;
    assert_eq!(
        (report.checkpoint.as_ref(), report.published),
        (records[0].change.sequence_number.as_ref(), 0)
    );

    let report = relay_with(&servicing, &config, &routed.bus)
        .relay(&records)
        .await;
    assert_eq!(report.checkpoint, None);
    let envelopes = routed.drain().await;
    assert_eq!(
        envelopes.len(),
        outbox.len(),
        "the failed batch published nothing"
    );
    let now = servicing_ops::epoch_seconds();
    let listed: BTreeSet<String> = servicing_ops::record_log::claimed_in(
        &servicing.client,
        &servicing.table,
        "account-state",
        (now - 3_600, now + 1),
    )
    .await
    .expect("the record log")
    .iter()
    .filter_map(|item| match item.get("pk") {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)) => Some(pk.clone()),
        _ => None,
    })
    .collect();
    let written: BTreeSet<String> = servicing
        .claims()
        .await
        .into_iter()
        .filter(|c| c.consumer == "account-state")
        .map(|c| c.pk)
        .collect();
    assert_eq!(listed, written, "every record, events or none");
    assert!(
        written.len() > outbox.len() - 2,
        "records without events too: {written:?}"
    );
}

/// What the fake EventBridge does with its next `PutEvents` call (then: accept everything).
#[derive(Debug, Clone, Copy)]
enum Injected {
    /// Refuses the entry at this index (ThrottlingException), accepts the others.
    FailEntry(usize),
    /// Answers HTTP 500.
    ServerError,
}

/// One `PutEvents` entry as the fake saw it.
#[derive(Debug, Clone)]
struct SentEntry {
    /// Its detail's `eventId`.
    event_id: String,
    trace_header: Option<String>,
    detail: Value,
    /// Its `Time`, in epoch seconds (absent: EventBridge stamps it).
    time: Option<f64>,
}

/// An in-process EventBridge (wiremock): answers `PutEvents` from `plan`, notes every entry it
/// was sent (with its `TraceHeader`) and which it accepted. The relay's chunking, checkpoints
/// and failure handling need no engine; the happy path through MiniStack's EventBridge is the
/// first test above.
#[derive(Debug, Clone, Default)]
struct FakeEventBridge {
    plan: Arc<Mutex<VecDeque<Injected>>>,
    requests: Arc<Mutex<Vec<Vec<SentEntry>>>>,
    accepted: Arc<Mutex<Vec<String>>>,
}

impl wiremock::Respond for FakeEventBridge {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("PutEvents JSON");
        let entries: Vec<SentEntry> = body["Entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                let detail: Value =
                    serde_json::from_str(e["Detail"].as_str().unwrap_or("{}")).unwrap_or_default();
                SentEntry {
                    event_id: detail["eventId"].as_str().unwrap_or_default().to_owned(),
                    trace_header: e["TraceHeader"].as_str().map(str::to_owned),
                    detail,
                    time: e["Time"].as_f64(),
                }
            })
            .collect();
        self.requests
            .lock()
            .expect("requests")
            .push(entries.clone());
        let json = |status: u16, body: Value| {
            wiremock::ResponseTemplate::new(status)
                .set_body_raw(body.to_string(), "application/x-amz-json-1.1")
        };
        let failing = match self.plan.lock().expect("plan").pop_front() {
            Some(Injected::ServerError) => {
                return json(
                    500,
                    json!({"__type": "InternalException", "message": "injected"}),
                );
            }
            Some(Injected::FailEntry(i)) => Some(i),
            None => None,
        };
        let answers: Vec<Value> = entries
            .iter()
            .enumerate()
            .map(|(i, SentEntry { event_id, .. })| {
                if Some(i) == failing {
                    json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "injected"})
                } else {
                    self.accepted
                        .lock()
                        .expect("accepted")
                        .push(event_id.clone());
                    json!({"EventId": format!("eb-{event_id}")})
                }
            })
            .collect();
        json(
            200,
            json!({"FailedEntryCount": usize::from(failing.is_some()), "Entries": answers}),
        )
    }
}

impl FakeEventBridge {
    /// Serves it; returns the server (keep it) and an SDK config whose EventBridge calls reach it.
    async fn start(&self) -> (wiremock::MockServer, aws_config::SdkConfig) {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(self.clone())
            .mount(&server)
            .await;
        let config = aws_setup::loader()
            .endpoint_url(server.uri())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .load()
            .await;
        (server, config)
    }

    fn request_sizes(&self) -> Vec<usize> {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .map(Vec::len)
            .collect()
    }

    /// Every entry sent, in order, whatever request carried it.
    fn entries(&self) -> Vec<SentEntry> {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// A relay over `config`'s EventBridge whose store is never reached (nothing to quarantine).
fn relay_without_engine(config: &aws_config::SdkConfig) -> OutboxRelay {
    let nowhere = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(config)
            .endpoint_url("http://127.0.0.1:9")
            .build(),
    );
    let store = servicing_store::ServicingStore::new(
        nowhere,
        servicing_store::StoreConfig::new("unused", CONSUMER),
    );
    OutboxRelay::new(aws_sdk_eventbridge::Client::new(config), store, "bus")
}

/// `n` outbox inserts of `bytes`-sized details, sequence numbers 1..=n.
fn outbox_records(n: usize, bytes: usize) -> Vec<EventRecord> {
    (1..=n)
        .map(|i| {
            let event_id = format!("evt_{i:03}");
            let detail = json!({"eventId": event_id, "pad": "x".repeat(bytes)}).to_string();
            outbox_record(
                &i.to_string(),
                &event_id,
                ("servicing.account-state", "FeeAssessed"),
                None,
                detail,
            )
        })
        .collect()
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

#[tokio::test]
async fn when_records_are_many_or_large_should_send_at_most_10_entries_and_256_kb_per_request() {
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    let report = relay_without_engine(&config)
        .relay(&outbox_records(25, 100))
        .await;
    assert_eq!((report.published, report.checkpoint.clone()), (25, None));
    assert_eq!(fake.request_sizes(), [10, 10, 5]);

    // 100 KB details: two fit one request, a third would pass EventBridge's 256 KB.
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    let report = relay_without_engine(&config)
        .relay(&outbox_records(5, 100 * 1024))
        .await;
    assert_eq!((report.published, report.checkpoint.clone()), (5, None));
    assert_eq!(fake.request_sizes(), [2, 2, 1]);
}

/// The bus's `time` is when the fact happened — what archive replays and rules select on —
/// not when the relay published it (MiniStack stamps its own time whatever is sent, so this
/// reads the requests): every event of the sample stream, account-state's records alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_events_are_relayed_should_carry_their_facts_occurrence_as_the_bus_time() {
    let servicing = Servicing::new(Engine::MiniStack).await;
    let (records, outbox) = sample_stream(&servicing).await;
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    let report = relay_with(&servicing, &config, "bus").relay(&records).await;
    assert_eq!(report.checkpoint, None);
    let sent = fake.entries();
    assert_eq!(sent.len(), outbox.len());
    for SentEntry { detail, time, .. } in sent {
        let occurred = chrono::DateTime::parse_from_rfc3339(
            detail["occurredAt"].as_str().expect("occurredAt"),
        )
        .expect("an RFC 3339 occurredAt");
        assert_eq!(
            time,
            Some(occurred.timestamp() as f64),
            "the Time of {detail}"
        );
    }
}

/// A fact's record whose write moved the bucket: its event and a `DelinquencyChanged`.
fn two_event_record(seq: &str, fact: &str) -> EventRecord {
    let mut record = outbox_record(
        seq,
        fact,
        ("servicing.account-state", "FeeAssessed"),
        None,
        json!({"eventId": fact}).to_string(),
    );
    let events = json!([
        {"source": "servicing.account-state", "detailType": "FeeAssessed",
            "detail": {"eventId": fact, "eventType": "FeeAssessed", "accountId": "acc_relay"}},
        {"source": "servicing.account-state", "detailType": "DelinquencyChanged",
            "detail": {"eventId": format!("{fact}-dq"), "eventType": "DelinquencyChanged",
                "accountId": "acc_relay", "toBucket": "DPD_30_59"}},
    ]);
    record.change.new_image.insert(
        "outbox".into(),
        serde_dynamo::AttributeValue::S(events.to_string()),
    );
    record
}

#[tokio::test]
async fn when_a_record_carries_two_events_should_keep_them_in_one_request_and_checkpoint_at_it() {
    // Five records of 2 events fill one request (10 entries); the sixth record's event goes in
    // the next: a record's events never straddle two requests.
    let mut records: Vec<EventRecord> = (1..=4)
        .map(|i| two_event_record(&i.to_string(), &format!("evt_{i:03}")))
        .collect();
    records.push(two_event_record("5", "evt_005"));
    records.push(outbox_records(6, 10).remove(5));
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    let report = relay_without_engine(&config).relay(&records).await;
    assert_eq!((report.published, report.checkpoint.clone()), (6, None));
    assert_eq!(fake.request_sizes(), [10, 1]);

    // The second event of the third record is refused: the checkpoint is that record, the
    // ones before it are published whole.
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    fake.plan
        .lock()
        .expect("plan")
        .push_back(Injected::FailEntry(5));
    let report = relay_without_engine(&config).relay(&records).await;
    assert_eq!(report.checkpoint.as_deref(), Some("3"));
    assert_eq!((report.published, report.failed), (2, 4));
}

#[tokio::test]
async fn when_put_events_fails_partly_or_totally_should_checkpoint_at_the_first_failed_record_and_lose_nothing()
 {
    let fake = FakeEventBridge::default();
    let (_server, config) = fake.start().await;
    let relay = relay_without_engine(&config);
    let records = outbox_records(11, 100);
    let outbox: Vec<String> = (1..=11).map(|i| format!("evt_{i:03}")).collect();

    // Partial failure: the 4th entry of the first request is refused.
    fake.plan
        .lock()
        .expect("plan")
        .push_back(Injected::FailEntry(3));
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
    assert_eq!(report.failed, 8, "the checkpoint and everything after it");

    // Lambda retries from the checkpoint; this time EventBridge answers 500 to every attempt.
    let from = records
        .iter()
        .position(|r| r.change.sequence_number.as_deref() == Some(&checkpoint))
        .expect("position");
    for _ in 0..3 {
        fake.plan
            .lock()
            .expect("plan")
            .push_back(Injected::ServerError);
    }
    let report = relay.relay(&records[from..]).await;
    assert_eq!(
        report.checkpoint.as_deref(),
        Some(checkpoint.as_str()),
        "total failure: checkpoint stays"
    );
    assert_eq!(report.published, 0);
    assert_eq!(
        fake.plan.lock().expect("plan").len(),
        0,
        "the SDK retried before giving up"
    );

    // And again, now healthy: everything from the checkpoint on is published.
    let report = relay.relay(&records[from..]).await;
    assert_eq!(report.checkpoint, None);
    assert_eq!(report.published, 8);

    let accepted = fake.accepted.lock().expect("accepted").clone();
    assert_eq!(
        accepted.iter().cloned().collect::<BTreeSet<_>>(),
        outbox.iter().cloned().collect(),
        "nothing lost"
    );
    assert!(
        accepted.len() > outbox.len(),
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
    broken.change.new_image.insert(
        "outbox".into(),
        serde_dynamo::AttributeValue::S("[{\"detail\": 1}]".into()),
    );
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
    let reasons: Vec<&str> = quarantined.iter().map(|q| q.reason.as_str()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("undecodable outbox events")),
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

/// Issue #31: anything that can write an item with an `outbox` attribute could make the bus
/// carry any event (a `DelinquencyChanged` is a customer notice) or the servicing queue any
/// payment. The relay publishes from a record only what that record may carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_record_carries_an_event_it_may_not_publish_should_quarantine_it_not_publish_it() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let routed = RoutedBus::new(&config, json!({"source": [{"prefix": "servicing."}]})).await;
    let fact = ("servicing.account-state", "FeeAssessed");
    let api = (payments_api::EVENT_SOURCE, payments_api::DETAIL_TYPE);
    let at = |mut record: EventRecord, pk: &str| {
        record
            .change
            .new_image
            .insert("pk".into(), serde_dynamo::AttributeValue::S(pk.into()));
        record
    };
    let detail = |id: &str| json!({"eventId": id}).to_string();
    let records = vec![
        outbox_record("1", "evt_ok", fact, None, detail("evt_ok")),
        // A fact record posing as an API payment (the relay would re-queue it to be applied).
        at(
            outbox_record("2", "op_forged", api, None, detail("op_forged")),
            "CLAIM#account-state#relay#op_forged",
        ),
        // A fact record of one account noticing another.
        outbox_record(
            "3",
            "evt_other",
            ("servicing.account-state", "DelinquencyChanged"),
            None,
            json!({"eventId": "evt_other", "accountId": "acc_victim"}).to_string(),
        ),
        // An idempotency record carrying a customer notice.
        at(
            outbox_record(
                "4",
                "evt_notice",
                ("servicing.account-state", "DelinquencyChanged"),
                None,
                detail("evt_notice"),
            ),
            "IDEMPOTENCY#scope#evt_notice",
        ),
        // An item of no publishing kind.
        at(
            outbox_record("5", "evt_q", fact, None, detail("evt_q")),
            "QUARANTINE#account-state#2026-12-03",
        ),
        // An idempotency record publishing another operation's payment.
        at(
            outbox_record("6", "op_a", api, None, detail("op_a")),
            "IDEMPOTENCY#scope#op_b",
        ),
        // A fact record with a detail type outside the domain's.
        outbox_record(
            "7",
            "evt_odd",
            ("servicing.account-state", "AccountClosed"),
            None,
            detail("evt_odd"),
        ),
        outbox_record("8", "evt_ok2", fact, None, detail("evt_ok2")),
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
        (2, 6, None)
    );
    let quarantine = servicing.quarantine().await;
    assert_eq!(quarantine.len(), 6);
    for q in &quarantine {
        assert!(
            q.reason.contains("not publishable from this record"),
            "{}",
            q.reason
        );
    }
    assert_eq!(
        event_ids(&routed.drain().await),
        ["evt_ok", "evt_ok2"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_api_payments_are_relayed_should_reach_the_fifo_servicing_queue_per_account_and_never_the_bus()
 {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (servicing_url, _) = integration_tests::lambda::queue(&sqs, "servicing", true).await;
    let sent = SentBodies::default();
    let relay_sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&config)
            .interceptor(sent.clone())
            .build(),
    );
    let payment = |seq: usize, event_id: &str, account: &str| -> EventRecord {
        let detail = json!({"sourceSystem": "api:scope", "sourceEventId": event_id, "eventType": "PAYMENT_SETTLED",
            "accountId": account, "eventTime": "2026-09-10T10:00:00Z", "amountMinor": 100, "currency": "EUR",
            "eventId": event_id});
        let kind = ("servicing.payments-api", "PaymentSettled");
        let mut record = outbox_record(
            &seq.to_string(),
            event_id,
            kind,
            Some(account),
            detail.to_string(),
        );
        record.change.new_image.insert(
            "traceHeader".into(),
            serde_dynamo::AttributeValue::S(trace(seq)),
        );
        record
    };
    // Twelve API payments (more than one SendMessageBatch holds) around a fact's domain event,
    // and the reconciler's later confirmation of op_01 (a MODIFY of its record): not a payment.
    let mut records: Vec<EventRecord> = (1..=12)
        .map(|i| payment(i, &format!("op_{i:02}"), &format!("acc_api_{}", i % 3)))
        .collect();
    let mut domain = outbox_record(
        "50",
        "evt_domain",
        ("servicing.account-state", "FeeAssessed"),
        Some("acc_api_0"),
        json!({"eventId": "evt_domain"}).to_string(),
    );
    domain.change.new_image.insert(
        "traceHeader".into(),
        serde_dynamo::AttributeValue::S(trace(50)),
    );
    records.insert(6, domain);
    let mut confirmation = payment(60, "op_01", "acc_api_1");
    confirmation.event_name = "MODIFY".into();
    records.push(confirmation);
    let fake = FakeEventBridge::default();
    let (_server, fake_config) = fake.start().await;
    let relay =
        relay_with(&servicing, &fake_config, "bus").with_servicing_queue(relay_sqs, &servicing_url);
    let report = relay.relay(&records).await;
    assert_eq!(
        (report.published, report.skipped, report.checkpoint.clone()),
        (13, 1, None),
        "{report:?}"
    );
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for _ in 0..10 {
        let got = sqs
            .receive_message()
            .queue_url(&servicing_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        for m in got.messages() {
            let attr = |name: aws_sdk_sqs::types::MessageSystemAttributeName| {
                m.attributes()
                    .and_then(|a| a.get(&name))
                    .cloned()
                    .unwrap_or_default()
            };
            let body: Value = serde_json::from_str(m.body().unwrap_or_default()).expect("json");
            seen.push((
                body["sourceEventId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId),
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageDeduplicationId),
            ));
            sqs.delete_message()
                .queue_url(&servicing_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
        if seen.len() >= 12 {
            break;
        }
    }
    seen.sort();
    // Each account in its own group (before: one static group for every API payment), the
    // deduplication id a FIFO queue requires (before: none — AWS refuses such a send), and the
    // trace of the invocation that accepted the payment (before: none).
    let expected: Vec<(String, String, String)> = (1..=12)
        .map(|i| {
            let id = format!("op_{i:02}");
            (id.clone(), format!("acc_api_{}", i % 3), id)
        })
        .collect();
    assert_eq!(seen, expected);
    let batches: Vec<Vec<Value>> = sent
        .0
        .lock()
        .expect("bodies")
        .iter()
        .map(|b| b["Entries"].as_array().cloned().unwrap_or_default())
        .filter(|entries| !entries.is_empty())
        .collect();
    assert!(
        batches.iter().all(|entries| entries.len() <= 10),
        "SendMessageBatch takes 10 entries at most: {:?}",
        batches.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let sent_traces: Vec<Value> = batches
        .iter()
        .flatten()
        .map(|e| e["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"].clone())
        .collect();
    assert_eq!(
        sent_traces,
        (1..=12).map(|i| json!(trace(i))).collect::<Vec<_>>(),
        "SendMessageBatch carries each API payment's trace header, in stream order"
    );
    // The bus carries domain events only, in their one envelope (before: each API payment too,
    // in the inbound wire form, under servicing.payments-api).
    let published: Vec<(String, Option<String>)> = fake
        .entries()
        .into_iter()
        .map(|e| (e.event_id, e.trace_header))
        .collect();
    assert_eq!(published, [("evt_domain".to_owned(), Some(trace(50)))]);
}

fn trace(seq: usize) -> String {
    format!("Root=1-5759e988-bd862e3fe1be46a994272{seq:0>3}")
}

/// An API payment the relay cannot send whole is quarantined, never half-sent nor put on the
/// bus: an idempotency record carrying two payments, and a relay with no servicing queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_an_api_payment_cannot_be_sent_whole_should_quarantine_it() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (servicing_url, _) = integration_tests::lambda::queue(&sqs, "servicing", true).await;
    let mut twice = api_payment("1", "op_twice", "acc_api_1", "ref");
    if let Some(serde_dynamo::AttributeValue::S(outbox)) = twice.change.new_image.get_mut("outbox")
    {
        let mut events: Vec<Value> = serde_json::from_str(outbox).expect("outbox");
        let mut second = events[0].clone();
        second["detail"]["amountMinor"] = json!(999_999);
        events.push(second);
        *outbox = Value::from(events).to_string();
    }
    let fake = FakeEventBridge::default();
    let (_server, fake_config) = fake.start().await;
    let with_queue = relay_with(&servicing, &fake_config, "bus")
        .with_servicing_queue(sqs.clone(), &servicing_url);
    let report = with_queue.relay(&[twice]).await;
    let without_queue = relay_with(&servicing, &fake_config, "bus");
    let alone = without_queue
        .relay(&[api_payment("2", "op_alone", "acc_api_1", "ref")])
        .await;
    assert_eq!(
        (
            report.quarantined,
            alone.quarantined,
            report.published + alone.published
        ),
        (1, 1, 0)
    );
    let mut reasons: Vec<String> = servicing
        .quarantine()
        .await
        .into_iter()
        .map(|q| q.reason)
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("no servicing queue"), "{reasons:?}");
    assert!(
        reasons[1].contains("one API payment, this one more"),
        "{reasons:?}"
    );
    let got = sqs
        .receive_message()
        .queue_url(&servicing_url)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("receive");
    assert!(got.messages().is_empty(), "nothing half-sent");
    assert!(fake.entries().is_empty(), "nothing on the bus");
}

/// A record's events go in one `PutEvents` request and checkpoint together: a record carrying
/// more than one request takes (10) could never be sent, and would hold its shard until Lambda
/// dropped the batch. It is quarantined; the records around it are published.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_record_carries_more_events_than_one_request_takes_should_quarantine_it() {
    let servicing = Servicing::new(Engine::MiniStack).await;
    let fact = ("servicing.account-state", "FeeAssessed");
    let detail = |id: &str| json!({"eventId": id}).to_string();
    let mut crowded = outbox_record("2", "evt_crowded_00", fact, None, detail("evt_crowded_00"));
    if let Some(serde_dynamo::AttributeValue::S(outbox)) =
        crowded.change.new_image.get_mut("outbox")
    {
        let mut events: Vec<Value> = serde_json::from_str(outbox).expect("outbox");
        for i in 1..11 {
            let mut event = events[0].clone();
            event["detail"]["eventId"] = json!(format!("evt_crowded_{i:02}"));
            events.push(event);
        }
        *outbox = Value::from(events).to_string();
    }
    let records = vec![
        outbox_record("1", "evt_before", fact, None, detail("evt_before")),
        crowded,
        outbox_record("3", "evt_after", fact, None, detail("evt_after")),
    ];
    let fake = FakeEventBridge::default();
    let (_server, fake_config) = fake.start().await;
    let report = relay_with(&servicing, &fake_config, "bus")
        .relay(&records)
        .await;
    assert_eq!(
        (
            report.published,
            report.quarantined,
            report.checkpoint.clone()
        ),
        (2, 1, None),
        "{report:?}"
    );
    let reasons: Vec<String> = servicing
        .quarantine()
        .await
        .into_iter()
        .map(|q| q.reason)
        .collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("11 events are more than one PutEvents request takes (10)"),
        "{reasons:?}"
    );
    let published: Vec<String> = fake.entries().into_iter().map(|e| e.event_id).collect();
    assert_eq!(published, ["evt_before", "evt_after"]);
}

/// An API payment's outbox insert (`servicing.payments-api` / `PaymentSettled`) carrying
/// `reference`.
fn api_payment(seq: &str, event_id: &str, account: &str, reference: &str) -> EventRecord {
    let detail = json!({"sourceSystem": "api:scope", "sourceEventId": event_id, "eventType": "PAYMENT_SETTLED",
        "accountId": account, "eventTime": "2026-09-10T10:00:00Z", "amountMinor": 100, "currency": "EUR",
        "eventId": event_id, "reference": reference});
    let kind = ("servicing.payments-api", "PaymentSettled");
    outbox_record(seq, event_id, kind, Some(account), detail.to_string())
}

/// An in-process servicing queue and table (wiremock, one server): `SendMessageBatch` refuses,
/// as SQS does, an entry whose body holds U+FFFF (`InvalidMessageContents`, the sender's
/// fault) and, as a server-side failure, the entry of `op_transient` (`InternalError`);
/// `TransactWriteItems` (the relay's quarantine) is noted and accepted.
#[derive(Debug, Clone, Default)]
struct FakeQueueAndTable {
    /// The message ids (`eventId`s) the queue accepted.
    queued: Arc<Mutex<Vec<String>>>,
    /// The items put (quarantine records), as DynamoDB JSON.
    items: Arc<Mutex<Vec<Value>>>,
}

impl wiremock::Respond for FakeQueueAndTable {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let target = request
            .headers
            .get("x-amz-target")
            .and_then(|t| t.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = serde_json::from_slice(&request.body).expect("JSON request");
        let json = |body: Value| {
            wiremock::ResponseTemplate::new(200)
                .set_body_raw(body.to_string(), "application/x-amz-json-1.0")
        };
        match target.as_str() {
            "AmazonSQS.SendMessageBatch" => {
                let (mut successful, mut failed) = (Vec::new(), Vec::new());
                for entry in body["Entries"].as_array().expect("entries") {
                    let id = entry["Id"].clone();
                    let message = entry["MessageBody"].as_str().unwrap_or_default();
                    let event: Value = serde_json::from_str(message).unwrap_or_default();
                    let event_id = event["eventId"].as_str().unwrap_or_default();
                    if message.contains('\u{ffff}') {
                        failed.push(json!({"Id": id, "SenderFault": true, "Code": "InvalidMessageContents",
                            "Message": "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"}));
                    } else if event_id == "op_transient" {
                        failed.push(
                            json!({"Id": id, "SenderFault": false, "Code": "InternalError",
                            "Message": "injected"}),
                        );
                    } else {
                        self.queued
                            .lock()
                            .expect("queued")
                            .push(event_id.to_owned());
                        successful.push(json!({"Id": id, "MessageId": format!("m-{event_id}"),
                            "MD5OfMessageBody": "00000000000000000000000000000000"}));
                    }
                }
                json(json!({"Successful": successful, "Failed": failed}))
            }
            "DynamoDB_20120810.TransactWriteItems" => {
                // A quarantine: its message's mark, then its record.
                let puts = body["TransactItems"].as_array().expect("items");
                self.items
                    .lock()
                    .expect("items")
                    .push(puts.last().expect("a record")["Put"]["Item"].clone());
                json(json!({}))
            }
            other => wiremock::ResponseTemplate::new(400).set_body_raw(
                json!({"__type": "UnknownOperationException", "message": other}).to_string(),
                "application/x-amz-json-1.0",
            ),
        }
    }
}

impl FakeQueueAndTable {
    /// A relay publishing to `bus`'s fake EventBridge, its servicing queue and its quarantine
    /// table this fake; keep the returned servers.
    async fn relay(
        &self,
        bus: &FakeEventBridge,
    ) -> (wiremock::MockServer, wiremock::MockServer, OutboxRelay) {
        let (bus_server, bus_config) = bus.start().await;
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(self.clone())
            .mount(&server)
            .await;
        let config = aws_setup::loader()
            .endpoint_url(server.uri())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .load()
            .await;
        let store = servicing_store::ServicingStore::new(
            aws_sdk_dynamodb::Client::new(&config),
            servicing_store::StoreConfig::new("servicing", CONSUMER),
        );
        let queue_url = format!("{}/000000000000/servicing.fifo", server.uri());
        let relay = OutboxRelay::new(aws_sdk_eventbridge::Client::new(&bus_config), store, "bus")
            .with_servicing_queue(aws_sdk_sqs::Client::new(&config), queue_url);
        (bus_server, server, relay)
    }

    fn quarantined(&self) -> Vec<(String, String, String)> {
        let text =
            |item: &Value, name: &str| item[name]["S"].as_str().unwrap_or_default().to_owned();
        self.items
            .lock()
            .expect("items")
            .iter()
            .map(|item| {
                (
                    text(item, "code"),
                    text(item, "reason"),
                    text(item, "rawBody"),
                )
            })
            .collect()
    }
}

#[tokio::test]
async fn when_the_servicing_queue_refuses_an_api_payment_as_the_senders_fault_should_quarantine_it_and_move_on()
 {
    let fake = FakeQueueAndTable::default();
    let (_bus, _queue, relay) = fake.relay(&FakeEventBridge::default()).await;
    // Accepted before the API refused such references: SQS will never take it.
    let records = vec![
        api_payment("1", "op_a", "acc_1", "inv-1"),
        api_payment("2", "op_refused", "acc_2", "inv-\u{ffff}"),
        api_payment("3", "op_c", "acc_3", "inv-3"),
    ];
    let report = relay.relay(&records).await;
    assert_eq!(
        (
            report.published,
            report.quarantined,
            report.checkpoint.clone()
        ),
        (2, 1, None),
        "a permanent refusal does not hold the shard (before: checkpoint at 2, retried until dropped) {report:?}"
    );
    assert_eq!(*fake.queued.lock().expect("queued"), ["op_a", "op_c"]);
    let quarantined = fake.quarantined();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let (code, reason, raw) = &quarantined[0];
    assert_eq!(code, "sqs_refused");
    assert!(
        reason.contains("InvalidMessageContents") && reason.contains("Invalid characters found"),
        "{reason}"
    );
    assert!(raw.contains("op_refused"), "the raw outbox item: {raw}");

    // A failure on SQS's side is transient: it checkpoints as before, nothing is quarantined
    // for it; a refusal before it is quarantined, the records after it come back.
    let fake = FakeQueueAndTable::default();
    let (_bus, _queue, relay) = fake.relay(&FakeEventBridge::default()).await;
    let records = vec![
        api_payment("1", "op_d", "acc_1", "inv-1"),
        api_payment("2", "op_refused", "acc_2", "inv-\u{ffff}"),
        api_payment("3", "op_transient", "acc_3", "inv-3"),
        api_payment("4", "op_e", "acc_4", "inv-4"),
    ];
    let report = relay.relay(&records).await;
    assert_eq!(
        (
            report.published,
            report.quarantined,
            report.checkpoint.as_deref(),
            report.failed
        ),
        (1, 1, Some("3"), 2),
        "{report:?}"
    );
    assert_eq!(fake.quarantined().len(), 1, "only the refused one");
}
