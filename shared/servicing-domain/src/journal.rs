//! Accounting postings: the double-entry journal a sub-ledger keeps from the domain events
//! (`docs/ledger.md`). Pure, like the rest of the domain: the `ledger-postings` consumer commits
//! what this module computes, the property tests compare it with servicing.
//!
//! An entry is a list of transfers, each one amount moved from a credited to a debited ledger
//! account (TigerBeetle's transfer), so every entry balances by construction, per currency (a
//! loan has one currency, and so has each of its entries). A balance is the sum of its
//! postings: debits positive, credits negative; the sum over all ledger accounts of any set of
//! entries is zero.

use std::collections::BTreeMap;

use chrono::{DateTime, Days, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::account::{Allocation, LoanAccount};
use crate::outbox::{DomainEvent, detail_types};
use crate::types::{AccountId, Currency, SourceRef};

/// The chart of accounts (`docs/ledger.md`). One sub-ledger per loan account holds every
/// ledger account its entries touch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LedgerAccount {
    /// 1000: money a provider (a `sourceSystem`) has settled and not yet paid over: an asset.
    CashClearing(String),
    /// 1100: principal the borrower owes: an asset.
    PrincipalReceivable,
    /// 1110: interest billed or accrued and not paid: an asset.
    InterestReceivable,
    /// 1120: fees assessed and not paid: an asset.
    FeesReceivable,
    /// 2000: money the lender owes the borrower (overpayments): a liability.
    CustomerCredit,
    /// 2100: principal paid out to the borrower at opening (the funding side): a liability.
    Disbursements,
    /// 2900: what no rule could classify, left for a person: posted by no automated rule; the
    /// reconciliation requires it to be zero.
    Suspense,
    /// 3000: the other side of the balances a migration brought in (`opening_entry`): what
    /// servicing held before the ledger's events reach back; posted by the migration alone.
    OpeningBalances,
    /// 4000: income.
    InterestIncome,
    /// 4100: income.
    FeeIncome,
}

impl LedgerAccount {
    /// Every ledger account but the cash clearing of each provider (one per source system).
    pub const FIXED: [LedgerAccount; 9] = [
        LedgerAccount::PrincipalReceivable,
        LedgerAccount::InterestReceivable,
        LedgerAccount::FeesReceivable,
        LedgerAccount::CustomerCredit,
        LedgerAccount::Disbursements,
        LedgerAccount::Suspense,
        LedgerAccount::OpeningBalances,
        LedgerAccount::InterestIncome,
        LedgerAccount::FeeIncome,
    ];

    /// The stored code: the account number, its name and, for cash clearing, the provider.
    pub fn code(&self) -> String {
        match self {
            LedgerAccount::CashClearing(system) => format!("1000:cash_clearing:{system}"),
            LedgerAccount::PrincipalReceivable => "1100:principal_receivable".into(),
            LedgerAccount::InterestReceivable => "1110:interest_receivable".into(),
            LedgerAccount::FeesReceivable => "1120:fees_receivable".into(),
            LedgerAccount::CustomerCredit => "2000:customer_credit".into(),
            LedgerAccount::Disbursements => "2100:disbursements".into(),
            LedgerAccount::Suspense => "2900:suspense".into(),
            LedgerAccount::OpeningBalances => "3000:opening_balances".into(),
            LedgerAccount::InterestIncome => "4000:interest_income".into(),
            LedgerAccount::FeeIncome => "4100:fee_income".into(),
        }
    }

    pub fn parse(code: &str) -> Option<Self> {
        if let Some(system) = code.strip_prefix("1000:cash_clearing:") {
            return Some(LedgerAccount::CashClearing(system.to_owned()));
        }
        Self::FIXED.into_iter().find(|a| a.code() == code)
    }
}

impl Serialize for LedgerAccount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.code())
    }
}

impl<'de> Deserialize<'de> for LedgerAccount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = String::deserialize(d)?;
        LedgerAccount::parse(&code)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown ledger account {code}")))
    }
}

