//! The accounting sub-ledger's items (`ledger-postings`, `docs/ledger.md`): one journal entry
//! per posted event and one balances item per loan account, in the account's own partition
//! (`LEDGER#<accountId>`), and the closed accounting periods (`LEDGER_PERIOD#<nn>`).
//!
//! A posting is ONE `TransactWriteItems`: the entry, put only if its key is new (it is the
//! consumer's claim of the event: `ALL_OLD` tells a duplicate from a collision by its
//! fingerprint), the account's balances put at the version read, and a check that the entry's
//! posting date is still open. So nothing is posted twice, no balance moves without its entry,
//! and no entry lands in a period a close has ended, whatever runs concurrently.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use servicing_domain::journal::{Posting, SubLedger};
use servicing_domain::{AccountId, Currency, Fingerprint};
use sha2::{Digest, Sha256};

use crate::combine::Answer;
use crate::errors::{classify, invalid_request, refuses_the_request};
use crate::items::{self, Item, n, s};
use crate::schema::{from_item, to_item};
use crate::{ServicingStore, StoreError, now_epoch};

/// The sort key of an account's balances item.
const BALANCES: &str = "BALANCES";
/// The sort key prefix of an account's entries.
const ENTRY_PREFIX: &str = "ENTRY#";
/// An entry's attribute holding the entry with its three times (`EntryRecord::posting`).
pub const POSTING: &str = "posting";
/// The closed periods are kept in this many copies, one per shard of accounts, so the check
/// every posting makes does not read one item at the ledger's whole rate.
pub const PERIOD_SHARDS: u8 = 16;

/// `(pk, sk)` of an account's balances.
pub fn sub_ledger_key(account: &AccountId) -> (String, String) {
    (format!("LEDGER#{account}"), BALANCES.to_owned())
}

/// `(pk, sk)` of the entry an event posted on an account.
pub fn entry_key(account: &AccountId, entry_id: &str) -> (String, String) {
    (
        format!("LEDGER#{account}"),
        format!("{ENTRY_PREFIX}{entry_id}"),
    )
}

fn period_key(shard: u8) -> (String, String) {
    (format!("LEDGER_PERIOD#{shard:02}"), "PERIOD".to_owned())
}

fn period_shard(account: &AccountId) -> u8 {
    Sha256::digest(account.as_str().as_bytes())[0] % PERIOD_SHARDS
}

/// An account's balances item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubLedgerRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub account_id: String,
    /// +1 per entry: every posting is conditioned on the version it read.
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
    /// Debit-positive balances by ledger account code.
    pub balances: BTreeMap<String, i64>,
    pub entries: u64,
    /// Epoch seconds of the last posting.
    pub posted_at: i64,
}

impl SubLedgerRecord {
    pub const ITEM_TYPE: &'static str = "SUB_LEDGER";

    pub fn sub_ledger(&self) -> SubLedger {
        SubLedger {
            currency: self.currency,
            balances: self.balances.clone(),
            entries: self.entries,
        }
    }
}

/// What the daily reconciliation last proved of an account's ledger: its balances at
/// `version` were the sum of its entries up to that version. The next check sums only the
/// entries above it (`servicing_ops::ledger`), so checking an account reads what changed since,
/// not its whole life. In its own partition (`LEDGER_CHECK#<account>`), written by the
/// reconciler alone: its role may write nothing of the ledger itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerCheckRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub account_id: String,
    /// The balances' version proved.
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
    pub balances: BTreeMap<String, i64>,
    pub entries: u64,
    /// Epoch seconds of the check.
    pub checked_at: i64,
}

impl LedgerCheckRecord {
    pub const ITEM_TYPE: &'static str = "LEDGER_CHECK";

    /// The balances proved, to add the entries since to.
    pub fn sub_ledger(&self) -> SubLedger {
        SubLedger {
            currency: self.currency,
            balances: self.balances.clone(),
            entries: self.entries,
        }
    }

