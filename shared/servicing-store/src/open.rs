//! The sparse index of open things (`OpenIndex`, keys only): an item carries `openShard` and
//! `openSince` only while what it stands for is open — a loan holding parked facts, a
//! collections action not settled, an accepted API payment not yet confirmed applied — written
//! by the write that opens it and removed by the one that closes it. The daily jobs and the
//! operators' listings query it, so they read what is open, never the table's history.
//!
//! Price on the hot path: nothing for an ordinary fact (its items never carry the attributes);
//! an index write when a thing opens or closes (DynamoDB writes an index only when an item's
//! index keys change, or it enters or leaves the index).

use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

use crate::errors::{classify, conditional_update};
use crate::items::{self, Item, n, s};
use crate::{ActionStatus, ServicingStore, StoreError};

/// The index's name (template.yaml `ServicingTable`).
pub const OPEN_INDEX: &str = "OpenIndex";
/// The index's partition key: `OPEN#<kind>#<nn>`.
pub const OPEN_SHARD: &str = "openShard";
/// The index's sort key (N): when it opened, epoch seconds (for a loan, its oldest parked fact).
pub const OPEN_SINCE: &str = "openSince";
/// Partitions per kind, so no partition of the index takes every write of a kind.
pub const OPEN_SHARDS: u8 = 16;
/// On an accepted API payment's record once the reconciler has seen it applied (epoch s).
pub const CONFIRMED_AT: &str = "confirmedAt";

/// What is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    /// A loan item holding parked facts (key: the account id).
    Parked,
    /// A collections action not settled (`PENDING`, `SENDING`, `UNKNOWN`; key: the action id).
    Action,
    /// An API payment answered 202 and not yet confirmed applied (key: the operation id).
    Accepted,
}

impl OpenKind {
    pub const ALL: [OpenKind; 3] = [OpenKind::Parked, OpenKind::Action, OpenKind::Accepted];

    pub fn as_str(self) -> &'static str {
        match self {
            OpenKind::Parked => "PARKED",
            OpenKind::Action => "ACTION",
            OpenKind::Accepted => "ACCEPTED",
        }
    }

    /// `OPEN#<kind>#<nn>`: a stable spread of keys over the kind's shards.
    pub fn shard_of(self, key: &str) -> String {
        let digest = Sha256::digest(key.as_bytes());
        self.shard(digest[0] % OPEN_SHARDS)
    }

    fn shard(self, shard: u8) -> String {
        format!("OPEN#{}#{shard:02}", self.as_str())
    }

    /// The index attributes of an open item keyed `key`, open since `since` (epoch seconds).
    pub fn attributes(self, key: &str, since: i64) -> [(String, AttributeValue); 2] {
        [
            (OPEN_SHARD.to_owned(), s(self.shard_of(key))),
            (OPEN_SINCE.to_owned(), n(since)),
        ]
    }
}

/// One entry of the index: the table key of an open item and when it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenEntry {
    pub pk: String,
    pub sk: String,
    pub since: i64,
}

impl ServicingStore {
    /// Takes an item out of the open index (what closes an accepted API payment: the
    /// reconciler has seen it applied). Only the index keys go; an item that is gone is left
    /// alone.
    pub async fn close_open(&self, (pk, sk): (String, String)) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item((pk, sk))))
            // `confirmedAt` says it closed (a backfill never reopens it).
            .update_expression("REMOVE #shard, #since SET #confirmed = :now")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#shard", OPEN_SHARD)
            .expression_attribute_names("#since", OPEN_SINCE)
            .expression_attribute_names("#confirmed", CONFIRMED_AT)
            .expression_attribute_values(":now", n(crate::now_epoch().0))
            .send()
            .await;
        conditional_update(result).map(|_| ())
    }

    /// Every open item of `kind`, oldest first: one paginated `Query` per shard of the index,
    /// never a scan. The index is eventually consistent: a thing opened a moment ago may be
    /// missing and one closed a moment ago still listed, so readers read the item itself
    /// (consistently) before they act on it.
    pub async fn open(&self, kind: OpenKind) -> Result<Vec<OpenEntry>, StoreError> {
        let mut entries = Vec::new();
        for shard in 0..OPEN_SHARDS {
            let found: Vec<Item> = self
                .client
                .query()
                .table_name(&self.config.table)
                .index_name(OPEN_INDEX)
                .key_condition_expression("#shard = :shard")
                .expression_attribute_names("#shard", OPEN_SHARD)
                .expression_attribute_values(":shard", s(kind.shard(shard)))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(classify)?;
            for item in found {
                let field = |name: &str| {
                    items::string(&item, name)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            StoreError::Corrupt(format!("an {OPEN_INDEX} entry without {name}"))
                        })
                };
                entries.push(OpenEntry {
                    pk: field(items::PK)?,
                    sk: field(items::SK)?,
                    since: i64::try_from(items::number(&item, OPEN_SINCE)?).unwrap_or(i64::MAX),
                });
            }
        }
        entries.sort_by(|a, b| (a.since, &a.pk).cmp(&(b.since, &b.pk)));
        Ok(entries)
    }
}

impl ServicingStore {
    /// Gives an item written before the open index existed its index keys (a one-off
    /// backfill): `kind`'s shard of `shard_key`, open since `since`, only while the item is
    /// still open as `kind` says and has no keys yet. `false`: it closed meanwhile, or has them.
    pub async fn backfill_open(
        &self,
        key: (String, String),
        kind: OpenKind,
        shard_key: &str,
        since: i64,
    ) -> Result<bool, StoreError> {
        let [(_, shard), (_, since)] = kind.attributes(shard_key, since);
        let request = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(key)))
            .update_expression("SET #shard = :shard, #since = :since")
            .expression_attribute_names("#shard", OPEN_SHARD)
            .expression_attribute_names("#since", OPEN_SINCE)
            .expression_attribute_values(":shard", shard)
            .expression_attribute_values(":since", since);
        let unkeyed = "attribute_exists(pk) AND attribute_not_exists(#shard)";
        let request = match kind {
            OpenKind::Parked => request
                .condition_expression(format!("{unkeyed} AND attribute_exists(#parked)"))
                .expression_attribute_names("#parked", items::PARKED_FACTS),
            OpenKind::Action => request
                .condition_expression(format!(
                    "{unkeyed} AND #status IN (:pending, :sending, :unknown)"
                ))
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":pending", s(ActionStatus::Pending.as_str()))
                .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
                .expression_attribute_values(":unknown", s(ActionStatus::Unknown.as_str())),
            OpenKind::Accepted => request
                .condition_expression(format!(
                    "{unkeyed} AND #answered = :accepted AND attribute_not_exists(#confirmed)"
                ))
                .expression_attribute_names("#answered", "responseStatus")
                .expression_attribute_names("#confirmed", CONFIRMED_AT)
                .expression_attribute_values(":accepted", n(202)),
        };
        conditional_update(request.send().await)
    }
}
