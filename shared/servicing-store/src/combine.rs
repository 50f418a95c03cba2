//! Group commit across accounts: the commits a batch's accounts prepare at the same time
//! leave together, in as few `TransactWriteItems` as fit (100 items each, never two operations
//! on one item).
//!
//! The accounts of a batch run as participants. A round leaves when every running participant
//! has submitted its next commit (or finished): all that waits is packed into transactions
//! and sent at once. With one participant, or a caller that is none, a commit leaves at once.
//! Each submission keeps its own answer: the cancellation reasons of its own items;
//! `Withdrawn` when only another submission's items failed (nothing of it was written and its
//! state still holds); and a request refused as such is sent again per submission, so one bad
//! transaction never fails the others. A submission may name the last moment it may leave (its
//! invocation's deadline near): a round that forms later answers it `NotSent` without sending,
//! however long it waited for the other participants.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem};
use tokio::sync::oneshot;

use crate::errors::classify_service;
use crate::{StoreError, classify, items};

/// DynamoDB's limit of items per `TransactWriteItems` (both local engines enforce it too).
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// How one submitted transaction ended.
#[derive(Debug)]
pub(crate) enum Answer {
    Committed,
    /// Cancelled: the reasons for this submission's items, in its order.
    Cancelled(Vec<CancellationReason>),
    /// Cancelled for another submission's items only: nothing was written, nothing was wrong.
    Withdrawn,
}

type Reply = oneshot::Sender<Result<Answer, StoreError>>;

struct Submission {
    items: Vec<TransactWriteItem>,
    /// `items.len()`, still known once the items have gone into a request.
    size: usize,
    keys: Vec<(String, String)>,
    /// No request carries it after this moment.
    last_start: Option<SystemTime>,
    reply: Reply,
}

impl Submission {
    fn too_late(&self) -> bool {
        self.last_start
            .is_some_and(|last| SystemTime::now() >= last)
    }
}

#[derive(Default)]
struct Gate {
    /// Participants running (registered and not finished).
    running: usize,
    /// Submissions waiting or in the air, not answered yet.
    submitted: usize,
    waiting: Vec<Submission>,
}

pub(crate) struct Combiner {
    client: Client,
    /// Items per transaction at most (`MAX_TRANSACTION_ITEMS` or less).
    max_items: usize,
    gate: Mutex<Gate>,
    /// `TransactWriteItems` requests sent so far.
    sent: AtomicU64,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

/// A running participant; dropping it (finished, or unwound by a panic) lets the others go.
#[derive(Debug)]
pub struct Participant {
    combiner: Arc<Combiner>,
}

impl Drop for Participant {
    fn drop(&mut self) {
        let round = {
            let mut gate = self.combiner.gate();
            gate.running -= 1;
            Combiner::round(&mut gate)
        };
        self.combiner.launch(round);
    }
}

impl Combiner {
    pub fn new(client: Client, max_items: usize) -> Self {
        Self {
            client,
            max_items: max_items.clamp(1, MAX_TRANSACTION_ITEMS),
            gate: Mutex::default(),
            sent: AtomicU64::new(0),
        }
    }

    /// A panic elsewhere cannot leave the gate half-updated (every change is made under the
    /// lock with no call that can panic), so a poisoned lock still guards a valid gate.
    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn transactions_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn participant(self: &Arc<Self>) -> Participant {
        self.gate().running += 1;
        Participant {
            combiner: Arc::clone(self),
        }
    }

    /// Everything waiting, once every running participant has submitted.
    fn round(gate: &mut Gate) -> Vec<Submission> {
        if gate.waiting.is_empty() || gate.submitted < gate.running {
            return Vec::new();
        }
        std::mem::take(&mut gate.waiting)
    }

