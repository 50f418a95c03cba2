//! One account's part of an incident report: its deliveries and their counts, the money
//! applied with its split, the collisions with both payloads, the bucket changes and the
//! collections actions. Separate from the report as a whole, which adds these up.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use servicing_domain::outbox::detail_types;
use servicing_telemetry::{DecisionRecord, Verdict};

use super::{PAYMENT, Query, REVERSAL, identity};
use crate::incident::records::format_time;
use crate::incident::{
    AccountImpact, Action, Collision, Counts, Delivery, MoneyApplied, Stored, Timed,
};

pub(super) fn account_impact(
    account_id: &str,
    timed: &[&Timed],
    stored: Option<&Stored>,
    query: &Query,
    inferred: &BTreeSet<String>,
) -> AccountImpact {
    // The account's currency: its applied facts', else whatever a delivery said.
    let currency = timed
        .iter()
        .filter(|t| t.record.effective_verdict() == Verdict::Applied)
        .chain(timed.iter())
        .find_map(|t| t.record.currency.clone());
    let mut impact = AccountImpact {
        account_id: account_id.to_owned(),
        currency,
        counts: Counts::default(),
        facts: Vec::with_capacity(timed.len()),
        collisions_found: Vec::new(),
        money_applied: Vec::new(),
        bucket_changes: Vec::new(),
        collections_actions: Vec::new(),
        suspected_duplicates: Vec::new(),
        other_consumers: BTreeMap::new(),
    };
    let mut change_ids = BTreeSet::new();
    for t in timed {
        let r = &t.record;
        count(&mut impact.counts, r);
        impact
            .facts
            .push(delivery(t, inferred.contains(&r.message_id)));
        let verdict = r.effective_verdict();
        let claim = identity(r).and_then(|id| stored.and_then(|s| s.claims.get(&id)));
        if verdict == Verdict::Applied {
            if r.event_type.as_deref() == Some(PAYMENT)
                && let Some(identity) = identity(r)
            {
                let allocation = claim.and_then(|c| c.allocation().ok().flatten());
                impact.money_applied.push(MoneyApplied {
                    source_system: identity.0,
                    source_event_id: identity.1,
                    amount_minor: r.amount_minor.unwrap_or_default(),
                    currency: r.currency.clone(),
                    decided_at: format_time(t.at),
                    split: allocation.as_ref().map(|a| {
                        json!({"allocation": a.allocation, "installmentsPaid": a.installments_paid,
                            "appliedOn": a.applied_on.to_string()})
                    }),
                    reversed_by: allocation
                        .and_then(|a| a.reversed_by)
                        .map(|s| json!({"sourceSystem": s.system, "sourceEventId": s.event_id})),
                });
            }
            for event in claim.and_then(|c| c.events().ok()).unwrap_or_default() {
                if event.detail_type == detail_types::DELINQUENCY_CHANGED {
                    if let Some(id) = event.detail.get("eventId").and_then(Value::as_str) {
                        change_ids.insert(id.to_owned());
                    }
                    impact.bucket_changes.push(event.detail);
                }
            }
        }
        if verdict == Verdict::Collision {
            impact.collisions_found.push(collision(t, stored));
        }
    }
    impact.bucket_changes.sort_by(|a, b| {
        (a["occurredAt"].as_str(), a["eventId"].as_str())
            .cmp(&(b["occurredAt"].as_str(), b["eventId"].as_str()))
    });
    for action in stored.iter().flat_map(|s| &s.actions) {
        let created = Utc.timestamp_opt(action.created_at, 0).single();
        if action.account_id == account_id
            && (change_ids.contains(&action.event_id)
                || created.is_some_and(|c| query.in_window(c)))
        {
            impact.collections_actions.push(Action {
                action_id: action.action_id.clone(),
                event_id: action.event_id.clone(),
                status: action.status.clone(),
                attempts: action.attempts,
                created_at: created.map(format_time).unwrap_or_default(),
            });
        }
    }
    impact
}

