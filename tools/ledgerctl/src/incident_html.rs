//! The incident report as one self-contained HTML page a person reads at a glance: what needs
//! them first (collisions, quarantined deliveries, suspected duplicates — the only things in
//! colour), the money by currency and by account, the decisions per minute as stacked bars by
//! verdict with one row per source (an inline SVG drawn with `plotters`, its legend in HTML so
//! it covers nothing), each account's facts, allocations, bucket changes and collections actions
//! as small tables, and the evidence manifest. `maud` escapes every value: record fields are
//! data, never markup.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use plotters::prelude::*;
use serde_json::Value;
use servicing_ops::incident::{AccountImpact, Counts, IncidentReport, MoneyApplied};
use servicing_ops::money::minor;

/// The verdicts a minute's bar is stacked from, bottom up, with their colour and whether a
/// person must look at them. Everything routine is a shade of grey; red is kept for the
/// deliveries a person has to judge.
const VERDICTS: [Verdict; 7] = [
    Verdict::new("applied", "#525252", false, |c| c.applied),
    Verdict::new("duplicates absorbed", "#bdbdbd", false, |c| c.duplicates),
    Verdict::new("stale", "#8a8a8a", false, |c| c.stale),
    Verdict::new("parked", "#d9d9d9", false, |c| c.parked),
    Verdict::new("retried", "#737373", false, |c| c.retried),
    Verdict::new("quarantined", "#e6550d", true, |c| c.quarantined),
    Verdict::new("collisions", "#b2182b", true, |c| c.collisions),
];

struct Verdict {
    label: &'static str,
    colour: &'static str,
    needs_a_person: bool,
    of: fn(&Counts) -> u64,
}

impl Verdict {
    const fn new(
        label: &'static str,
        colour: &'static str,
        needs_a_person: bool,
        of: fn(&Counts) -> u64,
    ) -> Self {
        Self {
            label,
            colour,
            needs_a_person,
            of,
        }
    }

    fn rgb(&self) -> RGBColor {
        let hex = |i: usize| u8::from_str_radix(&self.colour[i..i + 2], 16).unwrap_or(0);
        RGBColor(hex(1), hex(3), hex(5))
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1100px}\
table{border-collapse:collapse;margin:0.4em 0 1.2em}\
td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
.person{color:#b2182b;font-weight:bold}\
.calm{color:#555}\
.legend span{display:inline-block;margin-right:1.2em;font-size:13px}\
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}\
.bar{display:inline-block;height:10px;vertical-align:middle}\
pre{font-size:12px;white-space:pre-wrap;margin:0}";

pub fn render(report: &IncidentReport) -> anyhow::Result<String> {
    let title = format!("Incident {} .. {}", report.window.from, report.window.to);
    let per_minute = per_minute_chart(report)?;
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                (summary(report))
                (needs_a_person(report))
                h2 { "Money by currency" }
                (money_by_currency(report))
                h2 { "Decisions per minute, by source and verdict" }
                (legend(report))
                (PreEscaped(per_minute))
                h2 { "Money by account" }
                (money_by_account(report))
                h2 { "Accounts" }
                @for account in &report.accounts {
                    (account_section(account))
                }
                h2 { "Evidence manifest" }
                pre id="manifest" { (serde_json::to_string_pretty(&report.manifest)?) }
            }
        }
    };
    Ok(page.into_string())
}

fn summary(report: &IncidentReport) -> Markup {
    let t = &report.totals;
    let c = &t.counts;
    html! {
        p {
            "Consumer " b { (report.filters.consumer) }
            @if let Some(source) = &report.filters.source_system { ", source " b { (source) } }
            @if let Some(account) = &report.filters.account_id { ", account " b { (account) } }
            ". " (t.accounts_touched) " accounts touched, " (c.deliveries) " deliveries: "
            (c.applied) " applied, " (c.duplicates) " duplicates absorbed, "
            (flagged(c.collisions, "collisions")) ", " (c.stale) " stale, " (c.parked) " parked, "
            (flagged(c.quarantined, "quarantined")) ", " (c.retried) " retried; "
            (t.unique_facts) " unique facts; "
            (flagged(t.suspected_duplicates, "suspected duplicates"))
            " under different identities (for a person to decide; nothing was reversed)."
        }
    }
}

/// `n label`, in the colour that asks for a person only when there is something to look at.
fn flagged(n: u64, label: &str) -> Markup {
    html! {
        @if n > 0 { span.person { (n) " " (label) } } @else { (n) " " (label) }
    }
}

