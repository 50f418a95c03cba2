//! Issue #20 on the engines: quarantine items that always fit, redrive judged by the quarantined
//! payload's fingerprint and the writer's claim retention, replays sent under their identity.

use account_state::MessageResult;
use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::Engine;
use integration_tests::lambda::queue;
use integration_tests::servicing::{Servicing, fixture, sqs_message};
use serde_json::json;
use servicing_domain::SourceRef;
use servicing_ops::quarantine;
use servicing_store::{QuarantineEntry, ServicingStore, StoreConfig};

on_both_engines!(
    when_a_body_is_larger_than_an_item_can_hold_should_quarantine_its_hash_length_and_a_prefix,
    when_a_rejected_claim_belongs_to_another_payload_should_not_release_it,
    when_an_unclaimed_fact_is_redriven_should_judge_it_by_the_recorded_claim_retention,
    when_a_record_is_past_its_expiry_should_be_counted_and_listed_nowhere,
    when_one_message_is_quarantined_again_should_keep_its_first_record_only,
);

async fn deliver(servicing: &Servicing, body: &str) -> MessageResult {
    let report = servicing
        .handler()
        .process(&[sqs_message("m-1", body, 1)])
        .await;
    report.results.into_iter().next().expect("one result").1
}

fn open() -> String {
    fixture("basic.jsonl")
        .lines()
        .next()
        .expect("opening")
        .to_owned()
}

/// A USD fee on the EUR loan acc_4002: rejected (`currency_mismatch`), claimed REJECTED.
fn usd_fee(amount: i64) -> String {
    json!({"sourceSystem": "fees", "sourceEventId": "f-usd", "eventType": "FEE_ASSESSED", "accountId": "acc_4002",
        "eventTime": "2026-10-21T00:00:00Z", "amountMinor": amount, "currency": "USD", "feeType": "LATE_FEE"})
    .to_string()
}

fn fee_source() -> SourceRef {
    SourceRef {
        system: "fees".into(),
        event_id: "f-usd".into(),
    }
}

/// A quarantine write whose answer was lost is written again when its message comes back
/// (redelivered by SQS, retried by the stream): every consumer keeps one record per message,
/// the first, and its second write succeeds (the message is acknowledged, not retried).
async fn when_one_message_is_quarantined_again_should_keep_its_first_record_only(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    for consumer in quarantine::QUARANTINING {
        let store = servicing.store(consumer);
        for (message, reason) in [
            ("m-again", "first delivery"),
            ("m-again", "its redelivery"),
            ("m-other", "another message"),
        ] {
            store
                .quarantine(&QuarantineEntry::new(message, "{", "not_json", reason))
                .await
                .expect("quarantined, again or not");
            // Another millisecond: the key of a record written again would differ.
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
    }
    let listed = quarantine::list(
        &servicing.client,
        &servicing.table,
        None,
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    for consumer in quarantine::QUARANTINING {
        let mine: Vec<(&str, &str)> = listed
            .iter()
            .filter(|q| q.consumer == consumer)
            .map(|q| (q.message_id.as_str(), q.reason.as_str()))
            .collect();
        assert_eq!(
            mine,
            [
                ("m-again", "first delivery"),
                ("m-other", "another message")
            ],
            "{engine:?} {consumer}"
        );
    }
    assert_eq!(servicing.quarantine().await.len(), 8, "{engine:?}");
}

async fn when_a_body_is_larger_than_an_item_can_hold_should_quarantine_its_hash_length_and_a_prefix(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    // SQS carries up to 1 MiB; a DynamoDB item holds 400 KB.
    let body = format!(
        "{{\"sourceSystem\":\"psp\",\"padding\":\"{}\"}}",
        "x".repeat(500_000)
    );
    let entry = QuarantineEntry::new("m-big", &body, "not_json", "too large");
    servicing
        .store("account-state")
        .quarantine(&entry)
        .await
        .expect("a 500 KB body is quarantined, not retried to the dead-letter queue");
    let records = servicing.quarantine().await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert!(record.raw_body_truncated);
    assert_eq!(record.raw_body_bytes, Some(body.len() as u64));
    assert!(
        record
            .raw_body_sha256
            .as_ref()
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())),
        "{record:?}"
    );
    assert!(body.starts_with(&record.raw_body) && record.raw_body.len() <= 16 * 1024);
    // Inspected, it names what it kept; redriven, it is refused (the body is gone).
    let item = quarantine::list(
        &servicing.client,
        &servicing.table,
        None,
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list")
    .remove(0);
    assert_eq!(
        item.raw_body_truncated.as_ref().map(|(n, _)| *n),
        Some(body.len() as u64)
    );
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let refused = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        "unused",
        &item.id,
        quarantine::RedriveOptions::default(),
    )
    .await;
    assert!(
        refused
            .as_ref()
            .expect_err("refused")
            .to_string()
            .contains("cannot be redriven"),
        "{refused:?}"
    );
}

