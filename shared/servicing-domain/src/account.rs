//! Loan account state, stored allocations and arrears (days past due, buckets).

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::fingerprint::FactTag;
use crate::types::{AccountId, Currency, MoneyError, SourceRef, add_minor, sub_minor};

/// The state of one loan account, as the account-state consumer keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoanAccount {
    pub account_id: AccountId,
    pub currency: Currency,
    pub principal_outstanding_minor: i64,
    pub interest_outstanding_minor: i64,
    pub fees_outstanding_minor: i64,
    /// Overpayments: money owed back to the customer, never negative.
    pub credit_balance_minor: i64,
    pub credit_limit_minor: Option<i64>,
    /// Sequence of the last applied `CREDIT_LIMIT_SET` (0 = none yet).
    pub credit_limit_sequence: u64,
    pub installments: Vec<Installment>,
    pub dpd: u32,
    pub delinquency_bucket: Bucket,
    /// The business date arrears are computed at: the latest applied event's date (an
    /// event's `eventTime` date, a `BUSINESS_DAY_CLOSED`'s `businessDate`). Business time
    /// never moves backwards, so a late-delivered old event cannot un-age arrears.
    pub business_date: NaiveDate,
    /// The business date of its `LOAN_OPENED` (absent on items written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_on: Option<NaiveDate>,
    /// The tag of its `LOAN_OPENED`: a resend of it (claim expired) is a duplicate, another
    /// opening is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening_fact: Option<FactTag>,
}

/// One scheduled installment and how much of it has been paid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installment {
    pub installment_no: u32,
    pub due_date: NaiveDate,
    pub due_minor: i64,
    pub paid_minor: i64,
    /// The tag of the `INSTALLMENT_DUE` that recorded it: a resend of it (claim expired) is a
    /// duplicate, another bill of the same number is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<FactTag>,
}

impl Installment {
    pub fn unpaid_minor(&self) -> i64 {
        self.due_minor - self.paid_minor
    }
}

/// Delinquency buckets by days past due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Bucket {
    Current,
    #[serde(rename = "DPD_1_29")]
    Dpd1To29,
    #[serde(rename = "DPD_30_59")]
    Dpd30To59,
    #[serde(rename = "DPD_60_89")]
    Dpd60To89,
    #[serde(rename = "DPD_90_PLUS")]
    Dpd90Plus,
}

impl Bucket {
    /// Every bucket, from the best to the worst.
    pub const ALL: [Bucket; 5] = [
        Bucket::Current,
        Bucket::Dpd1To29,
        Bucket::Dpd30To59,
        Bucket::Dpd60To89,
        Bucket::Dpd90Plus,
    ];

    pub fn for_dpd(dpd: u32) -> Self {
        match dpd {
            0 => Bucket::Current,
            1..=29 => Bucket::Dpd1To29,
            30..=59 => Bucket::Dpd30To59,
            60..=89 => Bucket::Dpd60To89,
            _ => Bucket::Dpd90Plus,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Current => "CURRENT",
            Bucket::Dpd1To29 => "DPD_1_29",
            Bucket::Dpd30To59 => "DPD_30_59",
            Bucket::Dpd60To89 => "DPD_60_89",
            Bucket::Dpd90Plus => "DPD_90_PLUS",
        }
    }

    /// Entering one of these buckets triggers a collections action.
    pub fn needs_collections_action(self) -> bool {
        self >= Bucket::Dpd30To59
    }
}

/// How one payment was split by the waterfall. Always sums to the payment amount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub fees: i64,
    pub interest: i64,
    pub principal: i64,
    pub credit: i64,
}

impl Allocation {
    pub fn total(&self) -> Option<i64> {
        self.fees
            .checked_add(self.interest)?
            .checked_add(self.principal)?
            .checked_add(self.credit)
    }
}

/// The part of a payment that went to one installment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallmentPayment {
    pub installment_no: u32,
    pub amount_minor: i64,
}

/// A payment's allocation, stored immutably under the payment's identity when it is applied;
/// only `reversed_by` is ever set afterwards (once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAllocation {
    pub payment: SourceRef,
    pub account_id: AccountId,
    pub currency: Currency,
    pub amount_minor: i64,
    pub allocation: Allocation,
    pub installments_paid: Vec<InstallmentPayment>,
    pub applied_on: NaiveDate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reversed_by: Option<SourceRef>,
    /// The tag of the reversal's payload, kept with `reversed_by`: a reversal resent after its
    /// claim expired is a duplicate only with the same payload (absent on marks written before
    /// the tag was kept: identity alone then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reversal_fact: Option<crate::fingerprint::FactTag>,
}

impl LoanAccount {
    pub fn opened(
        account_id: AccountId,
        currency: Currency,
        principal_minor: i64,
        credit_limit_minor: Option<i64>,
        business_date: NaiveDate,
    ) -> Self {
        Self {
            account_id,
            currency,
            principal_outstanding_minor: principal_minor,
            interest_outstanding_minor: 0,
            fees_outstanding_minor: 0,
            credit_balance_minor: 0,
            credit_limit_minor,
            credit_limit_sequence: 0,
            installments: Vec::new(),
            dpd: 0,
            delinquency_bucket: Bucket::Current,
            business_date,
            opened_on: Some(business_date),
            opening_fact: None,
        }
    }

    /// Total the customer owes (fees + interest + principal).
    pub fn total_outstanding_minor(&self) -> Option<i64> {
        self.fees_outstanding_minor
            .checked_add(self.interest_outstanding_minor)?
            .checked_add(self.principal_outstanding_minor)
    }

