//! The scheduled reconciler's daily run: take off the parked facts that will not apply, then
//! reconcile the last window of account-state, as metrics that alarm when non-zero.

use std::time::Duration;

use serde_json::{Value, json};
pub use servicing_settings::FromSettings;
use servicing_settings::{ConfigError, Settings};
use servicing_store::{ServicingStore, StoreConfig};

/// The consumer whose facts it reconciles (and whose parked facts it expires).
const RECONCILED: &str = "account-state";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// The reconciled window, ending now (`WINDOW_HOURS`, default 25: daily runs overlap).
    pub window_hours: u64,
    /// How long a fact may stay parked (`PARK_RETENTION_DAYS`, 1..=365, default 7).
    pub park_retention: Duration,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            window_hours: settings.number("WINDOW_HOURS", 25, 1..=24 * 400)?,
            park_retention: settings.days("PARK_RETENTION_DAYS", 7, 1..=365)?,
        })
    }
}

impl Config {
    /// The store the run writes through: account-state's items (its parked facts and their
    /// quarantine).
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig::new(&self.table, RECONCILED)
    }
}

/// A run's figures, as EMF metrics (`ReconciliationProblems` and `ParkedExpired` alarm).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub reconciliation_problems: u64,
    pub reconciled_applied: u64,
    pub parked_expired: u64,
    pub still_parked: u64,
}

impl RunCounts {
    pub fn metrics(&self) -> [(&'static str, u64); 4] {
        [
            ("ReconciliationProblems", self.reconciliation_problems),
            ("ReconciledApplied", self.reconciled_applied),
            ("ParkedExpired", self.parked_expired),
            ("StillParked", self.still_parked),
        ]
    }
}

/// One run: expiry of parked facts, then the window's reconciliation; emits
/// `ReconciliationProblems`, `ReconciledApplied`, `ParkedExpired` and `StillParked`, and answers
/// what it found.
pub async fn run(config: &Config, store: &ServicingStore) -> anyhow::Result<Value> {
    let now = crate::epoch_seconds();
    let expiry = crate::parked::expire(store, now, config.park_retention).await?;
    if expiry.missing + expiry.mismatched > 0 {
        tracing::warn!(
            alert = "parked_expired",
            missing = expiry.missing,
            mismatched = expiry.mismatched,
            "parked facts quarantined"
        );
    }
    let window_secs = config.window_hours as i64 * 3600;
    let report = crate::reconcile::reconcile(
        store.client(),
        &config.table,
        RECONCILED,
        (now - window_secs, now + 1),
        None,
    )
    .await?;
    for line in report.lines() {
        tracing::info!(line, "reconciliation");
    }
    let counts = RunCounts {
        reconciliation_problems: report.problems.len() as u64,
        reconciled_applied: report.applied,
        parked_expired: expiry.missing + expiry.mismatched,
        still_parked: expiry.still_parked,
    };
    servicing_telemetry::emit("reconciler", &counts.metrics());
    Ok(json!({
        "holds": report.holds(),
        "problems": report.problems,
        "parkedExpired": {"missing": expiry.missing, "mismatched": expiry.mismatched},
        "stillParked": expiry.still_parked,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_window_or_retention_is_out_of_range_should_refuse_to_start() {
        for (name, value) in [("WINDOW_HOURS", "0"), ("PARK_RETENTION_DAYS", "366")] {
            let err = Config::from_lookup(|k| match k {
                "TABLE_NAME" => Some("t".into()),
                k if k == name => Some(value.into()),
                _ => None,
            })
            .expect_err(name);
            assert!(
                err.to_string().starts_with(&format!("{name} must be")),
                "{err}"
            );
        }
        let config = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into())).expect("ok");
        assert_eq!(
            (config.window_hours, config.park_retention),
            (25, Duration::from_secs(7 * 86_400))
        );
    }
}
