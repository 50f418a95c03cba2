//! Issue #33, what the daily jobs and the operators' listings read as history grows under the
//! same day. For each history size (default 200,000 and 2,000,000 items) a fresh table on
//! DynamoDB Local gets the same day, through the real code paths — accounts opened and paid,
//! reversals of unknown payments parked, API payments accepted (most applied), collections
//! actions (most settled), bad input quarantined — and then `history` closed items, copies of
//! that day's closed items under new identities and past dates (applied payments' records,
//! confirmed API records, settled actions, quarantine items of past days, loans). Each job then
//! runs once through the metered client: requests, items read (a scan's every item), read units
//! by AWS's rules on what came back (`capacity.rs`; a floor for a filtered scan) and seconds,
//! one line each, then the ratio between the sizes. With `--reach-days N` instead: the money
//! and ledger legs over the ledger's reach of N days against one day (`reach`).
//!
//!   reconcile_load [--history 200000,2000000] | --reach-days 7

// Timings and ratios, not money: floats are fine here.
#![allow(clippy::float_arithmetic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::query::QueryOutput;
use aws_sdk_dynamodb::operation::scan::ScanOutput;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use integration_tests::Engine;
use integration_tests::capacity::{item_json, item_size};
use integration_tests::generate::{fee, open, pay, reverse};
use integration_tests::servicing::{Servicing, process, sqs_message};
use ledger_postings::{LedgerPostingsHandler, MessageResult};
use servicing_ops::{actions, parked, quarantine};
use servicing_store::ActionIntent;
use servicing_store::open::{OPEN_SHARD, OPEN_SINCE};
use servicing_store::record_log::RecordLog;
use servicing_store::schema;

type Item = HashMap<String, AttributeValue>;

const DAY: i64 = 86_400;
const PRINCIPAL: &str = "arn:aws:iam::123456789012:user/bench";

/// The day every table gets: the same open things and closed ones, whatever the history.
async fn the_day(servicing: &Servicing) {
    let handler = servicing.handler();
    for a in 0..100 {
        let account = format!("acc_day_{a:03}");
        let body = |n: &str| format!("{account}-{n}");
        process(
            &handler,
            &[
                (&body("o"), open(&account)),
                (&body("p1"), pay(&account, &body("pay1"), 2, 1_500)),
                (&body("p2"), pay(&account, &body("pay2"), 3, 700)),
                (&body("f"), fee(&account, &body("fee"), 3, 25)),
            ],
        )
        .await;
    }
    // Parked: reversals of payments never seen.
    for a in 0..20 {
        let account = format!("acc_day_{a:03}");
        let id = format!("{account}-rev");
        process(
            &handler,
            &[(&id, reverse(&account, &id, "pay-unknown", 4, 100))],
        )
        .await;
    }
    // Bad input: quarantined today.
    let bad: Vec<(String, serde_json::Value)> = (0..20)
        .map(|i| (format!("bad-{i}"), serde_json::json!({"amountMinor": "x"})))
        .collect();
    let bad: Vec<(&str, serde_json::Value)> =
        bad.iter().map(|(id, v)| (id.as_str(), v.clone())).collect();
    process(&handler, &bad).await;
    // API payments: 30 accepted, 24 applied.
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    for i in 0..30 {
        let body = serde_json::json!({"accountId": format!("acc_day_{:03}", i % 100),
            "amountMinor": 300 + i, "currency": "EUR", "reference": format!("inv-{i}")})
        .to_string();
        let request = integration_tests::api_gateway::event(
            "POST",
            "/v1/payments",
            "POST /v1/payments",
            Some(PRINCIPAL),
            Some(&format!("key-{i}")),
            Some(&body),
        );
        assert_eq!(api.handle(request).await.status(), 202);
    }
    let accepted: Vec<_> = servicing
        .outbox_records()
        .await
        .into_iter()
        .filter(|e| e.source == payments_api::EVENT_SOURCE)
        .collect();
    for (i, event) in accepted.into_iter().take(24).enumerate() {
        process(&handler, &[(&format!("api-{i}"), event.detail)]).await;
    }
    // Collections actions: 30 recorded, 20 settled.
    let store = servicing.store("collections");
    let now = servicing_ops::epoch_seconds();
    for i in 0..30 {
        let intent = ActionIntent {
            action_id: format!("collections_notification:day-{i:02}"),
            account_id: servicing_domain::AccountId::parse(&format!("acc_day_{i:03}")).expect("id"),
            event_id: format!("evt-day-{i}"),
            payload: serde_json::json!({"notice": "dpd_30"}),
        };
        put(
            servicing,
            servicing_store::items::action_item(&intent, now).expect("item"),
        )
        .await;
        if i < 20 {
            let lease = format!("lease-{i}");
            store
                .lease_action(&intent.action_id, &lease, (now + 60) * 1000)
                .await
                .expect("lease");
            store
                .record_action(
                    &intent.action_id,
                    &lease,
                    servicing_store::ActionStatus::Sent,
                    Some(200),
                    "ok",
                )
                .await
                .expect("outcome");
        }
    }
    post_the_day(servicing).await;
}

