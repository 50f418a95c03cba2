//! The payments API handler in-process on DynamoDB Local, one request at a time as one Lambda
//! instance serves them: payment commands with fresh `Idempotency-Key`s, the same commands
//! replayed (a client retrying), and account reads. Prints requests/s, p50/p99 latency and
//! DynamoDB requests per call.
//!
//!   cargo run --profile bench-local -p bench --bin apiload -- [--accounts 20] [--commands 500]

// Timings, not money: floats are fine here.
#![allow(clippy::float_arithmetic)]

use std::time::Instant;

use integration_tests::Engine;
use integration_tests::api_gateway::event;
use integration_tests::servicing::{Servicing, sqs_message};
use payments_api::PaymentsApi;
use serde_json::json;

const CALLER: &str = "arn:aws:iam::123456789012:user/bench";

struct Phase {
    name: &'static str,
    calls: usize,
    seconds: f64,
    latencies_ms: Vec<f64>,
    dynamodb_requests: u64,
    statuses: Vec<u16>,
}

impl Phase {
    fn print(mut self) {
        self.latencies_ms.sort_by(f64::total_cmp);
        let at = |p: f64| {
            self.latencies_ms[((self.latencies_ms.len() as f64 - 1.0) * p).round() as usize]
        };
        let mut statuses = self.statuses.clone();
        statuses.sort_unstable();
        statuses.dedup();
        println!(
            "{:<28} {:>8.0} {:>9.2} {:>9.2} {:>14.2}   statuses {statuses:?}",
            self.name,
            self.calls as f64 / self.seconds,
            at(0.5),
            at(0.99),
            self.dynamodb_requests as f64 / self.calls as f64,
        );
    }
}

async fn run(
    name: &'static str,
    servicing: &Servicing,
    api: &PaymentsApi,
    requests: impl Iterator<Item = lambda_http::Request>,
) -> Phase {
    servicing.requests.reset();
    let mut phase = Phase {
        name,
        calls: 0,
        seconds: 0.0,
        latencies_ms: Vec::new(),
        dynamodb_requests: 0,
        statuses: Vec::new(),
    };
    let started = Instant::now();
    for request in requests {
        let t0 = Instant::now();
        let response = api.handle(request).await;
        phase.latencies_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        phase.statuses.push(response.status().as_u16());
        phase.calls += 1;
    }
    phase.seconds = started.elapsed().as_secs_f64();
    phase.dynamodb_requests = servicing.requests.total();
    phase
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} needs a number"))
        })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let accounts = arg("--accounts", 20);
    let commands = arg("--commands", 500);
    // No stream, like the consumer benchmark: see `create_table`.
    let servicing = Servicing::with_stream(Engine::DynamoDbLocal, false).await;
    let handler = servicing.handler();
    for n in 0..accounts {
        let open = json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{n}"),
            "eventType": "LOAN_OPENED", "accountId": format!("acc_api_{n}"),
            "eventTime": "2026-09-01T09:00:00Z", "principalMinor": 10_000_000, "currency": "EUR"});
        handler
            .process(&[sqs_message(&format!("open-{n}"), &open.to_string(), 1)])
            .await;
    }
    let api = PaymentsApi::new(servicing.store("payments-api"));
    let command = |i: usize| {
        let body = json!({"accountId": format!("acc_api_{}", i % accounts), "amountMinor": 100 + i,
            "currency": "EUR", "reference": format!("bench-{i}")})
        .to_string();
        let key = format!("bench-key-{i}");
        event(
            "POST",
            "/v1/payments",
            "POST /v1/payments",
            Some(CALLER),
            Some(&key),
            Some(&body),
        )
    };
    // Untimed warm-up of the engine.
    run(
        "warm-up",
        &servicing,
        &api,
        (commands..commands + 50).map(command),
    )
    .await;

    println!(
        "payments-api on DynamoDB Local, {accounts} accounts, {commands} commands, one request at a time"
    );
    println!(
        "{:<28} {:>8} {:>9} {:>9} {:>14}",
        "", "calls/s", "p50 ms", "p99 ms", "DynamoDB req"
    );
    run(
        "POST, fresh key (202)",
        &servicing,
        &api,
        (0..commands).map(command),
    )
    .await
    .print();
    run(
        "POST, replayed key (202)",
        &servicing,
        &api,
        (0..commands).map(command),
    )
    .await
    .print();
    run(
        "GET /v1/loans/{accountId}",
        &servicing,
        &api,
        (0..commands).map(|i| {
            let path = format!("/v1/loans/acc_api_{}", i % accounts);
            event(
                "GET",
                &path,
                "GET /v1/loans/{accountId}",
                Some(CALLER),
                None,
                None,
            )
        }),
    )
    .await
    .print();
    servicing.drop_table().await;
}
