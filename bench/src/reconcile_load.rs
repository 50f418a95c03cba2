//! How long the daily reconciliation takes on a large table (`docs/runbook.md`): generates a
//! table of `--items` items (default 200,000: claims, outbox events, allocations, quarantine) on
//! DynamoDB Local and times one window reconciliation over it — the scan the reconciler Lambda
//! runs, which must finish well inside its 300 s timeout.
//!
//!   reconcile_load [--items N]

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use integration_tests::Engine;
use integration_tests::servicing::create_table;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Item `i` of the generated table: 60 % claims, 25 % outbox events, 10 % allocations, 5 %
/// quarantine items, shaped like the real ones (see `infra/schema.md`).
fn item(i: usize, now: i64) -> HashMap<String, AttributeValue> {
    let account = format!("acc_{}", i % 5_000);
    let mut item = HashMap::new();
    match i % 20 {
        0..=11 => {
            item.insert("pk".into(), s(format!("CLAIM#account-state#psp#fee-{i}")));
            item.insert("sk".into(), s("CLAIM"));
            item.insert("itemType".into(), s("CLAIM"));
            item.insert("consumer".into(), s("account-state"));
            item.insert("sourceSystem".into(), s("psp"));
            item.insert("sourceEventId".into(), s(format!("fee-{i}")));
            item.insert("eventType".into(), s("FEE_ASSESSED"));
            item.insert("accountId".into(), s(account));
            item.insert("fingerprint".into(), s(format!("sha256:{i:064x}")));
            item.insert("verdict".into(), s("APPLIED"));
            item.insert("claimedAt".into(), n(now - (i as i64 % 86_400)));
            item.insert("expiresAt".into(), n(now + 35 * 86_400));
        }
        12..=16 => {
            item.insert("pk".into(), s(format!("OUTBOX#evt_{i:032x}")));
            item.insert("sk".into(), s("OUTBOX"));
            item.insert("itemType".into(), s("OUTBOX"));
            item.insert("eventId".into(), s(format!("evt_{i:032x}")));
            item.insert("source".into(), s("servicing.account-state"));
            item.insert("detailType".into(), s("FeeAssessed"));
            item.insert("accountId".into(), s(account));
            item.insert(
                "detail".into(),
                s(format!(r#"{{"eventId":"evt_{i:032x}","amountMinor":100}}"#)),
            );
            item.insert("createdAt".into(), n(now));
            item.insert("expiresAt".into(), n(now + 35 * 86_400));
        }
        17 | 18 => {
            item.insert("pk".into(), s(format!("LOAN#{account}")));
            item.insert("sk".into(), s(format!("ALLOC#psp#pay-{i}")));
            item.insert("itemType".into(), s("ALLOCATION"));
            item.insert("amountMinor".into(), n(1_000));
            let parts = HashMap::from([
                ("fees".to_owned(), n(100)),
                ("interest".to_owned(), n(200)),
                ("principal".to_owned(), n(700)),
                ("credit".to_owned(), n(0)),
            ]);
            item.insert("allocation".into(), AttributeValue::M(parts));
        }
        _ => {
            item.insert("pk".into(), s("QUARANTINE#account-state#2026-12-01"));
            item.insert("sk".into(), s(format!("{:013}#m-{i}", now * 1000)));
            item.insert("itemType".into(), s("QUARANTINE"));
            item.insert("consumer".into(), s("account-state"));
            item.insert("code".into(), s("invalid_field"));
            item.insert(
                "reason".into(),
                s("field `amountMinor`: must be an integer"),
            );
            item.insert("rawBody".into(), s(r#"{"amountMinor":"x"}"#));
            item.insert("quarantinedAt".into(), n(now * 1000));
        }
    }
    item
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let items: usize = args
        .iter()
        .position(|a| a == "--items")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--items is a number"))
        .unwrap_or(200_000);
    let client = Engine::DynamoDbLocal.dynamodb().await;
    let table = create_table(&client, false).await;
    let now = servicing_ops::epoch_seconds();

    let started = Instant::now();
    let batches: Vec<Vec<usize>> = (0..items)
        .collect::<Vec<_>>()
        .chunks(25)
        .map(<[usize]>::to_vec)
        .collect();
    let writes = batches.into_iter().map(|batch| {
        let client = client.clone();
        let table = table.clone();
        async move {
            let mut requests: Vec<WriteRequest> = batch
                .iter()
                .map(|i| {
                    let put = PutRequest::builder()
                        .set_item(Some(item(*i, now)))
                        .build()
                        .expect("put");
                    WriteRequest::builder().put_request(put).build()
                })
                .collect();
            while !requests.is_empty() {
                let out = client
                    .batch_write_item()
                    .request_items(&table, requests)
                    .send()
                    .await
                    .expect("batch write");
                requests = out
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
    println!(
        "generated {items} items in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let report = servicing_ops::reconcile::reconcile(
        &client,
        &table,
        "account-state",
        (now - 25 * 3600, now + 1),
        None,
    )
    .await
    .expect("reconcile");
    println!(
        "window reconciliation over {items} items ({} scan segments): {:.1} s; applied {}, quarantined {}, allocations checked {}, problems {}",
        servicing_ops::SCAN_SEGMENTS,
        started.elapsed().as_secs_f64(),
        report.applied,
        report.quarantined_unclaimed,
        report.allocations_checked,
        report.problems.len()
    );
    client
        .delete_table()
        .table_name(&table)
        .send()
        .await
        .expect("drop the table");
}
