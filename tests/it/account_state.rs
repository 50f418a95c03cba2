//! The account-state consumer against real DynamoDB engines. Every scenario runs on DynamoDB
//! Local (the reference) and on MiniStack: both engines must agree.

use std::collections::BTreeMap;

use account_state::{BatchCounts, MessageResult};
use futures_util::StreamExt;
use futures_util::future::join_all;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::servicing::{Servicing, assert_state_matches, fixture, sqs_message};
use integration_tests::{Engine, Rng};
use serde_json::{Value, json};
use servicing_store::RECENT_FACTS_MAX;

on_both_engines!(
    when_the_basic_sample_is_delivered_should_reach_the_expected_state,
    when_duplicates_are_injected_at_random_should_reach_the_same_state,
    when_16_instances_deliver_the_same_event_should_apply_it_once,
    when_two_events_of_one_account_race_should_apply_both_with_consecutive_versions,
    when_an_identity_is_reused_with_another_payload_should_quarantine_the_collision,
    when_bad_input_arrives_should_quarantine_each_with_a_specific_reason,
    when_an_event_is_dated_in_the_future_should_quarantine_it_unclaimed_so_a_fix_applies,
    when_the_commit_fails_before_it_is_sent_should_write_nothing_and_apply_on_redelivery,
    when_the_response_is_lost_after_the_commit_should_count_the_redelivery_as_duplicate,
    when_dynamodb_reports_a_transaction_conflict_should_retry_in_place,
    when_a_reversal_precedes_its_payment_in_a_batch_should_park_it_and_apply_it_right_after,
    when_counting_requests_should_cost_one_read_per_account_and_one_transaction_per_batch,
    when_a_batch_mixes_duplicates_collisions_and_new_facts_should_settle_each_from_one_refusal,
    when_a_batch_holds_a_payment_its_reversal_and_a_repeat_should_commit_them_in_order,
    when_processing_an_account_panics_should_fail_only_that_accounts_messages,
    when_instances_race_with_overlapping_batches_of_one_account_should_apply_each_fact_once,
    when_dynamodb_refuses_a_group_request_should_commit_its_events_one_by_one,
    when_accounts_share_a_transaction_should_each_keep_its_own_outcome,
    when_one_fact_arrives_for_two_accounts_should_not_share_a_transaction,
    when_a_message_group_is_not_its_account_should_apply_it_and_count_the_producer_error,
);

fn lines(stream: &str) -> Vec<String> {
    stream
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Rewrites the identities and account of a stream so each run gets its own facts.
fn namespaced(line: &str, run: &str) -> String {
    let mut v: Value = serde_json::from_str(line).expect("json");
    let suffix = |v: &mut Value, field: &str| {
        if let Some(s) = v[field].as_str() {
            v[field] = json!(format!("{s}-{run}"));
        }
    };
    suffix(&mut v, "sourceEventId");
    suffix(&mut v, "accountId");
    if v.get("reversalOf").is_some() {
        suffix(&mut v["reversalOf"], "sourceEventId");
    }
    v.to_string()
}

fn expected_basic(run: &str) -> Value {
    let mut expected: Value = serde_json::from_str(&fixture("basic.expected.json")).expect("json");
    let rename = |s: &str| {
        let (system, id) = s.split_once(':').expect("sys:id");
        format!("{system}:{id}-{run}")
    };
    expected["accountId"] = json!(format!("acc_4002-{run}"));
    let allocations: serde_json::Map<String, Value> = expected["allocations"]
        .as_object()
        .expect("allocations")
        .iter()
        .map(|(k, v)| (rename(k), v.clone()))
        .collect();
    expected["allocations"] = Value::Object(allocations);
    for change in expected["delinquencyChanges"]
        .as_array_mut()
        .expect("changes")
    {
        let trigger = rename(change["trigger"].as_str().expect("trigger"));
        change["trigger"] = json!(trigger);
    }
    expected
}

async fn deliver(
    handler: &account_state::AccountStateHandler,
    batch: &[(String, String)],
) -> Vec<(String, MessageResult)> {
    let messages: Vec<_> = batch
        .iter()
        .map(|(id, body)| sqs_message(id, body, 1))
        .collect();
    handler.process(&messages).await.results
}

fn tally(results: &[(String, MessageResult)]) -> BatchCounts {
    let mut counts = BatchCounts::default();
    for (_, r) in results {
        match r {
            MessageResult::Applied => counts.applied += 1,
            MessageResult::Stale => counts.stale += 1,
            MessageResult::Duplicate => counts.duplicate += 1,
            MessageResult::Collision => counts.collision += 1,
            MessageResult::Quarantined { .. } => counts.quarantined += 1,
            MessageResult::Parked => counts.parked += 1,
            MessageResult::Retry { .. } => counts.retried += 1,
        }
    }
    counts
}

async fn when_the_basic_sample_is_delivered_should_reach_the_expected_state(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let batch: Vec<(String, String)> = lines(&fixture("basic.jsonl"))
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("m{i}"), namespaced(l, "one")))
        .collect();
    let results = deliver(&handler, &batch).await;
    let counts = tally(&results);
    assert_eq!(
        (
            counts.applied,
            counts.stale,
            counts.duplicate,
            counts.quarantined
        ),
        (9, 1, 0, 0),
        "{results:?}"
    );
    let report = servicing.account_report("acc_4002-one").await;
    assert_state_matches(&report, &expected_basic("one"), &format!("{engine:?}"));
    let (_, version) = servicing.loan("acc_4002-one").await.expect("loan");
    assert_eq!(version, 9, "one version per applied event");
}

