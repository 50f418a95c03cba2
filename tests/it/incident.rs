//! Incident reconstruction (`servicing_ops::incident`, `ledgerctl incident`) on both engines: a
//! provider redelivers its batch inside the window, re-sends two payments under new ids and
//! reuses one identity with another amount. The report, built from the decision records the
//! consumer printed and the table, equals the run's ground truth account by account, validates
//! against `docs/incident-report.schema.json`, and its HTML holds the charts and the manifest.

use std::collections::BTreeMap;

use account_state::{AccountStateHandler, DecisionRecord, decision_line};
use chrono::{DateTime, Duration, Utc};
use integration_tests::Engine;
use integration_tests::schema::{load, violations};
use integration_tests::servicing::{Servicing, sqs_message};
use serde_json::{Value, json};
use servicing_ops::incident::{self, Query};

on_both_engines!(
    when_a_provider_redelivers_and_resends_under_new_ids_should_reconstruct_each_account_as_it_happened,
    when_the_accounts_have_collections_actions_should_read_them_by_key_not_by_scan,
);

const ACCOUNTS: usize = 6;
const EVENT_TIME: &str = "2026-11-02T10:00:00Z";

fn account(i: usize) -> String {
    format!("acc-inc-{}", i % ACCOUNTS)
}

fn pay(source: &str, id: &str, account: &str, amount: i64) -> String {
    json!({"sourceSystem": source, "sourceEventId": id, "eventType": "PAYMENT_SETTLED",
        "accountId": account, "eventTime": EVENT_TIME, "amountMinor": amount, "currency": "EUR"})
    .to_string()
}

/// One batch per call; every record stamped `at` (+1 ms each), as `print_decision` would.
async fn deliver(
    handler: &AccountStateHandler,
    prefix: &str,
    bodies: &[String],
    at: DateTime<Utc>,
    lines: &mut Vec<String>,
) {
    for (b, chunk) in bodies.chunks(10).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| sqs_message(&format!("{prefix}-{}", b * 10 + i), body, 1))
            .collect();
        let report = handler.process(&messages).await;
        let retried = report.response().batch_item_failures;
        assert!(retried.is_empty(), "{prefix}: {retried:?}");
        for record in report.decisions {
            let n = lines.len() as i64;
            let stamped = DecisionRecord {
                decided_at: Some(account_state::decision_time(at + Duration::milliseconds(n))),
                ..record
            };
            lines.push(decision_line(&stamped, "INFO"));
        }
    }
}

/// What the run did to one account inside the window, from the plan (not from the records).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Truth {
    deliveries: u64,
    applied: u64,
    duplicates: u64,
    collisions: u64,
    applied_amount_minor: i64,
    duplicate_amount_minor: i64,
}

