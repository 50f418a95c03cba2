//! The sparse index of accounts in arrears (`ArrearsIndex`): the loan item carries
//! `arrearsShard` and `arrearsSince` (the due date of its oldest installment with an unpaid
//! remainder) only while it has one, written with the loan item in the fact's transaction. The
//! daily aging job queries it for the accounts past due on a date instead of scanning the table.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::NaiveDate;
use servicing_domain::{AccountId, LoanAccount};
use sha2::{Digest, Sha256};

use crate::errors::classify;
use crate::items::{self, Item, s};
use crate::{ServicingStore, StoreError};

/// The index's name (template.yaml `ServicingTable`).
pub const ARREARS_INDEX: &str = "ArrearsIndex";
/// The index's partition key: one of [`ARREARS_SHARDS`] values, so no partition of the index
/// takes every arrears write.
pub const ARREARS_SHARD: &str = "arrearsShard";
/// The index's sort key: `YYYY-MM-DD`, the oldest unpaid installment's due date.
pub const ARREARS_SINCE: &str = "arrearsSince";
/// Partitions of the index (each queried once per run).
pub const ARREARS_SHARDS: u8 = 16;

/// The index attributes of a loan item with something unpaid and billed (none otherwise).
pub(crate) fn arrears_attributes(account: &LoanAccount) -> Option<[(String, AttributeValue); 2]> {
    let since = account.oldest_unpaid_due_date()?;
    Some([
        (ARREARS_SHARD.to_owned(), s(shard_of(&account.account_id))),
        (
            ARREARS_SINCE.to_owned(),
            s(since.format("%Y-%m-%d").to_string()),
        ),
    ])
}

/// `ARREARS#<n>`: a stable spread of accounts over the shards.
pub fn shard_of(account: &AccountId) -> String {
    let digest = Sha256::digest(account.as_str().as_bytes());
    format!("ARREARS#{:02}", digest[0] % ARREARS_SHARDS)
}

impl ServicingStore {
    /// The accounts with an installment due before `date` and still unpaid: past due on
    /// `date`. One paginated `Query` of the index per shard; never a scan. The index is
    /// eventually consistent: an account that went into arrears moments ago may be missed,
    /// and caught by the next day's close (DPD depends only on the date).
    pub async fn accounts_in_arrears(&self, date: NaiveDate) -> Result<Vec<AccountId>, StoreError> {
        let before = date.format("%Y-%m-%d").to_string();
        let mut accounts = Vec::new();
        for shard in 0..ARREARS_SHARDS {
            let found: Vec<Item> = self
                .client
                .query()
                .table_name(&self.config.table)
                .index_name(ARREARS_INDEX)
                .key_condition_expression("#shard = :shard AND #since < :before")
                .expression_attribute_names("#shard", ARREARS_SHARD)
                .expression_attribute_names("#since", ARREARS_SINCE)
                .expression_attribute_values(":shard", s(format!("ARREARS#{shard:02}")))
                .expression_attribute_values(":before", s(before.clone()))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(classify)?;
            for item in found {
                let account = items::string(&item, items::PK)
                    .and_then(|pk| pk.strip_prefix("LOAN#"))
                    .and_then(|id| AccountId::parse(id).ok())
                    .ok_or_else(|| {
                        StoreError::Corrupt("an arrears index entry without a loan key".into())
                    })?;
                accounts.push(account);
            }
        }
        accounts.sort();
        Ok(accounts)
    }
}
