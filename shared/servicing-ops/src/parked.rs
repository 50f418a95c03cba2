//! Parked facts: what operators list (`ledgerctl parked list`) and what the daily reconciler
//! takes off for good — a fact still waiting after `PARK_RETENTION` (`awaited_fact_missing`,
//! naming what it waits for), or a reversal whose payment was meanwhile applied on another
//! account (`reversal_account_mismatch`). Both are quarantined with their raw body and their
//! `PARKED` claim is released, so a resend can still apply.

use std::time::Duration;

use servicing_domain::{AccountId, Deferral, ParkedFact};
use servicing_store::{ExpiredFact, LoanItem, ServicingStore};

/// Default `PARK_RETENTION`.
pub const DEFAULT_PARK_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Facts per transaction: the loan item, then a claim delete and a quarantine put each.
const FACTS_PER_TRANSACTION: usize = 49;

/// One parked fact as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedView {
    pub account: AccountId,
    pub fact: ParkedFact,
}

impl ParkedView {
    /// `<account> <source> parked at <epoch s>: waits for …` (or `ready`).
    pub fn line(&self) -> String {
        let waits = match &self.fact.awaits {
            Some(awaits) => format!("waits for {}", awaits.awaited(&self.account)),
            None => "ready (its awaited fact applied; judged with the account's next batch)".into(),
        };
        format!(
            "{} {} parked at {} (message {}): {waits}",
            self.account, self.fact.source, self.fact.parked_at, self.fact.message_id
        )
    }
}

/// Every parked fact of the table, by account, in order of receipt.
pub async fn list(store: &ServicingStore) -> anyhow::Result<Vec<ParkedView>> {
    let loans = store.parked_loans().await?;
    Ok(loans
        .into_iter()
        .flat_map(|loan| {
            let account = loan.account_id.clone();
            loan.parked
                .iter()
                .cloned()
                .map(move |fact| ParkedView {
                    account: account.clone(),
                    fact,
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// What one expiry run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Quarantined as `awaited_fact_missing`.
    pub missing: u64,
    /// Quarantined as `reversal_account_mismatch`.
    pub mismatched: u64,
    /// Still parked, within the retention.
    pub still_parked: u64,
}

/// Quarantines the parked facts that will never apply here (see the module comment).
pub async fn expire(
    store: &ServicingStore,
    now: i64,
    retention: Duration,
) -> anyhow::Result<Expiry> {
    let cutoff = now.saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX));
    let mut expiry = Expiry::default();
    for loan in store.parked_loans().await? {
        let mut loan = Some(loan);
        // One transaction per loan version; a loan item that moved meanwhile (the consumer
        // applied something) is read again, a few times at most.
        for _ in 0..8 {
            let Some(current) = loan.take() else { break };
            let mut expired = Vec::new();
            for fact in current.parked.iter() {
                if let Some((code, reason)) =
                    verdict(store, &current, fact, cutoff, retention).await?
                {
                    expired.push(ExpiredFact { fact, code, reason });
                }
            }
            if expired.is_empty() {
                expiry.still_parked += current.parked.len() as u64;
                break;
            }
            let chunk = &expired[..expired.len().min(FACTS_PER_TRANSACTION)];
            if store.expire_parked(&current, chunk).await? {
                for e in chunk {
                    match e.code {
                        MISSING => expiry.missing += 1,
                        _ => expiry.mismatched += 1,
                    }
                }
            }
            loan = store
                .load(&current.account_id, &[])
                .await?
                .loan
                .filter(|l| !l.parked.is_empty());
        }
        if let Some(left) = loan {
            return Err(anyhow::anyhow!(
                "the parked facts of {} kept moving; run again",
                left.account_id
            ));
        }
    }
    Ok(expiry)
}

const MISSING: &str = "awaited_fact_missing";

/// Why `fact` is taken off, if it is.
async fn verdict(
    store: &ServicingStore,
    loan: &LoanItem,
    fact: &ParkedFact,
    cutoff: i64,
    retention: Duration,
) -> anyhow::Result<Option<(&'static str, String)>> {
    let Some(awaits) = &fact.awaits else {
        return Ok(None); // ready: the consumer applies it next
    };
    if let Deferral::ReversalTargetNotApplied(payment) = awaits {
        let owner = store.applied_elsewhere(payment, &loan.account_id).await?;
        if let Some(owner) = owner {
            let reason = format!(
                "payment {payment} belongs to account {owner}, not {}",
                loan.account_id
            );
            return Ok(Some(("reversal_account_mismatch", reason)));
        }
    }
    Ok((fact.parked_at < cutoff).then(|| {
        let days = retention.as_secs() / 86_400;
        let reason = format!(
            "still waiting after {days} days for {}",
            awaits.awaited(&loan.account_id)
        );
        (MISSING, reason)
    }))
}