async fn when_duplicates_are_injected_at_random_should_reach_the_same_state(engine: Engine) {
    const RUNS: u64 = 100;
    let servicing = Servicing::new(engine).await;
    let originals = lines(&fixture("basic.jsonl"));
    let runs = (0..RUNS).map(|seed| {
        let servicing = &servicing;
        let originals = &originals;
        async move {
            let run = format!("s{seed}");
            let mut rng = Rng(seed * 7919 + 1);
            // Each copy lands somewhere after its original; some are re-serialised by a transport.
            let mut delivered: Vec<(usize, String)> = originals
                .iter()
                .enumerate()
                .map(|(i, l)| (i, namespaced(l, &run)))
                .collect();
            let copies = 1 + rng.below(12);
            for c in 0..copies {
                let line = rng.below(originals.len());
                let first = delivered
                    .iter()
                    .position(|(i, _)| *i == line)
                    .expect("present");
                let at = first + 1 + rng.below(delivered.len() - first);
                let mut body: Value =
                    serde_json::from_str(&namespaced(&originals[line], &run)).expect("json");
                if rng.below(2) == 0 {
                    body["eventId"] = json!(format!("transport-{c}"));
                }
                delivered.insert(
                    at,
                    (line, serde_json::to_string_pretty(&body).expect("json")),
                );
            }
            // A fresh Lambda instance per run, batches of random size (SQS allows up to 10).
            let handler = servicing.handler();
            let mut all = Vec::new();
            let mut rest: &[(usize, String)] = &delivered;
            let mut n = 0;
            while !rest.is_empty() {
                let size = (1 + rng.below(10)).min(rest.len());
                let batch: Vec<(String, String)> = rest[..size]
                    .iter()
                    .map(|(_, b)| {
                        n += 1;
                        (format!("{run}-m{n}"), b.clone())
                    })
                    .collect();
                all.extend(deliver(&handler, &batch).await);
                rest = &rest[size..];
            }
            let counts = tally(&all);
            assert_eq!(
                (
                    counts.applied,
                    counts.stale,
                    counts.duplicate,
                    counts.retried,
                    counts.quarantined
                ),
                (9, 1, copies as u64, 0, 0),
                "run {run}: {all:?}"
            );
            let report = servicing.account_report(&format!("acc_4002-{run}")).await;
            assert_state_matches(
                &report,
                &expected_basic(&run),
                &format!("{engine:?} run {run}"),
            );
        }
    });
    // A few runs at a time: realistic concurrency without flooding the engine.
    futures_util::stream::iter(runs)
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
}

fn open_account(account: &str, principal: i64) -> String {
    json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{account}"),
           "eventType": "LOAN_OPENED", "accountId": account, "eventTime": "2026-09-01T09:00:00Z",
           "principalMinor": principal, "currency": "EUR"})
    .to_string()
}

fn payment(account: &str, id: &str, amount: i64) -> String {
    json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": "PAYMENT_SETTLED",
           "accountId": account, "eventTime": "2026-09-10T10:00:00Z",
           "amountMinor": amount, "currency": "EUR"})
    .to_string()
}

async fn opened(servicing: &Servicing, account: &str, principal: i64) {
    let results = deliver(
        &servicing.handler(),
        &[("open".into(), open_account(account, principal))],
    )
    .await;
    assert_eq!(results[0].1, MessageResult::Applied);
}

async fn when_16_instances_deliver_the_same_event_should_apply_it_once(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let account = "acc_race_same";
    opened(&servicing, account, 1_000_000).await;
    for round in 1..=20 {
        let body = payment(account, &format!("pmt-{round}"), 100 * round);
        // 16 Lambda instances (own caches), the same message at the same time.
        let handlers: Vec<_> = (0..16).map(|_| servicing.handler()).collect();
        let results = join_all(handlers.iter().enumerate().map(|(i, h)| {
            let batch = vec![(format!("r{round}-i{i}"), body.clone())];
            async move { deliver(h, &batch).await }
        }))
        .await;
        let all: Vec<_> = results.into_iter().flatten().collect();
        let counts = tally(&all);
        assert_eq!(counts.applied, 1, "round {round}: {all:?}");
        assert_eq!(
            counts.applied + counts.duplicate + counts.retried,
            16,
            "round {round}: {all:?}"
        );
    }
    let (loan, version) = servicing.loan(account).await.expect("loan");
    let paid: i64 = (1..=20).map(|r| 100 * r).sum();
    assert_eq!(loan.principal_outstanding_minor, 1_000_000 - paid);
    assert_eq!(version, 21);
    assert_eq!(servicing.allocations(account).await.len(), 20);
}

async fn when_two_events_of_one_account_race_should_apply_both_with_consecutive_versions(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let account = "acc_race_two";
    opened(&servicing, account, 1_000_000).await;
    for round in 0..10 {
        let (a, b) = (servicing.handler(), servicing.handler());
        let first = vec![(
            format!("a{round}"),
            payment(account, &format!("a-{round}"), 1_000),
        )];
        let second = vec![(
            format!("b{round}"),
            payment(account, &format!("b-{round}"), 2_000),
        )];
        let (ra, rb) = tokio::join!(deliver(&a, &first), deliver(&b, &second));
        assert_eq!(
            (&ra[0].1, &rb[0].1),
            (&MessageResult::Applied, &MessageResult::Applied),
            "round {round}"
        );
    }
    let (loan, version) = servicing.loan(account).await.expect("loan");
    assert_eq!(
        version, 21,
        "open + 2 per round, no version skipped or reused"
    );
    assert_eq!(loan.principal_outstanding_minor, 1_000_000 - 10 * 3_000);
}

