//! payments-api Lambda (API Gateway HTTP API): wiring only. Config is read and clients are
//! built once per cold start.

// The request future nests the SDK futures deeply; the default limit is too low for its layout.
#![recursion_limit = "256"]

use lambda_http::{Error, Request, service_fn};
use payments_api::{Config, FromSettings, PaymentsApi};
use servicing_store::ServicingStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();

    let config = Config::from_env()?;
    if let Some(base) = &config.problem_type_base {
        payments_api::problem::set_type_base(base);
    }
    let sdk = aws_setup::load().await;
    let store = ServicingStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.store_config());
    let api = PaymentsApi::with_config(store, &config);
    let api = &api;
    lambda_http::run(service_fn(move |request: Request| async move {
        use lambda_http::RequestExt;
        let trace = request
            .lambda_context_ref()
            .and_then(|c| c.xray_trace_id.clone());
        Ok::<_, Error>(servicing_telemetry::with_trace(trace, api.handle(request)).await)
    }))
    .await
}