fn needs_a_person(report: &IncidentReport) -> Markup {
    let t = &report.totals;
    let nothing = t.counts.collisions == 0
        && t.counts.quarantined == 0
        && t.suspected_duplicates == 0
        && t.suspected_duplicates_checked_from.is_none();
    html! {
        @if nothing {
            p.calm { "Nothing here needs a person: no collisions, no quarantined deliveries, no suspected duplicates." }
        }
        @if let Some(from) = &t.suspected_duplicates_checked_from {
            p.person {
                "Suspected duplicates were looked for only among payments applied from " (from)
                ": the records given do not reach back over the " (report.filters.lookback_minutes)
                "-minute lookback."
            }
        }
        @if !report.suspected_duplicates.is_empty() {
            h2.person { "Suspected duplicates under different identities" }
            table {
                tr { th { "account" } th.n { "amount" } th { "event time" } th { "first" } th { "second" } }
                @for s in &report.suspected_duplicates {
                    tr {
                        td { (s.account_id) }
                        td.n { (minor(s.amount_minor)) " " (s.currency.as_deref().unwrap_or_default()) }
                        td { (s.event_time.as_deref().unwrap_or_default()) }
                        td { (s.first) " (" (s.first_decided_at) ")" }
                        td { (s.second) " (" (s.second_decided_at) ")" }
                    }
                }
            }
        }
    }
}

fn money_by_currency(report: &IncidentReport) -> Markup {
    html! {
        table {
            tr { th { "currency" } th.n { "applied" } th.n { "reversed" } th.n { "duplicates absorbed" } }
            @for (currency, money) in &report.totals.by_currency {
                @let get = |k: &str| minor(money.get(k).copied().unwrap_or_default());
                tr {
                    td { (currency) }
                    td.n { (get("appliedAmountMinor")) }
                    td.n { (get("reversedAmountMinor")) }
                    td.n { (get("duplicateAmountMinor")) }
                }
            }
        }
    }
}

/// The verdicts the chart draws: a colour is explained only where it is on the page.
fn legend(report: &IncidentReport) -> Markup {
    html! {
        p.legend {
            @for v in VERDICTS.iter().filter(|v| report.per_minute.iter().any(|m| (v.of)(&m.counts) > 0)) {
                span.person[v.needs_a_person] {
                    span.swatch style={ "background:" (v.colour) } {} (v.label)
                }
            }
        }
    }
}

/// Every account, labelled, the largest money first: applied, reversed and absorbed duplicates
/// with a bar to the scale of the largest.
fn money_by_account(report: &IncidentReport) -> Markup {
    let mut accounts: Vec<&AccountImpact> = report.accounts.iter().collect();
    let moved = |a: &AccountImpact| a.counts.applied_amount_minor + a.counts.duplicate_amount_minor;
    accounts.sort_by(|a, b| {
        moved(b)
            .cmp(&moved(a))
            .then(a.account_id.cmp(&b.account_id))
    });
    let top = accounts.iter().map(|a| moved(a)).max().unwrap_or(0).max(1);
    let width = |amount: i64| format!("width:{}px", (amount.max(0) * 240 / top).max(0));
    html! {
        table {
            tr {
                th { "account" } th { "currency" } th.n { "applied" } th.n { "reversed" }
                th.n { "duplicates absorbed" } th { "applied | absorbed" }
            }
            @for a in accounts {
                @let c = &a.counts;
                tr {
                    td { (a.account_id) }
                    td { (a.currency.as_deref().unwrap_or_default()) }
                    td.n { (minor(c.applied_amount_minor)) }
                    td.n { (minor(c.reversed_amount_minor)) }
                    td.n { (minor(c.duplicate_amount_minor)) }
                    td {
                        span.bar style={ "background:#525252;" (width(c.applied_amount_minor)) } {}
                        span.bar style={ "background:#bdbdbd;" (width(c.duplicate_amount_minor)) } {}
                    }
                }
            }
        }
    }
}

