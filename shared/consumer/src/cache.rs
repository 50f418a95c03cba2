//! Account states kept between invocations of a warm Lambda. Only a hint: every commit is
//! conditioned on the version the state carries, so a stale entry costs a version conflict and
//! a re-read, never a wrong write. It is what lets a duplicate cost one request.

use std::collections::HashMap;
use std::sync::Mutex;

use servicing_domain::AccountId;
use servicing_store::Versioned;

#[derive(Debug)]
pub struct StateCache {
    capacity: usize,
    entries: Mutex<HashMap<AccountId, Versioned>>,
}

impl StateCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, account: &AccountId) -> Option<Versioned> {
        self.entries.lock().ok()?.get(account).cloned()
    }

    pub fn put(&self, state: Versioned) {
        if self.capacity == 0 {
            return;
        }
        if let Ok(mut entries) = self.entries.lock() {
            // Bounded memory without bookkeeping: start over when full.
            if entries.len() >= self.capacity && !entries.contains_key(&state.account.account_id) {
                entries.clear();
            }
            entries.insert(state.account.account_id.clone(), state);
        }
    }

    pub fn forget(&self, account: &AccountId) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(account);
        }
    }
}
