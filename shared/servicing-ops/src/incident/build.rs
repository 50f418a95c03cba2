//! The report from the window's records and what the table stores for them. Pure: the reads
//! are in `stored`, the files in `records`.
//!
//! Here the report as a whole (attribution, totals, suspected duplicates, the per-minute
//! series, the manifest); what the report covers is in `query`, one account's part in
//! `account`.

mod account;
mod query;

pub use query::Query;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::Value;
use servicing_telemetry::{DecisionRecord, Verdict, bounded_source};

use super::records::format_time;
use super::{
    Collected, Counts, Filters, INCIDENT_REPORT_VERSION, IncidentReport, Manifest, MinuteCount,
    Stored, SuspectedDuplicate, Timed, Totals, Window,
};
use account::{account_impact, add, count, delivery};

const PAYMENT: &str = "PAYMENT_SETTLED";
const REVERSAL: &str = "PAYMENT_REVERSED";

fn identity(r: &DecisionRecord) -> Option<(String, String)> {
    Some((r.source_system.clone()?, r.source_event_id.clone()?))
}

fn label((system, id): &(String, String)) -> String {
    format!("{system}/{id}")
}

/// The report of `query` over `collected`, with what `stored` holds when a table was read.
pub fn report(
    query: &Query,
    collected: &Collected,
    stored: Option<&Stored>,
    generated_at: DateTime<Utc>,
) -> IncidentReport {
    let (attributed, inferred) = attribute_quarantined(collected, stored);
    let collected: &Collected = &attributed;
    let mut by_account: BTreeMap<String, Vec<&Timed>> = BTreeMap::new();
    let mut unattributed = Vec::new();
    let mut selected = 0u64;
    for t in query.selected(collected) {
        selected += 1;
        match &t.record.account_id {
            Some(account) => by_account.entry(account.clone()).or_default().push(t),
            None => unattributed.push(delivery(t, false)),
        }
    }
    let mut others: BTreeMap<&str, BTreeMap<String, BTreeMap<String, u64>>> = BTreeMap::new();
    for t in collected
        .records
        .iter()
        .filter(|t| query.in_window(t.at) && t.record.consumer != query.consumer)
    {
        if let Some(account) = t.record.account_id.as_deref() {
            *others
                .entry(account)
                .or_default()
                .entry(t.record.consumer.clone())
                .or_default()
                .entry(t.record.verdict.as_str().to_owned())
                .or_default() += 1;
        }
    }
    let suspected = suspected_duplicates(query, collected);
    let mut totals = Totals::default();
    let mut accounts = Vec::with_capacity(by_account.len());
    let mut identities = BTreeSet::new();
    for (account_id, timed) in &by_account {
        let mut impact = account_impact(account_id, timed, stored, query, &inferred);
        impact.suspected_duplicates = suspected
            .iter()
            .filter(|s| &s.account_id == account_id)
            .cloned()
            .collect();
        impact.other_consumers = others.remove(account_id.as_str()).unwrap_or_default();
        for t in timed {
            let r = &t.record;
            identities.extend(identity(r));
            let source = bounded_source(r.source_system.as_deref()).to_owned();
            count(totals.by_source.entry(source).or_default(), r);
            if let Some(currency) = &r.currency {
                let mut money = Counts::default();
                count(&mut money, r);
                let entry = totals.by_currency.entry(currency.clone()).or_default();
                for (name, value) in [
                    ("appliedAmountMinor", money.applied_amount_minor),
                    ("reversedAmountMinor", money.reversed_amount_minor),
                    ("duplicateAmountMinor", money.duplicate_amount_minor),
                ] {
                    *entry.entry(name.to_owned()).or_default() += value;
                }
            }
        }
        add(&mut totals.counts, &impact.counts);
        accounts.push(impact);
    }
    for u in &unattributed {
        totals.counts.deliveries += 1;
        if u.verdict == "quarantined" {
            totals.counts.quarantined += 1;
        } else if u.verdict == "retried" {
            totals.counts.retried += 1;
        }
    }
    totals.accounts_touched = accounts.len() as u64;
    totals.unique_facts = identities.len() as u64;
    totals.suspected_duplicates = suspected.len() as u64;
    totals.suspected_duplicate_amount_minor = suspected.iter().map(|s| s.amount_minor).sum();
    totals.suspected_duplicates_checked_from = lookback_uncovered(query, collected);

    let mut queries = vec![format!(
        "decision records of {} decided in [{}, {}){}{}; other consumers' records on the accounts touched; applied facts from {} on compared by content key",
        query.consumer,
        format_time(query.from),
        format_time(query.to),
        query
            .source_system
            .as_ref()
            .map(|s| format!(", sourceSystem = {s}"))
            .unwrap_or_default(),
        query
            .account_id
            .as_ref()
            .map(|a| format!(", accountId = {a}"))
            .unwrap_or_default(),
        format_time(query.from - query.lookback),
    )];
    queries.extend(stored.iter().flat_map(|s| s.queries.iter().cloned()));
    IncidentReport {
        report_version: INCIDENT_REPORT_VERSION,
        window: Window {
            from: format_time(query.from),
            to: format_time(query.to),
        },
        filters: Filters {
            consumer: query.consumer.clone(),
            source_system: query.source_system.clone(),
            account_id: query.account_id.clone(),
            lookback_minutes: query.lookback.num_minutes(),
        },
        accounts,
        suspected_duplicates: suspected,
        unattributed,
        totals,
        per_minute: per_minute(query.selected(collected)),
        manifest: Manifest {
            generated_at: format_time(generated_at),
            tool: "ledgerctl incident".to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            inputs: collected.inputs.clone(),
            records_read: collected.records.len() as u64,
            records_selected: selected,
            skipped_lines: collected.skipped_lines,
            repeated_lines: collected.repeated_lines,
            records_without_time: collected.without_time,
            table: stored.map(|s| s.table.clone()),
            queries,
        },
    }
}