/// The day's domain events posted by the ledger (`ledger-postings`), as its queue brings them.
async fn post_the_day(servicing: &Servicing) {
    let ledger = LedgerPostingsHandler::new(servicing.store(ledger_postings::CONSUMER));
    let envelopes: Vec<String> = servicing
        .outbox_records()
        .await
        .iter()
        .filter(|e| e.source != payments_api::EVENT_SOURCE)
        .map(|e| {
            serde_json::json!({"source": e.source, "detail-type": e.detail_type, "detail": e.detail})
                .to_string()
        })
        .collect();
    for (n, chunk) in envelopes.chunks(10).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("l{n}-{i}"), b, 1))
            .collect();
        for (_, result) in ledger.process_batch(&messages).await.results {
            assert!(
                matches!(
                    result,
                    MessageResult::Posted { .. } | MessageResult::Ignored
                ),
                "the day's ledger: {result:?}"
            );
        }
    }
}

async fn put(servicing: &Servicing, item: Item) {
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(item))
        .send()
        .await
        .expect("put");
}

fn text(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    }
}

/// The day's closed items: the templates history is copied from.
async fn closed_templates(servicing: &Servicing) -> Vec<Item> {
    let items: Vec<Item> = servicing
        .client
        .scan()
        .table_name(&servicing.table)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .expect("scan");
    items
        .into_iter()
        .filter(|item| !item.contains_key(OPEN_SHARD))
        .filter(|item| {
            let pk = text(item, "pk");
            match text(item, "itemType").as_str() {
                "CLAIM" => text(item, "verdict") == "APPLIED",
                "IDEMPOTENCY" | "QUARANTINE" => true,
                "ACTION" => text(item, "status") == "SENT",
                "JOURNAL_ENTRY" | "SUB_LEDGER" => true,
                "LOAN" => pk.starts_with("LOAN#") && text(item, "sk") == "STATE",
                _ => false,
            }
        })
        .collect()
}

/// History item `i`: a copy of a closed template under a new identity, `age_days` old. The
/// copies of one `cycle` (one copy of every template) are one consistent past day: its accounts
/// are `<account>_h<cycle>`, so their loans, claims and ledgers agree as the day's do.
fn history_item(template: &Item, i: usize, cycle: usize, age_days: i64, now: i64) -> Item {
    let mut item = template.clone();
    let tag = format!("~h{i}");
    let account = format!("{}_h{cycle}", text(template, "accountId"));
    let at = now - age_days * DAY;
    let set_n = |item: &mut Item, name: &str, value: i64| {
        if item.contains_key(name) {
            item.insert(name.into(), AttributeValue::N(value.to_string()));
        }
    };
    match text(template, "itemType").as_str() {
        "QUARANTINE" => {
            let consumer = text(template, "consumer");
            let day = chrono::DateTime::from_timestamp(at, 0)
                .expect("time")
                .date_naive();
            item.insert(
                "pk".into(),
                AttributeValue::S(format!("QUARANTINE#{consumer}#{day}")),
            );
            item.insert(
                "sk".into(),
                AttributeValue::S(format!("{:013}#m{tag}", at * 1000)),
            );
            set_n(&mut item, "quarantinedAt", at * 1000);
        }
        "CLAIM" => {
            let id = format!("{}{tag}", text(template, "sourceEventId"));
            let system = text(template, "sourceSystem");
            item.insert(
                "pk".into(),
                AttributeValue::S(format!("CLAIM#account-state#{system}#{id}")),
            );
            item.insert("sourceEventId".into(), AttributeValue::S(id));
            if item.contains_key("accountId") {
                item.insert("accountId".into(), AttributeValue::S(account.clone()));
            }
            set_n(&mut item, "claimedAt", at);
            item.remove("expiresAt");
            // Its money moved on a past business date too (the record log lists it there).
            if let Some(AttributeValue::S(outbox)) = item.get("outbox") {
                let mut events: serde_json::Value =
                    serde_json::from_str(outbox).expect("an outbox");
                for event in events.as_array_mut().into_iter().flatten() {
                    shift(
                        &mut event["detail"]["occurredAt"],
                        age_days + HISTORY_DATED_BEFORE,
                    );
                    event["detail"]["accountId"] = account.clone().into();
                }
                item.insert("outbox".into(), AttributeValue::S(events.to_string()));
            }
        }
        "JOURNAL_ENTRY" | "SUB_LEDGER" => {
            item.insert("pk".into(), AttributeValue::S(format!("LEDGER#{account}")));
            item.insert("accountId".into(), AttributeValue::S(account.clone()));
            set_n(&mut item, "postedAt", at);
            if let Some(AttributeValue::S(posting)) = item.get("posting") {
                let mut posting: serde_json::Value =
                    serde_json::from_str(posting).expect("a posting");
                posting["accountId"] = account.into();
                shift(&mut posting["effectiveAt"], age_days + HISTORY_DATED_BEFORE);
                shift(&mut posting["processedAt"], age_days);
                item.insert("posting".into(), AttributeValue::S(posting.to_string()));
            }
        }
        "LOAN" => {
            item.insert("pk".into(), AttributeValue::S(format!("LOAN#{account}")));
            item.insert("accountId".into(), AttributeValue::S(account));
        }
        _ => {
            item.insert(
                "pk".into(),
                AttributeValue::S(format!("{}{tag}", text(template, "pk"))),
            );
            set_n(&mut item, "createdAt", at);
        }
    }
    item.remove(OPEN_SINCE);
    item
}

