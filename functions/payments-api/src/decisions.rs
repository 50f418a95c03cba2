//! The decision record of a POST command: what was known of it (the invocation, then the
//! caller, the key and the request, noted by `post_payment.rs` as it learns them) and what it
//! came to: `accepted` or `replayed`, else the [`Refusal`] (its verdict, how it was decided, its
//! problem).

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use servicing_store::StoreError;
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

use crate::answers::store_problem;
use crate::{CONSUMER, Problem};

/// A POST command answered with a problem: the problem, the verdict it states and how it was
/// decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problem: Problem,
    pub verdict: Verdict,
    pub decided_by: DecidedBy,
}

impl Refusal {
    pub fn new(problem: Problem, verdict: Verdict, decided_by: DecidedBy) -> Self {
        Self {
            problem,
            verdict,
            decided_by,
        }
    }

    /// Refused for the request itself, before any record.
    pub(crate) fn invalid(problem: Problem) -> Self {
        Self::new(problem, Verdict::Refused, DecidedBy::Validation)
    }

    /// Refused by the transaction's conditions on the account (unknown, other currency).
    pub(crate) fn by_account(problem: Problem) -> Self {
        Self::new(problem, Verdict::Refused, DecidedBy::BusinessRule)
    }

    /// Decided by the caller-scoped idempotency record.
    pub(crate) fn by_record(problem: Problem, verdict: Verdict) -> Self {
        Self::new(problem, verdict, DecidedBy::IdempotencyRecord)
    }

    /// The store failed the request: unavailable (503) or otherwise (500).
    pub(crate) fn store(error: StoreError) -> Self {
        let decided_by = match error.is_transient() {
            true => DecidedBy::Transient,
            false => DecidedBy::StoreRejected,
        };
        Self::new(store_problem(error), Verdict::Refused, decided_by)
    }
}

/// The decision record of a POST command: `known` names what was known of it (caller, key,
/// request), `outcome` what it came to (`accepted` or `replayed`, else the refusal: its problem
/// type as `code`, its detail as `reason`).
pub fn command_decision(
    known: DecisionRecord,
    outcome: &Result<Verdict, Refusal>,
) -> DecisionRecord {
    match outcome {
        Ok(verdict) => DecisionRecord {
            verdict: *verdict,
            decided_by: DecidedBy::IdempotencyRecord,
            ..known
        },
        Err(refusal) => DecisionRecord {
            verdict: refusal.verdict,
            decided_by: refusal.decided_by,
            code: Some(refusal.problem.kind.slug().to_owned()),
            reason: Some(refusal.problem.detail.clone()),
            ..known
        },
    }
}

/// A command's record before anything is known of it, stamped with the API Gateway request id
/// (`messageId`), the Lambda request id and the X-Ray trace when the invocation has them.
pub(crate) fn invocation(request: &Request) -> DecisionRecord {
    let gateway_request = gateway_request_id(request);
    let lambda = request.lambda_context_ref();
    let trace_id = lambda
        .and_then(|c| c.xray_trace_id.clone())
        .or_else(servicing_telemetry::current_trace_id)
        .filter(|t| !t.is_empty());
    DecisionRecord {
        request_id: lambda
            .map(|c| c.request_id.clone())
            .filter(|r| !r.is_empty()),
        trace_id,
        ..DecisionRecord::new(
            CONSUMER,
            gateway_request.as_deref().unwrap_or_default(),
            Verdict::Refused,
            DecidedBy::Validation,
        )
    }
}

