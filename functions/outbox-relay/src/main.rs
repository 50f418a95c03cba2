//! outbox-relay Lambda: wiring only. Config is read and clients are built once per cold start.

// The batch future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use outbox_relay_handler::{CONSUMER, OutboxRelay};
use servicing_store::{ServicingStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let table = aws_setup::required_env("TABLE_NAME")?;
    let event_bus = aws_setup::required_env("EVENT_BUS_NAME")?;
    // API payments are applied through this queue: without it they would be accepted and lost.
    let servicing_queue = aws_setup::required_env("SERVICING_QUEUE_URL")?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig::new(table, CONSUMER),
    );
    let relay = OutboxRelay::new(aws_sdk_eventbridge::Client::new(&sdk), store, event_bus)
        .with_servicing_queue(aws_sdk_sqs::Client::new(&sdk), servicing_queue);
    let relay = &relay;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| async move {
        Ok::<_, Error>(relay.handle(event.payload).await)
    }))
    .await
}
