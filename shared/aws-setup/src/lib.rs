//! The one place that builds the AWS SDK configuration.
//!
//! The SDK crates are compiled without their default HTTP client (which would pull a second
//! HTTP/TLS stack); this installs hyper 1 + rustls with ring instead. Endpoints come from the
//! standard variables (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`), so nothing here knows
//! whether it talks to AWS or to a local engine.

use std::time::Duration;

use aws_config::{BehaviorVersion, ConfigLoader, SdkConfig};
use aws_smithy_http_client::{
    Builder,
    tls::{self, rustls_provider::CryptoMode},
};

/// A config loader with the project's HTTP client and timeouts; callers may add overrides
/// before `load()`.
pub fn loader() -> ConfigLoader {
    let http_client = Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client)
        .timeout_config(timeouts())
}

/// The longest one SDK operation may take, its retries included: what a function that must
/// answer before its deadline reserves for the request it is about to start.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A hung request must not eat the invocation (functions run 30 s): each attempt is cut at
/// 3 s, an operation with its retries at [`OPERATION_TIMEOUT`], so a batch still answers (its
/// failures are retried by SQS) instead of the whole invocation timing out.
pub fn timeouts() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(3))
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// The configuration from the environment (region, credentials, endpoints).
pub async fn load() -> SdkConfig {
    loader().load().await
}
