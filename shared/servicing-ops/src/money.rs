//! Money reconciliation (`ledgerctl reconcile --money`): every API payment answered 202 has its
//! fact applied; applied payments less reversals by source, currency and business date,
//! compared with a provider's settlement totals when given, each variance explained by the
//! facts that make it — payments not applied (parked, quarantined, unclaimed) and suspected
//! duplicates under different identities (same account, amount, currency and time: flagged for
//! a person, never reversed automatically).
//!
//! Read from the facts' records (`ClaimRecord`: a payment's `PaymentApplied` event carries its
//! allocation, a reversal's `PaymentReversed` its amount), through the record log: the totals
//! and suspected duplicates of the business dates on which the window's facts moved money, and
//! of the settlement's dates — each date whole, whenever its payments were applied — and from
//! the open index: the API's idempotency records not yet confirmed applied (each carries the
//! `PAYMENT_SETTLED` it sent) and the unsettled actions. Nothing is read by the table's size.
//!
//! Here the report's form, its lines and the settlement file; the reads that fill the report
//! are in `reconcile`.

mod reconcile;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use chrono::NaiveDate;
use servicing_domain::SourceRef;

pub use reconcile::{reconcile_dated_money, reconcile_money};

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

/// Takes the accepted API payments `report` found applied out of the open index, so the next
/// check reads only what is still open (the daily reconciler; `ledgerctl` only reads), 16 at a
/// time. Answers how many were confirmed and, one line each, those that could not be (they stay
/// open: the next run confirms them); a failure never stops the run's report.
pub async fn confirm_applied(
    store: &servicing_store::ServicingStore,
    report: &MoneyReconciliation,
) -> (u64, Vec<String>) {
    let closes = report.confirmed.iter().map(|key| async move {
        store
            .close_open(key.clone())
            .await
            .map_err(|e| format!("cannot confirm {} as applied (stays open): {e}", key.0))
    });
    let outcomes: Vec<Result<(), String>> = futures_util::StreamExt::collect(
        futures_util::StreamExt::buffer_unordered(futures_util::stream::iter(closes), 16),
    )
    .await;
    let problems: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    ((report.confirmed.len() - problems.len()) as u64, problems)
}

/// A provider's settlement total for one source, date and currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub key: Key,
    pub total_minor: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoneyReconciliation {
    /// Accepted API payments checked: the ones not yet confirmed applied (the open index; a
    /// payment leaves it once the daily run has seen it applied).
    pub accepted: u64,
    /// The keys of the idempotency records found applied, which [`confirm_applied`] takes out
    /// of the open index (the daily reconciler does; an operator's check only reads).
    pub confirmed: Vec<(String, String)>,
    pub not_applied: Vec<NotApplied>,
    pub totals: BTreeMap<Key, Totals>,
    /// The business dates totalled: every one on which the window's facts moved money, and the
    /// settlement's. Each is complete (all its payments, whenever applied); others are not read.
    pub dates: std::collections::BTreeSet<NaiveDate>,
    /// The window reconciled (epoch s, `[from, to)`).
    pub window: (i64, i64),
    /// The accounts whose facts were claimed in the window: servicing moved their balances,
    /// so the ledger's leg holds their sub-ledgers to them.
    pub window_accounts: std::collections::BTreeSet<String>,
    /// The accounts behind each key's totals (the ledger's leg names a key in flight by them).
    pub key_accounts: BTreeMap<Key, std::collections::BTreeSet<String>>,
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

    /// The suspected duplicates whose second payment was claimed at `since` or later. A pair
    /// stays in the table for good: it is news once, in the window that claimed it.
    pub fn suspected_since(&self, since: i64) -> usize {
        self.suspected_duplicates
            .iter()
            .filter(|d| d.second_claimed_at >= since)
            .count()
    }

    /// Whether the money holds for whoever asked: no problem, and no suspected duplicate new
    /// since `since` (a person judges it before anyone says the day reconciles; nothing is
    /// reversed). `ledgerctl reconcile --money` asks from its window's start, the daily run
    /// from its own window's.
    pub fn holds_since(&self, since: i64) -> bool {
        self.holds() && self.suspected_since(since) == 0
    }

    /// The totals of `key`, which `account`'s fact adds to (and so names among its accounts).
    fn totals_of(&mut self, key: Key, account: &str) -> &mut Totals {
        self.key_accounts
            .entry(key.clone())
            .or_default()
            .insert(account.to_owned());
        self.totals.entry(key).or_default()
    }

    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "API payments accepted and not yet confirmed applied: {}, not applied: {} ({} still in flight)",
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
        out.push(format!(
            "business dates totalled: {}",
            match (self.dates.first(), self.dates.last()) {
                (Some(first), Some(last)) if first == last => format!("{first}"),
                (Some(first), Some(last)) => format!("{} from {first} to {last}", self.dates.len()),
                _ => "none (no money moved in the window, no settlement given)".to_owned(),
            }
        ));
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
        let new_pairs = self.suspected_since(self.window.0);
        if new_pairs > 0 {
            out.push(format!(
                "NEEDS A PERSON: {new_pairs} suspected duplicate(s) claimed in the window"
            ));
        }
        out.push(
            if self.holds_since(self.window.0) {
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
