//! Issue #34, what a posting costs: 200 accounts x 5 facts applied by account-state, the money
//! events servicing published then delivered to ledger-postings as its standard queue would
//! (shuffled, batches of 10), then 20 % of them again (redeliveries). Requests and capacity
//! units by AWS's rules (`integration_tests::capacity`, the meter `loadgen` uses) per posted
//! event and per duplicate, split by item, and dollars per million posted events.
//!
//!   ledgerload [--accounts 200]

// Ratios and dollars, not money movements: floats are fine here.
#![allow(clippy::float_arithmetic)]

use std::time::Instant;

use integration_tests::generate::{fee, open, pay};
use integration_tests::servicing::{Servicing, process, sqs_message};
use integration_tests::{Engine, Rng};
use ledger_postings::{CONSUMER, LedgerPostingsHandler, MessageResult};
use serde_json::json;

/// On-demand list prices, us-east-1 (as `loadgen` quotes them): per million write / read
/// request units, standard SQS requests, Lambda requests and GB-seconds at 256 MB.
const WRITE: f64 = 0.625;
const READ: f64 = 0.125;
const SQS_STANDARD: f64 = 0.40;
const LAMBDA_REQUESTS: f64 = 0.20;
const LAMBDA_GB_SECOND: f64 = 0.000_016_666_7;
const MEMORY_GB: f64 = 0.25;

async fn deliver(handler: &LedgerPostingsHandler, bodies: &[String]) -> Vec<MessageResult> {
    let mut out = Vec::new();
    for (n, chunk) in bodies.chunks(10).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("m{n}-{i}"), b, 1))
            .collect();
        out.extend(
            handler
                .process_batch(&messages)
                .await
                .results
                .into_iter()
                .map(|(_, r)| r),
        );
    }
    out
}

fn per(total: f64, n: usize) -> f64 {
    total / n.max(1) as f64
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let accounts: usize = args
        .iter()
        .position(|a| a == "--accounts")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(200), |v| v.parse())?;
    let servicing = Servicing::with_stream(Engine::DynamoDbLocal, false).await;
    let handler = servicing.handler();
    for a in 0..accounts {
        let account = format!("acc_lb_{a:04}");
        let id = |n: &str| format!("{account}-{n}");
        process(
            &handler,
            &[
                (&id("o"), open(&account)),
                (&id("f"), fee(&account, &id("fee"), 2, 500)),
                (&id("p1"), pay(&account, &id("pay1"), 3, 1_500)),
                (&id("f2"), fee(&account, &id("fee2"), 4, 300)),
                (&id("p2"), pay(&account, &id("pay2"), 5, 700)),
            ],
        )
        .await;
    }
    let mut envelopes: Vec<String> = servicing
        .outbox_records()
        .await
        .into_iter()
        .filter(|e| servicing_domain::journal::MONEY_EVENT_TYPES.contains(&e.detail_type.as_str()))
        .map(|e| {
            json!({"source": e.source, "detail-type": e.detail_type, "detail": e.detail})
                .to_string()
        })
        .collect();
    let mut rng = Rng(17);
    for i in (1..envelopes.len()).rev() {
        envelopes.swap(i, rng.below(i + 1));
    }
    let ledger = LedgerPostingsHandler::new(servicing.store(CONSUMER));

    servicing.capacity.reset();
    servicing.requests.reset();
    let started = Instant::now();
    let first = deliver(&ledger, &envelopes).await;
    let seconds = started.elapsed().as_secs_f64();
    let posted = first
        .iter()
        .filter(|r| matches!(r, MessageResult::Posted { .. }))
        .count();
    anyhow::ensure!(
        posted == envelopes.len(),
        "{posted} of {} posted",
        envelopes.len()
    );
    let (capacity, requests) = (servicing.capacity.total(), servicing.requests.snapshot());

    let again: Vec<String> = envelopes.iter().step_by(5).cloned().collect();
    servicing.capacity.reset();
    servicing.requests.reset();
    let second = deliver(&ledger, &again).await;
    anyhow::ensure!(
        second.iter().all(|r| *r == MessageResult::Duplicate),
        "redeliveries are duplicates"
    );
    let (dup_capacity, dup_requests) = (servicing.capacity.total(), servicing.requests.snapshot());

    println!(
        "ledger-postings: {accounts} accounts, {posted} money events posted once, {} redelivered (20 %), batches of 10, DynamoDB Local",
        again.len()
    );
    let split = |c: &integration_tests::capacity::Capacity, n: usize| -> String {
        c.wcu_by_item
            .iter()
            .map(|(item, wcu)| format!("{item} {:.2}", per(*wcu, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let calls = |r: &std::collections::BTreeMap<String, u64>, n: usize| -> String {
        r.iter()
            .map(|(op, count)| format!("{op} {:.2}", per(*count as f64, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "per posted event: requests {} ({}), WCU {:.2} ({}), RCU {:.2}",
        format_args!("{:.2}", per(requests.values().sum::<u64>() as f64, posted)),
        calls(&requests, posted),
        per(capacity.wcu, posted),
        split(&capacity, posted),
        per(capacity.rcu, posted)
    );
    println!(
        "per duplicate: requests {:.2} ({}), WCU {:.2}, RCU {:.2}",
        per(dup_requests.values().sum::<u64>() as f64, again.len()),
        calls(&dup_requests, again.len()),
        per(dup_capacity.wcu, again.len()),
        per(dup_capacity.rcu, again.len())
    );
    // A million posted events with 20 % redelivered.
    let deliveries = 1.2;
    let dynamodb = (per(capacity.wcu, posted) + 0.2 * per(dup_capacity.wcu, again.len())) * WRITE
        + (per(capacity.rcu, posted) + 0.2 * per(dup_capacity.rcu, again.len())) * READ;
    let lambda = seconds / posted as f64 * deliveries * MEMORY_GB * LAMBDA_GB_SECOND * 1e6
        + deliveries / 10.0 * LAMBDA_REQUESTS;
    // Send (EventBridge's target), receive and delete, batched by 10 on the consumer side.
    let sqs = deliveries * (1.0 + 2.0 / 10.0) * SQS_STANDARD;
    println!(
        "$ per million posted events (20 % redelivered): DynamoDB {dynamodb:.2} + Lambda {lambda:.2} + SQS {sqs:.2} = {:.2} (handler time {:.1} ms per event here)",
        dynamodb + lambda + sqs,
        seconds * 1000.0 / posted as f64
    );
    servicing.drop_table().await;
    Ok(())
}
