//! Integrity evidence (issue #22): every delivery the account-state consumer handles leaves one
//! decision record — and every parked fact it judges again one `released` record — valid
//! against `docs/decision-record.schema.json`, and the per-source metrics computed from those
//! records count each source's verdicts and money. The relay (no engine: an in-process
//! EventBridge and queue), the payments API and collections (DynamoDB Local) write valid
//! records too.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use account_state::{
    AccountStateHandler, BatchReport, DecisionRecord, MessageResult, Verdict,
    decision_emf_documents,
};
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::sqs::SqsEvent;
use integration_tests::Engine;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::schema::violations;
use integration_tests::servicing::{Servicing, sqs_message};
use serde_json::{Value, json};

on_both_engines!(
    when_a_provider_resends_its_payments_should_record_every_decision_and_count_money_by_source,
    when_facts_are_parked_released_or_undecodable_should_record_each_decision,
    when_requests_fail_should_record_retries_refusals_and_panics,
);

const ACCOUNTS: usize = 10;
/// SQS hands Lambda at most 10 messages.
const BATCH: usize = 10;

fn schema() -> Value {
    integration_tests::schema::load("decision-record.schema.json")
}

fn open(account: &str) -> String {
    json!({"sourceSystem": "origination", "sourceEventId": format!("open-{account}"),
        "eventType": "LOAN_OPENED", "accountId": account, "eventTime": "2026-11-01T09:00:00Z",
        "principalMinor": 500_000, "currency": "EUR"})
    .to_string()
}

fn pay(source: &str, id: &str, account: &str, amount: i64) -> String {
    json!({"sourceSystem": source, "sourceEventId": id, "eventType": "PAYMENT_SETTLED",
        "accountId": account, "eventTime": "2026-11-02T10:00:00Z",
        "amountMinor": amount, "currency": "EUR"})
    .to_string()
}

/// Delivers `bodies` in batches of [`BATCH`], message ids `<prefix>-<n>`; one report per batch.
async fn deliver(
    handler: &AccountStateHandler,
    prefix: &str,
    bodies: &[String],
) -> Vec<BatchReport> {
    let mut reports = Vec::new();
    for (b, chunk) in bodies.chunks(BATCH).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| sqs_message(&format!("{prefix}-{}", b * BATCH + i), body, 1))
            .collect();
        reports.push(handler.process(&messages).await);
    }
    reports
}

/// Every record is valid against the schema, printed line (with its level) included, and the
/// fields the check above leaves aside have their form.
fn assert_valid(schema: &Value, records: &[DecisionRecord]) {
    for record in records {
        let json = record.to_json();
        let problems = violations(schema, &json);
        assert!(problems.is_empty(), "{problems:?} in {json}");
        // As `handle_invocation` prints it: stamped with the invocation, at a level.
        let stamped = DecisionRecord {
            request_id: Some("0f0e-request".into()),
            trace_id: Some("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".into()),
            ..record.clone()
        };
        let line: Value =
            serde_json::from_str(&account_state::decision_line(&stamped, "WARN")).expect("line");
        let problems = violations(schema, &line);
        assert!(problems.is_empty(), "{problems:?} in {line}");
        if let Some(fingerprint) = &record.fingerprint {
            let hex = fingerprint.strip_prefix("sha256:").unwrap_or_default();
            assert!(hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()));
        }
        if let Some(key) = &record.content_key {
            // Keyed: `<the secret's id>:<HMAC-SHA256>`.
            let keyer = integration_tests::servicing::content_keyer();
            let mac = key
                .strip_prefix(&format!("{}:", keyer.id()))
                .unwrap_or_default();
            assert!(mac.len() == 64 && mac.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        }
        if let Some(time) = &record.event_time {
            assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{time}");
        }
    }
}

