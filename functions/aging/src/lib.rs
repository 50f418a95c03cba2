//! The daily close (contract: "Business days close, so a silent account still ages"): one
//! `BUSINESS_DAY_CLOSED` per account with an unpaid past-due installment, for the day that just
//! ended, to the FIFO servicing queue (group = account, deduplication id = the close's
//! identity). The accounts come from the sparse arrears index, never from a scan. Safe to run
//! twice for one day: the closes' identities make the second a duplicate. A missed day is
//! caught up by closing the latest one (DPD depends only on the date).

use chrono::{DateTime, Days, NaiveDate, Utc};
use serde_json::{Value, json};
use servicing_domain::{AccountId, ServicingEvent};
pub use servicing_settings::FromSettings;
use servicing_settings::{ConfigError, Settings};
use servicing_store::ServicingStore;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// The FIFO servicing queue (`SERVICING_QUEUE_URL`, required).
    pub servicing_queue_url: String,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            servicing_queue_url: settings.required("SERVICING_QUEUE_URL")?,
        })
    }
}

/// The day that just ended at `now` (UTC).
pub fn day_ended(now: DateTime<Utc>) -> NaiveDate {
    let today = now.date_naive();
    today.checked_sub_days(Days::new(1)).unwrap_or(today)
}

/// What one close did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    pub business_date: NaiveDate,
    /// The accounts past due on that date (closed, or listed on a dry run).
    pub accounts: Vec<AccountId>,
    /// Closes sent to the queue (0 on a dry run).
    pub sent: usize,
}

impl Close {
    pub fn line(&self) -> String {
        format!(
            "business day {} closed: {} accounts in arrears, {} closes sent",
            self.business_date,
            self.accounts.len(),
            self.sent
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "businessDate": self.business_date.format("%Y-%m-%d").to_string(),
            "accountsInArrears": self.accounts.len(),
            "closesSent": self.sent,
        })
    }
}

/// Closes `business_date` for every account past due on it (or lists them, `dry_run`), the
/// closes marked as sent by `sent_by` (the schedule: `aging`; by hand: the operator's ARN).
pub async fn close_day(
    store: &ServicingStore,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    business_date: NaiveDate,
    dry_run: bool,
    sent_by: &str,
) -> anyhow::Result<Close> {
    let accounts = store.accounts_in_arrears(business_date).await?;
    let mut sent = 0;
    if !dry_run {
        let bodies: Vec<Vec<u8>> = accounts
            .iter()
            .map(|account| {
                ServicingEvent::business_day_closed(account, business_date)
                    .canonical_json()
                    .to_string()
                    .into_bytes()
            })
            .collect();
        sent = servicing_ops::replay::send(sqs, queue_url, &bodies, sent_by).await?;
    }
    Ok(Close {
        business_date,
        accounts,
        sent,
    })
}

/// The scheduled run: closes the day that just ended, emits `AccountsInArrears` and
/// `ClosesSent`, and logs one line.
pub async fn run(
    config: &Config,
    store: &ServicingStore,
    sqs: &aws_sdk_sqs::Client,
    now: DateTime<Utc>,
) -> anyhow::Result<Value> {
    let close = close_day(
        store,
        sqs,
        &config.servicing_queue_url,
        day_ended(now),
        false,
        "aging",
    )
    .await?;
    tracing::info!(
        business_date = %close.business_date,
        accounts_in_arrears = close.accounts.len(),
        closes_sent = close.sent,
        "{}",
        close.line()
    );
    servicing_telemetry::emit(
        "aging",
        &[
            ("AccountsInArrears", close.accounts.len() as u64),
            ("ClosesSent", close.sent as u64),
        ],
    );
    Ok(close.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_schedule_fires_should_close_the_day_that_just_ended() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().expect("time");
        let date = |s: &str| s.parse::<NaiveDate>().expect("date");
        assert_eq!(day_ended(at("2026-11-01T00:30:00Z")), date("2026-10-31"));
        assert_eq!(day_ended(at("2026-11-01T23:59:59Z")), date("2026-10-31"));
    }

    #[test]
    fn when_the_queue_is_missing_should_refuse_to_start() {
        let err = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into()))
            .expect_err("queue required");
        assert!(err.to_string().contains("SERVICING_QUEUE_URL"), "{err}");
    }
}