/// The API Gateway request id: the decision record's `messageId` and every problem's
/// `instance` (what a client quotes to support, found in the access log and the records).
pub(crate) fn gateway_request_id(request: &Request) -> Option<String> {
    match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => {
            context.request_id.clone().filter(|id| !id.is_empty())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

    use super::{Refusal, command_decision};
    use crate::{CONSUMER, IdempotencyKey, PaymentCommand, Principal, Problem, ProblemType};

    /// What `post_payment` knows of a valid command by the time the store answers.
    fn known() -> DecisionRecord {
        let principal = Principal::new("client-42").expect("principal");
        let key = IdempotencyKey::parse(Some(b"order-1")).expect("key");
        let body = json!({"accountId": "acc_1", "amountMinor": 2500, "currency": "EUR",
            "reference": "inv-1"});
        let command = PaymentCommand::parse(body.to_string().as_bytes()).expect("command");
        DecisionRecord {
            source_system: Some(principal.source_system()),
            source_event_id: Some(crate::operation_id(&principal, &key)),
            account_id: Some(command.account_id.as_str().to_owned()),
            amount_minor: Some(command.amount.minor()),
            currency: Some(command.currency.as_str().to_owned()),
            fingerprint: Some(command.fingerprint().as_str().to_owned()),
            ..DecisionRecord::new(CONSUMER, "req-7", Verdict::Refused, DecidedBy::Validation)
        }
    }

    #[test]
    fn when_a_command_is_accepted_or_replayed_should_record_the_caller_key_and_request() {
        let accepted = command_decision(known(), &Ok(Verdict::Accepted));
        let fingerprint = known().fingerprint;
        assert_eq!(
            accepted.to_json(),
            json!({"recordVersion": 1, "kind": "decision", "consumer": "payments-api",
                "messageId": "req-7", "sourceSystem": "api:client-42",
                "sourceEventId": "op_1da7b680f1080945a7a97b24",
                "accountId": "acc_1", "amountMinor": 2500, "currency": "EUR",
                "fingerprint": fingerprint, "verdict": "accepted",
                "decidedBy": "idempotency-record"}),
            "never the body: no reference, no payload"
        );
        let replayed = command_decision(known(), &Ok(Verdict::Replayed));
        assert_eq!(
            (replayed.verdict.as_str(), replayed.code),
            ("replayed", None)
        );
    }

    #[test]
    fn when_a_command_is_refused_should_record_the_problem_type_and_how_it_was_decided() {
        let reused = Refusal::by_record(
            Problem::new(ProblemType::IdempotencyKeyReused, "this key was first used"),
            Verdict::KeyReused,
        );
        let record = command_decision(known(), &Err(reused));
        assert_eq!(
            record.to_json()["verdict"],
            "key-reused",
            "kebab-case on the wire"
        );
        assert_eq!(
            (
                record.decided_by.as_str(),
                record.code.as_deref(),
                record.reason.as_deref()
            ),
            (
                "idempotency-record",
                Some("idempotency-key-reused"),
                Some("this key was first used")
            )
        );
        for (refusal, verdict, by, code) in [
            (
                Refusal::by_record(
                    Problem::new(ProblemType::IdempotencyKeyExpired, "d"),
                    Verdict::KeyExpired,
                ),
                "key-expired",
                "idempotency-record",
                "idempotency-key-expired",
            ),
            (
                Refusal::by_record(
                    Problem::new(ProblemType::RequestInFlight, "d"),
                    Verdict::InFlight,
                ),
                "in-flight",
                "idempotency-record",
                "request-in-flight",
            ),
            (
                Refusal::by_account(Problem::new(ProblemType::UnknownAccount, "d")),
                "refused",
                "business-rule",
                "unknown-account",
            ),
            (
                Refusal::store(servicing_store::StoreError::Transient("throttled".into())),
                "refused",
                "transient",
                "temporarily-unavailable",
            ),
            (
                Refusal::store(servicing_store::StoreError::Rejected("too big".into())),
                "refused",
                "store-rejected",
                "internal",
            ),
        ] {
            let record = command_decision(known(), &Err(refusal));
            assert_eq!(
                (
                    record.verdict.as_str(),
                    record.decided_by.as_str(),
                    record.code.as_deref()
                ),
                (verdict, by, Some(code))
            );
        }

        // Refused before the body was read: only what was known by then.
        let unauthenticated =
            DecisionRecord::new(CONSUMER, "req-8", Verdict::Refused, DecidedBy::Validation);
        let record = command_decision(
            unauthenticated,
            &Err(Refusal::invalid(Problem::new(
                ProblemType::Unauthenticated,
                "no identity",
            ))),
        );
        assert_eq!(
            record.to_json(),
            json!({"recordVersion": 1, "kind": "decision", "consumer": "payments-api",
                "messageId": "req-8", "verdict": "refused", "decidedBy": "validation",
                "code": "unauthenticated", "reason": "no identity"})
        );
    }
}
