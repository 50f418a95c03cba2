//! The collections consumer's settings, read once at its cold start.

use std::time::Duration;

use servicing_settings::{ConfigError, FromSettings, Settings};
use servicing_store::StoreConfig;

use crate::CONSUMER;

/// How long one notification call may take (the lease on an action is twice this plus 2 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// The customer-notification endpoint (`NOTIFICATION_URL`, required).
    pub notification_url: String,
    /// Whether the receiver honours `Idempotency-Key` (`NOTIFICATION_DEDUPLICATES`, default
    /// true). When it does not, an attempt whose outcome is unknown is never simply repeated:
    /// the next one asks the status endpoint first.
    pub receiver_deduplicates: bool,
    /// Where the receiver says whether it has an action (`NOTIFICATION_STATUS_URL`: `GET
    /// <url>/<actionId>` answers 200 when it has it, 404 when not); required when the receiver
    /// does not deduplicate.
    pub status_url: Option<String>,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let receiver_deduplicates = settings.flag("NOTIFICATION_DEDUPLICATES", true)?;
        let status_url = settings.optional("NOTIFICATION_STATUS_URL");
        if !receiver_deduplicates && status_url.is_none() {
            return Err(ConfigError::Missing("NOTIFICATION_STATUS_URL"));
        }
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            notification_url: settings.required("NOTIFICATION_URL")?,
            receiver_deduplicates,
            status_url,
        })
    }
}

impl Config {
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig::new(&self.table, CONSUMER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_notification_url_is_missing_should_refuse_to_start() {
        let err = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into()));
        assert_eq!(err, Err(ConfigError::Missing("NOTIFICATION_URL")));
    }
}
