//! The API's response bodies, as `docs/openapi.json` describes them (errors are `Problem`).

use chrono::NaiveDate;
use serde::Serialize;
use servicing_domain::{
    AccountId, Allocation, Bucket, Currency, InstallmentPayment, LoanAccount, SourceRef,
    StoredAllocation,
};

/// A fact's identity on the wire.
#[derive(Debug, Clone, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedPayment {
    pub account_id: AccountId,
    pub amount_minor: i64,
    pub currency: Currency,
    pub reference: String,
    /// The payment's business time as the event carries it (canonical form).
    pub event_time: String,
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