/// Days the history's business dates lie before the day's, beyond its age: the day's own dates
/// span three months (September's facts and today's API payments), and a history fact dated on
/// one of them would be read with it (a date is totalled whole). History is of other dates.
const HISTORY_DATED_BEFORE: i64 = 400;

/// Moves an RFC 3339 time `days` back.
fn shift(time: &mut serde_json::Value, days: i64) {
    if let Some(at) = time
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    {
        *time = (at - chrono::Duration::days(days)).to_rfc3339().into();
    }
}

/// Lists a history item in the record log, as the relay did the day it was written.
fn log_history(log: &mut RecordLog, item: &Item) {
    match text(item, "itemType").as_str() {
        "CLAIM" => log.add_record(&schema::from_item(item.clone()).expect("a record")),
        "JOURNAL_ENTRY" => log.add_entry(&schema::from_item(item.clone()).expect("an entry"), 0),
        "SUB_LEDGER" => log.add_sub_ledger(&schema::from_item(item.clone()).expect("balances")),
        _ => {}
    }
}

/// Writes `items` history items, and their record log as the relay kept it then, copy cycle
/// `c` (one past day's accounts) `age_of(c)` days old.
async fn write_history(
    servicing: &Servicing,
    templates: &[Item],
    items: usize,
    now: i64,
    age_of: impl Fn(usize) -> i64,
) {
    let raw = Engine::DynamoDbLocal.dynamodb().await;
    let history_log = Mutex::new(RecordLog::default());
    // Whole cycles: a past day's copies all there, or none.
    let items = items.div_ceil(templates.len()) * templates.len();
    let batches: Vec<Vec<usize>> = (0..items)
        .collect::<Vec<_>>()
        .chunks(25)
        .map(<[usize]>::to_vec)
        .collect();
    let writes = batches.into_iter().map(|batch| {
        let (raw, table) = (raw.clone(), servicing.table.clone());
        let requests: Vec<WriteRequest> = batch
            .iter()
            .map(|i| {
                let cycle = i / templates.len();
                let item = history_item(
                    &templates[i % templates.len()],
                    *i,
                    cycle,
                    age_of(cycle),
                    now,
                );
                if let Ok(mut log) = history_log.lock() {
                    log_history(&mut log, &item);
                }
                let put = PutRequest::builder().set_item(Some(item)).build();
                WriteRequest::builder()
                    .put_request(put.expect("put"))
                    .build()
            })
            .collect();
        async move {
            let mut requests = requests;
            while !requests.is_empty() {
                requests = raw
                    .batch_write_item()
                    .request_items(&table, requests)
                    .send()
                    .await
                    .expect("batch write")
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&table))
                    .unwrap_or_default();
            }
        }
    });
    futures_util::StreamExt::collect::<Vec<()>>(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter(writes),
        8,
    ))
    .await;
    let log = history_log.into_inner().expect("the history's log");
    servicing
        .store("outbox-relay")
        .write_record_log(&log, "history")
        .await
        .expect("the history's record log");
}

