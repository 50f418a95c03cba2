//! The relay's settings, read once at its cold start.

use servicing_settings::{ConfigError, FromSettings, Settings};
use servicing_store::StoreConfig;

use crate::CONSUMER;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required): where unpublishable records are quarantined.
    pub table: String,
    /// The bus every outbox event is published to (`EVENT_BUS_NAME`, required).
    pub event_bus: String,
    /// The FIFO servicing queue API payments are applied through (`SERVICING_QUEUE_URL`,
    /// required: without it they would be accepted and never applied).
    pub servicing_queue_url: String,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            event_bus: settings.required("EVENT_BUS_NAME")?,
            servicing_queue_url: settings.required("SERVICING_QUEUE_URL")?,
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
    fn when_the_servicing_queue_is_missing_should_refuse_to_start() {
        let err = Config::from_lookup(|k| match k {
            "TABLE_NAME" => Some("t".into()),
            "EVENT_BUS_NAME" => Some("bus".into()),
            _ => None,
        });
        assert_eq!(err, Err(ConfigError::Missing("SERVICING_QUEUE_URL")));
    }
}