async fn when_an_identity_is_reused_with_another_payload_should_quarantine_the_collision(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    opened(&servicing, "acc_col_1", 100_000).await;
    opened(&servicing, "acc_col_2", 100_000).await;
    let handler = servicing.handler();
    let first = payment("acc_col_1", "pmt-dup", 5_000);
    let other_amount = payment("acc_col_1", "pmt-dup", 6_000);
    // Same identity reused on another account: claims are not keyed by account, still caught.
    let other_account = payment("acc_col_2", "pmt-dup", 5_000);
    let results = deliver(
        &handler,
        &[("c1".into(), first), ("c2".into(), other_amount)],
    )
    .await;
    assert_eq!(results[1].1, MessageResult::Collision);
    let results = deliver(&handler, &[("c3".into(), other_account)]).await;
    assert_eq!(results[0].1, MessageResult::Collision);

    assert_eq!(
        servicing
            .loan("acc_col_1")
            .await
            .expect("loan")
            .0
            .principal_outstanding_minor,
        95_000
    );
    assert_eq!(
        servicing
            .loan("acc_col_2")
            .await
            .expect("loan")
            .0
            .principal_outstanding_minor,
        100_000
    );
    let quarantined = servicing.quarantine().await;
    assert_eq!(quarantined.len(), 2);
    for item in &quarantined {
        assert_eq!(item.code, "collision");
        let stored = item
            .stored_fingerprint
            .as_deref()
            .expect("stored fingerprint");
        let received = item
            .received_fingerprint
            .as_deref()
            .expect("received fingerprint");
        assert!(stored.starts_with("sha256:") && received.starts_with("sha256:"));
        assert_ne!(stored, received);
        assert!(item.raw_body.contains("pmt-dup"));
    }
}

/// One case of `fixtures/bad-input.jsonl`: a message body, the quarantine code it must get and
/// words its reason must contain.
#[derive(Debug, serde::Deserialize)]
struct Bad {
    body: String,
    code: String,
    reason: String,
}

/// The bad-input corpus (`fixtures/bad-input.jsonl`): malformed JSON, every contract rule a
/// field can break, duplicate keys, business rejections that need the setup below (an opened
/// `acc_bad` and `acc_bad_other`, installment 1 due, payments `bad-paid` of 500 and
/// `bad-reversed` of 300, the latter reversed by `bad-first-reversal`).
fn bad_input_corpus() -> Vec<Bad> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/bad-input.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("corpus line"))
        .collect()
}

fn valid_payment() -> Value {
    json!({"sourceSystem": "psp", "sourceEventId": "bad-base", "eventType": "PAYMENT_SETTLED",
           "accountId": "acc_bad", "eventTime": "2026-09-10T10:00:00Z", "amountMinor": 100, "currency": "EUR"})
}

fn varied(id: &str, changes: Value) -> String {
    let mut v = valid_payment();
    v["sourceEventId"] = json!(id);
    for (k, val) in changes.as_object().expect("object") {
        if val.is_null() {
            v.as_object_mut().expect("object").remove(k);
        } else {
            v[k] = val.clone();
        }
    }
    v.to_string()
}

async fn when_bad_input_arrives_should_quarantine_each_with_a_specific_reason(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let setup = [
        open_account("acc_bad", 100_000),
        open_account("acc_bad_other", 100_000),
        varied(
            "due-1",
            json!({"eventType": "INSTALLMENT_DUE", "installmentNo": 1, "dueDate": "2026-10-01", "principalMinor": 1, "interestMinor": 1}),
        ),
        varied("bad-paid", json!({"amountMinor": 500})),
        varied("bad-reversed", json!({"amountMinor": 300})),
        varied(
            "bad-first-reversal",
            json!({"eventType": "PAYMENT_REVERSED", "amountMinor": 300, "reversalOf": {"sourceSystem": "psp", "sourceEventId": "bad-reversed"}}),
        ),
    ];
    for (i, body) in setup.iter().enumerate() {
        let r = deliver(&handler, &[(format!("setup{i}"), body.clone())]).await;
        assert_eq!(r[0].1, MessageResult::Applied, "setup {i}");
    }
    let before = servicing.loan("acc_bad").await.expect("loan");

    let corpus = bad_input_corpus();
    assert!(corpus.len() >= 40, "corpus has {} cases", corpus.len());
    let messages: Vec<_> = corpus
        .iter()
        .enumerate()
        .map(|(i, b)| sqs_message(&format!("bad{i}"), &b.body, 1))
        .collect();
    // In batches of 10, as SQS delivers them.
    let mut results = Vec::new();
    for batch in messages.chunks(10) {
        let report = handler.process(batch).await;
        assert!(
            report.response().batch_item_failures.is_empty(),
            "everything is acknowledged: {:?}",
            report.results
        );
        results.extend(report.results);
    }
    let stored = servicing.quarantine().await;
    for (i, case) in corpus.iter().enumerate() {
        let id = format!("bad{i}");
        let (_, result) = results
            .iter()
            .find(|(m, _)| *m == id)
            .expect("result per message");
        assert_eq!(
            result,
            &MessageResult::Quarantined {
                code: case.code.clone()
            },
            "case {i}: {}",
            case.body
        );
        let item = stored
            .iter()
            .find(|q| q.message_id == id)
            .unwrap_or_else(|| panic!("case {i} has no quarantine item"));
        let reason = &item.reason;
        assert!(
            reason.contains(&case.reason),
            "case {i}: reason {reason:?} lacks {:?}",
            case.reason
        );
        assert_eq!(item.raw_body, case.body, "case {i}: raw body kept");
        assert_eq!(item.code, case.code);
    }
    assert_eq!(
        stored.len(),
        corpus.len(),
        "one quarantine item per bad message"
    );
    // Business rejections changed nothing on the account (their claims checked its version).
    assert_eq!(servicing.loan("acc_bad").await.expect("loan").0, before.0);
}

