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
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            notification_url: settings.required("NOTIFICATION_URL")?,
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
