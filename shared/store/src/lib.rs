//! DynamoDB adapter of the servicing consumers.
//!
//! Every fact's unit of work is committed in ONE `TransactWriteItems`: the claim put, the
//! version-checked loan write, the allocation write and the outbox items (or the quarantine item)
//! commit together or not at all. Several facts of one account may share that transaction (the
//! loan is then written once, carrying all their effects); each keeps its own claim. A refused
//! transaction is mapped from its `CancellationReasons`, item by item, to one outcome per fact;
//! a refused claim's old item (returned with `ALL_OLD`) tells a duplicate from a collision
//! without a read.

mod combine;
mod faults;
pub mod items;
mod recent;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Delete, KeysAndAttributes, Put,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use servicing_domain::{
    AccountId, AllocationWrite, Applied, Currency, Fingerprint, LoanAccount, ParkedFacts,
    ReversalTarget, SourceRef, StoredAllocation,
};

pub use combine::{MAX_TRANSACTION_ITEMS, Participant};
pub use faults::{Fault, FaultPlan};
use items::{Item, Verdict, n, s};
pub use recent::{RECENT_FACTS_MAX, RECENT_FACTS_WINDOW, RecentFacts};

/// DynamoDB's limit of keys per `BatchGetItem`.
const BATCH_GET_MAX_KEYS: usize = 100;

/// Default retention of idempotency claims: longer than any replay an operator may run.
pub const DEFAULT_CLAIM_RETENTION: Duration = Duration::from_secs(35 * 24 * 3600);

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Throttling, timeouts, 5xx, connection trouble: retry the message later.
    #[error("transient DynamoDB failure: {0}")]
    Transient(String),
    /// The request itself is wrong (validation, item too large, access denied): retrying the
    /// same message will not help.
    #[error("DynamoDB rejected the request: {0}")]
    Rejected(String),
    /// Stored data that does not decode: an operator must look.
    #[error("stored item is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient(_))
    }
}

/// The loan item: the account (`None` while only facts parked before its opening are held),
/// the version the item carries (optimistic concurrency: +1 per fact that changes it), the
/// facts recently applied to it and the facts parked on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoanItem {
    pub account_id: AccountId,
    pub account: Option<LoanAccount>,
    pub version: u64,
    pub recent: RecentFacts,
    pub parked: ParkedFacts,
}

/// What is known of a reversal's payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Applied on this account: its stored allocation.
    Applied(StoredAllocation),
    /// Claimed as applied on another account.
    Elsewhere(AccountId),
    /// Not applied (no allocation here, no applied claim anywhere).
    NotApplied,
}

/// What consistent reads of an account return: its loan item and what is known of the payments
/// its reversals refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub loan: Option<LoanItem>,
    pub targets: HashMap<SourceRef, Target>,
}

impl Snapshot {
    pub fn account(&self) -> Option<&LoanAccount> {
        self.loan.as_ref().and_then(|l| l.account.as_ref())
    }

    /// What a reversal of `payment` finds: `None` when the payment was never read.
    pub fn reversal_target(&self, payment: &SourceRef) -> Option<Option<ReversalTarget<'_>>> {
        Some(match self.targets.get(payment)? {
            Target::Applied(allocation) => Some(ReversalTarget::Applied(allocation)),
            Target::Elsewhere(account) => Some(ReversalTarget::AppliedElsewhere(account)),
            Target::NotApplied => None,
        })
    }
}

/// The effect a unit of work commits next to its claim.
#[derive(Debug)]
pub enum Effect<'a> {
    /// Apply: the loan write, the allocation write and the outbox items.
    Apply(&'a Applied),
    /// Stale set-state event: only the claim.
    Stale,
    /// A business rejection: the claim and the quarantine item.
    Reject(QuarantineEntry<'a>),
    /// Parked (it waits for another fact): the claim only; the fact itself is on the loan item.
    Park,
    /// A downstream consumer's claim, with the intent of an external action when the event
    /// calls for one (the loan is not involved: no version check).
    Intent(Option<&'a ActionIntent>),
}

/// An external action to execute after the commit, under a stable id that is also the
/// downstream idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionIntent {
    pub action_id: String,
    pub account_id: AccountId,
    /// The event that asked for the action.
    pub event_id: String,
    /// What is sent to the receiver.
    pub payload: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionStatus {
    /// Recorded, not (known to be) executed: a replay executes it again with the same id.
    Pending,
    /// A delivery holds the lease and is calling the receiver (until `leaseUntil`; after that
    /// another delivery may take it over, with the same id).
    Sending,
    /// The receiver accepted it.
    Sent,
    /// The receiver refused it definitively (a 4xx): recorded, not retried.
    Rejected,
}

impl ActionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "PENDING",
            ActionStatus::Sending => "SENDING",
            ActionStatus::Sent => "SENT",
            ActionStatus::Rejected => "REJECTED",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        [
            ActionStatus::Pending,
            ActionStatus::Sending,
            ActionStatus::Sent,
            ActionStatus::Rejected,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

/// An action as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub action_id: String,
    pub status: ActionStatus,
    pub attempts: u64,
    pub payload: serde_json::Value,
}

/// One fact's unit of work.
#[derive(Debug)]
pub struct UnitOfWork<'a> {
    pub source: &'a SourceRef,
    /// The fact's type (the contract's `eventType`, or the domain event type a downstream
    /// consumer claims), kept on the claim for reconciliation.
    pub event_type: &'a str,
    pub account_id: &'a AccountId,
    pub fingerprint: &'a Fingerprint,
    /// A parked fact judged again: its claim replaces its own `PARKED` claim instead of being
    /// created.
    pub released: bool,
    pub effect: Effect<'a>,
}

/// The loan item's part in a transaction (its condition is every verdict's condition).
#[derive(Debug, Clone, Copy)]
pub enum LoanWrite<'a> {
    /// Put the new item, where the stored one is at `expected` (`None`: no item yet).
    Put {
        item: &'a LoanItem,
        expected: Option<u64>,
    },
    /// The item is unchanged: only check it is still at `expected`.
    Check {
        account_id: &'a AccountId,
        expected: Option<u64>,
    },
}

