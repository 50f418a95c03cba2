//! Reconciliation: SourceEventCount → CanonicalUniqueEventCount → AppliedBusinessEventCount,
//! with duplicates, collisions, stale and quarantined in between, plus the money checks: every
//! allocation of the facts read sums to its payment, every applied payment has its allocation.
//!
//! A window reads what it reports: its records through the record log, its quarantine by its
//! days, and by key the claims its quarantine items name. Against a producer's stream it is an
//! audit of that stream, and reads every record (a scan).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use servicing_domain::StoredAllocation;
use servicing_domain::{Fingerprint, ServicingEvent, SourceRef};
use servicing_store::items;
use servicing_store::schema::{self, ClaimRecord, QuarantineRecord};

use crate::{Item, scan_types, text};

/// What the claims and quarantine items of one consumer say about a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciliation {
    pub consumer: String,
    /// `[from, to)` in epoch seconds, on `claimedAt` / `quarantinedAt`.
    pub window: (i64, i64),
    pub source: Option<SourceCounts>,
    pub applied: u64,
    pub stale: u64,
    /// Business rejections: claimed and quarantined.
    pub rejected: u64,
    /// Claimed as parked: waiting for another fact (their opening, the payment they reverse).
    pub parked: u64,
    /// Quarantined without a claim: undecodable input, future-dated events, expired parked facts.
    pub quarantined_unclaimed: u64,
    /// Second payloads under an identity already claimed (quarantined; the first fact stands):
    /// not unique facts of their own, so outside the identity, but counted and alarmed.
    pub collisions: u64,
    pub allocations_checked: u64,
    pub payments_checked: u64,
    /// Every broken rule, in words. The identity holds when this is empty.
    pub problems: Vec<String>,
}

/// The producer's side, when a source stream is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceCounts {
    pub events: u64,
    pub duplicates: u64,
    pub undecodable: u64,
    pub unique: u64,
    /// Unique facts with neither a claim nor a quarantine item: lost or not processed yet.
    pub unaccounted: u64,
}

impl Reconciliation {
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }

    /// Unique facts as the table accounts for them (plus, with a source, the unaccounted ones).
    pub fn canonical_unique(&self) -> u64 {
        self.applied
            + self.stale
            + self.rejected
            + self.parked
            + self.quarantined_unclaimed
            + self.source.as_ref().map_or(0, |s| s.unaccounted)
    }

    /// The explanation, one line each, as printed by `ledgerctl reconcile`.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "consumer {} window [{}, {})",
            self.consumer,
            crate::iso(self.window.0),
            crate::iso(self.window.1)
        )];
        if let Some(s) = &self.source {
            out.push(format!("SourceEventCount            {:>7}", s.events));
            out.push(format!("  - duplicates              {:>7}", s.duplicates));
            out.push(format!(
                "  - undecodable             {:>7}  (quarantined, no identity)",
                s.undecodable
            ));
            out.push(format!("CanonicalUniqueEventCount   {:>7}", s.unique));
            out.push(format!(
                "  - not accounted for       {:>7}  (no claim, no quarantine item)",
                s.unaccounted
            ));
        } else {
            out.push(format!("CanonicalUniqueEventCount   {:>7}  (claims + unclaimed quarantine items in the window)", self.canonical_unique()));
        }
        out.push(format!("  - stale                   {:>7}", self.stale));
        out.push(format!("  - rejected (quarantined)  {:>7}", self.rejected));
        out.push(format!(
            "  - parked (waiting)        {:>7}  (for their opening or the payment they reverse)",
            self.parked
        ));
        out.push(format!(
            "  - quarantined, unclaimed  {:>7}  (plus {} collisions: other payloads of claimed identities)",
            self.quarantined_unclaimed, self.collisions
        ));
        out.push(format!("AppliedBusinessEventCount   {:>7}", self.applied));
        out.push(format!(
            "checks: {} allocations sum to their payments; {} applied payments each have their allocation",
            self.allocations_checked, self.payments_checked
        ));
        for p in &self.problems {
            out.push(format!("PROBLEM: {p}"));
        }
        out.push(format!(
            "identity {}",
            if self.holds() {
                "holds"
            } else {
                "DOES NOT HOLD"
            }
        ));
        out
    }
}

