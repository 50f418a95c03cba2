//! reconciler Lambda (EventBridge schedule): reconciles the last `WINDOW_HOURS` (default 25:
//! overlapping daily runs) of account-state and emits `ReconciliationProblems`, which alarms
//! when non-zero. Wiring only: the reconciliation is `servicing_ops::reconcile`.

// The scan futures nest the SDK futures deeply; the default limit is too low for their layout.
#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let table = aws_setup::required_env("TABLE_NAME")?;
    let hours: i64 = match std::env::var("WINDOW_HOURS") {
        Err(_) => 25,
        Ok(v) => v
            .parse()
            .map_err(|_| format!("WINDOW_HOURS must be a whole number, got {v:?}"))?,
    };
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws_setup::load().await);
    let (table, dynamodb) = (&table, &dynamodb);

    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| async move {
        let now = servicing_ops::now_epoch_secs();
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
            ],
        );
        Ok::<_, Error>(json!({"holds": report.holds(), "problems": report.problems}))
    }))
    .await
}
