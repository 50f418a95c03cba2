//! reconciler Lambda (EventBridge schedule): quarantines the parked facts that will not apply
//! (waited past `PARK_RETENTION_DAYS`, default 7, or reversing another account's payment),
//! then reconciles the last `WINDOW_HOURS` (default 25: overlapping daily runs) of
//! account-state and emits `ReconciliationProblems` and `ParkedExpired`, which alarm when
//! non-zero. Wiring only: the work is `servicing_ops::{parked, reconcile}`.

// The scan futures nest the SDK futures deeply; the default limit is too low for their layout.
#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let table = aws_setup::required_env("TABLE_NAME")?;
    let hours = whole_number("WINDOW_HOURS", 25, 1..=24 * 400)?;
    let park_days = whole_number("PARK_RETENTION_DAYS", 7, 1..=365)?;
    let park_retention = std::time::Duration::from_secs(park_days * 86_400);
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws_setup::load().await);
    let store = servicing_store::ServicingStore::new(
        dynamodb.clone(),
        servicing_store::StoreConfig::new(&table, "account-state"),
    );
    let (table, dynamodb, store) = (&table, &dynamodb, &store);
    let hours = hours as i64;

    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| async move {
        let now = servicing_ops::now_epoch_secs();
        let expiry = servicing_ops::parked::expire(store, now, park_retention)
            .await
            .map_err(Error::from)?;
        if expiry.missing + expiry.mismatched > 0 {
            tracing::warn!(
                alert = "parked_expired",
                missing = expiry.missing,
                mismatched = expiry.mismatched,
                "parked facts quarantined"
            );
        }
        let report = servicing_ops::reconcile::reconcile(
            dynamodb,
            table,
            "account-state",
            (now - hours * 3600, now + 1),
            None,
        )
        .await
        .map_err(Error::from)?;
        for line in report.lines() {
            tracing::info!(line, "reconciliation");
        }
        servicing_telemetry::emit(
            "reconciler",
            &[
                ("ReconciliationProblems", report.problems.len() as u64),
                ("ReconciledApplied", report.applied),
                ("ParkedExpired", expiry.missing + expiry.mismatched),
                ("StillParked", expiry.still_parked),
            ],
        );
        Ok::<_, Error>(json!({
            "holds": report.holds(),
            "problems": report.problems,
            "parkedExpired": {"missing": expiry.missing, "mismatched": expiry.mismatched},
            "stillParked": expiry.still_parked,
        }))
    }))
    .await
}

/// A whole-number setting within `range`, or its default; anything else fails the cold start.
fn whole_number(
    name: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| format!("{name} must be a whole number in {range:?}, got {v:?}")),
    }
}
