//! The API's response bodies, as `docs/openapi.json` describes them (errors are `Problem`).

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use servicing_domain::{
    AccountId, Allocation, Bucket, Currency, InstallmentPayment, LoanAccount, SourceRef,
    StoredAllocation,
};

/// A fact's identity on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FactRef {
    pub source_system: String,
    pub source_event_id: String,
}

impl From<&SourceRef> for FactRef {
    fn from(source: &SourceRef) -> Self {
        Self {
            source_system: source.system.clone(),
            source_event_id: source.event_id.clone(),
        }
    }
}

/// 202 to `POST /v1/payments` (stored with the idempotency record and replayed as is).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    pub operation_id: String,
    pub status: &'static str,
    #[serde(flatten)]
    pub fact: FactRef,
    pub payment: AcceptedPayment,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedPayment {
    pub account_id: AccountId,
    pub amount_minor: i64,
    pub currency: Currency,
    pub reference: String,
    /// The payment's business time as the event carries it (canonical form).
    pub event_time: String,
}

/// The stored 202 body, read back by `GET /v1/payments/{operationId}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAccepted {
    pub operation_id: String,
    #[serde(flatten)]
    pub fact: FactRef,
    pub payment: AcceptedPayment,
}

/// Where an accepted payment stands (`GET /v1/payments/{operationId}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PaymentState {
    /// Recorded and on its way: account-state has not judged its fact yet.
    Accepted,
    /// Applied to the account: its allocation is stored.
    Applied,
    /// Waiting on the account for another fact.
    Parked,
    /// Not applied, and nothing will apply it (see [`NotApplied`]).
    Rejected,
}

/// Why a payment answered 202 is not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotApplied {
    /// A business rule refused it (its quarantine item says which).
    Rejected,
    /// Judged stale.
    Stale,
    /// Another payload holds the payment's identity; this one was quarantined as a collision.
    Collision,
    /// No fact applied within the retention: nothing can apply it any more (an applied
    /// payment's record is kept for good).
    NotAppliedWithinRetention,
}

/// 200 to `GET /v1/payments/{operationId}`: the 202's payment, and where it stands.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentStatus {
    pub operation_id: String,
    pub status: PaymentState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotApplied>,
    #[serde(flatten)]
    pub fact: FactRef,
    pub payment: AcceptedPayment,
    /// When the API accepted it (RFC 3339).
    pub accepted_at: String,
    /// Applied only (a `None` adds no field).
    #[serde(flatten)]
    pub applied: Option<AppliedPayment>,
}

/// What an applied payment's record holds (its allocation, stored with it).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedPayment {
    pub allocation: Allocation,
    pub installments_paid: Vec<InstallmentPayment>,
    pub applied_on: NaiveDate,
    /// The reversal that undid it, if any.
    pub reversed_by: Option<FactRef>,
}

impl From<StoredAllocation> for AppliedPayment {
    fn from(a: StoredAllocation) -> Self {
        Self {
            allocation: a.allocation,
            installments_paid: a.installments_paid,
            applied_on: a.applied_on,
            reversed_by: a.reversed_by.as_ref().map(FactRef::from),
        }
    }
}

/// 200 to `GET /v1/loans/{accountId}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoanView {
    pub account_id: AccountId,
    pub currency: Currency,
    pub principal_outstanding_minor: i64,
    pub interest_outstanding_minor: i64,
    pub fees_outstanding_minor: i64,
    pub credit_balance_minor: i64,
    /// `None` only if the sum overflows (never for real balances).
    pub total_outstanding_minor: Option<i64>,
    pub credit_limit_minor: Option<i64>,
    pub dpd: u32,
    pub delinquency_bucket: Bucket,
    pub business_date: NaiveDate,
    pub version: u64,
}

impl LoanView {
    pub fn new(a: &LoanAccount, version: u64) -> Self {
        Self {
            account_id: a.account_id.clone(),
            currency: a.currency,
            principal_outstanding_minor: a.principal_outstanding_minor,
            interest_outstanding_minor: a.interest_outstanding_minor,
            fees_outstanding_minor: a.fees_outstanding_minor,
            credit_balance_minor: a.credit_balance_minor,
            total_outstanding_minor: a.total_outstanding_minor(),
            credit_limit_minor: a.credit_limit_minor,
            dpd: a.dpd,
            delinquency_bucket: a.delinquency_bucket,
            business_date: a.business_date,
            version,
        }
    }
}

/// 200 to `GET /v1/loans/{accountId}/allocations`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationsView {
    pub account_id: AccountId,
    pub allocations: Vec<AllocationView>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationView {
    pub payment: FactRef,
    pub amount_minor: i64,
    pub currency: Currency,
    pub allocation: Allocation,
    pub installments_paid: Vec<InstallmentPayment>,
    pub applied_on: NaiveDate,
    pub reversed: bool,
    pub reversed_by: Option<FactRef>,
}

impl From<StoredAllocation> for AllocationView {
    fn from(a: StoredAllocation) -> Self {
        Self {
            payment: FactRef::from(&a.payment),
            amount_minor: a.amount_minor,
            currency: a.currency,
            allocation: a.allocation,
            installments_paid: a.installments_paid,
            applied_on: a.applied_on,
            reversed: a.reversed_by.is_some(),
            reversed_by: a.reversed_by.as_ref().map(FactRef::from),
        }
    }
}
