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
//!    again with the SAME `actionId`, which the receiver deduplicates). To a receiver that does
//!    not deduplicate (`NotificationDeduplicates=false`), an attempt that may have reached it
//!    (a timeout, the connection lost after sending, a lease lost while `SENDING`) is recorded
//!    `UNKNOWN`, and the next attempt first asks its status endpoint by `actionId`, records what
//!    it said (`receiverSaid`), and calls again only on "not delivered".
//!
//! Changes of one account are ordered by `occurredAt`, then by `eventId`: the detail carries no
//! per-account sequence, so the id only makes ties deterministic.
//!
//! Every delivered `DelinquencyChanged` (and every body that does not decode) leaves one
//! decision record (consumer `collections`): applied, duplicate, collision, stale, quarantined
//! or retried, and how that was decided (`decisions`). A delivery of another event type
//! leaves none.
//!
//! Here the handler and its batch. What a `DelinquencyChanged` is (its order among its account's
//! changes, the action it calls for) is in `change`; one message's claim and verdict in
//! `message`; an action's execution under its lease in `action`; the call itself in `notifier`.

mod action;
pub mod auth;
mod change;
mod config;
mod decisions;
mod message;
mod notifier;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::StreamExt;
use servicing_store::{ActionStatus, ServicingStore};
use servicing_telemetry::DecisionRecord;

pub use config::{CALL_TIMEOUT, Config, NotificationAuth};
pub use notifier::{Delivery, Notifier, Status};
pub use servicing_settings::{ConfigError, FromSettings};

pub const CONSUMER: &str = "collections";

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
                    let sent_by = servicing_telemetry::sent_by_of(m);
                    let record = record.map(|r| DecisionRecord { sent_by, ..r });
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
}

#[cfg(test)]
mod tests;
