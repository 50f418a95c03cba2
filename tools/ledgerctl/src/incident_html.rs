//! The incident report as one self-contained HTML page for the people who read it: totals,
//! two inline SVG charts (deliveries and duplicates per minute by source; money by account,
//! drawn with `plotters`), each account's facts, collisions and suspected duplicates, and the
//! evidence manifest. Everything is escaped: record fields are data, never markup.

use std::collections::BTreeMap;
use std::fmt::Write;

use plotters::prelude::*;
use servicing_ops::incident::IncidentReport;
use servicing_ops::money::minor;

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Accounts drawn in the money chart (the largest by money); the tables list every account.
const CHARTED_ACCOUNTS: usize = 25;

pub fn render(report: &IncidentReport) -> anyhow::Result<String> {
    let t = &report.totals;
    let mut html = String::new();
    let title = format!("Incident {} .. {}", report.window.from, report.window.to);
    writeln!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:0.5em 0 1.5em}}td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}}.flag{{color:#b00;font-weight:bold}}</style></head><body>",
        escape(&title)
    )?;
    writeln!(html, "<h1>{}</h1>", escape(&title))?;
    writeln!(
        html,
        "<p>Consumer <b>{}</b>{}{}. {} accounts touched, {} deliveries: {} applied, {} duplicates absorbed, {} collisions, {} stale, {} parked, {} quarantined, {} retried; {} unique facts; <span class=\"flag\">{} suspected duplicates</span> under different identities (for a person to decide; nothing was reversed).</p>",
        escape(&report.filters.consumer),
        report
            .filters
            .source_system
            .as_ref()
            .map(|s| format!(", source <b>{}</b>", escape(s)))
            .unwrap_or_default(),
        report
            .filters
            .account_id
            .as_ref()
            .map(|a| format!(", account <b>{}</b>", escape(a)))
            .unwrap_or_default(),
        t.accounts_touched,
        t.counts.deliveries,
        t.counts.applied,
        t.counts.duplicates,
        t.counts.collisions,
        t.counts.stale,
        t.counts.parked,
        t.counts.quarantined,
        t.counts.retried,
        t.unique_facts,
        t.suspected_duplicates
    )?;
    if let Some(from) = &t.suspected_duplicates_checked_from {
        writeln!(
            html,
            "<p class=\"flag\">Suspected duplicates were looked for only among payments applied from {}: the records given do not reach back over the {}-minute lookback.</p>",
            escape(from),
            report.filters.lookback_minutes
        )?;
    }
    html.push_str("<table><tr><th>currency</th><th>applied</th><th>reversed</th><th>duplicates absorbed</th></tr>\n");
    for (currency, money) in &t.by_currency {
        let get = |k: &str| minor(money.get(k).copied().unwrap_or_default());
        writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(currency),
            get("appliedAmountMinor"),
            get("reversedAmountMinor"),
            get("duplicateAmountMinor")
        )?;
    }
    html.push_str("</table>\n<h2>Deliveries and duplicates per minute, by source</h2>\n");
    html.push_str(&per_minute_chart(report)?);
    html.push_str("\n<h2>Money by account</h2>\n");
    html.push_str(&money_chart(report)?);
    if !report.suspected_duplicates.is_empty() {
        html.push_str("\n<h2 class=\"flag\">Suspected duplicates under different identities</h2>\n<table><tr><th>account</th><th>amount</th><th>event time</th><th>first</th><th>second</th></tr>\n");
        for s in &report.suspected_duplicates {
            writeln!(
                html,
                "<tr><td>{}</td><td>{} {}</td><td>{}</td><td>{} ({})</td><td>{} ({})</td></tr>",
                escape(&s.account_id),
                minor(s.amount_minor),
                escape(s.currency.as_deref().unwrap_or_default()),
                escape(s.event_time.as_deref().unwrap_or_default()),
                escape(&s.first),
                escape(&s.first_decided_at),
                escape(&s.second),
                escape(&s.second_decided_at)
            )?;
        }
        html.push_str("</table>\n");
    }
    html.push_str("<h2>Accounts</h2>\n");
    for a in &report.accounts {
        let c = &a.counts;
        writeln!(
            html,
            "<h3>{}</h3><p>{} deliveries: {} applied, {} duplicates, {} collisions; applied {} reversed {} duplicates {} {}</p>",
            escape(&a.account_id),
            c.deliveries,
            c.applied,
            c.duplicates,
            c.collisions,
            minor(c.applied_amount_minor),
            minor(c.reversed_amount_minor),
            minor(c.duplicate_amount_minor),
            escape(a.currency.as_deref().unwrap_or_default())
        )?;
        html.push_str("<table><tr><th>decided at</th><th>source</th><th>event</th><th>type</th><th>amount</th><th>verdict</th><th>decided by</th><th>receive</th></tr>\n");
        for f in &a.facts {
            writeln!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td></tr>",
                escape(&f.decided_at),
                escape(f.source_system.as_deref().unwrap_or_default()),
                escape(f.source_event_id.as_deref().unwrap_or_default()),
                escape(f.event_type.as_deref().unwrap_or_default()),
                f.amount_minor.map(minor).unwrap_or_default(),
                escape(&f.verdict),
                f.outcome
                    .as_ref()
                    .map(|o| format!(" → {}", escape(o)))
                    .unwrap_or_default(),
                escape(&f.decided_by),
                f.receive_count.map(|n| n.to_string()).unwrap_or_default()
            )?;
        }
        html.push_str("</table>\n");
        for m in a.money_applied.iter().filter(|m| m.split.is_some()) {
            writeln!(
                html,
                "<p>{}/{}: {} split {}</p>",
                escape(&m.source_system),
                escape(&m.source_event_id),
                minor(m.amount_minor),
                escape(&m.split.as_ref().map(|s| s.to_string()).unwrap_or_default())
            )?;
        }
        for collision in &a.collisions_found {
            writeln!(
                html,
                "<p class=\"flag\">collision {}/{}: received {} — stored {}</p>",
                escape(&collision.source_system),
                escape(&collision.source_event_id),
                escape(&collision.received.to_string()),
                escape(
                    &collision
                        .stored
                        .as_ref()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "not found".into())
                )
            )?;
        }
        for change in &a.bucket_changes {
            writeln!(html, "<p>bucket change {}</p>", escape(&change.to_string()))?;
        }
        for action in &a.collections_actions {
            writeln!(
                html,
                "<p>collections action {} ({}): {} after {} attempts</p>",
                escape(&action.action_id),
                escape(&action.created_at),
                escape(&action.status),
                action.attempts
            )?;
        }
    }
    let manifest = serde_json::to_string_pretty(&report.manifest)?;
    writeln!(
        html,
        "<h2>Evidence manifest</h2>\n<pre id=\"manifest\">{}</pre>\n</body></html>",
        escape(&manifest)
    )?;
    Ok(html)
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

