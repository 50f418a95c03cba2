//! Quarantine: a message that will not be applied, stored with its raw body and reason.

use servicing_domain::{AccountId, Fingerprint, SourceRef};

use crate::errors::classify;
use crate::items::{self, Item, n, s};
use crate::{ServicingStore, StoreError, now_epoch};

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

impl ServicingStore {
    /// Stores a quarantine item on its own (undecodable input, collisions, spent retry budgets:
    /// nothing to claim). Written with a plain put: a redelivered message gets a second record
    /// rather than none.
    #[tracing::instrument(skip_all, fields(code = entry.code))]
    pub async fn quarantine(&self, entry: &QuarantineEntry<'_>) -> Result<(), StoreError> {
        let (_, now_millis) = now_epoch();
        self.client
            .put_item()
            .table_name(&self.config.table)
            .set_item(Some(self.quarantine_item(entry, now_millis)))
            .send()
            .await
            .map_err(classify)?;
        Ok(())
    }
}

impl ServicingStore {
    pub(crate) fn quarantine_item(&self, entry: &QuarantineEntry<'_>, now_millis: i64) -> Item {
        let day = chrono::DateTime::from_timestamp_millis(now_millis)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let mut item = items::key_item(items::quarantine_key(
            &self.config.consumer,
            &day,
            now_millis,
            entry.message_id,
        ));
        item.insert(items::ITEM_TYPE.into(), s("QUARANTINE"));
        item.insert("consumer".into(), s(&self.config.consumer));
        item.insert("messageId".into(), s(entry.message_id));
        item.insert("rawBody".into(), s(entry.raw_body));
        item.insert("code".into(), s(entry.code));
        item.insert("reason".into(), s(entry.reason));
        item.insert("quarantinedAt".into(), n(now_millis));
        if let Some(source) = entry.source {
            item.insert("sourceSystem".into(), s(&source.system));
            item.insert("sourceEventId".into(), s(&source.event_id));
        }
        if let Some(account) = entry.account_id {
            item.insert("accountId".into(), s(account.as_str()));
        }
        if let Some(fp) = entry.stored_fingerprint {
            item.insert("storedFingerprint".into(), s(fp.as_str()));
        }
        if let Some(fp) = entry.received_fingerprint {
            item.insert("receivedFingerprint".into(), s(fp.as_str()));
        }
        if let Some(count) = entry.receive_count {
            item.insert("receiveCount".into(), n(count));
        }
        item
    }
}
