//! aging Lambda (EventBridge Scheduler, daily): wiring only. The run — close the day that just
//! ended for every account in arrears, from the sparse arrears index — is `aging`.

// The query futures nest the SDK futures deeply; the default limit is too low for their layout.
#![recursion_limit = "256"]

use aging::{Config, FromSettings, run};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;
use servicing_store::{ServicingStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig::new(&config.table, "aging"),
    );
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let (config, store, sqs) = (&config, &store, &sqs);

    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| async move {
        let now = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
        run(config, store, sqs, now).await.map_err(Error::from)
    }))
    .await
}
