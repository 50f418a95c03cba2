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

use crate::apply::Deferral;
use crate::event::{EventKind, ServicingEvent};
use crate::fingerprint::Fingerprint;
use crate::types::SourceRef;

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

    /// Parks a newly received fact behind the others.
    pub fn park(&mut self, arrival: Arrival<'_>, awaits: Deferral) {
        let seq = self.0.iter().map(|p| p.seq).max().map_or(1, |s| s + 1);
        self.0.push(ParkedFact {
            seq,
            source: arrival.source.clone(),
            fingerprint: arrival.fingerprint.clone(),
            awaits: Some(awaits),
            parked_at: arrival.now,
            message_id: arrival.message_id.to_owned(),
            body: arrival.body.to_owned(),
        });
    }

    /// Puts a fact taken out with [`ParkedFacts::take_next_ready`] back, waiting for something
    /// else now; it keeps its place in the order of receipt.
    pub fn park_again(&mut self, mut fact: ParkedFact, awaits: Deferral) {
        fact.awaits = Some(awaits);
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
}
