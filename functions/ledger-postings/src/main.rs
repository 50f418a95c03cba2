//! ledger-postings Lambda: wiring only. Config is read and clients are built once per cold start.

// The batch future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use ledger_postings::{Config, FromSettings, LedgerPostingsHandler};
use servicing_store::ServicingStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.store_config());
    let handler = LedgerPostingsHandler::new(store);
    let handler = &handler;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let trace = event.context.xray_trace_id.clone();
        Ok::<_, Error>(servicing_telemetry::with_trace(trace, handler.handle(event.payload)).await)
    }))
    .await
}
