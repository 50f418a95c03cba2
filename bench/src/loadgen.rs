//! End-to-end benchmark on DynamoDB Local: N accounts × M events with D % duplicates through the
//! account-state handler at batch sizes 10 and 100, and the same deliveries through the
//! Powertools baseline (`bench/baseline/powertools_consumer.py`). Prints events/s, DynamoDB
//! requests per first-time event and per duplicate, p50/p99 batch latency, peak RSS, the ratio,
//! and whether both implementations reached the same balances.
//!
//! Each side runs `--repeats` times per batch size, alternating, after one untimed warm-up run
//! (DynamoDB Local's JIT); the run with the median events/s is printed with the range.
//!
//! `--order` says how a queue forms the batches from the backlog; both sides get the same ones:
//! - `interleaved` (a standard queue): batches cut from the stream as it arrives, accounts mixed.
//! - `fifo` (the deployed servicing queue, `MessageGroupId = accountId`): SQS FIFO "returns as
//!   many messages with the same message group ID as possible" (AWS knowledge center,
//!   sqs-fifo-messages-not-returned), then fills from the next group with the oldest message.
//!
//! `--transaction-items` is the handler's `MAX_TRANSACTION_ITEMS` (default 100). `--engine
//! ministack` runs both sides on MiniStack's DynamoDB instead (for comparison only: DynamoDB
//! Local is the reference engine).
//!
//!   infra/bench.sh [--accounts 40] [--events 25] [--duplicates 20] [--repeats 5]
//!   [--order interleaved|fifo] [--transaction-items 100] [--concurrency 100]
//!   [--engine dynamodb-local|ministack]

// Timings and ratios, not money: floats are fine here.
#![allow(clippy::float_arithmetic)]

use std::collections::{BTreeMap, VecDeque};
use std::process::Command;
use std::time::Instant;

use account_state::MessageResult;
use integration_tests::capacity::{Capacity, CapacityMeter};
use integration_tests::servicing::{Servicing, sqs_message};
use integration_tests::{Engine, Rng};
use serde_json::{Value, json};

struct Args {
    /// Accounts processed in parallel inside a batch (the handler's ACCOUNT_CONCURRENCY).
    concurrency: usize,
    accounts: usize,
    events: usize,
    duplicate_percent: usize,
    repeats: usize,
    fifo: bool,
    transaction_items: usize,
    engine: Engine,
    python: String,
}

fn args() -> Args {
    let mut a = Args {
        concurrency: account_state::Config::for_table("").account_concurrency,
        accounts: 40,
        events: 25,
        duplicate_percent: 20,
        repeats: 5,
        fifo: false,
        transaction_items: account_state::MAX_TRANSACTION_ITEMS,
        engine: Engine::DynamoDbLocal,
        python: ".local/venv-bench/bin/python".into(),
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    for pair in raw.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        let number = || {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{} needs a number", pair[0]))
        };
        match pair[0].as_str() {
            "--accounts" => a.accounts = number(),
            "--events" => a.events = number(),
            "--duplicates" => a.duplicate_percent = number(),
            "--concurrency" => a.concurrency = number(),
            "--repeats" => a.repeats = number(),
            "--transaction-items" => a.transaction_items = number(),
            "--engine" => {
                a.engine = match value.as_str() {
                    "dynamodb-local" => Engine::DynamoDbLocal,
                    "ministack" => Engine::MiniStack,
                    other => panic!("--engine is dynamodb-local or ministack, not {other}"),
                }
            }
            "--order" => {
                a.fifo = match value.as_str() {
                    "fifo" => true,
                    "interleaved" => false,
                    other => panic!("--order is fifo or interleaved, not {other}"),
                }
            }
            "--python" => a.python = value.clone(),
            other => panic!("unknown option {other}"),
        }
    }
    a
}

