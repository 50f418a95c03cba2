//! The payments API behind API Gateway (HTTP API, payload 2.0):
//!
//! - `POST /v1/payments` with an `Idempotency-Key`: the first request stores the caller-scoped
//!   idempotency record (request fingerprint, response, and the canonical `PAYMENT_SETTLED`
//!   event it carries) with a `ConditionCheck` of the account in ONE transaction and answers
//!   202; the relay puts the event on the FIFO servicing queue itself (its account's group,
//!   deduplicated on the operation id) and publishes it on EventBridge. The same key with the same body replays the
//!   stored answer (`Idempotent-Replayed: true`); with another body it is a 422.
//!   Every 202 names the payment's status resource (`Location: /v1/payments/{operationId}`)
//!   (`post_payment`; the caller and its key are read in `caller`).
//! - `GET /v1/payments/{operationId}`: the payment's status for its caller (`status`).
//! - `GET /v1/loans/{accountId}` and `GET /v1/loans/{accountId}/allocations` (`loans`).
//!
//! Errors are `application/problem+json` (RFC 9457) naming the field and the rule, each of one
//! [`ProblemType`] and with the API Gateway request id as its `instance`.
//!
//! Every POST command leaves one decision record (consumer `payments-api`, `messageId` = the
//! API Gateway request id): accepted, replayed, key-reused, key-expired, in-flight or refused,
//! with what was known of the caller, the key and the request — never the body (`decisions`).

mod answers;
mod caller;
pub mod command;
mod config;
mod decisions;
mod loans;
mod post_payment;
pub mod problem;
pub mod responses;
mod status;

use std::time::Duration;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use servicing_store::ServicingStore;

pub use caller::{operation_id, principal};
pub use command::{FieldError, IdempotencyKey, KeyError, PaymentCommand, Principal};
pub use config::{CONSUMER, Config};
pub use decisions::{Refusal, command_decision};
pub use problem::{Problem, ProblemType};
pub use servicing_settings::{ConfigError, FromSettings};

/// The EventBridge `source` of API-originated payments (the relay also puts them on the
/// servicing queue itself).
pub const EVENT_SOURCE: &str = "servicing.payments-api";
pub const DETAIL_TYPE: &str = "PaymentSettled";

#[derive(Debug, Clone)]
pub struct PaymentsApi {
    store: ServicingStore,
    max_event_time_skew: Duration,
}

impl PaymentsApi {
    /// With the default time bound ([`servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW`]).
    pub fn new(store: ServicingStore) -> Self {
        Self {
            store,
            max_event_time_skew: servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW,
        }
    }

    /// With `config`'s settings (the time bound; the store is built from it too).
    pub fn with_config(store: ServicingStore, config: &Config) -> Self {
        Self::new(store).with_max_event_time_skew(config.max_event_time_skew)
    }

    /// How far ahead of the server's clock an `eventTime` may be (account-state's
    /// `MAX_EVENT_TIME_SKEW_SECONDS`: a payment the consumer would quarantine is refused here).
    pub fn with_max_event_time_skew(mut self, skew: Duration) -> Self {
        self.max_event_time_skew = skew;
        self
    }

    /// Routes on what API Gateway matched (the route key and its path parameters), not on a
    /// re-parse of the raw path. Every problem names the request (`instance`).
    pub async fn handle(&self, request: Request) -> Response<Body> {
        let route_key = match request.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(context)) => context.route_key.clone(),
            _ => None,
        };
        let parameter = |name: &str| {
            request
                .path_parameters_ref()
                .and_then(|p| p.first(name))
                .map(str::to_owned)
        };
        let (account, operation) = (parameter("accountId"), parameter("operationId"));
        let response = match (route_key.as_deref(), account.as_deref(), operation) {
            (Some("POST /v1/payments"), _, _) => {
                let (response, decision) = self.post(&request).await;
                servicing_telemetry::print_decision(&decision);
                return response;
            }
            (Some("GET /v1/payments/{operationId}"), _, Some(operation)) => {
                self.get_payment(&request, &operation).await
            }
            (Some("GET /v1/loans/{accountId}"), Some(account), _) => self.get_loan(account).await,
            (Some("GET /v1/loans/{accountId}/allocations"), Some(account), _) => {
                self.get_allocations(account).await
            }
            _ => Err(Problem::new(ProblemType::NotFound, "see docs/openapi.json")),
        };
        response.unwrap_or_else(|problem| {
            problem
                .for_request(decisions::gateway_request_id(&request).as_deref())
                .into_response()
        })
    }
}