#[test]
fn the_schema_check_catches_what_the_schema_forbids() {
    let schema = schema();
    let valid = json!({"recordVersion": 1, "kind": "decision", "consumer": "account-state",
        "messageId": "m1", "verdict": "quarantined", "decidedBy": "decode", "code": "not_json"});
    assert_eq!(violations(&schema, &valid), Vec::<String>::new());
    let mut broken = valid.clone();
    broken["verdict"] = json!("lost");
    broken["extra"] = json!(1);
    broken["decidedBy"] = json!("claim");
    broken["outcome"] = json!("applied");
    broken["recordVersion"] = json!(2);
    let problems = violations(&schema, &broken);
    for expected in [
        "/verdict",
        "'extra' was unexpected",
        "\"sourceSystem\" is a required property",
        "is not allowed for",
        "/recordVersion",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }

    // The other consumers' rules: a relay record names what it published, with its own
    // verdicts; the API's refusals name their problem type; account-state has no event ids.
    let published = json!({"recordVersion": 1, "kind": "decision", "consumer": "outbox-relay",
        "messageId": "rec-1", "eventIds": ["evt_1"], "verdict": "published",
        "decidedBy": "stream-record"});
    assert_eq!(violations(&schema, &published), Vec::<String>::new());
    let mut broken = published.clone();
    broken["eventIds"] = json!([""]);
    broken["verdict"] = json!("applied");
    let problems = violations(&schema, &broken);
    for expected in ["/eventIds/0", "/verdict"] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
    let mut unnamed = published.clone();
    unnamed.as_object_mut().expect("object").remove("eventIds");
    assert!(
        violations(&schema, &unnamed)
            .iter()
            .any(|p| p.contains("\"eventIds\" is a required property"))
    );
    let refused = json!({"recordVersion": 1, "kind": "decision", "consumer": "payments-api",
        "messageId": "req-1", "verdict": "refused", "decidedBy": "validation"});
    assert!(
        violations(&schema, &refused)
            .iter()
            .any(|p| p.contains("\"code\" is a required property"))
    );
    let mut with_ids = valid.clone();
    with_ids["eventIds"] = json!(["evt_1"]);
    assert!(
        violations(&schema, &with_ids)
            .iter()
            .any(|p| p.contains("is not allowed for"))
    );
}

// --- the sums, as CloudWatch would add up the documents ----------------------------------

/// Sums `metric` over the documents whose dimensions match `on` (each document counted once).
fn summed(docs: &[Value], on: &[(&str, &str)], metric: &str) -> i64 {
    docs.iter()
        .filter(|d| on.iter().all(|(k, v)| d[*k] == *v))
        .filter_map(|d| d[metric].as_i64())
        .sum()
}

fn verdict_of(result: &MessageResult) -> Verdict {
    match result {
        MessageResult::Applied => Verdict::Applied,
        MessageResult::Stale => Verdict::Stale,
        MessageResult::Duplicate => Verdict::Duplicate,
        MessageResult::Collision => Verdict::Collision,
        MessageResult::Quarantined { .. } => Verdict::Quarantined,
        MessageResult::Parked => Verdict::Parked,
        MessageResult::Retry { .. } => Verdict::Retried,
    }
}

/// One record per message with the message's verdict, released records beside them, and the
/// per-source documents adding up to the batch document's counts (no double counting).
fn assert_consistent(report: &BatchReport) {
    let messages: Vec<&DecisionRecord> = report
        .decisions
        .iter()
        .filter(|r| r.verdict != Verdict::Released)
        .collect();
    assert_eq!(messages.len(), report.results.len(), "{report:#?}");
    for (id, result) in &report.results {
        let record = messages
            .iter()
            .find(|r| &r.message_id == id)
            .unwrap_or_else(|| panic!("no record of {id}"));
        assert_eq!(record.verdict, verdict_of(result), "{record:?}");
    }
    let released = report.decisions.len() - messages.len();
    assert_eq!(released as u64, report.counts.released);
    let docs = decision_emf_documents("account-state", &report.decisions, 0, "INFO");
    for (metric, count) in report.counts.metrics() {
        if matches!(metric, "Transactions" | "GroupMismatch") {
            continue;
        }
        let per_source = summed(&docs, &[("Consumer", "account-state")], metric);
        assert_eq!(per_source, count as i64, "{metric}: {docs:#?}");
    }
}

