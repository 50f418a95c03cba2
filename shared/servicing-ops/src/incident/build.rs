//! The report from the window's records and what the table stores for them. Pure: the reads
//! are in `stored`, the files in `records`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};
use servicing_domain::outbox::detail_types;
use servicing_telemetry::{DecisionRecord, Verdict, bounded_source};

use super::records::format_time;
use super::{
    AccountImpact, Action, Collected, Collision, Counts, Delivery, Filters,
    INCIDENT_REPORT_VERSION, IncidentReport, Manifest, MinuteCount, MoneyApplied, Stored,
    SuspectedDuplicate, Timed, Totals, Wanted, Window,
};

const PAYMENT: &str = "PAYMENT_SETTLED";
const REVERSAL: &str = "PAYMENT_REVERSED";

/// What the report covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Decided at or after.
    pub from: DateTime<Utc>,
    /// Decided before.
    pub to: DateTime<Utc>,
    /// The deduplicating consumer whose deliveries are reported (`account-state`).
    pub consumer: String,
    /// Only this source's deliveries (`api` matches every API caller).
    pub source_system: Option<String>,
    pub account_id: Option<String>,
    /// Applied facts this long before the window are compared for suspected duplicates.
    pub lookback: Duration,
}

impl Query {
    fn in_window(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }

    fn matches(&self, record: &DecisionRecord) -> bool {
        let source = record.source_system.as_deref();
        let source_ok = match self.source_system.as_deref() {
            None => true,
            Some("api") => source.is_some_and(|s| bounded_source(Some(s)) == "api"),
            Some(wanted) => source == Some(wanted),
        };
        let account_ok = match self.account_id.as_deref() {
            None => true,
            Some(wanted) => record.account_id.as_deref() == Some(wanted),
        };
        record.consumer == self.consumer && source_ok && account_ok
    }

    /// The window's deliveries of the consumer that match the filters.
    fn selected<'a>(&'a self, collected: &'a Collected) -> impl Iterator<Item = &'a Timed> + 'a {
        collected
            .records
            .iter()
            .filter(|t| self.in_window(t.at) && self.matches(&t.record))
    }

    /// What the table must be asked for this report.
    pub fn wanted(&self, collected: &Collected) -> Wanted {
        let mut wanted = Wanted {
            consumer: self.consumer.clone(),
            from: Some(self.from),
            to: Some(self.to),
            ..Wanted::default()
        };
        for t in self.selected(collected) {
            let r = &t.record;
            let verdict = r.effective_verdict();
            if matches!(verdict, Verdict::Applied | Verdict::Collision)
                && let Some(identity) = identity(r)
            {
                wanted.identities.insert(identity);
            }
            if verdict == Verdict::Collision {
                wanted.quarantined_messages.insert(r.message_id.clone());
            }
            if let Some(account) = &r.account_id {
                wanted.accounts.insert(account.clone());
            }
        }
        // Undecodable bodies name no account: their quarantine items may (the account
        // filter cannot select them before that).
        for t in collected.records.iter().filter(|t| {
            self.in_window(t.at)
                && t.record.consumer == self.consumer
                && t.record.account_id.is_none()
                && t.record.verdict == Verdict::Quarantined
        }) {
            wanted
                .quarantined_messages
                .insert(t.record.message_id.clone());
        }
        wanted
    }
}

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

fn account_impact(
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
fn delivery(t: &Timed, account_from_quarantine: bool) -> Delivery {
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
fn count(counts: &mut Counts, r: &DecisionRecord) {
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

fn add(into: &mut Counts, c: &Counts) {
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

/// Deliveries (not re-judged parked facts) and duplicates per minute and bounded source.
fn per_minute<'a>(records: impl Iterator<Item = &'a Timed>) -> Vec<MinuteCount> {
    let mut by: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for t in records.filter(|t| t.record.verdict != Verdict::Released) {
        let minute = t.at.format("%Y-%m-%dT%H:%MZ").to_string();
        let source = bounded_source(t.record.source_system.as_deref()).to_owned();
        let entry = by.entry((minute, source)).or_default();
        entry.0 += 1;
        if t.record.verdict == Verdict::Duplicate {
            entry.1 += 1;
        }
    }
    by.into_iter()
        .map(
            |((minute, source_system), (deliveries, duplicates))| MinuteCount {
                minute,
                source_system,
                deliveries,
                duplicates,
            },
        )
        .collect()
}
