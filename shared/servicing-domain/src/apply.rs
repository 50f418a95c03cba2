//! The account-state machine: `apply(state, event) -> Outcome`. Pure: no I/O, no clock.
//! What it answers (`Outcome` and the values it carries) is in `outcome`.

mod outcome;

use chrono::NaiveDate;
use serde_json::json;

use crate::account::{Bucket, LoanAccount, StoredAllocation};
use crate::event::{EventKind, ServicingEvent};
use crate::fingerprint::FactTag;
use crate::outbox::{DomainEvent, detail_types};
use crate::types::{Money, SourceRef, add_minor};

pub use outcome::{
    AllocationWrite, Applied, Deferral, Outcome, Rejection, ReversalTarget, Staleness,
};

/// The rejection code of a fact whose identity was applied with another payload, known from
/// what the state keeps once its claim expired (the store's claim tells the same otherwise).
pub const COLLISION: &str = "collision";

fn reject(code: &'static str, reason: impl Into<String>) -> Outcome {
    Outcome::Rejected(Rejection {
        code,
        reason: reason.into(),
    })
}

/// Applies `event` to `account` (`None` when the account does not exist).
///
/// For a `PAYMENT_REVERSED`, `reversal_target` says what is known of the payment of
/// `event.reversal_target()` (`None`: not applied); it is ignored for every other event.
pub fn apply(
    account: Option<&LoanAccount>,
    event: &ServicingEvent,
    reversal_target: Option<ReversalTarget<'_>>,
) -> Outcome {
    match step(account, event, reversal_target) {
        Ok(outcome) => outcome,
        Err(rejection) => Outcome::Rejected(rejection),
    }
}