/// One amount moved: `debit` up, `credit` down by the same `amount_minor` (> 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transfer {
    pub debit: LedgerAccount,
    pub credit: LedgerAccount,
    pub amount_minor: i64,
}

/// The journal entry one money-moving domain event causes, before it is posted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// The domain event's id: at most one entry per id, per consumer.
    pub entry_id: String,
    pub account_id: AccountId,
    /// The domain event's type (`PaymentApplied`, …).
    pub event_type: String,
    pub currency: Currency,
    /// Business time: the event's `occurredAt`.
    pub effective_at: DateTime<Utc>,
    /// The source fact that caused it (traceability to the servicing record).
    pub trigger: SourceRef,
    /// For a payment or its reversal: the provider whose cash moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<SourceRef>,
    /// For a reversal: the entry it undoes (the payment's `PaymentApplied` id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverses: Option<String>,
    /// Never empty: an event that moves nothing gets no entry.
    pub transfers: Vec<Transfer>,
    /// For an entry an operator posted (a correcting entry, an opening balance): why, and who
    /// posted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<Correction>,
}

/// Why an operator posted an entry, and who did (`ledgerctl ledger correct`, `ledger migrate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Correction {
    pub reason: String,
    pub by: String,
}

/// The event type of an operator's correcting entry: no domain event causes it.
pub const MANUAL_CORRECTION: &str = "ManualCorrection";

/// The prefix of a correcting entry's id: apart from the events' `evt_` ids.
pub const CORRECTION_ID_PREFIX: &str = "corr_";

/// An operator's correcting entry on one account: one transfer, an id the operator chooses (a
/// second post under it is a duplicate, or a collision if anything differs), never on cash
/// clearing — cash is what the provider settled and servicing applied, reconciled three ways, and
/// a correction there would hide the difference it should explain. Effective and posted now.
pub fn correcting_entry(
    id: &str,
    account_id: AccountId,
    currency: Currency,
    transfer: Transfer,
    correction: Correction,
    at: DateTime<Utc>,
) -> Result<JournalEntry, Unpostable> {
    let well_formed = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !well_formed {
        return Err(bad(format!(
            "correction id {id:?}: 1 to 64 letters, digits, '-', '_' or '.'"
        )));
    }
    if transfer.amount_minor <= 0 {
        return Err(bad("a correction moves an amount > 0"));
    }
    if transfer.debit == transfer.credit {
        return Err(bad(format!(
            "a correction debits and credits {}: it moves nothing",
            transfer.debit.code()
        )));
    }
    if [&transfer.debit, &transfer.credit]
        .iter()
        .any(|a| matches!(a, LedgerAccount::CashClearing(_)))
    {
        return Err(bad(
            "a correction never touches cash clearing: cash is reconciled against the provider and servicing",
        ));
    }
    if [&transfer.debit, &transfer.credit].contains(&&LedgerAccount::OpeningBalances) {
        return Err(bad(
            "a correction never touches opening balances: only the migration posts them (ledger migrate)",
        ));
    }
    if correction.reason.trim().is_empty() {
        return Err(bad("a correction says why (--reason)"));
    }
    Ok(JournalEntry {
        entry_id: format!("{CORRECTION_ID_PREFIX}{id}"),
        account_id,
        event_type: MANUAL_CORRECTION.to_owned(),
        currency,
        effective_at: at,
        trigger: SourceRef {
            system: "operator".to_owned(),
            event_id: id.to_owned(),
        },
        payment: None,
        reverses: None,
        transfers: vec![transfer],
        correction: Some(correction),
    })
}

/// The event type of an account's opening balance: servicing's balances brought into the
/// ledger by a migration, for history no event will bring any more.
pub const OPENING_BALANCE: &str = "OpeningBalance";

/// The id of an account's opening balance: one per account, ever (`open_<accountId>`).
pub fn opening_id(account_id: &AccountId) -> String {
    format!("open_{account_id}")
}

