//! The soak (issue 30): production-shaped traffic for N minutes against DynamoDB Local — three
//! warm instances, FIFO and standard order, 30 % duplicates, random faults (throttling past
//! the retries, 5xx, responses lost after the commit, concurrent transactions), instances
//! killed in the middle of a batch, the reconciler and the daily close interleaved — compared
//! with the in-memory ledger verdict by verdict and account by account. Prints what ran and
//! every difference; exits 1 on any.
//!
//!   soak [--minutes N] [--parallel P]     (defaults: 5 minutes, 4 cases side by side)

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use integration_tests::Engine;
use integration_tests::servicing::Servicing;
use integration_tests::soak::{self, SoakConfig, Tally};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let minutes = arg("--minutes", 5);
    let parallel = arg("--parallel", 4) as usize;
    let until = Instant::now() + Duration::from_secs(minutes * 60);
    let started = Instant::now();
    let cases = futures_util::stream::iter(0u64..)
        .take_while(|_| std::future::ready(Instant::now() < until))
        .map(|seed| async move {
            let servicing = Servicing::with_stream(Engine::DynamoDbLocal, false).await;
            soak::run_case(&servicing, &SoakConfig::mix(10_000 + seed)).await
        })
        .buffer_unordered(parallel.max(1));
    futures_util::pin_mut!(cases);
    let mut tally = Tally::default();
    while let Some(case) = cases.next().await {
        tally.add(case);
    }
    println!(
        "soak: {} s on DynamoDB Local, 3 instances per case: {}",
        started.elapsed().as_secs(),
        tally.line()
    );
    for difference in &tally.differences {
        println!("difference: {difference}");
    }
    if !tally.differences.is_empty() {
        std::process::exit(1);
    }
}
