//! What the scheduled jobs do to the in-memory ledger: the daily job's closes, the claim
//! retention, the reconciler's expiry of parked facts. Separate from the handling of a delivery,
//! which they only call into.

use super::{Claim, Disposition, Ledger};
use crate::apply::Deferral;
use crate::event::ServicingEvent;
use crate::types::{AccountId, SourceRef};

impl Ledger {
    /// What the daily job does for `business_date`: one `BUSINESS_DAY_CLOSED` (the contract's
    /// identity, so a second run is a duplicate) delivered for every account with an unpaid
    /// installment past due on that date, and only those. Returns each account's disposition.
    pub fn close_business_day(
        &mut self,
        business_date: chrono::NaiveDate,
    ) -> Vec<(AccountId, Disposition)> {
        let due: Vec<AccountId> = self
            .accounts
            .values()
            .filter(|a| a.past_due_at(business_date))
            .map(|a| a.account_id.clone())
            .collect();
        due.into_iter()
            .map(|id| {
                let close = ServicingEvent::business_day_closed(&id, business_date);
                let disposition = self.ingest(close.canonical_json().to_string().as_bytes());
                (id, disposition)
            })
            .collect()
    }

    /// What the claim retention does to one fact's claim: it no longer deduplicates (nor
    /// tells what the fact was). `false` when there was none.
    pub fn expire_claim(&mut self, source: &SourceRef) -> bool {
        self.claims.remove(source).is_some()
    }

    /// What the scheduled reconciler does: every fact parked before `parked_before` is
    /// quarantined as `awaited_fact_missing`, a reversal waiting for a payment that was
    /// applied on another account as `reversal_account_mismatch`, and one waiting for a fact
    /// applied (on another account) that is not a payment as `reversal_target_not_a_payment`,
    /// whatever their age. Their claims are released, so a resend can still apply. Returns how
    /// many were quarantined.
    pub fn expire_parked(&mut self, parked_before: i64) -> usize {
        let mut expired = Vec::new();
        for (account, facts) in &self.parked {
            for fact in facts.iter() {
                let not_a_payment = match &fact.awaits {
                    Some(Deferral::ReversalTargetNotApplied(target)) => self
                        .claims
                        .get(target)
                        .and_then(Claim::not_a_payment)
                        .map(|event_type| {
                            format!(
                                "reversal_target_not_a_payment: reversal target {target} is a {event_type}, not a PAYMENT_SETTLED"
                            )
                        }),
                    _ => None,
                };
                if let Some(reason) = not_a_payment {
                    expired.push((account.clone(), fact.source.clone(), reason));
                    continue;
                }
                let elsewhere = match &fact.awaits {
                    Some(Deferral::ReversalTargetNotApplied(p)) => self
                        .allocations
                        .get(p)
                        .filter(|a| &a.account_id != account)
                        .map(|a| a.account_id.clone()),
                    _ => None,
                };
                let reason = match (elsewhere, &fact.awaits) {
                    (Some(owner), Some(awaits)) => Some(format!(
                        "reversal_account_mismatch: {} belongs to account {owner}, not {account}",
                        awaits_payment(awaits)
                    )),
                    (None, Some(awaits)) if fact.parked_at < parked_before => Some(format!(
                        "awaited_fact_missing: still waiting for {}",
                        awaits.awaited(account)
                    )),
                    _ => None,
                };
                if let Some(reason) = reason {
                    expired.push((account.clone(), fact.source.clone(), reason));
                }
            }
        }
        for (account, source, reason) in &expired {
            let Some(fact) = self.parked.get_mut(account).and_then(|f| f.remove(source)) else {
                continue;
            };
            self.claims.remove(source);
            self.quarantine_raw(fact.body.as_bytes(), Some(fact.source), reason.clone());
        }
        self.parked.retain(|_, facts| !facts.is_empty());
        expired.len()
    }
}

fn awaits_payment(awaits: &Deferral) -> String {
    match awaits {
        Deferral::ReversalTargetNotApplied(payment) => format!("payment {payment}"),
        Deferral::AccountNotOpened => "the opening".to_owned(),
    }
}
