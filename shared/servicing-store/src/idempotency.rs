//! The API's idempotent command: the caller-scoped record and its outbox entry in one transaction.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use servicing_domain::{AccountId, Currency, Fingerprint, SourceRef};

use crate::errors::{classify_service, invalid_request, refuses_the_request};
use crate::items::{self, Item, s};
use crate::open::OpenKind;
use crate::schema::OutboxEvent;
use crate::schema::{self, IdempotencyRecord};
use crate::{ServicingStore, StoreError, now_epoch};

/// A stored API response, replayed for a repeated idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub request_fingerprint: Fingerprint,
    pub status: u16,
    pub body: String,
}

/// How an idempotent API command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Recorded with its response and outbox event, in one transaction.
    Accepted,
    /// The key was used before (by this caller): here is what was stored.
    Existing(StoredResponse),
    /// The key was used before, longer ago than the retention: its record is kept (a
    /// tombstone) so the key can never start a second payment, but it no longer replays.
    Expired,
    /// The account does not exist (nothing stored).
    AccountMissing,
    /// The account is kept in another currency (nothing stored).
    CurrencyMismatch { account_currency: String },
    /// Another request with the same key is being committed right now (`TransactionConflict`).
    InFlight,
}

impl ServicingStore {
    /// The payments the API accepted under the identities `sources` name: each one's accepted
    /// event, by source (absent: the API accepted no payment under that identity), read
    /// consistently in `BatchGetItem`s of at most 100 keys — of the records' `outbox` only,
    /// all account-state may read of them; a record that does not decode is its fact's error.
    /// A source is looked for under every key it may be kept under
    /// (`items::accepted_command_keys`): the record whose event has that very identity is the
    /// one.
    pub async fn accepted_commands(
        &self,
        sources: &[&SourceRef],
    ) -> Result<HashMap<SourceRef, Result<OutboxEvent, StoreError>>, StoreError> {
        let wanted: Vec<(&SourceRef, Vec<(String, String)>)> = sources
            .iter()
            .map(|source| (*source, items::accepted_command_keys(source)))
            .collect();
        let keys: Vec<(String, String)> = wanted
            .iter()
            .flat_map(|(_, keys)| keys.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut found = HashMap::new();
        for chunk in keys.chunks(crate::loans::BATCH_GET_MAX_KEYS) {
            found.extend(
                self.batch_get_attributes(chunk, Some(&[items::OUTBOX]))
                    .await?,
            );
        }
        let mut accepted = HashMap::new();
        for (source, keys) in wanted {
            for item in keys.iter().filter_map(|key| found.get(key)) {
                // One unreadable record answers for its own fact only, never the batch's.
                let events = match OutboxEvent::decode(items::string(item, items::OUTBOX)) {
                    Ok(events) => events,
                    Err(e) => {
                        accepted.insert(source.clone(), Err(e));
                        break;
                    }
                };
                let its_own = events.into_iter().find(|event| {
                    event.detail["sourceSystem"] == source.system.as_str()
                        && event.detail["sourceEventId"] == source.event_id.as_str()
                });
                if let Some(event) = its_own {
                    accepted.insert(source.clone(), Ok(event));
                    break;
                }
            }
        }
        Ok(accepted)
    }

    /// The fingerprints of the facts among `sources` this consumer holds `APPLIED` claims of
    /// (one consistent read per 100): what proves an API payment whose record is gone — one
    /// written before records were kept for good, deleted by TTL — was the one applied.
    pub async fn applied_fingerprints(
        &self,
        sources: &[&SourceRef],
    ) -> Result<HashMap<SourceRef, Fingerprint>, StoreError> {
        let keys: Vec<(String, String)> = sources
            .iter()
            .map(|source| items::claim_key(&self.config.consumer, source))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut found = HashMap::new();
        for chunk in keys.chunks(crate::loans::BATCH_GET_MAX_KEYS) {
            found.extend(self.batch_get(chunk).await?);
        }
        let mut applied = HashMap::new();
        for source in sources {
            let Some(item) = found.get(&items::claim_key(&self.config.consumer, source)) else {
                continue;
            };
            if items::string(item, items::VERDICT) == Some(items::Verdict::Applied.as_str())
                && let Some(fingerprint) = items::string(item, items::FINGERPRINT)
            {
                applied.insert(
                    (*source).clone(),
                    Fingerprint::from_stored(fingerprint.to_owned()),
                );
            }
        }
        Ok(applied)
    }

    /// Records an API command: the caller-scoped idempotency record (request fingerprint,
    /// response status and body, replay horizon, and the event the relay sends on from its
    /// stream image), in ONE `TransactWriteItems` with a check that the account exists in
    /// `currency` — one round trip, no read first, one item written. A repeated key returns the
    /// stored record instead.
    #[tracing::instrument(skip_all)]
    pub async fn record_command(
        &self,
        principal_scope: &str,
        // The operation id the API derives from the caller's key: the record's key (the raw
        // key is never stored), what `GET /v1/payments/{operationId}` reads.
        operation_id: &str,
        account_id: &AccountId,
        currency: &Currency,
        response: &StoredResponse,
        outbox: &OutboxEvent,
    ) -> Result<CommandOutcome, StoreError> {
        let (now, _) = now_epoch();
        let replay_until = now + self.config.claim_retention.as_secs() as i64;
        let (pk, sk) = items::idempotency_key(principal_scope, operation_id);
        // No `expiresAt`: TTL never deletes the record, so a key reused after the retention
        // meets it (a tombstone) instead of creating a payment whose outbox event id — derived
        // from the key — already exists downstream. It replays until `replayUntil`.
        let mut record = schema::to_item(&IdempotencyRecord {
            pk,
            sk,
            item_type: IdempotencyRecord::ITEM_TYPE.into(),
            schema_version: schema::SCHEMA_VERSION,
            principal_scope: principal_scope.into(),
            idempotency_key: operation_id.into(),
            fingerprint: response.request_fingerprint.as_str().into(),
            response_status: response.status,
            response_body: response.body.clone(),
            created_at: now,
            replay_until: Some(replay_until),
            expires_at: None,
            outbox: OutboxEvent::encode(std::slice::from_ref(outbox))?,
            trace_header: items::current_trace_header(),
        })?;
        // Accepted: open until the reconciler has seen the payment applied (it removes these).
        if response.status == 202 {
            record.extend(OpenKind::Accepted.attributes(operation_id, now));
        }
        let account_in_currency = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::loan_key(account_id))))
            .condition_expression("attribute_exists(pk) AND #currency = :currency")
            .expression_attribute_names("#currency", items::CURRENCY)
            .expression_attribute_values(":currency", s(currency.as_str()))
            // Tells a missing account (no item) from one in another currency.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(self.tombstoned_put(record)?)
            .transact_items(
                TransactWriteItem::builder()
                    .condition_check(account_in_currency)
                    .build(),
            )
            .send()
            .await;
        let cancelled = match result {
            Ok(_) => return Ok(CommandOutcome::Accepted),
            Err(e) => match e.into_service_error() {
                TransactWriteItemsError::TransactionCanceledException(c) => c,
                other => return Err(classify_service(other)),
            },
        };
        let reasons = cancelled.cancellation_reasons();
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            let item = reasons[0].item().ok_or_else(|| {
                StoreError::Corrupt("refused idempotency record came back empty".into())
            })?;
            let stored: IdempotencyRecord = schema::from_item(item.clone())?;
            let until = stored.replays_until().ok_or_else(|| {
                StoreError::Corrupt("idempotency record without its retention".into())
            })?;
            if until < now {
                return Ok(CommandOutcome::Expired);
            }
            return Ok(CommandOutcome::Existing(StoredResponse {
                request_fingerprint: Fingerprint::from_stored(stored.fingerprint),
                status: stored.response_status,
                body: stored.response_body,
            }));
        }
        if code(1) == "ConditionalCheckFailed" {
            // No item, or only the facts parked before its opening (no currency): missing.
            let currency = reasons[1]
                .item()
                .and_then(|account| items::string(account, items::CURRENCY));
            return Ok(match currency {
                None => CommandOutcome::AccountMissing,
                Some(currency) => CommandOutcome::CurrencyMismatch {
                    account_currency: currency.to_owned(),
                },
            });
        }
        let codes: Vec<&str> = (0..reasons.len()).map(code).collect();
        if codes.contains(&"TransactionConflict") {
            return Ok(CommandOutcome::InFlight);
        }
        if codes.iter().any(|c| refuses_the_request(c)) {
            return Err(StoreError::Rejected(format!(
                "transaction cancelled: {codes:?}"
            )));
        }
        Err(StoreError::Transient(format!(
            "transaction cancelled: {codes:?}"
        )))
    }
}

impl ServicingStore {
    /// A put of a record that is never replaced once written (an API idempotency record), the
    /// stored one returned on refusal (`ALL_OLD`).
    fn tombstoned_put(&self, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}