async fn when_a_rejected_claim_belongs_to_another_payload_should_not_release_it(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = queue(&sqs, "redrive-fp", true).await;
    deliver(&servicing, &open()).await;
    // A fee rejected and quarantined; its claim released since (as a first redrive does)...
    let first = usd_fee(100);
    assert!(
        matches!(deliver(&servicing, &first).await, MessageResult::Quarantined { code } if code == "currency_mismatch")
    );
    let claim_key = servicing_store::items::key_item(servicing_store::items::claim_key(
        "account-state",
        &fee_source(),
    ));
    servicing
        .client
        .delete_item()
        .table_name(&servicing.table)
        .set_key(Some(claim_key.clone()))
        .send()
        .await
        .expect("released");
    // ...and another payload under the same identity, rejected too: the claim is its now.
    let second = usd_fee(200);
    assert!(
        matches!(deliver(&servicing, &second).await, MessageResult::Quarantined { code } if code == "currency_mismatch")
    );
    let items = quarantine::list(
        &servicing.client,
        &servicing.table,
        Some("account-state"),
        quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    let first_id = items
        .iter()
        .find(|q| q.raw_body == first)
        .expect("the first payload's quarantine item")
        .id
        .clone();
    let refused = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &first_id,
        quarantine::RedriveOptions::default(),
    )
    .await;
    let claim = servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .set_key(Some(claim_key))
        .consistent_read(true)
        .send()
        .await
        .expect("read")
        .item;
    assert!(
        claim.is_some(),
        "the second payload's REJECTED claim was released by the first one's redrive ({refused:?})"
    );
    assert!(
        refused
            .as_ref()
            .expect_err("refused")
            .to_string()
            .contains("another payload"),
        "{refused:?}"
    );
    // The payload that holds the claim is redriven: its own claim is released.
    let second_id = items
        .iter()
        .find(|q| q.raw_body == second)
        .expect("the second payload's quarantine item")
        .id
        .clone();
    let redriven = quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        &queue_url,
        &second_id,
        quarantine::RedriveOptions::default(),
    )
    .await
    .expect("redrive");
    assert!(redriven.released_claim);
}

