//! The record log: which facts' records were written in each hour, and which of them carry a
//! money event of each business date. Kept from the table's stream by the relay, so the daily
//! reconciliation reads the window it reports on — not every record ever kept (issue #33).
//!
//! Items (no `expiresAt`: a log entry is ~40 bytes of an hour's partition, and it lists
//! records kept for good too, the applied payments):
//! - `LOG#CLAIMED#<consumer>#<yyyy-mm-ddThh>` (the hour of the record's `claimedAt`, UTC);
//! - `LOG#MONEY#<yyyy-mm-dd>` (the UTC date of a `PaymentApplied` or `PaymentReversed`'s
//!   `occurredAt`, the date the money reconciliation totals it under; a record whose events do
//!   not decode goes under its `claimedAt` date, so the reader still meets it and says so);
//! - the ledger's (`ledger-postings`), whose entries are their own claims:
//!   `LOG#LEDGER#HOUR#<yyyy-mm-ddThh>` (the hour an account's entry or balances were written)
//!   and `LOG#LEDGER#DATE#<yyyy-mm-dd>` (the UTC date of a payment's or reversal's entry's
//!   effective time, the date the ledger's cash is compared under; an entry that does not
//!   decode goes under the date it was written);
//!
//! each keyed `<the stream eventID of the first record of the batch that wrote it>` and holding
//! `facts` (SS): the records' `<sourceSystem>#<sourceEventId>`, or for the ledger's partitions
//! what was written of each account ([`LedgerListing`]: its balances, an entry put, an entry
//! changed or removed), added by set union (`ADD`). A
//! batch delivered again, whole or in part, adds to the same items or to overlapping ones: a
//! reader takes the union and reads each record by key, so the log is a set that is never
//! wrong for being written twice.
//!
//! Cost: one `UpdateItem` per (partition, batch), written off the hot path; ~40 bytes per fact,
//! so a full relay batch of 100 facts writes ~4 KB (4 WCU), 0.04 WCU per fact
//! (`docs/benchmarks.md`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate};
use servicing_domain::outbox::detail_types;

use crate::items::{self, Item};
use crate::journal::{EntryRecord, SubLedgerRecord};
use crate::schema::{ClaimRecord, OutboxEvent};
use crate::{ServicingStore, StoreError, classify};

/// The item type of a log item.
pub const ITEM_TYPE: &str = "RECORD_LOG";
/// The attribute listing the records: `<sourceSystem>#<sourceEventId>`.
pub const FACTS: &str = "facts";
/// The most records one log item lists (~45 bytes each: ~90 KB, under DynamoDB's 400 KB item
/// limit). A relay batch (at most 1,000 records) never reaches it; a one-off listing of a busy
/// hour's records does, and is split into items keyed `<batch id>#<n>`.
pub const MAX_FACTS_PER_ITEM: usize = 2_000;

/// The partition listing `consumer`'s records claimed in the UTC hour of `claimed_at` (epoch s).
pub fn claimed_partition(consumer: &str, claimed_at: i64) -> Option<String> {
    let hour = DateTime::from_timestamp(claimed_at, 0)?;
    Some(format!(
        "LOG#CLAIMED#{consumer}#{}",
        hour.format("%Y-%m-%dT%H")
    ))
}

/// The partition listing the records that carry a money event of business date `date`.
pub fn money_partition(date: NaiveDate) -> String {
    format!("LOG#MONEY#{date}")
}

/// The partition listing the accounts whose ledger was written in the UTC hour of
/// `written_at` (epoch s).
pub fn ledger_hour_partition(written_at: i64) -> Option<String> {
    let hour = DateTime::from_timestamp(written_at, 0)?;
    Some(format!("LOG#LEDGER#HOUR#{}", hour.format("%Y-%m-%dT%H")))
}

/// The partition listing the accounts with a payment's or reversal's entry of `date`.
pub fn ledger_date_partition(date: NaiveDate) -> String {
    format!("LOG#LEDGER#DATE#{date}")
}

/// The date an entry's cash is compared under (its effective time's UTC date, as the ledger's
/// reconciliation keys it), `None` for an entry that moves no cash; an entry that does not
/// decode counts under `written_at`'s date (epoch s), where the reader meets it and reports it.
pub fn ledger_cash_date(posting: &str, written_at: i64) -> Option<NaiveDate> {
    let written_on = DateTime::from_timestamp(written_at, 0).map(|t| t.date_naive());
    match serde_json::from_str::<servicing_domain::journal::Posting>(posting) {
        Ok(posting) => posting.entry.cash_date(),
        Err(_) => written_on,
    }
}

