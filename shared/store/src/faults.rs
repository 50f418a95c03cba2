//! Fault injection for commits. No local engine throttles or returns `TransactionConflict`, and
//! a lost response cannot be provoked on demand; tests queue these faults to prove the retry
//! paths. The production store has an empty plan: one uncontended mutex lock per commit.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::{CommitOutcome, StoreError};

/// One injected fault, consumed by the next commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails before sending, as DynamoDB throttling (after the SDK's own retries) would.
    Throttle,
    /// Fails before sending, as a `TransactionConflict` cancellation would.
    TransactionConflict,
    /// Sends and commits, then reports a timeout: the caller cannot know it committed.
    LoseResponse,
    /// Panics before sending, as a bug in the handler would.
    Panic,
    /// Fails before sending, as DynamoDB refusing the request as such would (a
    /// `ValidationException`, e.g. a transaction over 4 MB).
    Invalid,
}

#[derive(Debug, Clone, Default)]
pub struct FaultPlan(Arc<Mutex<VecDeque<Fault>>>);

impl FaultPlan {
    pub fn push(&self, fault: Fault) {
        if let Ok(mut queue) = self.0.lock() {
            queue.push_back(fault);
        }
    }

    pub fn pending(&self) -> usize {
        self.0.lock().map(|q| q.len()).unwrap_or_default()
    }

    pub(crate) fn next(&self) -> NextFault {
        NextFault(self.0.lock().ok().and_then(|mut q| q.pop_front()))
    }
}

pub(crate) struct NextFault(Option<Fault>);

impl NextFault {
    pub(crate) fn before_commit(&self) -> Option<Result<CommitOutcome, StoreError>> {
        match self.0? {
            Fault::Throttle => Some(Err(StoreError::Transient(
                "injected: ThrottlingException".into(),
            ))),
            Fault::TransactionConflict => Some(Ok(CommitOutcome::Contended)),
            Fault::LoseResponse => None,
            Fault::Panic => panic!("injected: a bug in the handler"),
            Fault::Invalid => Some(Err(StoreError::Rejected(
                "injected: ValidationException".into(),
            ))),
        }
    }

    pub(crate) fn after_commit<T>(&self, outcome: T) -> Result<T, StoreError> {
        match self.0 {
            Some(Fault::LoseResponse) => Err(StoreError::Transient(
                "injected: response lost after the commit".into(),
            )),
            _ => Ok(outcome),
        }
    }
}
