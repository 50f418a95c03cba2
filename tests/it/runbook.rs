//! The runbook's commands against the engines (`servicing_ops::{dlq, republish, actions}`,
//! what `ledgerctl dlq`, `outbox republish` and `actions` run): a FIFO dead-letter queue moved
//! back to its account groups and emptied; the records whose events the relay would publish
//! again, in the window and without a reversal's later mark; actions listed by account and
//! status.

use account_state::MessageResult;
use integration_tests::Engine;
use integration_tests::lambda::queue;
use integration_tests::servicing::{Servicing, sqs_message};
use serde_json::json;

on_both_engines!(
    when_records_carry_events_should_select_those_written_in_the_window_as_their_applying_write
);

fn pay(id: &str, account: &str) -> String {
    json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": "PAYMENT_SETTLED",
        "accountId": account, "eventTime": "2026-10-20T00:00:00Z", "amountMinor": 1000, "currency": "EUR"})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_fifo_dead_letter_queue_is_redriven_should_move_each_message_to_its_group_once() {
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (dlq, _) = queue(&sqs, "runbook-dlq", true).await;
    let (source, _) = queue(&sqs, "runbook-src", true).await;
    for (i, account) in ["acc_1", "acc_2", "acc_1"].iter().enumerate() {
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(pay(&format!("p-{i}"), account))
            .message_group_id(*account)
            .message_deduplication_id(format!("psp:p-{i}"))
            .send()
            .await
            .expect("send");
    }
    let peeked = servicing_ops::dlq::peek(&sqs, &dlq, 10)
        .await
        .expect("peek");
    assert_eq!(peeked.len(), 3, "a look leaves them there");
    // Peeked messages are invisible for 5 s: the redrive receives them after that.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let operator = "arn:aws:iam::111122223333:user/ops-bob";
    let done = servicing_ops::dlq::redrive(&sqs, &dlq, &source, 10, operator)
        .await
        .expect("redrive");
    assert_eq!((done.moved.len(), done.refused.len()), (3, 0));
    let left = servicing_ops::dlq::peek(&sqs, &dlq, 10)
        .await
        .expect("peek");
    assert!(left.is_empty(), "moved, not copied: {left:?}");
    let moved = servicing_ops::dlq::peek(&sqs, &source, 10)
        .await
        .expect("peek");
    let mut groups: Vec<(String, String)> = moved
        .iter()
        .map(|m| {
            let body: serde_json::Value = serde_json::from_str(&m.body).expect("json");
            (
                m.group.clone().unwrap_or_default(),
                body["accountId"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    groups.sort();
    assert_eq!(groups.len(), 3);
    // Each moved message names the operator who moved it.
    assert!(
        moved.iter().all(|m| m.sent_by.as_deref() == Some(operator)),
        "{moved:?}"
    );
    assert!(
        groups.iter().all(|(group, account)| group == account),
        "{groups:?}"
    );
}

async fn when_records_carry_events_should_select_those_written_in_the_window_as_their_applying_write(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let open = json!({"sourceSystem": "core", "sourceEventId": "open-rb", "eventType": "LOAN_OPENED",
        "accountId": "acc_rb", "eventTime": "2026-10-01T09:00:00Z", "principalMinor": 100_000, "currency": "EUR"});
    let reversal = json!({"sourceSystem": "psp", "sourceEventId": "r-1", "eventType": "PAYMENT_REVERSED",
        "accountId": "acc_rb", "eventTime": "2026-10-21T00:00:00Z", "amountMinor": 1000, "currency": "EUR",
        "reversalOf": {"sourceSystem": "psp", "sourceEventId": "p-1"}});
    let bodies = [open.to_string(), pay("p-1", "acc_rb"), reversal.to_string()];
    for (i, body) in bodies.iter().enumerate() {
        let report = handler
            .process(&[sqs_message(&format!("m{i}"), body, 1)])
            .await;
        assert_eq!(report.results[0].1, MessageResult::Applied, "{body}");
    }
    let now = servicing_ops::epoch_seconds();
    let carriers = servicing_ops::republish::carriers(
        &servicing.client,
        &servicing.table,
        (now - 600, now + 60),
        Some("acc_rb"),
    )
    .await
    .expect("carriers");
    assert_eq!(carriers.len(), 3, "the opening, the payment, the reversal");
    for c in &carriers {
        let record: aws_lambda_events::event::dynamodb::EventRecord =
            serde_json::from_value(c.stream_record.clone()).expect("a stream record");
        assert!(
            !record.change.new_image.contains_key("reversedBy"),
            "the applying write's image, not the reversal's mark"
        );
        assert!(record.change.new_image.contains_key("outbox"));
    }
    let none = servicing_ops::republish::carriers(
        &servicing.client,
        &servicing.table,
        (now - 7200, now - 3600),
        None,
    )
    .await
    .expect("carriers");
    assert!(none.is_empty(), "nothing was written an hour ago");
    let other = servicing_ops::republish::carriers(
        &servicing.client,
        &servicing.table,
        (now - 600, now + 60),
        Some("acc_other"),
    )
    .await
    .expect("carriers");
    assert!(other.is_empty());
}
