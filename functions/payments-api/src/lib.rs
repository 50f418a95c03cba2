//! The payments API behind API Gateway (HTTP API, payload 2.0):
//!
//! - `POST /v1/payments` with an `Idempotency-Key`: the first request stores the caller-scoped
//!   idempotency record (request fingerprint, response, and the canonical `PAYMENT_SETTLED`
//!   event it carries) with a `ConditionCheck` of the account in ONE transaction and answers
//!   202; the relay puts the event on the FIFO servicing queue itself (its account's group,
//!   deduplicated on the operation id) and publishes it on EventBridge. The same key with the same body replays the
//!   stored answer (`Idempotent-Replayed: true`); with another body it is a 422.
//!   Every 202 names the payment's status resource (`Location: /v1/payments/{operationId}`).
//! - `GET /v1/payments/{operationId}`: the payment's status for its caller (`status`).
//! - `GET /v1/loans/{accountId}` and `GET /v1/loans/{accountId}/allocations`.
//!
//! Errors are `application/problem+json` (RFC 9457) naming the field and the rule, each of one
//! [`ProblemType`] and with the API Gateway request id as its `instance`.
//!
//! Every POST command leaves one decision record (consumer `payments-api`, `messageId` = the
//! API Gateway request id): accepted, replayed, key-reused, key-expired, in-flight or refused,
//! with what was known of the caller, the key and the request — never the body (`decisions`).

pub mod command;
mod config;
mod decisions;
mod problem;
pub mod responses;
mod status;

use std::time::Duration;