/// What a ledger partition lists of an account (account ids are `[A-Za-z0-9_-]`, so the
/// separators cannot be part of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerListing<'a> {
    /// `<account>`: its balances were written.
    Balances(&'a str),
    /// `<account>/<entryId>`: an entry was put (posted, or listed by a backfill).
    Entry(&'a str, &'a str),
    /// `<account>!`: an entry was changed or removed after it was posted (no code does): the
    /// reader reads the account's ledger whole, checked entries included.
    Changed(&'a str),
}

impl<'a> LedgerListing<'a> {
    pub fn parse(fact: &'a str) -> Self {
        if let Some((account, entry_id)) = fact.split_once('/') {
            Self::Entry(account, entry_id)
        } else if let Some(account) = fact.strip_suffix('!') {
            Self::Changed(account)
        } else {
            Self::Balances(fact)
        }
    }

    pub fn account(&self) -> &'a str {
        match *self {
            Self::Balances(a) | Self::Entry(a, _) | Self::Changed(a) => a,
        }
    }

    fn listed(&self) -> String {
        match self {
            Self::Balances(a) => (*a).to_owned(),
            Self::Entry(a, entry_id) => format!("{a}/{entry_id}"),
            Self::Changed(a) => format!("{a}!"),
        }
    }
}

/// The log entries of one stream batch, by partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordLog {
    partitions: BTreeMap<String, BTreeSet<String>>,
}

/// A stream image's attributes, as Lambda hands them over.
pub type StreamImage = HashMap<String, serde_dynamo::AttributeValue>;