async fn when_a_provider_redelivers_and_resends_under_new_ids_should_reconstruct_each_account_as_it_happened(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    // Times of the real clock: the quarantine items the table keeps are partitioned by the day
    // they were written, as the records' `decidedAt` are in production.
    let window_from = DateTime::<Utc>::from(std::time::SystemTime::now()) - Duration::minutes(45);
    let window_to = window_from + Duration::hours(1);
    let amount_a = |j: usize| 1_000 + 37 * j as i64;
    let amount_b = |k: usize| 50_000 + 11 * k as i64;
    let mut lines = Vec::new();
    let mut truth: BTreeMap<String, Truth> = BTreeMap::new();

    // Before the window: the openings and prov-a's batch of 20.
    let openings: Vec<String> = (0..ACCOUNTS)
        .map(|i| {
            json!({"sourceSystem": "origination", "sourceEventId": format!("open-{i}"),
                "eventType": "LOAN_OPENED", "accountId": account(i), "eventTime": "2026-11-01T09:00:00Z",
                "principalMinor": 5_000_000, "currency": "EUR"})
            .to_string()
        })
        .collect();
    let prov_a: Vec<String> = (0..20)
        .map(|j| pay("prov-a", &format!("pa-{j}"), &account(j), amount_a(j)))
        .collect();
    deliver(
        &handler,
        "open",
        &openings,
        window_from - Duration::hours(2),
        &mut lines,
    )
    .await;
    deliver(
        &handler,
        "a1",
        &prov_a,
        window_from - Duration::minutes(30),
        &mut lines,
    )
    .await;

    // In the window: prov-a redelivers the batch (duplicates), re-sends pa-3 and pa-7 under
    // new ids (applied again: suspected duplicates), prov-b sends 5, then reuses pb-0.
    deliver(
        &handler,
        "a2",
        &prov_a,
        window_from + Duration::minutes(10),
        &mut lines,
    )
    .await;
    for j in 0..prov_a.len() {
        let t = truth.entry(account(j)).or_default();
        t.deliveries += 1;
        t.duplicates += 1;
        t.duplicate_amount_minor += amount_a(j);
    }
    let resent: Vec<String> = [3, 7]
        .iter()
        .map(|&j| pay("prov-a", &format!("pa-new-{j}"), &account(j), amount_a(j)))
        .collect();
    deliver(
        &handler,
        "a3",
        &resent,
        window_from + Duration::minutes(12),
        &mut lines,
    )
    .await;
    for j in [3, 7] {
        let t = truth.entry(account(j)).or_default();
        t.deliveries += 1;
        t.applied += 1;
        t.applied_amount_minor += amount_a(j);
    }
    let prov_b: Vec<String> = (0..5)
        .map(|k| pay("prov-b", &format!("pb-{k}"), &account(k), amount_b(k)))
        .collect();
    deliver(
        &handler,
        "b1",
        &prov_b,
        window_from + Duration::minutes(20),
        &mut lines,
    )
    .await;
    for k in 0..5 {
        let t = truth.entry(account(k)).or_default();
        t.deliveries += 1;
        t.applied += 1;
        t.applied_amount_minor += amount_b(k);
    }
    let reused = pay("prov-b", "pb-0", &account(0), 99_999);
    deliver(
        &handler,
        "b2",
        std::slice::from_ref(&reused),
        window_from + Duration::minutes(25),
        &mut lines,
    )
    .await;
    let t = truth.entry(account(0)).or_default();
    t.deliveries += 1;
    t.collisions += 1;
    // An invalid payment (negative amount): quarantined undecodable, no account in its record;
    // its quarantine item names the account.
    let invalid = pay("prov-b", "pb-bad", &account(1), -5);
    deliver(
        &handler,
        "bad",
        std::slice::from_ref(&invalid),
        window_from + Duration::minutes(27),
        &mut lines,
    )
    .await;
    truth.entry(account(1)).or_default().deliveries += 1;
    // After the window: one more payment that no report of the window may count.
    let late = pay("prov-a", "pa-late", &account(1), 777);
    deliver(
        &handler,
        "late",
        std::slice::from_ref(&late),
        window_to + Duration::minutes(1),
        &mut lines,
    )
    .await;

    // The records as a log export holds them: other lines between, one line exported twice.
    let dir = std::env::temp_dir().join(format!("incident-{}-{:?}", std::process::id(), engine));
    std::fs::create_dir_all(&dir).expect("as the run wrote it");
    let mut export = vec![r#"{"_aws":{"Timestamp":1},"Applied":1}"#.to_owned()];
    export.extend(lines.iter().cloned());
    export.push(lines[lines.len() / 2].clone());
    std::fs::write(dir.join("decisions.jsonl"), export.join("\n") + "\n")
        .expect("as the run wrote it");
    let collected =
        incident::records::read(std::slice::from_ref(&dir)).expect("as the run wrote it");
    assert_eq!((collected.skipped_lines, collected.repeated_lines), (1, 1));

    let query = Query {
        from: window_from,
        to: window_to,
        consumer: "account-state".into(),
        source_system: None,
        account_id: None,
        lookback: Duration::hours(24),
    };
    let now = window_to + Duration::hours(3);
    let table = Some((&servicing.client, servicing.table.as_str()));
    let report = incident::reconstruct(&query, &collected, table, now)
        .await
        .expect("as the run wrote it");
    let json = report.to_json();
    let problems = violations(&load("incident-report.schema.json"), &json);
    assert!(problems.is_empty(), "{problems:?}");
    // Issue 30: the records begin within the 24-hour lookback, so a zero would not be clean:
    // the report says from when it compared, never a bare count.
    assert!(
        json["totals"]["suspectedDuplicatesCheckedFrom"].is_string(),
        "{engine:?}: {}",
        json["totals"]
    );
    assert!(
        report
            .summary()
            .iter()
            .any(|l| l.contains("do not reach back over the 1440-minute lookback")),
        "{:?}",
        report.summary()
    );

    // Account by account, the ground truth.
    let found: BTreeMap<String, Truth> = json["accounts"]
        .as_array()
        .expect("as the run wrote it")
        .iter()
        .map(|a| {
            let n = |k: &str| a[k].as_u64().expect("as the run wrote it");
            let m = |k: &str| a[k].as_i64().expect("as the run wrote it");
            (
                a["accountId"]
                    .as_str()
                    .expect("as the run wrote it")
                    .to_owned(),
                Truth {
                    deliveries: n("deliveries"),
                    applied: n("applied"),
                    duplicates: n("duplicates"),
                    collisions: n("collisions"),
                    applied_amount_minor: m("appliedAmountMinor"),
                    duplicate_amount_minor: m("duplicateAmountMinor"),
                },
            )
        })
        .collect();
    assert_eq!(found, truth);

    // The suspected duplicates: the two re-sent payments, paired with their originals.
    let mut pairs: Vec<(String, String)> = json["suspectedDuplicates"]
        .as_array()
        .expect("as the run wrote it")
        .iter()
        .map(|s| {
            (
                s["first"].as_str().expect("as the run wrote it").into(),
                s["second"].as_str().expect("as the run wrote it").into(),
            )
        })
        .collect();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![
            ("prov-a/pa-3".to_owned(), "prov-a/pa-new-3".to_owned()),
            ("prov-a/pa-7".to_owned(), "prov-a/pa-new-7".to_owned())
        ]
    );
    let totals = &json["totals"];
    assert_eq!(
        totals["suspectedDuplicateAmountMinor"],
        amount_a(3) + amount_a(7)
    );
    assert_eq!(totals["deliveries"], 20 + 2 + 5 + 1 + 1);
    assert_eq!(
        json["unattributed"],
        json!([]),
        "attributed from its quarantine item"
    );
    let acc1 = json["accounts"]
        .as_array()
        .expect("as the run wrote it")
        .iter()
        .find(|a| a["accountId"] == account(1))
        .expect("as the run wrote it");
    assert_eq!(acc1["quarantined"], 1);
    assert!(
        acc1["facts"]
            .as_array()
            .expect("as the run wrote it")
            .iter()
            .any(|f| f["accountFromQuarantine"] == true && f["verdict"] == "quarantined")
    );
    assert_eq!(totals["bySource"]["prov-b"]["collisions"], 1);
    assert_eq!(totals["bySource"]["prov-b"]["duplicates"], 0);

    // From the table: each applied payment's split sums to its amount; the collision shows both
    // payloads, the first as stored and the second raw.
    let acc0 = json["accounts"]
        .as_array()
        .expect("as the run wrote it")
        .iter()
        .find(|a| a["accountId"] == account(0))
        .expect("as the run wrote it");
    for m in acc0["moneyApplied"]
        .as_array()
        .expect("as the run wrote it")
    {
        let split = &m["split"]["allocation"];
        let sum: i64 = ["fees", "interest", "principal", "credit"]
            .iter()
            .map(|k| split[k].as_i64().expect("as the run wrote it"))
            .sum();
        assert_eq!(
            sum,
            m["amountMinor"].as_i64().expect("as the run wrote it"),
            "{m}"
        );
    }
    let collision = &acc0["collisionsFound"][0];
    assert_eq!(collision["sourceEventId"], "pb-0");
    assert_ne!(
        collision["stored"]["fingerprint"],
        collision["received"]["fingerprint"]
    );
    let raw: Value = serde_json::from_str(
        collision["received"]["rawBody"]
            .as_str()
            .expect("as the run wrote it"),
    )
    .expect("as the run wrote it");
    assert_eq!(raw["amountMinor"], 99_999);
    let first_amount = collision["stored"]["events"]
        .as_array()
        .expect("as the run wrote it")
        .iter()
        .find_map(|e| e["amountMinor"].as_i64());
    assert_eq!(first_amount, Some(amount_b(0)), "{collision}");

    // Filtered to prov-b: only its deliveries, only its accounts.
    let only_b = Query {
        source_system: Some("prov-b".into()),
        ..query.clone()
    };
    let b = incident::reconstruct(&only_b, &collected, None, now)
        .await
        .expect("as the run wrote it")
        .to_json();
    assert!(violations(&load("incident-report.schema.json"), &b).is_empty());
    assert_eq!(b["totals"]["deliveries"], 6);
    assert_eq!(b["totals"]["accountsTouched"], 5);
    assert_eq!(b["suspectedDuplicates"], json!([]));

    // The manifest names the input by hash; the HTML carries the per-minute chart (a row for
    // the source), every account in the money table, and the manifest.
    let input = &json["manifest"]["inputs"][0];
    assert_eq!(input["lines"], export.len());
    let html = ledgerctl::incident_html::render(&report).expect("as the run wrote it");
    assert_eq!(html.matches("<svg").count(), 1, "one inline chart");
    assert!(html.contains("\nprov-a\n</text>") && html.contains("duplicates absorbed"));
    for account in json["accounts"].as_array().expect("as the run wrote it") {
        let id = account["accountId"].as_str().expect("as the run wrote it");
        assert!(html.contains(&format!("<td>{id}</td>")), "{id} labelled");
    }
    assert!(
        html.contains("id=\"manifest\"")
            && html.contains(input["sha256"].as_str().expect("as the run wrote it"))
    );
    assert!(html.contains("prov-a/pa-new-3"));
    std::fs::remove_dir_all(&dir).expect("as the run wrote it");
}

