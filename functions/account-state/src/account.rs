//! One account's run through a batch, as a state machine. [`AccountRun`] holds everything the
//! account loop carries — each event's answer once known, the state read (or cached), the
//! reversals' payments, the group size, the rounds lost to concurrent writers, the verdicts of
//! released parked facts — and decides without I/O what comes next ([`AccountRun::next_step`])
//! and what is left undone after a failure ([`AccountRun::fail`]). The handler performs each
//! step's requests and feeds the answers back; it never decides what is retried.

use std::collections::HashMap;

use servicing_domain::{Fingerprint, SourceRef};
use servicing_store::{Commit, CommitOutcome, LoanItem, Snapshot, StoreError};

use crate::batch::Pending;
use crate::group::{self, Answer, Group, Stop, Subject};
use crate::report::MessageResult;

/// What the run needs next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Read the account, with these payments (its reversals' targets) in the same request.
    Read(Vec<SourceRef>),
    /// Read these payments (a released reversal's) into the snapshot.
    ReadTargets(Vec<SourceRef>),
    /// Answer these events from the state: a duplicate (`None`) or a collision with the stored
    /// fingerprint, whose quarantine is a write.
    Known(Vec<(usize, Option<Fingerprint>)>),
    /// Commit this group.
    Commit(Box<Group>),
    /// Every event is answered and nothing parked is ready (or the run ended on a failure).
    Done,
}

/// What a cancelled group leaves to do.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    /// Events whose claims hold another payload: quarantine each as a collision.
    pub collisions: Vec<(usize, Fingerprint)>,
    /// The state moved: wait this many lost rounds' backoff, then re-read.
    pub reread_after: Option<u32>,
}

/// What a failure leaves to do.
#[derive(Debug)]
pub(crate) enum Failure {
    /// DynamoDB refused this event's request as such (it can never succeed): quarantine it,
    /// then go on with the others ([`AccountRun::quarantined`]).
    Quarantine(usize, String),
    /// What is left undone is marked for redelivery; the run has ended.
    Ended,
}

/// A finished run: one answer per pending event, the verdicts of the parked facts judged
/// again, and the state to keep as a warm hint (`None`: forget the account).
#[derive(Debug)]
pub(crate) struct Finished {
    pub results: Vec<MessageResult>,
    pub released: Vec<MessageResult>,
    pub state: Option<LoanItem>,
}

pub(crate) struct AccountRun<'p, 'a> {
    pending: &'p [Pending<'a>],
    settled: Vec<Option<MessageResult>>,
    snapshot: Option<Snapshot>,
    /// The snapshot was read from the store in this invocation (not a warm cache's hint). A
    /// cached state may answer a fact it lists as recently applied — an applied fact stays
    /// applied — but never one it holds parked.
    confirmed: bool,
    /// The payments its reversals refer to (read with the account).
    targets: Vec<SourceRef>,
    /// Facts per transaction; 1 for the rest of the batch once DynamoDB refused a group's
    /// request as such (too large, invalid), so one bad item cannot take the others with it.
    max_units: usize,
    /// Rounds lost to concurrent writers since the last commit.
    conflicts: u32,
    released: Vec<MessageResult>,
    ended: bool,
}

