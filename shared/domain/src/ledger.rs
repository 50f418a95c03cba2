//! An in-memory ledger with the full consumer semantics (claims, duplicates, collisions, stale,
//! quarantine, deferral): the reference the DynamoDB-backed consumer is compared with, and what
//! `ledgerctl replay` runs. Not a persistence layer.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Value, json};

use crate::account::{LoanAccount, StoredAllocation};
use crate::apply::{AllocationWrite, Deferral, Outcome, apply};
use crate::event::ServicingEvent;
use crate::fingerprint::Fingerprint;
use crate::outbox::{DomainEvent, detail_types};
use crate::types::{AccountId, SourceRef};

/// What happened to one delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    Applied,
    Stale,
    Duplicate,
    Collision {
        stored: Fingerprint,
        received: Fingerprint,
    },
    Quarantined {
        reason: String,
    },
    Deferred(Deferral),
}

/// Counts per delivery: each delivery lands in exactly one disposition, so `received` is the sum
/// of the others (a deferred message that is delivered again counts once per delivery).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub received: u64,
    pub applied: u64,
    pub stale: u64,
    pub duplicates: u64,
    pub collisions: u64,
    pub quarantined: u64,
    pub deferred: u64,
}

/// A message that will not be applied, with what an operator needs to decide about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub reason: String,
    pub source: Option<SourceRef>,
    pub raw_body: String,
}

#[derive(Debug, Clone)]
struct Claim {
    fingerprint: Fingerprint,
}

#[derive(Debug, Default)]
pub struct Ledger {
    accounts: BTreeMap<AccountId, LoanAccount>,
    allocations: BTreeMap<SourceRef, StoredAllocation>,
    claims: HashMap<SourceRef, Claim>,
    outbox: Vec<DomainEvent>,
    quarantine: Vec<QuarantineRecord>,
    counts: Counts,
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
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

    /// Handles one delivery of a message body.
    pub fn ingest(&mut self, body: &[u8]) -> Disposition {
        self.deliver(body, false)
    }

    /// Replays a stream: every body in order, then the deferred ones again (as SQS would
    /// redeliver them) until `retry_budget` deliveries are spent; on its last delivery a message
    /// that is still deferred goes to quarantine instead.
    pub fn replay<'a>(&mut self, bodies: impl IntoIterator<Item = &'a [u8]>, retry_budget: u32) {
        let mut pending: Vec<&[u8]> = bodies.into_iter().collect();
        for delivery in 1..=retry_budget.max(1) {
            let last = delivery == retry_budget.max(1);
            pending.retain(|body| matches!(self.deliver(body, last), Disposition::Deferred(_)));
        }
    }

    /// Each delivery lands in exactly one count, so `received` is the sum of the others.
    fn deliver(&mut self, body: &[u8], last_delivery: bool) -> Disposition {
        self.counts.received += 1;
        let mut disposition = self.judge(body);
        if let (Disposition::Deferred(why), true) = (&disposition, last_delivery) {
            let reason = format!("retry budget spent: {} ({why})", why.code());
            let source = ServicingEvent::decode(body).ok().map(|e| e.source);
            disposition = self.quarantine_raw(body, source, reason);
        }
        match &disposition {
            Disposition::Applied => self.counts.applied += 1,
            Disposition::Stale => self.counts.stale += 1,
            Disposition::Duplicate => self.counts.duplicates += 1,
            Disposition::Collision { .. } => self.counts.collisions += 1,
            Disposition::Quarantined { .. } => self.counts.quarantined += 1,
            Disposition::Deferred(_) => self.counts.deferred += 1,
        }
        disposition
    }

    fn judge(&mut self, body: &[u8]) -> Disposition {
        let event = match ServicingEvent::decode(body) {
            Ok(event) => event,
            Err(e) => return self.quarantine_raw(body, None, e.to_string()),
        };
        let fingerprint = Fingerprint::of(&event);
        if let Some(claim) = self.claims.get(&event.source) {
            if claim.fingerprint == fingerprint {
                return Disposition::Duplicate;
            }
            let stored = claim.fingerprint.clone();
            self.quarantine_raw(
                body,
                Some(event.source.clone()),
                format!("collision: stored {stored}, received {fingerprint}"),
            );
            return Disposition::Collision {
                stored,
                received: fingerprint,
            };
        }

        let target = event
            .reversal_target()
            .and_then(|r| self.allocations.get(r));
        let outcome = apply(self.accounts.get(&event.account_id), &event, target);
        let disposition = match outcome {
            Outcome::Applied(applied) => {
                match applied.allocation {
                    Some(AllocationWrite::Record(stored)) => {
                        self.allocations.insert(stored.payment.clone(), stored);
                    }
                    Some(AllocationWrite::MarkReversed { payment, reversal }) => {
                        if let Some(stored) = self.allocations.get_mut(&payment) {
                            stored.reversed_by = Some(reversal);
                        }
                    }
                    None => {}
                }
                self.accounts
                    .insert(applied.account.account_id.clone(), applied.account);
                self.outbox.extend(applied.outbox);
                Disposition::Applied
            }
            Outcome::Stale { .. } => Disposition::Stale,
            Outcome::Rejected(rejection) => {
                self.quarantine_raw(body, Some(event.source.clone()), rejection.to_string())
            }
            Outcome::Deferred(why) => return Disposition::Deferred(why),
        };
        // Judged facts are claimed, whatever the verdict, so a redelivery is a duplicate.
        self.claims.insert(event.source, Claim { fingerprint });
        disposition
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

    /// A JSON report: per account the state, its allocations and delinquency history, plus the
    /// counts and the quarantine reasons.
    pub fn report(&self) -> Value {
        let accounts: Vec<Value> = self
            .accounts
            .values()
            .map(|account| self.account_report(account))
            .collect();
        json!({
            "accounts": accounts,
            "counts": self.counts,
            "quarantine": self.quarantine.iter().map(|q| json!({
                "source": q.source.as_ref().map(ToString::to_string),
                "reason": q.reason,
            })).collect::<Vec<_>>(),
        })
    }

    fn account_report(&self, account: &LoanAccount) -> Value {
        let changes: Vec<Value> = self
            .outbox
            .iter()
            .filter(|e| {
                e.account_id == account.account_id
                    && e.detail_type == detail_types::DELINQUENCY_CHANGED
            })
            .map(DomainEvent::detail)
            .collect();
        let allocations = self
            .allocations
            .values()
            .filter(|a| a.account_id == account.account_id);
        crate::report::account_report(account, allocations, &changes)
    }
}