    /// The check of `balances` as read, at `checked_at` (epoch s).
    pub fn of(balances: &SubLedgerRecord, checked_at: i64) -> Self {
        let (pk, sk) = ledger_check_key(&balances.account_id);
        Self {
            pk,
            sk,
            item_type: Self::ITEM_TYPE.into(),
            account_id: balances.account_id.clone(),
            version: balances.version,
            currency: balances.currency,
            balances: balances.balances.clone(),
            entries: balances.entries,
            checked_at,
        }
    }
}

/// `(pk, sk)` of an account's last ledger check (`account`: its id as stored).
pub fn ledger_check_key(account: &str) -> (String, String) {
    (format!("LEDGER_CHECK#{account}"), "CHECKED".to_owned())
}

/// A posted journal entry: the consumer's claim of the event and the entry itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryRecord {
    pub pk: String,
    pub sk: String,
    pub item_type: String,
    pub consumer: String,
    pub entry_id: String,
    pub account_id: String,
    pub event_type: String,
    /// Of the event's detail: the same id with another detail is a collision.
    pub fingerprint: String,
    /// `YYYY-MM-DD`: the period it is posted to.
    pub posting_date: NaiveDate,
    /// The entry with its three times (JSON of `Posting`).
    pub posting: String,
    /// The account's balances version this entry's posting wrote (1 for its first entry, +1
    /// per entry): the entries since a check are those above the version checked
    /// ([`LedgerCheckRecord`]). Absent on entries posted before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

impl EntryRecord {
    pub const ITEM_TYPE: &'static str = "JOURNAL_ENTRY";

    pub fn posting(&self) -> Result<Posting, StoreError> {
        serde_json::from_str(&self.posting)
            .map_err(|e| StoreError::Corrupt(format!("entry {}: {e}", self.entry_id)))
    }
}

/// How a posting ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutcome {
    Posted,
    /// The event was posted before, with this detail.
    Duplicate,
    /// The event id was posted before with another detail: the first one stands.
    Collision {
        stored: Fingerprint,
    },
    /// The balances moved, or the posting date was closed, since they were read: read again.
    Moved,
    /// A concurrent transaction touched the same items: try again.
    Contended,
}

/// An account's journal: its balances and every entry, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    pub balances: Option<SubLedgerRecord>,
    pub entries: Vec<EntryRecord>,
}

impl ServicingStore {
    /// The account's balances (consistent read).
    pub async fn sub_ledger(
        &self,
        account: &AccountId,
    ) -> Result<Option<SubLedgerRecord>, StoreError> {
        self.get_record(sub_ledger_key(account)).await
    }

    /// The account's balances and the entry of `entry_id` if it was posted: one consistent
    /// `BatchGetItem`, so a redelivery is recognised without a transaction.
    pub async fn sub_ledger_and_entry(
        &self,
        account: &AccountId,
        entry_id: &str,
    ) -> Result<(Option<SubLedgerRecord>, Option<EntryRecord>), StoreError> {
        let keys = [sub_ledger_key(account), entry_key(account, entry_id)];
        let mut found = self.batch_get(&keys).await?;
        let balances = found.remove(&keys[0]).map(from_item).transpose()?;
        let entry = found.remove(&keys[1]).map(from_item).transpose()?;
        Ok((balances, entry))
    }