async fn when_an_event_is_dated_in_the_future_should_quarantine_it_unclaimed_so_a_fix_applies(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    opened(&servicing, "acc_clock", 100_000).await;
    // A producer's clock in 2099: applied, it would age the account's arrears for good.
    let mut future: Value =
        serde_json::from_str(&payment("acc_clock", "pay-clock", 1_000)).expect("json");
    future["eventTime"] = json!("2099-01-01T00:00:00Z");
    let results = deliver(&handler, &[("f".into(), future.to_string())]).await;
    assert_eq!(
        results[0].1,
        MessageResult::Quarantined {
            code: "event_time_in_future".into()
        }
    );
    let (loan, version) = servicing.loan("acc_clock").await.expect("loan");
    assert_eq!((loan.principal_outstanding_minor, version), (100_000, 1));
    // Not claimed: the corrected resend, same identity, applies.
    let fixed = deliver(
        &handler,
        &[("g".into(), payment("acc_clock", "pay-clock", 1_000))],
    )
    .await;
    assert_eq!(fixed[0].1, MessageResult::Applied);
    // Up to the skew ahead is accepted (clocks differ a little).
    let mut soon: Value =
        serde_json::from_str(&payment("acc_clock", "pay-soon", 10)).expect("json");
    let in_an_hour = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
        + chrono::Duration::hours(1);
    soon["eventTime"] = json!(in_an_hour.to_rfc3339());
    let results = deliver(&handler, &[("s".into(), soon.to_string())]).await;
    assert_eq!(results[0].1, MessageResult::Applied);
}

async fn when_the_commit_fails_before_it_is_sent_should_write_nothing_and_apply_on_redelivery(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let account = "acc_crash_before";
    opened(&servicing, account, 100_000).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let body = payment(account, "pmt-crash-1", 7_000);

    faults.push(Fault::Throttle);
    let report = handler.process(&[sqs_message("m1", &body, 1)]).await;
    assert!(matches!(report.results[0].1, MessageResult::Retry { .. }));
    let failures: Vec<_> = report
        .response()
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(
        failures,
        vec!["m1".to_owned()],
        "throttling becomes a batch item failure"
    );
    assert_eq!(
        servicing.loan(account).await.expect("loan").1,
        1,
        "nothing written"
    );
    assert!(servicing.allocations(account).await.is_empty());

    let report = handler.process(&[sqs_message("m1", &body, 2)]).await;
    assert_eq!(report.results[0].1, MessageResult::Applied);
    let (loan, version) = servicing.loan(account).await.expect("loan");
    assert_eq!((loan.principal_outstanding_minor, version), (93_000, 2));
}

async fn when_the_response_is_lost_after_the_commit_should_count_the_redelivery_as_duplicate(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let account = "acc_crash_after";
    opened(&servicing, account, 100_000).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let body = payment(account, "pmt-crash-2", 7_000);

    faults.push(Fault::LoseResponse);
    let report = handler.process(&[sqs_message("m1", &body, 1)]).await;
    assert!(
        matches!(report.results[0].1, MessageResult::Retry { .. }),
        "the handler cannot know it committed"
    );
    // SQS redelivers, possibly to another instance.
    for handler in [handler, servicing.handler()] {
        let report = handler.process(&[sqs_message("m1", &body, 2)]).await;
        assert_eq!(report.results[0].1, MessageResult::Duplicate);
    }
    let (loan, version) = servicing.loan(account).await.expect("loan");
    assert_eq!(
        (loan.principal_outstanding_minor, version),
        (93_000, 2),
        "one effect"
    );
    assert_eq!(servicing.allocations(account).await.len(), 1);
    let applied = servicing
        .outbox(account)
        .await
        .into_iter()
        .filter(|d| d["eventType"] == "PaymentApplied")
        .count();
    assert_eq!(applied, 1, "one outbox event");
}

async fn when_dynamodb_reports_a_transaction_conflict_should_retry_in_place(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let account = "acc_conflict";
    opened(&servicing, account, 100_000).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    faults.push(Fault::TransactionConflict);
    faults.push(Fault::TransactionConflict);
    let report = handler
        .process(&[sqs_message("m1", &payment(account, "pmt-c", 1_000), 1)])
        .await;
    assert_eq!(report.results[0].1, MessageResult::Applied);
    assert_eq!(faults.pending(), 0);

    // Conflicts beyond the attempt budget become a batch item failure, not a loop.
    let mut config = servicing.config();
    config.max_commit_attempts = 3;
    let handler = servicing.faulty_handler(config, &faults);
    for _ in 0..3 {
        faults.push(Fault::TransactionConflict);
    }
    let report = handler
        .process(&[sqs_message("m2", &payment(account, "pmt-d", 1_000), 1)])
        .await;
    assert!(
        matches!(&report.results[0].1, MessageResult::Retry { reason } if reason.contains("after 3 attempts"))
    );
    assert_eq!(
        servicing
            .loan(account)
            .await
            .expect("loan")
            .0
            .principal_outstanding_minor,
        99_000
    );
}