/// What a client's reads read, from the typed answers (the raw body is not buffered yet when
/// the capacity meter looks at it, for a read): items read — a `Query`/`Scan`'s `ScannedCount`,
/// whatever its filter kept — and read units by AWS's rules on the items that came back (a
/// floor for a filtered scan, which is billed on what it read).
#[derive(Debug, Clone, Default)]
struct ReadMeter(Arc<Mutex<(u64, f64)>>);

#[derive(Debug, Clone)]
struct Consistent(bool);

impl aws_smithy_types::config_bag::Storable for Consistent {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl Intercept for ReadMeter {
    fn name(&self) -> &'static str {
        "ReadMeter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body: serde_json::Value = context
            .request()
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        let consistent = body["ConsistentRead"].as_bool() == Some(true)
            || body["RequestItems"]
                .as_object()
                .is_some_and(|t| t.values().any(|k| k["ConsistentRead"] == true));
        cfg.interceptor_state().store_put(Consistent(consistent));
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        let factor = if cfg.load::<Consistent>().is_some_and(|c| c.0) {
            1.0
        } else {
            0.5
        };
        let units = |items: &[Item]| {
            let bytes: usize = items.iter().map(|i| item_size(&item_json(i))).sum();
            factor * bytes.div_ceil(4096).max(1) as f64
        };
        let (items, rcu) = if let Some(q) = output.downcast_ref::<QueryOutput>() {
            (q.scanned_count().max(0) as u64, units(q.items()))
        } else if let Some(s) = output.downcast_ref::<ScanOutput>() {
            (s.scanned_count().max(0) as u64, units(s.items()))
        } else if let Some(g) = output.downcast_ref::<GetItemOutput>() {
            let found: Vec<Item> = g.item().cloned().into_iter().collect();
            (found.len() as u64, units(&found))
        } else if let Some(b) = output.downcast_ref::<BatchGetItemOutput>() {
            let found: Vec<Item> = b
                .responses()
                .into_iter()
                .flat_map(|r| r.values().flatten().cloned())
                .collect();
            let rcu: f64 = found.iter().map(|i| units(std::slice::from_ref(i))).sum();
            (found.len() as u64, rcu)
        } else {
            return Ok(());
        };
        if let Ok(mut m) = self.0.lock() {
            m.0 += items;
            m.1 += rcu;
        }
        Ok(())
    }
}

/// One job's figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    requests: u64,
    /// Items read (a scan's every item, filtered or not).
    items: u64,
    /// Read units on what came back (a floor for a filtered scan: AWS bills what it read).
    rcu: f64,
    secs: f64,
}

/// Runs one job through the metered client and prints its line at once (a job that fails says
/// so in its line: a scan that cannot finish is a finding, not a crash).
async fn measure<F: std::future::Future<Output = Result<String, String>>>(
    servicing: &Servicing,
    reads: &ReadMeter,
    name: &'static str,
    job: F,
) -> (&'static str, Figures, String) {
    servicing.requests.reset();
    if let Ok(mut m) = reads.0.lock() {
        *m = (0, 0.0);
    }
    let started = Instant::now();
    let said = job.await.unwrap_or_else(|failure| failure);
    let (items, rcu) = reads.0.lock().map(|m| *m).unwrap_or_default();
    let f = Figures {
        requests: servicing.requests.total(),
        items,
        rcu,
        secs: started.elapsed().as_secs_f64(),
    };
    println!(
        "  {name:<30} {:>6} requests {:>9} items read {:>8.1} RCU {:>8.2} s   {said}",
        f.requests, f.items, f.rcu, f.secs
    );
    (name, f, said)
}

/// The record log of the day's records, as the relay keeps it from the stream (this table has
/// none: DynamoDB Local's stream slows every write), listed by the one-off backfill: the
/// history's records are of past days, in partitions no window of today reads.
async fn log_the_day(servicing: &Servicing) {
    servicing_ops::backfill::record_log(&servicing.store("ledgerctl"), false)
        .await
        .expect("the record log");
}

