//! Collections actions as operators look them up: every action of an account or in a state,
//! and one in full (its payload is the notice sent to the receiver: no secrets, no full event).

use servicing_store::schema::{self, ActionItem};

use crate::{get_record, scan_types};

/// Every action (optionally of one account and/or in one status), oldest first. A scan: actions
/// have no account index.
pub async fn list(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    account: Option<&str>,
    status: Option<&str>,
) -> anyhow::Result<Vec<ActionItem>> {
    let mut actions = Vec::new();
    for item in scan_types(client, table, &[ActionItem::ITEM_TYPE])
        .await?
        .remove(ActionItem::ITEM_TYPE)
        .unwrap_or_default()
    {
        let action: ActionItem = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("an action item does not decode: {e}"))?;
        if account.is_none_or(|a| a == action.account_id)
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
