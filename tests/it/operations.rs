//! Operations against the local engines: reconciliation (both engines), quarantine redrive and
//! the replay guard (MiniStack, which also provides the queue).

use account_state::MessageResult;
use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::Engine;
use integration_tests::lambda::queue;
use integration_tests::servicing::{Servicing, fixture, sqs_message};
use serde_json::json;
use servicing_ops::{quarantine, reconcile, replay};

on_both_engines!(when_a_source_stream_is_reconciled_should_explain_every_delivery_and_catch_breaks);

fn lines(name: &str) -> Vec<String> {
    fixture(name)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

async fn deliver(
    servicing: &Servicing,
    bodies: &[String],
    receive_count: u32,
) -> Vec<MessageResult> {
    let handler = servicing.handler();
    let messages: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| sqs_message(&format!("m{i}"), b, receive_count))
        .collect();
    let mut results = Vec::new();
    for batch in messages.chunks(10) {
        results.extend(
            handler
                .process(batch)
                .await
                .results
                .into_iter()
                .map(|(_, r)| r),
        );
    }
    results
}

async fn when_a_source_stream_is_reconciled_should_explain_every_delivery_and_catch_breaks(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let mut source = lines("basic.jsonl");
    source.extend(lines("basic.jsonl").into_iter().step_by(2)); // 5 duplicates
    source.push("{not json".to_owned()); // undecodable: quarantined, no identity
    deliver(&servicing, &source, 1).await;

    let bodies: Vec<Vec<u8>> = source.iter().map(|l| l.clone().into_bytes()).collect();
    // The facts were claimed just now: the window (read through the record log) is the hour
    // around it; against the source, every record is read whatever the window.
    let now = servicing_ops::epoch_seconds();
    let window = (now - 3_600, now + 3_600);
    servicing.requests.reset();
    let report = reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        window,
        Some(&bodies),
    )
    .await
    .expect("reconcile");
    // Claims, quarantine and allocations from one pass over the (one-page) table: one request
    // per parallel scan segment, each reading its share.
    assert_eq!(
        servicing.requests.snapshot(),
        std::collections::BTreeMap::from([(
            "Scan".to_owned(),
            servicing_ops::SCAN_SEGMENTS as u64
        )])
    );
    let s = report.source.clone().expect("source counts");
    assert_eq!(
        (
            s.events,
            s.duplicates,
            s.undecodable,
            s.unique,
            s.unaccounted
        ),
        (16, 5, 1, 10, 0),
        "{:?}",
        report.lines()
    );
    assert_eq!((report.applied, report.stale, report.rejected), (9, 1, 0));
    assert_eq!(
        (report.allocations_checked, report.payments_checked),
        (2, 2)
    );
    assert!(report.holds(), "{:#?}", report.lines());

    // A fact the source sent that never arrived: unaccounted, the identity breaks.
    let mut with_lost = bodies.clone();
    with_lost.push(
        json!({"sourceSystem": "psp", "sourceEventId": "lost-1", "eventType": "PAYMENT_SETTLED", "accountId": "acc_4002",
               "eventTime": "2026-10-30T00:00:00Z", "amountMinor": 1, "currency": "EUR"}).to_string().into_bytes(),
    );
    let report = reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        window,
        Some(&with_lost),
    )
    .await
    .expect("reconcile");
    assert!(!report.holds());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("psp:lost-1: neither claimed nor quarantined")),
        "{:?}",
        report.problems
    );

    // Money checks: a tampered allocation, then a missing one.
    // A payment's allocation rides on its record (its claim).
    let key = |payment: &str| {
        [
            (
                "pk",
                AttributeValue::S(format!("CLAIM#account-state#payment-provider#{payment}")),
            ),
            ("sk", AttributeValue::S("CLAIM".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect::<std::collections::HashMap<_, _>>()
    };
    // Tamper with the first payment's allocation where it is stored (its PaymentApplied event).
    let stored = servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .set_key(Some(key("pmt_10001")))
        .send()
        .await
        .expect("read the record")
        .item
        .expect("the payment's record");
    let Some(AttributeValue::S(outbox)) = stored.get("outbox") else {
        panic!("the payment's record carries its events");
    };
    let mut events: serde_json::Value = serde_json::from_str(outbox).expect("events");
    events[0]["detail"]["allocation"]["principal"] = json!(21001);
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .set_key(Some(key("pmt_10001")))
        .update_expression("SET outbox = :o")
        .expression_attribute_values(":o", AttributeValue::S(events.to_string()))
        .send()
        .await
        .expect("tamper");
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .set_key(Some(key("pmt_10002")))
        .update_expression("REMOVE outbox, allocatedTo")
        .send()
        .await
        .expect("remove the allocation");
    servicing.keep_record_log().await;
    let report = reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        window,
        None,
    )
    .await
    .expect("reconcile");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("do not sum to the payment")),
        "{:?}",
        report.problems
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("payment-provider:pmt_10002") && p.contains("has no allocation")),
        "{:?}",
        report.problems
    );
    assert_eq!(
        report.canonical_unique(),
        11,
        "10 claims + the undecodable message, in the window"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_quarantined_messages_are_redriven_should_keep_their_identity_and_refuse_collisions() {
    let servicing = Servicing::new(Engine::MiniStack).await;
    let config = Engine::MiniStack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (queue_url, _) = queue(&sqs, "redrive", true).await;
    let open = lines("basic.jsonl")[0].clone();
    let payment = json!({"sourceSystem": "psp", "sourceEventId": "p-late", "eventType": "PAYMENT_SETTLED", "accountId": "acc_4002",
        "eventTime": "2026-10-20T00:00:00Z", "amountMinor": 5000, "currency": "EUR"}).to_string();
    let reversal = json!({"sourceSystem": "psp", "sourceEventId": "r-early", "eventType": "PAYMENT_REVERSED", "accountId": "acc_4002",
        "eventTime": "2026-10-21T00:00:00Z", "amountMinor": 5000, "currency": "EUR",
        "reversalOf": {"sourceSystem": "psp", "sourceEventId": "p-late"}}).to_string();
    let usd_fee = json!({"sourceSystem": "fees", "sourceEventId": "f-usd", "eventType": "FEE_ASSESSED", "accountId": "acc_4002",
        "eventTime": "2026-10-21T00:00:00Z", "amountMinor": 100, "currency": "USD", "feeType": "LATE_FEE"}).to_string();
    let collision = payment.replace("5000", "5001");

    deliver(&servicing, std::slice::from_ref(&open), 1).await;
    // The reversal's payment is late beyond the park retention: the reconciler quarantines it
    // and releases its claim.
    assert_eq!(
        deliver(&servicing, std::slice::from_ref(&reversal), 1).await[0],
        MessageResult::Parked
    );
    let week = std::time::Duration::from_secs(7 * 86_400);
    let later = servicing_ops::epoch_seconds() + 8 * 86_400;
    let expiry = servicing_ops::parked::expire(&servicing.store("account-state"), later, week)
        .await
        .expect("expire");
    assert_eq!(expiry.missing, 1);
    assert!(
        matches!(&deliver(&servicing, std::slice::from_ref(&usd_fee), 1).await[0], MessageResult::Quarantined { code } if code == "currency_mismatch")
    );
    assert_eq!(
        deliver(&servicing, std::slice::from_ref(&payment), 1).await[0],
        MessageResult::Applied
    );
    assert_eq!(
        deliver(&servicing, std::slice::from_ref(&collision), 1).await[0],
        MessageResult::Collision
    );
    // The daily (window) reconciliation counts it, although its identity has the first claim.
    let now = servicing_ops::epoch_seconds();
    servicing.keep_record_log().await;
    let daily = servicing_ops::reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        (now - 3600, now + 1),
        None,
    )
    .await
    .expect("reconcile");
    assert_eq!(daily.collisions, 1, "{:?}", daily.lines());

    let items = quarantine::list(
        &servicing.client,
        &servicing.table,
        Some("account-state"),
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    assert_eq!(items.len(), 3);
    let by_code = |code: &str| {
        items
            .iter()
            .find(|q| q.code == code)
            .expect(code)
            .id
            .clone()
    };
    let inspected = quarantine::inspect(
        &servicing.client,
        &servicing.table,
        &by_code("awaited_fact_missing"),
    )
    .await
    .expect("inspect");
    assert_eq!(
        inspected.raw_body, reversal,
        "the raw body is kept byte for byte"
    );

    // Collisions are never redriven.
    let refused = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &by_code("collision"),
        WINDOW,
    )
    .await;
    assert!(
        refused
            .expect_err("collision")
            .to_string()
            .contains("is a collision")
    );

    // The reversal, now that its payment exists: redriven with its original identity, applied.
    let redriven = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &by_code("awaited_fact_missing"),
        WINDOW,
    )
    .await
    .expect("redrive");
    assert!(!redriven.released_claim);
    // The business rejection: its REJECTED claim is released so the redelivery is judged again.
    let operator = "arn:aws:iam::111122223333:user/ops-alice";
    let redriven_fee = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &by_code("currency_mismatch"),
        quarantine::RedriveOptions {
            operator: Some(operator.to_owned()),
            ..WINDOW.into()
        },
    )
    .await
    .expect("redrive");
    assert!(redriven_fee.released_claim);
    // Who redrove it stays on the item (the caller's identity, as ledgerctl resolves it).
    let stamped = quarantine::inspect(
        &servicing.client,
        &servicing.table,
        &by_code("currency_mismatch"),
    )
    .await
    .expect("inspect");
    assert_eq!(stamped.redriven_by.as_deref(), Some(operator));

    let got = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(2)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive");
    let bodies: Vec<String> = got
        .messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect();
    assert_eq!(
        bodies,
        vec![reversal.clone(), usd_fee.clone()],
        "original bodies, original identities"
    );
    // The operator who redrove a message names it; a redrive without a known operator nothing.
    let senders: Vec<Option<&str>> = got
        .messages()
        .iter()
        .map(|m| {
            m.message_attributes()
                .and_then(|a| a.get(servicing_telemetry::SENT_BY))
                .and_then(|v| v.string_value())
        })
        .collect();
    assert_eq!(senders, [None, Some(operator)]);
    // Delivered as SQS delivers it (attributes included): each decision record says who sent
    // its message.
    let messages: Vec<_> = got
        .messages()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut message = sqs_message(&format!("m{i}"), m.body().unwrap_or_default(), 1);
            for (name, value) in m.message_attributes().into_iter().flatten() {
                let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
                attribute.string_value = value.string_value().map(str::to_owned);
                attribute.data_type = Some(value.data_type().to_owned());
                message.message_attributes.insert(name.clone(), attribute);
            }
            message
        })
        .collect();
    let report = servicing.handler().process(&messages).await;
    let sent_by = |id: &str| {
        report
            .decisions
            .iter()
            .find(|d| d.message_id == id)
            .map(|d| d.sent_by.clone())
    };
    assert_eq!(sent_by("m0"), Some(None));
    assert_eq!(sent_by("m1"), Some(Some(operator.to_owned())));
    let mut results: Vec<(String, MessageResult)> = report.results;
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let results: Vec<MessageResult> = results.into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        results[0],
        MessageResult::Applied,
        "the redriven reversal applies"
    );
    assert!(
        matches!(&results[1], MessageResult::Quarantined { code } if code == "currency_mismatch"),
        "nothing was fixed for the fee: judged again, same verdict"
    );
    assert_eq!(
        servicing
            .loan("acc_4002")
            .await
            .expect("loan")
            .0
            .principal_outstanding_minor,
        100_000
    );
    let items = quarantine::list(
        &servicing.client,
        &servicing.table,
        None,
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    let redriven_item = items
        .iter()
        .find(|q| q.id == redriven.id)
        .expect("still listed");
    assert_eq!(redriven_item.redrive_count, 1);
}