/// The opening balance that brings `ledger` (an account's sub-ledger, every event it can still
/// be given already posted) to `servicing` (the account's state at loan version
/// `loan_version`): each receivable and the customer credit moved by its difference, against
/// opening balances; `None` when they already agree. Refused when the ledger holds what no
/// migration may absorb: suspense (a person classifies it first) or another currency.
/// Effective and posted now; cash clearing is never touched (it is reconciled three ways).
pub fn opening_entry(
    servicing: &LoanAccount,
    loan_version: u64,
    ledger: &SubLedger,
    by: Correction,
    at: DateTime<Utc>,
) -> Result<Option<JournalEntry>, Unpostable> {
    use LedgerAccount::*;
    if let Some(currency) = ledger.currency
        && currency != servicing.currency
    {
        return Err(bad(format!(
            "the ledger is in {}, servicing in {}",
            currency.as_str(),
            servicing.currency.as_str()
        )));
    }
    let suspense = ledger.balance(&Suspense);
    if suspense != 0 {
        return Err(bad(format!(
            "suspense holds {suspense}: a person classifies it before a migration"
        )));
    }
    if by.reason.trim().is_empty() {
        return Err(bad("a migration says why (--reason)"));
    }
    // How far each balance is from servicing's, debit-positive: an asset short of servicing is
    // debited, the credit (a liability) short of servicing is credited.
    let short = |account: LedgerAccount, servicing_minor: i64, debit_normal: bool| {
        let ledger_minor = match debit_normal {
            true => ledger.balance(&account),
            false => ledger.balance(&account).checked_neg()?,
        };
        let gap = servicing_minor.checked_sub(ledger_minor)?;
        Some((
            account,
            if debit_normal {
                gap
            } else {
                gap.checked_neg()?
            },
        ))
    };
    let gaps = [
        short(
            PrincipalReceivable,
            servicing.principal_outstanding_minor,
            true,
        ),
        short(
            InterestReceivable,
            servicing.interest_outstanding_minor,
            true,
        ),
        short(FeesReceivable, servicing.fees_outstanding_minor, true),
        short(CustomerCredit, servicing.credit_balance_minor, false),
    ];
    let mut transfers = Vec::new();
    for gap in gaps {
        let (account, debit_minor) = gap.ok_or_else(|| bad("a balance would overflow"))?;
        let (debit, credit, amount_minor) = match debit_minor {
            0 => continue,
            d if d > 0 => (account, OpeningBalances, d),
            d => (
                OpeningBalances,
                account,
                d.checked_neg()
                    .ok_or_else(|| bad("a balance would overflow"))?,
            ),
        };
        transfers.push(Transfer {
            debit,
            credit,
            amount_minor,
        });
    }
    if transfers.is_empty() {
        return Ok(None);
    }
    Ok(Some(JournalEntry {
        entry_id: opening_id(&servicing.account_id),
        account_id: servicing.account_id.clone(),
        event_type: OPENING_BALANCE.to_owned(),
        currency: servicing.currency,
        effective_at: at,
        // What it was taken from: the account's servicing state at this loan version.
        trigger: SourceRef {
            system: "migration".to_owned(),
            event_id: format!("{}@v{loan_version}", servicing.account_id),
        },
        payment: None,
        reverses: None,
        transfers,
        correction: Some(by),
    }))
}

impl JournalEntry {
    /// The business date its cash is reconciled under (its effective time's UTC date) when it
    /// moves cash: a payment's or a reversal's entry; `None` for any other.
    pub fn cash_date(&self) -> Option<NaiveDate> {
        matches!(
            self.event_type.as_str(),
            detail_types::PAYMENT_APPLIED | detail_types::PAYMENT_REVERSED
        )
        .then(|| self.effective_at.date_naive())
    }