fn step(
    account: Option<&LoanAccount>,
    event: &ServicingEvent,
    reversal_target: Option<ReversalTarget<'_>>,
) -> Result<Outcome, Rejection> {
    let date = event.business_date();
    // Known to be refused whatever the account's state: not parked, not even on its opening.
    if let (
        EventKind::PaymentReversed { reversal_of, .. },
        Some(ReversalTarget::NotAPayment(event_type)),
    ) = (&event.kind, reversal_target)
    {
        return Ok(reject(
            "reversal_target_not_a_payment",
            format!(
                "reversal target {reversal_of} is a {event_type}, not a PAYMENT_SETTLED: only payments can be reversed"
            ),
        ));
    }
    if let EventKind::BusinessDayClosed { business_date } = event.kind {
        return Ok(close_business_day(account, event, business_date));
    }
    let (account, mut next) = match (&event.kind, account) {
        (
            EventKind::LoanOpened {
                principal,
                credit_limit,
            },
            None,
        ) => {
            let mut opened = LoanAccount::opened(
                event.account_id.clone(),
                principal.currency,
                principal.minor(),
                credit_limit.map(|l| l.minor()),
                date,
            );
            opened.opening_fact = Some(FactTag::of(event));
            let payload = json!({
                "currency": principal.currency,
                "principalMinor": principal.minor(),
                "creditLimitMinor": credit_limit.map(|l| l.minor()),
            });
            let outbox = vec![domain_event(event, detail_types::LOAN_OPENED, payload)];
            return Ok(Outcome::Applied(Box::new(Applied {
                account: opened,
                allocation: None,
                outbox,
            })));
        }
        (EventKind::LoanOpened { .. }, Some(account)) => {
            // The same fact again, its claim expired: already applied, nothing to write.
            if account.opening_fact.as_ref() == Some(&FactTag::of(event)) {
                return Ok(Outcome::AlreadyApplied);
            }
            return Ok(reject(
                "account_exists",
                format!("account {} is already opened", event.account_id),
            ));
        }
        (_, None) => return Ok(Outcome::Deferred(Deferral::AccountNotOpened)),
        (_, Some(account)) => (account, account.clone()),
    };
    let currency = account.currency;
    let in_currency = |m: &Money| m.minor_in(currency).map_err(Rejection::from);

    let mut allocation = None;
    let (detail_type, payload) = match &event.kind {
        EventKind::LoanOpened { .. } | EventKind::BusinessDayClosed { .. } => {
            unreachable!("handled above")
        }
        EventKind::InstallmentDue {
            installment_no,
            due_date,
            principal,
            interest,
        } => {
            let tag = FactTag::of(event);
            if let Some(recorded) = next
                .installments
                .iter()
                .find(|i| i.installment_no == *installment_no)
            {
                // The same bill again, its claim expired: already applied, nothing to write.
                if recorded.fact.as_ref() == Some(&tag) {
                    return Ok(Outcome::AlreadyApplied);
                }
                return Ok(reject(
                    "installment_exists",
                    format!("installment {installment_no} is already recorded"),
                ));
            }
            if let Some(opened) = account.opened_on.filter(|opened| due_date < opened) {
                return Ok(reject(
                    "due_before_opening",
                    format!(
                        "installment {installment_no} is due {due_date}, before the account opened on {opened}"
                    ),
                ));
            }
            let due = add_minor(principal.minor(), interest.minor())?;
            next.interest_outstanding_minor =
                add_minor(next.interest_outstanding_minor, interest.minor())?;
            next.installments.push(crate::account::Installment {
                installment_no: *installment_no,
                due_date: *due_date,
                due_minor: due,
                paid_minor: 0,
                fact: Some(tag),
            });
            let payload = json!({
                "installmentNo": installment_no,
                "dueDate": due_date.format("%Y-%m-%d").to_string(),
                "principalMinor": principal.minor(),
                "interestMinor": interest.minor(),
                "currency": currency,
            });
            (detail_types::INSTALLMENT_DUE, payload)
        }
        EventKind::InterestAccrued { amount } => {
            let minor = in_currency(amount)?;
            next.interest_outstanding_minor = add_minor(next.interest_outstanding_minor, minor)?;
            let payload = json!({"amountMinor": minor, "currency": currency});
            (detail_types::INTEREST_ACCRUED, payload)
        }
        EventKind::FeeAssessed { amount, fee_type } => {
            let minor = in_currency(amount)?;
            next.fees_outstanding_minor = add_minor(next.fees_outstanding_minor, minor)?;
            let payload = json!({"amountMinor": minor, "currency": currency, "feeType": fee_type});
            (detail_types::FEE_ASSESSED, payload)
        }
        EventKind::PaymentSettled { amount } => {
            let minor = in_currency(amount)?;
            let (split, installments_paid) = next.allocate_payment(minor)?;
            let stored = StoredAllocation {
                payment: event.source.clone(),
                account_id: event.account_id.clone(),
                currency,
                amount_minor: minor,
                allocation: split,
                installments_paid,
                applied_on: date,
                reversed_by: None,
                reversal_fact: None,
            };
            let payload = json!({
                "payment": {"sourceSystem": event.source.system, "sourceEventId": event.source.event_id},
                "amountMinor": minor,
                "currency": currency,
                "allocation": split,
                "installmentsPaid": stored.installments_paid,
            });
            allocation = Some(AllocationWrite::Record(stored));
            (detail_types::PAYMENT_APPLIED, payload)
        }
        EventKind::PaymentReversed {
            amount,
            reversal_of,
        } => {
            let minor = in_currency(amount)?;
            let target = match reversal_target {
                Some(ReversalTarget::Applied(t)) if &t.payment == reversal_of => t,
                Some(ReversalTarget::AppliedElsewhere(other)) => {
                    return Ok(mismatch(reversal_of, other, &event.account_id));
                }
                Some(ReversalTarget::NotAPayment(_)) => unreachable!("refused above"),
                _ => {
                    return Ok(Outcome::Deferred(Deferral::ReversalTargetNotApplied(
                        reversal_of.clone(),
                    )));
                }
            };
            if target.account_id != event.account_id {
                return Ok(mismatch(reversal_of, &target.account_id, &event.account_id));
            }
            if target.reversed_by.as_ref() == Some(&event.source) {
                // Its claim expired; the mark on the payment still knows its payload.
                let tag = FactTag::of(event);
                return Ok(match &target.reversal_fact {
                    Some(stored) if stored != &tag => reject(
                        COLLISION,
                        format!(
                            "collision: {} reversed payment {reversal_of} with payload tag {stored}, this payload has {tag}; the first fact stands",
                            event.source
                        ),
                    ),
                    _ => Outcome::AlreadyApplied,
                });
            }
            if let Some(by) = &target.reversed_by {
                return Ok(reject(
                    "already_reversed",
                    format!("payment {reversal_of} was already reversed by {by}"),
                ));
            }
            if target.amount_minor != minor {
                return Ok(reject(
                    "reversal_amount_mismatch",
                    format!(
                        "reversal amount {minor} differs from payment amount {}",
                        target.amount_minor
                    ),
                ));
            }
            next.restore_allocation(target)?;
            let payload = json!({
                "payment": {"sourceSystem": reversal_of.system, "sourceEventId": reversal_of.event_id},
                "amountMinor": minor,
                "currency": currency,
                "allocation": target.allocation,
                "installmentsRestored": target.installments_paid,
            });
            allocation = Some(AllocationWrite::MarkReversed {
                payment: reversal_of.clone(),
                reversal: event.source.clone(),
                fact: FactTag::of(event),
            });
            (detail_types::PAYMENT_REVERSED, payload)
        }
        EventKind::CreditLimitSet { limit, sequence } => {
            let minor = in_currency(limit)?;
            if *sequence <= next.credit_limit_sequence {
                return Ok(Outcome::Stale(Staleness::Sequence {
                    sequence: *sequence,
                    last_applied: next.credit_limit_sequence,
                }));
            }
            next.credit_limit_minor = Some(minor);
            next.credit_limit_sequence = *sequence;
            let payload =
                json!({"creditLimitMinor": minor, "currency": currency, "sequence": sequence});
            (detail_types::CREDIT_LIMIT_CHANGED, payload)
        }
    };

    let mut outbox = vec![domain_event(event, detail_type, payload)];
    age(account, &mut next, event, &mut outbox);
    Ok(Outcome::Applied(Box::new(Applied {
        account: next,
        allocation,
        outbox,
    })))
}

