//! Quarantine: a message that will not be applied, stored with its raw body and reason.
//!
//! A body over [`RAW_BODY_LIMIT`] is kept as its SHA-256, its byte length and its first
//! [`RAW_BODY_PREFIX`] bytes (`rawBodyTruncated`): SQS carries up to 1 MiB, a DynamoDB item
//! holds 400 KB, and a quarantine item that does not fit would send its message to the
//! dead-letter queue instead — the one thing quarantine is there to prevent. The bound also
//! keeps a transaction that holds several quarantine items (a group's rejections, the
//! reconciler's expiry) well inside its 4 MB.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use servicing_domain::{AccountId, Fingerprint, SourceRef};
use sha2::{Digest, Sha256};

use crate::conditions::CREATE_ONLY;
use crate::errors::{cancellation_codes, classify, classify_service, refuses_the_request};
use crate::items::{self, Item};
use crate::{ServicingStore, StoreError, now_epoch};

/// Bodies up to this many bytes are kept whole.
pub const RAW_BODY_LIMIT: usize = 64 * 1024;
/// What is kept of a larger body (at most this many bytes, cut at a character boundary).
pub const RAW_BODY_PREFIX: usize = 16 * 1024;

/// What a quarantine item keeps of a body: the body, or its prefix, length and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptBody {
    text: String,
    /// `(bytes, sha256)` of the whole body, when `text` is only its prefix.
    truncated: Option<(u64, String)>,
}

fn keep(body: &str) -> KeptBody {
    if body.len() <= RAW_BODY_LIMIT {
        return KeptBody {
            text: body.to_owned(),
            truncated: None,
        };
    }
    let cut = (0..=RAW_BODY_PREFIX)
        .rev()
        .find(|&i| body.is_char_boundary(i))
        .unwrap_or(0);
    let digest = hex::encode(Sha256::digest(body.as_bytes()));
    KeptBody {
        text: body[..cut].to_owned(),
        truncated: Some((body.len() as u64, digest)),
    }
}

/// A message that will not be applied, as stored for operators.
#[derive(Debug, Clone)]
pub struct QuarantineEntry<'a> {
    pub message_id: &'a str,
    pub raw_body: &'a str,
    pub code: &'a str,
    pub reason: &'a str,
    pub source: Option<&'a SourceRef>,
    pub account_id: Option<&'a AccountId>,
    pub stored_fingerprint: Option<&'a Fingerprint>,
    pub received_fingerprint: Option<&'a Fingerprint>,
    pub receive_count: Option<u32>,
}

impl<'a> QuarantineEntry<'a> {
    /// What every quarantined message has: its id, raw body, code and reason; the rest is added
    /// with struct update syntax where known.
    pub fn new(message_id: &'a str, raw_body: &'a str, code: &'a str, reason: &'a str) -> Self {
        Self {
            message_id,
            raw_body,
            code,
            reason,
            source: None,
            account_id: None,
            stored_fingerprint: None,
            received_fingerprint: None,
            receive_count: None,
        }
    }
}

/// How long a message's quarantine mark is kept: past the longest a message can come back. SQS
/// keeps one at most 14 days, and a FIFO queue's dead-letter queue restarts that clock (14 more
/// days there); a stream record lives 24 hours.
pub const MESSAGE_MARK_RETENTION_SECS: i64 = 29 * 86_400;

impl ServicingStore {
    /// Stores a quarantine item on its own (nothing claimed with it: undecodable input,
    /// collisions, refusals before any claim, the relay's, the ledger's and collections'), once
    /// per message: with its message's mark, created only where none is yet. A message
    /// quarantined before (its first write's answer lost, then redelivered) keeps its first
    /// record, and this succeeds; the later delivery's decision record says what it decided.
    #[tracing::instrument(skip_all, fields(code = entry.code))]
    pub async fn quarantine(&self, entry: &QuarantineEntry<'_>) -> Result<(), StoreError> {
        let (now, now_millis) = now_epoch();
        let (pk, sk) = items::quarantined_message_key(&self.config.consumer, entry.message_id);
        let mut mark = items::key_item((pk, sk));
        mark.insert(items::ITEM_TYPE.into(), items::s(MESSAGE_MARK_TYPE));
        mark.insert("quarantinedAt".into(), items::n(now_millis));
        mark.insert(
            "expiresAt".into(),
            items::n(now + MESSAGE_MARK_RETENTION_SECS),
        );
        let sent = self
            .client
            .transact_write_items()
            .transact_items(self.put(mark, Some(CREATE_ONLY))?)
            .transact_items(self.put(self.quarantine_item(entry, now_millis)?, None)?)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.into_err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let codes = cancellation_codes(&c);
                    match codes.as_slice() {
                        ["ConditionalCheckFailed", ..] => {
                            tracing::info!("message quarantined before: its first record stands");
                            Ok(())
                        }
                        _ if codes.iter().any(|c| refuses_the_request(c)) => Err(
                            StoreError::Rejected(format!("quarantine refused: {codes:?}")),
                        ),
                        _ => Err(StoreError::Transient(format!(
                            "quarantine cancelled: {codes:?}"
                        ))),
                    }
                }
                other => Err(classify_service(other)),
            },
            // Timeouts, connection failures (transient), a request never built (refused).
            Err(other) => Err(classify(other)),
        }
    }
}

