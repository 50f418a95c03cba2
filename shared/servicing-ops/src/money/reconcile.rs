//! What the money reconciliation reads, into a `MoneyReconciliation`: the accepted API payments
//! not yet confirmed and the unsettled actions from the open index (with their facts' records
//! by key), the parked facts, and — through the record log — the records of the business dates
//! to total: the totals by source, currency and date and the suspected duplicates. Separate
//! from the report's form: this is the part that reads the table.

use std::collections::BTreeMap;

use servicing_domain::outbox::detail_types;
use servicing_domain::{Fingerprint, ServicingEvent, SourceRef, StoredAllocation};
use servicing_store::items;
use servicing_store::open::OpenKind;
use servicing_store::schema::{self, ActionItem, ClaimRecord, IdempotencyRecord, OutboxEvent};
use servicing_store::{ServicingStore, StoreConfig};

use super::{
    Grace, MoneyReconciliation, NotApplied, Settlement, StuckAction, SuspectedDuplicate, Totals,
    minor,
};
use servicing_store::APPLIER;
use servicing_store::record_log::money_dates;

/// Reconciles the money of `table` at `now` (epoch s): API payments accepted longer than the
/// grace ago must be applied, actions unsettled past theirs are stuck, ready parked facts must
/// have been released; the totals and suspected duplicates of every business date on which
/// the facts claimed in `window` (epoch s, `[from, to)`) moved money, and of the settlement's
/// dates. The open index and the record log: nothing by the table's size.
pub async fn reconcile_money(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    settlement: &[Settlement],
    window: (i64, i64),
    now: i64,
    grace: Grace,
) -> anyhow::Result<MoneyReconciliation> {
    reconcile(client, table, settlement, window, now, grace, true).await
}

/// [`reconcile_money`] of the dates only: the totals and suspected duplicates of the dates the
/// facts claimed in `window` moved money on, for the ledger's catch-up of the days before a
/// run's window. What is open now (accepted payments, actions, parked facts) is not of any
/// one day: the run's own window reads it once.
pub async fn reconcile_dated_money(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    window: (i64, i64),
    now: i64,
    grace: Grace,
) -> anyhow::Result<MoneyReconciliation> {
    reconcile(client, table, &[], window, now, grace, false).await
}