fn account_section(a: &AccountImpact) -> Markup {
    let c = &a.counts;
    let currency = a.currency.as_deref().unwrap_or_default();
    html! {
        h3 { (a.account_id) }
        p {
            (c.deliveries) " deliveries: " (c.applied) " applied, " (c.duplicates) " duplicates, "
            (flagged(c.collisions, "collisions")) ", " (flagged(c.quarantined, "quarantined"))
            "; applied " (minor(c.applied_amount_minor)) ", reversed " (minor(c.reversed_amount_minor))
            ", duplicates absorbed " (minor(c.duplicate_amount_minor)) " " (currency)
        }
        table {
            tr {
                th { "decided at" } th { "source" } th { "event" } th { "type" } th.n { "amount" }
                th { "verdict" } th { "decided by" } th.n { "receive" }
            }
            @for f in &a.facts {
                @let person = matches!(f.verdict.as_str(), "collision" | "quarantined")
                    || matches!(f.outcome.as_deref(), Some("collision" | "quarantined"));
                tr {
                    td { (f.decided_at) }
                    td { (f.source_system.as_deref().unwrap_or_default()) }
                    td { (f.source_event_id.as_deref().unwrap_or_default()) }
                    td { (f.event_type.as_deref().unwrap_or_default()) }
                    td.n { (f.amount_minor.map(minor).unwrap_or_default()) }
                    td.person[person] {
                        (f.verdict)
                        @if let Some(outcome) = &f.outcome { " → " (outcome) }
                    }
                    td { (f.decided_by) }
                    td.n { (f.receive_count.map(|n| n.to_string()).unwrap_or_default()) }
                }
            }
        }
        (allocations(&a.money_applied))
        @if !a.collisions_found.is_empty() {
            p.person { "Collisions: the identity was reused with another payload (quarantined, never applied)" }
            table {
                tr { th { "fact" } th { "received" } th { "stored" } }
                @for collision in &a.collisions_found {
                    tr {
                        td { (collision.source_system) "/" (collision.source_event_id) }
                        td { pre { (pretty(&collision.received)) } }
                        td { pre { (collision.stored.as_ref().map(pretty).unwrap_or_else(|| "not found".into())) } }
                    }
                }
            }
        }
        @if !a.bucket_changes.is_empty() {
            p { "Delinquency bucket changes" }
            table {
                tr { th { "occurred at" } th { "from" } th { "to" } th.n { "DPD" } th { "trigger" } th { "by the fact" } }
                @for change in &a.bucket_changes {
                    tr {
                        td { (text(change, "occurredAt")) }
                        td { (text(change, "fromBucket")) }
                        td { (text(change, "toBucket")) }
                        td.n { (text(change, "dpd")) }
                        td { (text(change, "trigger")) }
                        td { (text(change, "triggerSourceSystem")) "/" (text(change, "triggerSourceEventId")) }
                    }
                }
            }
        }
        @if !a.other_consumers.is_empty() {
            p { "What the other consumers decided on it (collections, the ledger)" }
            table {
                tr { th { "consumer" } th { "verdict" } th.n { "decisions" } }
                @for (consumer, verdicts) in &a.other_consumers {
                    @for (verdict, n) in verdicts {
                        tr {
                            td { (consumer) }
                            td.person[matches!(verdict.as_str(), "collision" | "quarantined")] { (verdict) }
                            td.n { (n) }
                        }
                    }
                }
            }
        }
        @if !a.collections_actions.is_empty() {
            p { "Collections actions" }
            table {
                tr { th { "action" } th { "created at" } th { "status" } th.n { "attempts" } }
                @for action in &a.collections_actions {
                    tr {
                        td { (action.action_id) }
                        td { (action.created_at) }
                        td { (action.status) }
                        td.n { (action.attempts) }
                    }
                }
            }
        }
    }
}

