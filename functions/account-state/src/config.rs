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
    /// How long a claim deduplicates (`CLAIM_RETENTION_DAYS`, default 35; at least
    /// `PARK_RETENTION_DAYS` + `DEAD_LETTER_RETENTION_DAYS` + 7, else the start fails).
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

/// Days a claim must outlive parking and the dead-letter queue by: a fact that comes back on
/// the last day of either still meets its claim (`PARK_RETENTION_DAYS` and
/// `DEAD_LETTER_RETENTION_DAYS` above).
pub const CLAIM_RETENTION_MARGIN_DAYS: u64 = 7;

/// The deployment rule of the contract ("How long a fact is remembered"): a fact comes back
/// after being parked (`PARK_RETENTION_DAYS`, the reconciler's, default 7) or dead-lettered
/// (`DEAD_LETTER_RETENTION_DAYS`, the servicing DLQ's `MessageRetentionPeriod`, default and at
/// most 14), so its claim must last at least both plus a margin; a shorter one lets a
/// redelivery after the claim's expiry apply the fact (a fee, an interest charge) again.
/// Checked at cold start, so a deployment that breaks it fails loudly instead of running.
fn check_claim_outlives_redeliveries(settings: &Settings) -> Result<(), ConfigError> {
    let claim = settings.number("CLAIM_RETENTION_DAYS", 35, 1..=3650)?;
    let park = settings.number("PARK_RETENTION_DAYS", 7, 1..=365)?;
    let dead_letter = settings.number("DEAD_LETTER_RETENTION_DAYS", 14, 1..=14)?;
    let needed = park + dead_letter + CLAIM_RETENTION_MARGIN_DAYS;
    if claim < needed {
        return Err(ConfigError::Invalid {
            name: "CLAIM_RETENTION_DAYS",
            rule: format!(
                "at least PARK_RETENTION_DAYS ({park}) + DEAD_LETTER_RETENTION_DAYS ({dead_letter}) \
                 + a {CLAIM_RETENTION_MARGIN_DAYS}-day margin = {needed} days (a fact parked or \
                 dead-lettered that long comes back after a shorter claim has expired, and applies \
                 twice)"
            ),
            value: claim.to_string(),
        });
    }
    Ok(())
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let mut config = Self::for_table(settings.required("TABLE_NAME")?);
        config.claim_retention = settings.days("CLAIM_RETENTION_DAYS", 35, 1..=3650)?;
        check_claim_outlives_redeliveries(settings)?;
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

    fn with(pairs: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        let pairs = pairs.to_vec();
        Config::from_lookup(move |k| {
            std::iter::once(("TABLE_NAME", "t"))
                .chain(pairs.iter().copied())
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_owned())
        })
    }

    #[test]
    fn when_the_claim_retention_does_not_outlive_parking_and_dead_letters_should_refuse_to_start() {
        // 7 parked + 14 dead-lettered + a 7-day margin = 28: a claim of 27 days could expire
        // while the fact may still come back, and a resend would apply it twice.
        for (pairs, needed) in [
            (&[("CLAIM_RETENTION_DAYS", "27")][..], 28),
            (
                &[
                    ("CLAIM_RETENTION_DAYS", "35"),
                    ("PARK_RETENTION_DAYS", "30"),
                ][..],
                51,
            ),
            (
                &[
                    ("CLAIM_RETENTION_DAYS", "20"),
                    ("PARK_RETENTION_DAYS", "1"),
                    ("DEAD_LETTER_RETENTION_DAYS", "14"),
                ][..],
                22,
            ),
        ] {
            let err = with(pairs).expect_err("claim retention too short");
            let text = err.to_string();
            assert!(
                text.starts_with("CLAIM_RETENTION_DAYS must be at least PARK_RETENTION_DAYS")
                    && text.contains("DEAD_LETTER_RETENTION_DAYS (14)")
                    && text.contains("7-day margin")
                    && text.contains(&format!("= {needed} days")),
                "{text}"
            );
            let park = pairs
                .iter()
                .find(|(k, _)| *k == "PARK_RETENTION_DAYS")
                .map_or("7", |(_, v)| v);
            assert!(
                text.contains(&format!("PARK_RETENTION_DAYS ({park})")),
                "{text}"
            );
        }
        // At the bound, and the defaults (35 > 7 + 14 + 7), start.
        assert!(with(&[("CLAIM_RETENTION_DAYS", "28")]).is_ok());
        assert!(
            with(&[
                ("CLAIM_RETENTION_DAYS", "35"),
                ("PARK_RETENTION_DAYS", "14")
            ])
            .is_ok()
        );
        assert!(with(&[]).is_ok());
        // The dead-letter queue keeps messages at most 14 days (SQS's maximum).
        assert!(
            with(&[("DEAD_LETTER_RETENTION_DAYS", "15")])
                .expect_err("over SQS's maximum")
                .to_string()
                .starts_with("DEAD_LETTER_RETENTION_DAYS must be a whole number in 1..=14")
        );
    }

    #[test]
    fn when_only_the_table_is_set_should_use_the_defaults() {
        let c = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into())).expect("valid");
        assert_eq!(c.claim_retention, DEFAULT_CLAIM_RETENTION);
        assert_eq!(c.max_commit_attempts, 5);
    }
}