/// The item type of a message's quarantine mark (`items::quarantined_message_key`).
pub const MESSAGE_MARK_TYPE: &str = "QUARANTINE_MESSAGE";

impl ServicingStore {
    pub(crate) fn quarantine_item(
        &self,
        entry: &QuarantineEntry<'_>,
        now_millis: i64,
    ) -> Result<Item, StoreError> {
        debug_assert!(
            crate::is_quarantine_code(entry.code),
            "quarantine code {:?} is not in QUARANTINE_CODES (quarantine_codes.rs, docs/runbook.md)",
            entry.code
        );
        let day = chrono::DateTime::from_timestamp_millis(now_millis)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let (pk, sk) =
            items::quarantine_key(&self.config.consumer, &day, now_millis, entry.message_id);
        let body = keep(entry.raw_body);
        let (raw_body_bytes, raw_body_sha256) = body.truncated.clone().unzip();
        crate::schema::to_item(&crate::schema::QuarantineRecord {
            pk,
            sk,
            item_type: crate::schema::QuarantineRecord::ITEM_TYPE.into(),
            consumer: self.config.consumer.clone(),
            message_id: entry.message_id.into(),
            raw_body_truncated: body.truncated.is_some(),
            raw_body: body.text,
            raw_body_bytes,
            raw_body_sha256,
            code: entry.code.into(),
            reason: entry.reason.into(),
            quarantined_at: now_millis,
            source_system: entry.source.map(|s| s.system.clone()),
            source_event_id: entry.source.map(|s| s.event_id.clone()),
            account_id: entry.account_id.map(|a| a.as_str().to_owned()),
            stored_fingerprint: entry.stored_fingerprint.map(|f| f.as_str().to_owned()),
            received_fingerprint: entry.received_fingerprint.map(|f| f.as_str().to_owned()),
            receive_count: entry.receive_count,
            claim_retention_secs: Some(
                i64::try_from(self.config.claim_retention.as_secs()).unwrap_or(i64::MAX),
            ),
            redrive_count: None,
            redriven_at: None,
            redriven_by: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::StoreConfig;
    use crate::schema::{QuarantineRecord, from_item};

    fn store(claim_retention: Duration) -> ServicingStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        ServicingStore::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            StoreConfig {
                claim_retention,
                ..StoreConfig::new("table", "account-state")
            },
        )
    }

    fn record(store: &ServicingStore, body: &str) -> QuarantineRecord {
        let entry = QuarantineEntry::new("m-1", body, "not_json", "a reason");
        from_item(
            store
                .quarantine_item(&entry, 1_796_000_000_000)
                .expect("item"),
        )
        .expect("record")
    }

    #[test]
    fn when_a_message_is_quarantined_should_record_the_writers_claim_retention() {
        let day = Duration::from_secs(86_400);
        assert_eq!(
            record(&store(40 * day), "{}").claim_retention_secs,
            Some(40 * 86_400)
        );
    }

    #[test]
    fn when_a_body_is_over_the_bound_should_keep_its_hash_length_and_a_prefix() {
        let store = store(Duration::from_secs(35 * 86_400));
        let small = "x".repeat(RAW_BODY_LIMIT);
        let kept = record(&store, &small);
        assert_eq!(
            kept.raw_body, small,
            "up to the bound, the body is kept whole"
        );
        assert!(!kept.raw_body_truncated && kept.raw_body_bytes.is_none());

        // A multi-byte character across the prefix's end is not split.
        let big = format!(
            "{}é{}",
            "a".repeat(RAW_BODY_PREFIX - 1),
            "b".repeat(500_000)
        );
        let kept = record(&store, &big);
        assert!(kept.raw_body_truncated);
        assert_eq!(kept.raw_body, "a".repeat(RAW_BODY_PREFIX - 1));
        assert_eq!(kept.raw_body_bytes, Some(big.len() as u64));
        assert_eq!(kept.raw_body_sha256.map(|h| h.len()), Some(64));
        // The hash is the plain SHA-256 of the body's bytes, as `sha256sum` prints it
        // (computed with Python's hashlib over 65537 "z").
        assert_eq!(
            keep(&"z".repeat(RAW_BODY_LIMIT + 1)).truncated,
            Some((
                RAW_BODY_LIMIT as u64 + 1,
                "810c37bb91b70d110564f7739f88b79f6e2ad5b9553d5a7a8119bf3a376e87f9".to_owned()
            ))
        );
    }
}
