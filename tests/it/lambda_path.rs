//! The real Lambda path on MiniStack: function binaries deployed as `provided.al2023` Lambdas,
//! event source mappings created here, events fed through the queues.
//!
//! 1. account-state alone behind a FIFO queue: a duplicated sample reaches the expected state.
//! 2. The whole pipeline: servicing queue → account-state → stream → outbox-relay → EventBridge →
//!    rule → collections queue → collections → a local HTTP receiver.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_lambda::types::{EventSourcePosition, Filter, FilterCriteria, FunctionResponseType};
use integration_tests::lambda::{deploy, pending, queue};
use integration_tests::routing::{create_bus, route};
use integration_tests::servicing::{Servicing, assert_state_matches, fixture};
use integration_tests::{Engine, unique_name};
use serde_json::{Value, json};

use crate::collections::Receiver;

/// Sends every line in order, grouped by account, with every third line sent again later.
async fn send_duplicated(sqs: &aws_sdk_sqs::Client, queue_url: &str, streams: &[&str]) -> usize {
    let mut sent = 0;
    for name in streams {
        sent += send_lines_duplicated(sqs, queue_url, &sample_lines(name)).await;
    }
    sent
}

fn sample_lines(name: &str) -> Vec<String> {
    fixture(&format!("{name}.jsonl"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The lines in order, then every third again (duplicates).
async fn send_lines_duplicated(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    lines: &[String],
) -> usize {
    let mut stream = lines.to_vec();
    stream.extend(lines.iter().step_by(3).cloned());
    send_in_order(sqs, queue_url, &stream).await;
    stream.len()
}

async fn sqs_mapping(lambda: &aws_sdk_lambda::Client, function: &str, queue_arn: &str) {
    lambda
        .create_event_source_mapping()
        .function_name(function)
        .event_source_arn(queue_arn)
        .batch_size(10)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .send()
        .await
        .expect("SQS event source mapping");
}

/// account-state as the template deploys it: its table and its content key secret (created in
/// the engine's Secrets Manager, read by the function at cold start).
async fn deploy_account_state(
    config: &aws_config::SdkConfig,
    lambda: &aws_sdk_lambda::Client,
    table: &str,
) -> String {
    let secret = aws_sdk_secretsmanager::Client::new(config)
        .create_secret()
        .name(unique_name("content-key"))
        .secret_string(integration_tests::servicing::CONTENT_KEY_SECRET)
        .send()
        .await
        .expect("content key secret");
    let secret_arn = secret.arn().expect("the secret's arn");
    deploy(
        lambda,
        "account-state",
        &[
            ("TABLE_NAME", table),
            ("CONTENT_KEY_SECRET_ARN", secret_arn),
        ],
    )
    .await
}

fn expected(name: &str) -> Value {
    serde_json::from_str(&fixture(&format!("{name}.expected.json"))).expect("expected json")
}

#[tokio::test]
async fn when_a_duplicated_sample_goes_through_the_deployed_lambda_should_reach_the_expected_state()
{
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);

    let (queue_url, queue_arn) = queue(&sqs, "servicing", true).await;
    let function = deploy_account_state(&config, &lambda, &servicing.table).await;
    sqs_mapping(&lambda, &function, &queue_arn).await;
    send_duplicated(&sqs, &queue_url, &["basic"]).await;

    let mut report = Value::Null;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if pending(&sqs, &queue_url).await == 0
            && servicing
                .loan("acc_4002")
                .await
                .is_some_and(|(_, v)| v == 9)
        {
            report = servicing.account_report("acc_4002").await;
            break;
        }
    }
    assert_ne!(
        report,
        Value::Null,
        "the deployed function did not drain the queue in time"
    );
    assert_state_matches(&report, &expected("basic"), "deployed Lambda");
    assert_eq!(
        servicing.items_of_type("CLAIM").await.len(),
        10,
        "9 applied + 1 stale fact claimed once each"
    );
    assert!(servicing.quarantine().await.is_empty());

    // A reversal sent before its payment, in the same FIFO group: parked and applied right
    // after the payment in this delivery round — not after visibility timeouts (30 s here).
    let (principal_before, _) = servicing.loan("acc_4002").await.expect("loan");
    let reversal = json!({"sourceSystem": "psp", "sourceEventId": "rev-early", "eventType": "PAYMENT_REVERSED",
        "accountId": "acc_4002", "eventTime": "2026-10-30T11:00:00Z", "amountMinor": 700, "currency": "EUR",
        "reversalOf": {"sourceSystem": "psp", "sourceEventId": "pay-late"}});
    let payment = json!({"sourceSystem": "psp", "sourceEventId": "pay-late", "eventType": "PAYMENT_SETTLED",
        "accountId": "acc_4002", "eventTime": "2026-10-30T10:00:00Z", "amountMinor": 700, "currency": "EUR"});
    // And an account's fee sent before its opening, on its own FIFO group.
    let fee = json!({"sourceSystem": "fees", "sourceEventId": "fee-early", "eventType": "FEE_ASSESSED",
        "accountId": "acc_fee_fifo", "eventTime": "2026-09-02T00:00:00Z", "amountMinor": 250, "currency": "EUR",
        "feeType": "SERVICE_FEE"});
    let opening = json!({"sourceSystem": "core-banking", "sourceEventId": "open-fee-fifo", "eventType": "LOAN_OPENED",
        "accountId": "acc_fee_fifo", "eventTime": "2026-09-01T00:00:00Z", "principalMinor": 1000, "currency": "EUR"});
    let started = std::time::Instant::now();
    for body in [reversal, payment, fee, opening] {
        let group = body["accountId"].as_str().expect("account").to_owned();
        sqs.send_message()
            .queue_url(&queue_url)
            .message_body(body.to_string())
            .message_group_id(group)
            .message_deduplication_id(unique_name("delivery"))
            .send()
            .await
            .expect("send");
    }
    let (mut reversed, mut fee_applied) = (false, false);
    while started.elapsed() < Duration::from_secs(20) && !(reversed && fee_applied) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        reversed = servicing
            .allocations("acc_4002")
            .await
            .iter()
            .any(|a| a.payment.event_id == "pay-late" && a.reversed_by.is_some());
        fee_applied = servicing
            .loan("acc_fee_fifo")
            .await
            .is_some_and(|(loan, _)| loan.fees_outstanding_minor == 250);
    }
    assert!(reversed, "the early reversal was not applied within 20 s");
    assert!(
        fee_applied,
        "the fee sent before its opening was not applied within 20 s"
    );
    let (principal_after, _) = servicing.loan("acc_4002").await.expect("loan");
    assert_eq!(
        principal_after.principal_outstanding_minor,
        principal_before.principal_outstanding_minor
    );
    assert!(servicing.quarantine().await.is_empty());
}

