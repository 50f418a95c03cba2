//! account-state Lambda: wiring only. Config is read and clients are built once per cold start;
//! a missing setting fails the start loudly.

// The batch future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use account_state::{AccountStateHandler, Config, ContentKeyer, Deadline, FromSettings};
use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use servicing_store::ServicingStore;

/// Its claims are the facts' servicing records, which every other reader finds by this name.
const CONSUMER: &str = servicing_store::APPLIER;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Honours AWS_LAMBDA_LOG_FORMAT=JSON and AWS_LAMBDA_LOG_LEVEL / RUST_LOG.
    lambda_runtime::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        config.store_config(CONSUMER),
    );
    let content_keyer = content_keyer(aws_sdk_secretsmanager::Client::new(&sdk)).await?;
    let handler = AccountStateHandler::new(store, config, content_keyer);
    let handler = &handler;

    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let request_id = Some(event.context.request_id.as_str());
        let trace = event.context.xray_trace_id.clone();
        // A timeout that cannot fit one request fails the invocation, naming the setting,
        // rather than answering every message as a retry into the dead-letter queue.
        let deadline = Deadline::of_invocation(event.context.deadline).inspect_err(|e| {
            tracing::error!(alert = "timeout_too_short", error = %e, "misconfigured");
        })?;
        let work = handler.handle_invocation(event.payload, request_id, deadline);
        Ok::<_, Error>(servicing_telemetry::with_trace(trace, work).await)
    }))
    .await
}

/// The content key secret (`CONTENT_KEY_SECRET_ARN`), read once per cold start: it is never
/// rotated (keys under two secrets never match), and without it the start fails loudly.
async fn content_keyer(secrets: aws_sdk_secretsmanager::Client) -> Result<ContentKeyer, Error> {
    let secret_id = std::env::var("CONTENT_KEY_SECRET_ARN")
        .map_err(|_| "CONTENT_KEY_SECRET_ARN is not set: the content key secret's ARN")?;
    let answer = secrets
        .get_secret_value()
        .secret_id(&secret_id)
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot read the content key secret {secret_id}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            )
        })?;
    let secret = answer
        .secret_string()
        .ok_or_else(|| format!("the content key secret {secret_id} holds no string"))?;
    Ok(ContentKeyer::new(secret.as_bytes())?)
}
