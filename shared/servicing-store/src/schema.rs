//! The typed records of the table's fact (claim), idempotency, action and quarantine items: the writers build them, the
//! operators' readers (`servicing-ops`) decode them, and `serde_dynamo` maps them — one place
//! that names their attributes (`infra/schema.md`).

use serde::{Deserialize, Serialize};
use servicing_domain::{AccountId, Bucket, FactTag, SourceRef, StoredAllocation};

use crate::StoreError;
use crate::items::Item;

/// The version of the table's layout, on every fact and idempotency record (`schemaVersion`):
/// 2 is one record per fact (its claim carries its events and allocation). Nothing was deployed
/// with version 1 (separate outbox and allocation items), so no item lacks it in service.
pub const SCHEMA_VERSION: u32 = 2;

/// The record of a fact (its claim): who judged it, how, until when it deduplicates, and — when
/// applied — what it wrote besides the loan: the events the relay publishes from this record's
/// stream image (a payment's `PaymentApplied` carries its allocation: the one stored copy). One
/// item per fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    #[serde(default)]
    pub schema_version: u32,
    pub consumer: String,
    pub source_system: String,
    pub source_event_id: String,
    pub event_type: String,
    pub account_id: String,
    pub fingerprint: String,
    /// `APPLIED`, `STALE`, `REJECTED` or `PARKED`.
    pub verdict: String,
    /// Epoch seconds.
    pub claimed_at: i64,
    /// Epoch seconds; past it the claim no longer deduplicates (TTL deletes it later). Absent on
    /// an applied payment: it is remembered for as long as its allocation, for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The applied fact's events, as the relay publishes them (JSON array of [`OutboxEvent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<String>,
    /// The account of an applied payment the ledger does not list (one of no money, or any
    /// payment of an earlier release): the key of the sparse `AllocationsIndex` that lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_to: Option<String>,
    /// On an applied payment's record, the reversal that reversed it (set once, by the
    /// reversal's transaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reversed_by: Option<ReversalMark>,
    /// The X-Ray trace of the invocation that applied it, carried on to EventBridge and SQS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_header: Option<String>,
}

impl ClaimRecord {
    pub const ITEM_TYPE: &'static str = "CLAIM";

    pub fn source(&self) -> SourceRef {
        SourceRef {
            system: self.source_system.clone(),
            event_id: self.source_event_id.clone(),
        }
    }

    /// The events its write published (none unless applied).
    pub fn events(&self) -> Result<Vec<OutboxEvent>, StoreError> {
        OutboxEvent::decode(self.outbox.as_deref())
    }

    /// An applied payment's allocation (from its `PaymentApplied` event), with its reversal.
    pub fn allocation(&self) -> Result<Option<StoredAllocation>, StoreError> {
        allocation_of(self.outbox.as_deref(), self.reversed_by.as_ref())
    }
}

/// A reversal's mark on its payment's record (`reversedBy`): the reversal's identity and its
/// payload's tag, so that a reversal resent after its claim expired is told from another
/// payload under the same identity. Marks written before the tag was kept have identity only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReversalMark {
    #[serde(flatten)]
    pub by: SourceRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<FactTag>,
}

/// The allocation a record's events carry (its `PaymentApplied`), with its reversal's mark.
pub(crate) fn allocation_of(
    outbox: Option<&str>,
    reversed_by: Option<&ReversalMark>,
) -> Result<Option<StoredAllocation>, StoreError> {
    let events = OutboxEvent::decode(outbox)?;
    Ok(events
        .iter()
        .find_map(|e| servicing_domain::outbox::payment_allocation(&e.detail))
        .map(|mut allocation| {
            allocation.reversed_by = reversed_by.map(|mark| mark.by.clone());
            allocation.reversal_fact = reversed_by.and_then(|mark| mark.fact.clone());
            allocation
        }))
}

