//! Deploying the project's function binaries to MiniStack as `provided.al2023` Lambdas.

use std::path::PathBuf;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{Environment, FunctionCode, Runtime};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::unique_name;

/// A function binary built by `infra/test.sh` (`cargo build -p <name>`).
pub fn bootstrap_binary(name: &str) -> PathBuf {
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

/// A deployment package: the binary as an executable `bootstrap` at the root of a zip.
pub fn package(binary: &PathBuf) -> Vec<u8> {
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

/// Creates a function from the binary `crate_name`; returns its (unique) name.
pub async fn deploy(
    lambda: &aws_sdk_lambda::Client,
    crate_name: &str,
    env: &[(&str, &str)],
) -> String {
    let name = unique_name(crate_name);
    let mut environment = Environment::builder().variables("RUST_LOG", "info");
    for (k, v) in env {
        environment = environment.variables(*k, *v);
    }
    lambda
        .create_function()
        .function_name(&name)
        .runtime(Runtime::Providedal2023)
        .handler("bootstrap")
        .role(format!("arn:aws:iam::000000000000:role/{crate_name}"))
        .timeout(30)
        .code(
            FunctionCode::builder()
                .zip_file(Blob::new(package(&bootstrap_binary(crate_name))))
                .build(),
        )
        .environment(environment.build())
        .send()
        .await
        .expect("create function");
    name
}

/// Creates a queue (FIFO when `fifo`, configured as the deployed servicing queue); returns
/// `(url, arn)`.
pub async fn queue(sqs: &aws_sdk_sqs::Client, prefix: &str, fifo: bool) -> (String, String) {
    let mut request = sqs
        .create_queue()
        .attributes(QueueAttributeName::VisibilityTimeout, "30");
    request = if fifo {
        request
            .queue_name(format!("{}.fifo", unique_name(prefix)))
            .attributes(QueueAttributeName::FifoQueue, "true")
            // As template.yaml's ServicingQueue: high-throughput FIFO, no content-based
            // deduplication (every send must carry its deduplication id).
            .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
            .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
    } else {
        request.queue_name(unique_name(prefix))
    };
    let url = request.send().await.expect("queue").queue_url.expect("url");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("attributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("arn");
    (url, arn)
}

/// Messages visible or in flight.
pub async fn pending(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("attributes");
    attrs
        .attributes()
        .map(|a| a.values().filter_map(|v| v.parse::<u64>().ok()).sum())
        .unwrap_or_default()
}