async fn when_a_provider_resends_its_payments_should_record_every_decision_and_count_money_by_source(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let schema = schema();
    let account = |i: usize| format!("acc-ev-{}", i % ACCOUNTS);
    let amount_a = |j: usize| 1_000 + 37 * j as i64;
    let amount_b = |k: usize| 20_000 + 11 * k as i64;

    let openings: Vec<String> = (0..ACCOUNTS).map(|i| open(&account(i))).collect();
    let prov_a: Vec<String> = (0..50)
        .map(|j| pay("prov-a", &format!("pa-{j}"), &account(j), amount_a(j)))
        .collect();
    let prov_b: Vec<String> = (0..10)
        .map(|k| pay("prov-b", &format!("pb-{k}"), &account(k), amount_b(k)))
        .collect();

    let opened = deliver(&handler, "open", &openings).await;
    let first = deliver(&handler, "a1", &prov_a).await;
    let again = deliver(&handler, "a2", &prov_a).await;
    let b = deliver(&handler, "b", &prov_b).await;

    let all: Vec<&BatchReport> = opened
        .iter()
        .chain(&first)
        .chain(&again)
        .chain(&b)
        .collect();
    for report in &all {
        assert_consistent(report);
    }
    let records: Vec<DecisionRecord> = all.iter().flat_map(|r| r.decisions.clone()).collect();
    assert_eq!(records.len(), ACCOUNTS + 110);
    assert_valid(&schema, &records);
    let ids: BTreeSet<&str> = records.iter().map(|r| r.message_id.as_str()).collect();
    assert_eq!(ids.len(), records.len(), "one record per message");

    // How each verdict was reached: claims first, then the loan item's recent facts.
    let by = |reports: &[BatchReport]| -> BTreeMap<(Verdict, &'static str), usize> {
        let mut by = BTreeMap::new();
        for r in reports.iter().flat_map(|r| &r.decisions) {
            *by.entry((r.verdict, r.decided_by.as_str())).or_default() += 1;
        }
        by
    };
    assert_eq!(
        by(&opened),
        BTreeMap::from([((Verdict::Applied, "claim"), ACCOUNTS)])
    );
    assert_eq!(
        by(&first),
        BTreeMap::from([((Verdict::Applied, "claim"), 50)])
    );
    assert_eq!(
        by(&again),
        BTreeMap::from([((Verdict::Duplicate, "recent-facts"), 50)])
    );
    assert_eq!(by(&b), BTreeMap::from([((Verdict::Applied, "claim"), 10)]));
    for record in records
        .iter()
        .filter(|r| r.event_type.as_deref() == Some("PAYMENT_SETTLED"))
    {
        let id = record.source_event_id.as_deref().unwrap_or_default();
        let (source, n) = id.split_once('-').expect("p?-n");
        let n: usize = n.parse().expect("n");
        let amount = match source {
            "pa" => amount_a(n),
            _ => amount_b(n),
        };
        assert_eq!(record.amount_minor, Some(amount), "{record:?}");
        assert_eq!(record.currency.as_deref(), Some("EUR"));
        assert_eq!(record.account_id.as_deref(), Some(account(n).as_str()));
        assert_eq!(record.receive_count, Some(1));
    }
    // The same fact twice: one fingerprint, one content key.
    let of = |reports: &[BatchReport], id: &str| {
        reports
            .iter()
            .flat_map(|r| &r.decisions)
            .find(|r| r.source_event_id.as_deref() == Some(id))
            .cloned()
            .expect("record")
    };
    let (one, two) = (of(&first, "pa-7"), of(&again, "pa-7"));
    assert_eq!(
        (&one.fingerprint, &one.content_key),
        (&two.fingerprint, &two.content_key)
    );

    // The per-source documents of each batch, added up as CloudWatch adds them.
    let docs: Vec<Value> = all
        .iter()
        .flat_map(|r| decision_emf_documents("account-state", &r.decisions, 0, "INFO"))
        .collect();
    let by_source = |source: &str, metric: &str| summed(&docs, &[("SourceSystem", source)], metric);
    let money = |source: &str, metric: &str| {
        summed(
            &docs,
            &[("SourceSystem", source), ("Currency", "EUR")],
            metric,
        )
    };
    let sum_a: i64 = (0..50).map(amount_a).sum();
    let sum_b: i64 = (0..10).map(amount_b).sum();
    let counts = |source: &str| {
        [
            "Applied",
            "Duplicate",
            "Collision",
            "Stale",
            "Quarantined",
            "Parked",
            "Released",
            "Retried",
        ]
        .map(|m| by_source(source, m))
    };
    assert_eq!(counts("prov-a"), [50, 50, 0, 0, 0, 0, 0, 0]);
    assert_eq!(counts("prov-b"), [10, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(counts("origination"), [10, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(money("prov-a", "AppliedAmountMinor"), sum_a);
    assert_eq!(money("prov-a", "DuplicateAmountMinor"), sum_a);
    assert_eq!(money("prov-b", "AppliedAmountMinor"), sum_b);
    assert_eq!(money("prov-b", "DuplicateAmountMinor"), 0);
    // An opening carries a currency but no amount: no money document of its own.
    assert_eq!(
        summed(
            &docs,
            &[("SourceSystem", "origination")],
            "AppliedAmountMinor"
        ),
        0
    );
    // The same over all 120 records at once.
    let at_once = decision_emf_documents("account-state", &records, 0, "INFO");
    for source in ["prov-a", "prov-b"] {
        for metric in [
            "Applied",
            "Duplicate",
            "AppliedAmountMinor",
            "DuplicateAmountMinor",
        ] {
            assert_eq!(
                summed(&at_once, &[("SourceSystem", source)], metric),
                by_source(source, metric),
                "{source} {metric}"
            );
        }
    }
    // Each verdict document is one (SourceSystem, EventType) group: prov-a's payments, once per
    // batch; never the `[Consumer]` set the batch document has.
    for doc in &docs {
        let sets = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
            .as_array()
            .expect("dimension sets");
        assert!(!sets.contains(&json!(["Consumer"])), "{doc}");
    }
}

async fn when_facts_are_parked_released_or_undecodable_should_record_each_decision(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let schema = schema();
    let early = pay("psp", "early-1", "acc-ev-p", 2_500);
    let future = json!({"sourceSystem": "api:partner-9", "sourceEventId": "k-future",
        "eventType": "PAYMENT_SETTLED", "accountId": "acc-ev-p",
        "eventTime": "2099-01-01T00:00:00Z", "amountMinor": 100, "currency": "EUR",
        "reference": "INV-1"})
    .to_string();

    // A payment before its account's opening (parked), an undecodable body, a future event.
    let one = handler
        .process(&[
            sqs_message("p-1", &early, 1),
            sqs_message("p-2", "not json {", 3),
            sqs_message("p-3", &future, 1),
        ])
        .await;
    assert_consistent(&one);
    let find = |report: &BatchReport, id: &str, verdict: Verdict| {
        report
            .decisions
            .iter()
            .find(|r| r.message_id == id && r.verdict == verdict)
            .cloned()
            .unwrap_or_else(|| panic!("no {verdict:?} record of {id}: {report:#?}"))
    };
    let parked = find(&one, "p-1", Verdict::Parked);
    assert_eq!(parked.decided_by.as_str(), "business-rule");
    let undecodable = find(&one, "p-2", Verdict::Quarantined);
    assert_eq!(undecodable.decided_by.as_str(), "decode");
    assert_eq!(undecodable.code.as_deref(), Some("not_json"));
    assert_eq!(undecodable.receive_count, Some(3));
    let keys: BTreeSet<String> = undecodable
        .to_json()
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    let expected = [
        "code",
        "consumer",
        "decidedBy",
        "kind",
        "messageId",
        "reason",
        "receiveCount",
        "recordVersion",
        "verdict",
    ];
    assert_eq!(keys, expected.map(str::to_owned).into(), "nothing invented");
    let future = find(&one, "p-3", Verdict::Quarantined);
    assert_eq!(
        (future.decided_by.as_str(), future.code.as_deref()),
        ("business-rule", Some("event_time_in_future"))
    );
    assert_eq!(
        future.content_key.as_deref(),
        Some(
            integration_tests::servicing::content_keyer()
                .key(&account_state::ContentParts {
                    account_id: "acc-ev-p".into(),
                    amount_minor: Some(100),
                    currency: Some("EUR".into()),
                    event_time: "2099-01-01T00:00:00Z".into(),
                    reference: Some("INV-1".into()),
                })
                .as_str()
        )
    );
    let docs = decision_emf_documents("account-state", &one.decisions, 0, "INFO");
    assert_eq!(summed(&docs, &[("SourceSystem", "api")], "Quarantined"), 1);
    assert_eq!(
        summed(&docs, &[("SourceSystem", "unknown")], "Quarantined"),
        1
    );

    // A redelivery of the parked payment: recognised on the loan item's parked facts.
    let again = handler.process(&[sqs_message("p-1", &early, 2)]).await;
    assert_consistent(&again);
    let duplicate = find(&again, "p-1", Verdict::Duplicate);
    assert_eq!(duplicate.decided_by.as_str(), "parked-list");
    assert_eq!(duplicate.fingerprint, parked.fingerprint);

    // The opening: applied, and the parked payment released right after it.
    let two = handler
        .process(&[sqs_message("p-4", &open("acc-ev-p"), 1)])
        .await;
    assert_consistent(&two);
    assert_eq!(
        find(&two, "p-4", Verdict::Applied).decided_by.as_str(),
        "claim"
    );
    let released = find(&two, "p-1", Verdict::Released);
    assert_eq!(released.outcome, Some(Verdict::Applied));
    assert_eq!(released.decided_by.as_str(), "claim");
    assert_eq!(released.receive_count, None, "received in an earlier batch");
    assert_eq!(released.source_event_id.as_deref(), Some("early-1"));
    assert_eq!(released.fingerprint, parked.fingerprint);
    let docs = decision_emf_documents("account-state", &two.decisions, 0, "INFO");
    assert_eq!(summed(&docs, &[("SourceSystem", "psp")], "Released"), 1);
    assert_eq!(summed(&docs, &[("SourceSystem", "psp")], "Applied"), 1);
    assert_eq!(
        summed(&docs, &[("SourceSystem", "psp")], "AppliedAmountMinor"),
        2_500
    );

    // Parked and released in one transaction: the delivery says parked, its release applied.
    let three = handler
        .process(&[
            sqs_message("q-1", &pay("psp", "early-2", "acc-ev-q", 700), 1),
            sqs_message("q-2", &open("acc-ev-q"), 1),
        ])
        .await;
    assert_consistent(&three);
    assert_eq!(
        find(&three, "q-1", Verdict::Parked).decided_by.as_str(),
        "business-rule"
    );
    let released = find(&three, "q-1", Verdict::Released);
    assert_eq!(
        (released.outcome, released.receive_count),
        (Some(Verdict::Applied), Some(1))
    );

    // A redelivery (recognised from the loan item) and the same identity with another payload
    // (refused by its claim).
    let collision = pay("psp", "early-1", "acc-ev-p", 9_999);
    let four = handler
        .process(&[
            sqs_message("p-1", &early, 2),
            sqs_message("p-5", &collision, 1),
        ])
        .await;
    assert_consistent(&four);
    let duplicate = find(&four, "p-1", Verdict::Duplicate);
    assert_eq!(
        (duplicate.decided_by.as_str(), duplicate.receive_count),
        ("recent-facts", Some(2))
    );
    let collided = find(&four, "p-5", Verdict::Collision);
    assert_eq!(collided.decided_by.as_str(), "refused-claim");
    assert_ne!(collided.fingerprint, duplicate.fingerprint);
    let docs = decision_emf_documents("account-state", &four.decisions, 0, "INFO");
    assert_eq!(
        summed(&docs, &[("SourceSystem", "psp")], "DuplicateAmountMinor"),
        2_500
    );

    // Through the Lambda entry point: the records and documents are printed, nothing fails.
    let event: SqsEvent = serde_json::from_value(json!({
        "Records": [serde_json::to_value(sqs_message("p-6", &early, 1)).expect("message")],
    }))
    .expect("SQS event");
    let response = handler
        .handle_invocation(event, Some("req-ev"), account_state::Deadline::NONE)
        .await;
    assert!(response.batch_item_failures.is_empty());

    let records: Vec<DecisionRecord> = [one, again, two, three, four]
        .into_iter()
        .flat_map(|r| r.decisions)
        .collect();
    assert_eq!(records.len(), 3 + 1 + 2 + 3 + 2);
    assert_valid(&schema, &records);
}

async fn when_requests_fail_should_record_retries_refusals_and_panics(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let mut config = servicing.config();
    config.account_concurrency = 1;
    let handler = servicing.faulty_handler(config, &faults);
    let schema = schema();
    let mut records = Vec::new();

    // Throttled commit: the account's events are retried, each saying why.
    faults.push(Fault::Throttle);
    let throttled = handler
        .process(&[
            sqs_message("f-1", &open("acc-ev-f1"), 1),
            sqs_message("f-2", &pay("psp", "f1-pay", "acc-ev-f1", 300), 1),
        ])
        .await;
    assert_consistent(&throttled);
    for record in &throttled.decisions {
        assert_eq!(
            (record.verdict, record.decided_by.as_str()),
            (Verdict::Retried, "transient"),
            "{record:?}"
        );
        assert!(record.reason.is_some());
    }
    records.extend(throttled.decisions);

    // A request DynamoDB refuses as such: the fact is quarantined, never retried.
    faults.push(Fault::Invalid);
    let refused = handler
        .process(&[sqs_message("f-3", &open("acc-ev-f2"), 1)])
        .await;
    assert_consistent(&refused);
    let record = &refused.decisions[0];
    assert_eq!(
        (
            record.verdict,
            record.decided_by.as_str(),
            record.code.as_deref()
        ),
        (
            Verdict::Quarantined,
            "store-rejected",
            Some("store_rejected")
        )
    );
    records.extend(refused.decisions);

    // A bug: the account's messages come back.
    faults.push(Fault::Panic);
    let panicked = handler
        .process(&[sqs_message("f-4", &open("acc-ev-f3"), 1)])
        .await;
    assert_consistent(&panicked);
    let record = &panicked.decisions[0];
    assert_eq!(
        (record.verdict, record.decided_by.as_str()),
        (Verdict::Retried, "panic")
    );
    records.extend(panicked.decisions);
    assert_eq!(faults.pending(), 0);
    assert_valid(&schema, &records);
}

// --- the outbox relay, without an engine -------------------------------------------------

/// An in-process EventBridge and servicing queue (one wiremock server): `PutEvents` refuses the
/// entry at the position `plan` says (once per request), else accepts; `SendMessageBatch`
/// accepts every entry.
#[derive(Debug, Clone, Default)]
struct FakeTargets {
    plan: Arc<Mutex<VecDeque<usize>>>,
    queued: Arc<Mutex<Vec<String>>>,
}

impl wiremock::Respond for FakeTargets {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let target = request
            .headers
            .get("x-amz-target")
            .and_then(|t| t.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = serde_json::from_slice(&request.body).expect("JSON request");
        let json = |body: Value, content_type: &str| {
            wiremock::ResponseTemplate::new(200).set_body_raw(body.to_string(), content_type)
        };
        let entries = body["Entries"].as_array().cloned().unwrap_or_default();
        match target.as_str() {
            "AWSEvents.PutEvents" => {
                let failing = self.plan.lock().expect("plan").pop_front();
                let answers: Vec<Value> = (0..entries.len())
                    .map(|i| match Some(i) == failing {
                        true => {
                            json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "injected"})
                        }
                        false => json!({"EventId": format!("eb-{i}")}),
                    })
                    .collect();
                let failed = usize::from(failing.is_some_and(|f| f < entries.len()));
                json(
                    json!({"FailedEntryCount": failed, "Entries": answers}),
                    "application/x-amz-json-1.1",
                )
            }
            "AmazonSQS.SendMessageBatch" => {
                let successful: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let id = e["MessageDeduplicationId"].as_str().unwrap_or_default();
                        self.queued.lock().expect("queued").push(id.to_owned());
                        json!({"Id": e["Id"], "MessageId": format!("m-{id}"),
                            "MD5OfMessageBody": "00000000000000000000000000000000"})
                    })
                    .collect();
                json(
                    json!({"Successful": successful, "Failed": []}),
                    "application/x-amz-json-1.0",
                )
            }
            other => wiremock::ResponseTemplate::new(400).set_body_raw(
                json!({"__type": "UnknownOperationException", "message": other}).to_string(),
                "application/x-amz-json-1.0",
            ),
        }
    }
}

