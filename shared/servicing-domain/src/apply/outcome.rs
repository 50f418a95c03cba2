//! What `apply` answers: the outcome of one event on one account and the values it carries
//! (the writes of an applied fact, why one is stale, rejected or deferred), and what the caller
//! tells it of a reversal's target. Separate from the state machine so the vocabulary the ledger
//! and the consumer act on reads on its own.

use chrono::NaiveDate;

use crate::account::{LoanAccount, StoredAllocation};
use crate::fingerprint::FactTag;
use crate::outbox::{DomainEvent, detail_types};
use crate::types::{MoneyError, SourceRef};

/// What applying one event to an account leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Commit the new state, the allocation write and the outbox events together.
    Applied(Box<Applied>),
    /// A set-state event that changes nothing (older than what the account holds, or a close
    /// with nothing to age): acknowledge, count, do not apply.
    Stale(Staleness),
    /// A permanent business error: quarantine with the reason, acknowledge.
    Rejected(Rejection),
    /// Not applicable yet (out-of-order delivery): parked until what it waits for is applied.
    Deferred(Deferral),
    /// Its effect is already in the state although its claim is gone (a reversal redelivered
    /// after its claim expired finds the payment reversed by itself): a duplicate.
    AlreadyApplied,
}

/// Why a set-state event is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staleness {
    /// A `CREDIT_LIMIT_SET` whose sequence is not greater than the last applied one.
    Sequence { sequence: u64, last_applied: u64 },
    /// A `BUSINESS_DAY_CLOSED` whose date is not later than the account's business date.
    BusinessDate {
        business_date: NaiveDate,
        account_business_date: NaiveDate,
    },
    /// A `BUSINESS_DAY_CLOSED` of an account with nothing past due on that date.
    NothingPastDue { business_date: NaiveDate },
    /// A `BUSINESS_DAY_CLOSED` of an account that is not opened (never parked: a close only
    /// ages arrears, and an account opened later has none as of that date).
    AccountNotOpened,
}

impl Staleness {
    /// A short stable code for metrics and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Staleness::Sequence { .. } => "stale_sequence",
            Staleness::BusinessDate { .. } => "stale_business_date",
            Staleness::NothingPastDue { .. } => "nothing_past_due",
            Staleness::AccountNotOpened => "account_not_opened",
        }
    }
}

impl std::fmt::Display for Staleness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Staleness::Sequence {
                sequence,
                last_applied,
            } => write!(
                f,
                "sequence {sequence} is not greater than the last applied {last_applied}"
            ),
            Staleness::BusinessDate {
                business_date,
                account_business_date,
            } => write!(
                f,
                "business date {business_date} is not later than the account's {account_business_date}"
            ),
            Staleness::NothingPastDue { business_date } => {
                write!(f, "nothing is past due on {business_date}")
            }
            Staleness::AccountNotOpened => f.write_str("the account is not opened"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub account: LoanAccount,
    pub allocation: Option<AllocationWrite>,
    /// The domain event of this fact first, then `DelinquencyChanged` when the bucket moved.
    /// A `BUSINESS_DAY_CLOSED` has no domain event of its own: at most the `DelinquencyChanged`,
    /// so this may be empty.
    pub outbox: Vec<DomainEvent>,
}

impl Applied {
    pub fn delinquency_change(&self) -> Option<&DomainEvent> {
        self.outbox
            .iter()
            .find(|e| e.detail_type == detail_types::DELINQUENCY_CHANGED)
    }
}

/// The allocation item to write in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationWrite {
    /// A new payment's allocation (the item must not exist yet).
    Record(StoredAllocation),
    /// A reversal marks the payment's allocation reversed (the item must not be reversed yet).
    MarkReversed {
        payment: SourceRef,
        reversal: SourceRef,
        /// The reversal's payload tag, kept with the mark.
        fact: FactTag,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {reason}")]
pub struct Rejection {
    pub code: &'static str,
    pub reason: String,
}

impl From<MoneyError> for Rejection {
    fn from(e: MoneyError) -> Self {
        let code = match e {
            MoneyError::CurrencyMismatch { .. } => "currency_mismatch",
            MoneyError::Overflow => "amount_overflow",
            MoneyError::Negative => "negative_balance",
        };
        Rejection {
            code,
            reason: e.to_string(),
        }
    }
}

/// What a fact waits for before it can be judged (it is parked until then).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
#[serde(tag = "kind")]
pub enum Deferral {
    #[error("account is not opened yet")]
    #[serde(rename = "ACCOUNT_OPENING")]
    AccountNotOpened,
    #[error("reversal target {0} has not been applied yet")]
    #[serde(rename = "PAYMENT")]
    ReversalTargetNotApplied(SourceRef),
}

impl Deferral {
    pub fn code(&self) -> &'static str {
        match self {
            Deferral::AccountNotOpened => "account_not_opened",
            Deferral::ReversalTargetNotApplied(_) => "reversal_target_missing",
        }
    }

    /// The awaited fact in words, for operators.
    pub fn awaited(&self, account: &crate::AccountId) -> String {
        match self {
            Deferral::AccountNotOpened => format!("the LOAN_OPENED of account {account}"),
            Deferral::ReversalTargetNotApplied(payment) => {
                format!("payment {payment} applied on account {account}")
            }
        }
    }
}

/// What is known of the payment a reversal refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReversalTarget<'a> {
    /// Applied on some account, with its stored allocation.
    Applied(&'a StoredAllocation),
    /// Applied on another account (known from its claim, which names the account).
    AppliedElsewhere(&'a crate::AccountId),
    /// An applied fact that is not a `PAYMENT_SETTLED` (a fee, another reversal, …), with its
    /// `eventType` (known from its claim, on whichever account): never reversible.
    NotAPayment(&'a str),
}