/// account-state behind a FIFO servicing queue, and the relay on the table's stream publishing to
/// a fresh bus and sending the API's payments to that queue — as `template.yaml` wires them.
struct DeployedServicing {
    servicing_url: String,
    bus: String,
}

/// The relay's stream filters as `template.yaml` declares them (its `- Pattern: '…'` lines:
/// records carrying events, every record for the record log, entries removed), so the deployed-path
/// tests cannot drift from what is deployed.
fn relay_filter_patterns() -> Vec<String> {
    let template = include_str!("../../template.yaml");
    let patterns: Vec<String> = template
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- Pattern: '"))
        .filter_map(|l| l.strip_suffix('\''))
        .map(str::to_owned)
        .collect();
    // Every filter the template declares, each one JSON (a pattern the parser above missed or
    // cut would otherwise deploy a relay that hears less than the template's).
    assert!(
        patterns.len() >= 2,
        "the relay's stream filters in template.yaml: {patterns:?}"
    );
    for pattern in &patterns {
        serde_json::from_str::<Value>(pattern).expect("a stream filter pattern is JSON");
    }
    assert_eq!(
        patterns.len(),
        template.matches("- Pattern:").count(),
        "every `- Pattern:` line of template.yaml read as a quoted pattern"
    );
    patterns
}