use chrono::Utc;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::json;
use servicing_domain::{AccountId, EventKind, Money, ServicingEvent, SourceRef};
use servicing_store::{CommandOutcome, OutboxEvent, ServicingStore, StoreError, StoredResponse};
use servicing_telemetry::{DecisionRecord, Verdict};
use sha2::{Digest, Sha256};

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

    /// `POST /v1/payments`: the answer, and the command's decision record (which
    /// [`Self::handle`] prints), stamped with the API Gateway request id (`messageId`), the
    /// Lambda request id and the X-Ray trace when the invocation has them.
    pub async fn post(&self, request: &Request) -> (Response<Body>, DecisionRecord) {
        let mut known = decisions::invocation(request);
        let outcome = self.post_payment(request, &mut known).await;
        let decision = command_decision(
            known,
            &outcome
                .as_ref()
                .map(|(_, verdict)| *verdict)
                .map_err(Clone::clone),
        );
        let response = match outcome {
            Ok((response, _)) => response,
            // The decision record's messageId is the id the problem names.
            Err(refusal) => refusal
                .problem
                .for_request(Some(decision.message_id.as_str()))
                .into_response(),
        };
        (response, decision)
    }

    /// The command's answer and verdict; notes in `known` what it learns of the caller, the key
    /// and the request.
    async fn post_payment(
        &self,
        request: &Request,
        known: &mut DecisionRecord,
    ) -> Result<(Response<Body>, Verdict), Refusal> {
        let principal = principal(request).ok_or_else(|| Refusal::invalid(unauthenticated()))?;
        known.source_system = Some(principal.source_system());
        let key = idempotency_key(request)
            .map_err(|e| Refusal::invalid(Problem::new(e.problem_type(), e.detail())))?;
        known.source_event_id = Some(key.source_event_id());
        let command = PaymentCommand::parse(request.body().as_ref()).map_err(|e| {
            Refusal::invalid(match e {
                Err(why) => Problem::new(ProblemType::MalformedBody, &why),
                Ok(errors) => Problem::validation(errors),
            })
        })?;
        let fingerprint = command.fingerprint();
        known.account_id = Some(command.account_id.as_str().to_owned());
        known.amount_minor = Some(command.amount.minor());
        known.currency = Some(command.currency.as_str().to_owned());
        known.fingerprint = Some(fingerprint.as_str().to_owned());

        let source = SourceRef {
            system: principal.source_system(),
            event_id: key.source_event_id(),
        };
        let now = chrono::DateTime::<Utc>::from(std::time::SystemTime::now());
        // Server-stamped business time to the millisecond (a readable, stable event).
        let event_time = command.event_time.unwrap_or_else(|| {
            chrono::DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
        });
        check_event_time(event_time, now, self.max_event_time_skew).map_err(Refusal::invalid)?;
        let operation_id = operation_id(&principal, &key);
        // The domain's canonical form (what the consumer fingerprints), plus the transport
        // fields the contract tolerates.
        let event = ServicingEvent {
            source: source.clone(),
            account_id: command.account_id.clone(),
            event_time,
            transport_event_id: Some(operation_id.clone()),
            kind: EventKind::PaymentSettled {
                amount: Money::new(command.amount, command.currency),
            },
        };
        let mut wire = event.canonical_json();
        wire["eventId"] = json!(operation_id);
        wire["reference"] = json!(command.reference);
        let body = serde_json::to_string(&responses::Accepted {
            operation_id: operation_id.clone(),
            status: "accepted",
            fact: responses::FactRef::from(&source),
            payment: responses::AcceptedPayment {
                account_id: command.account_id.clone(),
                amount_minor: command.amount.minor(),
                currency: command.currency,
                reference: command.reference.clone(),
                event_time: wire["eventTime"].as_str().unwrap_or_default().to_owned(),
            },
        })
        .expect("plain data serializes");
        let stored = StoredResponse {
            request_fingerprint: fingerprint.clone(),
            status: 202,
            body,
        };
        // The detail carries the operation id as its `eventId`.
        let outbox = OutboxEvent {
            source: EVENT_SOURCE.to_owned(),
            detail_type: DETAIL_TYPE.to_owned(),
            detail: wire,
        };

        // Concurrent first requests with one key: one commits, the others see its record. While
        // it is being committed DynamoDB answers TransactionConflict: wait briefly, ask again.
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(servicing_store::backoff(attempt, Duration::from_millis(20)))
                    .await;
            }
            // The record is keyed by the caller's scope and the operation id, not the raw key:
            // the id is a one-way hash of them, so `GET /v1/payments/{operationId}` could not
            // find a record keyed by the key. One key still means one record (and two keys
            // sharing 96 bits of hash would share the outbox `eventId` anyway).
            let outcome = self
                .store
                .record_command(
                    &principal.scope(),
                    &operation_id,
                    &command.account_id,
                    &command.currency,
                    &stored,
                    &outbox,
                )
                .await
                .map_err(Refusal::store)?;
            match outcome {
                CommandOutcome::Accepted => {
                    tracing::info!(operation_id, "payment accepted");
                    let response =
                        json_response(stored.status, &stored.body, false).located(&operation_id);
                    return Ok((response, Verdict::Accepted));
                }
                CommandOutcome::Existing(previous)
                    if previous.request_fingerprint == fingerprint =>
                {
                    let response =
                        json_response(previous.status, &previous.body, true).located(&operation_id);
                    return Ok((response, Verdict::Replayed));
                }
                CommandOutcome::Existing(_) => {
                    return Err(Refusal::by_record(
                        Problem::new(
                            ProblemType::IdempotencyKeyReused,
                            "this key was first used with another body; use a new key for a new payment",
                        ),
                        Verdict::KeyReused,
                    ));
                }
                CommandOutcome::Expired => {
                    return Err(Refusal::by_record(
                        Problem::new(
                            ProblemType::IdempotencyKeyExpired,
                            "this key was used longer ago than the retention and can no longer be replayed or reused; use a new key for a new payment",
                        ),
                        Verdict::KeyExpired,
                    ));
                }
                CommandOutcome::AccountMissing => {
                    return Err(Refusal::by_account(unknown_account(&command.account_id)));
                }
                // The account's currency decides acceptance: a payment the consumer would
                // quarantine is refused here, with nothing stored.
                CommandOutcome::CurrencyMismatch { account_currency } => {
                    return Err(Refusal::by_account(Problem::validation(vec![FieldError {
                        field: "currency",
                        rule: format!("must be the account's currency {account_currency}"),
                    }])));
                }
                CommandOutcome::InFlight => continue,
            }
        }
        Err(Refusal::by_record(
            Problem::new(ProblemType::RequestInFlight, "retry shortly").with_retry_after(1),
            Verdict::InFlight,
        ))
    }

    async fn get_loan(&self, account: &str) -> Result<Response<Body>, Problem> {
        let id = parse_account(account)?;
        let loan = self.store.load(&id, &[]).await.map_err(store_problem)?.loan;
        // A loan item without an account only holds facts parked before its opening.
        let Some((a, version)) = loan.and_then(|l| Some((l.account?, l.version))) else {
            return Err(unknown_account(&id));
        };
        let body = serde_json::to_string(&responses::LoanView::new(&a, version))
            .expect("plain data serializes");
        Ok(json_response(200, &body, false))
    }

    async fn get_allocations(&self, account: &str) -> Result<Response<Body>, Problem> {
        let id = parse_account(account)?;
        if self
            .store
            .load(&id, &[])
            .await
            .map_err(store_problem)?
            .account()
            .is_none()
        {
            return Err(unknown_account(&id));
        }
        let allocations = self
            .store
            .allocations(&id)
            .await
            .map_err(store_problem)?
            .into_iter()
            .map(responses::AllocationView::from)
            .collect();
        let body = serde_json::to_string(&responses::AllocationsView {
            account_id: id,
            allocations,
        })
        .expect("plain data serializes");
        Ok(json_response(200, &body, false))
    }
}