/// The default claim retention; no override.
const WINDOW: quarantine::RedriveWindow = quarantine::RedriveWindow {
    claim_retention_secs: 35 * 86_400,
    allow_beyond_retention: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_replay_holds_facts_without_a_claim_that_outlives_delivery_should_refuse() {
    let servicing = Servicing::new(Engine::MiniStack).await;
    let event = |id: &str, days_ago: i64| {
        let at = std::time::SystemTime::now()
            - std::time::Duration::from_secs((days_ago * 86_400) as u64);
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_secs() as i64;
        json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": "PAYMENT_SETTLED", "accountId": "acc_4002",
               "eventTime": chrono_like(secs), "amountMinor": 10, "currency": "EUR"}).to_string()
    };
    deliver(
        &servicing,
        &[lines("basic.jsonl")[0].clone(), event("old-applied", 40)],
        1,
    )
    .await;
    // Judged by the claim, not by the event's age: a 40-day-old fact claimed moments ago is a
    // harmless duplicate; a fresh-looking fact without a claim may have been applied before its
    // claim expired (its eventTime proves nothing), so it is refused.
    let stream: Vec<Vec<u8>> = [
        event("old-applied", 40),
        event("recent-unknown", 2),
        event("old-unknown", 60),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    let refusals = replay::check(&servicing.client, &servicing.table, &stream)
        .await
        .expect("check");
    let lines: Vec<usize> = refusals.iter().map(|r| r.line).collect();
    assert_eq!(lines, [2, 3], "{refusals:?}");
    assert!(
        refusals[0]
            .reason
            .contains("psp:recent-unknown has no live claim")
    );
    assert!(servicing.items_of_type("QUARANTINE").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_quarantined_fact_may_have_applied_since_its_claim_expired_should_refuse_the_redrive()
 {
    let servicing = Servicing::new(Engine::MiniStack).await;
    let config = Engine::MiniStack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (queue_url, _) = queue(&sqs, "redrive-old", true).await;
    deliver(&servicing, &[lines("basic.jsonl")[0].clone()], 1).await;
    // A fee quarantined (a USD fee on a EUR loan: rejected, claimed REJECTED)...
    let fee = json!({"sourceSystem": "fees", "sourceEventId": "f-old", "eventType": "FEE_ASSESSED", "accountId": "acc_4002",
        "eventTime": "2026-10-21T00:00:00Z", "amountMinor": 100, "currency": "USD", "feeType": "LATE_FEE"}).to_string();
    deliver(&servicing, std::slice::from_ref(&fee), 1).await;
    // ...the producer resent a corrected one, applied, and its claim expired later: with only
    // a day of claim retention, the quarantine item is older than what any claim still covers.
    let items = quarantine::list(
        &servicing.client,
        &servicing.table,
        Some("account-state"),
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    let id = items[0].id.clone();
    servicing
        .client
        .delete_item()
        .table_name(&servicing.table)
        .set_key(Some(servicing_store::items::key_item(
            servicing_store::items::claim_key(
                "account-state",
                &servicing_domain::SourceRef {
                    system: "fees".into(),
                    event_id: "f-old".into(),
                },
            ),
        )))
        .send()
        .await
        .expect("claim gone, as after its TTL");
    let short = quarantine::RedriveWindow {
        claim_retention_secs: 86_400,
        allow_beyond_retention: false,
    };
    let refused = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &id,
        short,
    )
    .await;
    assert!(
        refused
            .as_ref()
            .expect_err("refused")
            .to_string()
            .contains("may have been applied since"),
        "{refused:?}"
    );
    // With the default retention the same item is covered: no claim then means never applied.
    let redriven = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &id,
        WINDOW,
    )
    .await;
    assert!(redriven.is_ok(), "{redriven:?}");
    // And the operator can insist, once they know.
    let allowed = quarantine::RedriveWindow {
        allow_beyond_retention: true,
        ..short
    };
    assert!(
        quarantine::redrive(
            &servicing.client,
            &sqs,
            &servicing.table,
            &queue_url,
            &id,
            allowed
        )
        .await
        .is_ok()
    );
}

fn chrono_like(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .expect("valid time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