async fn deploy_servicing_path(servicing: &Servicing) -> DeployedServicing {
    let config = servicing.engine.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    // account-state behind the FIFO servicing queue.
    let (servicing_url, servicing_arn) = queue(&sqs, "servicing", true).await;
    let account_state = deploy_account_state(&config, &lambda, &servicing.table).await;
    sqs_mapping(&lambda, &account_state, &servicing_arn).await;

    // The relay on the table's stream, filtered as the template filters it (the code filters
    // too).
    let bus = create_bus(&events).await;
    let relay = deploy(
        &lambda,
        "outbox-relay",
        &[
            ("TABLE_NAME", &servicing.table),
            ("EVENT_BUS_NAME", &bus),
            ("SERVICING_QUEUE_URL", &servicing_url),
        ],
    )
    .await;
    let stream_arn = servicing
        .client
        .describe_table()
        .table_name(&servicing.table)
        .send()
        .await
        .expect("describe")
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("stream")
        .to_owned();
    lambda
        .create_event_source_mapping()
        .function_name(&relay)
        .event_source_arn(&stream_arn)
        .starting_position(EventSourcePosition::TrimHorizon)
        .batch_size(100)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .filter_criteria(
            FilterCriteria::builder()
                .set_filters(Some(
                    relay_filter_patterns()
                        .into_iter()
                        .map(|p| Filter::builder().pattern(p).build())
                        .collect(),
                ))
                .build(),
        )
        .send()
        .await
        .expect("stream event source mapping");

    DeployedServicing { servicing_url, bus }
}

#[tokio::test]
async fn when_samples_flow_through_the_whole_deployed_pipeline_should_notify_exactly_once() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    let receiver = Receiver::default();
    let server = receiver.start().await;

    let DeployedServicing { servicing_url, bus } = deploy_servicing_path(&servicing).await;

    // DelinquencyChanged → collections queue → collections → the receiver.
    let (collections_url, collections_arn) = queue(&sqs, "collections", false).await;
    let delinquency =
        json!({"source": ["servicing.account-state"], "detail-type": ["DelinquencyChanged"]});
    route(&events, &bus, &delinquency, &collections_arn).await;
    let collections = deploy(
        &lambda,
        "collections",
        &[
            ("TABLE_NAME", &servicing.table),
            ("NOTIFICATION_URL", &server.uri()),
        ],
    )
    .await;
    sqs_mapping(&lambda, &collections, &collections_arn).await;

    send_duplicated(&sqs, &servicing_url, &["basic"]).await;
    // Business days pass between the delinquent account's worsening and the payment that cures
    // it (its last line): sent at once, the cure would be known when the notice is due, and
    // rightly supersede it (contract: collections episodes). Its day comes once the notice went.
    let delinquent = sample_lines("delinquent");
    let (until_cure, cure) = delinquent.split_at(delinquent.len() - 1);
    send_lines_duplicated(&sqs, &servicing_url, until_cure).await;
    for _ in 0..180 {
        if !receiver.keys().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    send_lines_duplicated(&sqs, &servicing_url, cure).await;

    // Quiet: both queues drained, both accounts at their final version, one notification seen,
    // and nothing more arriving for a few more polls.
    let mut quiet_polls = 0;
    for _ in 0..180 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let drained =
            pending(&sqs, &servicing_url).await == 0 && pending(&sqs, &collections_url).await == 0;
        let settled = servicing
            .loan("acc_4002")
            .await
            .is_some_and(|(_, v)| v == 9)
            && servicing
                .loan("acc_7001")
                .await
                .is_some_and(|(_, v)| v == 5);
        if drained && settled && !receiver.keys().is_empty() {
            quiet_polls += 1;
            if quiet_polls == 6 {
                break;
            }
        } else {
            quiet_polls = 0;
        }
    }
    assert_eq!(
        quiet_polls,
        6,
        "the pipeline did not settle in time; receiver saw {:?}",
        receiver.keys()
    );
    for (account, name) in [("acc_4002", "basic"), ("acc_7001", "delinquent")] {
        assert_state_matches(
            &servicing.account_report(account).await,
            &expected(name),
            &format!("pipeline {name}"),
        );
    }
    let keys = receiver.keys();
    assert_eq!(
        receiver.distinct().len(),
        1,
        "exactly one notification: {keys:?}"
    );
    assert!(
        keys[0].starts_with("collections_notification:acc_7001:DPD_30_59:evt_"),
        "{keys:?}"
    );
    assert!(servicing.quarantine().await.is_empty());
}

