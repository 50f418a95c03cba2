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
//! transaction never fails the others.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
    reply: Reply,
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

    /// Commits `items`, together with the other participants' commits of this round.
    pub async fn send(
        self: &Arc<Self>,
        items: Vec<TransactWriteItem>,
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

    async fn commit(&self, mut flight: Vec<Submission>) {
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
mod tests {
    use aws_sdk_dynamodb::types::Put;

    use super::*;

    fn put(pk: &str) -> TransactWriteItem {
        let item = items::key_item((pk.to_owned(), "X".to_owned()));
        let put = Put::builder()
            .table_name("t")
            .set_item(Some(item))
            .build()
            .expect("put");
        TransactWriteItem::builder().put(put).build()
    }

    fn submission(pks: &[&str]) -> Submission {
        let items: Vec<TransactWriteItem> = pks.iter().map(|pk| put(pk)).collect();
        let keys = items.iter().filter_map(item_key).collect();
        Submission {
            size: items.len(),
            items,
            keys,
            reply: oneshot::channel().0,
        }
    }

    fn sizes(flight: &[Submission]) -> Vec<usize> {
        flight.iter().map(|s| s.items.len()).collect()
    }

    #[test]
    fn when_submissions_fit_should_leave_in_one_flight_in_order() {
        let mut waiting: VecDeque<Submission> = [
            submission(&["a1", "a2"]),
            submission(&["b1"]),
            submission(&["c1", "c2", "c3"]),
        ]
        .into();
        let flight = next_flight(&mut waiting, MAX_TRANSACTION_ITEMS);
        assert_eq!(sizes(&flight), [2, 1, 3]);
        assert!(waiting.is_empty());
    }

    #[test]
    fn when_the_item_limit_is_reached_should_keep_the_rest_for_the_next_flight() {
        let mut waiting: VecDeque<Submission> = [
            submission(&["a1", "a2"]),
            submission(&["b1", "b2"]),
            submission(&["c1"]),
        ]
        .into();
        let flight = next_flight(&mut waiting, 3);
        // b does not fit beside a; c still does.
        assert_eq!(sizes(&flight), [2, 1]);
        assert_eq!(sizes(&next_flight(&mut waiting, 3)), [2]);
        // A submission larger than the limit still leaves, alone.
        let mut big: VecDeque<Submission> = [submission(&["d1", "d2", "d3", "d4"])].into();
        assert_eq!(sizes(&next_flight(&mut big, 3)), [4]);
    }

    #[test]
    fn when_two_submissions_touch_one_item_should_never_share_a_flight() {
        let mut waiting: VecDeque<Submission> = [
            submission(&["claim-x", "a"]),
            submission(&["claim-x", "b"]),
            submission(&["c"]),
        ]
        .into();
        assert_eq!(
            sizes(&next_flight(&mut waiting, MAX_TRANSACTION_ITEMS)),
            [2, 1]
        );
        let second = next_flight(&mut waiting, MAX_TRANSACTION_ITEMS);
        assert_eq!(second[0].keys[1].0, "b");
    }
}
