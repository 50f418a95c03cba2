//! Facts that wait for another fact (their account's opening, the payment they reverse) are
//! parked: kept with their raw body, per account, in the order they were received, and judged
//! again right after what they wait for is applied. The rules live here so the in-memory ledger
//! and the DynamoDB consumer follow the same ones.
//!
//! An entry is either waiting (`awaits` names the fact) or ready (`awaits` is `None`: the fact
//! it waited for has been applied, the entry is next in line). Whoever judges an account's facts
//! takes the ready entry received first before anything else — so a fact parked on another is
//! applied right after it — and marks entries ready when their awaited fact applies.

use serde::{Deserialize, Serialize};

use crate::apply::{Deferral, Rejection};
use crate::event::{EventKind, ServicingEvent};
use crate::fingerprint::Fingerprint;
use crate::types::SourceRef;

/// Parked bodies kept on the loan item itself, in bytes at most. The loan item is rewritten by
/// every fact of the account (and billed by its whole size inside a transaction): beyond this,
/// a newly parked fact's body is kept in an item of its own, so one account's parked facts
/// never push its loan item towards DynamoDB's 400 KB limit and take its other facts down.
pub const PARKED_INLINE_BODY_BYTES: usize = 2_048;
/// Parked facts per account at most: what stays on the loan item of each (identity,
/// fingerprint, what it awaits, its message id; at most ~0.6 KB) is bounded with them.
pub const MAX_PARKED_FACTS: usize = 200;
/// The largest body that can be parked: it must fit an item of its own (400 KB in all).
pub const MAX_PARKED_BODY_BYTES: usize = 350_000;
/// All of an account's parked bodies at most: what its read returns (one `Query` page, 1 MB).
pub const MAX_PARKED_BYTES: usize = 1_000_000;
/// Quarantine codes of a fact that cannot be parked anywhere (itself, never a neighbour).
pub const PARKING_FULL: &str = "parking_full";
pub const PARKED_BODY_TOO_LARGE: &str = "parked_body_too_large";

/// One parked fact, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkedFact {
    /// Order of receipt among the account's parked facts (kept when parked again).
    pub seq: u64,
    pub source: SourceRef,
    pub fingerprint: Fingerprint,
    /// What it waits for; `None` once that was applied (ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaits: Option<Deferral>,
    /// When it was first parked (epoch seconds): `PARK_RETENTION` counts from here.
    pub parked_at: i64,
    /// The message that brought it, and its raw body (what the quarantine keeps if it expires).
    pub message_id: String,
    pub body: String,
    /// The body is kept in an item of its own, not on the loan item (the store reads it back
    /// with the loan item: `body` is always the fact's body in memory).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body_apart: bool,
    /// When its awaited fact was applied (epoch seconds; `None` while it waits, or when the
    /// writer did not say): how long a ready fact has been left unreleased counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<i64>,
}

impl ParkedFact {
    /// Whether it has been ready — its awaited fact applied — for longer than `grace` at `now`
    /// without being released. A writer that did not record when it became ready is judged by
    /// when it was parked (never later than ready).
    pub fn ready_longer_than(&self, grace: i64, now: i64) -> bool {
        self.awaits.is_none() && now - self.ready_at.unwrap_or(self.parked_at) > grace
    }
}

/// An account's parked facts, in order of receipt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ParkedFacts(Vec<ParkedFact>);

/// What a fact to park brings with it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    pub source: &'a SourceRef,
    pub fingerprint: &'a Fingerprint,
    pub message_id: &'a str,
    pub body: &'a str,
    pub now: i64,
}

impl ParkedFacts {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ParkedFact> {
        self.0.iter()
    }

    /// The parked fact with this identity, if any.
    pub fn find(&self, source: &SourceRef) -> Option<&ParkedFact> {
        self.0.iter().find(|p| &p.source == source)
    }

    /// Whether a newly received fact with this body can be parked here: the one that cannot is
    /// quarantined itself (its body too large for any item, or the account's parked facts at
    /// their bound), never a neighbour.
    pub fn admits(&self, body: &str) -> Result<(), Rejection> {
        if body.len() > MAX_PARKED_BODY_BYTES {
            return Err(Rejection {
                code: PARKED_BODY_TOO_LARGE,
                reason: format!(
                    "a body of {} bytes cannot be parked (at most {MAX_PARKED_BODY_BYTES})",
                    body.len()
                ),
            });
        }
        let held: usize = self.0.iter().map(|p| p.body.len()).sum();
        if held + body.len() > MAX_PARKED_BYTES {
            return Err(Rejection {
                code: PARKING_FULL,
                reason: format!(
                    "the account's parked bodies would pass {MAX_PARKED_BYTES} bytes, their bound"
                ),
            });
        }
        if self.0.len() >= MAX_PARKED_FACTS {
            return Err(Rejection {
                code: PARKING_FULL,
                reason: format!(
                    "the account already holds {MAX_PARKED_FACTS} parked facts, its bound"
                ),
            });
        }
        Ok(())
    }