/// Before: every API payment went to the servicing queue in one static message group, so one
/// account's payment that keeps failing held back every other account's API payments.
#[tokio::test]
async fn when_one_accounts_api_payment_keeps_failing_should_still_apply_another_accounts() {
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let DeployedServicing { servicing_url, .. } = deploy_servicing_path(&servicing).await;
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    let (stuck, flowing) = ("acc_api_stuck", "acc_api_flowing");

    for account in [stuck, flowing] {
        let opening = json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{account}"),
            "eventType": "LOAN_OPENED", "accountId": account, "eventTime": "2026-09-01T09:00:00Z",
            "principalMinor": 100_000, "currency": "EUR"});
        send_in_order(&sqs, &servicing_url, &[opening.to_string()]).await;
    }
    let opened = wait_for(Duration::from_secs(20), || async {
        servicing.loan(stuck).await.is_some() && servicing.loan(flowing).await.is_some()
    })
    .await;
    assert!(opened, "the accounts were not opened within 20 s");

    // The stuck account's loan item no longer decodes (its version is not a number): a cached
    // state's version-checked write is refused, the read that follows finds corrupt data, and
    // account-state retries the message (corrupt stored data waits for an operator).
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .key("pk", AttributeValue::S(format!("LOAN#{stuck}")))
        .key("sk", AttributeValue::S("STATE".into()))
        .update_expression("SET version = :bad")
        .expression_attribute_values(":bad", AttributeValue::S("not a number".into()))
        .send()
        .await
        .expect("corrupt the stuck loan");

    // Both payments accepted by the API (202), the stuck account's first.
    for (account, key) in [(stuck, "pay-stuck"), (flowing, "pay-flowing")] {
        let body = json!({"accountId": account, "amountMinor": 1_000, "currency": "EUR", "reference": key});
        let response = api
            .handle(integration_tests::api_gateway::event(
                "POST",
                "/v1/payments",
                "POST /v1/payments",
                Some("arn:aws:iam::123456789012:user/back-office"),
                Some(key),
                Some(&body.to_string()),
            ))
            .await;
        assert_eq!(response.status().as_u16(), 202, "{account}");
    }

    let applied = wait_for(Duration::from_secs(30), || async {
        servicing.allocations(flowing).await.len() == 1
    })
    .await;
    assert!(
        applied,
        "the flowing account's API payment was not applied within 30 s"
    );
    // The stuck payment is still there, retried — not lost, not applied, not quarantined.
    assert!(pending(&sqs, &servicing_url).await >= 1);
    assert!(servicing.quarantine().await.is_empty());
    let stuck_claims = servicing
        .claims()
        .await
        .into_iter()
        .filter(|c| c.account_id == stuck)
        .count();
    assert_eq!(
        stuck_claims, 1,
        "only the stuck account's opening is claimed"
    );
}

/// Sends `bodies` to the FIFO servicing queue in order, grouped by account; each send has a
/// distinct deduplication id, so the queue never hides a duplicate from the consumer.
async fn send_in_order(sqs: &aws_sdk_sqs::Client, queue_url: &str, bodies: &[String]) {
    for body in bodies {
        let account = serde_json::from_str::<Value>(body).expect("json")["accountId"]
            .as_str()
            .expect("account")
            .to_owned();
        sqs.send_message()
            .queue_url(queue_url)
            .message_body(body)
            .message_group_id(account)
            .message_deduplication_id(unique_name("delivery"))
            .send()
            .await
            .expect("send");
    }
}

/// Polls `done` every 250 ms until it holds or `limit` passes; whether it held.
async fn wait_for<F, Fut>(limit: Duration, done: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}