async fn when_an_unclaimed_fact_is_redriven_should_judge_it_by_the_recorded_claim_retention(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = queue(&sqs, "redrive-retention", true).await;
    // A consumer deployed with one day of claim retention quarantines a fact it did not claim
    // (as `event_time_in_future` is): a claim made since may already have expired.
    let day = std::time::Duration::from_secs(86_400);
    let store = ServicingStore::new(
        servicing.client.clone(),
        StoreConfig {
            claim_retention: day,
            ..StoreConfig::new(&servicing.table, "account-state")
        },
    );
    let body = usd_fee(100);
    let source = fee_source();
    let entry = QuarantineEntry {
        source: Some(&source),
        ..QuarantineEntry::new("m-future", &body, "event_time_in_future", "too far ahead")
    };
    store.quarantine(&entry).await.expect("quarantine");
    let records = servicing.quarantine().await;
    assert_eq!(records[0].claim_retention_secs, Some(86_400));
    let id = format!("{}|{}", records[0].pk, records[0].sk);
    let redrive = |options: quarantine::RedriveOptions| {
        let (servicing, sqs, queue_url, id) = (&servicing, &sqs, &queue_url, &id);
        async move {
            quarantine::redrive(
                &servicing.client,
                sqs,
                &servicing.table,
                queue_url,
                id,
                options,
            )
            .await
        }
    };
    // Judged by the recorded day, not by a 35-day default: refused.
    let refused = redrive(quarantine::RedriveOptions::default()).await;
    assert!(
        refused
            .as_ref()
            .expect_err("refused")
            .to_string()
            .contains("may have been applied since"),
        "{refused:?}"
    );
    // An explicit override decides instead (the operator knows the deployed value).
    let overridden = quarantine::RedriveOptions {
        claim_retention_secs: Some(35 * 86_400),
        ..Default::default()
    };
    assert!(redrive(overridden.clone()).await.is_ok());

    // An item written before items recorded the retention: refused without an override.
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .key("pk", AttributeValue::S(records[0].pk.clone()))
        .key("sk", AttributeValue::S(records[0].sk.clone()))
        .update_expression("REMOVE claimRetentionSecs")
        .send()
        .await
        .expect("as an old item");
    let refused = redrive(quarantine::RedriveOptions::default()).await;
    assert!(
        refused
            .as_ref()
            .expect_err("refused")
            .to_string()
            .contains("records no claim retention"),
        "{refused:?}"
    );
    assert!(redrive(overridden).await.is_ok());
}

/// Two `ledgerctl send` runs of distinct lines within one second: both are delivered, each under
/// its identity (`sourceSystem:sourceEventId`) in its account's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_distinct_lines_are_sent_within_one_second_should_deliver_every_one() {
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = queue(&sqs, "send-dedup", true).await;
    let line = |id: &str, account: &str| {
        json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": "PAYMENT_SETTLED", "accountId": account,
            "eventTime": "2026-10-20T00:00:00Z", "amountMinor": 10, "currency": "EUR"})
        .to_string()
        .into_bytes()
    };
    for (id, account) in [("p-1", "acc_1"), ("p-2", "acc_1"), ("p-3", "acc_2")] {
        let sent = servicing_ops::replay::send(&sqs, &queue_url, &[line(id, account)], "test")
            .await
            .expect("send");
        assert_eq!(sent, 1);
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        let out = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        for m in out.messages() {
            let attr = |name| {
                m.attributes()
                    .and_then(|a| a.get(&name).cloned())
                    .unwrap_or_default()
            };
            got.push((
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageDeduplicationId),
                attr(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId),
            ));
            sqs.delete_message()
                .queue_url(&queue_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
        if got.len() == 3 {
            break;
        }
    }
    got.sort();
    assert_eq!(
        got,
        [
            ("psp:p-1".to_owned(), "acc_1".to_owned()),
            ("psp:p-2".to_owned(), "acc_1".to_owned()),
            ("psp:p-3".to_owned(), "acc_2".to_owned()),
        ]
    );
}

