//! An in-memory ledger with the full consumer semantics (claims, duplicates, collisions, stale,
//! quarantine, parking): the reference the DynamoDB-backed consumer is compared with, and what
//! `ledgerctl replay` runs. Not a persistence layer.
//!
//! What the scheduled jobs do to it (the daily close, claim retention, the reconciler) is in
//! `scheduled`, its JSON report in `report`.

mod report;
mod scheduled;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::account::{LoanAccount, StoredAllocation};
use crate::apply::{AllocationWrite, Deferral, Outcome, ReversalTarget, apply};
use crate::event::ServicingEvent;
use crate::fingerprint::Fingerprint;
use crate::outbox::DomainEvent;
use crate::parking::{Arrival, ParkedFact, ParkedFacts};
use crate::types::{AccountId, SourceRef};

/// What happened to one delivered message (or to a parked fact judged again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    Applied,
    Stale,
    Duplicate,
    Collision {
        /// The first fact's fingerprint (its tag, when only the state kept it: a reversal
        /// resent after its claim expired).
        stored: Fingerprint,
        received: Fingerprint,
    },
    Quarantined {
        reason: String,
    },
    /// Kept with its raw body until what it waits for is applied; acknowledged.
    Parked(Deferral),
}

/// Counts of judgments: every delivery and every parked fact judged again (`released`) lands in
/// exactly one of the other counts, so `received + released` is their sum, and
/// `parked - released` is what is still parked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub received: u64,
    pub released: u64,
    pub applied: u64,
    pub stale: u64,
    pub duplicates: u64,
    pub collisions: u64,
    pub quarantined: u64,
    pub parked: u64,
}

impl Counts {
    /// `received + released = applied + stale + duplicates + collisions + quarantined + parked`.
    pub fn balances(&self) -> bool {
        self.received + self.released
            == self.applied
                + self.stale
                + self.duplicates
                + self.collisions
                + self.quarantined
                + self.parked
    }

    fn count(&mut self, disposition: &Disposition) {
        match disposition {
            Disposition::Applied => self.applied += 1,
            Disposition::Stale => self.stale += 1,
            Disposition::Duplicate => self.duplicates += 1,
            Disposition::Collision { .. } => self.collisions += 1,
            Disposition::Quarantined { .. } => self.quarantined += 1,
            Disposition::Parked(_) => self.parked += 1,
        }
    }
}

/// A message that will not be applied, with what an operator needs to decide about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub reason: String,
    pub source: Option<SourceRef>,
    pub raw_body: String,
}

/// A fact's claim: its fingerprint and, once applied, its `eventType` (what a reversal naming
/// it learns, as the stored claim's `verdict` and `eventType` tell the consumer).
#[derive(Debug, Clone)]
struct Claim {
    fingerprint: Fingerprint,
    applied: Option<&'static str>,
}

impl Claim {
    /// The type of an applied fact that is not a payment.
    fn not_a_payment(&self) -> Option<&'static str> {
        self.applied.filter(|t| *t != PAYMENT_SETTLED)
    }
}

const PAYMENT_SETTLED: &str = "PAYMENT_SETTLED";

