//! The decision records of a batch: what a delivery is known to be (its message, receive
//! count, source, the change's `eventId`, account and fingerprint) and how its verdict was
//! reached ([`Decided`]). `message` says what it decided; nothing here does I/O but printing.

use aws_lambda_events::event::sqs::SqsMessage;
use serde_json::Value;
use servicing_domain::Fingerprint;
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

use crate::change::DelinquencyChanged;
use crate::{CONSUMER, MessageResult};

/// A delivery's record before anything is known of its body (a decode failure, so far).
pub(crate) fn delivery(message_id: &str, receive_count: Option<u32>) -> DecisionRecord {
    DecisionRecord {
        receive_count,
        ..DecisionRecord::new(CONSUMER, message_id, Verdict::Retried, DecidedBy::Decode)
    }
}

/// The envelope's `source`, when it names one.
pub(crate) fn source_system(envelope: Option<&Value>) -> Option<String> {
    envelope
        .and_then(|e| e["source"].as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl DelinquencyChanged {
    /// What a decision record knows of the change: its `eventId` (as `sourceEventId`), account
    /// and fingerprint (of its detail: what tells a duplicate from a collision).
    pub(crate) fn evidence(&self, record: DecisionRecord) -> DecisionRecord {
        DecisionRecord {
            source_event_id: Some(self.event_id.clone()),
            account_id: Some(self.account_id.as_str().to_owned()),
            fingerprint: Some(Fingerprint::of_value(&self.detail).as_str().to_owned()),
            ..record
        }
    }
}

/// How a delivery's verdict was reached (a retry overrides it: `retried`, `transient`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decided {
    pub(crate) verdict: Verdict,
    pub(crate) by: DecidedBy,
    /// The quarantine code, when quarantined.
    pub(crate) code: Option<&'static str>,
}

impl Decided {
    pub(crate) const fn new(verdict: Verdict, by: DecidedBy) -> Self {
        Self {
            verdict,
            by,
            code: None,
        }
    }

    pub(crate) const RETRIED: Self = Self::new(Verdict::Retried, DecidedBy::Transient);

    /// The record of a delivery (`record` names what is known of it) with `result`: a retry
    /// says why, a quarantine its code and why.
    pub(crate) fn settle(
        self,
        mut record: DecisionRecord,
        result: &MessageResult,
    ) -> DecisionRecord {
        let Decided { verdict, by, code } = match result {
            MessageResult::Retry { .. } => Self::RETRIED,
            _ => self,
        };
        record.verdict = verdict;
        record.decided_by = by;
        match result {
            MessageResult::Retry { reason } => record.reason = Some(reason.clone()),
            MessageResult::Quarantined { reason } => {
                record.code = code.map(str::to_owned);
                record.reason = Some(reason.clone());
            }
            _ => {}
        }
        record
    }
}

/// SQS `ApproximateReceiveCount`, when SQS said.
pub(crate) fn receive_count(message: &SqsMessage) -> Option<u32> {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
}

/// Prints each record (one line each), stamped with the X-Ray trace of the invocation
/// (from the invocation context: `servicing_telemetry::with_trace`).
pub(crate) fn emit(decisions: &[DecisionRecord]) {
    let trace_id = servicing_telemetry::current_trace_id();
    for record in decisions {
        let record = DecisionRecord {
            trace_id: trace_id.clone(),
            ..record.clone()
        };
        servicing_telemetry::print_decision(&record);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::COLLISION;
    use crate::tests::change;

    /// The record of a delivery of `event`, as `process_one` starts it.
    fn started(event: &DelinquencyChanged) -> DecisionRecord {
        DecisionRecord {
            receive_count: Some(2),
            source_system: Some("servicing.account-state".into()),
            ..event.evidence(DecisionRecord::new(
                CONSUMER,
                "m-1",
                Verdict::Retried,
                DecidedBy::Decode,
            ))
        }
    }

    #[test]
    fn when_a_change_is_decided_should_record_its_identity_verdict_and_how() {
        let event = change("DPD_1_29", "DPD_30_59", "2026-10-01T00:00:00Z", "evt_7");
        let applied = Decided::new(Verdict::Applied, DecidedBy::Claim)
            .settle(started(&event), &MessageResult::Handled { action: None });
        let fingerprint = Fingerprint::of_value(&event.detail);
        assert_eq!(
            applied.to_json(),
            json!({"recordVersion": 1, "kind": "decision", "consumer": "collections",
                "messageId": "m-1", "receiveCount": 2, "sourceSystem": "servicing.account-state",
                "sourceEventId": "evt_7", "accountId": "acc_1",
                "fingerprint": fingerprint.as_str(), "verdict": "applied", "decidedBy": "claim"})
        );

        // A collision is quarantined under its code; a retry overrides whatever was decided.
        let collision = Decided {
            code: Some(COLLISION),
            ..Decided::new(Verdict::Collision, DecidedBy::RefusedClaim)
        }
        .settle(
            started(&event),
            &MessageResult::Quarantined {
                reason: "claimed with another fingerprint".into(),
            },
        );
        assert_eq!(
            (
                collision.verdict,
                collision.decided_by,
                collision.code.as_deref(),
                collision.reason.as_deref()
            ),
            (
                Verdict::Collision,
                DecidedBy::RefusedClaim,
                Some("collision"),
                Some("claimed with another fingerprint")
            )
        );
        let retried = Decided::new(Verdict::Stale, DecidedBy::BusinessRule).settle(
            started(&event),
            &MessageResult::Retry {
                reason: "throttled".into(),
            },
        );
        assert_eq!(
            (
                retried.verdict,
                retried.decided_by,
                retried.code,
                retried.reason.as_deref()
            ),
            (
                Verdict::Retried,
                DecidedBy::Transient,
                None,
                Some("throttled")
            )
        );
    }

    #[test]
    fn when_sqs_gives_no_receive_count_should_say_nothing() {
        let mut message = SqsMessage::default();
        assert_eq!(receive_count(&message), None);
        message
            .attributes
            .insert("ApproximateReceiveCount".into(), "3".into());
        assert_eq!(receive_count(&message), Some(3));
    }
}