/// The actions of the accounts an incident touched are read by key — each bucket change a fact
/// published names its action — and, for those still unsettled, from the open index: every
/// action of the account found, settled or not, and no read of the whole table.
async fn when_the_accounts_have_collections_actions_should_read_them_by_key_not_by_scan(
    engine: Engine,
) {
    use wiremock::{Mock, MockServer, ResponseTemplate, matchers::method};
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    // The delinquent sample on two accounts: each passes into DPD_30_59 and gets a notice.
    let sample = integration_tests::servicing::fixture("delinquent.jsonl");
    let bodies: Vec<String> = [sample.clone(), sample.replace("7001", "7002")]
        .iter()
        .flat_map(|s| {
            s.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let now = DateTime::<Utc>::from(std::time::SystemTime::now());
    let mut lines = Vec::new();
    deliver(
        &handler,
        "d",
        &bodies,
        now - Duration::minutes(10),
        &mut lines,
    )
    .await;
    // In business order (a cure seen first would supersede the notice before any call).
    let mut events = servicing.outbox_records().await;
    events.retain(|e| e.detail_type == "DelinquencyChanged");
    events.sort_by_key(|e| {
        e.detail["occurredAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let changes: Vec<(bool, String)> = events
        .iter()
        .map(|e| {
            let first = e.detail["accountId"] == "acc_7001";
            let envelope =
                json!({"source": e.source, "detail-type": e.detail_type, "detail": e.detail});
            (first, envelope.to_string())
        })
        .collect();
    // acc_7001's notice is sent (settled); acc_7002's receiver fails (left unsettled).
    let mut servers = Vec::new();
    for status in [200, 500] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server)
            .await;
        servers.push(server);
    }
    for (i, (first, change)) in changes.iter().enumerate() {
        let server = &servers[usize::from(!first)];
        let notifier = collections::Notifier::new(
            &format!("{}/notify", server.uri()),
            collections::CALL_TIMEOUT,
        )
        .expect("notifier");
        let collections =
            collections::CollectionsHandler::new(servicing.store(collections::CONSUMER), notifier);
        // Redriven by an operator: collections' decision record names who sent it.
        let mut message = sqs_message(&format!("c-{i}"), change, 1);
        let mut sender = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
        sender.string_value = Some("arn:aws:iam::111122223333:user/ops-carol".into());
        sender.data_type = Some("String".into());
        message.message_attributes.insert("sentBy".into(), sender);
        let report = collections.process_batch(&[message]).await;
        assert!(
            !report.decisions.is_empty()
                && report.decisions.iter().all(|d| {
                    d.sent_by.as_deref() == Some("arn:aws:iam::111122223333:user/ops-carol")
                }),
            "{:?}",
            report.decisions
        );
    }
    let mut stored_actions: Vec<(String, String)> = servicing
        .items_of_type("ACTION")
        .await
        .iter()
        .map(|i| {
            let text = |k: &str| i[k].as_s().expect("text").clone();
            (text("actionId"), text("status"))
        })
        .collect();
    stored_actions.sort();
    let statuses: std::collections::BTreeSet<&str> =
        stored_actions.iter().map(|(_, s)| s.as_str()).collect();
    assert!(
        stored_actions.len() == 2 && statuses.contains("SENT") && statuses.len() == 2,
        "{engine:?}: a settled and an unsettled action: {stored_actions:?}"
    );

    let claims = servicing.claims().await;
    let wanted = incident::Wanted {
        consumer: "account-state".into(),
        identities: claims
            .iter()
            .map(|c| (c.source_system.clone(), c.source_event_id.clone()))
            .collect(),
        accounts: claims.iter().map(|c| c.account_id.clone()).collect(),
        ..incident::Wanted::default()
    };
    let stored = incident::stored::read(&servicing.client, &servicing.table, &wanted)
        .await
        .expect("read");
    let mut found: Vec<(String, String)> = stored
        .actions
        .iter()
        .map(|a| (a.action_id.clone(), a.status.clone()))
        .collect();
    found.sort();
    assert_eq!(found, stored_actions, "{engine:?}");
    assert!(
        stored.queries.iter().all(|q| !q.starts_with("Scan")),
        "{engine:?}: {:?}",
        stored.queries
    );

    // An incident about the payment provider's facts: the notices came from the daily closes
    // (another source) in the window, and the report still lists each account's, sent or not.
    let collected = incident::Collected {
        records: incident::records::from_lines(lines.iter().map(String::as_str)),
        ..incident::Collected::default()
    };
    let query = Query {
        from: now - Duration::minutes(30),
        to: now + Duration::minutes(30),
        consumer: "account-state".into(),
        source_system: Some("payment-provider".into()),
        account_id: None,
        lookback: Duration::hours(1),
    };
    let table = Some((&servicing.client, servicing.table.as_str()));
    let report = incident::reconstruct(&query, &collected, table, now + Duration::minutes(31))
        .await
        .expect("report");
    let mut listed: Vec<(String, String)> = report
        .accounts
        .iter()
        .flat_map(|a| &a.collections_actions)
        .map(|a| (a.action_id.clone(), a.status.clone()))
        .collect();
    listed.sort();
    assert_eq!(listed, stored_actions, "{engine:?}");
}
