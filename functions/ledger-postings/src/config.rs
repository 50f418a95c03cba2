//! The ledger-postings consumer's settings, read once at its cold start.

use servicing_settings::{ConfigError, FromSettings, Settings};
use servicing_store::StoreConfig;

use crate::CONSUMER;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
        })
    }
}

impl Config {
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig::new(&self.table, CONSUMER)
    }
}
