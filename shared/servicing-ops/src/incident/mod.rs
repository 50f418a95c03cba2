//! Incident reconstruction (`ledgerctl incident`): "between T1 and T2 source S redelivered —
//! which accounts were touched, was anything doubled or suppressed falsely, what money moved?"
//!
//! Built from the decision records of the window (`records`) and, when a table is given, what
//! it stores for those facts (`stored`): per account each delivery with its verdict, the
//! duplicates absorbed, the collisions with both payloads, the money applied with its split,
//! the bucket changes and the collections actions; suspected duplicates under different
//! identities (same content key: flagged for a person, never reversed); totals; a manifest of
//! the inputs. The form is `docs/incident-report.schema.json`.

pub mod records;
pub mod stored;

mod build;

pub use build::{Query, report};
pub use records::{Collected, Input, Timed};
pub use stored::{Stored, Wanted};

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The version of the report's form (`reportVersion`).
pub const INCIDENT_REPORT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IncidentReport {
    pub report_version: u32,
    pub window: Window,
    pub filters: Filters,
    pub accounts: Vec<AccountImpact>,
    /// Every account's suspected duplicates, together.
    pub suspected_duplicates: Vec<SuspectedDuplicate>,
    /// Undecodable deliveries: no account to attribute them to.
    pub unattributed: Vec<Delivery>,
    pub totals: Totals,
    /// Deliveries and duplicates per minute and source (the chart's data).
    pub per_minute: Vec<MinuteCount>,
    pub manifest: Manifest,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filters {
    pub consumer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// How far before the window applied payments are compared for suspected duplicates.
    pub lookback_minutes: i64,
}

/// Counts of one account, one source, or all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Deliveries handled (a parked fact judged again is no new delivery: see `released`).
    pub deliveries: u64,
    /// Facts applied (a released fact applied included).
    pub applied: u64,
    pub duplicates: u64,
    pub collisions: u64,
    pub stale: u64,
    pub parked: u64,
    pub released: u64,
    pub quarantined: u64,
    pub retried: u64,
    /// Payments applied, minor units (reversals are in `reversedAmountMinor`).
    pub applied_amount_minor: i64,
    pub reversed_amount_minor: i64,
    /// Payments recognised as duplicates (no money moved for them).
    pub duplicate_amount_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountImpact {
    pub account_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(flatten)]
    pub counts: Counts,
    /// Every delivery of the window, in order.
    pub facts: Vec<Delivery>,
    pub collisions_found: Vec<Collision>,
    /// The payments applied, with their split (from the table; `split` absent without it).
    pub money_applied: Vec<MoneyApplied>,
    pub bucket_changes: Vec<Value>,
    pub collections_actions: Vec<Action>,
    pub suspected_duplicates: Vec<SuspectedDuplicate>,
    /// Other consumers' decisions on the account (collections): counts by verdict.
    pub other_consumers: BTreeMap<String, BTreeMap<String, u64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The body named no readable account; the quarantine item of its message did.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub account_from_quarantine: bool,
    pub decided_at: String,
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    pub verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    pub decided_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// One identity asserted with two payloads: what was stored first, what arrived.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Collision {
    pub source_system: String,
    pub source_event_id: String,
    pub message_id: String,
    pub decided_at: String,
    /// The delivery's payload: its fingerprint and fields, the raw body when its quarantine
    /// item is found.
    pub received: Value,
    /// The first payload, as stored (absent without a table, or when its record expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoneyApplied {
    pub source_system: String,
    pub source_event_id: String,
    pub amount_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    pub decided_at: String,
    /// `{fees, interest, principal, credit}` and the installments it paid (from the table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reversed_by: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    pub action_id: String,
    pub event_id: String,
    pub status: String,
    pub attempts: u64,
    pub created_at: String,
}

/// Two applied payments with one content key (account, amount, currency, event time,
/// reference) under different identities: for a person to look at, never reversed here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SuspectedDuplicate {
    pub account_id: String,
    pub content_key: String,
    pub amount_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time: Option<String>,
    /// `sourceSystem/sourceEventId` of the first applied.
    pub first: String,
    pub first_decided_at: String,
    pub second: String,
    pub second_decided_at: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub accounts_touched: u64,
    #[serde(flatten)]
    pub counts: Counts,
    /// Distinct identities among the deliveries.
    pub unique_facts: u64,
    pub suspected_duplicates: u64,
    pub suspected_duplicate_amount_minor: i64,
    /// Set when the records given start after the lookback's start: applied payments were
    /// compared from this time only, and a zero above is not a clean one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspected_duplicates_checked_from: Option<String>,
    pub by_source: BTreeMap<String, Counts>,
    /// Money by currency: `{appliedAmountMinor, reversedAmountMinor, duplicateAmountMinor}`.
    pub by_currency: BTreeMap<String, BTreeMap<String, i64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MinuteCount {
    pub minute: String,
    pub source_system: String,
    /// The minute's decisions by verdict, counted as the totals count them.
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub generated_at: String,
    pub tool: String,
    pub tool_version: String,
    pub inputs: Vec<Input>,
    pub records_read: u64,
    pub records_selected: u64,
    pub skipped_lines: u64,
    pub repeated_lines: u64,
    pub records_without_time: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The selection and every read made, in words.
    pub queries: Vec<String>,
}

impl IncidentReport {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The few lines a terminal shows (the JSON or HTML holds the rest).
    pub fn summary(&self) -> Vec<String> {
        let t = &self.totals;
        let mut out = vec![format!(
            "incident {} .. {}: {} accounts, {} deliveries = {} applied + {} duplicates + {} collisions + {} other; {} suspected duplicates",
            self.window.from,
            self.window.to,
            t.accounts_touched,
            t.counts.deliveries,
            t.counts.applied,
            t.counts.duplicates,
            t.counts.collisions,
            t.counts
                .deliveries
                .saturating_sub(t.counts.applied + t.counts.duplicates + t.counts.collisions),
            t.suspected_duplicates
        )];
        if let Some(from) = &t.suspected_duplicates_checked_from {
            out.push(format!(
                "  suspected duplicates checked only among payments applied from {from}: the records given do not reach back over the {}-minute lookback",
                self.filters.lookback_minutes
            ));
        }
        for (currency, money) in &t.by_currency {
            out.push(format!(
                "  {currency}: applied {}, reversed {}, duplicates absorbed {}",
                crate::money::minor(money.get("appliedAmountMinor").copied().unwrap_or_default()),
                crate::money::minor(
                    money
                        .get("reversedAmountMinor")
                        .copied()
                        .unwrap_or_default()
                ),
                crate::money::minor(
                    money
                        .get("duplicateAmountMinor")
                        .copied()
                        .unwrap_or_default()
                ),
            ));
        }
        for s in &self.suspected_duplicates {
            out.push(format!(
                "  SUSPECTED DUPLICATE on {}: {} and {} ({} {})",
                s.account_id,
                s.first,
                s.second,
                crate::money::minor(s.amount_minor),
                s.currency.as_deref().unwrap_or_default()
            ));
        }
        out
    }
}

/// The report of `query` over `collected`, completed from `table` when one is given (the
/// records of the facts, the collisions' quarantine items, the accounts' actions).
pub async fn reconstruct(
    query: &Query,
    collected: &Collected,
    table: Option<(&aws_sdk_dynamodb::Client, &str)>,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<IncidentReport> {
    let stored = match table {
        Some((client, table)) => Some(stored::read(client, table, &query.wanted(collected)).await?),
        None => None,
    };
    Ok(report(query, collected, stored.as_ref(), now))
}
