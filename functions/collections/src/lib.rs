//! The collections consumer: `DelinquencyChanged` events (EventBridge → SQS) in, one customer
//! notification per action out.
//!
//! Protocol (see `docs/functions.md`, "Collections actions"):
//! 1. read the account's latest change recorded (`DELINQUENCY#collections#<accountId>`);
//! 2. claim `(collections, eventId)` and, when the change is no older than that one, record it as
//!    the latest (put only if the stored one is still earlier) and, when it moves to a WORSE bucket
//!    that is `DPD_30_59` or worse, the action intent `PENDING` under `actionId` — ONE
//!    transaction. A change older than the latest (the queue is a standard one: a cure can be
//!    handled before the worsening it follows) is claimed `STALE` and its intent, if any, is
//!    recorded `SUPERSEDED`: it never calls. An improvement or a cure calls for no action; a cure
//!    ends the episode, so a relapse after it is a worsening again and notifies;
//! 3. after the commit, take the lease, read the latest change again — a later change recorded
//!    since (also on the replay of a pending intent) settles the action `SUPERSEDED` — and call
//!    the receiver with `Idempotency-Key: <actionId>`;
//! 4. record the outcome: `SENT`, `REJECTED` (a definitive 4xx, never retried), or still `PENDING`
//!    with the error (the message is retried; the replay finds the intent pending and executes it
//!    again with the SAME `actionId`, which the receiver deduplicates).
//!
//! Changes of one account are ordered by `occurredAt`, then by `eventId`: the detail carries no
//! per-account sequence, so the id only makes ties deterministic.
//!
//! Every delivered `DelinquencyChanged` (and every body that does not decode) leaves one
//! decision record (consumer `collections`): applied, duplicate, collision, stale, quarantined
//! or retried, and how that was decided (`decisions`). A delivery of another event type
//! leaves none.

mod config;
mod decisions;
mod notifier;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::StreamExt;
use serde_json::{Value, json};
use servicing_domain::{AccountId, Bucket, Fingerprint, SourceRef};
use servicing_store::schema::LatestDelinquencyRecord;
use servicing_store::{
    ActionIntent, ActionStatus, CommitOutcome, Effect, QuarantineEntry, ServicingStore, StoreError,
    UnitOfWork,
};
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

use decisions::Decided;

pub use config::{CALL_TIMEOUT, Config};
pub use notifier::{Delivery, Notifier};
pub use servicing_settings::{ConfigError, FromSettings};

pub const CONSUMER: &str = "collections";
/// Claims of this consumer are keyed by the outbox event id under this pseudo source system.
const CLAIM_SYSTEM: &str = "outbox";
/// Commits of one change that lose to a concurrent change of its account (read again, judge
/// again) before the message is retried.
const COMMIT_ATTEMPTS: u32 = 5;
/// Quarantine codes: a body that is not a valid `DelinquencyChanged`, an event id claimed with
/// another payload.
const INVALID_EVENT: &str = "invalid_event";
const COLLISION: &str = "collision";

/// The action of an event after this delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionOutcome {
    pub status: ActionStatus,
    /// Whether this delivery called the receiver (false: it was settled before).
    pub executed_now: bool,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageResult {
    /// First delivery; the action (if any) was executed and its outcome recorded.
    Handled {
        action: Option<ActionOutcome>,
    },
    /// A redelivery: nothing new, except that a still-pending action was executed again.
    Duplicate {
        action: Option<ActionOutcome>,
    },
    /// Not an event this consumer acts on (no claim needed: nothing happens).
    Ignored,
    Quarantined {
        reason: String,
    },
    Retry {
        reason: String,
    },
}

/// The relevant fields of a `DelinquencyChanged` detail.
#[derive(Debug, Clone)]
struct DelinquencyChanged {
    event_id: String,
    account_id: AccountId,
    from_bucket: Bucket,
    to_bucket: Bucket,
    /// `occurredAt`, epoch milliseconds.
    occurred_at: i64,
    detail: Value,
}

/// Where a change stands among its account's changes: by `occurredAt`, then by `eventId` (the
/// same order as the condition of the latest-change put in the store).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ChangeOrder<'a> {
    occurred_at: i64,
    event_id: &'a str,
}

fn order_of(record: &LatestDelinquencyRecord) -> ChangeOrder<'_> {
    ChangeOrder {
        occurred_at: record.occurred_at,
        event_id: &record.event_id,
    }
}

/// The recorded change later than `order`, if `latest` is one.
fn later_than(
    latest: Option<LatestDelinquencyRecord>,
    order: &ChangeOrder<'_>,
) -> Option<LatestDelinquencyRecord> {
    latest.filter(|l| order_of(l) > *order)
}

