//! The payments API's settings, read once at its cold start.

use std::time::Duration;

use servicing_settings::{ConfigError, FromSettings, Settings};
use servicing_store::StoreConfig;

/// The store's consumer name: it scopes nothing the API writes (its records are keyed by the
/// caller), but names the API in quarantine and logs.
pub const CONSUMER: &str = "payments-api";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// How long an `Idempotency-Key` replays its response (`IDEMPOTENCY_RETENTION_DAYS`,
    /// 1..=3650, default 35); after it the key is refused, never reused.
    pub idempotency_retention: Duration,
    /// How far ahead of the server's clock a payment's `eventTime` may be
    /// (`MAX_EVENT_TIME_SKEW_SECONDS`, 0..=2592000, default 86400 = 24 h): account-state's
    /// setting, so the API never accepts what the consumer would quarantine.
    pub max_event_time_skew: Duration,
    /// The base of the problem `type` URIs (`PROBLEM_TYPE_BASE_URL`, https; default
    /// `problem::DEFAULT_TYPE_BASE`).
    pub problem_type_base: Option<String>,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            idempotency_retention: settings.days("IDEMPOTENCY_RETENTION_DAYS", 35, 1..=3650)?,
            // The same name, default and range as account-state's (account-state config).
            max_event_time_skew: Duration::from_secs(settings.number(
                "MAX_EVENT_TIME_SKEW_SECONDS",
                servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW.as_secs(),
                0..=30 * 86_400,
            )?),
            problem_type_base: match settings.optional("PROBLEM_TYPE_BASE_URL") {
                Some(url) if !url.starts_with("https://") => {
                    return Err(ConfigError::Invalid {
                        name: "PROBLEM_TYPE_BASE_URL",
                        rule: "an https URL".into(),
                        value: url,
                    });
                }
                other => other,
            },
        })
    }
}

impl Config {
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            claim_retention: self.idempotency_retention,
            ..StoreConfig::new(&self.table, CONSUMER)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_retention_is_out_of_range_should_refuse_to_start() {
        let err = Config::from_lookup(|k| match k {
            "TABLE_NAME" => Some("t".into()),
            "IDEMPOTENCY_RETENTION_DAYS" => Some("0".into()),
            _ => None,
        })
        .expect_err("0 days");
        assert!(
            err.to_string()
                .starts_with("IDEMPOTENCY_RETENTION_DAYS must be"),
            "{err}"
        );
        assert_eq!(
            Config::from_lookup(|_| None),
            Err(ConfigError::Missing("TABLE_NAME"))
        );
    }

    #[test]
    fn when_the_event_time_skew_is_set_should_read_account_states_setting() {
        let config = Config::from_lookup(|k| match k {
            "TABLE_NAME" => Some("t".into()),
            "MAX_EVENT_TIME_SKEW_SECONDS" => Some("3600".into()),
            _ => None,
        })
        .expect("valid");
        assert_eq!(config.max_event_time_skew, Duration::from_secs(3600));
        let default =
            Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into())).expect("valid");
        assert_eq!(
            default.max_event_time_skew,
            servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW
        );
        for bad in ["2592001", "-1", "1h"] {
            let err = Config::from_lookup(|k| match k {
                "TABLE_NAME" => Some("t".into()),
                "MAX_EVENT_TIME_SKEW_SECONDS" => Some(bad.into()),
                _ => None,
            })
            .expect_err(bad);
            assert!(
                err.to_string().starts_with(
                    "MAX_EVENT_TIME_SKEW_SECONDS must be a whole number in 0..=2592000"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn when_only_the_table_is_set_should_keep_keys_35_days() {
        let config =
            Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into())).expect("valid");
        assert_eq!(
            config.store_config().claim_retention,
            servicing_store::DEFAULT_CLAIM_RETENTION
        );
    }
}
