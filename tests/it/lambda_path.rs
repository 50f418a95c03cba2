//! The real Lambda path: the account-state binary deployed to MiniStack as a `provided.al2023`
//! function behind an SQS event source mapping (created here, from the test), fed a duplicated
//! sample stream through the queue.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{Environment, FunctionResponseType, Runtime};
use aws_sdk_sqs::types::QueueAttributeName;
use integration_tests::servicing::{Servicing, assert_state_matches, fixture};
use integration_tests::{Engine, unique_name};
use serde_json::Value;

/// The function binary, built by `infra/test.sh` (`cargo build -p account-state`).
fn bootstrap_binary(name: &str) -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p {name}` (infra/test.sh does)",
        path.display()
    );
    path
}

/// A Lambda deployment package: the binary as `bootstrap` at the root of a zip, executable.
fn package(binary: &PathBuf) -> Vec<u8> {
    let dir = std::env::temp_dir().join(unique_name("package"));
    std::fs::create_dir_all(&dir).expect("package dir");
    std::fs::copy(binary, dir.join("bootstrap")).expect("copy bootstrap");
    // Python's zipfile keeps the file mode; no zip tool or crate needed.
    let status = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-c", "function.zip", "bootstrap"])
        .current_dir(&dir)
        .status()
        .expect("python3");
    assert!(status.success(), "zipping the bootstrap failed");
    let zip = std::fs::read(dir.join("function.zip")).expect("zip");
    let _ = std::fs::remove_dir_all(&dir);
    zip
}

#[tokio::test]
async fn when_a_duplicated_sample_goes_through_the_deployed_lambda_should_reach_the_expected_state()
{
    let config = Engine::MiniStack.sdk_config().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);

    // FIFO, grouped by account: the queue keeps each account's events in order.
    let queue = sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("servicing")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("attributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("arn");

    let function = unique_name("account-state");
    lambda
        .create_function()
        .function_name(&function)
        .runtime(Runtime::Providedal2023)
        .handler("bootstrap")
        .role("arn:aws:iam::000000000000:role/account-state")
        .timeout(30)
        .code(
            aws_sdk_lambda::types::FunctionCode::builder()
                .zip_file(Blob::new(package(&bootstrap_binary("account-state"))))
                .build(),
        )
        .environment(
            Environment::builder()
                .variables("TABLE_NAME", &servicing.table)
                .variables("RUST_LOG", "info")
                .build(),
        )
        .send()
        .await
        .expect("create function");
    lambda
        .create_event_source_mapping()
        .function_name(&function)
        .event_source_arn(&queue_arn)
        .batch_size(10)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .send()
        .await
        .expect("event source mapping");

    // The sample, with every third line delivered again later (a producer retry).
    let sample = fixture("basic.jsonl");
    let lines: Vec<&str> = sample.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut stream: Vec<&str> = lines.clone();
    stream.extend(lines.iter().step_by(3));
    for (i, body) in stream.iter().enumerate() {
        let account = serde_json::from_str::<Value>(body).expect("json")["accountId"]
            .as_str()
            .expect("account")
            .to_owned();
        sqs.send_message()
            .queue_url(&queue)
            .message_body(*body)
            .message_group_id(account)
            // A distinct deduplication id: the queue must not hide the duplicates from us.
            .message_deduplication_id(format!("delivery-{i}"))
            .send()
            .await
            .expect("send");
    }

    // Quiet = the queue is drained and the state stopped moving.
    let mut report = Value::Null;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(&queue)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("attributes");
        let pending: u64 = attrs
            .attributes()
            .map(|a| a.values().filter_map(|v| v.parse::<u64>().ok()).sum())
            .unwrap_or_default();
        if pending == 0
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
    let expected: Value = serde_json::from_str(&fixture("basic.expected.json")).expect("json");
    assert_state_matches(&report, &expected, "deployed Lambda");
    let claims = servicing.items_of_type("CLAIM").await;
    assert_eq!(
        claims.len(),
        10,
        "9 applied + 1 stale fact claimed once each"
    );
    assert!(servicing.quarantine().await.is_empty());
}