    /// Why this reversal's entry is not the exact opposite of `original`, the entry it names in
    /// `reverses` (`None`: it is — same account, currency and payment, every transfer of the
    /// payment's entry with its debit and credit swapped, nothing more).
    pub fn fails_to_undo(&self, original: &JournalEntry) -> Option<String> {
        // Each transfer as (debit, credit, amount), sorted; `swapped` reads the original's
        // the other way round.
        let legs = |entry: &JournalEntry, swapped: bool| {
            let mut legs: Vec<(String, String, i64)> = entry
                .transfers
                .iter()
                .map(|t| match swapped {
                    false => (t.debit.code(), t.credit.code(), t.amount_minor),
                    true => (t.credit.code(), t.debit.code(), t.amount_minor),
                })
                .collect();
            legs.sort();
            legs
        };
        let (mine, undone) = (legs(self, false), legs(original, true));
        let differs = if self.event_type != detail_types::PAYMENT_REVERSED {
            format!("it is a {}, not a reversal", self.event_type)
        } else if self.reverses.as_deref() != Some(original.entry_id.as_str()) {
            format!("it reverses {:?}", self.reverses)
        } else if original.event_type != detail_types::PAYMENT_APPLIED {
            format!("the entry it reverses is a {}", original.event_type)
        } else if (&self.account_id, self.currency) != (&original.account_id, original.currency) {
            format!(
                "it is on {} in {}, the payment's on {} in {}",
                self.account_id,
                self.currency.as_str(),
                original.account_id,
                original.currency.as_str()
            )
        } else if self.payment != original.payment {
            format!(
                "it names payment {:?}, the entry {:?}",
                self.payment, original.payment
            )
        } else if mine != undone {
            format!("its transfers {mine:?} are not the payment's swapped {undone:?}")
        } else {
            return None;
        };
        Some(format!(
            "reversal entry {} does not undo {}: {differs}",
            self.entry_id, original.entry_id
        ))
    }
}

/// An entry with the two times the ledger adds: when it was processed and the accounting
/// period (a day) it is posted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Posting {
    #[serde(flatten)]
    pub entry: JournalEntry,
    pub processed_at: DateTime<Utc>,
    pub posting_date: NaiveDate,
}

/// The domain event types that move money. The others (`CreditLimitChanged`: a limit is a
/// commitment, not a balance; `DelinquencyChanged`: a classification) post nothing.
pub const MONEY_EVENT_TYPES: [&str; 6] = [
    detail_types::LOAN_OPENED,
    detail_types::INSTALLMENT_DUE,
    detail_types::INTEREST_ACCRUED,
    detail_types::FEE_ASSESSED,
    detail_types::PAYMENT_APPLIED,
    detail_types::PAYMENT_REVERSED,
];

/// Why an event cannot be posted (quarantined with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unpostable(pub String);

fn bad(what: impl Into<String>) -> Unpostable {
    Unpostable(what.into())
}

/// An `InstallmentDue` published before events carried their currency (the one money event
/// that did not): its account's currency completes it.
pub fn missing_currency(detail: &Value) -> bool {
    detail["eventType"] == detail_types::INSTALLMENT_DUE && detail.get("currency").is_none()
}