/// An event to publish, in its final form, as a fact or idempotency record carries it (in its
/// `outbox` attribute, a JSON array) for the relay. Its id is the detail's `eventId` (kept once:
/// the record's size is what its write costs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxEvent {
    /// EventBridge `source` (`servicing.<consumer>`).
    pub source: String,
    /// EventBridge `detail-type`.
    pub detail_type: String,
    /// EventBridge `detail`, with the event's `eventId`.
    pub detail: serde_json::Value,
}

impl OutboxEvent {
    /// The event's id (downstream consumers deduplicate on it).
    pub fn event_id(&self) -> &str {
        self.detail["eventId"].as_str().unwrap_or_default()
    }

    /// The `outbox` attribute of `events` (`None` when there are none).
    pub fn encode(events: &[OutboxEvent]) -> Result<Option<String>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        serde_json::to_string(events)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode outbox events: {e}")))
    }

    pub fn decode(outbox: Option<&str>) -> Result<Vec<OutboxEvent>, StoreError> {
        outbox.map_or(Ok(Vec::new()), |json| {
            serde_json::from_str(json)
                .map_err(|e| StoreError::Corrupt(format!("undecodable outbox events: {e}")))
        })
    }
}

/// A message that will not be applied, kept with its raw body for an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub consumer: String,
    pub message_id: String,
    /// The message body, whole; or, when `raw_body_truncated`, only its first bytes (a body
    /// over the bound fits no item: SQS carries 1 MiB, an item holds 400 KB).
    pub raw_body: String,
    /// The body was too large to keep: `raw_body` is a prefix, and the body is known by its
    /// length and SHA-256 (to match it with the producer's copy or a dead letter).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_body_truncated: bool,
    /// Bytes of the whole body (with `raw_body_truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body_bytes: Option<u64>,
    /// Lower-case hex SHA-256 of the whole body (with `raw_body_truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body_sha256: Option<String>,
    pub code: String,
    pub reason: String,
    /// Epoch milliseconds.
    pub quarantined_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    /// The writer's claim retention (seconds) when it quarantined this: a redrive knows from it
    /// how long a claim made since would still deduplicate (absent on items written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_retention_secs: Option<i64>,
    /// Set by an operator's redrive (absent until the first): how many, when (epoch s) and by
    /// whom (the caller's ARN, last redrive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redriven_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redriven_by: Option<String>,
}

impl QuarantineRecord {
    pub const ITEM_TYPE: &'static str = "QUARANTINE";

    pub fn source(&self) -> Option<SourceRef> {
        Some(SourceRef {
            system: self.source_system.clone()?,
            event_id: self.source_event_id.clone()?,
        })
    }
}

/// An API idempotency record: the caller's key, the request it was first used with and the
/// response it replays. Never deleted (no `expiresAt`): past `replayUntil` it refuses the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdempotencyRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    #[serde(default)]
    pub schema_version: u32,
    pub principal_scope: String,
    pub idempotency_key: String,
    /// Of the request.
    pub fingerprint: String,
    pub response_status: u16,
    pub response_body: String,
    /// Epoch seconds.
    pub created_at: i64,
    /// Epoch seconds; records written before the tombstone rule carry `expiresAt` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_until: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The accepted command's event (JSON array of one [`OutboxEvent`]): the relay sends it on
    /// from this record's stream image. Absent on a refused command's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_header: Option<String>,
}

impl IdempotencyRecord {
    pub const ITEM_TYPE: &'static str = "IDEMPOTENCY";

    /// Until when it replays (epoch seconds).
    pub fn replays_until(&self) -> Option<i64> {
        self.replay_until.or(self.expires_at)
    }
}

/// A collections action: its intent, created with its claim, then leased and settled by
/// conditional updates (`actions.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionItem {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub action_id: String,
    pub account_id: String,
    pub event_id: String,
    /// `PENDING`, `SENDING`, `UNKNOWN`, `SENT`, `REJECTED` or `SUPERSEDED`.
    pub status: String,
    pub attempts: u64,
    /// What is sent to the receiver (JSON).
    pub payload: String,
    /// Epoch seconds.
    pub created_at: i64,
    /// While `SENDING`: who holds the call and until when (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_http_status: Option<u16>,
    /// The last attempt: the receiver's status (0: no answer), what it said, when (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
    /// To a receiver that does not deduplicate, after an attempt whose outcome is unknown:
    /// what its status endpoint last said (`delivered`, `not delivered`, `no answer: …`) and
    /// when (epoch ms), recorded before anything followed from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_said: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_asked_at: Option<i64>,
}

