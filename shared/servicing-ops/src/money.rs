//! Money reconciliation (`ledgerctl reconcile --money`): every API payment answered 202 has its
//! fact applied; applied payments less reversals by source, currency and business date,
//! compared with a provider's settlement totals when given, each variance explained by the
//! facts that make it — payments not applied (parked, quarantined, unclaimed) and suspected
//! duplicates under different identities (same account, amount, currency and time: flagged for
//! a person, never reversed automatically).
//!
//! Read from the facts' records (`ClaimRecord`: a payment's `PaymentApplied` event carries its
//! allocation, a reversal's `PaymentReversed` its amount) and the API's idempotency records
//! (each accepted one carries the `PAYMENT_SETTLED` it sent): one scan pass.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use servicing_domain::outbox::detail_types;
use servicing_domain::{SourceRef, StoredAllocation};
use servicing_store::schema::{self, ActionItem, ClaimRecord, IdempotencyRecord, OutboxEvent};
use servicing_store::{ServicingStore, StoreConfig};

use crate::scan_types;

/// Applied payments and reversals of one source, currency and business date.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub payments: u64,
    pub applied_minor: i64,
    pub reversals: u64,
    pub reversed_minor: i64,
}

impl Totals {
    pub fn net_minor(&self) -> i64 {
        self.applied_minor - self.reversed_minor
    }
}

/// `(sourceSystem, currency, business date)`.
pub type Key = (String, String, NaiveDate);

/// An API payment answered 202 whose fact is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    pub operation_id: String,
    pub fact: SourceRef,
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    /// What the table says of its fact: `no record`, `PARKED`, `REJECTED`, `STALE`.
    pub state: String,
    /// Accepted within the grace period: still on its way (listed, not a problem).
    pub in_flight: bool,
}

/// Two applied payments with one content key (account, amount, currency, time) under
/// different identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuspectedDuplicate {
    /// Applied first (by `claimedAt`).
    pub first: SourceRef,
    pub second: SourceRef,
    /// When the second was applied (epoch s).
    pub second_claimed_at: i64,
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub occurred_at: String,
}

/// A collections action not settled (`PENDING`, or `SENDING` with no one left to finish it)
/// longer than the grace: a customer notice that is not going out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckAction {
    pub action_id: String,
    pub account_id: String,
    pub event_id: String,
    pub status: String,
    pub attempts: u64,
    pub age_secs: i64,
}

/// How long things may take before they are named as problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grace {
    /// An accepted API payment is in flight this long (the relay and the queue deliver it).
    pub accepted_secs: i64,
    /// A collections action may stay unsettled this long (its retries included).
    pub action_secs: i64,
}

impl Default for Grace {
    fn default() -> Self {
        Self {
            accepted_secs: 15 * 60,
            action_secs: 60 * 60,
        }
    }
}

/// A provider's settlement total for one source, date and currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub key: Key,
    pub total_minor: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoneyReconciliation {
    pub accepted: u64,
    pub not_applied: Vec<NotApplied>,
    pub totals: BTreeMap<Key, Totals>,
    pub suspected_duplicates: Vec<SuspectedDuplicate>,
    /// Per settlement line: the table's net minus the provider's total.
    pub variances: Vec<(Settlement, i64)>,
    /// Parked facts ready (their awaited fact applied) and not released past
    /// `parked::READY_GRACE_SECS` (`ParkedView::line`).
    pub ready_too_long: Vec<String>,
    pub stuck_actions: Vec<StuckAction>,
    /// Items that do not decode (also in `problems`): the reconciliation cannot vouch for them.
    pub unreadable: Vec<String>,
    pub problems: Vec<String>,
}