async fn jobs(servicing: &Servicing, now: i64) -> Vec<(&'static str, Figures, String)> {
    // The servicing client's interceptors (its request counter), plus the read meter.
    let reads = ReadMeter::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        servicing
            .client
            .config()
            .to_builder()
            .interceptor(reads.clone())
            .build(),
    );
    let store = servicing_store::ServicingStore::new(
        client.clone(),
        servicing_store::StoreConfig::new(&servicing.table, "account-state"),
    );
    let (client, table) = (&client, servicing.table.as_str());
    let mut out = Vec::new();
    let failed = |e: anyhow::Error| format!("FAILED: {e:#}");
    let job = measure(servicing, &reads, "ledgerctl parked list", async {
        let views = parked::list(&store).await.map_err(failed)?;
        Ok(format!("{} parked facts", views.len()))
    });
    out.push(job.await);
    let job = measure(servicing, &reads, "ledgerctl actions list", async {
        let found = actions::list(&store, actions::Listing::Open, None, None)
            .await
            .map_err(failed)?;
        Ok(format!("{} unsettled actions", found.len()))
    });
    out.push(job.await);
    let job = measure(servicing, &reads, "ledgerctl quarantine list", async {
        let found = quarantine::list(client, table, None, quarantine::Listing::last_days(7))
            .await
            .map_err(failed)?;
        Ok(format!("{} quarantined in 7 days", found.len()))
    });
    out.push(job.await);
    let job = measure(servicing, &reads, "parked expiry (reconciler)", async {
        let expiry = parked::expire(&store, now, Duration::from_secs(7 * DAY as u64))
            .await
            .map_err(failed)?;
        Ok(format!("{} still parked", expiry.still_parked))
    });
    out.push(job.await);
    let job = measure(servicing, &reads, "ledgerctl reconcile (window)", async {
        let window = (now - 25 * 3600, now + 1);
        let r = servicing_ops::reconcile::reconcile(client, table, "account-state", window, None)
            .await
            .map_err(failed)?;
        Ok(format!("{} applied in the window", r.applied))
    });
    out.push(job.await);
    let money = Mutex::new(None);
    let job = measure(servicing, &reads, "ledgerctl reconcile --money", async {
        let grace = servicing_ops::money::Grace::default();
        let window = (now - 25 * 3600, now + 1);
        let m = servicing_ops::money::reconcile_money(client, table, &[], window, now, grace)
            .await
            .map_err(failed)?;
        let said = format!(
            "{} accepted checked, {} not applied, {} stuck actions, {} dates totalled",
            m.accepted,
            m.not_applied.len(),
            m.stuck_actions.len(),
            m.dates.len()
        );
        *money.lock().map_err(|e| e.to_string())? = Some(m);
        Ok(said)
    });
    out.push(job.await);
    let job = measure(servicing, &reads, "  its ledger leg", async {
        let m = money
            .lock()
            .map_err(|e| e.to_string())?
            .take()
            .ok_or("no money reconciliation to hold the ledger to")?;
        let l = servicing_ops::ledger::reconcile_ledger(client, table, &m, now, 0)
            .await
            .map_err(failed)?;
        Ok(format!(
            "{} accounts read, {} entries, {}",
            l.accounts,
            l.entries,
            match l.problems.first() {
                None => "reconciles".to_string(),
                Some(first) => format!("does NOT reconcile: {first}"),
            }
        ))
    });
    out.push(job.await);
    out
}

