//! The facts' records of a window or of business dates, and the accounts whose ledger was
//! written then, read through the record log the relay keeps from the table's stream
//! (`servicing_store::record_log`): the log's partitions of the hours or dates asked for, then
//! each listed record by key. What is read grows with the window, never with the table's
//! history.
//!
//! The log is as complete as the relay is current: a record is listed once the relay has taken
//! its stream record (seconds; `RelayIteratorAgeAlarm` says when it is behind), so a
//! window is reconciled once it has closed (the reconciler's window ends at its start).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::NaiveDate;
use servicing_domain::SourceRef;
use servicing_store::APPLIER;
use servicing_store::items;
use servicing_store::record_log::{self, LedgerListing};

use crate::{Item, batch_get, epoch_seconds, query_partition};

/// The most hours one read of the log covers (400 days, as the quarantine's days).
pub const MAX_HOURS: i64 = 400 * 24;

/// `consumer`'s records claimed in `[from, to)` (epoch s), as they are now (read by key,
/// consistently). A record past its expiry is not returned: gone to every count, whether TTL
/// has deleted it or not (`items::UNEXPIRED`). A record whose claim was replaced in a later
/// hour (a parked fact applied) is returned with its later `claimedAt`: callers judge the
/// window by it.
pub async fn claimed_in(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    (from, to): (i64, i64),
) -> anyhow::Result<Vec<Item>> {
    let partitions = hours_of((from, to))?
        .filter_map(|hour| record_log::claimed_partition(consumer, hour))
        .collect();
    listed(client, table, consumer, partitions).await
}

/// The start (epoch s) of each UTC hour `[from, to)` meets, at most [`MAX_HOURS`].
fn hours_of((from, to): (i64, i64)) -> anyhow::Result<impl Iterator<Item = i64>> {
    let first_hour = from.div_euclid(3600);
    let hours = if to <= from {
        0
    } else {
        (to - 1).div_euclid(3600) - first_hour + 1
    };
    anyhow::ensure!(
        hours <= MAX_HOURS,
        "{hours} hours of records asked for; at most {MAX_HOURS}"
    );
    Ok((first_hour..first_hour + hours).map(|hour| hour * 3600))
}

/// What the ledger's partitions list of an hour range and of business dates
/// (`servicing_store::record_log::LedgerListing`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerListed {
    /// Every account named.
    pub accounts: BTreeSet<String>,
    /// The entries put, by account, each with the latest hour (epoch s) a write of it was
    /// listed under (`i64::MIN`: listed only by its cash's date): what is read of an account
    /// since its last check.
    pub entries: BTreeMap<String, BTreeMap<String, i64>>,
    /// Accounts an entry of which was changed or removed by hand: read whole.
    pub changed: BTreeSet<String>,
}

/// What was written of the ledger in `[from, to)` (epoch s): an entry, the balances, an entry
/// changed by hand; and the entries holding a payment's or reversal's cash dated one of `dates`.
pub async fn ledger_listed(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    window: (i64, i64),
    dates: &BTreeSet<NaiveDate>,
) -> anyhow::Result<LedgerListed> {
    let partitions = hours_of(window)?
        .filter_map(|hour| Some((record_log::ledger_hour_partition(hour)?, Some(hour))))
        .chain(
            dates
                .iter()
                .map(|date| (record_log::ledger_date_partition(*date), None)),
        );
    let mut listed = LedgerListed::default();
    for (partition, hour) in partitions {
        for item in query_partition(client, table, &partition).await? {
            for fact in record_log::facts_of(&item) {
                let listing = LedgerListing::parse(fact);
                let account = listing.account().to_owned();
                match listing {
                    LedgerListing::Entry(_, entry_id) => {
                        let at = listed
                            .entries
                            .entry(account.clone())
                            .or_default()
                            .entry(entry_id.to_owned())
                            .or_insert(i64::MIN);
                        *at = (*at).max(hour.unwrap_or(i64::MIN));
                    }
                    LedgerListing::Changed(_) => {
                        listed.changed.insert(account.clone());
                    }
                    // A date lists entries: an account alone there was listed before entries
                    // were (the log's first form), and its cash entries are not named.
                    LedgerListing::Balances(_) if hour.is_none() => {
                        listed.changed.insert(account.clone());
                    }
                    LedgerListing::Balances(_) => {}
                }
                listed.accounts.insert(account);
            }
        }
    }
    Ok(listed)
}

/// The records whose money events (`PaymentApplied`, `PaymentReversed`) fall on `dates`, with
/// the ones whose events do not decode claimed on those dates (for the reader to report).
pub async fn money_on(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    dates: &BTreeSet<NaiveDate>,
) -> anyhow::Result<Vec<Item>> {
    let partitions = dates
        .iter()
        .map(|date| record_log::money_partition(*date))
        .collect();
    listed(client, table, APPLIER, partitions).await
}

/// The records `partitions` list, each once, unexpired.
async fn listed(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    partitions: Vec<String>,
) -> anyhow::Result<Vec<Item>> {
    let mut facts: BTreeSet<String> = BTreeSet::new();
    for partition in partitions {
        let entries = query_partition(client, table, &partition).await?;
        for entry in &entries {
            facts.extend(record_log::facts_of(entry).map(str::to_owned));
        }
    }
    let keys = facts
        .iter()
        .filter_map(|fact| fact.split_once('#'))
        .map(|(system, event_id)| {
            let source = SourceRef {
                system: system.to_owned(),
                event_id: event_id.to_owned(),
            };
            items::key_item(items::claim_key(consumer, &source))
        })
        .collect();
    let now = epoch_seconds();
    Ok(batch_get(client, table, keys)
        .await?
        .into_iter()
        .filter(|item| unexpired(item, now))
        .collect())
}

/// `items::UNEXPIRED`, for items read by key.
pub(crate) fn unexpired(item: &HashMap<String, AttributeValue>, now: i64) -> bool {
    match item.get("expiresAt") {
        Some(AttributeValue::N(at)) => at.parse::<i64>().is_ok_and(|at| at >= now),
        _ => true,
    }
}
