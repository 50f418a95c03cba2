//! What more than one route answers: a JSON body, and the problems of a request without a
//! caller, of an unknown account and of a failing store. Apart because the command, the status
//! read and the account reads all answer them, the same way.

use lambda_http::{Body, Response};
use servicing_domain::AccountId;
use servicing_store::StoreError;

use crate::{Problem, ProblemType};

pub(crate) fn unknown_account(id: &AccountId) -> Problem {
    Problem::new(
        ProblemType::UnknownAccount,
        &format!("no loan account {id}"),
    )
}

pub(crate) fn unauthenticated() -> Problem {
    Problem::new(
        ProblemType::Unauthenticated,
        "the request carries no IAM or JWT identity",
    )
}

pub(crate) fn store_problem(error: StoreError) -> Problem {
    tracing::error!(error = %error, "store failure");
    if error.is_transient() {
        Problem::new(
            ProblemType::TemporarilyUnavailable,
            "retry with the same Idempotency-Key",
        )
        .with_retry_after(1)
    } else {
        Problem::new(
            ProblemType::Internal,
            "the failure was logged; quote the instance to support",
        )
    }
}

pub(crate) fn json_response(status: u16, body: &str, replayed: bool) -> Response<Body> {
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
