//! The facts recently applied to a loan, kept on the loan item itself.
//!
//! A duplicate of one of them is recognised from the state the consumer has read (or cached)
//! anyway: no request, and no cancelled transaction for the new facts committed next to it.
//! The list only ever says "already applied" when that is true: an entry is written in the
//! same transaction as the fact's `APPLIED` claim (which is never released), and it counts for
//! `RECENT_FACTS_WINDOW`, far less than the claim lives. A fact the list does not hold — older,
//! pushed out, another payload under its identity, or a stale cached state — goes through its
//! claim as before, so correctness never depends on the list.
//!
//! Stored as one string, one line per fact, oldest first:
//! `<appliedAt> <fingerprint prefix> <system>#<id>` (the system cannot contain a space or `#`;
//! the id may, so it comes last; neither can contain a line break). One string rather than a
//! list: DynamoDB Local spends ~0.1 ms more per loan write on a 25-element list (measured).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::{Fingerprint, SourceRef};

use crate::StoreError;

/// How long an entry recognises a duplicate: the redeliveries that follow a commit (an SQS
/// batch retried after a timeout, within visibility timeout × maxReceiveCount = 15 min in
/// `template.yaml`; a producer's retries) fall well inside; an operator's replay days later
/// goes through the claim. Must stay below the shortest claim retention (1 day).
pub const RECENT_FACTS_WINDOW: Duration = Duration::from_secs(3600);

/// Entries kept at most: bounds the loan item (≈ 60 bytes per entry for typical ids, ≤ 230
/// for the longest), so only an account with more facts than that per window pays for it.
pub const RECENT_FACTS_MAX: usize = 32;

/// Bytes of the stored list at most, whatever the ids' lengths: the newest entries that fit
/// are kept (at least the newest one), so long ids cost the fast path entries, never the loan
/// item its size bound.
pub const RECENT_FACTS_MAX_BYTES: usize = 2_048;