/// The entry a published domain event (its EventBridge `detail`) causes: `None` for an event
/// that moves no money (or moves zero), an error for a detail that is not a valid money event.
pub fn entry_of(detail: &Value) -> Result<Option<JournalEntry>, Unpostable> {
    // Before the type: a later major may move money under a type that moves none today.
    crate::outbox::check_schema_version(detail).map_err(bad)?;
    let event_type = detail["eventType"]
        .as_str()
        .ok_or_else(|| bad("eventType is missing"))?;
    if !MONEY_EVENT_TYPES.contains(&event_type) {
        return Ok(None);
    }
    let text = |field: &str| {
        detail[field]
            .as_str()
            .ok_or_else(|| bad(format!("{field} is missing or not a string")))
    };
    let minor = |field: &str| -> Result<i64, Unpostable> {
        match detail[field].as_i64() {
            Some(v) if v >= 0 => Ok(v),
            _ => Err(bad(format!(
                "{field} is missing or not a whole amount >= 0"
            ))),
        }
    };
    let entry_id = text("eventId")?.to_owned();
    let account_id =
        AccountId::parse(text("accountId")?).map_err(|e| bad(format!("accountId: {e}")))?;
    let currency = Currency::parse(text("currency")?).map_err(|e| bad(format!("currency: {e}")))?;
    let effective_at = crate::event::parse_timestamp(text("occurredAt")?)
        .ok_or_else(|| bad("occurredAt: not an RFC 3339 date-time"))?;
    let source_ref = |value: &Value, what: &str| -> Result<SourceRef, Unpostable> {
        match (
            value["sourceSystem"].as_str(),
            value["sourceEventId"].as_str(),
        ) {
            (Some(system), Some(event_id)) => Ok(SourceRef {
                system: system.to_owned(),
                event_id: event_id.to_owned(),
            }),
            _ => Err(bad(format!(
                "{what} must name sourceSystem and sourceEventId"
            ))),
        }
    };
    let trigger = source_ref(&detail["trigger"], "trigger")?;
    use LedgerAccount::*;
    let one = |debit: LedgerAccount, credit: LedgerAccount, amount_minor: i64| {
        vec![Transfer {
            debit,
            credit,
            amount_minor,
        }]
    };
    let (mut transfers, mut payment, mut reverses) = (Vec::new(), None, None);
    match event_type {
        detail_types::LOAN_OPENED => {
            transfers = one(PrincipalReceivable, Disbursements, minor("principalMinor")?);
        }
        // The bill's principal was receivable since the opening; its interest is earned now.
        detail_types::INSTALLMENT_DUE => {
            transfers = one(InterestReceivable, InterestIncome, minor("interestMinor")?);
        }
        detail_types::INTEREST_ACCRUED => {
            transfers = one(InterestReceivable, InterestIncome, minor("amountMinor")?);
        }
        detail_types::FEE_ASSESSED => {
            transfers = one(FeesReceivable, FeeIncome, minor("amountMinor")?);
        }
        detail_types::PAYMENT_APPLIED | detail_types::PAYMENT_REVERSED => {
            let paid = source_ref(&detail["payment"], "payment")?;
            let split: Allocation = serde_json::from_value(detail["allocation"].clone())
                .map_err(|e| bad(format!("allocation: {e}")))?;
            let parts = [split.fees, split.interest, split.principal, split.credit];
            if parts.iter().any(|p| *p < 0) || split.total() != Some(minor("amountMinor")?) {
                return Err(bad(format!(
                    "allocation {parts:?} does not add up to amountMinor {}",
                    detail["amountMinor"]
                )));
            }
            let cash = CashClearing(paid.system.clone());
            let legs = [
                (FeesReceivable, split.fees),
                (InterestReceivable, split.interest),
                (PrincipalReceivable, split.principal),
                (CustomerCredit, split.credit),
            ];
            let reversal = event_type == detail_types::PAYMENT_REVERSED;
            for (account, amount_minor) in legs {
                // A payment moves cash in and each part out of what is owed; its reversal
                // moves exactly the same amounts back.
                let (debit, credit) = match reversal {
                    false => (cash.clone(), account),
                    true => (account, cash.clone()),
                };
                transfers.push(Transfer {
                    debit,
                    credit,
                    amount_minor,
                });
            }
            if reversal {
                reverses = Some(DomainEvent::id_for(detail_types::PAYMENT_APPLIED, &paid));
            }
            payment = Some(paid);
        }
        _ => unreachable!("MONEY_EVENT_TYPES"),
    }
    transfers.retain(|t| t.amount_minor > 0);
    if transfers.is_empty() {
        return Ok(None);
    }
    Ok(Some(JournalEntry {
        entry_id,
        account_id,
        event_type: event_type.to_owned(),
        currency,
        effective_at,
        trigger,
        payment,
        reverses,
        transfers,
        correction: None,
    }))
}

