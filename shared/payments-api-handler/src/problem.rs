//! RFC 9457 problem details (`application/problem+json`).

use lambda_http::{Body, Response};
use serde_json::json;

use crate::command::FieldError;

/// Where the problem types are documented.
const TYPE_BASE: &str = "https://docs.loan-servicing.example/problems/";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: u16,
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub errors: Vec<FieldError>,
    pub retry_after: Option<u32>,
}

impl Problem {
    pub fn new(status: u16, kind: &'static str, title: &'static str, detail: &str) -> Self {
        Self {
            status,
            kind,
            title,
            detail: detail.to_owned(),
            errors: Vec::new(),
            retry_after: None,
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
            ..Self::new(422, "validation", "The request has invalid fields", &detail)
        }
    }

    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let body = json!({
            "type": format!("{TYPE_BASE}{}", self.kind),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "errors": self.errors.iter().map(|e| json!({"field": e.field, "rule": e.rule})).collect::<Vec<_>>(),
        });
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