    /// Whether servicing still holds the record of `fact` (its account-state claim, unexpired):
    /// what the ledger asks of an event on an account opened from servicing (`ledger migrate`),
    /// whose opening holds every fact whose record had gone. One consistent `GetItem` that
    /// returns one attribute.
    pub async fn fact_record_held(
        &self,
        fact: &servicing_domain::SourceRef,
    ) -> Result<bool, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                crate::APPLIER,
                fact,
            ))))
            // The key too, so a held record without an expiry is never an empty answer; the
            // role may read nothing else of it (`dynamodb:Attributes`).
            .projection_expression("pk, expiresAt")
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        let (now, _) = now_epoch();
        // `expiresAt` is whole seconds and a record is alive through its second.
        Ok(got.item.is_some_and(|item| {
            !item.contains_key("expiresAt")
                || items::number(&item, "expiresAt").is_ok_and(|at| at as i64 >= now)
        }))
    }

    /// The last day closed for postings (consistent read of one shard: a close writes them all
    /// in one transaction).
    pub async fn closed_through_any(&self) -> Result<Option<NaiveDate>, StoreError> {
        let period: Option<PeriodRecord> = self.get_record(period_key(0)).await?;
        Ok(period.map(|p| p.closed_through))
    }

    /// One item by key (consistent read), as the record it must be.
    pub(crate) async fn get_record<T: serde::de::DeserializeOwned>(
        &self,
        key: (String, String),
    ) -> Result<Option<T>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        got.item.map(from_item).transpose()
    }

    /// Posts one entry (see the module): `read` is the balances read before (`None`: none
    /// yet), `next` the balances with the entry added. With `loan_version`, also checks that
    /// the account's loan is still at that version (an opening balance is servicing's state
    /// at the version it read: a fact applied since would be counted twice).
    pub async fn post_entry(
        &self,
        posting: &Posting,
        fingerprint: &Fingerprint,
        read: Option<&SubLedgerRecord>,
        next: &SubLedger,
        loan_version: Option<u64>,
    ) -> Result<PostOutcome, StoreError> {
        let entry = &posting.entry;
        let account = &entry.account_id;
        let (now, _) = now_epoch();
        let version = read.map_or(1, |r| r.version + 1);
        let (pk, sk) = entry_key(account, &entry.entry_id);
        let record = EntryRecord {
            pk,
            sk,
            item_type: EntryRecord::ITEM_TYPE.into(),
            consumer: self.config.consumer.clone(),
            entry_id: entry.entry_id.clone(),
            account_id: account.as_str().into(),
            event_type: entry.event_type.clone(),
            fingerprint: fingerprint.as_str().into(),
            posting_date: posting.posting_date,
            posting: serde_json::to_string(posting)
                .map_err(|e| StoreError::Rejected(format!("posting: {e}")))?,
            version: Some(version),
        };
        let claim = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(to_item(&record)?))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        let (pk, sk) = sub_ledger_key(account);
        let balances = SubLedgerRecord {
            pk,
            sk,
            item_type: SubLedgerRecord::ITEM_TYPE.into(),
            account_id: account.as_str().into(),
            version,
            currency: next.currency,
            balances: next.balances.clone(),
            entries: next.entries,
            posted_at: now,
        };
        let balances = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(to_item(&balances)?));
        let balances = match read {
            None => balances.condition_expression("attribute_not_exists(pk)"),
            Some(r) => balances
                .condition_expression("#version = :version")
                .expression_attribute_names("#version", items::VERSION)
                .expression_attribute_values(":version", n(r.version)),
        }
        .build()
        .map_err(invalid_request)?;
        let (pk, sk) = period_key(period_shard(account));
        let open = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item((pk, sk))))
            .condition_expression("attribute_not_exists(pk) OR #through < :date")
            .expression_attribute_names("#through", CLOSED_THROUGH)
            .expression_attribute_values(":date", s(posting.posting_date.to_string()))
            .build()
            .map_err(invalid_request)?;
        let mut transaction = vec![
            TransactWriteItem::builder().put(claim).build(),
            TransactWriteItem::builder().put(balances).build(),
            TransactWriteItem::builder().condition_check(open).build(),
        ];
        if let Some(version) = loan_version {
            let unchanged = ConditionCheck::builder()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(items::loan_key(account))))
                .condition_expression("#version = :version")
                .expression_attribute_names("#version", items::VERSION)
                .expression_attribute_values(":version", n(version))
                .build()
                .map_err(invalid_request)?;
            transaction.push(
                TransactWriteItem::builder()
                    .condition_check(unchanged)
                    .build(),
            );
        }
        let reasons = match self.combiner.send(transaction, None).await? {
            Answer::Committed => return Ok(PostOutcome::Posted),
            Answer::Withdrawn => return Ok(PostOutcome::Contended),
            Answer::Cancelled(reasons) => reasons,
        };
        let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        match codes.as_slice() {
            ["ConditionalCheckFailed", ..] => {
                let stored = reasons[0]
                    .item()
                    .and_then(|item| items::string(item, items::FINGERPRINT))
                    .ok_or_else(|| {
                        StoreError::Corrupt(
                            "a refused entry came back without its fingerprint".into(),
                        )
                    })?;
                Ok(match stored == fingerprint.as_str() {
                    true => PostOutcome::Duplicate,
                    false => PostOutcome::Collision {
                        stored: Fingerprint::from_stored(stored.to_owned()),
                    },
                })
            }
            c if c.contains(&"ConditionalCheckFailed") => Ok(PostOutcome::Moved),
            c if c.contains(&"TransactionConflict") => Ok(PostOutcome::Contended),
            c if c.iter().any(|c| refuses_the_request(c)) => Err(StoreError::Rejected(format!(
                "posting cancelled: {codes:?}"
            ))),
            _ => Err(StoreError::Transient(format!(
                "posting cancelled: {codes:?}"
            ))),
        }
    }

    /// The account's balances and entries: one `Query` of its partition (consistent).
    pub async fn journal(&self, account: &AccountId) -> Result<Journal, StoreError> {
        let (pk, _) = sub_ledger_key(account);
        let found: Vec<Item> = self
            .client
            .query()
            .table_name(&self.config.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(pk))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)?;
        let mut journal = Journal::default();
        for item in found {
            match items::string(&item, items::SK) {
                Some(BALANCES) => journal.balances = Some(from_item(item)?),
                Some(sk) if sk.starts_with(ENTRY_PREFIX) => journal.entries.push(from_item(item)?),
                _ => {}
            }
        }
        Ok(journal)
    }

    /// Closes every day up to `through` for postings (all shards, one transaction): later
    /// postings with an earlier business date go to the first open day. `false`: already
    /// closed that far (nothing changes; a close never reopens a period).
    pub async fn close_ledger_period(&self, through: NaiveDate) -> Result<bool, StoreError> {
        let (now, _) = now_epoch();
        let mut transaction = Vec::new();
        for shard in 0..PERIOD_SHARDS {
            let update = Update::builder()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(period_key(shard))))
                .update_expression("SET #through = :through, #at = :now, #type = :type")
                .condition_expression("attribute_not_exists(pk) OR #through < :through")
                .expression_attribute_names("#through", CLOSED_THROUGH)
                .expression_attribute_names("#at", "closedAt")
                .expression_attribute_names("#type", items::ITEM_TYPE)
                .expression_attribute_values(":through", s(through.to_string()))
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":type", s("LEDGER_PERIOD"))
                .build()
                .map_err(invalid_request)?;
            transaction.push(TransactWriteItem::builder().update(update).build());
        }
        // Every posting checks one of these items in its transaction: a close that meets one
        // is cancelled (TransactionConflict) and tried again.
        for attempt in 0..8 {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(transaction.clone()))
                .send()
                .await;
            let cancelled = match result {
                Ok(_) => return Ok(true),
                Err(e) => match e.into_service_error() {
                    TransactWriteItemsError::TransactionCanceledException(c) => c,
                    other => return Err(crate::errors::classify_service(other)),
                },
            };
            let codes = crate::errors::cancellation_codes(&cancelled);
            if codes.contains(&"ConditionalCheckFailed") {
                return Ok(false);
            }
            if !codes.contains(&"TransactionConflict") {
                return Err(StoreError::Transient(format!("close cancelled: {codes:?}")));
            }
            tokio::time::sleep(crate::backoff(
                attempt + 1,
                std::time::Duration::from_millis(50),
            ))
            .await;
        }
        Err(StoreError::Transient(
            "the close kept meeting concurrent postings".into(),
        ))
    }
}

