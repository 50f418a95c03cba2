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
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig::new(table, CONSUMER),
    );
    let relay = OutboxRelay::new(aws_sdk_eventbridge::Client::new(&sdk), store, event_bus);
    let relay = &relay;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| async move {
        Ok::<_, Error>(relay.handle(event.payload).await)
    }))
    .await
}
