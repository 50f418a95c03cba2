//! collections Lambda: wiring only. Config is read and clients are built once per cold start.

// The batch future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use collections_handler::{CONSUMER, CollectionsHandler, Notifier};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use servicing_store::{ServicingStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let table = aws_setup::required_env("TABLE_NAME")?;
    let notifier = Notifier::new(
        &aws_setup::required_env("NOTIFICATION_URL")?,
        Duration::from_secs(5),
    )?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig::new(table, CONSUMER),
    );
    let handler = CollectionsHandler::new(store, notifier);
    let handler = &handler;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, Error>(handler.handle(event.payload).await)
    }))
    .await
}