impl FakeTargets {
    /// Serves it; a relay publishing to it and sending API payments to its queue, with a
    /// store that is never reached (nothing to quarantine). Keep the server.
    async fn relay(&self) -> (wiremock::MockServer, outbox_relay::OutboxRelay) {
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
        let nowhere = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&config)
                .endpoint_url("http://127.0.0.1:9")
                .build(),
        );
        let store = servicing_store::ServicingStore::new(
            nowhere,
            servicing_store::StoreConfig::new("unused", outbox_relay::CONSUMER),
        );
        let queue_url = format!("{}/000000000000/servicing.fifo", server.uri());
        let relay =
            outbox_relay::OutboxRelay::new(aws_sdk_eventbridge::Client::new(&config), store, "bus")
                .with_servicing_queue(aws_sdk_sqs::Client::new(&config), queue_url);
        (server, relay)
    }
}

/// A stream INSERT as the store writes it: a fact's record (claim) of `(psp, <fact>)` carrying
/// one account-state event, or (`api`) an API idempotency record carrying the payment.
fn stream_insert(seq: &str, event_id: &str, api: bool) -> EventRecord {
    let mut image = match api {
        false => json!({"pk": {"S": format!("CLAIM#account-state#psp#f-{seq}")},
            "sk": {"S": "CLAIM"}, "itemType": {"S": "CLAIM"}, "sourceSystem": {"S": "psp"},
            "sourceEventId": {"S": format!("f-{seq}")}, "accountId": {"S": "acc-ev-r"},
            "outbox": {"S": json!([{"source": "servicing.account-state",
                "detailType": "FeeAssessed", "detail": {"eventId": event_id,
                "eventType": "FeeAssessed", "accountId": "acc-ev-r"}}]).to_string()}}),
        true => json!({"pk": {"S": format!("IDEMPOTENCY#scope#{event_id}")},
            "sk": {"S": "IDEMPOTENCY"}, "itemType": {"S": "IDEMPOTENCY"},
            "outbox": {"S": json!([{"source": payments_api::EVENT_SOURCE,
                "detailType": payments_api::DETAIL_TYPE, "detail": {"eventId": event_id,
                "sourceSystem": "api:partner-1", "sourceEventId": event_id,
                "eventType": "PAYMENT_SETTLED", "accountId": "acc-ev-api",
                "eventTime": "2026-09-10T10:00:00Z", "amountMinor": 100, "currency": "EUR"}}])
                .to_string()}}),
    };
    image["claimedAt"] = json!({"N": "1796000000"});
    serde_json::from_value(json!({
        "eventID": format!("rec-{seq}"), "eventName": "INSERT", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {"SequenceNumber": seq, "SizeBytes": 1, "StreamViewType": "NEW_IMAGE",
            "ApproximateCreationDateTime": 0, "Keys": {"pk": image["pk"], "sk": image["sk"]},
            "NewImage": image}
    }))
    .expect("stream record")
}