impl MoneyReconciliation {
    fn unreadable_item(&mut self, problem: String) {
        self.problems.push(problem.clone());
        self.unreadable.push(problem);
    }

    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "API payments accepted: {}, not applied: {} ({} still in flight)",
            self.accepted,
            self.not_applied.len(),
            self.not_applied.iter().filter(|n| n.in_flight).count()
        )];
        for n in &self.not_applied {
            out.push(format!(
                "  {} operation {} ({}) on {}: {} {} — {}",
                if n.in_flight {
                    "in flight"
                } else {
                    "NOT APPLIED"
                },
                n.operation_id,
                n.fact,
                n.account_id,
                minor(n.amount_minor),
                n.currency,
                n.state
            ));
        }
        for ((source, currency, date), t) in &self.totals {
            out.push(format!(
                "{source} {currency} {date}: {} payments {} - {} reversals {} = {}",
                t.payments,
                minor(t.applied_minor),
                t.reversals,
                minor(t.reversed_minor),
                minor(t.net_minor())
            ));
        }
        for (s, variance) in &self.variances {
            let (source, currency, date) = &s.key;
            out.push(format!(
                "settlement {source} {currency} {date}: provider {} vs applied {} — variance {}{}",
                minor(s.total_minor),
                minor(s.total_minor + variance),
                if *variance > 0 { "+" } else { "" },
                minor(*variance)
            ));
        }
        for d in &self.suspected_duplicates {
            out.push(format!(
                "  suspected duplicate on {}: {} and {} both {} {} at {} (for a person to judge; nothing is reversed)",
                d.account_id,
                d.first,
                d.second,
                minor(d.amount_minor),
                d.currency,
                d.occurred_at
            ));
        }
        out.push(format!(
            "parked facts ready but not released: {}; collections actions stuck: {}",
            self.ready_too_long.len(),
            self.stuck_actions.len()
        ));
        out.extend(self.problems.iter().map(|p| format!("PROBLEM: {p}")));
        out.push(
            if self.holds() {
                "money reconciles"
            } else {
                "money does NOT reconcile"
            }
            .into(),
        );
        out
    }
}

/// Minor units as a decimal with two places (every contract currency has two).
pub fn minor(amount: i64) -> String {
    let sign = if amount < 0 { "-" } else { "" };
    format!(
        "{sign}{}.{:02}",
        amount.unsigned_abs() / 100,
        amount.unsigned_abs() % 100
    )
}

/// A settlement file: CSV lines `source,date,currency,total` (total in major units with two
/// decimals, e.g. `10000.00`); a header line starting with `source` is skipped.
pub fn parse_settlement(csv: &str) -> anyhow::Result<Vec<Settlement>> {
    let mut out = Vec::new();
    for (n, line) in csv.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("source") {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [source, date, currency, total] = fields[..] else {
            anyhow::bail!(
                "settlement line {}: expected source,date,currency,total",
                n + 1
            );
        };
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d")
            .map_err(|e| anyhow::anyhow!("settlement line {}: date {date:?}: {e}", n + 1))?;
        let (units, cents) = total.split_once('.').unwrap_or((total, "00"));
        let total_minor = units
            .parse::<i64>()
            .ok()
            .zip(
                (cents.len() == 2)
                    .then(|| cents.parse::<i64>().ok())
                    .flatten(),
            )
            .and_then(|(u, c)| u.checked_mul(100).and_then(|u| u.checked_add(c)))
            .ok_or_else(|| anyhow::anyhow!("settlement line {}: total {total:?}", n + 1))?;
        out.push(Settlement {
            key: (source.to_owned(), currency.to_owned(), date),
            total_minor,
        });
    }
    Ok(out)
}