impl DelinquencyChanged {
    fn parse(envelope: &Value) -> Result<Option<Self>, String> {
        if envelope["detail-type"] != "DelinquencyChanged" {
            return Ok(None);
        }
        let detail = &envelope["detail"];
        let event_id = detail["eventId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or("detail.eventId is missing")?
            .to_owned();
        let account_id = AccountId::parse(detail["accountId"].as_str().unwrap_or_default())
            .map_err(|e| format!("detail.accountId: {e}"))?;
        let bucket = |field: &str| {
            serde_json::from_value::<Bucket>(detail[field].clone())
                .map_err(|_| format!("detail.{field} is not a bucket: {}", detail[field]))
        };
        let to_bucket = bucket("toBucket")?;
        let from_bucket = bucket("fromBucket")?;
        let occurred_at = detail["occurredAt"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_millis())
            .ok_or_else(|| {
                format!(
                    "detail.occurredAt is not an RFC 3339 time: {}",
                    detail["occurredAt"]
                )
            })?;
        Ok(Some(Self {
            event_id,
            account_id,
            from_bucket,
            to_bucket,
            occurred_at,
            detail: detail.clone(),
        }))
    }

    fn order(&self) -> ChangeOrder<'_> {
        ChangeOrder {
            occurred_at: self.occurred_at,
            event_id: &self.event_id,
        }
    }

    /// The contract's rule: a move to a WORSE bucket that is `DPD_30_59` or worse notifies; an
    /// improvement (e.g. 60-89 -> 30-59 after a partial payment) and a cure do not.
    fn calls_for_notice(&self) -> bool {
        self.to_bucket > self.from_bucket && self.to_bucket.needs_collections_action()
    }

    fn record(&self) -> LatestDelinquencyRecord {
        LatestDelinquencyRecord::new(
            CONSUMER,
            &self.account_id,
            &self.event_id,
            self.occurred_at,
            self.from_bucket,
            self.to_bucket,
        )
    }

    /// The contract's action id: stable for this event, so every replay uses the same one.
    fn action_id(&self) -> String {
        format!(
            "collections_notification:{}:{}:{}",
            self.account_id,
            self.to_bucket.as_str(),
            self.event_id
        )
    }

    fn intent(&self) -> Option<ActionIntent> {
        self.calls_for_notice().then(|| {
            let action_id = self.action_id();
            ActionIntent {
                payload: json!({
                    "actionId": action_id,
                    "type": "collections_notification",
                    "accountId": self.account_id.as_str(),
                    "toBucket": self.to_bucket.as_str(),
                    "fromBucket": self.detail["fromBucket"],
                    "dpd": self.detail["dpd"],
                    "eventId": self.event_id,
                }),
                action_id,
                account_id: self.account_id.clone(),
                event_id: self.event_id.clone(),
            }
        })
    }
}

#[derive(Debug)]
pub struct CollectionsHandler {
    store: ServicingStore,
    notifier: Notifier,
    concurrency: usize,
}

/// A batch's results (by message id, in order) and the decision record of each delivered
/// `DelinquencyChanged` (and of each body that does not decode), in the same order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionsReport {
    pub results: Vec<(String, MessageResult)>,
    pub decisions: Vec<DecisionRecord>,
}

/// A batch's outcomes, as EMF metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub applied: u64,
    pub duplicate: u64,
    pub ignored: u64,
    pub quarantined: u64,
    pub retried: u64,
    /// Notifications sent by this batch (not by an earlier delivery of the same action).
    pub actions_executed: u64,
}

impl BatchCounts {
    pub fn count(&mut self, result: &MessageResult) {
        match result {
            MessageResult::Handled { .. } => self.applied += 1,
            MessageResult::Duplicate { .. } => self.duplicate += 1,
            MessageResult::Ignored => self.ignored += 1,
            MessageResult::Quarantined { .. } => self.quarantined += 1,
            MessageResult::Retry { .. } => self.retried += 1,
        }
        if let MessageResult::Handled { action: Some(a) }
        | MessageResult::Duplicate { action: Some(a) } = result
            && a.executed_now
        {
            self.actions_executed += 1;
        }
    }

    /// EMF metric names and values (namespace `LoanServicing`, dimension `Consumer`).
    pub fn metrics(&self) -> [(&'static str, u64); 6] {
        [
            ("Applied", self.applied),
            ("Duplicate", self.duplicate),
            ("Ignored", self.ignored),
            ("Quarantined", self.quarantined),
            ("Retried", self.retried),
            ("ActionsExecuted", self.actions_executed),
        ]
    }
}

impl CollectionsHandler {
    pub fn new(store: ServicingStore, notifier: Notifier) -> Self {
        Self {
            store,
            notifier,
            concurrency: 8,
        }
    }

    /// The Lambda entry point: processes, prints each decision record (stamped with the X-Ray
    /// trace of the invocation) and the batch's EMF line.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let report = self.process_batch(&event.records).await;
        decisions::emit(&report.decisions);
        let mut response = SqsBatchResponse::default();
        let mut counts = BatchCounts::default();
        for (id, result) in &report.results {
            counts.count(result);
            if matches!(result, MessageResult::Retry { .. }) {
                response.add_failure(id.clone());
            }
        }
        servicing_telemetry::emit(CONSUMER, &counts.metrics());
        response
    }