fn collision(t: &Timed, stored: Option<&Stored>) -> Collision {
    let r = &t.record;
    let (system, id) = identity(r).unwrap_or_default();
    let mut received = json!({"fingerprint": r.fingerprint, "eventType": r.event_type,
        "accountId": r.account_id, "eventTime": r.event_time, "amountMinor": r.amount_minor,
        "currency": r.currency, "code": r.code});
    if let Some(q) = stored.and_then(|s| s.quarantined.get(&r.message_id)) {
        received["rawBody"] = json!(q.raw_body);
        received["rawBodyTruncated"] = json!(q.raw_body_truncated);
    }
    let stored_first = stored
        .and_then(|s| s.claims.get(&(system.clone(), id.clone())))
        .map(|c| {
            json!({"fingerprint": c.fingerprint, "verdict": c.verdict, "accountId": c.account_id,
                "eventType": c.event_type, "claimedAt": Utc.timestamp_opt(c.claimed_at, 0).single().map(format_time),
                "events": c.events().unwrap_or_default().into_iter().map(|e| e.detail).collect::<Vec<_>>()})
        });
    Collision {
        source_system: system,
        source_event_id: id,
        message_id: r.message_id.clone(),
        decided_at: format_time(t.at),
        received,
        stored: stored_first,
    }
}

/// `account_from_quarantine`: the body named no readable account; its quarantine item did.
pub(super) fn delivery(t: &Timed, account_from_quarantine: bool) -> Delivery {
    let r = &t.record;
    Delivery {
        account_from_quarantine,
        decided_at: format_time(t.at),
        message_id: r.message_id.clone(),
        receive_count: r.receive_count,
        source_system: r.source_system.clone(),
        source_event_id: r.source_event_id.clone(),
        event_type: r.event_type.clone(),
        event_time: r.event_time.clone(),
        amount_minor: r.amount_minor,
        currency: r.currency.clone(),
        verdict: r.verdict.as_str().to_owned(),
        outcome: r.outcome.map(|o| o.as_str().to_owned()),
        decided_by: r.decided_by.as_str().to_owned(),
        code: r.code.clone(),
    }
}

/// Adds one record to `counts`: a delivery unless it is a parked fact judged again, and its
/// effective verdict with the money that goes with it.
pub(super) fn count(counts: &mut Counts, r: &DecisionRecord) {
    if r.verdict == Verdict::Released {
        counts.released += 1;
    } else {
        counts.deliveries += 1;
    }
    let amount = r.amount_minor.unwrap_or_default();
    let event_type = r.event_type.as_deref();
    match r.effective_verdict() {
        Verdict::Applied => {
            counts.applied += 1;
            match event_type {
                Some(PAYMENT) => counts.applied_amount_minor += amount,
                Some(REVERSAL) => counts.reversed_amount_minor += amount,
                _ => {}
            }
        }
        Verdict::Duplicate => {
            counts.duplicates += 1;
            if event_type == Some(PAYMENT) {
                counts.duplicate_amount_minor += amount;
            }
        }
        Verdict::Collision => counts.collisions += 1,
        Verdict::Stale => counts.stale += 1,
        Verdict::Parked => counts.parked += 1,
        Verdict::Quarantined => counts.quarantined += 1,
        Verdict::Retried => counts.retried += 1,
        _ => {}
    }
}

pub(super) fn add(into: &mut Counts, c: &Counts) {
    into.deliveries += c.deliveries;
    into.applied += c.applied;
    into.duplicates += c.duplicates;
    into.collisions += c.collisions;
    into.stale += c.stale;
    into.parked += c.parked;
    into.released += c.released;
    into.quarantined += c.quarantined;
    into.retried += c.retried;
    into.applied_amount_minor += c.applied_amount_minor;
    into.reversed_amount_minor += c.reversed_amount_minor;
    into.duplicate_amount_minor += c.duplicate_amount_minor;
}