async fn when_a_reversal_precedes_its_payment_in_a_batch_should_park_it_and_apply_it_right_after(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    opened(&servicing, "acc_block_a", 100_000).await;
    opened(&servicing, "acc_block_b", 100_000).await;
    let handler = servicing.handler();
    // The reversal overtook its payment: parked and acknowledged, applied right after it.
    let batch = [
        (
            "1".to_owned(),
            reversal("acc_block_a", "rev-x", "pay-x", 1_000),
        ),
        ("2".to_owned(), payment("acc_block_a", "pay-x", 1_000)),
        ("3".to_owned(), payment("acc_block_b", "pay-y", 2_000)),
    ];
    let report = handler
        .process(
            &batch
                .iter()
                .map(|(i, b)| sqs_message(i, b, 1))
                .collect::<Vec<_>>(),
        )
        .await;
    let by_id: BTreeMap<_, _> = report.results.iter().cloned().collect();
    assert_eq!(by_id["1"], MessageResult::Parked);
    assert_eq!(by_id["2"], MessageResult::Applied);
    assert_eq!(by_id["3"], MessageResult::Applied);
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(
        (
            report.counts.parked,
            report.counts.released,
            report.counts.applied
        ),
        (1, 1, 3)
    );
    let (loan, _) = servicing.loan("acc_block_a").await.expect("loan");
    assert_eq!(
        loan.principal_outstanding_minor, 100_000,
        "paid, then reversed"
    );
    let allocations = servicing.allocations("acc_block_a").await;
    assert_eq!(allocations.len(), 1);
    assert_eq!(
        allocations[0]
            .reversed_by
            .as_ref()
            .map(|r| r.event_id.as_str()),
        Some("rev-x")
    );
    // Redelivered, the parked-then-applied reversal is a duplicate.
    let again = deliver(&handler, &[("1b".into(), batch[0].1.clone())]).await;
    assert_eq!(again[0].1, MessageResult::Duplicate);
}

fn reversal(account: &str, id: &str, of: &str, amount: i64) -> String {
    json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": "PAYMENT_REVERSED",
           "accountId": account, "eventTime": "2026-09-11T10:00:00Z", "amountMinor": amount,
           "currency": "EUR", "reversalOf": {"sourceSystem": "psp", "sourceEventId": of}})
    .to_string()
}

fn batch_of(bodies: &[String], prefix: &str) -> Vec<(String, String)> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("{prefix}{i}"), b.clone()))
        .collect()
}

async fn principal(servicing: &Servicing, account: &str) -> (i64, u64) {
    let (loan, version) = servicing.loan(account).await.expect("loan");
    (loan.principal_outstanding_minor, version)
}

async fn when_counting_requests_should_cost_one_read_per_account_and_one_transaction_per_batch(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let requests = &servicing.requests;
    let bodies: Vec<String> = (0..10)
        .map(|i| {
            let account = format!("acc_cost_{}", i % 2);
            if i < 2 {
                open_account(&account, 100_000)
            } else {
                payment(&account, &format!("cost-{i}"), 100)
            }
        })
        .collect();
    let events = batch_of(&bodies, "m");

    requests.reset();
    let messages: Vec<_> = events.iter().map(|(id, b)| sqs_message(id, b, 1)).collect();
    let report = handler.process(&messages).await;
    assert!(
        report
            .results
            .iter()
            .all(|(_, r)| *r == MessageResult::Applied),
        "{:?}",
        report.results
    );
    // The batch's metrics line counts the shared transaction.
    assert_eq!(report.counts.transactions, 1);
    assert_eq!(
        requests.snapshot(),
        BTreeMap::from([
            ("Query".to_owned(), 2),
            ("TransactWriteItems".to_owned(), 1)
        ]),
        "one read per account; the accounts' groups share one transaction"
    );
    for account in ["acc_cost_0", "acc_cost_1"] {
        // Five facts, one loan write: the version still counts the applied facts.
        assert_eq!(principal(&servicing, account).await, (99_600, 5));
    }

    // The same instance sees the whole batch again (a batch retried after a timeout): the
    // cached loans list the facts as recently applied, so the duplicates cost nothing.
    requests.reset();
    let results = deliver(&handler, &events).await;
    assert!(
        results.iter().all(|(_, r)| *r == MessageResult::Duplicate),
        "{results:?}"
    );
    assert_eq!(requests.total(), 0, "{:?}", requests.snapshot());

    // A cold instance pays one read per account, once per batch, and writes nothing.
    requests.reset();
    let results = deliver(&servicing.handler(), &events).await;
    assert!(
        results.iter().all(|(_, r)| *r == MessageResult::Duplicate),
        "{results:?}"
    );
    assert_eq!(
        requests.snapshot(),
        BTreeMap::from([("Query".to_owned(), 2)])
    );

    // MAX_TRANSACTION_ITEMS=1 commits every event on its own: one transaction per event.
    let mut config = servicing.config();
    config.max_transaction_items = 1;
    let one_by_one = servicing.handler_with(config);
    let more: Vec<String> = (10..14)
        .map(|i| payment("acc_cost_0", &format!("cost-{i}"), 100))
        .collect();
    requests.reset();
    let results = deliver(&one_by_one, &batch_of(&more, "n")).await;
    assert!(
        results.iter().all(|(_, r)| *r == MessageResult::Applied),
        "{results:?}"
    );
    assert_eq!(requests.get("TransactWriteItems"), 4);
    assert_eq!(principal(&servicing, "acc_cost_0").await, (99_200, 9));
}

