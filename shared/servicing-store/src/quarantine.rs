//! Quarantine: a message that will not be applied, stored with its raw body and reason.

use servicing_domain::{AccountId, Fingerprint, SourceRef};

use crate::errors::classify;
use crate::items::{self, Item};
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
            .set_item(Some(self.quarantine_item(entry, now_millis)?))
            .send()
            .await
            .map_err(classify)?;
        Ok(())
    }
}

impl ServicingStore {
    pub(crate) fn quarantine_item(
        &self,
        entry: &QuarantineEntry<'_>,
        now_millis: i64,
    ) -> Result<Item, StoreError> {
        let day = chrono::DateTime::from_timestamp_millis(now_millis)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let (pk, sk) =
            items::quarantine_key(&self.config.consumer, &day, now_millis, entry.message_id);
        crate::schema::to_item(&crate::schema::QuarantineRecord {
            pk,
            sk,
            item_type: crate::schema::QuarantineRecord::ITEM_TYPE.into(),
            consumer: self.config.consumer.clone(),
            message_id: entry.message_id.into(),
            raw_body: entry.raw_body.into(),
            code: entry.code.into(),
            reason: entry.reason.into(),
            quarantined_at: now_millis,
            source_system: entry.source.map(|s| s.system.clone()),
            source_event_id: entry.source.map(|s| s.event_id.clone()),
            account_id: entry.account_id.map(|a| a.as_str().to_owned()),
            stored_fingerprint: entry.stored_fingerprint.map(|f| f.as_str().to_owned()),
            received_fingerprint: entry.received_fingerprint.map(|f| f.as_str().to_owned()),
            receive_count: entry.receive_count,
            redrive_count: None,
            redriven_at: None,
        })
    }
}