/// Each account: opened, then fees, interest and payments; interleaved across accounts keeping
/// each account's order; duplicates land after their original.
fn deliveries(a: &Args) -> (Vec<String>, usize) {
    let mut rng = Rng(0x5eed);
    let mut per_account: Vec<Vec<String>> = (0..a.accounts)
        .map(|n| {
            let account = format!("acc_bench_{n}");
            let mut events = vec![json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{n}"),
                "eventType": "LOAN_OPENED", "accountId": account, "eventTime": "2026-09-01T09:00:00Z",
                "principalMinor": 1_000_000, "currency": "EUR"})];
            for e in 1..a.events {
                let time = format!("2026-10-{:02}T10:00:00Z", 1 + e % 28);
                let (kind, extra) = match e % 4 {
                    0 | 1 => ("PAYMENT_SETTLED", json!({"amountMinor": 1_000 + 37 * e as i64})),
                    2 => ("FEE_ASSESSED", json!({"amountMinor": 500, "feeType": "LATE_FEE"})),
                    _ => ("INTEREST_ACCRUED", json!({"amountMinor": 250})),
                };
                let mut event = json!({"sourceSystem": "bench", "sourceEventId": format!("{account}-{e}"),
                    "eventType": kind, "accountId": account, "eventTime": time, "currency": "EUR"});
                if let (Some(target), Some(extra)) = (event.as_object_mut(), extra.as_object()) {
                    target.extend(extra.clone());
                }
                events.push(event);
            }
            events.into_iter().map(|e| e.to_string()).rev().collect()
        })
        .collect();
    let mut stream = Vec::new();
    while per_account.iter().any(|q| !q.is_empty()) {
        let live: Vec<usize> = (0..per_account.len())
            .filter(|&i| !per_account[i].is_empty())
            .collect();
        let pick = live[rng.below(live.len())];
        stream.extend(per_account[pick].pop());
    }
    let unique = stream.len();
    for _ in 0..unique * a.duplicate_percent / 100 {
        let i = rng.below(unique);
        let at = i + 1 + rng.below(stream.len() - i);
        let copy = stream[i].clone();
        stream.insert(at, copy);
    }
    (stream, unique)
}

/// The stream reordered so that consecutive chunks of `batch` are the batches an SQS FIFO queue
/// with one message group per account hands out from this backlog: the group of the oldest
/// message first, as many of its messages as fit (in order), then the next oldest group.
fn fifo_batches(stream: &[String], batch: usize) -> Vec<String> {
    let group = |body: &str| {
        serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["accountId"].as_str().map(str::to_owned))
    };
    // Per group, the positions of its messages in arrival order.
    let mut groups: Vec<(Option<String>, VecDeque<usize>)> = Vec::new();
    for (position, body) in stream.iter().enumerate() {
        let id = group(body);
        match groups.iter_mut().find(|(g, _)| *g == id) {
            Some((_, queue)) => queue.push_back(position),
            None => groups.push((id, VecDeque::from([position]))),
        }
    }
    let mut out = Vec::with_capacity(stream.len());
    while out.len() < stream.len() {
        let mut room = batch;
        // The group holding the oldest remaining message, as many of its messages as fit.
        while let Some((_, queue)) = groups
            .iter_mut()
            .filter(|(_, q)| !q.is_empty())
            .min_by_key(|(_, q)| q.front().copied())
        {
            while room > 0 {
                let Some(position) = queue.pop_front() else {
                    break;
                };
                out.push(stream[position].clone());
                room -= 1;
            }
            if room == 0 {
                break;
            }
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

struct Figures {
    events_per_s: f64,
    requests_per_first: f64,
    requests_per_duplicate: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Capacity units by AWS's rules (`integration_tests::capacity`), per first-time fact and
    /// per duplicate, and the first-time fact's write units by item type.
    capacity_per_first: Capacity,
    capacity_per_duplicate: Capacity,
    /// Lowest and highest events/s over the repeats (set by `median_run`).
    range: (f64, f64),
}

/// The run with the median events/s, carrying the range of all runs.
fn median_run(
    mut runs: Vec<(Figures, BTreeMap<String, Value>)>,
) -> (Figures, BTreeMap<String, Value>) {
    runs.sort_by(|a, b| a.0.events_per_s.total_cmp(&b.0.events_per_s));
    let range = (
        runs.first().map_or(0.0, |r| r.0.events_per_s),
        runs.last().map_or(0.0, |r| r.0.events_per_s),
    );
    let mut median = runs.swap_remove(runs.len() / 2);
    median.0.range = range;
    median
}

async fn run_ours(
    a: &Args,
    stream: &[String],
    unique: usize,
    batch: usize,
) -> (Figures, BTreeMap<String, Value>) {
    // Like the baseline's tables, no stream: see `create_table` for why on DynamoDB Local.
    let servicing = Servicing::with_stream(a.engine, false).await;
    let mut config = servicing.config();
    config.account_concurrency = a.concurrency;
    config.max_transaction_items = a.transaction_items;
    let handler = servicing.handler_with(config);
    let mut latencies = Vec::new();
    let mut results = Vec::new();
    servicing.requests.reset();
    servicing.capacity.reset();
    let started = Instant::now();
    for (n, chunk) in stream.chunks(batch).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("b{n}-{i}"), b, 1))
            .collect();
        let t0 = Instant::now();
        results.extend(
            handler
                .process(&messages)
                .await
                .results
                .into_iter()
                .map(|(_, r)| r),
        );
        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let first_pass_requests = servicing.requests.total() as f64;
    let first_pass_capacity = servicing.capacity.total();
    let applied = results
        .iter()
        .filter(|r| **r == MessageResult::Applied)
        .count();
    assert_eq!(
        applied,
        unique,
        "every unique fact applied once: {:?}",
        results
            .iter()
            .find(|r| !matches!(r, MessageResult::Applied | MessageResult::Duplicate))
    );

    // Per duplicate, on the warm instance: the whole stream again (all duplicates now).
    servicing.requests.reset();
    servicing.capacity.reset();
    for (n, chunk) in stream.chunks(batch).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("d{n}-{i}"), b, 1))
            .collect();
        handler.process(&messages).await;
    }
    let per_duplicate = servicing.requests.total() as f64 / stream.len() as f64;
    // First pass = unique first-time events + in-stream duplicates (each costing `per_duplicate`).
    let duplicates_in_stream = (stream.len() - unique) as f64;
    let per_first = (first_pass_requests - duplicates_in_stream * per_duplicate) / unique as f64;
    let capacity_per_duplicate = scaled(&servicing.capacity.total(), 1.0 / stream.len() as f64);
    let capacity_per_first = per_first_time(
        &first_pass_capacity,
        &capacity_per_duplicate,
        duplicates_in_stream,
        unique,
    );

    let mut states = BTreeMap::new();
    for account in stream.iter().filter_map(|b| {
        serde_json::from_str::<Value>(b).ok()?["accountId"]
            .as_str()
            .map(str::to_owned)
    }) {
        if let std::collections::btree_map::Entry::Vacant(slot) = states.entry(account.clone()) {
            let (loan, _) = servicing.loan(&account).await.expect("account");
            slot.insert(json!({"principal": loan.principal_outstanding_minor, "interest": loan.interest_outstanding_minor,
                "fees": loan.fees_outstanding_minor, "credit": loan.credit_balance_minor}));
        }
    }
    servicing.drop_table().await;
    latencies.sort_by(f64::total_cmp);
    (
        Figures {
            events_per_s: stream.len() as f64 / elapsed,
            requests_per_first: per_first,
            requests_per_duplicate: per_duplicate,
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
            capacity_per_first,
            capacity_per_duplicate,
            range: (0.0, 0.0),
        },
        states,
    )
}

