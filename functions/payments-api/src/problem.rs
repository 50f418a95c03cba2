//! RFC 9457 problem details (`application/problem+json`).
//!
//! Every problem the API can answer is one [`ProblemType`]: its `type` URI, status, title and
//! whether the same request may be sent again with the same `Idempotency-Key`.
//! `docs/openapi.json` enumerates them all (`tests/it/payments_api.rs` checks it
//! against [`ProblemType::ALL`]).

use lambda_http::{Body, Response};
use serde_json::json;

use crate::command::FieldError;

/// Where the problem types are documented, unless the deployment says (`PROBLEM_TYPE_BASE_URL`,
/// template `ProblemTypeBaseUrl`: the adopter's own documentation).
pub const DEFAULT_TYPE_BASE: &str = "https://docs.loan-servicing.example/problems/";

static TYPE_BASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the `type` URIs' base once, at the cold start (a trailing `/` is added when missing);
/// later calls change nothing.
pub fn set_type_base(base: &str) {
    let base = if base.ends_with('/') {
        base.to_owned()
    } else {
        format!("{base}/")
    };
    let _ = TYPE_BASE.set(base);
}

fn type_base() -> &'static str {
    TYPE_BASE.get().map_or(DEFAULT_TYPE_BASE, String::as_str)
}

/// A kind of problem: what a client branches on (its `type`), never its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemType {
    /// 400: the `Idempotency-Key` is missing, or its key breaks the key grammar.
    InvalidIdempotencyKey,
    /// 400: the `Idempotency-Key` opens a structured-header string and is not a well-formed one.
    MalformedIdempotencyKey,
    /// 400: more than one `Idempotency-Key` (API Gateway joins duplicate headers with commas).
    MultipleIdempotencyKeys,
    /// 400: the body is not a JSON object, or names a field twice.
    MalformedBody,
    /// 401: no authenticated principal in the request context.
    Unauthenticated,
    /// 404: no such loan account.
    UnknownAccount,
    /// 404: no payment with this operation id for this caller.
    UnknownPayment,
    /// 404: no such route.
    NotFound,
    /// 409: a twin request with this key is being committed.
    RequestInFlight,
    /// 422: fields that break their rules (each named with its rule).
    Validation,
    /// 422: the key was first used with another body.
    IdempotencyKeyReused,
    /// 422: the key was used longer ago than the retention (a tombstone refuses it).
    IdempotencyKeyExpired,
    /// 500: the store refused the request as such, or a stored item does not decode.
    Internal,
    /// 503: the store is throttled or unavailable.
    TemporarilyUnavailable,
}

impl ProblemType {
    /// Every problem type, in the order of their statuses.
    pub const ALL: [ProblemType; 14] = [
        ProblemType::InvalidIdempotencyKey,
        ProblemType::MalformedIdempotencyKey,
        ProblemType::MultipleIdempotencyKeys,
        ProblemType::MalformedBody,
        ProblemType::Unauthenticated,
        ProblemType::UnknownAccount,
        ProblemType::UnknownPayment,
        ProblemType::NotFound,
        ProblemType::RequestInFlight,
        ProblemType::Validation,
        ProblemType::IdempotencyKeyReused,
        ProblemType::IdempotencyKeyExpired,
        ProblemType::Internal,
        ProblemType::TemporarilyUnavailable,
    ];