    /// Commits `items`, together with the other participants' commits of this round, unless
    /// the round forms after `last_start`.
    pub async fn send(
        self: &Arc<Self>,
        items: Vec<TransactWriteItem>,
        last_start: Option<SystemTime>,
    ) -> Result<Answer, StoreError> {
        let (reply, answer) = oneshot::channel();
        let keys = items.iter().filter_map(item_key).collect();
        let round = {
            let mut gate = self.gate();
            gate.submitted += 1;
            let size = items.len();
            gate.waiting.push(Submission {
                items,
                size,
                keys,
                last_start,
                reply,
            });
            Self::round(&mut gate)
        };
        self.launch(round);
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Transient(
                "the shared transaction ended without an answer".into(),
            ))
        })
    }

    /// Sends a round: packed into transactions, each in its own task, so no participant's
    /// answer waits for another transaction than its own.
    fn launch(self: &Arc<Self>, round: Vec<Submission>) {
        let mut waiting: VecDeque<Submission> = round.into();
        while !waiting.is_empty() {
            let flight = next_flight(&mut waiting, self.max_items);
            // A participant dropped while the runtime shuts down must not panic in `drop`.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                let error = StoreError::Transient("no runtime to commit on".into());
                self.reply(
                    flight
                        .into_iter()
                        .map(|s| (s, Err(error.clone())))
                        .collect(),
                );
                continue;
            };
            let combiner = Arc::clone(self);
            runtime.spawn(async move { combiner.commit(flight).await });
        }
    }

    /// The whole flight is counted out before any of it is answered: a submitter answered
    /// first then sees its flight-mates as busy, and its next commit waits for them instead of
    /// leaving alone.
    fn reply(&self, answers: Vec<(Submission, Result<Answer, StoreError>)>) {
        self.gate().submitted -= answers.len();
        for (submission, answer) in answers {
            let _ = submission.reply.send(answer);
        }
    }

    async fn commit(&self, flight: Vec<Submission>) {
        let (late, mut flight): (Vec<_>, Vec<_>) = flight.into_iter().partition(|s| s.too_late());
        if !late.is_empty() {
            let error = StoreError::NotSent("its invocation's deadline was near".into());
            self.reply(late.into_iter().map(|s| (s, Err(error.clone()))).collect());
        }
        if flight.is_empty() {
            return;
        }
        let merged = flight.len() > 1;
        let items: Vec<TransactWriteItem> = if merged {
            // Kept: a shared request refused as such is resent per submission.
            flight
                .iter()
                .flat_map(|s| s.items.iter().cloned())
                .collect()
        } else {
            flight
                .iter_mut()
                .flat_map(|s| std::mem::take(&mut s.items))
                .collect()
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let error = match result {
            Ok(_) => {
                self.reply(
                    flight
                        .into_iter()
                        .map(|s| (s, Ok(Answer::Committed)))
                        .collect(),
                );
                return;
            }
            Err(SdkError::ServiceError(e)) => match e.into_err() {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    let mut reasons = cancelled.cancellation_reasons().iter();
                    let answers = flight
                        .into_iter()
                        .map(|submission| {
                            let own: Vec<CancellationReason> =
                                reasons.by_ref().take(submission.size).cloned().collect();
                            let failed = own.iter().any(|r| r.code().is_some_and(|c| c != "None"));
                            let answer = if merged && !failed {
                                Answer::Withdrawn
                            } else {
                                Answer::Cancelled(own)
                            };
                            (submission, Ok(answer))
                        })
                        .collect();
                    self.reply(answers);
                    return;
                }
                other => classify_service(other),
            },
            // A timeout or a lost connection: transient (the commit may have happened).
            Err(other) => classify(other),
        };
        if merged && matches!(error, StoreError::Rejected(_)) {
            // Refused as a request (e.g. over 4 MB together): each on its own finds the culprit.
            for submission in flight {
                Box::pin(self.commit(vec![submission])).await;
            }
            return;
        }
        self.reply(
            flight
                .into_iter()
                .map(|s| (s, Err(error.clone())))
                .collect(),
        );
    }
}

/// The oldest waiting submission and every later one that still fits beside it: within
/// `max_items` and touching none of its items (DynamoDB refuses two operations on one item,
/// e.g. one fact's claim delivered for two accounts).
fn next_flight(waiting: &mut VecDeque<Submission>, max_items: usize) -> Vec<Submission> {
    let mut flight: Vec<Submission> = Vec::new();
    let mut items = 0;
    let mut keys: HashSet<(String, String)> = HashSet::new();
    let mut later = VecDeque::new();
    while let Some(submission) = waiting.pop_front() {
        let fits = flight.is_empty()
            || (items + submission.size <= max_items
                && !submission.keys.iter().any(|k| keys.contains(k)));
        if fits {
            items += submission.size;
            keys.extend(submission.keys.iter().cloned());
            flight.push(submission);
        } else {
            later.push_back(submission);
        }
    }
    *waiting = later;
    flight
}

/// The `(pk, sk)` an item of a transaction acts on.
fn item_key(item: &TransactWriteItem) -> Option<(String, String)> {
    let key = if let Some(put) = item.put() {
        put.item()
    } else if let Some(update) = item.update() {
        update.key()
    } else if let Some(check) = item.condition_check() {
        check.key()
    } else {
        item.delete()?.key()
    };
    let text = |name: &str| match key.get(name) {
        Some(AttributeValue::S(value)) => Some(value.clone()),
        _ => None,
    };
    Some((text(items::PK)?, text(items::SK)?))
}

#[cfg(test)]
mod tests;