/// The items of one record type, decoded; an item that does not decode is a problem to report.
fn decoded<T: serde::de::DeserializeOwned>(
    items: Vec<Item>,
    what: &str,
    problems: &mut Vec<String>,
) -> Vec<T> {
    items
        .into_iter()
        .filter_map(|item| {
            let key = format!(
                "{} / {}",
                text(&item, items::PK).unwrap_or("?"),
                text(&item, items::SK).unwrap_or("?")
            );
            schema::from_item(item)
                .map_err(|e| problems.push(format!("{what} {key} does not decode: {e}")))
                .ok()
        })
        .collect()
}

/// Reconciles `consumer` over `window`; with `source` (the producer's stream, one body per
/// delivery), over exactly the facts of that stream instead.
pub async fn reconcile(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    window: (i64, i64),
    source: Option<&[Vec<u8>]>,
) -> anyhow::Result<Reconciliation> {
    // A window: its records through the record log, its quarantine by its days. A source
    // stream: its facts may have come on any day, so every record and quarantine item (a
    // scan: an audit of that stream).
    let (claim_items, quarantine_items) = match source {
        Some(_) => {
            let mut items = scan_types(
                client,
                table,
                &[ClaimRecord::ITEM_TYPE, QuarantineRecord::ITEM_TYPE],
            )
            .await?;
            let mut of_type = |t: &str| items.remove(t).unwrap_or_default();
            (
                of_type(ClaimRecord::ITEM_TYPE),
                of_type(QuarantineRecord::ITEM_TYPE),
            )
        }
        None => (
            crate::record_log::claimed_in(client, table, consumer, window).await?,
            crate::quarantine::in_window(
                client,
                table,
                consumer,
                (window.0 * 1000, window.1 * 1000),
            )
            .await?,
        ),
    };
    let mut report = Reconciliation {
        consumer: consumer.to_owned(),
        window,
        ..Reconciliation::default()
    };
    let claims: Vec<ClaimRecord> = decoded(claim_items, "claim", &mut report.problems)
        .into_iter()
        .filter(|c: &ClaimRecord| c.consumer == consumer)
        .collect();
    let quarantine: Vec<QuarantineRecord> =
        decoded(quarantine_items, "quarantine item", &mut report.problems)
            .into_iter()
            .filter(|q: &QuarantineRecord| q.consumer == consumer)
            .collect();
    // A payment's allocation rides on its record (its PaymentApplied event). A tampered part
    // still decodes (and fails the sum below); a mangled record is a problem.
    let mut allocations: Vec<StoredAllocation> = Vec::new();
    for claim in &claims {
        match claim.allocation() {
            Ok(found) => allocations.extend(found),
            Err(e) => report
                .problems
                .push(format!("record of {}: {e}", claim.source())),
        }
    }

    let claims_by_source: HashMap<SourceRef, &ClaimRecord> =
        claims.iter().map(|c| (c.source(), c)).collect();
    // A window's quarantine item may name a fact claimed before the window (a collision, a
    // redelivery judged again): its claim, read by key, keeps it out of the unclaimed count.
    let claimed_before: HashSet<SourceRef> = match source {
        Some(_) => HashSet::new(),
        None => {
            let keys = quarantine
                .iter()
                .filter_map(QuarantineRecord::source)
                .filter(|s| !claims_by_source.contains_key(s))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|s| items::key_item(items::claim_key(consumer, &s)))
                .collect();
            let now = crate::epoch_seconds();
            let mut found = HashSet::new();
            for item in crate::batch_get(client, table, keys).await? {
                if !crate::record_log::unexpired(&item, now) {
                    continue;
                }
                match schema::from_item::<ClaimRecord>(item) {
                    Ok(claim) => {
                        found.insert(claim.source());
                    }
                    Err(e) => report.problems.push(format!(
                        "a record a quarantine item names does not decode: {e}"
                    )),
                }
            }
            found
        }
    };
    let quarantined_by_source: HashMap<SourceRef, &QuarantineRecord> = quarantine
        .iter()
        .filter_map(|q| Some((q.source()?, q)))
        .collect();

    // Which claims and quarantine items are in scope.
    let (scoped_claims, scoped_quarantine): (Vec<&ClaimRecord>, Vec<&QuarantineRecord>) =
        match source {
            Some(bodies) => {
                let mut counts = SourceCounts {
                    events: bodies.len() as u64,
                    ..SourceCounts::default()
                };
                let mut seen: BTreeMap<SourceRef, Fingerprint> = BTreeMap::new();
                for body in bodies {
                    match ServicingEvent::decode(body) {
                        Err(_) => counts.undecodable += 1,
                        Ok(event) => {
                            let fp = Fingerprint::of(&event);
                            match seen.get(&event.source) {
                                Some(first) if *first != fp => report.problems.push(format!(
                                    "the source itself carries {} twice with different payloads",
                                    event.source
                                )),
                                _ => {}
                            }
                            seen.entry(event.source).or_insert(fp);
                        }
                    }
                }
                counts.unique = seen.len() as u64;
                counts.duplicates = counts.events - counts.unique - counts.undecodable;
                let mut scoped_claims = Vec::new();
                let mut scoped_quarantine = Vec::new();
                for (identity, fingerprint) in &seen {
                    if let Some(claim) = claims_by_source.get(identity) {
                        if claim.fingerprint != fingerprint.as_str() {
                            report.problems.push(format!(
                            "{identity}: the source's payload differs from the one applied (collision)"
                        ));
                        }
                        scoped_claims.push(*claim);
                    } else if let Some(q) = quarantined_by_source.get(identity) {
                        scoped_quarantine.push(*q);
                    } else {
                        counts.unaccounted += 1;
                        report.problems.push(format!(
                        "{identity}: neither claimed nor quarantined (lost, or not processed yet)"
                    ));
                    }
                }
                report.collisions = quarantine
                    .iter()
                    .filter(|q| q.code == "collision")
                    .filter(|q| q.source().is_some_and(|s| seen.contains_key(&s)))
                    .count() as u64;
                report.source = Some(counts);
                (scoped_claims, scoped_quarantine)
            }
            None => {
                let in_window = |t: Option<i64>| t.is_some_and(|t| t >= window.0 && t < window.1);
                // A collision's identity has the first fact's claim: counted on its own.
                report.collisions = quarantine
                    .iter()
                    .filter(|q| in_window(Some(q.quarantined_at / 1000)))
                    .filter(|q| q.code == "collision")
                    .count() as u64;
                (
                    claims
                        .iter()
                        .filter(|c| in_window(Some(c.claimed_at)))
                        .collect(),
                    quarantine
                        .iter()
                        .filter(|q| in_window(Some(q.quarantined_at / 1000)))
                        .filter(|q| {
                            q.source().is_none_or(|s| {
                                !claims_by_source.contains_key(&s) && !claimed_before.contains(&s)
                            })
                        })
                        .collect(),
                )
            }
        };

    for claim in &scoped_claims {
        match claim.verdict.as_str() {
            "APPLIED" => report.applied += 1,
            "STALE" => report.stale += 1,
            "REJECTED" => report.rejected += 1,
            "PARKED" => report.parked += 1,
            other => report
                .problems
                .push(format!("claim with unknown verdict {other:?}")),
        }
    }
    report.quarantined_unclaimed = scoped_quarantine.len() as u64;
    if let Some(s) = &report.source
        && s.unique != report.canonical_unique()
    {
        report.problems.push(format!(
            "{} unique source facts, but the table accounts for {}",
            s.unique,
            report.canonical_unique()
        ));
    }

    // Money: every allocation sums to its payment; every applied payment has its allocation.
    for a in &allocations {
        report.allocations_checked += 1;
        let parts = [
            a.allocation.fees,
            a.allocation.interest,
            a.allocation.principal,
            a.allocation.credit,
        ];
        let sum = parts.iter().try_fold(0i64, |acc, p| {
            (*p >= 0).then(|| acc.checked_add(*p)).flatten()
        });
        if sum != Some(a.amount_minor) {
            report.problems.push(format!(
                "allocation of {} on {}: parts {parts:?} do not sum to the payment {}",
                a.payment, a.account_id, a.amount_minor
            ));
        }
    }
    if consumer == servicing_store::APPLIER {
        for claim in scoped_claims
            .iter()
            .filter(|c| c.verdict == "APPLIED" && c.event_type == "PAYMENT_SETTLED")
        {
            report.payments_checked += 1;
            // Its allocation, on its account (listed through the account's ledger, which the
            // ledger's own reconciliation holds to servicing; a record of an earlier release
            // may also carry the index key, which must then name that account).
            let listed = claim.allocation().ok().flatten().is_some_and(|a| {
                a.account_id.as_str() == claim.account_id
                    && claim
                        .allocated_to
                        .as_deref()
                        .is_none_or(|to| to == claim.account_id)
            });
            if !listed {
                report.problems.push(format!(
                    "applied payment {} on {} has no allocation stored for its account",
                    claim.source(),
                    claim.account_id
                ));
            }
        }
    }
    Ok(report)
}