#[derive(Debug, Default)]
pub struct Ledger {
    accounts: BTreeMap<AccountId, LoanAccount>,
    allocations: BTreeMap<SourceRef, StoredAllocation>,
    /// Judged or parked facts, by identity, with their payload fingerprint.
    claims: HashMap<SourceRef, Claim>,
    parked: BTreeMap<AccountId, ParkedFacts>,
    outbox: Vec<DomainEvent>,
    quarantine: Vec<QuarantineRecord>,
    counts: Counts,
    /// The consumer's clock and `MAX_EVENT_TIME_SKEW`, when `eventTime` is checked against them.
    clock: Option<(chrono::DateTime<chrono::Utc>, std::time::Duration)>,
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// A ledger that quarantines (unclaimed) events dated more than `max_skew` after `now`, as
    /// the consumer does with its own clock.
    pub fn with_clock(now: chrono::DateTime<chrono::Utc>, max_skew: std::time::Duration) -> Self {
        Self {
            clock: Some((now, max_skew)),
            ..Self::default()
        }
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    pub fn account(&self, id: &AccountId) -> Option<&LoanAccount> {
        self.accounts.get(id)
    }

    pub fn accounts(&self) -> impl Iterator<Item = &LoanAccount> {
        self.accounts.values()
    }

    pub fn allocations(&self) -> impl Iterator<Item = &StoredAllocation> {
        self.allocations.values()
    }

    pub fn outbox(&self) -> &[DomainEvent] {
        &self.outbox
    }

    pub fn quarantine(&self) -> &[QuarantineRecord] {
        &self.quarantine
    }

    /// Every fact still parked, by account, in order of receipt.
    pub fn parked(&self) -> impl Iterator<Item = (&AccountId, &ParkedFact)> {
        self.parked
            .iter()
            .flat_map(|(account, facts)| facts.iter().map(move |f| (account, f)))
    }

    /// Handles one delivery of a message body.
    pub fn ingest(&mut self, body: &[u8]) -> Disposition {
        let message_id = format!("m{}", self.counts.received + 1);
        self.ingest_at(body, &message_id, 0)
    }

    /// Handles one delivery of a message body, received at `now` (epoch seconds, the time a
    /// parked fact is parked at).
    pub fn ingest_at(&mut self, body: &[u8], message_id: &str, now: i64) -> Disposition {
        self.counts.received += 1;
        let (disposition, account) = self.judge_delivery(body, message_id, now);
        self.counts.count(&disposition);
        if let (Disposition::Applied, Some(account)) = (&disposition, account) {
            self.release_ready(&account);
        }
        disposition
    }

    /// Replays a stream: every body once, in order.
    pub fn replay<'a>(&mut self, bodies: impl IntoIterator<Item = &'a [u8]>) {
        for body in bodies {
            self.ingest(body);
        }
    }

    /// A delivery: decoded, deduplicated by its claim, then judged. Returns the account it
    /// touched when it applied (its ready parked facts go next).
    fn judge_delivery(
        &mut self,
        body: &[u8],
        message_id: &str,
        now: i64,
    ) -> (Disposition, Option<AccountId>) {
        let event = match ServicingEvent::decode(body) {
            Ok(event) => event,
            Err(e) => return (self.quarantine_raw(body, None, e.to_string()), None),
        };
        if let Some(reason) = self
            .clock
            .and_then(|(now, skew)| event.too_far_ahead(now, skew))
        {
            let reason = format!("{}: {reason}", crate::EVENT_TIME_IN_FUTURE);
            return (self.quarantine_raw(body, Some(event.source), reason), None);
        }
        let fingerprint = Fingerprint::of(&event);
        if let Some(claim) = self.claims.get(&event.source) {
            if claim.fingerprint == fingerprint {
                return (Disposition::Duplicate, None);
            }
            let stored = claim.fingerprint.clone();
            self.quarantine_raw(
                body,
                Some(event.source.clone()),
                format!("collision: stored {stored}, received {fingerprint}"),
            );
            let collision = Disposition::Collision {
                stored,
                received: fingerprint,
            };
            return (collision, None);
        }
        // Judged and parked facts are claimed, whatever the verdict, so a redelivery is a
        // duplicate (or a collision).
        let claim = Claim {
            fingerprint: fingerprint.clone(),
            applied: None,
        };
        self.claims.insert(event.source.clone(), claim);
        let disposition = match self.judge(&event, body) {
            Err(awaits) => {
                let text = String::from_utf8_lossy(body);
                let parked = self.parked.entry(event.account_id.clone()).or_default();
                match parked.admits(&text) {
                    Ok(()) => {
                        let arrival = Arrival {
                            source: &event.source,
                            fingerprint: &fingerprint,
                            message_id,
                            body: &text,
                            now,
                        };
                        parked.park(arrival, awaits.clone());
                        Disposition::Parked(awaits)
                    }
                    Err(rejection) => {
                        let reason = rejection.to_string();
                        self.quarantine_raw(body, Some(event.source.clone()), reason)
                    }
                }
            }
            Ok(disposition) => disposition,
        };
        (disposition, Some(event.account_id))
    }