/// How a commit ended, when DynamoDB answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Everything was written; for `Apply` the loan is now at `expected_version + 1`.
    Committed,
    /// The fact was claimed before with the same fingerprint: nothing to do.
    Duplicate,
    /// The fact was claimed before with another payload: the first one stands.
    Collision { stored: Fingerprint },
    /// Another writer changed the loan first: re-read, recompute, retry.
    VersionConflict,
    /// The allocation was changed concurrently (e.g. reversed by another reversal): re-read,
    /// recompute (which will see the new state), retry.
    BusinessConditionFailed(String),
    /// DynamoDB cancelled the transaction because another transaction touched the same items
    /// (`TransactionConflict`): retry.
    Contended,
    /// Nothing of this unit was written because another unit of the same transaction was
    /// refused (its claim existed), or another account's commit sharing the transaction failed:
    /// commit it again (without the refused ones). The loan was where it was expected, so the
    /// state read before still holds.
    Withdrawn,
}

/// The write items of a transaction and what each stands for (to read its cancellation reason).
#[derive(Debug)]
pub struct Transaction {
    pub items: Vec<TransactWriteItem>,
    roles: Vec<Role>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Unit `i`'s claim.
    Claim(usize),
    /// The loan write or version check shared by the units.
    Loan,
    /// Unit `i`'s own conditional item whose failure means the state moved (a released fact's
    /// claim): re-read.
    Condition(usize),
    /// Unit `i`'s own create-only item, keyed by the fact (its allocation, outbox events,
    /// action intent): if it exists, this very fact was applied before although its claim is
    /// gone — a duplicate, which no re-read would change.
    Evidence(usize),
    /// Unit `i`'s mark on the payment it reverses: refused with the payment's allocation
    /// (`ALL_OLD`), which tells this reversal (a duplicate) from another one (re-read).
    Reversal(usize),
    /// An unconditional put (quarantine).
    Plain,
}

/// An event to publish through the outbox, in its final form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub event_id: String,
    /// EventBridge `source`.
    pub source: String,
    /// EventBridge `detail-type`.
    pub detail_type: String,
    pub account_id: AccountId,
    pub detail: serde_json::Value,
}

/// A stored API response, replayed for a repeated idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub request_fingerprint: Fingerprint,
    pub status: u16,
    pub body: String,
}

/// How an idempotent API command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Recorded with its response and outbox event, in one transaction.
    Accepted,
    /// The key was used before (by this caller): here is what was stored.
    Existing(StoredResponse),
    /// The key was used before, longer ago than the retention: its record is kept (a
    /// tombstone) so the key can never start a second payment, but it no longer replays.
    Expired,
    /// The account does not exist (nothing stored).
    AccountMissing,
    /// The account is kept in another currency (nothing stored).
    CurrencyMismatch { account_currency: String },
    /// Another request with the same key is being committed right now (`TransactionConflict`).
    InFlight,
}

/// A parked fact to take off its account, with the quarantine code and reason.
#[derive(Debug, Clone)]
pub struct ExpiredFact<'a> {
    pub fact: &'a servicing_domain::ParkedFact,
    pub code: &'a str,
    pub reason: String,
}

/// A message that will not be applied, as stored for operators.
#[derive(Debug, Clone)]
pub struct QuarantineEntry<'a> {
    pub message_id: &'a str,
    pub raw_body: &'a str,
    pub code: &'a str,
    pub reason: &'a str,
    pub source: Option<&'a SourceRef>,
    pub account_id: Option<&'a AccountId>,
    pub stored_fingerprint: Option<&'a Fingerprint>,
    pub received_fingerprint: Option<&'a Fingerprint>,
    pub receive_count: Option<u32>,
}

impl<'a> QuarantineEntry<'a> {
    /// What every quarantined message has: its id, raw body, code and reason; the rest is added
    /// with struct update syntax where known.
    pub fn new(message_id: &'a str, raw_body: &'a str, code: &'a str, reason: &'a str) -> Self {
        Self {
            message_id,
            raw_body,
            code,
            reason,
            source: None,
            account_id: None,
            stored_fingerprint: None,
            received_fingerprint: None,
            receive_count: None,
        }
    }
}

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
    client: Client,
    config: StoreConfig,
    faults: FaultPlan,
    combiner: Arc<combine::Combiner>,
}

/// Now, in epoch seconds (claims' `claimedAt`, recent facts' `appliedAt`).
pub fn epoch_seconds() -> i64 {
    now_epoch().0
}

/// Now, in epoch milliseconds (action leases).
pub fn epoch_millis() -> i64 {
    now_epoch().1
}

