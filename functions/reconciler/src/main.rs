//! reconciler Lambda (EventBridge schedules): wiring only. The daily run — expire the parked
//! facts that will not apply, send back the ones left ready, reconcile the last window of
//! account-state, its money and its ledger, emit the metrics that alarm — and the hourly
//! catch-up of a ledger a run had no time to read through are `reconciler`.

// The run's reads nest the SDK futures deeply; the default limit is too low for their layout.
#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, service_fn};
use reconciler::{Config, FromSettings, catch_up_until, run_until, work_deadline};
use serde_json::Value;
use servicing_store::ServicingStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.store_config());
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let (config, store, sqs) = (&config, &store, &sqs);

    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The invocation's deadline (epoch ms): the ledger's catch-up stops in time for it.
        let now_ms = servicing_store::epoch_millis();
        let remaining = (event.context.deadline as i64)
            .saturating_sub(now_ms)
            .max(0);
        let deadline = work_deadline(std::time::Duration::from_millis(remaining as u64));
        let now = servicing_ops::epoch_seconds();
        // The hourly schedule asks for the catch-up alone; the daily one (any other input, an
        // operator's `{}` too) for the whole run.
        if event.payload["catchUp"] == true {
            catch_up_until(config, store, now, Some(deadline)).await
        } else {
            run_until(config, store, sqs, now, Some(deadline)).await
        }
        .map_err(Error::from)
    }))
    .await
}
