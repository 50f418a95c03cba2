//! collections Lambda: wiring only. Config is read and clients are built once per cold start.

// The batch future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use aws_lambda_events::event::sqs::SqsEvent;
use collections::auth::{Auth, SecretToken};
use collections::{
    CALL_TIMEOUT, CollectionsHandler, Config, FromSettings, NotificationAuth, Notifier,
};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use servicing_store::ServicingStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    let sdk = aws_setup::load().await;
    let notifier = Notifier::new(&config.notification_url, CALL_TIMEOUT)?;
    let notifier = match (&config.status_url, config.receiver_deduplicates) {
        (Some(status_url), false) => notifier.without_deduplication(status_url)?,
        _ => notifier,
    };
    let notifier = notifier.with_auth(match &config.auth {
        NotificationAuth::None => Auth::None,
        NotificationAuth::SigV4 { service, region } => Auth::SigV4 {
            credentials: sdk
                .credentials_provider()
                .ok_or("no credentials to sign the notification calls with")?,
            region: region
                .clone()
                .or_else(|| sdk.region().map(ToString::to_string))
                .unwrap_or_default(),
            service: service.clone(),
        },
        NotificationAuth::Bearer { secret_id } => Auth::Bearer(std::sync::Arc::new(
            SecretToken::new(aws_sdk_secretsmanager::Client::new(&sdk), secret_id),
        )),
        NotificationAuth::Hmac { secret_id } => Auth::Hmac(std::sync::Arc::new(SecretToken::new(
            aws_sdk_secretsmanager::Client::new(&sdk),
            secret_id,
        ))),
    });

    let store = ServicingStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.store_config());
    let handler = CollectionsHandler::new(store, notifier);
    let handler = &handler;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let trace = event.context.xray_trace_id.clone();
        Ok::<_, Error>(servicing_telemetry::with_trace(trace, handler.handle(event.payload)).await)
    }))
    .await
}