impl ActionItem {
    pub const ITEM_TYPE: &'static str = "ACTION";
}

/// The latest `DelinquencyChanged` of an account that collections has seen, by `occurredAt`
/// then `eventId`: put with the claim of that change, conditioned on being the later one, so it
/// only moves forward; an action is executed only while no later change is recorded here
/// (`actions.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatestDelinquencyRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub account_id: String,
    /// The change's event.
    pub event_id: String,
    /// The change's `occurredAt`, epoch milliseconds (compared in the put's condition).
    pub occurred_at: i64,
    pub from_bucket: String,
    pub to_bucket: String,
    /// Epoch seconds.
    pub updated_at: i64,
}

impl LatestDelinquencyRecord {
    pub const ITEM_TYPE: &'static str = "DELINQUENCY_LATEST";

    /// `(pk, sk)`: one per account and consumer.
    pub fn key(consumer: &str, account: &AccountId) -> (String, String) {
        (
            format!("DELINQUENCY#{consumer}#{account}"),
            "LATEST".to_owned(),
        )
    }

    /// The record of one change (`occurred_at` in epoch ms; `updated_at` is set on write).
    pub fn new(
        consumer: &str,
        account: &AccountId,
        event_id: &str,
        occurred_at: i64,
        from: Bucket,
        to: Bucket,
    ) -> Self {
        let (pk, sk) = Self::key(consumer, account);
        Self {
            pk,
            sk,
            item_type: Self::ITEM_TYPE.into(),
            account_id: account.as_str().into(),
            event_id: event_id.into(),
            occurred_at,
            from_bucket: from.as_str().into(),
            to_bucket: to.as_str().into(),
            updated_at: 0,
        }
    }
}

/// `record` as a table item.
pub fn to_item<T: Serialize>(record: &T) -> Result<Item, StoreError> {
    serde_dynamo::to_item(record).map_err(crate::items::encode_error)
}

/// An item as the record it must be (`Corrupt` when it is not).
pub fn from_item<T: serde::de::DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(crate::items::decode_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_a_quarantine_record_round_trips_should_keep_absent_fields_absent() {
        let record = QuarantineRecord {
            pk: "QUARANTINE#account-state#2026-12-01".into(),
            sk: "1796000000000#m-1".into(),
            item_type: QuarantineRecord::ITEM_TYPE.into(),
            consumer: "account-state".into(),
            message_id: "m-1".into(),
            raw_body: "{".into(),
            raw_body_truncated: false,
            raw_body_bytes: None,
            raw_body_sha256: None,
            code: "not_json".into(),
            reason: "not valid UTF-8 JSON".into(),
            quarantined_at: 1_796_000_000_000,
            source_system: None,
            source_event_id: None,
            account_id: None,
            stored_fingerprint: None,
            received_fingerprint: None,
            receive_count: Some(2),
            claim_retention_secs: Some(35 * 86_400),
            redrive_count: None,
            redriven_at: None,
            redriven_by: None,
        };
        let item = to_item(&record).expect("item");
        assert!(!item.contains_key("sourceSystem") && !item.contains_key("redriveCount"));
        assert!(!item.contains_key("rawBodyTruncated") && !item.contains_key("rawBodySha256"));
        assert_eq!(
            item["claimRetentionSecs"],
            aws_sdk_dynamodb::types::AttributeValue::N("3024000".into())
        );
        assert_eq!(
            item["quarantinedAt"],
            aws_sdk_dynamodb::types::AttributeValue::N("1796000000000".into())
        );
        assert_eq!(from_item::<QuarantineRecord>(item).expect("record"), record);
    }
}