/// The accounting period (day) an entry is posted to: its business date, or the first open
/// day when that date is in a closed period (a backdated posting: the effective date is kept on
/// the entry, the closed period is never touched).
pub fn posting_date(effective: NaiveDate, closed_through: Option<NaiveDate>) -> NaiveDate {
    match closed_through.and_then(|d| d.checked_add_days(Days::new(1))) {
        Some(first_open) if first_open > effective => first_open,
        _ => effective,
    }
}

/// One loan account's sub-ledger: the running balance of every ledger account its entries
/// touched (debit positive), kept equal to the sum of its postings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubLedger {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
    /// By ledger account code; an account back at zero stays listed (it was used).
    pub balances: BTreeMap<String, i64>,
    /// Entries posted.
    pub entries: u64,
}

impl SubLedger {
    /// Adds an entry's transfers. Refused (nothing changes) when its currency is not the
    /// sub-ledger's or a balance would overflow.
    pub fn post(&mut self, entry: &JournalEntry) -> Result<(), Unpostable> {
        if let Some(currency) = self.currency
            && currency != entry.currency
        {
            return Err(bad(format!(
                "entry in {} on a sub-ledger in {}",
                entry.currency.as_str(),
                currency.as_str()
            )));
        }
        let mut next = self.balances.clone();
        for t in &entry.transfers {
            let overflow = || bad("a balance would overflow");
            let debit = next.entry(t.debit.code()).or_default();
            *debit = debit.checked_add(t.amount_minor).ok_or_else(overflow)?;
            let credit = next.entry(t.credit.code()).or_default();
            *credit = credit.checked_sub(t.amount_minor).ok_or_else(overflow)?;
        }
        self.balances = next;
        self.currency = Some(entry.currency);
        self.entries += 1;
        Ok(())
    }

    pub fn balance(&self, account: &LedgerAccount) -> i64 {
        self.balances.get(&account.code()).copied().unwrap_or(0)
    }

    /// Debits less credits over every ledger account: zero for any set of entries.
    pub fn trial_balance(&self) -> i128 {
        self.balances.values().map(|v| i128::from(*v)).sum()
    }

    /// Where this sub-ledger and the servicing state of the same account disagree (empty when
    /// they agree): receivables are the outstanding balances, customer credit (a liability, so
    /// credit-normal) the credit balance, and suspense is zero.
    pub fn differences(&self, loan: &LoanAccount) -> Vec<String> {
        let checks = [
            (
                LedgerAccount::PrincipalReceivable,
                self.balance(&LedgerAccount::PrincipalReceivable),
                loan.principal_outstanding_minor,
            ),
            (
                LedgerAccount::InterestReceivable,
                self.balance(&LedgerAccount::InterestReceivable),
                loan.interest_outstanding_minor,
            ),
            (
                LedgerAccount::FeesReceivable,
                self.balance(&LedgerAccount::FeesReceivable),
                loan.fees_outstanding_minor,
            ),
            (
                LedgerAccount::CustomerCredit,
                self.balance(&LedgerAccount::CustomerCredit)
                    .saturating_neg(),
                loan.credit_balance_minor,
            ),
            (
                LedgerAccount::Suspense,
                self.balance(&LedgerAccount::Suspense),
                0,
            ),
        ];
        let mut out: Vec<String> = checks
            .into_iter()
            .filter(|(_, ledger, servicing)| ledger != servicing)
            .map(|(account, ledger, servicing)| {
                format!("{}: ledger {ledger}, servicing {servicing}", account.code())
            })
            .collect();
        if let Some(currency) = self.currency
            && currency != loan.currency
        {
            out.push(format!(
                "currency: ledger {}, servicing {}",
                currency.as_str(),
                loan.currency.as_str()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