fn run_baseline(
    a: &Args,
    stream: &[String],
    unique: usize,
    batch: usize,
) -> Option<(Figures, BTreeMap<String, Value>)> {
    let dir = std::env::temp_dir();
    let input = dir.join(format!("bench-deliveries-{batch}.jsonl"));
    let accounts = dir.join(format!("bench-accounts-{batch}.json"));
    std::fs::write(&input, stream.join("\n")).ok()?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/baseline/powertools_consumer.py"
    );
    let run =
        |file: &std::path::Path, out: Option<&std::path::Path>| -> Option<(Value, Capacity)> {
            let log = file.with_extension("capacity.jsonl");
            let mut cmd = Command::new(&a.python);
            cmd.args([
                script,
                "--input",
                &file.to_string_lossy(),
                "--batch",
                &batch.to_string(),
                "--endpoint",
                &a.engine.endpoint(),
                "--capacity-log",
                &log.to_string_lossy(),
            ]);
            if let Some(out) = out {
                cmd.args(["--accounts-out", &out.to_string_lossy()]);
            }
            let output = cmd.output().ok()?;
            if !output.status.success() {
                eprintln!(
                    "baseline failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                return None;
            }
            let figures = serde_json::from_slice(
                output
                    .stdout
                    .rsplit(|b| *b == b'\n')
                    .find(|l| !l.is_empty())?,
            )
            .ok()?;
            let meter = CapacityMeter::default();
            meter.charge_log(&std::fs::read_to_string(&log).ok()?);
            Some((figures, meter.total()))
        };
    let (first, first_capacity) = run(&input, Some(&accounts))?;
    // Its per-duplicate cost: the unique facts twice in a row on a fresh table, minus once.
    let mut doubled: Vec<String> = stream.iter().take(unique.min(200)).cloned().collect();
    let once = doubled.clone();
    doubled.extend(once.iter().cloned());
    let twice_file = dir.join("bench-twice.jsonl");
    let once_file = dir.join("bench-once.jsonl");
    std::fs::write(&twice_file, doubled.join("\n")).ok()?;
    std::fs::write(&once_file, once.join("\n")).ok()?;
    let ((twice, twice_capacity), (single, single_capacity)) =
        (run(&twice_file, None)?, run(&once_file, None)?);
    let per_duplicate =
        (twice["requests"].as_f64()? - single["requests"].as_f64()?) / once.len() as f64;
    let duplicates_in_stream = (stream.len() - unique) as f64;
    let per_first =
        (first["requests"].as_f64()? - duplicates_in_stream * per_duplicate) / unique as f64;
    let capacity_per_duplicate = scaled(
        &difference(&twice_capacity, &single_capacity),
        1.0 / once.len() as f64,
    );
    let capacity_per_first = per_first_time(
        &first_capacity,
        &capacity_per_duplicate,
        duplicates_in_stream,
        unique,
    );
    let states: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&accounts).ok()?).ok()?;
    Some((
        Figures {
            events_per_s: first["events_per_s"].as_f64()?,
            requests_per_first: per_first,
            requests_per_duplicate: per_duplicate,
            p50_ms: first["p50_ms"].as_f64()?,
            p99_ms: first["p99_ms"].as_f64()?,
            capacity_per_first,
            capacity_per_duplicate,
            range: (0.0, 0.0),
        },
        states,
    ))
}