/// One line per source for deliveries, a fainter one for its duplicates, a point per minute.
fn per_minute_chart(report: &IncidentReport) -> anyhow::Result<String> {
    let minutes = minutes_of(report);
    let index: BTreeMap<&str, usize> = minutes
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    // Per source: its deliveries and its duplicates per minute index, zero where silent.
    let mut series: BTreeMap<&str, [Vec<u64>; 2]> = BTreeMap::new();
    for m in &report.per_minute {
        let Some(&x) = index.get(m.minute.as_str()) else {
            continue;
        };
        let entry = series
            .entry(m.source_system.as_str())
            .or_insert_with(|| [vec![0; minutes.len()], vec![0; minutes.len()]]);
        entry[0][x] += m.deliveries;
        entry[1][x] += m.duplicates;
    }
    let top = report
        .per_minute
        .iter()
        .map(|m| m.deliveries)
        .max()
        .unwrap_or(1)
        .max(1);
    let last = minutes.len().max(2) as i32 - 1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0..last, 0..top + 1)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("minute (UTC)")
            .y_desc("deliveries")
            .x_label_formatter(&|x| {
                minutes
                    .get(*x as usize)
                    .map(|m| m.get(11..16).unwrap_or(m).to_owned())
                    .unwrap_or_default()
            })
            .draw()
            .map_err(draw)?;
        for (i, (source, [deliveries, duplicates])) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            for (values, style, label) in [
                (deliveries, colour.stroke_width(2), "deliveries"),
                (duplicates, colour.mix(0.5).stroke_width(1), "duplicates"),
            ] {
                let points: Vec<(i32, u64)> = values
                    .iter()
                    .enumerate()
                    .map(|(x, &n)| (x as i32, n))
                    .collect();
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), style))
                    .map_err(draw)?
                    .label(format!("{source} {label}"))
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 2, style.filled())))
                    .map_err(draw)?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw)?;
        root.present().map_err(draw)?;
    }
    Ok(svg)
}

/// Applied and duplicate money per account (the largest first), side by side.
fn money_chart(report: &IncidentReport) -> anyhow::Result<String> {
    let mut accounts: Vec<(&str, i64, i64)> = report
        .accounts
        .iter()
        .map(|a| {
            (
                a.account_id.as_str(),
                a.counts.applied_amount_minor,
                a.counts.duplicate_amount_minor,
            )
        })
        .collect();
    accounts.sort_by(|a, b| (b.1 + b.2).cmp(&(a.1 + a.2)).then(a.0.cmp(b.0)));
    accounts.truncate(CHARTED_ACCOUNTS);
    let top = accounts
        .iter()
        .map(|a| a.1.max(a.2))
        .max()
        .unwrap_or(1)
        .max(1);
    let n = accounts.len().max(1) as i32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0..n * 3, 0..top + top / 10 + 1)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc("minor units")
            .x_labels(accounts.len().max(1))
            .x_label_formatter(&|x| {
                if x % 3 == 1 {
                    accounts
                        .get((*x / 3) as usize)
                        .map(|a| a.0.to_owned())
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(draw)?;
        let applied = COLOURS[0];
        let duplicate = COLOURS[3];
        chart
            .draw_series(accounts.iter().enumerate().map(|(i, a)| {
                let x = i as i32 * 3;
                Rectangle::new([(x, 0), (x + 1, a.1)], applied.filled())
            }))
            .map_err(draw)?
            .label("applied")
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 10, y + 4)], applied.filled()));
        chart
            .draw_series(accounts.iter().enumerate().map(|(i, a)| {
                let x = i as i32 * 3 + 1;
                Rectangle::new([(x, 0), (x + 1, a.2)], duplicate.filled())
            }))
            .map_err(draw)?
            .label("duplicates absorbed")
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 4), (x + 10, y + 4)], duplicate.filled())
            });
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw)?;
        root.present().map_err(draw)?;
    }
    Ok(svg)
}

fn draw<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the chart: {e:?}")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