/// Business time moves to the event's date (never backwards: an event dated before the
/// account's business date leaves it), arrears are recomputed as of it, and a bucket move
/// adds a `DelinquencyChanged` triggered by `event`.
fn age(
    account: &LoanAccount,
    next: &mut LoanAccount,
    event: &ServicingEvent,
    outbox: &mut Vec<DomainEvent>,
) {
    next.business_date = next.business_date.max(event.business_date());
    next.dpd = next.dpd_at(next.business_date);
    next.delinquency_bucket = Bucket::for_dpd(next.dpd);
    if next.delinquency_bucket != account.delinquency_bucket {
        outbox.push(DomainEvent::delinquency_changed(
            &event.account_id,
            &event.source,
            event.event_time,
            account.delinquency_bucket,
            next.delinquency_bucket,
            next.dpd,
        ));
    }
}

/// `BUSINESS_DAY_CLOSED`: the account's business date moves to `business_date` and arrears are
/// recomputed as of it; no money moves and no domain event is written but a
/// `DelinquencyChanged` on a bucket move. Stale (never parked, never rejected) when the date is
/// not later than the account's business date, when nothing is past due on it, or when the
/// account is not opened.
fn close_business_day(
    account: Option<&LoanAccount>,
    event: &ServicingEvent,
    business_date: NaiveDate,
) -> Outcome {
    let Some(account) = account else {
        return Outcome::Stale(Staleness::AccountNotOpened);
    };
    if business_date <= account.business_date {
        return Outcome::Stale(Staleness::BusinessDate {
            business_date,
            account_business_date: account.business_date,
        });
    }
    if !account.past_due_at(business_date) {
        return Outcome::Stale(Staleness::NothingPastDue { business_date });
    }
    let mut next = account.clone();
    let mut outbox = Vec::new();
    age(account, &mut next, event, &mut outbox);
    Outcome::Applied(Box::new(Applied {
        account: next,
        allocation: None,
        outbox,
    }))
}

fn mismatch(payment: &SourceRef, owner: &crate::AccountId, account: &crate::AccountId) -> Outcome {
    reject(
        "reversal_account_mismatch",
        format!("payment {payment} belongs to account {owner}, not {account}"),
    )
}

fn domain_event(
    event: &ServicingEvent,
    detail_type: &str,
    payload: serde_json::Value,
) -> DomainEvent {
    DomainEvent::new(
        detail_type,
        &event.account_id,
        &event.source,
        event.event_time,
        payload,
    )
}