/// A payment's stored split, one row per payment (`split` as the report builds it:
/// `{allocation: {fees, interest, principal, credit}, installmentsPaid, appliedOn}`).
fn allocations(money: &[MoneyApplied]) -> Markup {
    html! {
        @if !money.is_empty() {
            p { "Payments applied and their allocation" }
            table {
                tr {
                    th { "payment" } th.n { "amount" } th { "applied on" } th.n { "fees" }
                    th.n { "interest" } th.n { "principal" } th.n { "credit" }
                    th { "installments paid" } th { "reversed by" }
                }
                @for m in money {
                    @let split = m.split.as_ref();
                    @let part = |k: &str| split
                        .and_then(|s| s["allocation"][k].as_i64())
                        .map(minor)
                        .unwrap_or_default();
                    tr {
                        td { (m.source_system) "/" (m.source_event_id) }
                        td.n { (minor(m.amount_minor)) " " (m.currency.as_deref().unwrap_or_default()) }
                        td { (split.map(|s| text(s, "appliedOn")).unwrap_or_default()) }
                        td.n { (part("fees")) }
                        td.n { (part("interest")) }
                        td.n { (part("principal")) }
                        td.n { (part("credit")) }
                        td { (split.map(installments_paid).unwrap_or_default()) }
                        td {
                            @if let Some(by) = &m.reversed_by {
                                (text(by, "sourceSystem")) "/" (text(by, "sourceEventId"))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `#1 120.00, #2 40.00`: the installments a payment paid, by number.
fn installments_paid(split: &Value) -> String {
    split["installmentsPaid"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "#{} {}",
                i["installmentNo"].as_u64().unwrap_or_default(),
                minor(i["amountMinor"].as_i64().unwrap_or_default())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A field of a JSON object as text: strings bare, anything else as JSON, absent as nothing.
fn text(value: &Value, key: &str) -> String {
    match &value[key] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// Minutes drawn at most: a window longer than two days is drawn over its minutes with data.
const MAX_MINUTES: i64 = 2 * 24 * 60;

/// Every minute from the first with data to the last (silent minutes count zero), or only those
/// with data when that would be too many.
fn minutes_of(report: &IncidentReport) -> Vec<String> {
    let parse = |m: &str| chrono::NaiveDateTime::parse_from_str(m, "%Y-%m-%dT%H:%MZ").ok();
    let mut with_data: Vec<&str> = report
        .per_minute
        .iter()
        .map(|m| m.minute.as_str())
        .collect();
    with_data.sort_unstable();
    with_data.dedup();
    let (Some(first), Some(last)) = (
        with_data.first().and_then(|m| parse(m)),
        with_data.last().and_then(|m| parse(m)),
    ) else {
        return with_data.into_iter().map(str::to_owned).collect();
    };
    let span = (last - first).num_minutes();
    if span > MAX_MINUTES {
        return with_data.into_iter().map(str::to_owned).collect();
    }
    (0..=span)
        .map(|i| {
            (first + chrono::Duration::minutes(i))
                .format("%Y-%m-%dT%H:%MZ")
                .to_string()
        })
        .collect()
}

/// Height of one source's row of bars, and of the shared minute axis under the last row.
const ROW_HEIGHT: u32 = 90;
const AXIS_HEIGHT: u32 = 30;

/// One row per source, a bar per minute stacked by verdict (`VERDICTS`), every row on the same
/// scale so that rows compare; the source's name on its row.
fn per_minute_chart(report: &IncidentReport) -> anyhow::Result<String> {
    let minutes = minutes_of(report);
    let index: BTreeMap<&str, usize> = minutes
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let mut rows: BTreeMap<&str, Vec<Counts>> = BTreeMap::new();
    for m in &report.per_minute {
        if let Some(&x) = index.get(m.minute.as_str()) {
            rows.entry(m.source_system.as_str())
                .or_insert_with(|| vec![Counts::default(); minutes.len()])[x] = m.counts.clone();
        }
    }
    let stacked = |c: &Counts| VERDICTS.iter().map(|v| (v.of)(c)).sum::<u64>();
    let top = rows
        .values()
        .flatten()
        .map(stacked)
        .max()
        .unwrap_or(1)
        .max(1);
    let width = minutes.len().max(1) as u32;
    let height = ROW_HEIGHT * rows.len().max(1) as u32 + AXIS_HEIGHT;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let last = rows.len().saturating_sub(1);
        for (i, (source, counts)) in rows.iter().enumerate() {
            // The minute labels hang below the last row only: the rows share them.
            let below = if i == last { AXIS_HEIGHT } else { 0 };
            let area = root
                .clone()
                .shrink((0, ROW_HEIGHT * i as u32), (900, ROW_HEIGHT + below));
            let mut chart = ChartBuilder::on(&area)
                .margin_top(6)
                .margin_right(10)
                .x_label_area_size(below)
                .y_label_area_size(140)
                .build_cartesian_2d(0..width, 0..top)
                .map_err(draw)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_labels(3)
                .y_desc(source.to_string())
                .axis_desc_style(("sans-serif", 15))
                .label_style(("sans-serif", 12))
                .x_labels(12.min(minutes.len()).max(1))
                .x_label_formatter(&|x| {
                    minutes
                        .get(*x as usize)
                        .map(|m| m.get(11..16).unwrap_or(m).to_owned())
                        .unwrap_or_default()
                })
                .light_line_style(WHITE)
                .draw()
                .map_err(draw)?;
            for (x, c) in counts.iter().enumerate() {
                let mut floor = 0;
                for v in &VERDICTS {
                    let n = (v.of)(c);
                    if n == 0 {
                        continue;
                    }
                    let x = x as u32;
                    let mut bar =
                        Rectangle::new([(x, floor), (x + 1, floor + n)], v.rgb().filled());
                    bar.set_margin(0, 0, 1, 1);
                    chart.draw_series(std::iter::once(bar)).map_err(draw)?;
                    floor += n;
                }
            }
        }
        root.present().map_err(draw)?;
    }
    Ok(svg)
}

fn draw<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the chart: {e:?}")
}
