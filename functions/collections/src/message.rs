//! One message: decode it, claim the change with its intent in one transaction (read the
//! account's latest change, judge, commit; again on a concurrent change), execute the action
//! when the change calls for one, and quarantine what cannot be handled. Separate from the
//! batch, which only runs these concurrently and reports them.

use serde_json::Value;
use servicing_domain::{Fingerprint, SourceRef};
use servicing_store::{
    ActionStatus, CommitOutcome, Effect, QuarantineEntry, StoreError, UnitOfWork,
};
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

use crate::change::{DelinquencyChanged, later_than};
use crate::decisions::{self, Decided};
use crate::{ActionOutcome, CollectionsHandler, MessageResult};

/// Claims of this consumer are keyed by the outbox event id under this pseudo source system.
const CLAIM_SYSTEM: &str = "outbox";
/// Commits of one change that lose to a concurrent change of its account (read again, judge
/// again) before the message is retried.
const COMMIT_ATTEMPTS: u32 = 5;
/// Quarantine codes: a body that is not a valid `DelinquencyChanged`, an event id claimed with
/// another payload.
const INVALID_EVENT: &str = "invalid_event";
pub(crate) const COLLISION: &str = "collision";

impl CollectionsHandler {
    /// The result of one delivery and its decision record (none for an event this consumer
    /// does not act on).
    #[tracing::instrument(skip_all, fields(message_id))]
    pub(crate) async fn process_one(
        &self,
        message_id: &str,
        body: &str,
        receive_count: Option<u32>,
    ) -> (MessageResult, Option<DecisionRecord>) {
        let record = decisions::delivery(message_id, receive_count);
        let envelope = serde_json::from_str::<Value>(body);
        let parsed = envelope
            .as_ref()
            .map_err(|e| format!("body is not JSON: {e}"))
            .and_then(DelinquencyChanged::parse);
        let event = match parsed {
            Ok(Some(event)) => event,
            Ok(None) => return (MessageResult::Ignored, None),
            Err(reason) => {
                let result = self
                    .quarantine(message_id, body, INVALID_EVENT, &reason)
                    .await;
                let decided = Decided {
                    code: Some(INVALID_EVENT),
                    ..Decided::new(Verdict::Quarantined, DecidedBy::Decode)
                };
                let record = decided.settle(record, &result);
                return (result, Some(record));
            }
        };
        let record = DecisionRecord {
            source_system: decisions::source_system(envelope.as_ref().ok()),
            ..event.evidence(record)
        };
        let (result, decided) = self.decide(message_id, body, &event).await;
        let record = decided.settle(record, &result);
        (result, Some(record))
    }

    /// Claims the change and executes its action: the result, and how it was decided.
    async fn decide(
        &self,
        message_id: &str,
        body: &str,
        event: &DelinquencyChanged,
    ) -> (MessageResult, Decided) {
        let source = SourceRef {
            system: CLAIM_SYSTEM.to_owned(),
            event_id: event.event_id.clone(),
        };
        let fingerprint = Fingerprint::of_value(&event.detail);
        let intent = event.intent();
        let unit = UnitOfWork {
            source: &source,
            event_type: "DelinquencyChanged",
            account_id: &event.account_id,
            fingerprint: &fingerprint,
            released: false,
            effect: Effect::Intent(intent.as_ref()),
        };
        let record = event.record();
        let mut attempt = 0;
        // (first time, superseded at the commit by the later change it names)
        let (first_time, superseded) = loop {
            let later = match self.store.latest_change(&event.account_id).await {
                Ok(latest) => later_than(latest, &event.order()),
                Err(e) => return (retry(e), Decided::RETRIED),
            };
            match self
                .store
                .commit_change(&unit, &record, later.as_ref())
                .await
            {
                Ok(CommitOutcome::Committed) => break (true, later),
                // The claim was there, or (after a claim expired) the action was: a replay.
                Ok(CommitOutcome::Duplicate) => break (false, None),
                Ok(CommitOutcome::Collision { stored }) => {
                    let reason = format!(
                        "collision: event {} was claimed with fingerprint {stored}, this one has {fingerprint}",
                        event.event_id
                    );
                    let result = self.quarantine(message_id, body, COLLISION, &reason).await;
                    let decided = Decided {
                        code: Some(COLLISION),
                        ..Decided::new(Verdict::Collision, DecidedBy::RefusedClaim)
                    };
                    return (result, decided);
                }
                // A later change of the account was recorded meanwhile, or a concurrent one
                // touched the same items: judge again on what is stored now.
                Ok(CommitOutcome::VersionConflict | CommitOutcome::Contended)
                    if attempt + 1 < COMMIT_ATTEMPTS =>
                {
                    attempt += 1;
                    tokio::time::sleep(servicing_store::backoff(
                        attempt,
                        std::time::Duration::from_millis(20),
                    ))
                    .await;
                }
                Ok(other) => {
                    let reason = format!("commit not settled: {other:?}");
                    return (MessageResult::Retry { reason }, Decided::RETRIED);
                }
                Err(e) => return (retry(e), Decided::RETRIED),
            }
        };
        // Claimed now: applied, or stale when a later change of the account was recorded
        // first; claimed before (or its action recorded): a duplicate.
        let decided = match (first_time, &superseded) {
            (true, None) => Decided::new(Verdict::Applied, DecidedBy::Claim),
            (true, Some(_)) => Decided::new(Verdict::Stale, DecidedBy::BusinessRule),
            (false, _) => Decided::new(Verdict::Duplicate, DecidedBy::RefusedClaim),
        };

        let action = match (&intent, superseded) {
            (None, _) => None,
            (Some(intent), Some(later)) => {
                tracing::info!(
                    action_id = intent.action_id,
                    later = later.event_id,
                    "a later change was seen first: the notification is superseded"
                );
                Some(ActionOutcome {
                    status: ActionStatus::Superseded,
                    executed_now: false,
                })
            }
            (Some(intent), None) => match self.execute_if_pending(&intent.action_id, event).await {
                Ok(status) => Some(status),
                Err(reason) => return (MessageResult::Retry { reason }, Decided::RETRIED),
            },
        };
        let result = match first_time {
            true => MessageResult::Handled { action },
            false => MessageResult::Duplicate { action },
        };
        (result, decided)
    }

    async fn quarantine(
        &self,
        message_id: &str,
        body: &str,
        code: &str,
        reason: &str,
    ) -> MessageResult {
        let entry = QuarantineEntry::new(message_id, body, code, reason);
        match self.store.quarantine(&entry).await {
            Ok(()) => {
                tracing::warn!(reason, "quarantined");
                MessageResult::Quarantined {
                    reason: reason.to_owned(),
                }
            }
            Err(e) => retry(e),
        }
    }
}

fn retry(error: StoreError) -> MessageResult {
    MessageResult::Retry {
        reason: error.to_string(),
    }
}
