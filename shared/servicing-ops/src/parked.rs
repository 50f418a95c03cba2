//! Parked facts: what operators list (`ledgerctl parked list`) and what the daily reconciler
//! takes off for good — a fact still waiting after `PARK_RETENTION` (`awaited_fact_missing`,
//! naming what it waits for), or a reversal whose payment was meanwhile applied on another
//! account (`reversal_account_mismatch`). Both are quarantined with their raw body and their
//! `PARKED` claim is released, so a resend can still apply.

use std::time::Duration;

use servicing_domain::{AccountId, Deferral, ParkedFact, SourceRef};
use servicing_store::{ExpiredFact, ExpiryOutcome, LoanItem, ServicingStore};

/// Default `PARK_RETENTION`.
pub const DEFAULT_PARK_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Facts per transaction: the loan item, then a claim delete and a quarantine put each, and a
/// body delete for each whose body is kept apart (within DynamoDB's 100 items).
const FACTS_PER_TRANSACTION: usize = 33;

/// One parked fact as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedView {
    pub account: AccountId,
    pub fact: ParkedFact,
}

impl ParkedView {
    /// `<account> <source> parked at <ISO 8601>: waits for …` (or `ready`).
    pub fn line(&self) -> String {
        let waits = match &self.fact.awaits {
            Some(awaits) => format!("waits for {}", awaits.awaited(&self.account)),
            None => "ready (its awaited fact applied; judged with the account's next batch)".into(),
        };
        format!(
            "{} {} parked at {} (message {}): {waits}",
            self.account,
            self.fact.source,
            crate::iso(self.fact.parked_at),
            self.fact.message_id
        )
    }
}

/// Every parked fact of the table, by account, in order of receipt (an undecodable loan item
/// fails the listing: an operator must see it).
pub async fn list(store: &ServicingStore) -> anyhow::Result<Vec<ParkedView>> {
    let mut views = Vec::new();
    for loan in store.parked_loans().await? {
        let loan =
            loan.map_err(|u| anyhow::anyhow!("loan item {} is undecodable: {}", u.pk, u.error))?;
        let account = loan.account_id.clone();
        views.extend(loan.parked.iter().cloned().map(|fact| ParkedView {
            account: account.clone(),
            fact,
        }));
    }
    Ok(views)
}

/// What one expiry run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Quarantined as `awaited_fact_missing`.
    pub missing: u64,
    /// Quarantined as `reversal_account_mismatch`.
    pub mismatched: u64,
    /// Still parked, within the retention.
    pub still_parked: u64,
    /// Ready (their awaited fact applied) for longer than [`READY_GRACE_SECS`] without being
    /// released: a release that failed with nothing left to retry it. The run sends each back
    /// to its account (see `reconciler`).
    pub ready: Vec<ParkedView>,
    /// Accounts the run could not handle, one line each (the run goes on without them).
    pub problems: Vec<String>,
}

/// How long a ready fact may wait for its release before the reconciler counts it: the
/// consumer releases it in the invocation that applied what it waited for, or retries.
pub const READY_GRACE_SECS: i64 = 300;

/// Consecutive rounds one account may lose to concurrent writers before it is reported.
const MAX_ROUNDS_MOVED: u32 = 8;

/// Quarantines the parked facts that will never apply here (see the module comment), account
/// by account: one account's problem (an undecodable item, a claim that is not `PARKED`, a
/// failed request, an item that keeps moving) is reported in `problems` and the run goes on;
/// any number of facts per account is handled, 49 per transaction.
pub async fn expire(
    store: &ServicingStore,
    now: i64,
    retention: Duration,
) -> anyhow::Result<Expiry> {
    let cutoff = now.saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX));
    let mut expiry = Expiry::default();
    for account in store.parked_accounts().await? {
        // Each account read on its own: a failed read is that account's problem, not the run's.
        let loan = match account {
            Ok(account) => match store.parked_loan(&account).await {
                Ok(Some(loan)) => loan,
                Ok(None) => continue,
                Err(e) => {
                    expiry
                        .problems
                        .push(format!("{account}: cannot read its loan item: {e}"));
                    continue;
                }
            },
            Err(u) => Err(u),
        };
        let loan = match loan {
            Ok(loan) => loan,
            Err(u) => {
                expiry
                    .problems
                    .push(format!("loan item {} is undecodable: {}", u.pk, u.error));
                continue;
            }
        };
        let account = loan.account_id.clone();
        let run = Expiring {
            store,
            now,
            cutoff,
            retention,
        };
        if let Err(e) = run.account(loan, &mut expiry).await {
            expiry.problems.push(format!("{account}: {e:#}"));
        }
    }
    for problem in &expiry.problems {
        tracing::error!(
            alert = "reconciliation",
            problem,
            "parked facts of an account not handled"
        );
    }
    Ok(expiry)
}