fn now_epoch() -> (i64, i64) {
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
            faults: FaultPlan::default(),
            combiner: Arc::new(combiner),
        }
    }

    /// A store whose commits first consult `faults` (tests inject throttling, conflicts and lost
    /// responses through it; no local engine produces them).
    pub fn with_faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
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

    /// One consistent read of the account's loan item and, in the same request, what is known
    /// of `payments` (the payments its reversals refer to): the allocation in this account's
    /// partition, or else the payment's claim, which names the account it was applied on.
    #[tracing::instrument(skip_all, fields(account = %account_id))]
    pub async fn load(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
    ) -> Result<Snapshot, StoreError> {
        let mut snapshot = Snapshot::default();
        if payments.is_empty() {
            let got = self
                .client
                .get_item()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(items::loan_key(account_id))))
                .consistent_read(true)
                .send()
                .await
                .map_err(classify)?;
            snapshot.loan = got.item.map(items::loan_from_item).transpose()?;
            return Ok(snapshot);
        }
        let loan = items::loan_key(account_id);
        snapshot.loan = self
            .read_targets(account_id, payments, Some(loan), &mut snapshot.targets)
            .await?
            .map(items::loan_from_item)
            .transpose()?;
        Ok(snapshot)
    }

    /// Reads what is known of `payments` into `snapshot` (a reversal's payment that was not
    /// read with the account: e.g. a parked reversal released later in the batch).
    pub async fn load_targets(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
        snapshot: &mut Snapshot,
    ) -> Result<(), StoreError> {
        self.read_targets(account_id, payments, None, &mut snapshot.targets)
            .await
            .map(|_| ())
    }

    /// `BatchGetItem` of `loan` (returned) and, per payment, its allocation here and its claim;
    /// each payment's target goes into `targets`.
    async fn read_targets(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
        loan: Option<(String, String)>,
        targets: &mut HashMap<SourceRef, Target>,
    ) -> Result<Option<Item>, StoreError> {
        // A batch may refer to one payment several times (a reversal and a chargeback): each
        // key once, or DynamoDB refuses the request.
        let unique: std::collections::BTreeSet<&SourceRef> = payments.iter().copied().collect();
        let mut keys: Vec<(String, String)> = loan.iter().cloned().collect();
        for payment in &unique {
            keys.push(items::allocation_key(account_id, payment));
            keys.push(items::claim_key(&self.config.consumer, payment));
        }
        let mut found: HashMap<(String, String), Item> = HashMap::new();
        for chunk in keys.chunks(BATCH_GET_MAX_KEYS) {
            found.extend(self.batch_get(chunk).await?);
        }
        for payment in unique {
            let allocation = found.remove(&items::allocation_key(account_id, payment));
            let claim = found.remove(&items::claim_key(&self.config.consumer, payment));
            let target = match (allocation, claim) {
                (Some(item), _) => Target::Applied(items::allocation_from_item(item)?),
                (None, Some(claim)) => match items::applied_elsewhere(&claim, account_id) {
                    Some(other) => Target::Elsewhere(other),
                    None => Target::NotApplied,
                },
                (None, None) => Target::NotApplied,
            };
            targets.insert(payment.clone(), target);
        }
        Ok(loan.and_then(|key| found.remove(&key)))
    }

    /// One `BatchGetItem` (consistent), asked again for what DynamoDB leaves unprocessed.
    async fn batch_get(
        &self,
        keys: &[(String, String)],
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let mut request = KeysAndAttributes::builder()
            .set_keys(Some(keys.iter().cloned().map(items::key_item).collect()))
            .consistent_read(true)
            .build()
            .map_err(invalid_request)?;
        let mut found = HashMap::new();
        for _ in 0..5 {
            let got = self
                .client
                .batch_get_item()
                .request_items(&self.config.table, request)
                .send()
                .await
                .map_err(classify)?;
            for item in got
                .responses
                .and_then(|mut r| r.remove(&self.config.table))
                .unwrap_or_default()
            {
                let key = (
                    items::string(&item, items::PK)
                        .unwrap_or_default()
                        .to_owned(),
                    items::string(&item, items::SK)
                        .unwrap_or_default()
                        .to_owned(),
                );
                found.insert(key, item);
            }
            match got
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.config.table))
            {
                Some(rest) if !rest.keys.is_empty() => request = rest,
                _ => return Ok(found),
            }
        }
        Err(StoreError::Transient(
            "BatchGetItem kept returning unprocessed keys".into(),
        ))
    }

    /// Commits one unit of work that leaves the loan alone (a downstream consumer's claim) as
    /// ONE `TransactWriteItems`.
    pub async fn commit(&self, unit: &UnitOfWork<'_>) -> Result<CommitOutcome, StoreError> {
        let units = std::slice::from_ref(unit);
        let mut outcomes = self.commit_all(units, None).await?;
        outcomes
            .pop()
            .ok_or_else(|| StoreError::Rejected("a commit without its outcome".into()))
    }

    /// Commits the units of ONE account (in order, each judged on the state its predecessors
    /// leave) and its loan write in ONE `TransactWriteItems` (which concurrent commits of other
    /// accounts may share). One outcome per unit, in order: all `Committed`, or none committed.
    #[tracing::instrument(skip_all, fields(units = units.len()))]
    pub async fn commit_all(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
    ) -> Result<Vec<CommitOutcome>, StoreError> {
        let fault = self.faults.next();
        if let Some(injected) = fault.before_commit() {
            return injected.map(|outcome| vec![outcome; units.len()]);
        }
        let (now, now_millis) = now_epoch();
        let transaction = self.transaction_items(units, loan, now, now_millis)?;
        let outcomes = match self.combiner.send(transaction.items).await? {
            combine::Answer::Committed => vec![CommitOutcome::Committed; units.len()],
            combine::Answer::Withdrawn => vec![CommitOutcome::Withdrawn; units.len()],
            combine::Answer::Cancelled(reasons) => {
                map_cancellation(&reasons, &transaction.roles, units)?
            }
        };
        fault.after_commit(outcomes)
    }

    /// The loan's version check (claim-only verdicts: the loan is still at the judged version).
    fn version_check(
        &self,
        account_id: &AccountId,
        expected_version: Option<u64>,
    ) -> Result<TransactWriteItem, StoreError> {
        let (condition, names, values) = version_condition(expected_version);
        let check = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::loan_key(account_id))))
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// The items of the units' `TransactWriteItems`: the loan write (or version check) once,
    /// then per unit its claim and its own items.
    pub fn transaction_items(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
        now: i64,
        now_millis: i64,
    ) -> Result<Transaction, StoreError> {
        let mut transaction = Transaction {
            items: Vec::with_capacity(units.len() * 4 + 1),
            roles: Vec::with_capacity(units.len() * 4 + 1),
        };
        match loan {
            Some(LoanWrite::Put { item, expected }) => {
                let put = self.put(items::loan_item(item)?, Some(version_condition(expected)))?;
                transaction.push(Role::Loan, put);
            }
            Some(LoanWrite::Check {
                account_id,
                expected,
            }) => transaction.push(Role::Loan, self.version_check(account_id, expected)?),
            None => {}
        }
        let expires_at = now + self.config.claim_retention.as_secs() as i64;
        for (i, unit) in units.iter().enumerate() {
            let verdict = match unit.effect {
                Effect::Apply(_) | Effect::Intent(_) => Verdict::Applied,
                Effect::Stale => Verdict::Stale,
                Effect::Reject(_) => Verdict::Rejected,
                Effect::Park => Verdict::Parked,
            };
            let claim = items::claim_item(&self.config.consumer, unit, verdict, now, expires_at);
            if unit.released {
                // Its own PARKED claim (or none, if an operator removed it): the loan's version
                // condition guarantees the fact is still parked.
                let condition = (
                    "attribute_not_exists(pk) OR #verdict = :parked",
                    Some(HashMap::from([(
                        "#verdict".to_owned(),
                        items::VERDICT.to_owned(),
                    )])),
                    Some(HashMap::from([(
                        ":parked".to_owned(),
                        s(Verdict::Parked.as_str()),
                    )])),
                );
                transaction.push(Role::Condition(i), self.put(claim, Some(condition))?);
            } else {
                transaction.push(Role::Claim(i), self.claim_put(claim, now)?);
            }

            match &unit.effect {
                Effect::Apply(applied) => {
                    if let Some(allocation) = &applied.allocation {
                        let role = match allocation {
                            AllocationWrite::Record(_) => Role::Evidence(i),
                            AllocationWrite::MarkReversed { .. } => Role::Reversal(i),
                        };
                        transaction.push(role, self.allocation_write(unit.account_id, allocation)?);
                    }
                    for event in &applied.outbox {
                        let item =
                            items::outbox_item(&self.config.consumer, event, now, expires_at);
                        transaction.push(Role::Evidence(i), self.put(item, Some(CREATE_ONLY))?);
                    }
                }
                Effect::Intent(Some(intent)) => {
                    let item = items::action_item(intent, now);
                    transaction.push(Role::Evidence(i), self.put(item, Some(CREATE_ONLY))?);
                }
                Effect::Reject(entry) => {
                    let item = self.quarantine_item(entry, now_millis);
                    transaction.push(Role::Plain, self.put(item, None)?);
                }
                Effect::Intent(None) | Effect::Stale | Effect::Park => {}
            }
        }
        Ok(transaction)
    }

    fn allocation_write(
        &self,
        account_id: &AccountId,
        write: &AllocationWrite,
    ) -> Result<TransactWriteItem, StoreError> {
        match write {
            AllocationWrite::Record(stored) => {
                self.put(items::allocation_item(stored)?, Some(CREATE_ONLY))
            }
            AllocationWrite::MarkReversed { payment, reversal } => {
                let update = Update::builder()
                    .table_name(&self.config.table)
                    .set_key(Some(items::key_item(items::allocation_key(
                        account_id, payment,
                    ))))
                    .update_expression("SET #reversedBy = :reversal")
                    .condition_expression(
                        "attribute_exists(pk) AND attribute_not_exists(#reversedBy)",
                    )
                    .expression_attribute_names("#reversedBy", items::REVERSED_BY)
                    .expression_attribute_values(":reversal", items::source_ref_value(reversal)?)
                    // Tells this reversal (reversedBy is itself: a duplicate) from another.
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .build()
                    .map_err(invalid_request)?;
                Ok(TransactWriteItem::builder().update(update).build())
            }
        }
    }

    /// A put of `item` into the table, under `condition` when given.
    fn put(
        &self,
        item: Item,
        condition: Option<Condition>,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item));
        if let Some((expression, names, values)) = condition {
            put = put
                .condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values);
        }
        Ok(TransactWriteItem::builder()
            .put(put.build().map_err(invalid_request)?)
            .build())
    }

    /// A put of a fact's claim: only where none
    /// is live — one past its stored expiry no longer counts, whether or not TTL deleted it yet —
    /// and the live one returned on refusal (`ALL_OLD`), to tell a repeat from a collision.
    fn claim_put(&self, item: Item, now: i64) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk) OR expiresAt < :now")
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// A put of a record that is never replaced once written (an API idempotency record), the
    /// stored one returned on refusal (`ALL_OLD`).
    fn tombstoned_put(&self, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn quarantine_item(&self, entry: &QuarantineEntry<'_>, now_millis: i64) -> Item {
        let day = chrono::DateTime::from_timestamp_millis(now_millis)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let mut item = items::key_item(items::quarantine_key(
            &self.config.consumer,
            &day,
            now_millis,
            entry.message_id,
        ));
        item.insert(items::ITEM_TYPE.into(), s("QUARANTINE"));
        item.insert("consumer".into(), s(&self.config.consumer));
        item.insert("messageId".into(), s(entry.message_id));
        item.insert("rawBody".into(), s(entry.raw_body));
        item.insert("code".into(), s(entry.code));
        item.insert("reason".into(), s(entry.reason));
        item.insert("quarantinedAt".into(), n(now_millis));
        if let Some(source) = entry.source {
            item.insert("sourceSystem".into(), s(&source.system));
            item.insert("sourceEventId".into(), s(&source.event_id));
        }
        if let Some(account) = entry.account_id {
            item.insert("accountId".into(), s(account.as_str()));
        }
        if let Some(fp) = entry.stored_fingerprint {
            item.insert("storedFingerprint".into(), s(fp.as_str()));
        }
        if let Some(fp) = entry.received_fingerprint {
            item.insert("receivedFingerprint".into(), s(fp.as_str()));
        }
        if let Some(count) = entry.receive_count {
            item.insert("receiveCount".into(), n(count));
        }
        item
    }

    /// Every stored allocation of an account (its partition, `ALLOC#` items).
    pub async fn allocations(
        &self,
        account_id: &AccountId,
    ) -> Result<Vec<StoredAllocation>, StoreError> {
        let (pk, _) = items::loan_key(account_id);
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.config.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(pk.clone()))
                .expression_attribute_values(":prefix", s("ALLOC#"))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(classify)?;
            for item in page.items.unwrap_or_default() {
                out.push(items::allocation_from_item(item)?);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    /// The `detail` of an account's outbox events of one type, in business-time order. A scan:
    /// for operators and tests on small tables, never on a hot path.
    pub async fn outbox_details(
        &self,
        account_id: &AccountId,
        detail_type: &str,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.config.table)
                .filter_expression(
                    "itemType = :outbox AND accountId = :account AND detailType = :type",
                )
                .expression_attribute_values(":outbox", s("OUTBOX"))
                .expression_attribute_values(":account", s(account_id.as_str()))
                .expression_attribute_values(":type", s(detail_type))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(classify)?;
            for item in page.items.unwrap_or_default() {
                let detail = items::string(&item, "detail")
                    .and_then(|d| serde_json::from_str(d).ok())
                    .ok_or_else(|| {
                        StoreError::Corrupt("outbox item without a JSON detail".into())
                    })?;
                out.push(detail);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        out.sort_by(|a: &serde_json::Value, b| {
            (a["occurredAt"].as_str(), a["eventId"].as_str())
                .cmp(&(b["occurredAt"].as_str(), b["eventId"].as_str()))
        });
        Ok(out)
    }

    /// The account in the shape of the contract's `*.expected.json` (`None`: no such account).
    pub async fn account_report(
        &self,
        account_id: &AccountId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let Some(account) = self
            .load(account_id, &[])
            .await?
            .loan
            .and_then(|l| l.account)
        else {
            return Ok(None);
        };
        let allocations = self.allocations(account_id).await?;
        let changes = self
            .outbox_details(
                account_id,
                servicing_domain::outbox::detail_types::DELINQUENCY_CHANGED,
            )
            .await?;
        Ok(Some(servicing_domain::report::account_report(
            &account,
            &allocations,
            &changes,
        )))
    }

    /// Records an API command: the caller-scoped idempotency record (request fingerprint,
    /// response status and body, expiry) and the outbox entry, in ONE `TransactWriteItems`,
    /// conditioned on the account existing in `currency` — one round trip, no read first. A
    /// repeated key returns the stored record instead.
    #[tracing::instrument(skip_all)]
    pub async fn record_command(
        &self,
        principal_scope: &str,
        key: &str,
        account_id: &AccountId,
        currency: &Currency,
        response: &StoredResponse,
        outbox: &OutboxEntry,
    ) -> Result<CommandOutcome, StoreError> {
        if let Some(injected) = self.faults.next().before_commit() {
            // The seam speaks in commit outcomes; a contended commit is an in-flight twin here.
            return injected.map(|_| CommandOutcome::InFlight);
        }
        let (now, _) = now_epoch();
        let replay_until = now + self.config.claim_retention.as_secs() as i64;
        let mut record = items::key_item(items::idempotency_key(principal_scope, key));
        record.insert(items::ITEM_TYPE.into(), s("IDEMPOTENCY"));
        record.insert("principalScope".into(), s(principal_scope));
        record.insert("idempotencyKey".into(), s(key));
        record.insert(
            items::FINGERPRINT.into(),
            s(response.request_fingerprint.as_str()),
        );
        record.insert("responseStatus".into(), n(response.status));
        record.insert("responseBody".into(), s(&response.body));
        record.insert("createdAt".into(), n(now));
        // No `expiresAt`: TTL never deletes the record, so a key reused after the retention
        // meets it (a tombstone) instead of creating a payment whose outbox event id — derived
        // from the key — already exists downstream. It replays until `replayUntil`.
        record.insert(items::REPLAY_UNTIL.into(), n(replay_until));
        let account_in_currency = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::loan_key(account_id))))
            .condition_expression("attribute_exists(pk) AND #currency = :currency")
            .expression_attribute_names("#currency", items::CURRENCY)
            .expression_attribute_values(":currency", s(currency.as_str()))
            // Tells a missing account (no item) from one in another currency.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        let outbox_item = items::raw_outbox_item(outbox, now, replay_until);
        let result = self
            .client
            .transact_write_items()
            .transact_items(self.tombstoned_put(record)?)
            .transact_items(
                TransactWriteItem::builder()
                    .condition_check(account_in_currency)
                    .build(),
            )
            .transact_items(self.put(outbox_item, Some(CREATE_ONLY))?)
            .send()
            .await;
        let cancelled = match result {
            Ok(_) => return Ok(CommandOutcome::Accepted),
            Err(e) => match e.into_service_error() {
                TransactWriteItemsError::TransactionCanceledException(c) => c,
                other => return Err(classify_service(other)),
            },
        };
        let reasons = cancelled.cancellation_reasons();
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            let item = reasons[0].item().ok_or_else(|| {
                StoreError::Corrupt("refused idempotency record came back empty".into())
            })?;
            // Records written before the tombstone rule carry `expiresAt` instead.
            let until = items::number(item, items::REPLAY_UNTIL)
                .or_else(|_| items::number(item, items::EXPIRES_AT))
                .map_err(|_| {
                    StoreError::Corrupt("idempotency record without its retention".into())
                })?;
            if (until as i64) < now {
                return Ok(CommandOutcome::Expired);
            }
            let stored = StoredResponse {
                request_fingerprint: Fingerprint::from_stored(
                    items::string(item, items::FINGERPRINT)
                        .unwrap_or_default()
                        .to_owned(),
                ),
                status: u16::try_from(items::number(item, "responseStatus")?)
                    .map_err(|_| StoreError::Corrupt("stored status out of range".into()))?,
                body: items::string(item, "responseBody")
                    .unwrap_or_default()
                    .to_owned(),
            };
            return Ok(CommandOutcome::Existing(stored));
        }
        if code(1) == "ConditionalCheckFailed" {
            // No item, or only the facts parked before its opening (no currency): missing.
            let currency = reasons[1]
                .item()
                .and_then(|account| items::string(account, items::CURRENCY));
            return Ok(match currency {
                None => CommandOutcome::AccountMissing,
                Some(currency) => CommandOutcome::CurrencyMismatch {
                    account_currency: currency.to_owned(),
                },
            });
        }
        let codes: Vec<&str> = (0..reasons.len()).map(code).collect();
        if codes.contains(&"TransactionConflict") {
            return Ok(CommandOutcome::InFlight);
        }
        if codes.iter().any(|c| refuses_the_request(c)) {
            return Err(StoreError::Rejected(format!(
                "transaction cancelled: {codes:?}"
            )));
        }
        Err(StoreError::Transient(format!(
            "transaction cancelled: {codes:?}"
        )))
    }

    /// The stored action (consistent read).
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn action(&self, action_id: &str) -> Result<Option<ActionRecord>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        let Some(item) = got.item else {
            return Ok(None);
        };
        let status = items::string(&item, "status")
            .and_then(ActionStatus::parse)
            .ok_or_else(|| {
                StoreError::Corrupt(format!("action {action_id} has no valid status"))
            })?;
        let payload = items::string(&item, "payload")
            .and_then(|p| serde_json::from_str(p).ok())
            .ok_or_else(|| StoreError::Corrupt(format!("action {action_id} has no payload")))?;
        Ok(Some(ActionRecord {
            action_id: action_id.to_owned(),
            status,
            attempts: items::number(&item, "attempts").unwrap_or_default(),
            payload,
        }))
    }

    /// Takes the lease of a pending action (or of one whose lease has run out) for `lease_id`
    /// until `until_ms`: only the lease holder calls the receiver, so twin deliveries never call
    /// at once. `Ok(None)` when acquired, else the status that stands (`Sending`: a twin holds
    /// a live lease; `Sent`/`Rejected`: settled).
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn lease_action(
        &self,
        action_id: &str,
        lease_id: &str,
        until_ms: i64,
    ) -> Result<Option<ActionStatus>, StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression("SET #status = :sending, leaseId = :lease, leaseUntil = :until")
            .condition_expression(
                "attribute_exists(pk) AND (#status = :pending OR (#status = :sending AND leaseUntil < :now))",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":pending", s(ActionStatus::Pending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":until", n(until_ms))
            .expression_attribute_values(":now", n(now_millis))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(e) => match e.into_service_error() {
                aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                    let status = c
                        .item()
                        .and_then(|item| items::string(item, "status"))
                        .and_then(ActionStatus::parse)
                        .ok_or_else(|| StoreError::Corrupt(format!("action {action_id} is not recorded")))?;
                    Ok(Some(status))
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// Records one execution attempt under the lease: the final status (`Sent`/`Rejected`), or
    /// `Pending` again with the error of a transient failure, releasing the lease. Only the
    /// lease holder records: a twin whose lease ran out can never overwrite a `SENT`.
    #[tracing::instrument(skip_all, fields(action_id, status = status.as_str()))]
    pub async fn record_action(
        &self,
        action_id: &str,
        lease_id: &str,
        status: ActionStatus,
        http_status: Option<u16>,
        detail: &str,
    ) -> Result<(), StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression(
                "SET #status = :status, attempts = if_not_exists(attempts, :zero) + :one, \
                 lastHttpStatus = :http, lastDetail = :detail, updatedAt = :now \
                 REMOVE leaseId, leaseUntil",
            )
            .condition_expression(
                "attribute_exists(pk) AND #status = :sending AND leaseId = :lease",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":status", s(status.as_str()))
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":http", n(http_status.unwrap_or(0)))
            .expression_attribute_values(":detail", s(detail.chars().take(512).collect::<String>()))
            .expression_attribute_values(":now", n(now_millis))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.into_service_error() {
                aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_) => {
                    tracing::warn!("the lease ran out and another delivery took the action over");
                    Ok(())
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// Takes parked facts off an account for good (the reconciler: waited past the park
    /// retention, or a reversal whose payment was applied on another account), in ONE
    /// transaction per loan item: the loan item without them (deleted when it only held them),
    /// their `PARKED` claims deleted — so a resend can still apply — and a quarantine item each
    /// with its raw body. `Ok(false)` when the loan item moved meanwhile (read it again).
    pub async fn expire_parked(
        &self,
        loan: &LoanItem,
        expired: &[ExpiredFact<'_>],
    ) -> Result<bool, StoreError> {
        let (_, now_millis) = now_epoch();
        let mut next = loan.clone();
        for fact in expired {
            next.parked.remove(&fact.fact.source);
        }
        next.version += 1;
        let expected = version_condition(Some(loan.version));
        let loan_write = if next.account.is_none() && next.parked.is_empty() {
            let (condition, names, values) = expected;
            let delete = Delete::builder()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(items::loan_key(&loan.account_id))))
                .condition_expression(condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .build()
                .map_err(invalid_request)?;
            TransactWriteItem::builder().delete(delete).build()
        } else {
            self.put(items::loan_item(&next)?, Some(expected))?
        };
        let mut request = self
            .client
            .transact_write_items()
            .transact_items(loan_write);
        for expired in expired {
            let fact = expired.fact;
            let claim = Delete::builder()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(items::claim_key(
                    &self.config.consumer,
                    &fact.source,
                ))))
                .condition_expression("attribute_not_exists(pk) OR #verdict = :parked")
                .expression_attribute_names("#verdict", items::VERDICT)
                .expression_attribute_values(":parked", s(Verdict::Parked.as_str()))
                .build()
                .map_err(invalid_request)?;
            let entry = QuarantineEntry {
                source: Some(&fact.source),
                account_id: Some(&loan.account_id),
                received_fingerprint: Some(&fact.fingerprint),
                ..QuarantineEntry::new(&fact.message_id, &fact.body, expired.code, &expired.reason)
            };
            request = request
                .transact_items(TransactWriteItem::builder().delete(claim).build())
                .transact_items(self.put(self.quarantine_item(&entry, now_millis), None)?);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.into_service_error() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let codes: Vec<&str> = c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None"))
                        .collect();
                    if codes.iter().all(|c| {
                        matches!(
                            *c,
                            "None" | "ConditionalCheckFailed" | "TransactionConflict"
                        )
                    }) {
                        Ok(false)
                    } else {
                        Err(StoreError::Transient(format!(
                            "transaction cancelled: {codes:?}"
                        )))
                    }
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// Every loan item that holds parked facts (a scan: for operators and the daily job).
    pub async fn parked_loans(&self) -> Result<Vec<LoanItem>, StoreError> {
        let found = self
            .client
            .scan()
            .table_name(&self.config.table)
            .filter_expression("itemType = :loan AND attribute_exists(#parked)")
            .expression_attribute_names("#parked", items::PARKED_FACTS)
            .expression_attribute_values(":loan", s("LOAN"))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)?;
        found.into_iter().map(items::loan_from_item).collect()
    }

    /// The claim `consumer`'s store holds for `source` says it was applied on another account
    /// than `account`: that account.
    pub async fn applied_elsewhere(
        &self,
        source: &SourceRef,
        account: &AccountId,
    ) -> Result<Option<AccountId>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                &self.config.consumer,
                source,
            ))))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        Ok(got
            .item
            .and_then(|claim| items::applied_elsewhere(&claim, account)))
    }

    /// Stores a quarantine item on its own (undecodable input, collisions, spent retry budgets:
    /// nothing to claim). Written with a plain put: a redelivered message gets a second record
    /// rather than none.
    #[tracing::instrument(skip_all, fields(code = entry.code))]
    pub async fn quarantine(&self, entry: &QuarantineEntry<'_>) -> Result<(), StoreError> {
        let (_, now_millis) = now_epoch();
        self.client
            .put_item()
            .table_name(&self.config.table)
            .set_item(Some(self.quarantine_item(entry, now_millis)))
            .send()
            .await
            .map_err(classify)?;
        Ok(())
    }
}