    /// Bytes of parked bodies kept on the loan item itself.
    pub fn inline_body_bytes(&self) -> usize {
        self.0
            .iter()
            .filter(|p| !p.body_apart)
            .map(|p| p.body.len())
            .sum()
    }

    /// Whether a newly parked fact with this body would be kept apart (over the inline budget).
    pub fn keeps_apart(&self, body: &str) -> bool {
        self.inline_body_bytes() + body.len() > PARKED_INLINE_BODY_BYTES
    }

    /// Parks a newly received fact behind the others (its body apart beyond the budget).
    pub fn park(&mut self, arrival: Arrival<'_>, awaits: Deferral) {
        let seq = self.0.iter().map(|p| p.seq).max().map_or(1, |s| s + 1);
        let body_apart = self.keeps_apart(arrival.body);
        self.0.push(ParkedFact {
            seq,
            source: arrival.source.clone(),
            fingerprint: arrival.fingerprint.clone(),
            awaits: Some(awaits),
            parked_at: arrival.now,
            message_id: arrival.message_id.to_owned(),
            body: arrival.body.to_owned(),
            body_apart,
            ready_at: None,
        });
    }

    /// The facts whose bodies are kept apart.
    pub fn apart(&self) -> impl Iterator<Item = &ParkedFact> {
        self.0.iter().filter(|p| p.body_apart)
    }

