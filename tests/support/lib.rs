//! Test support: which local engine to talk to, and SDK clients for it.
//!
//! Endpoints come from `.local/engines.env` (written by `infra/engines.sh start`; the test
//! command `infra/test.sh` exports it). A missing variable fails the test loudly: a suite that
//! silently skipped its engine tests would prove nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_config::{Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

/// A local engine under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// AWS's own DynamoDB engine: the reference for DynamoDB semantics.
    DynamoDbLocal,
    /// LocalStack-compatible emulator of the whole stack.
    MiniStack,
}

impl Engine {
    pub fn endpoint(self) -> String {
        let var = match self {
            Engine::DynamoDbLocal => "DYNAMODB_LOCAL_ENDPOINT",
            Engine::MiniStack => "MINISTACK_ENDPOINT",
        };
        std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: start the engines with `infra/engines.sh start` and `source .local/engines.env`, or run `infra/test.sh`")
        })
    }

    /// SDK configuration pointing every service at this engine, with dummy credentials.
    pub async fn sdk_config(self) -> SdkConfig {
        // Local engines under a loaded CI machine can take seconds per request: roomier
        // timeouts than the functions' (the timeout path has its own test).
        let roomy = aws_config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(std::time::Duration::from_secs(60))
            .operation_timeout(std::time::Duration::from_secs(120))
            .build();
        aws_setup::loader()
            .timeout_config(roomy)
            .endpoint_url(self.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "local-engine"))
            .load()
            .await
    }

    pub async fn dynamodb(self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk_config().await)
    }
}

/// A name no other test (or earlier run against a long-lived engine) uses.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub mod api_gateway;
pub mod capacity;
pub mod faults;
pub mod generate;
pub mod lambda;
pub mod routing;
pub mod schema;
pub mod servicing;
pub mod soak;
pub mod streams;

/// xorshift64: reproducible randomness without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound.max(1) as u64) as usize
    }
}

/// Appends a figure line (how many cases a property or sweep ran) to `target/test-figures.txt`,
/// which the test command prints at the end: passing tests' output is captured otherwise.
pub fn record_figure(line: &str) {
    use std::io::Write;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/test-figures.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}
