//! An account's state as operators and the contract's `*.expected.json` read it: the loan, its
//! allocations (its payments' records) and its delinquency changes (the outbox events). Scans:
//! never on a hot path.

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::AccountId;
use servicing_store::schema::{self, ClaimRecord};
use servicing_store::{ServicingStore, StoreError};

/// The account's fact records that also match `filter` (over `values`), read consistently. A
/// scan: for operators and tests on small tables, never on a hot path.
async fn account_records(
    store: &ServicingStore,
    account_id: &AccountId,
    filter: &str,
    values: &[(&str, AttributeValue)],
) -> Result<Vec<crate::Item>, StoreError> {
    values
        .iter()
        .fold(
            store
                .client()
                .scan()
                .table_name(store.table())
                .filter_expression(format!(
                    "itemType = :claim AND accountId = :account AND {filter}"
                ))
                .expression_attribute_values(
                    ":claim",
                    AttributeValue::S(ClaimRecord::ITEM_TYPE.into()),
                )
                .expression_attribute_values(
                    ":account",
                    AttributeValue::S(account_id.as_str().into()),
                ),
            |scan, (name, value)| scan.expression_attribute_values(*name, value.clone()),
        )
        .consistent_read(true)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(servicing_store::classify)
}

/// The `detail` of an account's published events of one type (carried by its facts' records),
/// in business-time order; a record past its expiry is gone (`items::UNEXPIRED`).
pub async fn outbox_details(
    store: &ServicingStore,
    account_id: &AccountId,
    detail_type: &str,
) -> Result<Vec<serde_json::Value>, StoreError> {
    let found = account_records(
        store,
        account_id,
        &format!(
            "attribute_exists(outbox) AND {}",
            servicing_store::items::UNEXPIRED
        ),
        &[(
            ":now",
            AttributeValue::N(crate::epoch_seconds().to_string()),
        )],
    )
    .await?;
    let mut out = Vec::new();
    for item in found {
        let record: ClaimRecord = schema::from_item(item)?;
        out.extend(
            record
                .events()?
                .into_iter()
                .filter(|e| e.detail_type == detail_type)
                .map(|e| e.detail),
        );
    }
    out.sort_by(|a: &serde_json::Value, b| {
        (a["occurredAt"].as_str(), a["eventId"].as_str())
            .cmp(&(b["occurredAt"].as_str(), b["eventId"].as_str()))
    });
    Ok(out)
}

/// The account's stored allocations, read from its applied payments' records themselves, in
/// the order of the payments' identities: what servicing stored, whether or not the ledger has
/// posted them yet (the API lists them through the ledger: `ServicingStore::allocations`).
pub async fn allocations(
    store: &ServicingStore,
    account_id: &AccountId,
) -> Result<Vec<servicing_domain::StoredAllocation>, StoreError> {
    let found = account_records(
        store,
        account_id,
        "eventType = :payment AND verdict = :applied",
        &[
            (
                ":payment",
                AttributeValue::S(servicing_store::items::PAYMENT_SETTLED.into()),
            ),
            (
                ":applied",
                AttributeValue::S(servicing_store::items::Verdict::Applied.as_str().into()),
            ),
        ],
    )
    .await?;
    let mut out = Vec::with_capacity(found.len());
    for item in &found {
        out.extend(servicing_store::items::allocation_from_claim(item)?);
    }
    out.sort_by(|a, b| a.payment.cmp(&b.payment));
    Ok(out)
}

/// The account in the shape of the contract's `*.expected.json` (`None`: no such account).
pub async fn account_report(
    store: &ServicingStore,
    account_id: &AccountId,
) -> Result<Option<serde_json::Value>, StoreError> {
    let Some(account) = store.loan_state(account_id).await?.and_then(|l| l.account) else {
        return Ok(None);
    };
    let allocations = allocations(store, account_id).await?;
    let changes = outbox_details(
        store,
        account_id,
        servicing_domain::outbox::detail_types::DELINQUENCY_CHANGED,
    )
    .await?;
    Ok(Some(servicing_domain::report::account_report(
        &account,
        &allocations,
        &changes,
    )))
}
