//! A one-off after the deploy that introduced the open index (issue #33): items written before
//! it never carry its keys, so the daily run — which reads only the index — would never see a
//! loan parked, an action unsettled or an API payment unconfirmed since then. This reads the
//! whole table once (an explicit, separate full read) and gives each such item its keys, under
//! a condition that it is still open and has none. Run it after every function runs the new
//! code (an instance still on the old code rewrites a loan without them); running it again is
//! harmless.

use servicing_store::ServicingStore;
use servicing_store::items;
use servicing_store::journal::{EntryRecord, SubLedgerRecord};
use servicing_store::open::{OPEN_SHARD, OpenKind};
use servicing_store::record_log::RecordLog;
use servicing_store::schema::{self, ActionItem, ClaimRecord, IdempotencyRecord};

use crate::{Item, scan_types, text};

/// What a backfill found and did, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backfilled {
    /// Loans holding parked facts, actions unsettled, accepted API payments without the keys.
    pub found: [u64; 3],
    /// Given their keys (none in a dry run; fewer when one closed meanwhile).
    pub written: [u64; 3],
}

/// Gives every open item without the index keys its keys (`dry_run`: only counts them).
pub async fn open_index(store: &ServicingStore, dry_run: bool) -> anyhow::Result<Backfilled> {
    let mut by_type = scan_types(
        store.client(),
        store.table(),
        &["LOAN", ActionItem::ITEM_TYPE, IdempotencyRecord::ITEM_TYPE],
    )
    .await?;
    let mut done = Backfilled::default();
    let without_keys = |item: &Item| !item.contains_key(OPEN_SHARD);
    let key_of = |item: &Item| {
        (
            text(item, items::PK).unwrap_or_default().to_owned(),
            text(item, items::SK).unwrap_or_default().to_owned(),
        )
    };
    // (kind index, key, shard key, since)
    let mut open: Vec<(usize, (String, String), String, i64)> = Vec::new();
    for item in by_type.remove("LOAN").unwrap_or_default() {
        if !without_keys(&item) || !item.contains_key(items::PARKED_FACTS) {
            continue;
        }
        let key = key_of(&item);
        let loan = items::loan_from_item(item)
            .map_err(|e| anyhow::anyhow!("loan item {} does not decode: {e}", key.0))?;
        let Some(since) = loan.parked.iter().map(|f| f.parked_at).min() else {
            continue;
        };
        open.push((0, key, loan.account_id.as_str().to_owned(), since));
    }
    for item in by_type.remove(ActionItem::ITEM_TYPE).unwrap_or_default() {
        if !without_keys(&item) {
            continue;
        }
        let action: ActionItem = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("an action item does not decode: {e}"))?;
        if servicing_store::ActionStatus::unsettled(&action.status) {
            let key = (action.pk.clone(), action.sk.clone());
            open.push((1, key, action.action_id, action.created_at));
        }
    }
    for item in by_type
        .remove(IdempotencyRecord::ITEM_TYPE)
        .unwrap_or_default()
    {
        if !without_keys(&item) {
            continue;
        }
        let item_confirmed = item.contains_key(servicing_store::open::CONFIRMED_AT);
        let record: IdempotencyRecord = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("an idempotency record does not decode: {e}"))?;
        // Every accepted one not confirmed yet: the daily run confirms those it finds applied
        // (read once).
        if record.response_status == 202 && !item_confirmed {
            let key = (record.pk.clone(), record.sk.clone());
            open.push((2, key, record.idempotency_key, record.created_at));
        }
    }
    for (kind_at, key, shard_key, since) in open {
        done.found[kind_at] += 1;
        if dry_run {
            continue;
        }
        let kind = OpenKind::ALL[kind_at];
        if store.backfill_open(key, kind, &shard_key, since).await? {
            done.written[kind_at] += 1;
        }
    }
    Ok(done)
}

/// What a listing of the records written before the record log found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoggedBefore {
    /// Facts' records listed (unexpired: an expired one is gone to every count).
    pub records: u64,
    /// Journal entries and account balances listed (the ledger's partitions).
    pub ledger_items: u64,
    /// Facts' records that do not decode: not listed (they name no hour or date of their own;
    /// `ledgerctl reconcile --source` names them).
    pub undecodable: u64,
    /// Ledger items that do not decode: listed by their key's account under the hour and date
    /// of the listing, where the next reconciliation reads and reports them.
    pub undecodable_ledger_items: u64,
    /// Log items written (none in a dry run).
    pub items: u64,
}

/// The one-off after the deploy that introduced the record log (issue #33), or its ledger
/// partitions: the window's and the money's reconciliation read the records and ledger
/// accounts it lists, and the relay lists only what it relays from then on. Reads every
/// record, journal entry and account balances once (an explicit, separate full read) and lists
/// each record by its hour and its money's dates, each ledger item's account by the hour it was
/// written and its cash's date, keyed `backfill`: running it again lists what it listed before
/// and what was added since, never less.
pub async fn record_log(store: &ServicingStore, dry_run: bool) -> anyhow::Result<LoggedBefore> {
    let types = [
        ClaimRecord::ITEM_TYPE,
        EntryRecord::ITEM_TYPE,
        SubLedgerRecord::ITEM_TYPE,
    ];
    let mut by_type = scan_types(store.client(), store.table(), &types).await?;
    let mut take = |item_type: &str| by_type.remove(item_type).unwrap_or_default();
    let (claims, entries, balances) = (
        take(ClaimRecord::ITEM_TYPE),
        take(EntryRecord::ITEM_TYPE),
        take(SubLedgerRecord::ITEM_TYPE),
    );
    let mut done = LoggedBefore::default();
    let mut log = RecordLog::default();
    for item in claims {
        match schema::from_item::<ClaimRecord>(item) {
            Ok(record) => {
                log.add_record(&record);
                done.records += 1;
            }
            Err(_) => done.undecodable += 1,
        }
    }
    let now = crate::epoch_seconds();
    for item in entries {
        let pk = crate::text(&item, "pk").unwrap_or_default().to_owned();
        match schema::from_item::<EntryRecord>(item) {
            Ok(entry) => {
                log.add_entry(&entry, now);
                done.ledger_items += 1;
            }
            Err(_) => {
                log.add_ledger_key(&pk, EntryRecord::ITEM_TYPE, now);
                done.undecodable_ledger_items += 1;
            }
        }
    }
    for item in balances {
        let pk = crate::text(&item, "pk").unwrap_or_default().to_owned();
        match schema::from_item::<SubLedgerRecord>(item) {
            Ok(record) => {
                log.add_sub_ledger(&record);
                done.ledger_items += 1;
            }
            Err(_) => {
                log.add_ledger_key(&pk, SubLedgerRecord::ITEM_TYPE, now);
                done.undecodable_ledger_items += 1;
            }
        }
    }
    if !dry_run {
        done.items = log.items("backfill").len() as u64;
        store.write_record_log(&log, "backfill").await?;
    }
    Ok(done)
}