type Names = Option<HashMap<String, String>>;
type Values = Option<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>;
/// A condition expression with its attribute names and values.
type Condition = (&'static str, Names, Values);

/// Only where no item is yet (allocations, action intents).
const CREATE_ONLY: Condition = ("attribute_not_exists(pk)", None, None);

/// A request the SDK could not build: it would never succeed, so it is not retried.
fn invalid_request(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Rejected(error.to_string())
}

/// The loan item is still at `expected` (`None`: it does not exist yet) — the condition of
/// every verdict, whether it writes the loan or only checks it.
fn version_condition(expected: Option<u64>) -> Condition {
    match expected {
        None => CREATE_ONLY,
        Some(version) => (
            "#version = :expected",
            Some(HashMap::from([(
                "#version".to_owned(),
                items::VERSION.to_owned(),
            )])),
            Some(HashMap::from([(":expected".to_owned(), n(version))])),
        ),
    }
}

impl Transaction {
    fn push(&mut self, role: Role, item: TransactWriteItem) {
        self.roles.push(role);
        self.items.push(item);
    }
}

/// Maps the reasons of a cancelled transaction to one outcome per unit. A refused claim wins
/// for its unit: the fact was judged before. So does a refused item that only this fact could
/// have written (its allocation, outbox event or action, or its own mark on the payment it
/// reverses): the fact was applied before, its claim is gone (expired) — a duplicate, which no
/// re-read could change. The other units share the reason the transaction
/// failed for: the loan moved (`VersionConflict`), an allocation or action item was not as
/// judged (`BusinessConditionFailed`), a concurrent transaction (`Contended`), or only refused
/// claims (`Withdrawn`). DynamoDB reports a reason per item (both local engines too), so every
/// duplicate in the transaction is known from this one answer.
fn map_cancellation(
    reasons: &[CancellationReason],
    roles: &[Role],
    units: &[UnitOfWork<'_>],
) -> Result<Vec<CommitOutcome>, StoreError> {
    let mut refused: Vec<Option<CommitOutcome>> = vec![None; units.len()];
    let mut condition_failed = vec![false; units.len()];
    let (mut loan_moved, mut contended, mut throttled) = (false, false, false);
    for (reason, role) in reasons.iter().zip(roles) {
        let code = reason.code().unwrap_or("None");
        match (role, code) {
            (_, "None") => {}
            (Role::Claim(i), "ConditionalCheckFailed") => {
                let stored = reason
                    .item()
                    .and_then(|item| items::string(item, items::FINGERPRINT))
                    .map(|f| Fingerprint::from_stored(f.to_owned()))
                    .ok_or_else(|| {
                        StoreError::Corrupt(
                            "refused claim came back without its fingerprint".into(),
                        )
                    })?;
                refused[*i] = Some(if &stored == units[*i].fingerprint {
                    CommitOutcome::Duplicate
                } else {
                    CommitOutcome::Collision { stored }
                });
            }
            (Role::Loan, "ConditionalCheckFailed") => loan_moved = true,
            (Role::Condition(i), "ConditionalCheckFailed") => condition_failed[*i] = true,
            (Role::Evidence(i), "ConditionalCheckFailed") => {
                refused[*i].get_or_insert(CommitOutcome::Duplicate);
            }
            (Role::Reversal(i), "ConditionalCheckFailed") => {
                let by_itself = reason
                    .item()
                    .and_then(|item| item.get(items::REVERSED_BY))
                    .and_then(|v| {
                        serde_dynamo::from_attribute_value::<_, SourceRef>(v.clone()).ok()
                    })
                    .is_some_and(|by| &by == units[*i].source);
                if by_itself {
                    refused[*i].get_or_insert(CommitOutcome::Duplicate);
                } else {
                    condition_failed[*i] = true;
                }
            }
            (_, "TransactionConflict") => contended = true,
            (_, code) if is_throttling(code) => throttled = true,
            _ => {}
        }
    }
    let any_refused = refused.iter().any(Option::is_some);
    // A refused unit's own conditions fail too (a duplicate payment's allocation exists): its
    // claim explains them. Only an unrefused unit's failed condition means the state moved.
    let condition_failed = refused
        .iter()
        .zip(&condition_failed)
        .any(|(refused, failed)| refused.is_none() && *failed);
    let others = if loan_moved {
        CommitOutcome::VersionConflict
    } else if condition_failed {
        CommitOutcome::BusinessConditionFailed("allocation or action condition failed".into())
    } else if contended || (throttled && any_refused) {
        CommitOutcome::Contended
    } else if any_refused {
        CommitOutcome::Withdrawn
    } else {
        let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        return Err(if codes.iter().any(|c| refuses_the_request(c)) {
            StoreError::Rejected(format!("transaction cancelled: {codes:?}"))
        } else {
            StoreError::Transient(format!("transaction cancelled: {codes:?}"))
        });
    };
    Ok(refused
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| others.clone()))
        .collect())
}

