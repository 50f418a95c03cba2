//! payments-api Lambda (API Gateway HTTP API): wiring only. Config is read and clients are
//! built once per cold start.

// The request future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use lambda_http::{Error, Request, service_fn};
use payments_api_handler::PaymentsApi;
use servicing_store::{DEFAULT_CLAIM_RETENTION, ServicingStore, StoreConfig};

/// How long an Idempotency-Key is remembered (`IDEMPOTENCY_RETENTION_DAYS`, default 35).
fn retention() -> Result<std::time::Duration, Error> {
    match std::env::var("IDEMPOTENCY_RETENTION_DAYS") {
        Err(_) => Ok(DEFAULT_CLAIM_RETENTION),
        Ok(days) => match days.parse::<u64>() {
            Ok(d) if (1..=3650).contains(&d) => Ok(std::time::Duration::from_secs(d * 86_400)),
            _ => Err(format!(
                "IDEMPOTENCY_RETENTION_DAYS must be a whole number in 1..=3650, got {days:?}"
            )
            .into()),
        },
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();

    let table = aws_setup::required_env("TABLE_NAME")?;
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        StoreConfig {
            claim_retention: retention()?,
            ..StoreConfig::new(table, "payments-api")
        },
    );
    let api = PaymentsApi::new(store);
    let api = &api;
    lambda_http::run(service_fn(move |request: Request| async move {
        Ok::<_, Error>(api.handle(request).await)
    }))
    .await
}
