//! `GET /v1/payments/{operationId}`: where a payment the API accepted stands, read from what is
//! stored with two key reads (no scan, no index):
//!
//! 1. the caller's idempotency record, keyed by its scope and the operation id (the POST wrote
//!    it there): what the 202 said, and the event it sent — the fact's identity;
//! 2. account-state's claim of that fact, keyed by the identity: its verdict and, once applied,
//!    the allocation it carries.
//!
//! Another caller's scope names another record: 404, as for an id never issued — never 403, so
//! operation ids cannot be probed.

use chrono::{DateTime, SecondsFormat};
use lambda_http::{Body, Request, Response};
use servicing_domain::{Fingerprint, ServicingEvent};
use servicing_store::items::{self, Item, Verdict};
use servicing_store::schema::{self, ClaimRecord, IdempotencyRecord, OutboxEvent};
use servicing_store::{APPLIER, StoreError};

use crate::answers::{json_response, store_problem, unauthenticated};
use crate::responses::{AppliedPayment, NotApplied, PaymentState, PaymentStatus, StoredAccepted};
use crate::{PaymentsApi, Problem, ProblemType, principal};

impl PaymentsApi {
    pub(crate) async fn get_payment(
        &self,
        request: &Request,
        operation_id: &str,
    ) -> Result<Response<Body>, Problem> {
        let principal = principal(request).ok_or_else(unauthenticated)?;
        // Only an id of the operation id's shape is named back: anything else the caller sent
        // is not echoed into a problem body (logs, consoles, tickets).
        let unknown = || {
            let detail = if is_operation_id(operation_id) {
                format!("no payment {operation_id} for this caller")
            } else {
                "no such payment for this caller (an operation id is op_ and 24 hex digits)".into()
            };
            Problem::new(ProblemType::UnknownPayment, &detail)
        };
        if !is_operation_id(operation_id) {
            return Err(unknown());
        }
        let Some(item) = self
            .read(items::idempotency_key(&principal.scope(), operation_id))
            .await?
        else {
            return Err(unknown());
        };
        let record: IdempotencyRecord = schema::from_item(item).map_err(store_problem)?;
        if record.response_status != 202 {
            return Err(unknown());
        }
        let corrupt = |what: String| store_problem(StoreError::Corrupt(what));
        let accepted: StoredAccepted = serde_json::from_str(&record.response_body)
            .map_err(|e| corrupt(format!("the 202 stored for {operation_id}: {e}")))?;
        let event = OutboxEvent::decode(record.outbox.as_deref())
            .map_err(store_problem)?
            .first()
            .and_then(|e| ServicingEvent::from_value(&e.detail).ok())
            .ok_or_else(|| corrupt(format!("{operation_id} carries no payment event")))?;
        let claim = self
            .read(items::claim_key(APPLIER, &event.source))
            .await?
            .map(schema::from_item::<ClaimRecord>)
            .transpose()
            .map_err(store_problem)?;
        let (status, reason, applied) = standing(
            claim.as_ref(),
            &Fingerprint::of(&event),
            record.replays_until(),
            servicing_store::epoch_seconds(),
        )
        .map_err(store_problem)?;
        let view = PaymentStatus {
            operation_id: operation_id.to_owned(),
            status,
            reason,
            fact: accepted.fact,
            payment: accepted.payment,
            accepted_at: DateTime::from_timestamp(record.created_at, 0)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
                .unwrap_or_default(),
            applied,
        };
        let body = serde_json::to_string(&view).expect("plain data serializes");
        Ok(json_response(200, &body, false))
    }

    /// A consistent read: a status asked right after its 202 finds the record, and a status
    /// read never goes back (applied, then accepted again).
    async fn read(&self, key: (String, String)) -> Result<Option<Item>, Problem> {
        self.store
            .client()
            .get_item()
            .table_name(self.store.table())
            .set_key(Some(items::key_item(key)))
            .consistent_read(true)
            .send()
            .await
            .map(|got| got.item)
            .map_err(|e| store_problem(servicing_store::classify(e)))
    }
}