struct Expiring<'a> {
    store: &'a ServicingStore,
    now: i64,
    cutoff: i64,
    retention: Duration,
}

impl Expiring<'_> {
    /// One account's parked facts: expired in rounds (a transaction each) until none is left
    /// to expire; the rest counted as still parked or ready.
    async fn account(&self, loan: LoanItem, expiry: &mut Expiry) -> anyhow::Result<()> {
        let mut current = loan;
        let mut moved = 0;
        // Facts whose claims say otherwise: left for an operator, not expired again.
        let mut inconsistent: Vec<SourceRef> = Vec::new();
        loop {
            let mut expired = Vec::new();
            for fact in current.parked.iter() {
                if inconsistent.contains(&fact.source) {
                    continue;
                }
                if let Some((code, reason)) = self.verdict(&current, fact).await? {
                    expired.push(ExpiredFact { fact, code, reason });
                }
            }
            if expired.is_empty() {
                expiry.still_parked += current.parked.len() as u64;
                expiry.ready.extend(
                    current
                        .parked
                        .iter()
                        .filter(|f| f.ready_longer_than(READY_GRACE_SECS, self.now))
                        .map(|fact| ParkedView {
                            account: current.account_id.clone(),
                            fact: fact.clone(),
                        }),
                );
                return Ok(());
            }
            let chunk = &expired[..expired.len().min(FACTS_PER_TRANSACTION)];
            match self.store.expire_parked(&current, chunk).await? {
                ExpiryOutcome::Expired => {
                    moved = 0;
                    for e in chunk {
                        match e.code {
                            MISSING => expiry.missing += 1,
                            _ => expiry.mismatched += 1,
                        }
                    }
                }
                ExpiryOutcome::ClaimsNotParked(sources) => {
                    for source in &sources {
                        expiry.problems.push(format!(
                            "{}: {source} is parked but its claim is not PARKED; left parked for an operator",
                            current.account_id
                        ));
                    }
                    inconsistent.extend(sources);
                }
                ExpiryOutcome::Moved => {
                    moved += 1;
                    if moved >= MAX_ROUNDS_MOVED {
                        anyhow::bail!("its loan item kept moving ({moved} rounds); run again");
                    }
                }
            }
            let Some(next) = self
                .store
                .load(&current.account_id, &[])
                .await?
                .loan
                .filter(|l| !l.parked.is_empty())
            else {
                return Ok(());
            };
            current = next;
        }
    }

    /// Why `fact` is taken off, if it is.
    async fn verdict(
        &self,
        loan: &LoanItem,
        fact: &ParkedFact,
    ) -> anyhow::Result<Option<(&'static str, String)>> {
        let Some(awaits) = &fact.awaits else {
            return Ok(None); // ready: the consumer applies it next
        };
        if let Deferral::ReversalTargetNotApplied(payment) = awaits {
            let owner = self
                .store
                .applied_elsewhere(payment, &loan.account_id)
                .await?;
            if let Some(owner) = owner {
                let reason = format!(
                    "payment {payment} belongs to account {owner}, not {}",
                    loan.account_id
                );
                return Ok(Some(("reversal_account_mismatch", reason)));
            }
        }
        Ok((fact.parked_at < self.cutoff).then(|| {
            let days = self.retention.as_secs() / 86_400;
            let reason = format!(
                "still waiting after {days} days for {}",
                awaits.awaited(&loan.account_id)
            );
            (MISSING, reason)
        }))
    }
}

const MISSING: &str = "awaited_fact_missing";
