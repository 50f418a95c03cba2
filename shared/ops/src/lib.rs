//! Operations on the servicing table, shared by `ledgerctl` and the scheduled reconciler:
//! reconciliation of what came in against what was applied, quarantine inspection and redrive,
//! and a replay guard that refuses facts whose deduplication window has passed.
//!
//! These read with `Scan`: they are for operators and a daily job, never for a hot path.

pub mod quarantine;
pub mod reconcile;
pub mod replay;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

pub type Item = HashMap<String, AttributeValue>;

/// Every item of `item_type` (paginated consistent scan).
pub async fn scan_type(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    item_type: &str,
) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .filter_expression("itemType = :t")
            .expression_attribute_values(":t", AttributeValue::S(item_type.to_owned()))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "scan of {table} failed: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                )
            })?;
        items.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(items);
        }
    }
}

/// The claim account-state holds for `source`, if any (consistent read; key layout from the store).
pub async fn account_state_claim(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    source: &servicing_domain::SourceRef,
) -> Result<Option<Item>, String> {
    let key = servicing_store::items::key_item(servicing_store::items::claim_key(
        "account-state",
        source,
    ));
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map(|got| got.item)
        .map_err(|e| {
            format!(
                "cannot read the claim of {source}: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(&e)
            )
        })
}

pub fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

pub fn number(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

pub fn now_epoch_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}