/// `op_` and 24 lower-case hex digits, as [`crate::operation_id`] makes them (anything else
/// was never issued: no read).
fn is_operation_id(id: &str) -> bool {
    id.strip_prefix("op_").is_some_and(|hex| {
        hex.len() == 24 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

type Standing = (PaymentState, Option<NotApplied>, Option<AppliedPayment>);

/// What the fact's claim (if any) says of the payment whose event has `fingerprint`. No claim:
/// on its way — unless the retention has passed, after which nothing will apply it (the queue,
/// its dead letters and the stream keep it for days; an applied payment's claim is kept for
/// good). A claim of another payload under its identity: that fact stands, this one is the
/// collision account-state quarantined.
fn standing(
    claim: Option<&ClaimRecord>,
    fingerprint: &Fingerprint,
    replays_until: Option<i64>,
    now: i64,
) -> Result<Standing, StoreError> {
    let Some(claim) = claim else {
        return Ok(match replays_until {
            Some(until) if until < now => (
                PaymentState::Rejected,
                Some(NotApplied::NotAppliedWithinRetention),
                None,
            ),
            _ => (PaymentState::Accepted, None, None),
        });
    };
    if claim.fingerprint != fingerprint.as_str() {
        return Ok((PaymentState::Rejected, Some(NotApplied::Collision), None));
    }
    let verdict = claim.verdict.as_str();
    Ok(if verdict == Verdict::Applied.as_str() {
        let applied = claim.allocation()?.map(AppliedPayment::from);
        (PaymentState::Applied, None, applied)
    } else if verdict == Verdict::Parked.as_str() {
        (PaymentState::Parked, None, None)
    } else if verdict == Verdict::Rejected.as_str() {
        (PaymentState::Rejected, Some(NotApplied::Rejected), None)
    } else if verdict == Verdict::Stale.as_str() {
        (PaymentState::Rejected, Some(NotApplied::Stale), None)
    } else {
        return Err(StoreError::Corrupt(format!(
            "the claim of {} has the verdict {verdict}",
            claim.source()
        )));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(verdict: &str, fingerprint: &str) -> ClaimRecord {
        ClaimRecord {
            pk: "CLAIM#account-state#api:x#k".into(),
            sk: "CLAIM".into(),
            item_type: ClaimRecord::ITEM_TYPE.into(),
            schema_version: schema::SCHEMA_VERSION,
            consumer: APPLIER.into(),
            source_system: "api:x".into(),
            source_event_id: "k".into(),
            event_type: "PAYMENT_SETTLED".into(),
            account_id: "acc_1".into(),
            fingerprint: fingerprint.into(),
            verdict: verdict.into(),
            claimed_at: 100,
            expires_at: None,
            outbox: None,
            allocated_to: None,
            reversed_by: None,
            trace_header: None,
        }
    }

    #[test]
    fn when_the_claim_says_how_the_fact_was_judged_should_answer_that_status() {
        let ours = Fingerprint::from_stored("sha256:ours".into());
        let at = |c: Option<&ClaimRecord>, now| {
            standing(c, &ours, Some(1_000), now)
                .map(|(s, r, _)| (s, r))
                .expect("known verdict")
        };
        use NotApplied as N;
        use PaymentState as S;
        assert_eq!(at(None, 999), (S::Accepted, None));
        assert_eq!(at(None, 1_000), (S::Accepted, None), "the horizon itself");
        assert_eq!(
            at(None, 1_001),
            (S::Rejected, Some(N::NotAppliedWithinRetention))
        );
        assert_eq!(
            at(Some(&claim("APPLIED", "sha256:ours")), 5),
            (S::Applied, None)
        );
        assert_eq!(
            at(Some(&claim("PARKED", "sha256:ours")), 5),
            (S::Parked, None)
        );
        assert_eq!(
            at(Some(&claim("REJECTED", "sha256:ours")), 5),
            (S::Rejected, Some(N::Rejected))
        );
        assert_eq!(
            at(Some(&claim("STALE", "sha256:ours")), 5),
            (S::Rejected, Some(N::Stale))
        );
        for verdict in ["APPLIED", "PARKED"] {
            assert_eq!(
                at(Some(&claim(verdict, "sha256:theirs")), 5),
                (S::Rejected, Some(N::Collision)),
                "{verdict} for another payload"
            );
        }
        assert!(standing(Some(&claim("MAYBE", "sha256:ours")), &ours, None, 5).is_err());
    }

    #[test]
    fn when_an_id_was_never_issued_should_not_be_read() {
        assert!(is_operation_id("op_05a1373bc4838bda426e837b"));
        for id in [
            "op_05A1373BC4838BDA426E837B",
            "op_05a1373bc4838bda426e837",
            "op_05a1373bc4838bda426e837b0",
            "05a1373bc4838bda426e837b",
            "op_05a1373bc4838bda426e837g",
            "",
        ] {
            assert!(!is_operation_id(id), "{id}");
        }
    }
}
