//! Account states kept between invocations of a warm Lambda. Only a hint: every commit is
//! conditioned on the version the state carries, so a stale entry costs a version conflict and
//! a re-read, never a wrong write. It is what lets a duplicate cost one request.

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

    pub fn put(&self, state: LoanItem) {
        if self.capacity == 0 {
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