/// The records with the account of each undecodable body filled in from its quarantine item
/// (when the table was read and the body names one), and the message ids so attributed. The
/// records are copied only when one is attributed.
fn attribute_quarantined<'a>(
    collected: &'a Collected,
    stored: Option<&Stored>,
) -> (Cow<'a, Collected>, BTreeSet<String>) {
    let mut inferred = BTreeSet::new();
    let Some(stored) = stored.filter(|s| {
        collected.records.iter().any(|t| {
            t.record.account_id.is_none() && s.quarantined.contains_key(&t.record.message_id)
        })
    }) else {
        return (Cow::Borrowed(collected), inferred);
    };
    let mut attributed = collected.clone();
    for t in attributed
        .records
        .iter_mut()
        .filter(|t| t.record.account_id.is_none())
    {
        let Some(q) = stored.quarantined.get(&t.record.message_id) else {
            continue;
        };
        let from_body = || {
            serde_json::from_str::<Value>(&q.raw_body)
                .ok()
                .and_then(|b| b["accountId"].as_str().map(str::to_owned))
        };
        if let Some(account) = q.account_id.clone().or_else(from_body) {
            t.record.account_id = Some(account);
            inferred.insert(t.record.message_id.clone());
        }
    }
    (Cow::Owned(attributed), inferred)
}

/// Applied payments that share a content key under different identities, the second decided
/// in the window, the first up to `lookback` before, either of them matching the filters.
fn suspected_duplicates(query: &Query, collected: &Collected) -> Vec<SuspectedDuplicate> {
    let since = query.from - query.lookback;
    let mut first_of: BTreeMap<&str, &Timed> = BTreeMap::new();
    let mut out = Vec::new();
    for t in collected.records.iter().filter(|t| {
        since <= t.at
            && t.at < query.to
            && t.record.consumer == query.consumer
            && t.record.effective_verdict() == Verdict::Applied
            && t.record.event_type.as_deref() == Some(PAYMENT)
    }) {
        let (Some(key), Some(second)) = (t.record.content_key.as_deref(), identity(&t.record))
        else {
            continue;
        };
        let Some(first) = first_of.get(key) else {
            first_of.insert(key, t);
            continue;
        };
        let first_identity = identity(&first.record).unwrap_or_default();
        // Reported when either side is what the filters select (a source's payment re-sent by
        // another source is that source's incident too).
        if first_identity == second
            || !query.in_window(t.at)
            || !(query.matches(&t.record) || query.matches(&first.record))
        {
            continue;
        }
        out.push(SuspectedDuplicate {
            account_id: t.record.account_id.clone().unwrap_or_default(),
            content_key: key.to_owned(),
            amount_minor: t.record.amount_minor.unwrap_or_default(),
            currency: t.record.currency.clone(),
            event_time: t.record.event_time.clone(),
            first: label(&first_identity),
            first_decided_at: format_time(first.at),
            second: label(&second),
            second_decided_at: format_time(t.at),
        });
    }
    out
}

/// When the records given begin after the lookback's start, the time they begin (or the
/// window's start, with none before it): suspected duplicates were only looked for from there.
fn lookback_uncovered(query: &Query, collected: &Collected) -> Option<String> {
    let since = query.from - query.lookback;
    let earliest = collected.records.iter().map(|t| t.at).min();
    match earliest {
        Some(first) if first <= since => None,
        Some(first) => Some(format_time(first.min(query.from))),
        None => Some(format_time(query.from)),
    }
}

/// Every verdict per minute and bounded source, counted as the totals count them (a parked fact
/// judged again is no new delivery: it counts under its outcome).
fn per_minute<'a>(records: impl Iterator<Item = &'a Timed>) -> Vec<MinuteCount> {
    let mut by: BTreeMap<(String, String), Counts> = BTreeMap::new();
    for t in records {
        let minute = t.at.format("%Y-%m-%dT%H:%MZ").to_string();
        let source = bounded_source(t.record.source_system.as_deref()).to_owned();
        count(by.entry((minute, source)).or_default(), &t.record);
    }
    by.into_iter()
        .map(|((minute, source_system), counts)| MinuteCount {
            minute,
            source_system,
            counts,
        })
        .collect()
}