    /// Mutable access to the facts (the store fills in the bodies kept apart).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut ParkedFact> {
        self.0.iter_mut()
    }

    /// Puts a fact taken out with [`ParkedFacts::take_next_ready`] back, waiting for something
    /// else now; it keeps its place in the order of receipt.
    pub fn park_again(&mut self, mut fact: ParkedFact, awaits: Deferral) {
        fact.awaits = Some(awaits);
        fact.ready_at = None;
        let at = self.0.partition_point(|p| p.seq < fact.seq);
        self.0.insert(at, fact);
    }

    /// Takes out the ready fact received first: it is judged next, before any other fact.
    pub fn take_next_ready(&mut self) -> Option<ParkedFact> {
        let at = self.0.iter().position(|p| p.awaits.is_none())?;
        Some(self.0.remove(at))
    }

    pub fn has_ready(&self) -> bool {
        self.0.iter().any(|p| p.awaits.is_none())
    }

    /// [`Self::on_applied`], recording `now` as the moment they became ready.
    pub fn on_applied_at(&mut self, event: &ServicingEvent, now: i64) {
        self.on_applied(event);
        for fact in &mut self.0 {
            if fact.awaits.is_none() && fact.ready_at.is_none() {
                fact.ready_at = Some(now);
            }
        }
    }

    /// `event` was just applied to this account: the facts waiting for it become ready. A
    /// reversal waits for the fact its `reversalOf` names whatever that turns out to be: when
    /// it is not a payment (a fee, another reversal), the reversal is judged again and refused
    /// then, never left waiting.
    pub fn on_applied(&mut self, event: &ServicingEvent) {
        let satisfies = |awaits: &Deferral| match (awaits, &event.kind) {
            (Deferral::AccountNotOpened, EventKind::LoanOpened { .. }) => true,
            (Deferral::ReversalTargetNotApplied(target), _) => target == &event.source,
            _ => false,
        };
        for fact in &mut self.0 {
            if fact.awaits.as_ref().is_some_and(satisfies) {
                fact.awaits = None;
            }
        }
    }

    /// Removes the fact with this identity (an operator's or the reconciler's decision).
    pub fn remove(&mut self, source: &SourceRef) -> Option<ParkedFact> {
        let at = self.0.iter().position(|p| &p.source == source)?;
        Some(self.0.remove(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(body: &str) -> ServicingEvent {
        ServicingEvent::decode(body.as_bytes()).expect("valid")
    }

    fn source(id: &str) -> SourceRef {
        SourceRef {
            system: "psp".into(),
            event_id: id.into(),
        }
    }

    fn park(facts: &mut ParkedFacts, id: &str, awaits: Deferral) {
        let fingerprint = Fingerprint::from_stored(format!("fp-{id}"));
        let source = source(id);
        let arrival = Arrival {
            source: &source,
            fingerprint: &fingerprint,
            message_id: id,
            body: "{}",
            now: 1,
        };
        facts.park(arrival, awaits);
    }

    const OPEN: &str = r#"{"sourceSystem":"core","sourceEventId":"o","eventType":"LOAN_OPENED","accountId":"a","eventTime":"2026-09-01T00:00:00Z","principalMinor":1,"currency":"EUR"}"#;
    const PAY: &str = r#"{"sourceSystem":"psp","sourceEventId":"p","eventType":"PAYMENT_SETTLED","accountId":"a","eventTime":"2026-09-01T00:00:00Z","amountMinor":1,"currency":"EUR"}"#;

    #[test]
    fn when_the_awaited_fact_applies_should_release_its_waiters_in_order_of_receipt() {
        let mut facts = ParkedFacts::default();
        park(
            &mut facts,
            "r",
            Deferral::ReversalTargetNotApplied(source("p")),
        );
        park(&mut facts, "f1", Deferral::AccountNotOpened);
        park(&mut facts, "f2", Deferral::AccountNotOpened);
        facts.on_applied(&event(OPEN));
        let first = facts.take_next_ready().expect("ready");
        assert_eq!(first.source, source("f1"));
        // Judged again, it waits for something else: it keeps its place.
        facts.park_again(first, Deferral::ReversalTargetNotApplied(source("p")));
        assert_eq!(
            facts.take_next_ready().map(|f| f.source),
            Some(source("f2"))
        );
        assert!(facts.take_next_ready().is_none());
        facts.on_applied(&event(PAY));
        let order: Vec<_> = std::iter::from_fn(|| facts.take_next_ready())
            .map(|f| f.source.event_id)
            .collect();
        assert_eq!(order, ["r", "f1"]);
        assert!(facts.is_empty());
    }

    #[test]
    fn when_the_awaited_fact_applies_as_another_type_should_release_the_reversal_too() {
        // A reversal naming a fee (or a reversal) waits for it like for a payment; once it
        // applies, the reversal is judged again, and rejected there (not a payment).
        const FEE: &str = r#"{"sourceSystem":"psp","sourceEventId":"f","eventType":"FEE_ASSESSED","accountId":"a","eventTime":"2026-09-01T00:00:00Z","amountMinor":1,"currency":"EUR","feeType":"LATE_FEE"}"#;
        let mut facts = ParkedFacts::default();
        park(
            &mut facts,
            "r",
            Deferral::ReversalTargetNotApplied(source("f")),
        );
        facts.on_applied(&event(FEE));
        assert_eq!(facts.take_next_ready().map(|f| f.source), Some(source("r")));
    }

    #[test]
    fn when_another_payment_applies_should_keep_the_reversal_waiting() {
        let mut facts = ParkedFacts::default();
        park(
            &mut facts,
            "r",
            Deferral::ReversalTargetNotApplied(source("other")),
        );
        facts.on_applied(&event(PAY));
        assert!(!facts.has_ready());
    }

    #[test]
    fn when_parked_bodies_pass_the_budget_should_keep_them_apart_and_bound_the_account() {
        let mut facts = ParkedFacts::default();
        let body = "b".repeat(1_000);
        for n in 0..3 {
            let source = source(&format!("r{n}"));
            let fingerprint = Fingerprint::from_stored(format!("fp-{n}"));
            facts.park(
                Arrival {
                    source: &source,
                    fingerprint: &fingerprint,
                    message_id: "m",
                    body: &body,
                    now: 1,
                },
                Deferral::AccountNotOpened,
            );
        }
        // Two bodies fit the inline budget; the third is kept apart.
        let apart: Vec<bool> = facts.iter().map(|f| f.body_apart).collect();
        assert_eq!(apart, [false, false, true]);
        assert_eq!(facts.inline_body_bytes(), 2_000);
        assert!(facts.admits(&body).is_ok());
        let huge = "h".repeat(MAX_PARKED_BODY_BYTES + 1);
        assert_eq!(
            facts.admits(&huge).map_err(|r| r.code),
            Err(PARKED_BODY_TOO_LARGE)
        );
        // Bodies up to the account's bound in all, then the one past it is refused.
        let big = "g".repeat(MAX_PARKED_BODY_BYTES);
        let mut n = 3;
        while facts.admits(&big).is_ok() {
            n += 1;
            park(&mut facts, &format!("r{n}"), Deferral::AccountNotOpened);
            if let Some(last) = facts.0.last_mut() {
                last.body = big.clone();
            }
        }
        assert_eq!(facts.admits(&big).map_err(|r| r.code), Err(PARKING_FULL));
        assert!(facts.iter().map(|f| f.body.len()).sum::<usize>() <= MAX_PARKED_BYTES);
    }
}