    /// Messages are independent (one event each): processed concurrently, bounded.
    pub async fn process(&self, messages: &[SqsMessage]) -> Vec<(String, MessageResult)> {
        self.process_batch(messages).await.results
    }

    /// [`Self::process`], with the decision records.
    pub async fn process_batch(&self, messages: &[SqsMessage]) -> CollectionsReport {
        let processed: Vec<(String, MessageResult, Option<DecisionRecord>)> =
            futures_util::stream::iter(messages)
                .map(|m| async move {
                    let id = m.message_id.clone().unwrap_or_default();
                    let body = m.body.as_deref().unwrap_or_default();
                    let (result, record) = self
                        .process_one(&id, body, decisions::receive_count(m))
                        .await;
                    (id, result, record)
                })
                .buffered(self.concurrency)
                .collect()
                .await;
        let mut report = CollectionsReport::default();
        for (id, result, record) in processed {
            report.results.push((id, result));
            report.decisions.extend(record);
        }
        report
    }

    /// The result of one delivery and its decision record (none for an event this consumer
    /// does not act on).
    #[tracing::instrument(skip_all, fields(message_id))]
    async fn process_one(
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

    /// Executes the stored action if it is still pending and no later change of its account has
    /// been recorded, under a lease so twin deliveries never call at once, and records the
    /// outcome (`SUPERSEDED` when a later change was recorded: never called).
    async fn execute_if_pending(
        &self,
        action_id: &str,
        event: &DelinquencyChanged,
    ) -> Result<ActionOutcome, String> {
        let record = match self.store.action(action_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Err(format!("action {action_id} is not recorded")),
            Err(e) => return Err(e.to_string()),
        };
        let settled = |status| {
            Ok(ActionOutcome {
                status,
                executed_now: false,
            })
        };
        if matches!(
            record.status,
            ActionStatus::Sent | ActionStatus::Rejected | ActionStatus::Superseded
        ) {
            return settled(record.status);
        }
        // Long enough for the call and its answer: a twin may take over only after that.
        let lease_ms = i64::try_from(self.notifier.timeout().as_millis() * 2).unwrap_or(i64::MAX);
        let lease_id = lease_id();
        let until = servicing_store::epoch_millis().saturating_add(lease_ms + 2_000);
        match self.store.lease_action(action_id, &lease_id, until).await {
            Ok(None) => {}
            Ok(Some(ActionStatus::Sending | ActionStatus::Pending)) => {
                return Err(format!(
                    "action {action_id} is being executed by another delivery; will retry"
                ));
            }
            Ok(Some(status)) => return settled(status),
            Err(e) => return Err(e.to_string()),
        }
        // Decided at call time, under the lease: the customer is no longer where the notice
        // says once a later change of the account is recorded (a cure handled first, say). A
        // failed read leaves the lease to run out; the redelivery comes after it.
        let later = match self.store.latest_change(&event.account_id).await {
            Ok(latest) => later_than(latest, &event.order()),
            Err(e) => return Err(e.to_string()),
        };
        if let Some(later) = later {
            if let Err(e) = self
                .store
                .supersede_action(action_id, &lease_id, &later)
                .await
            {
                return Err(format!("could not record the action as superseded: {e}"));
            }
            tracing::info!(
                action_id,
                later = later.event_id,
                "a later change was recorded before the call: the notification is superseded"
            );
            return settled(ActionStatus::Superseded);
        }
        let delivery = self.notifier.send(action_id, &record.payload).await;
        let (status, http, detail) = match &delivery {
            Delivery::Accepted { status } => {
                (ActionStatus::Sent, Some(*status), "accepted".to_owned())
            }
            Delivery::Rejected { status, reason } => {
                (ActionStatus::Rejected, Some(*status), reason.clone())
            }
            Delivery::Failed { status, reason } => (ActionStatus::Pending, *status, reason.clone()),
        };
        tracing::info!(
            action_id,
            status = status.as_str(),
            http,
            "notification attempt"
        );
        if let Err(e) = self
            .store
            .record_action(action_id, &lease_id, status, http, &detail)
            .await
        {
            return Err(format!("could not record the action outcome: {e}"));
        }
        match status {
            ActionStatus::Sent | ActionStatus::Rejected => Ok(ActionOutcome {
                status,
                executed_now: true,
            }),
            _ => {
                tracing::warn!(
                    alert = "notification_failed",
                    action_id,
                    "notification failed; retried with the same actionId"
                );
                Err(format!("notification failed, will retry: {detail}"))
            }
        }
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

/// A lease holder's id: unique per attempt (process id, time, counter).
fn lease_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        servicing_store::epoch_millis(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests;