async fn when_a_batch_mixes_duplicates_collisions_and_new_facts_should_settle_each_from_one_refusal(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let requests = &servicing.requests;
    // mix-1 and mix-2, then enough facts to push them out of the loan's recent facts: only
    // their claims know them now.
    let mut seed = vec![
        open_account("acc_mix", 100_000),
        payment("acc_mix", "mix-1", 1_000),
        payment("acc_mix", "mix-2", 2_000),
    ];
    seed.extend((0..RECENT_FACTS_MAX).map(|i| payment("acc_mix", &format!("fill-{i}"), 10)));
    deliver(&handler, &batch_of(&seed, "s")).await;
    assert_eq!(principal(&servicing, "acc_mix").await, (96_680, 35));

    // New, duplicate, new, collision (same identity, other amount), new, and a duplicate of a
    // recent fact (settled from the cached loan, no claim in the transaction).
    let mixed = vec![
        payment("acc_mix", "mix-3", 100),
        payment("acc_mix", "mix-1", 1_000),
        payment("acc_mix", "mix-4", 200),
        payment("acc_mix", "mix-2", 9_999),
        payment("acc_mix", "mix-5", 300),
        payment("acc_mix", &format!("fill-{}", RECENT_FACTS_MAX - 1), 10),
    ];
    requests.reset();
    let results = deliver(&handler, &batch_of(&mixed, "x")).await;
    let got: Vec<&MessageResult> = results.iter().map(|(_, r)| r).collect();
    assert_eq!(
        got,
        [
            &MessageResult::Applied,
            &MessageResult::Duplicate,
            &MessageResult::Applied,
            &MessageResult::Collision,
            &MessageResult::Applied,
            &MessageResult::Duplicate
        ]
    );
    // The refused transaction named both refused claims; the three new facts commit in the
    // next one; the collision's quarantine record is its own (with its message's mark).
    assert_eq!(
        requests.snapshot(),
        BTreeMap::from([("TransactWriteItems".to_owned(), 3)])
    );
    assert_eq!(principal(&servicing, "acc_mix").await, (96_080, 38));
    let quarantined = servicing.quarantine().await;
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].code, "collision");
}

async fn when_a_batch_holds_a_payment_its_reversal_and_a_repeat_should_commit_them_in_order(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let requests = &servicing.requests;
    let bodies = vec![
        open_account("acc_cut", 100_000),
        payment("acc_cut", "cut-1", 5_000),
        // Its target is recorded in the same batch: judged after the first group commits.
        reversal("acc_cut", "cut-rev-1", "cut-1", 5_000),
        payment("acc_cut", "cut-2", 1_000),
        // The same fact twice in one batch: one claim item cannot be written twice.
        payment("acc_cut", "cut-2", 1_000),
        payment("acc_cut", "cut-3", 500),
    ];
    requests.reset();
    let results = deliver(&handler, &batch_of(&bodies, "c")).await;
    let counts = tally(&results);
    assert_eq!((counts.applied, counts.duplicate), (5, 1), "{results:?}");
    assert_eq!(results[4].1, MessageResult::Duplicate, "{results:?}");
    assert_eq!(principal(&servicing, "acc_cut").await, (98_500, 5));
    let allocations = servicing.allocations("acc_cut").await;
    assert!(
        allocations
            .iter()
            .any(|a| a.payment.event_id == "cut-1" && a.reversed_by.is_some()),
        "{allocations:?}"
    );
    // [open, cut-1] | [reversal, cut-2] | [cut-3] (cut-2 again: listed as just applied)
    assert_eq!(
        requests.get("TransactWriteItems"),
        3,
        "{:?}",
        requests.snapshot()
    );

    // A group never exceeds the item budget: at 2 items, a payment (its record) and the loan
    // fit once per transaction.
    let mut config = servicing.config();
    config.max_transaction_items = 2;
    let small = servicing.handler_with(config);
    let more: Vec<String> = (4..8)
        .map(|i| payment("acc_cut", &format!("cut-{i}"), 100))
        .collect();
    requests.reset();
    let results = deliver(&small, &batch_of(&more, "d")).await;
    assert_eq!(tally(&results).applied, 4, "{results:?}");
    assert_eq!(requests.get("TransactWriteItems"), 4);
    assert_eq!(principal(&servicing, "acc_cut").await, (98_100, 9));
}

async fn when_processing_an_account_panics_should_fail_only_that_accounts_messages(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let mut config = servicing.config();
    // One account at a time, in batch order: the panic hits the first account's read.
    config.account_concurrency = 1;
    let handler = servicing.faulty_handler(config, &faults);
    let bodies = vec![
        open_account("acc_panic_a", 100_000),
        payment("acc_panic_a", "panic-a-1", 1_000),
        open_account("acc_panic_b", 100_000),
        payment("acc_panic_b", "panic-b-1", 1_000),
    ];
    let batch = batch_of(&bodies, "p");
    faults.push(Fault::Panic);
    let results = deliver(&handler, &batch).await;
    for (id, result) in &results[..2] {
        assert!(
            matches!(result, MessageResult::Retry { reason } if reason.contains("panicked")),
            "{id}: {result:?}"
        );
    }
    assert!(
        results[2..]
            .iter()
            .all(|(_, r)| *r == MessageResult::Applied),
        "{results:?}"
    );
    assert!(
        servicing.loan("acc_panic_a").await.is_none(),
        "nothing half-written"
    );

    // The same handler goes on: the redelivery applies the failed account once.
    let results = deliver(&handler, &batch).await;
    let got: Vec<&MessageResult> = results.iter().map(|(_, r)| r).collect();
    assert_eq!(
        got,
        [
            &MessageResult::Applied,
            &MessageResult::Applied,
            &MessageResult::Duplicate,
            &MessageResult::Duplicate
        ]
    );
    assert_eq!(principal(&servicing, "acc_panic_a").await, (99_000, 2));
}