/// Hex digits of the payload fingerprint kept (64 bits): a different prefix is a different
/// payload for certain, and then the claim decides (collision, with both full fingerprints).
/// Another payload with the same prefix (odds 2^-64) would be acknowledged as a duplicate
/// instead of quarantined as a collision; the first fact stands either way.
const FINGERPRINT_PREFIX: usize = 16;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentFacts(Vec<RecentFact>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct RecentFact {
    applied_at: i64,
    fingerprint: String,
    source: SourceRef,
}

impl RecentFact {
    /// Its line's length in the stored string (`encode`).
    fn encoded_len(&self) -> usize {
        self.applied_at.to_string().len()
            + 1
            + self.fingerprint.len()
            + 1
            + self.source.system.len()
            + 1
            + self.source.event_id.len()
    }
}

fn prefix(fingerprint: &Fingerprint) -> &str {
    let hex = fingerprint.as_str().rsplit(':').next().unwrap_or_default();
    hex.get(..FINGERPRINT_PREFIX).unwrap_or(hex)
}

fn live(applied_at: i64, now: i64) -> bool {
    now < applied_at + RECENT_FACTS_WINDOW.as_secs() as i64
}

impl RecentFacts {
    /// `source` with this payload was applied within the window: a duplicate, settled as such.
    pub fn holds(&self, source: &SourceRef, fingerprint: &Fingerprint, now: i64) -> bool {
        let fingerprint = prefix(fingerprint);
        self.0.iter().any(|fact| {
            fact.source == *source && fact.fingerprint == fingerprint && live(fact.applied_at, now)
        })
    }

    /// The list after `applied` facts (in order) at `now`: expired entries dropped, the newest
    /// `RECENT_FACTS_MAX` kept. `now` must not be later than the claims' `claimedAt`.
    pub fn with<'a>(
        &self,
        applied: impl IntoIterator<Item = (&'a SourceRef, &'a Fingerprint)>,
        now: i64,
    ) -> RecentFacts {
        let mut facts: Vec<RecentFact> = self
            .0
            .iter()
            .filter(|fact| live(fact.applied_at, now))
            .cloned()
            .collect();
        facts.extend(applied.into_iter().map(|(source, fingerprint)| RecentFact {
            applied_at: now,
            fingerprint: prefix(fingerprint).to_owned(),
            source: source.clone(),
        }));
        let excess = facts.len().saturating_sub(RECENT_FACTS_MAX);
        facts.drain(..excess);
        let mut bytes = 0;
        let keep = facts
            .iter()
            .rev()
            .take_while(|fact| {
                bytes += fact.encoded_len() + 1;
                bytes <= RECENT_FACTS_MAX_BYTES
            })
            .count()
            .max(1)
            .min(facts.len());
        facts.drain(..facts.len() - keep);
        RecentFacts(facts)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// When the newest listed fact was applied (epoch s): the account was written then.
    pub fn newest_applied_at(&self) -> Option<i64> {
        self.0.iter().map(|fact| fact.applied_at).max()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn encode(&self) -> AttributeValue {
        let lines: Vec<String> = self
            .0
            .iter()
            .map(|fact| {
                format!(
                    "{} {} {}#{}",
                    fact.applied_at, fact.fingerprint, fact.source.system, fact.source.event_id
                )
            })
            .collect();
        AttributeValue::S(lines.join("\n"))
    }

    pub(crate) fn decode(value: Option<&AttributeValue>) -> Result<Self, StoreError> {
        let Some(value) = value else {
            return Ok(Self::default());
        };
        let corrupt = || StoreError::Corrupt(format!("recentFacts is malformed: {value:?}"));
        let AttributeValue::S(lines) = value else {
            return Err(corrupt());
        };
        lines
            .lines()
            .map(|line| {
                let mut parts = line.splitn(3, ' ');
                let (Some(at), Some(fingerprint), Some(source)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(corrupt());
                };
                let (system, event_id) = source.split_once('#').ok_or_else(corrupt)?;
                Ok(RecentFact {
                    applied_at: at.parse().map_err(|_| corrupt())?,
                    fingerprint: fingerprint.to_owned(),
                    source: SourceRef {
                        system: system.to_owned(),
                        event_id: event_id.to_owned(),
                    },
                })
            })
            .collect::<Result<_, _>>()
            .map(RecentFacts)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn source(id: &str) -> SourceRef {
        SourceRef {
            system: "psp".into(),
            event_id: id.into(),
        }
    }

    fn fingerprint(payload: i64) -> Fingerprint {
        Fingerprint::of_value(&json!({ "amountMinor": payload }))
    }

    #[test]
    fn when_a_fact_was_applied_within_the_window_should_hold_it_with_that_payload_only() {
        let recent = RecentFacts::default().with([(&source("p 1#x"), &fingerprint(1))], 1_000);
        assert!(recent.holds(&source("p 1#x"), &fingerprint(1), 1_000));
        assert!(!recent.holds(&source("p 1#x"), &fingerprint(2), 1_000));
        assert!(!recent.holds(&source("p 2"), &fingerprint(1), 1_000));
        let window = RECENT_FACTS_WINDOW.as_secs() as i64;
        assert!(!recent.holds(&source("p 1#x"), &fingerprint(1), 1_000 + window));
    }

    #[test]
    fn when_full_or_expired_should_keep_the_newest_live_entries() {
        let sources: Vec<SourceRef> = (0..RECENT_FACTS_MAX + 3)
            .map(|i| source(&i.to_string()))
            .collect();
        let f = fingerprint(1);
        let old = RecentFacts::default().with([(&sources[0], &f)], 0);
        let window = RECENT_FACTS_WINDOW.as_secs() as i64;
        let recent = old.with(sources[1..].iter().map(|s| (s, &f)), window);
        assert_eq!(recent.len(), RECENT_FACTS_MAX);
        assert!(!recent.holds(&sources[0], &f, window));
        // 34 live entries for 32 places: the two oldest go.
        assert!(!recent.holds(&sources[2], &f, window));
        assert!(recent.holds(&sources[3], &f, window));
        assert!(recent.holds(&sources[RECENT_FACTS_MAX + 2], &f, window));
    }

    #[test]
    fn when_ids_are_long_should_keep_the_stored_list_within_its_bytes() {
        let f = fingerprint(1);
        let sources: Vec<SourceRef> = (0..RECENT_FACTS_MAX)
            .map(|i| SourceRef {
                system: "s".repeat(64),
                event_id: format!("{i:0>128}"),
            })
            .collect();
        let recent = RecentFacts::default().with(sources.iter().map(|s| (s, &f)), 1_000);
        let AttributeValue::S(stored) = recent.encode() else {
            panic!("a string")
        };
        assert!(
            stored.len() <= RECENT_FACTS_MAX_BYTES,
            "{} bytes",
            stored.len()
        );
        assert!(recent.len() < RECENT_FACTS_MAX && !recent.is_empty());
        assert!(
            recent.holds(&sources[RECENT_FACTS_MAX - 1], &f, 1_000),
            "the newest kept"
        );
    }

    #[test]
    fn when_encoded_should_decode_to_the_same_entries() {
        let f = fingerprint(7);
        let recent = RecentFacts::default().with([(&source("a b#c"), &f), (&source("d"), &f)], 42);
        assert_eq!(
            RecentFacts::decode(Some(&recent.encode())).ok(),
            Some(recent)
        );
        assert_eq!(RecentFacts::decode(None).ok(), Some(RecentFacts::default()));
        let garbage = AttributeValue::S("42 abc".into());
        assert!(matches!(
            RecentFacts::decode(Some(&garbage)),
            Err(StoreError::Corrupt(_))
        ));
    }
}