/// The caller, as the idempotency scope and the events' `sourceSystem` know it: an IAM user by
/// its ARN, an assumed role by the role (never by the session, which changes per task, pod and
/// credential refresh: a retry from another session of the role is the same caller), a JWT
/// caller by its issuer and `sub` (else `client_id`), so two issuers' users never share a scope.
pub fn principal(request: &Request) -> Option<Principal> {
    let RequestContext::ApiGatewayV2(context) = request.request_context_ref()? else {
        return None;
    };
    let authorizer = context.authorizer.as_ref()?;
    if let Some(iam) = &authorizer.iam
        && let Some(arn) = iam.user_arn.as_deref().or(iam.caller_id.as_deref())
    {
        return Principal::new(iam_caller(arn));
    }
    let claims = &authorizer.jwt.as_ref()?.claims;
    let issuer = claims.get("iss").map(String::as_str).unwrap_or_default();
    let subject = match (claims.get("sub"), claims.get("client_id")) {
        (Some(sub), _) if !sub.is_empty() => format!("sub:{sub}"),
        (_, Some(client)) if !client.is_empty() => format!("client:{client}"),
        _ => return None,
    };
    Principal::new(format!("jwt:{issuer}|{subject}"))
}

/// `arn:<partition>:sts::<account>:assumed-role/<role>/<session>` is scoped as the role,
/// `arn:<partition>:iam::<account>:role/<role>` (role names are unique within an account, so
/// the name identifies the role whatever its path); any other ARN as it is.
fn iam_caller(arn: &str) -> String {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if let [prefix, partition, "sts", "", account, resource] = parts.as_slice()
        && let Some(rest) = resource.strip_prefix("assumed-role/")
        && let Some((role, _session)) = rest.split_once('/')
    {
        return format!("{prefix}:{partition}:iam::{account}:role/{role}");
    }
    arn.to_owned()
}

