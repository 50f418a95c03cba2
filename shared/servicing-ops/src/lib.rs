//! Operations on the servicing table, shared by `ledgerctl` and the scheduled reconciler:
//! reconciliation of what came in against what was applied, quarantine inspection and redrive,
//! and a replay guard that refuses facts whose deduplication window has passed.
//!
//! What they read grows with what they report, not with the table's history: open things from
//! the sparse open index (`open_items`), a window's quarantine by its days. The checks that
//! still read every item say so (`scan_types`): they are for audits, never for a hot path.

pub mod actions;
pub mod backfill;
pub mod dlq;
pub mod incident;
pub mod ledger;
pub mod money;
pub mod parked;
pub mod quarantine;
pub mod reconcile;
pub mod record_log;
pub mod replay;
pub mod report;
pub mod republish;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use servicing_store::ServicingStore;
use servicing_store::open::OpenKind;
use servicing_store::schema::ClaimRecord;

pub type Item = HashMap<String, AttributeValue>;

/// The `map_err` of an AWS call: what failed, followed by the SDK's whole error chain.
pub(crate) fn failed<E: std::error::Error>(
    what: impl std::fmt::Display,
) -> impl FnOnce(E) -> anyhow::Error {
    move |e| {
        anyhow::anyhow!(
            "{what}: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(&e)
        )
    }
}

/// Segments of a parallel scan: a daily reconciliation of a large table must finish well inside
/// the reconciler's timeout (measured: `reconcile_load`, `docs/runbook.md`).
pub const SCAN_SEGMENTS: i32 = 4;

/// Every item of the given types, by type, from ONE consistent scan pass (in `SCAN_SEGMENTS`
/// parallel segments): a filter does not reduce what a scan reads, so one pass for several
/// types costs one table read, not one per type. An item past its expiry is not returned:
/// TTL has not deleted it yet, but it is gone (`items::UNEXPIRED`).
pub async fn scan_types(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    item_types: &[&str],
) -> anyhow::Result<HashMap<String, Vec<Item>>> {
    let segments =
        (0..SCAN_SEGMENTS).map(|segment| scan_segment(client, table, item_types, segment));
    let mut by_type: HashMap<String, Vec<Item>> = item_types
        .iter()
        .map(|t| ((*t).to_owned(), Vec::new()))
        .collect();
    for found in futures_util::future::try_join_all(segments).await? {
        for item in found {
            if let Some(bucket) =
                text(&item, servicing_store::items::ITEM_TYPE).and_then(|t| by_type.get_mut(t))
            {
                bucket.push(item);
            }
        }
    }
    Ok(by_type)
}

async fn scan_segment(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    item_types: &[&str],
    segment: i32,
) -> anyhow::Result<Vec<Item>> {
    let placeholders: Vec<String> = (0..item_types.len()).map(|i| format!(":t{i}")).collect();
    let mut scan = client
        .scan()
        .table_name(table)
        .filter_expression(format!(
            "itemType IN ({}) AND {}",
            placeholders.join(", "),
            servicing_store::items::UNEXPIRED
        ))
        .expression_attribute_values(":now", AttributeValue::N(epoch_seconds().to_string()))
        .consistent_read(true)
        .segment(segment)
        .total_segments(SCAN_SEGMENTS);
    for (placeholder, item_type) in placeholders.iter().zip(item_types) {
        scan = scan
            .expression_attribute_values(placeholder, AttributeValue::S((*item_type).to_owned()));
    }
    scan.into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(failed(format!("scan of {table} failed")))
}

/// Every item of the partition `pk`, read consistently, page after page.
pub(crate) async fn query_partition(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
) -> anyhow::Result<Vec<Item>> {
    client
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(failed(format!("cannot query {pk}")))
}

/// Keys per `BatchGetItem` (DynamoDB's maximum).
const BATCH_GET_KEYS: usize = 100;

/// The items at `keys` that exist, read consistently in `BatchGetItem`s of at most 100 keys;
/// unprocessed keys (throttling) are asked again with a short backoff.
pub(crate) async fn batch_get(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: Vec<Item>,
) -> anyhow::Result<Vec<Item>> {
    let mut found = Vec::new();
    for chunk in keys.chunks(BATCH_GET_KEYS) {
        let mut pending = chunk.to_vec();
        for attempt in 0..8u32 {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(pending))
                .consistent_read(true)
                .build()
                .map_err(|e| anyhow::anyhow!("cannot build the key list: {e}"))?;
            let answer = client
                .batch_get_item()
                .request_items(table, request)
                .send()
                .await
                .map_err(failed(format!("cannot read items from {table}")))?;
            found.extend(
                answer
                    .responses
                    .and_then(|mut r| r.remove(table))
                    .unwrap_or_default(),
            );
            pending = answer
                .unprocessed_keys
                .and_then(|mut u| u.remove(table))
                .map(|k| k.keys)
                .unwrap_or_default();
            if pending.is_empty() {
                break;
            }
            if attempt == 7 {
                anyhow::bail!(
                    "{table} left {} keys unprocessed after 8 attempts",
                    pending.len()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
        }
    }
    Ok(found)
}

/// The items open as `kind` (listed by the open index, then read whole and consistently): what
/// the daily jobs and the listings of open things read, whatever the table's history. An item
/// the index still lists after it closed comes back closed: callers judge its state.
pub async fn open_items(store: &ServicingStore, kind: OpenKind) -> anyhow::Result<Vec<Item>> {
    let keys = store
        .open(kind)
        .await?
        .into_iter()
        .map(|entry| servicing_store::items::key_item((entry.pk, entry.sk)))
        .collect();
    batch_get(store.client(), store.table(), keys).await
}

/// The claim account-state holds for `source`, if any (consistent read; key layout and record
/// from the store). Past its expiry too, while TTL has not deleted it: one fact's checks (a
/// redrive, a replay) learn more from it — a `REJECTED` claim still there was never replaced
/// by an applied one — and judge its expiry themselves.
pub async fn account_state_claim(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    source: &servicing_domain::SourceRef,
) -> anyhow::Result<Option<ClaimRecord>> {
    let key = servicing_store::items::claim_key(servicing_store::APPLIER, source);
    get_record(client, table, key, &format!("the claim of {source}")).await
}

/// The item at `key`, decoded as `T` (consistent read; `what` names it in errors).
pub(crate) async fn get_record<T: serde::de::DeserializeOwned>(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: (String, String),
    what: &str,
) -> anyhow::Result<Option<T>> {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(servicing_store::items::key_item(key)))
        .consistent_read(true)
        .send()
        .await
        .map_err(failed(format!("cannot read {what}")))?
        .item
        .map(|item| {
            servicing_store::schema::from_item(item)
                .map_err(|e| anyhow::anyhow!("{what} does not decode: {e}"))
        })
        .transpose()
}

pub fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

/// An epoch time (seconds) as people read it: ISO 8601, UTC (`2026-11-02T10:00:00Z`).
pub fn iso(epoch_secs: i64) -> String {
    chrono::DateTime::from_timestamp(epoch_secs, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| epoch_secs.to_string())
}

/// The one clock (epoch seconds), shared with the store.
pub use servicing_store::epoch_seconds;