/// Where the daily reconciliation last saw the ledger settled: `settledThrough` (epoch s), the
/// time up to which a run read the money and the ledger and found them settled (less the grace
/// of the accounts then in flight). Each run reads from there when it is before its window, so
/// a problem found once, a run that failed, timed out or never ran, is read again until a run
/// that covers it settles: nothing moves it but a settled run, or an operator who vouches.
fn settled_key() -> (String, String) {
    ("LEDGER_RECONCILIATION".to_owned(), "SETTLED".to_owned())
}
const SETTLED_THROUGH: &str = "settledThrough";
const CATCHING_UP: &str = "catchingUp";

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SettledRecord {
    settled_through: Option<i64>,
    #[serde(default)]
    catching_up: bool,
}

/// The ledger's mark as a run reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerMark {
    /// Up to when (epoch s) a run last saw the ledger settled; `None`: no run yet.
    pub settled_through: Option<i64>,
    /// A run ran out of time catching the ledger up, every day it read settled: the hourly
    /// catch-up goes on from the mark until it reaches the window.
    pub catching_up: bool,
}

impl ServicingStore {
    /// Up to when (epoch s) the daily reconciliation last saw the ledger settled, if ever.
    pub async fn ledger_settled_through(&self) -> Result<Option<i64>, StoreError> {
        Ok(self.ledger_mark().await?.settled_through)
    }

