//! The collections action store: intents, leases and outcomes of external calls.

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use servicing_domain::AccountId;

use crate::errors::{classify, classify_service};
use crate::items::{self, n, s};
use crate::{ServicingStore, StoreError, now_epoch};

/// An external action to execute after the commit, under a stable id that is also the
/// downstream idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionIntent {
    pub action_id: String,
    pub account_id: AccountId,
    /// The event that asked for the action.
    pub event_id: String,
    /// What is sent to the receiver.
    pub payload: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionStatus {
    /// Recorded, not (known to be) executed: a replay executes it again with the same id.
    Pending,
    /// A delivery holds the lease and is calling the receiver (until `leaseUntil`; after that
    /// another delivery may take it over, with the same id).
    Sending,
    /// The receiver accepted it.
    Sent,
    /// The receiver refused it definitively (a 4xx): recorded, not retried.
    Rejected,
}

impl ActionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "PENDING",
            ActionStatus::Sending => "SENDING",
            ActionStatus::Sent => "SENT",
            ActionStatus::Rejected => "REJECTED",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        [
            ActionStatus::Pending,
            ActionStatus::Sending,
            ActionStatus::Sent,
            ActionStatus::Rejected,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

/// An action as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub action_id: String,
    pub status: ActionStatus,
    pub attempts: u64,
    pub payload: serde_json::Value,
}

impl ServicingStore {
    /// The stored action (consistent read).
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn action(&self, action_id: &str) -> Result<Option<ActionRecord>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        let Some(item) = got.item else {
            return Ok(None);
        };
        let stored: crate::schema::ActionItem = crate::schema::from_item(item)?;
        let status = ActionStatus::parse(&stored.status).ok_or_else(|| {
            StoreError::Corrupt(format!("action {action_id} has no valid status"))
        })?;
        let payload = serde_json::from_str(&stored.payload)
            .map_err(|_| StoreError::Corrupt(format!("action {action_id} has no JSON payload")))?;
        Ok(Some(ActionRecord {
            action_id: action_id.to_owned(),
            status,
            attempts: stored.attempts,
            payload,
        }))
    }

    /// Takes the lease of a pending action (or of one whose lease has run out) for `lease_id`
    /// until `until_ms`: only the lease holder calls the receiver, so twin deliveries never call
    /// at once. `Ok(None)` when acquired, else the status that stands (`Sending`: a twin holds
    /// a live lease; `Sent`/`Rejected`: settled).
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn lease_action(
        &self,
        action_id: &str,
        lease_id: &str,
        until_ms: i64,
    ) -> Result<Option<ActionStatus>, StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression("SET #status = :sending, leaseId = :lease, leaseUntil = :until")
            .condition_expression(
                "attribute_exists(pk) AND (#status = :pending OR (#status = :sending AND leaseUntil < :now))",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":pending", s(ActionStatus::Pending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":until", n(until_ms))
            .expression_attribute_values(":now", n(now_millis))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(e) => match e.into_service_error() {
                aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                    let status = c
                        .item()
                        .and_then(|item| items::string(item, "status"))
                        .and_then(ActionStatus::parse)
                        .ok_or_else(|| StoreError::Corrupt(format!("action {action_id} is not recorded")))?;
                    Ok(Some(status))
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// Records one execution attempt under the lease: the final status (`Sent`/`Rejected`), or
    /// `Pending` again with the error of a transient failure, releasing the lease. Only the
    /// lease holder records: a twin whose lease ran out can never overwrite a `SENT`.
    #[tracing::instrument(skip_all, fields(action_id, status = status.as_str()))]
    pub async fn record_action(
        &self,
        action_id: &str,
        lease_id: &str,
        status: ActionStatus,
        http_status: Option<u16>,
        detail: &str,
    ) -> Result<(), StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression(
                "SET #status = :status, attempts = if_not_exists(attempts, :zero) + :one, \
                 lastHttpStatus = :http, lastDetail = :detail, updatedAt = :now \
                 REMOVE leaseId, leaseUntil",
            )
            .condition_expression(
                "attribute_exists(pk) AND #status = :sending AND leaseId = :lease",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":status", s(status.as_str()))
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":http", n(http_status.unwrap_or(0)))
            .expression_attribute_values(":detail", s(detail.chars().take(512).collect::<String>()))
            .expression_attribute_values(":now", n(now_millis))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.into_service_error() {
                aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_) => {
                    tracing::warn!("the lease ran out and another delivery took the action over");
                    Ok(())
                }
                other => Err(classify_service(other)),
            },
        }
    }
}