    /// Runs the waterfall fees → interest → principal → credit on `amount`, then pays
    /// installments oldest first with the interest and principal parts.
    pub fn allocate_payment(
        &mut self,
        amount: i64,
    ) -> Result<(Allocation, Vec<InstallmentPayment>), MoneyError> {
        let mut left = amount;
        let mut take = |outstanding: &mut i64| -> Result<i64, MoneyError> {
            let part = left.min(*outstanding);
            *outstanding = sub_minor(*outstanding, part)?;
            left -= part;
            Ok(part)
        };
        let fees = take(&mut self.fees_outstanding_minor)?;
        let interest = take(&mut self.interest_outstanding_minor)?;
        let principal = take(&mut self.principal_outstanding_minor)?;
        let credit = left;
        self.credit_balance_minor = add_minor(self.credit_balance_minor, credit)?;
        let allocation = Allocation {
            fees,
            interest,
            principal,
            credit,
        };
        let paid = self.pay_installments(add_minor(interest, principal)?);
        Ok((allocation, paid))
    }

    fn pay_installments(&mut self, mut available: i64) -> Vec<InstallmentPayment> {
        let mut order: Vec<usize> = (0..self.installments.len()).collect();
        order.sort_by_key(|&i| {
            let inst = &self.installments[i];
            (inst.due_date, inst.installment_no)
        });
        let mut paid = Vec::new();
        for i in order {
            if available == 0 {
                break;
            }
            let inst = &mut self.installments[i];
            let part = available.min(inst.unpaid_minor());
            if part > 0 {
                inst.paid_minor += part;
                available -= part;
                paid.push(InstallmentPayment {
                    installment_no: inst.installment_no,
                    amount_minor: part,
                });
            }
        }
        paid
    }

    /// Puts back exactly what `stored` took: credit first, then principal, interest, fees, and
    /// the installment payments it made.
    pub fn restore_allocation(&mut self, stored: &StoredAllocation) -> Result<(), MoneyError> {
        let a = &stored.allocation;
        self.credit_balance_minor = sub_minor(self.credit_balance_minor, a.credit)?;
        self.principal_outstanding_minor =
            add_minor(self.principal_outstanding_minor, a.principal)?;
        self.interest_outstanding_minor = add_minor(self.interest_outstanding_minor, a.interest)?;
        self.fees_outstanding_minor = add_minor(self.fees_outstanding_minor, a.fees)?;
        for payment in &stored.installments_paid {
            let inst = self
                .installments
                .iter_mut()
                .find(|i| i.installment_no == payment.installment_no)
                .ok_or(MoneyError::Negative)?;
            inst.paid_minor = sub_minor(inst.paid_minor, payment.amount_minor)?;
        }
        Ok(())
    }

    /// The due date of the oldest installment with an unpaid remainder (`None` when every
    /// recorded installment is paid). The account is past due on every later date until it
    /// is paid, whether or not any event arrives: what the daily close is for.
    pub fn oldest_unpaid_due_date(&self) -> Option<NaiveDate> {
        self.installments
            .iter()
            .filter(|i| i.unpaid_minor() > 0)
            .map(|i| i.due_date)
            .min()
    }

    /// Whether an installment with an unpaid remainder is past due on `date` (its due date is
    /// before `date`): the account's arrears age when `date` is closed.
    pub fn past_due_at(&self, date: NaiveDate) -> bool {
        self.dpd_at(date) > 0
    }

    /// Days past due at `date`: from the due date of the oldest installment with an unpaid
    /// remainder, floored at 0.
    pub fn dpd_at(&self, date: NaiveDate) -> u32 {
        self.oldest_unpaid_due_date()
            .map(|due| (date - due).num_days().clamp(0, i64::from(u32::MAX)) as u32)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> LoanAccount {
        let date = NaiveDate::from_ymd_opt(2026, 9, 1).expect("date");
        let mut a = LoanAccount::opened(
            AccountId::parse("a1").expect("id"),
            Currency::parse("EUR").expect("EUR"),
            100_000,
            None,
            date,
        );
        a.fees_outstanding_minor = 5_000;
        a.interest_outstanding_minor = 10_000;
        a
    }

    #[test]
    fn when_paying_the_contract_example_should_split_fees_interest_principal() {
        let mut a = account();
        let (alloc, _) = a.allocate_payment(50_000).expect("allocates");
        assert_eq!(
            alloc,
            Allocation {
                fees: 5_000,
                interest: 10_000,
                principal: 35_000,
                credit: 0
            }
        );
        assert_eq!(a.principal_outstanding_minor, 65_000);
    }

    #[test]
    fn when_overpaying_should_keep_the_remainder_as_credit() {
        let mut a = account();
        let (alloc, _) = a.allocate_payment(120_000).expect("allocates");
        assert_eq!(alloc.credit, 5_000);
        assert_eq!(a.credit_balance_minor, 5_000);
        assert_eq!(a.total_outstanding_minor(), Some(0));
    }

    #[test]
    fn when_buckets_are_computed_should_follow_the_contract_edges() {
        let cases = [
            (0, Bucket::Current),
            (1, Bucket::Dpd1To29),
            (29, Bucket::Dpd1To29),
            (30, Bucket::Dpd30To59),
            (59, Bucket::Dpd30To59),
            (60, Bucket::Dpd60To89),
            (89, Bucket::Dpd60To89),
            (90, Bucket::Dpd90Plus),
            (4000, Bucket::Dpd90Plus),
        ];
        for (dpd, bucket) in cases {
            assert_eq!(Bucket::for_dpd(dpd), bucket, "dpd {dpd}");
        }
        assert!(!Bucket::Dpd1To29.needs_collections_action());
        assert!(Bucket::Dpd30To59.needs_collections_action());
    }
}