/// Without the events (their payloads are never logged).
impl std::fmt::Debug for AccountRun<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountRun")
            .field("events", &self.pending.len())
            .field("settled", &self.settled)
            .field("confirmed", &self.confirmed)
            .field("max_units", &self.max_units)
            .field("conflicts", &self.conflicts)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<'p, 'a> AccountRun<'p, 'a> {
    /// A run over `pending` (one account's events, in batch order), starting from a warm
    /// instance's `cached` state when it has one — unless a reversal needs its payment read.
    pub fn new(pending: &'p [Pending<'a>], cached: Option<LoanItem>) -> Self {
        let targets: Vec<SourceRef> = pending
            .iter()
            .filter_map(|p| p.event.reversal_target().cloned())
            .collect();
        let snapshot = match targets.is_empty() {
            true => cached.map(|loan| Snapshot {
                loan: Some(loan),
                targets: HashMap::new(),
            }),
            false => None,
        };
        Self {
            pending,
            settled: vec![None; pending.len()],
            snapshot,
            confirmed: false,
            targets,
            max_units: usize::MAX,
            conflicts: 0,
            released: Vec::new(),
            ended: false,
        }
    }

    /// The next step, decided from the state alone.
    pub fn next_step(&mut self, now: i64, max_items: usize) -> Step {
        if self.ended {
            return Step::Done;
        }
        if !self.confirmed
            && self
                .snapshot
                .as_ref()
                .is_some_and(|cached| group::holds_parked(self.pending, &self.settled, cached))
        {
            // A cached parked fact may have been taken off since (expired by the reconciler,
            // its claim released for a resend): only the store can say.
            self.snapshot = None;
        }
        let Some(snapshot) = &self.snapshot else {
            return Step::Read(self.targets.clone());
        };
        let known = group::known_facts(self.pending, &self.settled, snapshot, now);
        if !known.is_empty() {
            return Step::Known(known);
        }
        let group = Group::plan(
            self.pending,
            &self.settled,
            snapshot,
            max_items,
            self.max_units,
            now,
        );
        match &group.stop {
            Stop::NeedTargets(missing) => Step::ReadTargets(missing.clone()),
            _ if group.members.is_empty() => Step::Done,
            _ => Step::Commit(Box::new(group)),
        }
    }

    pub fn pending(&self) -> &'p [Pending<'a>] {
        self.pending
    }

    /// The state the run judges on (`Some` after a read, or from the cache).
    pub fn snapshot_mut(&mut self) -> Option<&mut Snapshot> {
        self.snapshot.as_mut()
    }

    pub fn read(&mut self, snapshot: Snapshot) {
        self.snapshot = Some(snapshot);
        self.confirmed = true;
    }

    /// `payments` were read into the snapshot: later reads of the account include them.
    pub fn targets_read(&mut self, payments: Vec<SourceRef>) {
        self.targets.extend(payments);
    }

    pub fn settle(&mut self, index: usize, result: MessageResult) {
        self.settled[index] = Some(result);
    }

    /// The group committed: its members' answers, its parked facts judged again, the state it
    /// leaves.
    pub fn committed(&mut self, group: Group) {
        self.conflicts = 0;
        let Some(snapshot) = self.snapshot.as_mut() else {
            return;
        };
        for answer in group.committed(self.pending, snapshot) {
            match answer {
                Answer::Message(index, result) => self.settled[index] = Some(result),
                Answer::Released(source, result) => {
                    tracing::info!(source = %source, "parked fact judged again");
                    self.released.push(result);
                }
            }
        }
    }

    /// The group was cancelled: duplicates are answered from the refusal, collisions returned
    /// for their quarantine; any other refusal means the state moved (re-read, after a
    /// backoff) — an error once `max_rounds` rounds are lost. A failed loan condition always
    /// means the state moved, even when every claim was refused: the snapshot (a warm
    /// instance's, older than another instance's commit) must not be kept or judged on.
    pub fn refused(
        &mut self,
        group: &Group,
        commit: Commit,
        max_rounds: u32,
    ) -> Result<Refused, StoreError> {
        let mut refused = Refused::default();
        let mut moved = commit.loan_moved;
        if group.members_with_units(self.pending).next().is_none() {
            // Only the loan item was written (a released fact parked again): its one outcome.
            moved |= !matches!(commit.outcomes.first(), Some(CommitOutcome::Withdrawn));
        }
        for (member, outcome) in group.members_with_units(self.pending).zip(commit.outcomes) {
            let index = match &member.subject {
                Subject::Pending(index) => Some(*index),
                Subject::Released(_) => None,
            };
            match (outcome, index) {
                (CommitOutcome::Duplicate, Some(i)) => {
                    self.settled[i] = Some(MessageResult::Duplicate)
                }
                (CommitOutcome::Collision { stored }, Some(i)) => {
                    refused.collisions.push((i, stored))
                }
                (CommitOutcome::Withdrawn, _) => {}
                _ => moved = true,
            }
        }
        if moved {
            self.lost_round(max_rounds, "still conflicting")?;
            tracing::info!(attempt = self.conflicts, "concurrent change; re-reading");
            refused.reread_after = Some(self.conflicts);
        }
        Ok(refused)
    }

    /// Another round lost to a concurrent writer: the state is read again — an error once
    /// `max_rounds` are lost.
    pub fn lost_round(&mut self, max_rounds: u32, what: &str) -> Result<(), StoreError> {
        self.snapshot = None;
        self.conflicts += 1;
        if self.conflicts >= max_rounds {
            return Err(StoreError::Transient(format!(
                "{what} after {} attempts",
                self.conflicts
            )));
        }
        Ok(())
    }

    /// DynamoDB refused a group of several facts as a request: the same facts again, one per
    /// transaction.
    pub fn split(&mut self) {
        self.max_units = 1;
    }

    /// The group's only member, a released fact DynamoDB refused, was taken off the loan item
    /// into quarantine.
    pub fn released_quarantined(&mut self, code: &str) {
        self.snapshot = None;
        self.released.push(MessageResult::Quarantined {
            code: code.to_owned(),
        });
    }

    /// The one place that decides what a failure leaves undone. The state may have changed
    /// (a lost response), so it is read again. The first unanswered event takes the failure:
    /// quarantined when DynamoDB refused its request as such, else retried — with every later
    /// event of the account, so SQS redelivers them in order. When every event is answered
    /// (a released fact's commit failed), the account's last event is redelivered: nothing
    /// else would bring the ready fact back, and its redelivery is a duplicate whose read
    /// releases the fact again. A quarantined event (a collision) is passed over: its
    /// redelivery would quarantine and alarm a second time. Only when every event was
    /// quarantined is the last one redelivered all the same: a second alarm is noise, a ready
    /// fact left unreleased is money.
    pub fn fail(&mut self, error: StoreError) -> Failure {
        self.snapshot = None;
        let Some(first) = self.settled.iter().position(Option::is_none) else {
            tracing::warn!(error = %error, "a released fact's commit failed; an event of the account is redelivered");
            let quarantined = |r: &Option<MessageResult>| {
                matches!(
                    r,
                    Some(MessageResult::Collision | MessageResult::Quarantined { .. })
                )
            };
            let carrier = self
                .settled
                .iter()
                .rposition(|r| !quarantined(r))
                .or(self.settled.len().checked_sub(1));
            if let Some(carrier) = carrier {
                self.settled[carrier] = Some(MessageResult::Retry {
                    reason: format!("a parked fact this batch released is not committed ({error})"),
                });
            }
            self.ended = true;
            return Failure::Ended;
        };
        match error {
            StoreError::Rejected(reason) => Failure::Quarantine(first, reason),
            other => {
                tracing::warn!(error = %other, "will be retried");
                self.retry_from(first, other.to_string());
                Failure::Ended
            }
        }
    }

    /// The answer to a [`Failure::Quarantine`]: the run goes on, unless the quarantine write
    /// failed too (then that event is retried, and every later one).
    pub fn quarantined(&mut self, index: usize, result: MessageResult) {
        match result {
            MessageResult::Retry { reason } => self.retry_from(index, reason),
            other => self.settled[index] = Some(other),
        }
    }

    fn retry_from(&mut self, first: usize, reason: String) {
        let later = format!(
            "an earlier event of this account failed ({})",
            self.pending[first].message_id
        );
        self.settled[first] = Some(MessageResult::Retry { reason });
        for settled in &mut self.settled[first + 1..] {
            *settled = Some(MessageResult::Retry {
                reason: later.clone(),
            });
        }
        self.ended = true;
    }

    pub fn finish(self) -> Finished {
        let results = self
            .settled
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| MessageResult::Retry {
                    reason: "left unsettled".into(),
                })
            })
            .collect();
        Finished {
            results,
            released: self.released,
            state: self.snapshot.and_then(|s| s.loan),
        }
    }
}