fn scaled(c: &Capacity, by: f64) -> Capacity {
    Capacity {
        wcu: c.wcu * by,
        rcu: c.rcu * by,
        wcu_by_item: c
            .wcu_by_item
            .iter()
            .map(|(k, v)| (k.clone(), v * by))
            .collect(),
    }
}

fn difference(a: &Capacity, b: &Capacity) -> Capacity {
    let mut out = a.clone();
    out.wcu -= b.wcu;
    out.rcu -= b.rcu;
    for (k, v) in &b.wcu_by_item {
        *out.wcu_by_item.entry(k.clone()).or_default() -= v;
    }
    out
}

/// What the first pass cost per first-time fact: the pass less its in-stream duplicates (each
/// at the per-duplicate cost), over the unique facts.
fn per_first_time(
    first_pass: &Capacity,
    per_duplicate: &Capacity,
    duplicates_in_stream: f64,
    unique: usize,
) -> Capacity {
    scaled(
        &difference(first_pass, &scaled(per_duplicate, duplicates_in_stream)),
        1.0 / unique as f64,
    )
}

/// On-demand list prices, us-east-1, as AWS published them in November 2024 (DynamoDB after its
/// 2024-11-01 on-demand price cut); check the pricing pages before quoting a figure.
mod prices {
    pub const DATED: &str = "us-east-1 on-demand list prices of 2024-11";
    /// Per million write / read request units (1 WRU = 1 WCU of on-demand).
    pub const DYNAMODB_WRITE: f64 = 0.625;
    pub const DYNAMODB_READ: f64 = 0.125;
    /// Per GB-second (x86_64; arm64 is 20 % less) and per million invocations.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_016_666_7;
    pub const LAMBDA_REQUESTS: f64 = 0.20;
    /// Per million FIFO requests (each up to 64 KB).
    pub const SQS_FIFO: f64 = 0.50;
}

/// The Lambda memory both sides are priced at: account-state's `MemorySize` in template.yaml.
const MEMORY_GB: f64 = 0.25;

/// Dollars per million first-time facts, with this run's duplicates, for DynamoDB, Lambda and
/// SQS (receive + delete, batched by the event source mapping).
fn cost_line(f: &Figures, deliveries_per_fact: f64, batch: usize) -> String {
    let duplicates = deliveries_per_fact - 1.0;
    let dynamodb = (f.capacity_per_first.wcu + duplicates * f.capacity_per_duplicate.wcu)
        * prices::DYNAMODB_WRITE
        + (f.capacity_per_first.rcu + duplicates * f.capacity_per_duplicate.rcu)
            * prices::DYNAMODB_READ;
    // Handler time per delivery, as measured here (against DynamoDB Local on this machine).
    let seconds_per_fact = deliveries_per_fact / f.events_per_s;
    let lambda = seconds_per_fact * MEMORY_GB * prices::LAMBDA_GB_SECOND * 1e6
        + deliveries_per_fact / batch as f64 * prices::LAMBDA_REQUESTS;
    let sqs = deliveries_per_fact * 2.0 / batch as f64 * prices::SQS_FIFO;
    format!(
        "$ per million facts: DynamoDB {dynamodb:.2} + Lambda {lambda:.2} + SQS {sqs:.2} = {:.2}",
        dynamodb + lambda + sqs
    )
}

