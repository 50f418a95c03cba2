//! What the table holds for an incident's facts: the records of its applied facts (each
//! payment's allocation, the bucket changes they published) and of the identities that
//! collided (the first payload, as stored), the quarantine items of the collisions (the second
//! payload, raw) and the collections actions of the accounts touched: those the facts' bucket
//! changes called for, by key, and those still unsettled, from the open index. Keyed reads and
//! index queries only, whatever the table's history; each read is named for the manifest.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Duration, Utc};
use servicing_domain::outbox::detail_types;
use servicing_store::items::{self, action_key, claim_key, collections_action_id, key_item};
use servicing_store::open::OpenKind;
use servicing_store::schema::{self, ActionItem, ClaimRecord, QuarantineRecord};
use servicing_store::{ServicingStore, StoreConfig};

use crate::{Item, batch_get};

/// `(sourceSystem, sourceEventId)`.
pub type Identity = (String, String);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub table: String,
    pub claims: HashMap<Identity, ClaimRecord>,
    /// By message id.
    pub quarantined: HashMap<String, QuarantineRecord>,
    pub actions: Vec<ActionItem>,
    /// The reads made, as the manifest lists them.
    pub queries: Vec<String>,
}

/// What to read: the identities whose records matter, the quarantined deliveries' message ids
/// (a collision's second payload; the account of an undecodable body), the accounts whose
/// actions are listed, over the window's days.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    pub consumer: String,
    pub identities: BTreeSet<Identity>,
    pub quarantined_messages: BTreeSet<String>,
    pub accounts: BTreeSet<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// A BatchGetItem takes at most 100 keys.
const BATCH_GET: usize = 100;

pub async fn read(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    wanted: &Wanted,
) -> anyhow::Result<Stored> {
    let mut stored = Stored {
        table: table.to_owned(),
        ..Stored::default()
    };
    // A record past its `expiresAt` is gone, whether or not TTL has swept it yet: what the
    // report says must not depend on when TTL ran.
    let now = crate::epoch_seconds();
    let identities: Vec<&Identity> = wanted.identities.iter().collect();
    for chunk in identities.chunks(BATCH_GET) {
        let keys: Vec<Item> = chunk
            .iter()
            .map(|(system, id)| {
                let source = servicing_domain::SourceRef {
                    system: system.clone(),
                    event_id: id.clone(),
                };
                key_item(claim_key(&wanted.consumer, &source))
            })
            .collect();
        let found = batch_get(client, table, keys).await?;
        for item in found
            .into_iter()
            .filter(|item| crate::record_log::unexpired(item, now))
        {
            let record: ClaimRecord = schema::from_item(item)
                .map_err(|e| anyhow::anyhow!("a fact's record does not decode: {e}"))?;
            stored.claims.insert(
                (record.source_system.clone(), record.source_event_id.clone()),
                record,
            );
        }
    }
    stored.queries.push(format!(
        "BatchGetItem {table}: the records of {} facts (CLAIM#{}#<sourceSystem>#<sourceEventId>), {} found unexpired",
        wanted.identities.len(),
        wanted.consumer,
        stored.claims.len()
    ));
    if !wanted.quarantined_messages.is_empty() {
        for day in days(wanted.from, wanted.to) {
            let pk = format!("QUARANTINE#{}#{day}", wanted.consumer);
            let items = crate::query_partition(client, table, &pk).await?;
            stored.queries.push(format!("Query {table}: pk = {pk}"));
            for item in items {
                let record: QuarantineRecord = schema::from_item(item)
                    .map_err(|e| anyhow::anyhow!("a quarantine item does not decode: {e}"))?;
                if wanted.quarantined_messages.contains(&record.message_id) {
                    stored.quarantined.insert(record.message_id.clone(), record);
                }
            }
        }
    }
    if !wanted.accounts.is_empty() {
        // The actions the bucket changes of the facts read above called for, by their ids
        // (derived from each change), and the accounts' actions still unsettled (the open
        // index): keyed reads, whatever the table's history.
        let called_for: BTreeSet<String> = stored
            .claims
            .values()
            .flat_map(|claim| claim.events().unwrap_or_default())
            .filter(|e| e.detail_type == detail_types::DELINQUENCY_CHANGED)
            .filter_map(|e| {
                let text = |field: &str| e.detail.get(field).and_then(|v| v.as_str());
                Some(collections_action_id(
                    text("accountId")?,
                    text("toBucket")?,
                    text("eventId")?,
                ))
            })
            .collect();
        let store = ServicingStore::new(client.clone(), StoreConfig::new(table, "collections"));
        let mut found = crate::open_items(&store, OpenKind::Action).await?;
        stored.queries.push(format!(
            "Query {table} OpenIndex: OPEN#ACTION#00..15 (the unsettled actions), kept for {} accounts",
            wanted.accounts.len()
        ));
        let open: BTreeSet<String> = found
            .iter()
            .filter_map(|i| crate::text(i, items::PK).map(str::to_owned))
            .collect();
        let keys: Vec<Item> = called_for
            .iter()
            .map(|id| action_key(id))
            .filter(|(pk, _)| !open.contains(pk))
            .map(key_item)
            .collect();
        let asked = keys.len();
        if !keys.is_empty() {
            found.extend(batch_get(client, table, keys).await?);
        }
        stored.queries.push(format!(
            "BatchGetItem {table}: the actions of {asked} bucket changes (ACTION#collections_notification:<account>:<bucket>:<eventId>)"
        ));
        for item in found {
            let action: ActionItem = schema::from_item(item)
                .map_err(|e| anyhow::anyhow!("an action item does not decode: {e}"))?;
            if wanted.accounts.contains(&action.account_id) {
                stored.actions.push(action);
            }
        }
        stored
            .actions
            .sort_by(|a, b| (a.created_at, &a.action_id).cmp(&(b.created_at, &b.action_id)));
    }
    Ok(stored)
}

/// The UTC days of a window (quarantine partitions), at most 400.
fn days(from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Vec<String> {
    let (Some(from), Some(to)) = (from, to) else {
        return Vec::new();
    };
    let mut out = BTreeMap::new();
    // A quarantine item is written a moment before its record is stamped: a window opening
    // at midnight still reads the day before.
    let mut day = (from - Duration::minutes(1)).date_naive();
    let last = to.date_naive();
    while day <= last && out.len() < 400 {
        out.insert(day, ());
        day += Duration::days(1);
    }
    out.keys().map(|d| d.to_string()).collect()
}