/// TTL deletes an item past its `expiresAt` lazily (up to days later on AWS, never on DynamoDB
/// Local): until then it is still in the table. Every read that counts or lists records must
/// treat it as gone, or what a report says would depend on when TTL ran. One account applied
/// with the usual retention, one whose records (all but its payments and reversals, kept for
/// good) are past their expiry.
async fn when_a_record_is_past_its_expiry_should_be_counted_and_listed_nowhere(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    servicing.deliver_fixture("basic.jsonl").await;
    let mut expiring = servicing.config();
    expiring.claim_retention = std::time::Duration::ZERO;
    let messages: Vec<_> = fixture("delinquent.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| sqs_message(&format!("expiring-{i}"), l, 1))
        .collect();
    servicing.handler_with(expiring).process(&messages).await;
    // `expiresAt` is in whole seconds and a record is alive through its second.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;

    let now = servicing_ops::epoch_seconds();
    let records = servicing.claims().await;
    let alive = |c: &&servicing_store::schema::ClaimRecord| c.expires_at.is_none_or(|at| at >= now);
    let expired: Vec<String> = records
        .iter()
        .filter(|c| !alive(c))
        .map(|c| c.pk.clone())
        .collect();
    assert!(
        expired.len() >= 3 && records.iter().filter(alive).count() >= 8,
        "the expired account's facts past their expiry, the other's alive: {expired:?}"
    );

    let window = (0, now + 3_600);
    servicing.keep_record_log().await;
    let reconciliation = servicing_ops::reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        (now - 3_600, now + 3_600),
        None,
    )
    .await
    .expect("reconcile");
    let applied_alive = records
        .iter()
        .filter(alive)
        .filter(|c| c.consumer == "account-state" && c.verdict == "APPLIED")
        .count() as u64;
    assert_eq!(reconciliation.applied, applied_alive, "{reconciliation:?}");

    let carriers =
        servicing_ops::republish::carriers(&servicing.client, &servicing.table, window, None)
            .await
            .expect("carriers");
    let mut listed: Vec<&str> = carriers.iter().map(|c| c.pk.as_str()).collect();
    listed.sort_unstable();
    let mut carrying_alive: Vec<&str> = records
        .iter()
        .filter(alive)
        .filter(|c| !c.events().expect("events").is_empty())
        .map(|c| c.pk.as_str())
        .collect();
    carrying_alive.sort_unstable();
    assert_eq!(
        listed, carrying_alive,
        "republish lists exactly the live records"
    );

    let events =
        ledgerctl::ledger_backfill::published_events(&servicing.client, &servicing.table, &[])
            .await
            .expect("published events");
    let expired_events: Vec<String> = records
        .iter()
        .filter(|c| !alive(c))
        .flat_map(|c| c.events().expect("events"))
        .filter_map(|e| e.detail["eventId"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !expired_events.is_empty(),
        "the expired facts carried events"
    );
    assert!(
        !events.iter().any(|e| expired_events
            .iter()
            .any(|id| e.detail["eventId"] == id.as_str())),
        "the backfill reads expired records' events"
    );

    // The incident report reads the records of the facts it was asked about by key: an expired
    // one is not there, whether or not TTL has swept it yet.
    let wanted = servicing_ops::incident::stored::Wanted {
        consumer: "account-state".into(),
        identities: records
            .iter()
            .filter(|c| c.consumer == "account-state")
            .map(|c| (c.source_system.clone(), c.source_event_id.clone()))
            .collect(),
        ..Default::default()
    };
    let stored =
        servicing_ops::incident::stored::read(&servicing.client, &servicing.table, &wanted)
            .await
            .expect("incident records");
    let mut read: Vec<&str> = stored.claims.values().map(|c| c.pk.as_str()).collect();
    read.sort_unstable();
    let mut alive_claims: Vec<&str> = records
        .iter()
        .filter(alive)
        .filter(|c| c.consumer == "account-state")
        .map(|c| c.pk.as_str())
        .collect();
    alive_claims.sort_unstable();
    assert_eq!(
        read, alive_claims,
        "the incident reads exactly the live records"
    );

    let store = servicing.store("test-reader");
    let account = servicing_domain::AccountId::parse("acc_7001").expect("account");
    for detail_type in [
        servicing_domain::outbox::detail_types::FEE_ASSESSED,
        servicing_domain::outbox::detail_types::INTEREST_ACCRUED,
        servicing_domain::outbox::detail_types::INSTALLMENT_DUE,
    ] {
        let listed = servicing_ops::report::outbox_details(&store, &account, detail_type)
            .await
            .expect("details");
        assert!(
            listed.is_empty(),
            "{detail_type} of expired records listed: {listed:?}"
        );
    }
    let kept = servicing_ops::report::outbox_details(
        &store,
        &servicing_domain::AccountId::parse("acc_4002").expect("account"),
        servicing_domain::outbox::detail_types::FEE_ASSESSED,
    )
    .await
    .expect("details");
    assert_eq!(kept.len(), 1, "the other account's fee is listed");
}