fn same_balances(ours: &BTreeMap<String, Value>, theirs: &BTreeMap<String, Value>) -> bool {
    ours.len() == theirs.len()
        && ours.iter().all(|(account, o)| {
            theirs.get(account).is_some_and(|t| {
                ["principal", "interest", "fees", "credit"]
                    .iter()
                    .all(|k| o[k] == t[k])
            })
        })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let (stream, unique) = deliveries(&a);
    println!(
        "workload: {} accounts x {} events = {unique} facts, {} deliveries ({} % duplicates), {} batches, {:?}, {} accounts in parallel",
        a.accounts,
        a.events,
        stream.len(),
        a.duplicate_percent,
        if a.fifo {
            "FIFO-grouped"
        } else {
            "interleaved"
        },
        a.engine,
        a.concurrency
    );
    println!(
        "{:<34} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "",
        "events/s",
        "req/first",
        "req/dup",
        "WCU/first",
        "RCU/first",
        "WCU/dup",
        "RCU/dup",
        "p50 ms",
        "p99 ms"
    );
    let show = |name: &str, f: &Figures| {
        println!(
            "{name:<34} {:>9.0} {:>9.2} {:>8.2} {:>9.2} {:>9.2} {:>8.2} {:>8.2} {:>8.1} {:>8.1}   (events/s {:.0}-{:.0})",
            f.events_per_s,
            f.requests_per_first,
            f.requests_per_duplicate,
            f.capacity_per_first.wcu,
            f.capacity_per_first.rcu,
            f.capacity_per_duplicate.wcu,
            f.capacity_per_duplicate.rcu,
            f.p50_ms,
            f.p99_ms,
            f.range.0,
            f.range.1
        );
        let split: Vec<String> = f
            .capacity_per_first
            .wcu_by_item
            .iter()
            .filter(|(_, v)| v.abs() >= 0.005)
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        println!(
            "{:<34} WCU per first-time fact by item: {}",
            "",
            split.join(", ")
        );
    };
    // Untimed: the first transactions of a fresh DynamoDB Local run before its JIT warms up.
    run_ours(&a, &stream, unique, 10).await;
    for batch in [10, 100] {
        let stream = if a.fifo {
            fifo_batches(&stream, batch)
        } else {
            stream.clone()
        };
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..a.repeats.max(1) {
            ours.push(run_ours(&a, &stream, unique, batch).await);
            theirs.extend(run_baseline(&a, &stream, unique, batch));
        }
        let (ours, our_states) = median_run(ours);
        let deliveries_per_fact = stream.len() as f64 / unique as f64;
        show(&format!("account-state, batch {batch}"), &ours);
        println!(
            "{:<34} {}",
            "",
            cost_line(&ours, deliveries_per_fact, batch)
        );
        if theirs.is_empty() {
            println!("  (baseline not run: install it with infra/bench.sh)");
            continue;
        }
        let (theirs, their_states) = median_run(theirs);
        show(&format!("Powertools baseline, batch {batch}"), &theirs);
        println!(
            "{:<34} {}",
            "",
            cost_line(&theirs, deliveries_per_fact, batch)
        );
        println!(
            "  ratio: {:.1}x events/s (medians of {} runs); balances agree: {}",
            ours.events_per_s / theirs.events_per_s,
            a.repeats.max(1),
            if same_balances(&our_states, &their_states) {
                "yes"
            } else {
                "NO"
            }
        );
    }
    println!(
        "peak RSS of the account-state process: {:.1} MB",
        peak_rss_mb()
    );
    println!(
        "capacity by AWS's rules (tests/support/capacity.rs: 2 WCU per started KB in a transaction); {}; Lambda at {} MB, duration as measured here",
        prices::DATED,
        (MEMORY_GB * 1024.0) as u32
    );
}