#[tokio::test]
async fn when_the_relay_publishes_sends_and_checkpoints_should_record_each_stream_record() {
    let schema = schema();
    let fake = FakeTargets::default();
    let (_server, relay) = fake.relay().await;
    // A record that carries no events (a loan item's write): skipped, no record.
    let mut skipped = stream_insert("2", "unused", false);
    skipped.change.new_image.remove("outbox");
    let records = vec![
        stream_insert("1", "evt_1", false),
        skipped,
        stream_insert("3", "op_3", true),
        stream_insert("4", "evt_4", false),
        stream_insert("5", "evt_5", false),
    ];
    // EventBridge refuses the second entry (evt_4: the API payment has none, it goes to the
    // servicing queue alone): the checkpoint is record 4.
    fake.plan.lock().expect("plan").push_back(1);
    let report = relay.relay(&records).await;
    assert_eq!(report.checkpoint.as_deref(), Some("4"), "{report:?}");
    let seen: Vec<(&str, Verdict, &str)> = report
        .decisions
        .iter()
        .map(|d| (d.message_id.as_str(), d.verdict, d.decided_by.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("rec-1", Verdict::Published, "stream-record"),
            ("rec-3", Verdict::Sent, "stream-record"),
            ("rec-4", Verdict::Retried, "transient"),
            ("rec-5", Verdict::Retried, "transient"),
        ],
        "one record per stream record carrying events, none for the skipped one"
    );
    let of = |id: &str| {
        report
            .decisions
            .iter()
            .find(|d| d.message_id == id)
            .cloned()
            .expect("record")
    };
    let fact = of("rec-1");
    assert_eq!(
        (
            fact.source_system.as_deref(),
            fact.source_event_id.as_deref(),
            fact.account_id.as_deref(),
            fact.event_ids.clone()
        ),
        (
            Some("psp"),
            Some("f-1"),
            Some("acc-ev-r"),
            Some(vec!["evt_1".to_owned()])
        )
    );
    let payment = of("rec-3");
    assert_eq!(
        (
            payment.source_system.as_deref(),
            payment.source_event_id.as_deref(),
            payment.account_id.as_deref()
        ),
        (Some("api:partner-1"), Some("op_3"), Some("acc-ev-api")),
        "an idempotency record's fact, from its payment's detail"
    );
    assert_eq!(*fake.queued.lock().expect("queued"), ["op_3"]);
    let checkpoint = of("rec-4").reason.unwrap_or_default();
    assert!(checkpoint.contains("ThrottlingException"), "{checkpoint}");
    let after = of("rec-5").reason.unwrap_or_default();
    assert!(after.contains("after the checkpoint 4"), "{after}");
    let mut all = report.decisions.clone();

    // Lambda delivers again from the checkpoint: both are published now.
    let again = relay.relay(&records[3..]).await;
    assert_eq!(again.checkpoint, None);
    let seen: Vec<(&str, Verdict)> = again
        .decisions
        .iter()
        .map(|d| (d.message_id.as_str(), d.verdict))
        .collect();
    assert_eq!(
        seen,
        [("rec-4", Verdict::Published), ("rec-5", Verdict::Published)]
    );
    all.extend(again.decisions);
    assert_valid(&schema, &all);
}