fn text<'a>(image: &'a StreamImage, name: &str) -> Option<&'a str> {
    match image.get(name) {
        Some(serde_dynamo::AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

/// The account of a ledger item by its key (`LEDGER#<account>`): an item that lost its
/// `accountId` is still listed, so the reader meets it and reports it.
fn ledger_account(image: &StreamImage) -> Option<&str> {
    text(image, items::PK)?.strip_prefix("LEDGER#")
}

impl RecordLog {
    /// Adds the record a stream record wrote (`event_name` INSERT or MODIFY, its new image), if
    /// it is a fact's record. The hour comes from its `claimedAt`, else from `written_at` (the
    /// stream's own time, epoch s): a record that does not decode is listed all the same, so
    /// the reader meets it and reports it.
    ///
    /// The ledger's items (an entry, an account's balances) list their account under the hour
    /// they were written (`written_at`: a balance changed by hand is listed too), and an entry
    /// that moves cash under its date.
    pub fn add(&mut self, event_name: &str, image: &StreamImage, written_at: i64) {
        if !matches!(event_name, "INSERT" | "MODIFY") {
            return;
        }
        let item_type = text(image, items::ITEM_TYPE);
        if item_type == Some(ClaimRecord::ITEM_TYPE) {
            return self.add_claim(image, written_at);
        }
        let Some(account) = text(image, "accountId").or_else(|| ledger_account(image)) else {
            return;
        };
        match item_type {
            Some(SubLedgerRecord::ITEM_TYPE) => {
                self.list_ledger(LedgerListing::Balances(account), written_at);
            }
            Some(EntryRecord::ITEM_TYPE) => {
                let entry_id = text(image, "entryId").unwrap_or_default();
                let put = LedgerListing::Entry(account, entry_id);
                // Entries are put once and never changed: a MODIFY (or an entry without its
                // id) was written by hand, and what was checked of the account is checked again.
                match event_name == "INSERT" && !entry_id.is_empty() {
                    true => self.list_ledger(put, written_at),
                    false => self.list_ledger(LedgerListing::Changed(account), written_at),
                }
                // An entry without its posting does not decode: listed under the day it was
                // written, where the reader meets it.
                let posting = text(image, "posting").unwrap_or_default();
                self.list_cash(put, posting, written_at);
            }
            _ => {}
        }
    }

    /// Adds what one stream record wrote (`event_name`, the item's `keys` and `new_image`) at
    /// `written_at` (epoch s): [`Self::add`], or for a removal [`Self::add_removed`].
    pub fn add_change(
        &mut self,
        event_name: &str,
        keys: &StreamImage,
        new_image: &StreamImage,
        written_at: i64,
    ) {
        match event_name {
            "REMOVE" => self.add_removed(keys, written_at),
            name => self.add(name, new_image, written_at),
        }
    }

    /// Adds an item a stream record removed (`keys`: its key): an entry removed by hand lists
    /// its account to be read whole, as one changed.
    pub fn add_removed(&mut self, keys: &StreamImage, written_at: i64) {
        let is_entry = text(keys, items::SK).is_some_and(|sk| sk.starts_with("ENTRY#"));
        if let Some(account) = ledger_account(keys).filter(|_| is_entry) {
            self.list_ledger(LedgerListing::Changed(account), written_at);
        }
    }

    fn add_claim(&mut self, image: &StreamImage, written_at: i64) {
        let (Some(consumer), Some(system), Some(event_id)) = (
            text(image, "consumer"),
            text(image, items::SOURCE_SYSTEM),
            text(image, items::SOURCE_EVENT_ID),
        ) else {
            return;
        };
        let claimed_at = match image.get("claimedAt") {
            Some(serde_dynamo::AttributeValue::N(n)) => n.parse().unwrap_or(written_at),
            _ => written_at,
        };
        let outbox = text(image, items::OUTBOX);
        self.list(
            consumer,
            &format!("{system}#{event_id}"),
            claimed_at,
            outbox,
        );
    }

    /// Adds a record read from the table (a one-off listing of records written before the
    /// log, a benchmark's day).
    pub fn add_record(&mut self, record: &ClaimRecord) {
        let fact = format!("{}#{}", record.source_system, record.source_event_id);
        let outbox = record.outbox.as_deref();
        self.list(&record.consumer, &fact, record.claimed_at, outbox);
    }

    /// Adds a journal entry read from the table (a one-off listing), under the hour it was
    /// processed; one that does not decode under `listed_at` (epoch s), for the next
    /// reconciliation to meet and report.
    pub fn add_entry(&mut self, entry: &EntryRecord, listed_at: i64) {
        let written_at = entry
            .posting()
            .map_or(listed_at, |posting| posting.processed_at.timestamp());
        let put = LedgerListing::Entry(&entry.account_id, &entry.entry_id);
        self.list_ledger(put, written_at);
        self.list_cash(put, &entry.posting, written_at);
    }

    /// Adds a ledger item of `item_type` that does not decode, read from the table (a one-off
    /// listing), by its key (`LEDGER#<account>`) under the hour of `listed_at` (epoch s), and
    /// an entry under its date too, as the relay lists one: the next reconciliation reads its
    /// account and reports it.
    pub fn add_ledger_key(&mut self, pk: &str, item_type: &str, listed_at: i64) {
        let Some(account) = pk.strip_prefix("LEDGER#") else {
            return;
        };
        if item_type == EntryRecord::ITEM_TYPE {
            self.list_ledger(LedgerListing::Changed(account), listed_at);
            self.list_cash(LedgerListing::Changed(account), "", listed_at);
        } else {
            self.list_ledger(LedgerListing::Balances(account), listed_at);
        }
    }

    /// Adds an account's balances read from the table (a one-off listing), under the hour of
    /// its last posting.
    pub fn add_sub_ledger(&mut self, balances: &SubLedgerRecord) {
        self.list_ledger(
            LedgerListing::Balances(&balances.account_id),
            balances.posted_at,
        );
    }

    /// What was written of an account's ledger at `written_at` (epoch s).
    fn list_ledger(&mut self, listing: LedgerListing, written_at: i64) {
        if let Some(partition) = ledger_hour_partition(written_at) {
            self.insert(partition, &listing.listed());
        }
    }

    /// An entry (`posting`, as stored) that moves cash, under its date.
    fn list_cash(&mut self, listing: LedgerListing, posting: &str, written_at: i64) {
        if let Some(date) = ledger_cash_date(posting, written_at) {
            self.insert(ledger_date_partition(date), &listing.listed());
        }
    }

    fn list(&mut self, consumer: &str, fact: &str, claimed_at: i64, outbox: Option<&str>) {
        if let Some(partition) = claimed_partition(consumer, claimed_at) {
            self.insert(partition, fact);
        }
        if consumer != crate::APPLIER {
            return;
        }
        for date in money_dates(outbox, claimed_at) {
            self.insert(money_partition(date), fact);
        }
    }

    fn insert(&mut self, partition: String, fact: &str) {
        self.partitions
            .entry(partition)
            .or_default()
            .insert(fact.to_owned());
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// How many records it lists (a record under two partitions counts twice).
    pub fn len(&self) -> usize {
        self.partitions.values().map(BTreeSet::len).sum()
    }

    /// The items to put, keyed `batch_id` (the stream eventID of the batch's first record),
    /// at most [`MAX_FACTS_PER_ITEM`] records each.
    pub fn items(&self, batch_id: &str) -> Vec<Item> {
        let facts: Vec<(&String, Vec<&String>)> = self
            .partitions
            .iter()
            .flat_map(|(partition, facts)| {
                let facts: Vec<&String> = facts.iter().collect();
                facts
                    .chunks(MAX_FACTS_PER_ITEM)
                    .map(|chunk| (partition, chunk.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut nth: BTreeMap<&String, usize> = BTreeMap::new();
        facts
            .into_iter()
            .map(|(partition, chunk)| {
                let n = nth.entry(partition).or_default();
                let sk = match *n {
                    0 => batch_id.to_owned(),
                    n => format!("{batch_id}#{n}"),
                };
                *n += 1;
                let mut item = items::key_item((partition.clone(), sk));
                item.insert(items::ITEM_TYPE.to_owned(), items::s(ITEM_TYPE));
                let listed = chunk.into_iter().cloned().collect();
                item.insert(FACTS.to_owned(), AttributeValue::Ss(listed));
                item
            })
            .collect()
    }
}

/// The business dates a record's money events are totalled under (each `PaymentApplied` or
/// `PaymentReversed`'s `occurredAt`, its UTC date), for the writer and the reader alike. An
/// event whose time does not parse, or events that do not decode, count under the date the
/// record was claimed (`claimed_at`, epoch s): the date's read then meets the record and
/// reports it, instead of no date listing it at all.
pub fn money_dates(outbox: Option<&str>, claimed_at: i64) -> BTreeSet<NaiveDate> {
    let claimed_on = DateTime::from_timestamp(claimed_at, 0).map(|t| t.date_naive());
    let Ok(events) = OutboxEvent::decode(outbox) else {
        return claimed_on.into_iter().collect();
    };
    let money = [
        detail_types::PAYMENT_APPLIED,
        detail_types::PAYMENT_REVERSED,
    ];
    events
        .iter()
        .filter(|event| money.contains(&event.detail_type.as_str()))
        .filter_map(|event| {
            event.detail["occurredAt"]
                .as_str()
                .and_then(servicing_domain::event::parse_timestamp)
                .map(|t| t.date_naive())
                .or(claimed_on)
        })
        .collect()
}

/// The records listed by a log partition's items: `<sourceSystem>#<sourceEventId>`.
pub fn facts_of(item: &Item) -> impl Iterator<Item = &str> {
    match item.get(FACTS) {
        Some(AttributeValue::Ss(facts)) => facts.as_slice(),
        _ => &[],
    }
    .iter()
    .map(String::as_str)
}

impl ServicingStore {
    /// Adds the log's records to its items, one `UpdateItem` each (a batch's partitions are
    /// few: its hours and its payments' dates), by set union (`ADD`): a batch delivered again
    /// in part (bisected, retried from a checkpoint) under the same first record never takes
    /// away what the whole batch listed. A failure leaves the batch to be delivered again.
    pub async fn write_record_log(
        &self,
        log: &RecordLog,
        batch_id: &str,
    ) -> Result<(), StoreError> {
        for mut item in log.items(batch_id) {
            let (Some(pk), Some(sk), Some(facts)) = (
                item.remove(items::PK),
                item.remove(items::SK),
                item.remove(FACTS),
            ) else {
                continue;
            };
            self.client()
                .update_item()
                .table_name(self.table())
                .key(items::PK, pk)
                .key(items::SK, sk)
                .update_expression("SET #type = :type ADD #facts :facts")
                .expression_attribute_names("#type", items::ITEM_TYPE)
                .expression_attribute_names("#facts", FACTS)
                .expression_attribute_values(":type", items::s(ITEM_TYPE))
                .expression_attribute_values(":facts", facts)
                .send()
                .await
                .map_err(classify)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_dynamo::AttributeValue as A;

    use super::*;

    fn record(consumer: &str, id: &str, claimed_at: i64, outbox: Option<&str>) -> StreamImage {
        let mut image = HashMap::from([
            ("itemType".to_owned(), A::S("CLAIM".into())),
            ("consumer".to_owned(), A::S(consumer.into())),
            ("sourceSystem".to_owned(), A::S("psp".into())),
            ("sourceEventId".to_owned(), A::S(id.into())),
            ("claimedAt".to_owned(), A::N(claimed_at.to_string())),
        ]);
        if let Some(outbox) = outbox {
            image.insert("outbox".to_owned(), A::S(outbox.into()));
        }
        image
    }

    fn applied(occurred_at: &str) -> String {
        serde_json::json!([{"source": "servicing.account-state", "detailType": "PaymentApplied",
            "detail": {"eventId": "evt_1", "eventType": "PaymentApplied", "occurredAt": occurred_at}}])
        .to_string()
    }

    fn partitions(log: &RecordLog) -> Vec<(String, Vec<String>)> {
        log.partitions
            .iter()
            .map(|(p, f)| (p.clone(), f.iter().cloned().collect()))
            .collect()
    }

    #[test]
    fn a_batch_lists_each_record_by_its_claimed_hour_and_each_payment_by_its_business_date() {
        let mut log = RecordLog::default();
        // 2026-12-04T23:59:59Z and 2026-12-05T00:00:00Z: two hours, two days.
        let paid = applied("2026-12-01T10:00:00+02:00");
        log.add(
            "INSERT",
            &record("account-state", "p1", 1_796_428_799, Some(&paid)),
            0,
        );
        log.add(
            "INSERT",
            &record("account-state", "f1", 1_796_428_800, None),
            0,
        );
        log.add(
            "MODIFY",
            &record("account-state", "p1", 1_796_428_799, Some(&paid)),
            0,
        );
        log.add(
            "INSERT",
            &record("collections", "c1", 1_796_428_800, None),
            0,
        );
        log.add(
            "REMOVE",
            &record("account-state", "gone", 1_796_428_800, None),
            0,
        );
        let mut loan = record("account-state", "x", 1_796_428_800, None);
        loan.insert("itemType".into(), A::S("LOAN".into()));
        log.add("INSERT", &loan, 0);
        assert_eq!(
            partitions(&log),
            vec![
                (
                    "LOG#CLAIMED#account-state#2026-12-04T23".into(),
                    vec!["psp#p1".into()]
                ),
                (
                    "LOG#CLAIMED#account-state#2026-12-05T00".into(),
                    vec!["psp#f1".into()]
                ),
                (
                    "LOG#CLAIMED#collections#2026-12-05T00".into(),
                    vec!["psp#c1".into()]
                ),
                ("LOG#MONEY#2026-12-01".into(), vec!["psp#p1".into()]),
            ]
        );
        let items = log.items("evt-0001");
        assert_eq!(items.len(), 4);
        assert!(
            items
                .iter()
                .all(|i| i.get("sk") == Some(&items::s("evt-0001")))
        );
    }

    #[test]
    fn a_partition_of_more_records_than_an_item_holds_is_split_and_nothing_is_lost() {
        let mut log = RecordLog::default();
        for i in 0..MAX_FACTS_PER_ITEM + 1 {
            let image = record("collections", &format!("c{i:05}"), 1_796_428_800, None);
            log.add("INSERT", &image, 0);
        }
        let items = log.items("backfill");
        let keys: Vec<String> = items
            .iter()
            .map(|i| match i.get("sk") {
                Some(AttributeValue::S(sk)) => sk.clone(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(keys, ["backfill", "backfill#1"]);
        let listed: BTreeSet<&str> = items.iter().flat_map(facts_of).collect();
        assert_eq!(listed.len(), MAX_FACTS_PER_ITEM + 1);
        assert_eq!(log.len(), MAX_FACTS_PER_ITEM + 1);
    }

    fn ledger_item(item_type: &str, posting: Option<(&str, &str)>) -> StreamImage {
        let mut image = HashMap::from([
            ("itemType".to_owned(), A::S(item_type.into())),
            ("accountId".to_owned(), A::S("acc_1".into())),
        ]);
        if let Some((entry_id, posting)) = posting {
            image.insert("entryId".to_owned(), A::S(entry_id.into()));
            image.insert("posting".to_owned(), A::S(posting.into()));
        }
        image
    }

    fn posting(event_type: &str, effective_at: &str) -> String {
        serde_json::json!({"entryId": "e1", "accountId": "acc_1", "eventType": event_type,
            "currency": "EUR", "effectiveAt": effective_at,
            "trigger": {"system": "psp", "eventId": "p1"}, "transfers": [],
            "processedAt": "2026-12-05T00:00:01Z", "postingDate": "2026-12-05"})
        .to_string()
    }

    fn strings(listed: &[&str]) -> Vec<String> {
        listed.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_ledgers_writes_list_their_entries_by_the_hour_written_and_cash_entries_by_their_date() {
        let mut log = RecordLog::default();
        let at = 1_796_428_800; // 2026-12-05T00:00:00Z
        let paid = posting("PaymentApplied", "2026-12-01T23:30:00-02:00");
        log.add(
            "INSERT",
            &ledger_item("JOURNAL_ENTRY", Some(("e1", &paid))),
            at,
        );
        let fee = posting("FeeAssessed", "2026-11-30T10:00:00Z");
        log.add(
            "INSERT",
            &ledger_item("JOURNAL_ENTRY", Some(("e2", &fee))),
            at,
        );
        log.add("MODIFY", &ledger_item("SUB_LEDGER", None), at);
        // Balances changed by hand at 01:00: listed under that hour.
        log.add("MODIFY", &ledger_item("SUB_LEDGER", None), at + 3_600);
        log.add("REMOVE", &ledger_item("SUB_LEDGER", None), at + 7_200);
        assert_eq!(
            partitions(&log),
            vec![
                ("LOG#LEDGER#DATE#2026-12-02".into(), strings(&["acc_1/e1"])),
                (
                    "LOG#LEDGER#HOUR#2026-12-05T00".into(),
                    strings(&["acc_1", "acc_1/e1", "acc_1/e2"])
                ),
                ("LOG#LEDGER#HOUR#2026-12-05T01".into(), strings(&["acc_1"])),
            ]
        );
        assert_eq!(
            LedgerListing::parse("acc_1/e/1"),
            LedgerListing::Entry("acc_1", "e/1")
        );
        // An entry changed or removed by hand (no code does either): its account is read whole.
        let mut by_hand = RecordLog::default();
        by_hand.add(
            "MODIFY",
            &ledger_item("JOURNAL_ENTRY", Some(("e2", &fee))),
            at,
        );
        let keys = HashMap::from([
            ("pk".to_owned(), A::S("LEDGER#acc_3".into())),
            ("sk".to_owned(), A::S("ENTRY#e9".into())),
        ]);
        by_hand.add_removed(&keys, at);
        assert_eq!(
            partitions(&by_hand),
            vec![(
                "LOG#LEDGER#HOUR#2026-12-05T00".into(),
                strings(&["acc_1!", "acc_3!"])
            )]
        );
        assert_eq!(
            LedgerListing::parse("acc_3!"),
            LedgerListing::Changed("acc_3")
        );
        // An entry that does not decode: under the date it was written, for the reader.
        let mut broken = RecordLog::default();
        broken.add(
            "INSERT",
            &ledger_item("JOURNAL_ENTRY", Some(("e3", "not json"))),
            at,
        );
        assert!(
            partitions(&broken)
                .contains(&("LOG#LEDGER#DATE#2026-12-05".into(), strings(&["acc_1/e3"])))
        );
        // Balances that lost their account id (a hand edit): listed by their key's account.
        let mut keyed_only = RecordLog::default();
        let mut image = ledger_item("SUB_LEDGER", None);
        image.remove("accountId");
        image.insert("pk".to_owned(), A::S("LEDGER#acc_2".into()));
        keyed_only.add("MODIFY", &image, at);
        assert_eq!(
            partitions(&keyed_only),
            vec![("LOG#LEDGER#HOUR#2026-12-05T00".into(), strings(&["acc_2"]))]
        );
    }

    #[test]
    fn a_record_whose_events_do_not_decode_is_listed_under_its_claimed_date_for_the_reader_to_report()
     {
        let mut log = RecordLog::default();
        log.add(
            "INSERT",
            &record("account-state", "p1", 1_796_428_800, Some("not json")),
            0,
        );
        assert!(partitions(&log).contains(&("LOG#MONEY#2026-12-05".into(), vec!["psp#p1".into()])));
    }
}
