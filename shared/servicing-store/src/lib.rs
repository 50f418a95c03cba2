//! DynamoDB adapter of the servicing consumers.
//!
//! Every fact's unit of work is committed in ONE `TransactWriteItems`: the fact's record (its
//! claim, carrying the events to publish and a payment's allocation) and the version-checked
//! loan write (or the quarantine item) commit together or not at all. Several facts of one account may share that transaction (the
//! loan is then written once, carrying all their effects); each keeps its own claim. A refused
//! transaction is mapped from its `CancellationReasons`, item by item, to one outcome per fact;
//! a refused claim's old item (returned with `ALL_OLD`) tells a duplicate from a collision
//! without a read.

//!
//! One file per concern: `loans` (reads of an account's partition), `commit` (the commit engine
//! and the mapping of refusals), `idempotency` (the API's command), `actions` (collections'
//! external calls), `parked` (the reconciler's expiry), `quarantine`, `errors` (the one
//! classifier of DynamoDB answers), `conditions`, `items` (the attribute mapping), `combine`
//! (group commit), `recent` (recently applied facts on the loan item), `arrears` (the sparse
//! index of accounts in arrears the daily close queries) and `open` (the sparse index of open
//! things the daily jobs and operators' listings query).

mod actions;
pub mod arrears;
mod combine;
mod commit;
mod conditions;
mod errors;
mod idempotency;
pub mod items;
pub mod journal;
mod loans;
pub mod open;
mod parked;
mod quarantine;
mod quarantine_codes;
mod recent;
pub mod record_log;
pub mod schema;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;

pub use actions::{ActionIntent, ActionRecord, ActionStatus, Lease};
pub use combine::{MAX_TRANSACTION_ITEMS, Participant};
pub use commit::{Commit, CommitOutcome, Effect, LoanWrite, Transaction, UnitOfWork};
pub use errors::{StoreError, classify};
pub use idempotency::{CommandOutcome, StoredResponse};
pub use loans::{LoanItem, Snapshot, Target};
pub use parked::{ExpiredFact, ExpiryOutcome, UndecodableLoan};
pub use quarantine::QuarantineEntry;
pub use quarantine_codes::{
    QUARANTINE_CODES, QuarantineCode, RETIRED_QUARANTINE_CODES, is_quarantine_code,
    listable_code_names, quarantine_code_names,
};
pub use recent::{RECENT_FACTS_MAX, RECENT_FACTS_WINDOW, RecentFacts};
pub use schema::OutboxEvent;

/// The consumer that applies facts to the loans (account-state): its claims are each fact's
/// servicing record — the verdict, the events it published, a payment's allocation — which the
/// API, the reconciliations, the backfill and the operators read by fact.
pub const APPLIER: &str = "account-state";

/// Default retention of idempotency claims: longer than any replay an operator may run.
pub const DEFAULT_CLAIM_RETENTION: Duration = Duration::from_secs(35 * 24 * 3600);

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub table: String,
    /// The consumer name scoping claims (e.g. `account-state`).
    pub consumer: String,
    pub claim_retention: Duration,
    /// Items per `TransactWriteItems` at most, when commits share one (1..=100).
    pub max_transaction_items: usize,
}

impl StoreConfig {
    /// A consumer's config with the default claim retention.
    pub fn new(table: impl Into<String>, consumer: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            consumer: consumer.into(),
            claim_retention: DEFAULT_CLAIM_RETENTION,
            max_transaction_items: MAX_TRANSACTION_ITEMS,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServicingStore {
    pub(crate) client: Client,
    pub(crate) config: StoreConfig,
    pub(crate) combiner: Arc<combine::Combiner>,
}

/// Now, in epoch seconds (claims' `claimedAt`, recent facts' `appliedAt`).
pub fn epoch_seconds() -> i64 {
    now_epoch().0
}

/// Now, in epoch milliseconds (action leases).
pub fn epoch_millis() -> i64 {
    now_epoch().1
}

/// The one backoff between attempts that lost to a concurrent writer: exponential (capped at
/// 64 × `base`) with full jitter, from a cheap per-call random source.
pub fn backoff(attempt: u32, base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let cap = base.saturating_mul(1 << attempt.min(6));
    let millis = cap.as_millis().max(1) as u64;
    Duration::from_millis(hasher.finish() % millis)
}

pub(crate) fn now_epoch() -> (i64, i64) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (since.as_secs() as i64, since.as_millis() as i64)
}

impl ServicingStore {
    pub fn new(client: Client, config: StoreConfig) -> Self {
        let combiner = combine::Combiner::new(client.clone(), config.max_transaction_items);
        Self {
            client,
            config,
            combiner: Arc::new(combiner),
        }
    }

    /// Registers a participant of group commit (one per account being processed): while it
    /// runs, commits wait until it has submitted its own too, then leave together.
    pub fn participant(&self) -> Participant {
        self.combiner.participant()
    }

    /// `TransactWriteItems` requests this store has sent (all its commits, shared or not).
    pub fn transactions_sent(&self) -> u64 {
        self.combiner.transactions_sent()
    }

    pub fn consumer(&self) -> &str {
        &self.config.consumer
    }

    pub fn table(&self) -> &str {
        &self.config.table
    }

    /// The DynamoDB client (operator scans in `servicing-ops` use it).
    pub fn client(&self) -> &Client {
        &self.client
    }
}
