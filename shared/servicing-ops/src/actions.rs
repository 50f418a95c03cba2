//! Collections actions as operators look them up: the unsettled ones (or, as an audit, every
//! one), of an account or in a state, and one in full (its payload is the notice sent to the receiver: no secrets, no full event).

use servicing_store::ServicingStore;
use servicing_store::open::OpenKind;
use servicing_store::schema::{self, ActionItem};

use crate::{get_record, scan_types};

/// Which actions a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The unsettled ones (`PENDING`, `SENDING`, `UNKNOWN`), from the open index: what it reads grows with
    /// what is open, never with the table's history.
    Open,
    /// Every action ever recorded: a scan of the whole table (an audit, not a 3 am command).
    All,
}

/// The actions `listing` reads (optionally of one account and/or in one status), oldest
/// first.
pub async fn list(
    store: &ServicingStore,
    listing: Listing,
    account: Option<&str>,
    status: Option<&str>,
) -> anyhow::Result<Vec<ActionItem>> {
    let items = match listing {
        Listing::Open => crate::open_items(store, OpenKind::Action).await?,
        Listing::All => scan_types(store.client(), store.table(), &[ActionItem::ITEM_TYPE])
            .await?
            .remove(ActionItem::ITEM_TYPE)
            .unwrap_or_default(),
    };
    let mut actions = Vec::new();
    for item in items {
        let action: ActionItem = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("an action item does not decode: {e}"))?;
        let open = servicing_store::ActionStatus::unsettled(&action.status);
        if (listing == Listing::All || open)
            && account.is_none_or(|a| a == action.account_id)
            && status.is_none_or(|s| s.eq_ignore_ascii_case(&action.status))
        {
            actions.push(action);
        }
    }
    actions.sort_by(|a, b| (a.created_at, &a.action_id).cmp(&(b.created_at, &b.action_id)));
    Ok(actions)
}

/// One action by its id (as `list` and the receiver's `Idempotency-Key` show it).
pub async fn inspect(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    action_id: &str,
) -> anyhow::Result<Option<ActionItem>> {
    let key = servicing_store::items::action_key(action_id);
    get_record(client, table, key, &format!("action {action_id}")).await
}
