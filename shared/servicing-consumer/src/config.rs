//! Configuration, read once at cold start. Missing or malformed required settings fail the
//! start loudly instead of falling back to a guess.

use std::time::Duration;

use servicing_settings::{FromSettings, Settings, narrow};
use servicing_store::{DEFAULT_CLAIM_RETENTION, MAX_TRANSACTION_ITEMS, StoreConfig};

pub use servicing_settings::ConfigError;

#[derive(Debug, Clone)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// How long a claim deduplicates (`CLAIM_RETENTION_DAYS`, default 35).
    pub claim_retention: Duration,
    /// How far ahead of this consumer's clock an `eventTime` may be before the event is
    /// quarantined unclaimed (`MAX_EVENT_TIME_SKEW_SECONDS`, default 86400 = 24 h).
    pub max_event_time_skew: Duration,
    /// Commits tried per group of events when other writers win (`MAX_COMMIT_ATTEMPTS`,
    /// default 5). Rounds that only drop refused claims from a group do not count.
    pub max_commit_attempts: u32,
    /// Base of the jittered backoff between those attempts (`CONFLICT_BACKOFF_MS`, default 10).
    pub conflict_backoff: Duration,
    /// Accounts processed side by side within a batch (`ACCOUNT_CONCURRENCY`, default 100: all
    /// of a batch). Their commits share transactions, so this bounds the reads of a cold
    /// instance more than the writes.
    pub account_concurrency: usize,
    /// Account states kept warm between invocations (`STATE_CACHE_CAPACITY`, default 10000).
    pub state_cache_capacity: usize,
    /// Items in one transaction, where a batch's events are committed together (an account's
    /// events, and the accounts' commits side by side) (`MAX_TRANSACTION_ITEMS`, 1..=100,
    /// default 100). 1 commits every event on its own.
    pub max_transaction_items: usize,
}

impl Config {
    pub fn for_table(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            claim_retention: DEFAULT_CLAIM_RETENTION,
            max_event_time_skew: servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW,
            max_commit_attempts: 5,
            conflict_backoff: Duration::from_millis(10),
            account_concurrency: 100,
            state_cache_capacity: 10_000,
            max_transaction_items: MAX_TRANSACTION_ITEMS,
        }
    }

    /// The store settings of `consumer` that follow from this configuration.
    pub fn store_config(&self, consumer: &str) -> StoreConfig {
        StoreConfig {
            claim_retention: self.claim_retention,
            max_transaction_items: self.max_transaction_items,
            ..StoreConfig::new(&self.table, consumer)
        }
    }
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let mut config = Self::for_table(settings.required("TABLE_NAME")?);
        config.claim_retention = settings.days("CLAIM_RETENTION_DAYS", 35, 1..=3650)?;
        config.max_event_time_skew = Duration::from_secs(settings.number(
            "MAX_EVENT_TIME_SKEW_SECONDS",
            86_400,
            0..=30 * 86_400,
        )?);
        config.max_commit_attempts = narrow(settings.number("MAX_COMMIT_ATTEMPTS", 5, 1..=100)?);
        config.conflict_backoff =
            Duration::from_millis(settings.number("CONFLICT_BACKOFF_MS", 10, 0..=60_000)?);
        config.account_concurrency =
            narrow(settings.number("ACCOUNT_CONCURRENCY", 100, 1..=10_000)?);
        config.state_cache_capacity =
            narrow(settings.number("STATE_CACHE_CAPACITY", 10_000, 0..=10_000_000)?);
        config.max_transaction_items = narrow(settings.number(
            "MAX_TRANSACTION_ITEMS",
            MAX_TRANSACTION_ITEMS as u64,
            1..=MAX_TRANSACTION_ITEMS as u64,
        )?);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_table_name_is_missing_should_fail() {
        assert!(matches!(
            Config::from_lookup(|_| None),
            Err(ConfigError::Missing("TABLE_NAME"))
        ));
    }

    #[test]
    fn when_a_number_is_malformed_should_name_it() {
        let err = Config::from_lookup(|k| match k {
            "TABLE_NAME" => Some("t".into()),
            "MAX_COMMIT_ATTEMPTS" => Some("five".into()),
            _ => None,
        })
        .expect_err("malformed");
        assert!(err.to_string().starts_with("MAX_COMMIT_ATTEMPTS must be"));
    }

    #[test]
    fn when_a_number_would_overflow_or_truncate_should_refuse_it() {
        for (name, value) in [
            ("CLAIM_RETENTION_DAYS", "213503982334601"),
            ("MAX_COMMIT_ATTEMPTS", "4294967296"),
            ("MAX_TRANSACTION_ITEMS", "101"),
            ("ACCOUNT_CONCURRENCY", "0"),
        ] {
            let err = Config::from_lookup(|k| match k {
                "TABLE_NAME" => Some("t".into()),
                k if k == name => Some(value.into()),
                _ => None,
            })
            .expect_err(name);
            assert!(
                err.to_string()
                    .starts_with(&format!("{name} must be a whole number in")),
                "{err}"
            );
        }
    }

    #[test]
    fn when_only_the_table_is_set_should_use_the_defaults() {
        let c = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into())).expect("valid");
        assert_eq!(c.claim_retention, DEFAULT_CLAIM_RETENTION);
        assert_eq!(c.max_commit_attempts, 5);
    }
}