/// The money and ledger legs of the daily run over `days` of unsettled ledger (the reach a run
/// reads again while the ledger has not settled, `ledger::REACH_DAYS`): today and, on each of
/// the `days - 1` days before the day before yesterday, `copies` copies of today, claimed,
/// logged and posted on that day. It measures one past day alone, then the whole reach, and
/// prints the accounts per day at which the reach would take the reconciler's `Timeout: 300`
/// (template.yaml) at the rate measured here.
async fn reach(days: i64, copies: usize) {
    let servicing = Servicing::with_stream(Engine::DynamoDbLocal, false).await;
    let now = servicing_ops::epoch_seconds();
    the_day(&servicing).await;
    log_the_day(&servicing).await;
    let templates = closed_templates(&servicing).await;
    let past_days = (days - 1).max(0) as usize;
    // From 2 days back: a past day is apart from today's window.
    write_history(
        &servicing,
        &templates,
        templates.len() * copies * past_days,
        now,
        |cycle| 2 + (cycle / copies) as i64,
    )
    .await;
    let reads = ReadMeter::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        servicing
            .client
            .config()
            .to_builder()
            .interceptor(reads.clone())
            .build(),
    );
    let (client, table) = (&client, servicing.table.as_str());
    let accounts = Mutex::new(Vec::new());
    let mut legs = Vec::new();
    for (name, window) in [
        (
            "money + ledger, one past day",
            (now - 2 * DAY - 3600, now - 2 * DAY + 3600),
        ),
        (
            "money + ledger, the reach",
            (now - (days + 1) * DAY, now + 2),
        ),
    ] {
        let leg = measure(&servicing, &reads, name, async {
            let failed = |e: anyhow::Error| format!("FAILED: {e:#}");
            let grace = servicing_ops::money::Grace::default();
            let at = servicing_ops::epoch_seconds() + 1;
            let m = servicing_ops::money::reconcile_money(client, table, &[], window, at, grace)
                .await
                .map_err(failed)?;
            let l = servicing_ops::ledger::reconcile_ledger(client, table, &m, at, 0)
                .await
                .map_err(failed)?;
            if let Ok(mut a) = accounts.lock() {
                a.push(m.window_accounts.len());
            }
            Ok(format!(
                "{} accounts claimed, {} dates totalled, {} ledgers, {} entries, {}",
                m.window_accounts.len(),
                m.dates.len(),
                l.accounts,
                l.entries,
                match l.problems.first() {
                    None => "reconciles".to_string(),
                    Some(first) => format!("does NOT reconcile: {first}"),
                }
            ))
        })
        .await;
        legs.push(leg.1);
    }
    let accounts = accounts.into_inner().unwrap_or_default();
    if let ([day_accounts, reach_accounts], [day, whole]) = (accounts.as_slice(), legs.as_slice()) {
        let rate = *reach_accounts as f64 / whole.secs.max(0.001);
        println!(
            "reach of {days} days: {reach_accounts} accounts in {:.2} s ({:.0} accounts/s; one past day, {day_accounts} accounts, {:.2} s); \
             at this rate a {days}-day reach takes the reconciler's 300 s at ~{:.0} accounts touched per day \
             (DynamoDB Local, 2 cores: AWS latencies differ)",
            whole.secs,
            rate,
            day.secs,
            rate * 300.0 / days as f64
        );
    }
    if let Err(e) = servicing
        .client
        .delete_table()
        .table_name(&servicing.table)
        .send()
        .await
    {
        eprintln!("could not drop {}: {e}", servicing.table);
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(days) = args
        .iter()
        .position(|a| a == "--reach-days")
        .and_then(|i| args.get(i + 1))
    {
        let days: i64 = days.parse().expect("--reach-days takes a number of days");
        reach(days, 5).await;
        return;
    }
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--history")
        .and_then(|i| args.get(i + 1))
        .map_or("200000,2000000", String::as_str)
        .split(',')
        .map(|v| {
            v.parse()
                .expect("--history takes sizes, e.g. 200000,2000000")
        })
        .collect();
    let mut runs = Vec::new();
    for history in &sizes {
        let servicing = Servicing::with_stream(Engine::DynamoDbLocal, false).await;
        let now = servicing_ops::epoch_seconds();
        the_day(&servicing).await;
        log_the_day(&servicing).await;
        let templates = closed_templates(&servicing).await;
        let started = Instant::now();
        // Older than the reconciled window and the quarantine listing's week: partitions of
        // the log today's jobs do not read.
        write_history(&servicing, &templates, *history, now, |cycle| {
            8 + (cycle as i64 % 700)
        })
        .await;
        println!(
            "history {history}: {} closed templates copied in {:.0} s",
            templates.len(),
            started.elapsed().as_secs_f64()
        );
        // The jobs run as of after the day and its history (the day's facts are in the window).
        let figures = jobs(&servicing, servicing_ops::epoch_seconds() + 1).await;
        runs.push((*history, figures));
        // Dropped to free DynamoDB Local's memory; a failure to drop only says so.
        if let Err(e) = servicing
            .client
            .delete_table()
            .table_name(&servicing.table)
            .send()
            .await
        {
            eprintln!("could not drop {}: {e}", servicing.table);
        }
    }
    if let [(small, first), .., (large, last)] = runs.as_slice() {
        println!("history {large} vs {small} (x{}):", large / small.max(&1));
        for ((job, a, _), (_, b, _)) in first.iter().zip(last) {
            println!(
                "  {job:<30} requests x{:.2}  items read x{:.2}  RCU x{:.2}  seconds x{:.2}",
                b.requests as f64 / a.requests.max(1) as f64,
                b.items as f64 / a.items.max(1) as f64,
                b.rcu / a.rcu.max(0.5),
                b.secs / a.secs.max(0.001)
            );
        }
    }
}
