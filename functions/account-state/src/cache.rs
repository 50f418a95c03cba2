//! Account states kept between invocations of a warm Lambda. Only a hint: every commit is
//! conditioned on the version the state carries, so a stale entry costs a version conflict and
//! a re-read, never a wrong write. It is what lets a duplicate cost one request.
//!
//! Any number of instances may each hold an older state of the same account. The complete list
//! of what a cached (unconfirmed) state may settle without a read, and why each holds then:
//! - **A duplicate of a fact it lists as recently applied, with the same fingerprint.** An
//!   applied fact stays applied whatever another instance did since (nothing un-applies a fact;
//!   a reversal is a fact of its own), and the window of recent facts is shorter than the
//!   claim's retention. If another instance's release is still owed on the account, the message
//!   that carries it is being retried (`AccountRun::fail`), so this acknowledgement loses
//!   nothing.
//! - Nothing else. A fact it holds parked is read first (the reconciler may have expired it, a
//!   resend may be new); every other verdict is a commit conditioned on the cached version. A
//!   cancelled commit whose loan condition failed makes the state stale even when every claim
//!   in it was refused (`Commit::loan_moved`): the state is read again and judged again — a
//!   release another instance left undone is found there — and never cached.
//!
//! A state is cached only at the end of a run that ended without failure: read or confirmed by
//! a commit in this invocation, or the hint it started from when nothing contradicted it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use servicing_domain::AccountId;
use servicing_store::LoanItem;

#[derive(Debug)]
pub struct StateCache {
    capacity: usize,
    entries: Mutex<HashMap<AccountId, LoanItem>>,
}

impl StateCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// A panic elsewhere cannot leave an entry half-written (inserts are whole), so a poisoned
    /// lock still guards valid hints.
    fn entries(&self) -> MutexGuard<'_, HashMap<AccountId, LoanItem>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, account: &AccountId) -> Option<LoanItem> {
        self.entries().get(account).cloned()
    }

    /// Keeps `state`, unless it holds parked bodies kept apart: their bytes (up to
    /// `MAX_PARKED_BYTES` per account) are not bounded by the cache's count of entries, so such
    /// an account is read each time.
    pub fn put(&self, state: LoanItem) {
        if self.capacity == 0 {
            return;
        }
        if state.parked.apart().next().is_some() {
            self.forget(&state.account_id);
            return;
        }
        let mut entries = self.entries();
        // Bounded memory without bookkeeping: start over when full.
        if entries.len() >= self.capacity && !entries.contains_key(&state.account_id) {
            entries.clear();
        }
        entries.insert(state.account_id.clone(), state);
    }

    pub fn forget(&self, account: &AccountId) {
        self.entries().remove(account);
    }
}