    /// The account's parked facts whose awaited fact has been applied, judged again in order of
    /// receipt, each right after what it waited for (and what they release in turn).
    fn release_ready(&mut self, account: &AccountId) {
        while let Some(fact) = self
            .parked
            .get_mut(account)
            .and_then(ParkedFacts::take_next_ready)
        {
            self.counts.released += 1;
            let disposition = match ServicingEvent::decode(fact.body.as_bytes()) {
                Err(e) => self.quarantine_raw(
                    fact.body.as_bytes(),
                    Some(fact.source.clone()),
                    e.to_string(),
                ),
                Ok(event) => match self.judge(&event, fact.body.as_bytes()) {
                    Ok(disposition) => disposition,
                    Err(awaits) => {
                        if let Some(facts) = self.parked.get_mut(account) {
                            facts.park_again(fact, awaits.clone());
                        }
                        Disposition::Parked(awaits)
                    }
                },
            };
            self.counts.count(&disposition);
        }
        self.parked.retain(|_, facts| !facts.is_empty());
    }

    /// Applies a (claimed) event; `Err` with what it waits for when it must be parked.
    fn judge(&mut self, event: &ServicingEvent, body: &[u8]) -> Result<Disposition, Deferral> {
        // What the reversal's target is: a payment's stored allocation, or else what the
        // target's claim says it was applied as.
        let target = event.reversal_target().and_then(|r| {
            self.allocations
                .get(r)
                .map(ReversalTarget::Applied)
                .or_else(|| {
                    let claim = self.claims.get(r)?;
                    claim.not_a_payment().map(ReversalTarget::NotAPayment)
                })
        });
        let outcome = apply(self.accounts.get(&event.account_id), event, target);
        Ok(match outcome {
            Outcome::Applied(applied) => {
                match applied.allocation {
                    Some(AllocationWrite::Record(stored)) => {
                        self.allocations.insert(stored.payment.clone(), stored);
                    }
                    Some(AllocationWrite::MarkReversed {
                        payment,
                        reversal,
                        fact,
                    }) => {
                        if let Some(stored) = self.allocations.get_mut(&payment) {
                            stored.reversed_by = Some(reversal);
                            stored.reversal_fact = Some(fact);
                        }
                    }
                    None => {}
                }
                self.accounts
                    .insert(applied.account.account_id.clone(), applied.account);
                self.outbox.extend(applied.outbox);
                if let Some(claim) = self.claims.get_mut(&event.source) {
                    claim.applied = Some(event.kind.wire_name());
                }
                if let Some(parked) = self.parked.get_mut(&event.account_id) {
                    parked.on_applied(event);
                }
                Disposition::Applied
            }
            Outcome::Stale { .. } => Disposition::Stale,
            Outcome::AlreadyApplied => Disposition::Duplicate,
            Outcome::Rejected(rejection) if rejection.code == crate::COLLISION => {
                let received = Fingerprint::of(event);
                self.quarantine_raw(body, Some(event.source.clone()), rejection.to_string());
                let stored = event
                    .reversal_target()
                    .and_then(|payment| self.allocations.get(payment)?.reversal_fact.clone())
                    .map_or_else(String::new, |tag| tag.to_string());
                Disposition::Collision {
                    stored: Fingerprint::from_stored(stored),
                    received,
                }
            }
            Outcome::Rejected(rejection) => {
                self.quarantine_raw(body, Some(event.source.clone()), rejection.to_string())
            }
            Outcome::Deferred(why) => return Err(why),
        })
    }

    fn quarantine_raw(
        &mut self,
        body: &[u8],
        source: Option<SourceRef>,
        reason: String,
    ) -> Disposition {
        self.quarantine.push(QuarantineRecord {
            reason: reason.clone(),
            source,
            raw_body: String::from_utf8_lossy(body).into_owned(),
        });
        Disposition::Quarantined { reason }
    }
}