    /// The last segment of its `type` URI (also the decision record's `code`).
    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::InvalidIdempotencyKey => "invalid-idempotency-key",
            ProblemType::MalformedIdempotencyKey => "malformed-idempotency-key",
            ProblemType::MultipleIdempotencyKeys => "multiple-idempotency-keys",
            ProblemType::MalformedBody => "malformed-body",
            ProblemType::Unauthenticated => "unauthenticated",
            ProblemType::UnknownAccount => "unknown-account",
            ProblemType::UnknownPayment => "unknown-payment",
            ProblemType::NotFound => "not-found",
            ProblemType::RequestInFlight => "request-in-flight",
            ProblemType::Validation => "validation",
            ProblemType::IdempotencyKeyReused => "idempotency-key-reused",
            ProblemType::IdempotencyKeyExpired => "idempotency-key-expired",
            ProblemType::Internal => "internal",
            ProblemType::TemporarilyUnavailable => "temporarily-unavailable",
        }
    }

    /// Its `type` URI.
    pub fn uri(self) -> String {
        format!("{}{}", type_base(), self.slug())
    }

    pub fn status(self) -> u16 {
        match self {
            ProblemType::InvalidIdempotencyKey
            | ProblemType::MalformedIdempotencyKey
            | ProblemType::MultipleIdempotencyKeys
            | ProblemType::MalformedBody => 400,
            ProblemType::Unauthenticated => 401,
            ProblemType::UnknownAccount | ProblemType::UnknownPayment | ProblemType::NotFound => {
                404
            }
            ProblemType::RequestInFlight => 409,
            ProblemType::Validation
            | ProblemType::IdempotencyKeyReused
            | ProblemType::IdempotencyKeyExpired => 422,
            ProblemType::Internal => 500,
            ProblemType::TemporarilyUnavailable => 503,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ProblemType::InvalidIdempotencyKey => "Invalid Idempotency-Key",
            ProblemType::MalformedIdempotencyKey => "Malformed Idempotency-Key string",
            ProblemType::MultipleIdempotencyKeys => "More than one Idempotency-Key",
            ProblemType::MalformedBody => "Malformed request body",
            ProblemType::Unauthenticated => "No authenticated principal",
            ProblemType::UnknownAccount => "Unknown account",
            ProblemType::UnknownPayment => "Unknown payment",
            ProblemType::NotFound => "No such route",
            ProblemType::RequestInFlight => "A request with this key is in progress",
            ProblemType::Validation => "The request has invalid fields",
            ProblemType::IdempotencyKeyReused => "Idempotency-Key reused with a different request",
            ProblemType::IdempotencyKeyExpired => {
                "Idempotency-Key used before, beyond its retention"
            }
            ProblemType::Internal => "Internal error",
            ProblemType::TemporarilyUnavailable => "Temporarily unavailable",
        }
    }

    /// Whether sending the same request again, with the same key, can succeed: a twin in
    /// flight, a throttled or failing store (nothing was stored, or the stored answer replays:
    /// never a second payment). Every other problem answers the same request the same way.
    pub fn retryable_with_same_key(self) -> bool {
        matches!(
            self,
            ProblemType::RequestInFlight
                | ProblemType::TemporarilyUnavailable
                | ProblemType::Internal
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: u16,
    pub kind: ProblemType,
    pub detail: String,
    pub errors: Vec<FieldError>,
    pub retry_after: Option<u32>,
    /// RFC 9457 `instance`: this occurrence, `urn:request:<API Gateway request id>` (the id a
    /// client quotes to support; the decision record's `messageId`).
    pub instance: Option<String>,
}

impl Problem {
    pub fn new(kind: ProblemType, detail: &str) -> Self {
        Self {
            status: kind.status(),
            kind,
            detail: detail.to_owned(),
            errors: Vec::new(),
            retry_after: None,
            instance: None,
        }
    }

    /// 422: the request is well-formed JSON but some fields break the rules.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.rule))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            errors,
            ..Self::new(ProblemType::Validation, &detail)
        }
    }

    pub fn title(&self) -> &'static str {
        self.kind.title()
    }

    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Names the request it answers (`instance`), when the invocation has an API Gateway
    /// request id.
    pub fn for_request(mut self, request_id: Option<&str>) -> Self {
        self.instance = request_id
            .filter(|id| !id.is_empty())
            .map(|id| format!("urn:request:{id}"));
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let mut body = json!({
            "type": self.kind.uri(),
            "title": self.kind.title(),
            "status": self.status,
            "detail": self.detail,
            "errors": self.errors.iter().map(|e| json!({"field": e.field, "rule": e.rule})).collect::<Vec<_>>(),
        });
        if let Some(instance) = &self.instance {
            body["instance"] = json!(instance);
        }
        let mut builder = Response::builder()
            .status(self.status)
            .header("content-type", "application/problem+json");
        if let Some(seconds) = self.retry_after {
            builder = builder.header("retry-after", seconds.to_string());
        }
        builder
            .body(Body::Text(body.to_string()))
            .unwrap_or_else(|_| Response::new(Body::Empty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_problem_types_are_listed_should_list_each_once_with_a_distinct_uri() {
        let slugs: std::collections::BTreeSet<&str> =
            ProblemType::ALL.iter().map(|t| t.slug()).collect();
        assert_eq!(slugs.len(), ProblemType::ALL.len());
        assert!(
            ProblemType::ALL
                .iter()
                .all(|t| (400..600).contains(&t.status()))
        );
    }

    #[test]
    fn when_the_request_id_is_known_should_name_it_as_the_instance() {
        let response = Problem::new(ProblemType::UnknownPayment, "d")
            .for_request(Some("Ab1cDEFgHIjk="))
            .into_response();
        let Body::Text(text) = response.body() else {
            panic!("text body")
        };
        let body: serde_json::Value = serde_json::from_str(text).expect("json");
        assert_eq!(body["instance"], "urn:request:Ab1cDEFgHIjk=");
        assert_eq!(
            body["type"],
            "https://docs.loan-servicing.example/problems/unknown-payment"
        );
        assert_eq!(body["status"], 404);
        let anonymous = Problem::new(ProblemType::Internal, "d").for_request(Some(""));
        assert_eq!(anonymous.instance, None, "no id, no instance");
    }
}