async fn reconcile(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    settlement: &[Settlement],
    window: (i64, i64),
    now: i64,
    grace: Grace,
    open: bool,
) -> anyhow::Result<MoneyReconciliation> {
    let grace_secs = grace.accepted_secs;
    let mut report = MoneyReconciliation::default();
    let window_records = crate::record_log::claimed_in(client, table, APPLIER, window).await?;
    report.window = window;
    report.dates = settlement.iter().map(|s| s.key.2).collect();
    // A record that does not decode at all names no date: the window's reconciliation, which
    // reads the same records, reports it.
    for item in window_records {
        if let Ok(claim) = schema::from_item::<ClaimRecord>(item) {
            report
                .dates
                .extend(money_dates(claim.outbox.as_deref(), claim.claimed_at));
            report.window_accounts.insert(claim.account_id);
        }
    }
    let mut claims: BTreeMap<SourceRef, ClaimRecord> = BTreeMap::new();
    for item in crate::record_log::money_on(client, table, &report.dates).await? {
        match schema::from_item::<ClaimRecord>(item) {
            Ok(claim) if claim.consumer == APPLIER => {
                claims.insert(claim.source(), claim);
            }
            Ok(_) => {}
            Err(e) => report.unreadable_item(format!("a fact's record does not decode: {e}")),
        }
    }

    // Every accepted API payment has its fact applied: the ones not yet confirmed, from the
    // open index, and their facts' records (confirmed payments are history this never reads).
    let store = ServicingStore::new(client.clone(), StoreConfig::new(table, APPLIER));
    let mut accepted: Vec<(IdempotencyRecord, SourceRef, serde_json::Value)> = Vec::new();
    let open_items = |kind| {
        let store = &store;
        async move {
            if open {
                crate::open_items(store, kind).await
            } else {
                Ok(Vec::new())
            }
        }
    };
    for item in open_items(OpenKind::Accepted).await? {
        let record: IdempotencyRecord = match schema::from_item(item) {
            Ok(r) => r,
            Err(e) => {
                report.unreadable_item(format!("an idempotency record does not decode: {e}"));
                continue;
            }
        };
        let events = OutboxEvent::decode(record.outbox.as_deref()).unwrap_or_default();
        let Some(detail) = events.into_iter().next().map(|e| e.detail) else {
            report.unreadable_item(format!(
                "accepted command {} carries no event to apply",
                record.idempotency_key
            ));
            continue;
        };
        let fact = SourceRef {
            system: detail["sourceSystem"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            event_id: detail["sourceEventId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        accepted.push((record, fact, detail));
    }
    // Each fact once (a BatchGetItem refuses a key twice); a record naming no fact is unreadable.
    accepted.retain(|(record, fact, _)| {
        let named = !fact.system.is_empty() && !fact.event_id.is_empty();
        if !named {
            report.unreadable_item(format!(
                "accepted command {} names no fact",
                record.idempotency_key
            ));
        }
        named
    });
    let wanted: std::collections::BTreeSet<&SourceRef> =
        accepted.iter().map(|(_, fact, _)| fact).collect();
    let keys = wanted
        .into_iter()
        .map(|fact| items::key_item(items::claim_key(APPLIER, fact)))
        .collect();
    let mut facts: BTreeMap<SourceRef, ClaimRecord> = BTreeMap::new();
    for item in crate::batch_get(client, table, keys).await? {
        match schema::from_item::<ClaimRecord>(item) {
            Ok(claim) => {
                facts.insert(claim.source(), claim);
            }
            Err(e) => report.unreadable_item(format!("a fact's record does not decode: {e}")),
        }
    }
    for (record, fact, detail) in accepted {
        report.accepted += 1;
        // Applied, and applied with THIS payment's payload: another producer's fact under the
        // same identity (a collision) is not this payment applied.
        let ours = |claim: &ClaimRecord| {
            ServicingEvent::decode(detail.to_string().as_bytes())
                .is_ok_and(|event| Fingerprint::of(&event).as_str() == claim.fingerprint)
        };
        let state = match facts.get(&fact) {
            Some(c) if c.verdict == "APPLIED" && ours(c) => {
                report.confirmed.push((record.pk, record.sk));
                continue;
            }
            Some(c) if c.verdict == "APPLIED" => {
                "another payload applied under its identity (a collision: this payment is quarantined)".into()
            }
            Some(c) => c.verdict.clone(),
            None => {
                "no record (never applied: check the relay's and account-state's quarantine)".into()
            }
        };
        let text = |k: &str| detail[k].as_str().unwrap_or_default().to_owned();
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
                // A date not asked for is incomplete here: another day's read totals it.
                if !report.dates.contains(&applied_on) {
                    continue;
                }
                let key = (
                    claim.source_system.clone(),
                    currency.as_str().to_owned(),
                    applied_on,
                );
                let t = report.totals_of(key, &claim.account_id);
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
                    .and_then(servicing_domain::event::parse_timestamp)
                    .map(|t| t.date_naive());
                let (Some(date), Some(amount)) = (date, detail["amountMinor"].as_i64()) else {
                    report.unreadable_item(format!(
                        "the PaymentReversed of {} does not decode",
                        claim.source()
                    ));
                    continue;
                };
                if !report.dates.contains(&date) {
                    continue;
                }
                let currency = detail["currency"].as_str().unwrap_or_default().to_owned();
                let key = (claim.source_system.clone(), currency, date);
                let t = report.totals_of(key, &claim.account_id);
                t.reversals += 1;
                t.reversed_minor += amount;
            }
        }
    }

    // Collections actions that should have settled by now: the unsettled ones, from the open
    // index (settled actions are history this never reads).
    for item in open_items(OpenKind::Action).await? {
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
        if servicing_store::ActionStatus::unsettled(&action.status)
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

    report
        .stuck_actions
        .sort_by(|a, b| (b.age_secs, &a.action_id).cmp(&(a.age_secs, &b.action_id)));

    // Parked facts whose awaited fact applied, never released.
    let parked = if open {
        crate::parked::list(&store).await?
    } else {
        Vec::new()
    };
    for view in parked {
        if view
            .fact
            .ready_longer_than(crate::parked::READY_GRACE_SECS, now)
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
