//! `POST /v1/payments`: the command from request to answer — the caller, its key and the
//! body, the event stored with the idempotency record in one transaction, the replays and
//! refusals, and the verdict its decision record states. Apart from `lib.rs`, which only routes
//! here: the one route that writes.

use std::time::Duration;

use chrono::Utc;
use lambda_http::{Body, Request, Response};
use serde_json::json;
use servicing_domain::{EventKind, Money, ServicingEvent, SourceRef};
use servicing_store::{CommandOutcome, OutboxEvent, StoredResponse};
use servicing_telemetry::{DecisionRecord, Verdict};

use crate::answers::{json_response, unauthenticated, unknown_account};
use crate::caller::{idempotency_key, operation_id, principal};
use crate::{
    DETAIL_TYPE, EVENT_SOURCE, FieldError, PaymentCommand, PaymentsApi, Problem, ProblemType,
    Refusal, command_decision, decisions, responses,
};

impl PaymentsApi {
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
        // The payment's identity is its operation: the key hashed with the caller's scope. The
        // raw key is kept nowhere — not in the event, the records or the evidence.
        let operation_id = operation_id(&principal, &key);
        known.source_event_id = Some(operation_id.clone());
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
            event_id: operation_id.clone(),
        };
        let now = chrono::DateTime::<Utc>::from(std::time::SystemTime::now());
        // Server-stamped business time to the millisecond (a readable, stable event).
        let event_time = command.event_time.unwrap_or_else(|| {
            chrono::DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
        });
        check_event_time(event_time, now, self.max_event_time_skew).map_err(Refusal::invalid)?;
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

#[cfg(test)]
mod tests;
