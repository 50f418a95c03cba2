//! The commit engine: units of work, each fact's items in ONE `TransactWriteItems` (several
//! facts of one account may share it), and the mapping of a refusal back to each fact.
//!
//! Here the vocabulary of a commit and its entry points; building the transaction's items is in
//! `transaction`, reading its cancellation back to each fact in `cancellation`.

mod cancellation;
#[cfg(test)]
mod tests;
mod transaction;

use aws_sdk_dynamodb::types::TransactWriteItem;
use servicing_domain::{AccountId, AllocationWrite, Applied, Fingerprint, SourceRef};

use crate::{ActionIntent, LoanItem, QuarantineEntry, ServicingStore, StoreError, now_epoch};

use cancellation::map_cancellation;
pub(crate) use cancellation::refused_claim;

/// The effect a unit of work commits next to its claim.
#[derive(Debug)]
pub enum Effect<'a> {
    /// Apply: the loan write and the fact's record carrying its events and (a payment) its
    /// allocation; a reversal also marks its payment's record.
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
    /// Already applied, by the state's own account (a reversal its payment says reversed it):
    /// nothing is written, but a live claim under the fact's identity must hold this payload —
    /// a check whose refusal (`ALL_OLD`) is a collision, never a duplicate by identity alone.
    Confirm,
}

impl Effect<'_> {
    /// The items its unit of work adds to a transaction: its record and its own items (the loan
    /// write, shared by a group's units, is not counted). The group planner sizes transactions
    /// with it; `transaction_items` is what it must agree with (unit-tested).
    pub fn items(&self) -> usize {
        1 + match self {
            Effect::Apply(applied) => usize::from(matches!(
                applied.allocation,
                Some(AllocationWrite::MarkReversed { .. })
            )),
            Effect::Intent(intent) => usize::from(intent.is_some()),
            Effect::Reject(_) => 1,
            Effect::Stale | Effect::Park | Effect::Confirm => 0,
        }
    }
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
    /// Put the new item, where the stored one is at `expected` (`None`: no item yet); the
    /// parked bodies kept apart follow it: written for facts newly kept apart, deleted for those
    /// that left (`apart_before`: the stored item's).
    Put {
        item: &'a LoanItem,
        expected: Option<u64>,
        apart_before: &'a [SourceRef],
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

/// DynamoDB's answer to a commit: one outcome per unit and whether the loan item's own
/// condition failed. A refused claim settles its fact whatever else failed, but with
/// `loan_moved` the state the group was judged on is stale even when every claim was refused
/// (no unit then carries `VersionConflict`): it must be read again, never kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub outcomes: Vec<CommitOutcome>,
    pub loan_moved: bool,
}

impl Commit {
    pub fn all_committed(&self) -> bool {
        self.outcomes.iter().all(|o| *o == CommitOutcome::Committed)
    }
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
    /// Unit `i`'s own create-only item, keyed by the fact (its action intent): if it exists,
    /// this very fact was applied before although its claim is gone — a duplicate, which no
    /// re-read would change.
    Evidence(usize),
    /// Unit `i`'s mark on the payment it reverses: refused with the payment's record
    /// (`ALL_OLD`), whose `reversedBy` tells this reversal (a duplicate) from another one
    /// (re-read).
    Reversal(usize),
    /// An unconditional put (quarantine).
    Plain,
}

impl ServicingStore {
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
    /// Without units (only the loan item changes: a released fact parked again), one outcome
    /// for the loan write itself — never an empty answer, which would read as "all committed".
    pub async fn commit_all(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
    ) -> Result<Vec<CommitOutcome>, StoreError> {
        Ok(self.commit_all_before(units, loan, None).await?.outcomes)
    }

    /// [`Self::commit_all`], answered [`StoreError::NotSent`] if its transaction would leave
    /// after `last_start` (group commit may hold it while other accounts finish their reads).
    #[tracing::instrument(skip_all, fields(units = units.len()))]
    pub async fn commit_all_before(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
        last_start: Option<std::time::SystemTime>,
    ) -> Result<Commit, StoreError> {
        let (now, now_millis) = now_epoch();
        let transaction = self.transaction_items(units, loan, now, now_millis)?;
        let answers = units.len().max(1);
        let uniform = |outcome: CommitOutcome| Commit {
            outcomes: vec![outcome; answers],
            loan_moved: false,
        };
        Ok(
            match self.combiner.send(transaction.items, last_start).await? {
                crate::combine::Answer::Committed => uniform(CommitOutcome::Committed),
                crate::combine::Answer::Withdrawn => uniform(CommitOutcome::Withdrawn),
                crate::combine::Answer::Cancelled(reasons) => {
                    map_cancellation(&reasons, &transaction.roles, units)?
                }
            },
        )
    }
}

impl Transaction {
    fn push(&mut self, role: Role, item: TransactWriteItem) {
        self.roles.push(role);
        self.items.push(item);
    }
}