/// Business time only moves forward for an account: a payment dated further ahead than the
/// consumer's bound would age its arrears for good (account-state quarantines such events), so
/// it is refused, stating the bound.
fn check_event_time(
    event_time: chrono::DateTime<Utc>,
    now: chrono::DateTime<Utc>,
    skew: Duration,
) -> Result<(), Problem> {
    let bound = chrono::Duration::from_std(skew).unwrap_or(chrono::Duration::MAX);
    if now
        .checked_add_signed(bound)
        .is_some_and(|limit| event_time > limit)
    {
        return Err(Problem::validation(vec![FieldError {
            field: "eventTime",
            rule: format!(
                "must not be more than {} ahead of the server's clock",
                readable(skew)
            ),
        }]));
    }
    Ok(())
}

/// `24 h`, `15 min`, `90 s`: the largest whole unit.
fn readable(duration: Duration) -> String {
    match duration.as_secs() {
        s if s > 0 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

fn parse_account(raw: &str) -> Result<AccountId, Problem> {
    AccountId::parse(raw).map_err(|e| {
        Problem::validation(vec![FieldError {
            field: "accountId",
            rule: e.0,
        }])
    })
}

fn unknown_account(id: &AccountId) -> Problem {
    Problem::new(
        ProblemType::UnknownAccount,
        &format!("no loan account {id}"),
    )
}

fn unauthenticated() -> Problem {
    Problem::new(
        ProblemType::Unauthenticated,
        "the request carries no IAM or JWT identity",
    )
}

fn store_problem(error: StoreError) -> Problem {
    tracing::error!(error = %error, "store failure");
    match error {
        StoreError::Transient(_) => Problem::new(
            ProblemType::TemporarilyUnavailable,
            "retry with the same Idempotency-Key",
        )
        .with_retry_after(1),
        _ => Problem::new(
            ProblemType::Internal,
            "the failure was logged; quote the instance to support",
        ),
    }
}

/// The payment's operation id: `op_` + the first 24 hex of sha256(scope + "\n" + key). The
/// outbox event's `eventId` and the idempotency record's key (with the caller's scope): a
/// status read derives the record from it and the caller, no lookup of the key needed.
pub fn operation_id(principal: &Principal, key: &IdempotencyKey) -> String {
    format!(
        "op_{}",
        &command::hex(&Sha256::digest(
            format!("{}\n{}", principal.scope(), key.as_str()).as_bytes()
        ))[..24]
    )
}

/// The request's one `Idempotency-Key`. Payload 2.0 joins duplicate headers into one value
/// (commas, which [`IdempotencyKey::parse`] refuses); a request that still holds two header
/// values (another payload format) is refused the same way, never read as its first.
fn idempotency_key(request: &Request) -> Result<IdempotencyKey, KeyError> {
    let mut values = request.headers().get_all("idempotency-key").iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(KeyError::multiple());
    }
    IdempotencyKey::parse(first.map(|v| v.as_bytes()))
}

/// A 202 names the payment's status resource, first answer and replays alike.
trait Located {
    fn located(self, operation_id: &str) -> Self;
}

impl Located for Response<Body> {
    fn located(mut self, operation_id: &str) -> Self {
        if let Ok(value) = format!("/v1/payments/{operation_id}").parse() {
            self.headers_mut().insert("location", value);
        }
        self
    }
}

fn json_response(status: u16, body: &str, replayed: bool) -> Response<Body> {
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if replayed {
        builder = builder.header("idempotent-replayed", "true");
    }
    builder
        .body(Body::Text(body.to_owned()))
        .unwrap_or_else(|_| Response::new(Body::Empty))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{KeyError, check_event_time, iam_caller, idempotency_key, principal};

    #[test]
    fn when_event_time_is_beyond_the_configured_skew_should_refuse_it_stating_the_bound() {
        let now = chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("time");
        let hour = Duration::from_secs(3600);
        let ahead = |secs: i64| now + chrono::Duration::seconds(secs);
        assert!(check_event_time(ahead(1800), now, hour).is_ok());
        assert!(
            check_event_time(ahead(3600), now, hour).is_ok(),
            "the bound itself"
        );
        let problem = check_event_time(ahead(3601), now, hour).expect_err("past the bound");
        assert_eq!(problem.status, 422);
        assert_eq!(problem.errors[0].field, "eventTime");
        assert_eq!(
            problem.errors[0].rule,
            "must not be more than 1 h ahead of the server's clock"
        );
        let default = servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW;
        let problem = check_event_time(ahead(86_401), now, default).expect_err("past 24 h");
        assert_eq!(
            problem.errors[0].rule,
            "must not be more than 24 h ahead of the server's clock"
        );
        let problem = check_event_time(ahead(91), now, Duration::from_secs(90)).expect_err("90 s");
        assert_eq!(
            problem.errors[0].rule,
            "must not be more than 90 s ahead of the server's clock"
        );
        assert!(check_event_time(ahead(1), now, Duration::ZERO).is_err());
    }

    fn jwt_request(claims: serde_json::Value) -> lambda_http::Request {
        let raw = serde_json::json!({
            "version": "2.0", "routeKey": "POST /v1/payments", "rawPath": "/v1/payments", "rawQueryString": "",
            "headers": {}, "isBase64Encoded": false,
            "requestContext": {"accountId": "123456789012", "apiId": "a", "domainName": "a.example", "domainPrefix": "a",
                "requestId": "r", "routeKey": "POST /v1/payments", "stage": "$default", "time": "t", "timeEpoch": 0,
                "http": {"method": "POST", "path": "/v1/payments", "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "t"},
                "authorizer": {"jwt": {"claims": claims, "scopes": null}}},
        });
        lambda_http::request::from_str(&raw.to_string()).expect("event")
    }

    #[test]
    fn when_two_issuers_have_a_user_with_the_same_sub_should_scope_them_apart() {
        let a = principal(&jwt_request(
            serde_json::json!({"iss": "https://idp-a.example", "sub": "42"}),
        ));
        let b = principal(&jwt_request(
            serde_json::json!({"iss": "https://idp-b.example", "sub": "42"}),
        ));
        let (a, b) = (a.expect("principal"), b.expect("principal"));
        assert_ne!(a.scope(), b.scope());
        assert_eq!(a.as_str(), "jwt:https://idp-a.example|sub:42");
        // A client-credentials token has no sub: its client id, never confused with a sub.
        let client = principal(&jwt_request(
            serde_json::json!({"iss": "https://idp-a.example", "client_id": "42"}),
        ));
        assert_ne!(client.expect("principal").scope(), a.scope());
    }

    #[test]
    fn when_the_request_holds_two_idempotency_key_values_should_refuse_both_not_take_the_first() {
        let mut request = lambda_http::Request::new(lambda_http::Body::Empty);
        request
            .headers_mut()
            .append("idempotency-key", "order-1".parse().expect("value"));
        assert_eq!(
            idempotency_key(&request).map(|k| k.as_str().to_owned()),
            Ok("order-1".to_owned())
        );
        request
            .headers_mut()
            .append("idempotency-key", "order-2".parse().expect("value"));
        assert!(matches!(
            idempotency_key(&request),
            Err(KeyError::Multiple(_))
        ));
    }

    #[test]
    fn when_a_role_is_assumed_should_scope_the_caller_by_the_role_not_the_session() {
        let role = "arn:aws:iam::123456789012:role/payments-client";
        for session in ["ecs-task-1", "botocore-session-1796000000", "pod-7f9c"] {
            let arn = format!("arn:aws:sts::123456789012:assumed-role/payments-client/{session}");
            assert_eq!(iam_caller(&arn), role);
        }
        assert_eq!(
            iam_caller("arn:aws-us-gov:sts::123456789012:assumed-role/r/s"),
            "arn:aws-us-gov:iam::123456789012:role/r"
        );
        // Users and other ARNs stay as they are.
        for arn in [
            "arn:aws:iam::123456789012:user/ops/alice",
            "arn:aws:sts::123456789012:federated-user/bob",
            "AIDAEXAMPLE",
        ] {
            assert_eq!(iam_caller(arn), arn);
        }
    }
}
