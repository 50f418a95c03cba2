//! The one place that builds the AWS SDK configuration.
//!
//! The SDK crates are compiled without their default HTTP client (which would pull a second
//! HTTP/TLS stack); this installs hyper 1 + rustls with ring instead. Endpoints come from the
//! standard variables (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`), so nothing here knows
//! whether it talks to AWS or to a local engine.

use aws_config::{BehaviorVersion, ConfigLoader, SdkConfig};
use aws_smithy_http_client::{
    Builder,
    tls::{self, rustls_provider::CryptoMode},
};

/// A config loader with the project's HTTP client; callers may add overrides before `load()`.
pub fn loader() -> ConfigLoader {
    let http_client = Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest()).http_client(http_client)
}

/// The configuration from the environment (region, credentials, endpoints).
pub async fn load() -> SdkConfig {
    loader().load().await
}

/// A required setting of a function: present and non-empty, else an error naming it, so the
/// cold start fails loudly instead of running misconfigured.
pub fn required_env(name: &str) -> Result<String, String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{name} is required"))
}