/// Throttling, 5xx, timeouts and connection failures are transient; the rest is not.
fn classify<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match error {
        SdkError::ServiceError(e) => classify_service(e.into_err()),
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Transient(format!("{error:?}"))
        }
        other => StoreError::Rejected(format!("{other:?}")),
    }
}

/// One classifier for every path: only an error that says *this request* can never succeed
/// is permanent (the caller quarantines it); everything else — throttling, 5xx, unknown codes,
/// no code at all, and misconfiguration such as a missing table or denied access, which must
/// not quarantine every message — is retried (and reaches the DLQ and its alarm if it lasts).
fn classify_service<E>(error: E) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error,
{
    let code = error.code().unwrap_or("Unknown").to_owned();
    let message = format!("{code}: {}", error.message().unwrap_or_default());
    if refuses_the_request(&code) {
        StoreError::Rejected(message)
    } else {
        StoreError::Transient(message)
    }
}

/// DynamoDB error codes (of an operation, or of a cancelled transaction's item) that mean the
/// request as such is wrong: sending it again cannot help.
fn refuses_the_request(code: &str) -> bool {
    matches!(
        code,
        "ValidationException"
            | "ValidationError"
            | "SerializationException"
            | "ItemCollectionSizeLimitExceededException"
            | "ItemCollectionSizeLimitExceeded"
    )
}

/// Cancellation reason codes that mean "try again later".
fn is_throttling(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded"
    )
}

#[cfg(test)]
mod classification_tests {
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;

    use super::*;

    fn with_code(code: Option<&str>) -> StoreError {
        let mut meta = ErrorMetadata::builder().message("m");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        classify_service(GetItemError::generic(meta.build()))
    }

    #[test]
    fn when_dynamodb_answers_an_error_should_quarantine_only_what_refuses_the_request() {
        for code in [
            Some("RequestLimitExceeded"),
            Some("ThrottlingException"),
            Some("ProvisionedThroughputExceededException"),
            Some("InternalServerError"),
            Some("ServiceUnavailable"),
            Some("SomeCodeAddedNextYear"),
            Some("AccessDeniedException"),
            Some("ResourceNotFoundException"),
            None,
        ] {
            assert!(with_code(code).is_transient(), "{code:?}");
        }
        for code in [
            "ValidationException",
            "ItemCollectionSizeLimitExceededException",
        ] {
            assert!(
                matches!(with_code(Some(code)), StoreError::Rejected(_)),
                "{code}"
            );
        }
    }
}