// --- the payments API and collections, on DynamoDB Local ----------------------------------

const ALICE: &str = "arn:aws:iam::123456789012:user/alice";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_payments_are_posted_should_record_each_command() {
    let servicing = Servicing::new(Engine::DynamoDbLocal).await;
    let schema = schema();
    servicing
        .handler()
        .process(&[sqs_message("open-api", &open("acc-ev-api"), 1)])
        .await;
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    let post = |principal: Option<&str>, key: &str, account: &str, amount: i64| {
        let body = json!({"accountId": account, "amountMinor": amount, "currency": "EUR",
            "reference": "inv-ev-secret"})
        .to_string();
        integration_tests::api_gateway::event(
            "POST",
            "/v1/payments",
            "POST /v1/payments",
            principal,
            Some(key),
            Some(&body),
        )
    };
    let mut records = Vec::new();
    for (request, status, verdict, decided_by) in [
        (
            post(Some(ALICE), "order-ev-1", "acc-ev-api", 2_500),
            202,
            Verdict::Accepted,
            "idempotency-record",
        ),
        (
            post(Some(ALICE), "order-ev-1", "acc-ev-api", 2_500),
            202,
            Verdict::Replayed,
            "idempotency-record",
        ),
        (
            post(Some(ALICE), "order-ev-1", "acc-ev-api", 9_999),
            422,
            Verdict::KeyReused,
            "idempotency-record",
        ),
        (
            post(Some(ALICE), "order-ev-2", "acc-ev-none", 100),
            404,
            Verdict::Refused,
            "business-rule",
        ),
        (
            post(None, "order-ev-3", "acc-ev-api", 100),
            401,
            Verdict::Refused,
            "validation",
        ),
    ] {
        let (response, record) = api.post(&request).await;
        assert_eq!(
            (
                response.status().as_u16(),
                record.verdict,
                record.decided_by.as_str()
            ),
            (status, verdict, decided_by),
            "{record:?}"
        );
        records.push(record);
    }
    assert_valid(&schema, &records);
    let [accepted, replayed, reused, unknown, unauthenticated] = &records[..] else {
        panic!("five records");
    };
    assert_eq!(accepted.message_id, "req-1", "the API Gateway request id");
    assert!(
        accepted
            .source_system
            .as_deref()
            .is_some_and(|s| s.starts_with("api:")),
        "{accepted:?}"
    );
    // The payment's identity is its operation (the key hashed with the caller): no raw key.
    let operation = payments_api::operation_id(
        &payments_api::Principal::new(ALICE).expect("principal"),
        &payments_api::IdempotencyKey::parse(Some(b"order-ev-1")).expect("key"),
    );
    assert_eq!(
        accepted.source_event_id.as_deref(),
        Some(operation.as_str())
    );
    assert_eq!(
        (
            accepted.account_id.as_deref(),
            accepted.amount_minor,
            accepted.currency.as_deref()
        ),
        (Some("acc-ev-api"), Some(2_500), Some("EUR"))
    );
    assert_eq!(
        accepted.fingerprint, replayed.fingerprint,
        "the same request"
    );
    assert_ne!(accepted.fingerprint, reused.fingerprint, "another request");
    assert_eq!(reused.code.as_deref(), Some("idempotency-key-reused"));
    assert_eq!(unknown.code.as_deref(), Some("unknown-account"));
    assert_eq!(
        (
            unauthenticated.code.as_deref(),
            &unauthenticated.source_system
        ),
        (Some("unauthenticated"), &None),
        "refused before the caller was known"
    );
    for record in &records {
        let line = account_state::decision_line(record, "INFO");
        assert!(!line.contains("inv-ev-secret"), "never the body: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_collections_handles_changes_should_record_each_delinquency_changed() {
    let servicing = Servicing::new(Engine::DynamoDbLocal).await;
    let schema = schema();
    // No change below worsens into 30+ days past due: the receiver is never called.
    let notifier =
        collections::Notifier::new("http://127.0.0.1:9", std::time::Duration::from_secs(1))
            .expect("notifier");
    let handler =
        collections::CollectionsHandler::new(servicing.store(collections::CONSUMER), notifier);
    let change = |id: &str, from: &str, to: &str, at: &str, dpd: u32| {
        json!({"detail-type": "DelinquencyChanged", "source": "servicing.account-state",
            "detail": {"eventId": id, "accountId": "acc-ev-c", "occurredAt": at,
                "fromBucket": from, "toBucket": to, "dpd": dpd}})
        .to_string()
    };
    let improvement = change("dq-2", "DPD_60_89", "DPD_30_59", "2026-11-05T00:00:00Z", 40);
    let deliveries = [
        ("c-1", improvement.clone(), Some(Verdict::Applied), "claim"),
        (
            "c-2",
            improvement,
            Some(Verdict::Duplicate),
            "refused-claim",
        ),
        (
            "c-3",
            change(
                "dq-1",
                "DPD_90_PLUS",
                "DPD_60_89",
                "2026-11-01T00:00:00Z",
                70,
            ),
            Some(Verdict::Stale),
            "business-rule",
        ),
        (
            "c-4",
            change("dq-2", "DPD_60_89", "DPD_30_59", "2026-11-05T00:00:00Z", 41),
            Some(Verdict::Collision),
            "refused-claim",
        ),
        (
            "c-5",
            "not json {".to_owned(),
            Some(Verdict::Quarantined),
            "decode",
        ),
        (
            "c-6",
            json!({"detail-type": "PaymentApplied", "detail": {}}).to_string(),
            None,
            "",
        ),
    ];
    let mut records = Vec::new();
    for (id, body, verdict, decided_by) in deliveries {
        let report = handler.process_batch(&[sqs_message(id, &body, 2)]).await;
        assert_eq!(report.results.len(), 1);
        match verdict {
            None => assert!(report.decisions.is_empty(), "{report:?}"),
            Some(verdict) => {
                let [record] = &report.decisions[..] else {
                    panic!("one record: {report:?}");
                };
                assert_eq!(
                    (record.verdict, record.decided_by.as_str()),
                    (verdict, decided_by),
                    "{record:?}"
                );
                assert_eq!(
                    (record.message_id.as_str(), record.receive_count),
                    (id, Some(2))
                );
                records.push(record.clone());
            }
        }
    }
    assert_valid(&schema, &records);
    let applied = &records[0];
    assert_eq!(
        (
            applied.source_system.as_deref(),
            applied.source_event_id.as_deref(),
            applied.account_id.as_deref()
        ),
        (
            Some("servicing.account-state"),
            Some("dq-2"),
            Some("acc-ev-c")
        )
    );
    assert_eq!(records[1].fingerprint, applied.fingerprint);
    assert_ne!(records[3].fingerprint, applied.fingerprint);
    assert_eq!(
        (records[3].code.as_deref(), records[4].code.as_deref()),
        (Some("collision"), Some("invalid_event"))
    );
}