async fn when_instances_race_with_overlapping_batches_of_one_account_should_apply_each_fact_once(
    engine: Engine,
) {
    const ROUNDS: usize = 6;
    const FACTS: usize = 10;
    let servicing = Servicing::new(engine).await;
    let account = "acc_race_groups";
    opened(&servicing, account, 10_000_000).await;
    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    let mut expected_principal = 10_000_000;
    for round in 0..ROUNDS {
        let facts: Vec<(String, String)> = (0..FACTS)
            .map(|f| {
                let id = format!("g{round}-{f}");
                let amount = 100 + (round * FACTS + f) as i64;
                expected_principal -= amount;
                (id.clone(), payment(account, &id, amount))
            })
            .collect();
        // Four instances at once, each with an overlapping window of the facts, in order: their
        // groups refuse each other's claims and move the loan under each other.
        let handlers: Vec<_> = (0..4).map(|_| servicing.handler()).collect();
        let mut pending: Vec<(String, String)> = Vec::new();
        let windows = join_all(handlers.iter().enumerate().map(|(i, handler)| {
            let batch: Vec<(String, String)> = facts[i * 2..(i * 2 + 6).min(FACTS)]
                .iter()
                .map(|(id, body)| (format!("{id}@{i}"), body.clone()))
                .collect();
            async move { (batch.clone(), deliver(handler, &batch).await) }
        }))
        .await;
        for (batch, results) in windows {
            for ((id, body), (_, result)) in batch.into_iter().zip(results) {
                match result {
                    MessageResult::Applied => *applied.entry(fact_of(&id)).or_default() += 1,
                    MessageResult::Duplicate => {}
                    MessageResult::Retry { .. } => pending.push((id, body)),
                    other => panic!("round {round}, {id}: {other:?}"),
                }
            }
        }
        // What failed comes back, as SQS would redeliver it.
        for attempt in 0.. {
            if pending.is_empty() {
                break;
            }
            assert!(attempt < 10, "round {round}: still failing: {pending:?}");
            let results = deliver(&servicing.handler(), &pending).await;
            let mut again = Vec::new();
            for ((id, body), (_, result)) in pending.into_iter().zip(results) {
                match result {
                    MessageResult::Applied => *applied.entry(fact_of(&id)).or_default() += 1,
                    MessageResult::Duplicate => {}
                    MessageResult::Retry { .. } => again.push((id, body)),
                    other => panic!("round {round}, {id}: {other:?}"),
                }
            }
            pending = again;
        }
    }
    assert_eq!(applied.len(), ROUNDS * FACTS, "{applied:?}");
    assert!(applied.values().all(|n| *n == 1), "{applied:?}");
    assert_eq!(
        principal(&servicing, account).await,
        (expected_principal, 1 + (ROUNDS * FACTS) as u64),
        "every fact once, no version skipped or reused"
    );
    assert_eq!(servicing.allocations(account).await.len(), ROUNDS * FACTS);
}

/// The fact of a message id `<fact>@<instance>`.
fn fact_of(message_id: &str) -> String {
    message_id.split('@').next().unwrap_or_default().to_owned()
}

async fn when_dynamodb_refuses_a_group_request_should_commit_its_events_one_by_one(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let requests = &servicing.requests;
    let bodies = vec![
        open_account("acc_refused", 100_000),
        payment("acc_refused", "refused-1", 1_000),
        payment("acc_refused", "refused-2", 2_000),
    ];
    // The group's request is refused as such (as one over 4 MB would be): one event per
    // transaction from there, so no event is quarantined for the size of the others.
    faults.push(Fault::Invalid);
    requests.reset();
    let results = deliver(&handler, &batch_of(&bodies, "v")).await;
    assert!(
        results.iter().all(|(_, r)| *r == MessageResult::Applied),
        "{results:?}"
    );
    assert_eq!(faults.pending(), 0);
    assert_eq!(
        requests.get("TransactWriteItems"),
        4,
        "the refused request, then one per event"
    );
    assert_eq!(principal(&servicing, "acc_refused").await, (97_000, 3));
    assert!(servicing.quarantine().await.is_empty());

    // The same refusal with one event left: that event alone is quarantined, as before.
    faults.push(Fault::Invalid);
    let results = deliver(
        &handler,
        &[("w0".into(), payment("acc_refused", "refused-3", 500))],
    )
    .await;
    assert_eq!(
        results[0].1,
        MessageResult::Quarantined {
            code: "store_rejected".into()
        }
    );
}

