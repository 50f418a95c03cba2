//! The servicing domain: canonical events, loan-account state and the pure state machine that
//! applies one event to one account. No AWS and no Lambda dependency: adapters live elsewhere.

pub mod account;
pub mod apply;
pub mod contract;
pub mod event;
pub mod fingerprint;
pub mod journal;
pub mod ledger;
pub mod outbox;
pub mod parking;
pub mod report;
pub mod types;

pub use account::{
    Allocation, Bucket, Installment, InstallmentPayment, LoanAccount, StoredAllocation,
};
pub use apply::{
    AllocationWrite, Applied, COLLISION, Deferral, Outcome, Rejection, ReversalTarget, Staleness,
    apply,
};
pub use event::{
    CLOSE_SOURCE_SYSTEM, DEFAULT_MAX_EVENT_TIME_SKEW, DecodeError, EVENT_TIME_IN_FUTURE, EventKind,
    ServicingEvent,
};
pub use fingerprint::{FactTag, Fingerprint};
pub use ledger::{Counts, Disposition, Ledger, QuarantineRecord};
pub use outbox::DomainEvent;
pub use parking::{
    Arrival, MAX_PARKED_BODY_BYTES, MAX_PARKED_BYTES, MAX_PARKED_FACTS, PARKED_BODY_TOO_LARGE,
    PARKED_INLINE_BODY_BYTES, PARKING_FULL, ParkedFact, ParkedFacts,
};
pub use types::{AccountId, Amount, Currency, Money, SourceRef};