/// Reconciles the money of `table` at `now` (epoch s): API payments accepted longer than the
/// grace ago must be applied, actions unsettled past theirs are stuck, ready parked facts must
/// have been released. One scan pass, plus the loan items that hold parked facts.
pub async fn reconcile_money(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    settlement: &[Settlement],
    now: i64,
    grace: Grace,
) -> anyhow::Result<MoneyReconciliation> {
    let grace_secs = grace.accepted_secs;
    let mut items = scan_types(
        client,
        table,
        &[
            ClaimRecord::ITEM_TYPE,
            IdempotencyRecord::ITEM_TYPE,
            ActionItem::ITEM_TYPE,
        ],
    )
    .await?;
    let mut report = MoneyReconciliation::default();
    let mut claims: BTreeMap<SourceRef, ClaimRecord> = BTreeMap::new();
    for item in items.remove(ClaimRecord::ITEM_TYPE).unwrap_or_default() {
        match schema::from_item::<ClaimRecord>(item) {
            Ok(claim) if claim.consumer == "account-state" => {
                claims.insert(claim.source(), claim);
            }
            Ok(_) => {}
            Err(e) => report.unreadable_item(format!("a fact's record does not decode: {e}")),
        }
    }

    // Every accepted API payment has its fact applied.
    for item in items
        .remove(IdempotencyRecord::ITEM_TYPE)
        .unwrap_or_default()
    {
        let record: IdempotencyRecord = match schema::from_item(item) {
            Ok(r) => r,
            Err(e) => {
                report.unreadable_item(format!("an idempotency record does not decode: {e}"));
                continue;
            }
        };
        if record.response_status != 202 {
            continue;
        }
        report.accepted += 1;
        let events = OutboxEvent::decode(record.outbox.as_deref()).unwrap_or_default();
        let Some(detail) = events.first().map(|e| &e.detail) else {
            report.unreadable_item(format!(
                "accepted command {} carries no event to apply",
                record.idempotency_key
            ));
            continue;
        };
        let text = |k: &str| detail[k].as_str().unwrap_or_default().to_owned();
        let fact = SourceRef {
            system: text("sourceSystem"),
            event_id: text("sourceEventId"),
        };
        let state = match claims.get(&fact) {
            Some(c) if c.verdict == "APPLIED" => continue,
            Some(c) => c.verdict.clone(),
            None => {
                "no record (never applied: check the relay's and account-state's quarantine)".into()
            }
        };
        let missing = NotApplied {
            operation_id: text("eventId"),
            fact,
            account_id: text("accountId"),
            amount_minor: detail["amountMinor"].as_i64().unwrap_or_default(),
            currency: text("currency"),
            state,
            in_flight: now - record.created_at < grace_secs,
        };
        if !missing.in_flight {
            report.problems.push(format!(
                "API payment {} ({}) of {} {} on {} was accepted but is not applied",
                missing.operation_id,
                missing.fact,
                minor(missing.amount_minor),
                missing.currency,
                missing.account_id
            ));
        }
        report.not_applied.push(missing);
    }

    // Applied payments less reversals, by source, currency and business date.
    let mut by_content: BTreeMap<(String, i64, String, String), SourceRef> = BTreeMap::new();
    // In the order they were applied: the first of a pair is the one applied first.
    let mut applied: Vec<&ClaimRecord> =
        claims.values().filter(|c| c.verdict == "APPLIED").collect();
    applied.sort_by_key(|c| (c.claimed_at, c.source()));
    for claim in applied {
        let Ok(events) = claim.events() else {
            report.unreadable_item(format!("the events of {} do not decode", claim.source()));
            continue;
        };
        for event in events {
            let detail = &event.detail;
            if event.detail_type == detail_types::PAYMENT_APPLIED {
                let Some(StoredAllocation {
                    amount_minor,
                    currency,
                    applied_on,
                    ..
                }) = servicing_domain::outbox::payment_allocation(detail)
                else {
                    report.unreadable_item(format!(
                        "the PaymentApplied of {} does not decode",
                        claim.source()
                    ));
                    continue;
                };
                let t = report
                    .totals
                    .entry((
                        claim.source_system.clone(),
                        currency.as_str().to_owned(),
                        applied_on,
                    ))
                    .or_default();
                t.payments += 1;
                t.applied_minor += amount_minor;
                let content = (
                    claim.account_id.clone(),
                    amount_minor,
                    currency.as_str().to_owned(),
                    detail["occurredAt"].as_str().unwrap_or_default().to_owned(),
                );
                if let Some(first) = by_content.get(&content) {
                    report.suspected_duplicates.push(SuspectedDuplicate {
                        first: first.clone(),
                        second: claim.source(),
                        second_claimed_at: claim.claimed_at,
                        account_id: content.0.clone(),
                        amount_minor,
                        currency: content.2.clone(),
                        occurred_at: content.3.clone(),
                    });
                } else {
                    by_content.insert(content, claim.source());
                }
            } else if event.detail_type == detail_types::PAYMENT_REVERSED {
                let date = detail["occurredAt"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&chrono::Utc).date_naive());
                let (Some(date), Some(amount)) = (date, detail["amountMinor"].as_i64()) else {
                    report.unreadable_item(format!(
                        "the PaymentReversed of {} does not decode",
                        claim.source()
                    ));
                    continue;
                };
                let currency = detail["currency"].as_str().unwrap_or_default().to_owned();
                let t = report
                    .totals
                    .entry((claim.source_system.clone(), currency, date))
                    .or_default();
                t.reversals += 1;
                t.reversed_minor += amount;
            }
        }
    }

    // Collections actions that should have settled by now.
    for item in items.remove(ActionItem::ITEM_TYPE).unwrap_or_default() {
        let action: ActionItem = match schema::from_item(item) {
            Ok(a) => a,
            Err(e) => {
                report.unreadable_item(format!("an action item does not decode: {e}"));
                continue;
            }
        };
        let age_secs = now - action.created_at;
        // SENDING holds a lease: stuck only once the lease has run out.
        let leased = action.status == "SENDING"
            && action.lease_until.is_some_and(|until| until > now * 1000);
        if matches!(action.status.as_str(), "PENDING" | "SENDING")
            && !leased
            && age_secs > grace.action_secs
        {
            report.problems.push(format!(
                "collections action {} on {} ({}) is {} after {} attempts, {} min old",
                action.action_id,
                action.account_id,
                action.event_id,
                action.status,
                action.attempts,
                age_secs / 60
            ));
            report.stuck_actions.push(StuckAction {
                action_id: action.action_id,
                account_id: action.account_id,
                event_id: action.event_id,
                status: action.status,
                attempts: action.attempts,
                age_secs,
            });
        }
    }

    // Parked facts whose awaited fact applied, never released.
    let store = ServicingStore::new(client.clone(), StoreConfig::new(table, "account-state"));
    for view in crate::parked::list(&store).await? {
        if view.fact.awaits.is_none() && now - view.fact.parked_at > crate::parked::READY_GRACE_SECS
        {
            report.problems.push(format!(
                "a parked fact is ready but not released: {}",
                view.line()
            ));
            report.ready_too_long.push(view.line());
        }
    }

    // A provider's totals: a variance is a problem, explained by the facts listed above.
    for s in settlement {
        let net = report.totals.get(&s.key).map_or(0, Totals::net_minor);
        let variance = net - s.total_minor;
        if variance != 0 {
            let (source, currency, date) = &s.key;
            report.problems.push(format!(
                "{source} {currency} {date}: applied net {} differs from the settlement's {} by {}",
                minor(net),
                minor(s.total_minor),
                minor(variance)
            ));
        }
        report.variances.push((s.clone(), variance));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_a_settlement_file_is_read_should_take_totals_in_minor_units() {
        let parsed =
            parse_settlement("source,date,currency,total\nprov-a,2026-11-02,EUR,10000.00\n")
                .expect("parsed");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].total_minor, 1_000_000);
        assert!(
            parse_settlement("prov-a,2026-11-02,EUR,10.5").is_err(),
            "two decimals"
        );
        assert!(parse_settlement("prov-a,2026-11-02,EUR").is_err());
        assert_eq!(minor(-25_050), "-250.50");
    }
}