    /// The mark and whether a catch-up is under way (one consistent `GetItem`).
    pub async fn ledger_mark(&self) -> Result<LedgerMark, StoreError> {
        let mark: Option<SettledRecord> = self.get_record(settled_key()).await?;
        Ok(mark.map_or_else(LedgerMark::default, |m| LedgerMark {
            settled_through: m.settled_through,
            catching_up: m.catching_up,
        }))
    }

    /// Says whether the ledger's catch-up goes on (`catchingUp`, present only while it does);
    /// on the mark's item only, once a run has started it. `false`: there is no mark yet.
    pub async fn set_ledger_catching_up(&self, catching_up: bool) -> Result<bool, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(settled_key())))
            .condition_expression("attribute_exists(#through)")
            .expression_attribute_names("#through", SETTLED_THROUGH)
            .expression_attribute_names("#up", CATCHING_UP);
        let request = if catching_up {
            request
                .update_expression("SET #up = :up")
                .expression_attribute_values(":up", AttributeValue::Bool(true))
        } else {
            request.update_expression("REMOVE #up")
        };
        crate::errors::conditional_update(request.send().await)
    }

    /// Moves `settledThrough` forward to `through` (never back: a slower concurrent run keeps
    /// the later one). `vouched_by`: an operator who vouches for the days before it, recorded
    /// on the item; `None` for a settled run. `false`: it was there already.
    pub async fn advance_ledger_settled(
        &self,
        through: i64,
        vouched_by: Option<&str>,
    ) -> Result<bool, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(settled_key())))
            .condition_expression("attribute_not_exists(#through) OR #through < :through")
            .expression_attribute_names("#through", SETTLED_THROUGH)
            .expression_attribute_names("#at", "settledAt")
            .expression_attribute_names("#type", items::ITEM_TYPE)
            .expression_attribute_values(":through", n(through))
            .expression_attribute_values(":now", n(now_epoch().0))
            .expression_attribute_values(":type", s("LEDGER_RECONCILIATION"));
        let request = match vouched_by {
            None => request
                .update_expression("SET #through = :through, #at = :now, #type = :type REMOVE #by"),
            Some(by) => request
                .update_expression("SET #through = :through, #at = :now, #type = :type, #by = :by")
                .expression_attribute_values(":by", s(by)),
        }
        .expression_attribute_names("#by", "vouchedBy");
        crate::errors::conditional_update(request.send().await)
    }
}

/// A period shard item: every day up to `closedThrough` is closed.
const CLOSED_THROUGH: &str = "closedThrough";

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PeriodRecord {
    closed_through: NaiveDate,
}