async fn when_accounts_share_a_transaction_should_each_keep_its_own_outcome(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let first = servicing.handler();
    let requests = &servicing.requests;
    let seed = vec![
        open_account("acc_share_a", 100_000),
        open_account("acc_share_b", 100_000),
        payment("acc_share_b", "share-b-1", 1_000),
        open_account("acc_share_c", 100_000),
    ];
    deliver(&first, &batch_of(&seed, "s")).await;
    // Another instance moves acc_share_c on: the first instance's cached state is stale.
    let other = servicing.handler();
    let moved = [payment("acc_share_c", "share-c-0", 100)];
    deliver(&other, &batch_of(&moved, "o")).await;

    // A new fact, a collision (known identity, other amount) and a fact on the stale state:
    // one shared transaction is cancelled; each account reads only its own reasons.
    let batch = vec![
        payment("acc_share_a", "share-a-1", 100),
        payment("acc_share_b", "share-b-1", 9_999),
        payment("acc_share_c", "share-c-1", 100),
    ];
    requests.reset();
    let mut results = deliver(&first, &batch_of(&batch, "x")).await;
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<&MessageResult> = results.iter().map(|(_, r)| r).collect();
    assert_eq!(
        got,
        [
            &MessageResult::Applied,
            &MessageResult::Collision,
            &MessageResult::Applied
        ]
    );
    // Cancelled together; then a (withdrawn: no re-read) and c (re-read) share the next one.
    assert_eq!(
        requests.snapshot(),
        BTreeMap::from([
            ("Query".to_owned(), 1),
            ("TransactWriteItems".to_owned(), 3)
        ])
    );
    assert_eq!(principal(&servicing, "acc_share_a").await, (99_900, 2));
    assert_eq!(principal(&servicing, "acc_share_b").await, (99_000, 2));
    assert_eq!(principal(&servicing, "acc_share_c").await, (99_800, 3));
}

async fn when_one_fact_arrives_for_two_accounts_should_not_share_a_transaction(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let requests = &servicing.requests;
    let seed = vec![
        open_account("acc_twin_a", 100_000),
        open_account("acc_twin_b", 100_000),
    ];
    deliver(&handler, &batch_of(&seed, "s")).await;

    // One identity, two accounts: both claims are one item, which one transaction cannot
    // write twice (DynamoDB would refuse the whole request). The first account's commit goes
    // alone; the second is then refused by the claim as a collision.
    let batch = vec![
        payment("acc_twin_a", "twin-1", 100),
        payment("acc_twin_b", "twin-1", 100),
    ];
    requests.reset();
    let results = deliver(&handler, &batch_of(&batch, "x")).await;
    let counts = tally(&results);
    assert_eq!((counts.applied, counts.collision), (1, 1), "{results:?}");
    // Two commits, then the collision's quarantine (with its message's mark).
    assert_eq!(requests.get("TransactWriteItems"), 3);
    let mut principals = vec![
        principal(&servicing, "acc_twin_a").await,
        principal(&servicing, "acc_twin_b").await,
    ];
    principals.sort();
    assert_eq!(principals, [(99_900, 2), (100_000, 1)]);
}

/// A commit whose request times out may or may not have happened (a lost response): it must come
/// back as transient (a batch item failure, redelivered and then recognised), never as a request
/// DynamoDB refused (which quarantines the event). No engine here: a server that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_commit_request_times_out_should_be_transient_not_refused() {
    use aws_config::retry::RetryConfig;
    use aws_config::timeout::TimeoutConfig;
    use servicing_domain::{Fingerprint, Outcome, ServicingEvent, apply};
    use servicing_store::{
        Effect, LoanItem, LoanWrite, RecentFacts, ServicingStore, StoreConfig, StoreError,
        UnitOfWork,
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let sdk = aws_setup::loader()
        .endpoint_url(format!("http://{address}"))
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(std::time::Duration::from_millis(300))
                .build(),
        )
        .retry_config(RetryConfig::disabled())
        .load()
        .await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig::new("servicing", "account-state"),
    );

    let body = open_account("acc_timeout", 100_000);
    let event = ServicingEvent::decode(body.as_bytes()).expect("valid");
    let Outcome::Applied(applied) = apply(None, &event, None) else {
        panic!("an opening applies");
    };
    let fingerprint = Fingerprint::of(&event);
    let unit = UnitOfWork {
        source: &event.source,
        event_type: event.kind.wire_name(),
        account_id: &event.account_id,
        fingerprint: &fingerprint,
        released: false,
        effect: Effect::Apply(&applied),
    };
    let loan = LoanItem {
        account_id: event.account_id.clone(),
        account: Some(applied.account.clone()),
        version: 1,
        recent: RecentFacts::default(),
        parked: Default::default(),
    };
    let write = LoanWrite::Put {
        item: &loan,
        expected: None,
        apart_before: &[],
    };
    let outcome = store
        .commit_all(std::slice::from_ref(&unit), Some(write))
        .await;
    assert!(
        matches!(outcome, Err(StoreError::Transient(_))),
        "{outcome:?}"
    );
}

async fn when_a_message_group_is_not_its_account_should_apply_it_and_count_the_producer_error(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_wrong_group";
    let grouped = |id: &str, body: String, group: &str| {
        let mut message = sqs_message(id, &body, 1);
        message
            .attributes
            .insert("MessageGroupId".into(), group.to_owned());
        message
    };
    let report = servicing
        .handler()
        .process(&[
            grouped("o", open_account(a, 10_000), a),
            grouped("p", payment(a, "pay-1", 500), "acc_someone_else"),
        ])
        .await;
    let results: Vec<&MessageResult> = report.results.iter().map(|(_, r)| r).collect();
    assert_eq!(results, [&MessageResult::Applied, &MessageResult::Applied]);
    assert_eq!(report.counts.group_mismatch, 1);
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        loan.principal_outstanding_minor, 9_500,
        "applied by its body's account"
    );
}
