//! The collections action store: intents, leases and outcomes of external calls, and the
//! latest delinquency change of each account that decides whether an intent still stands.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use servicing_domain::AccountId;

use crate::combine::Answer;
use crate::conditions::{CREATE_ONLY, Condition};
use crate::errors::{
    classify, classify_service, conditional_update, invalid_request, refuses_the_request,
};
use crate::items::{self, Verdict, n, s};
use crate::schema::{ActionItem, LatestDelinquencyRecord};
use crate::{CommitOutcome, Effect, ServicingStore, StoreError, UnitOfWork, now_epoch};

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
    /// Never executed: a later delinquency change of the account was recorded before the call
    /// (the customer no longer is where the notice would say). Settled, never called.
    Superseded,
    /// An attempt whose outcome is not known (no answer, the connection lost after sending,
    /// an answer that does not say), to a receiver that does not deduplicate: the next attempt
    /// asks the receiver's status for the action before any new call.
    Unknown,
}

impl ActionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "PENDING",
            ActionStatus::Sending => "SENDING",
            ActionStatus::Sent => "SENT",
            ActionStatus::Rejected => "REJECTED",
            ActionStatus::Superseded => "SUPERSEDED",
            ActionStatus::Unknown => "UNKNOWN",
        }
    }

    /// Whether a stored `status` names an action not settled yet (pending, sending, unknown).
    pub fn unsettled(stored: &str) -> bool {
        Self::parse(stored).is_some_and(|s| !s.settled())
    }

    /// Settled for good: never leased, called or asked about again.
    pub fn settled(self) -> bool {
        matches!(
            self,
            ActionStatus::Sent | ActionStatus::Rejected | ActionStatus::Superseded
        )
    }

    /// The status a stored `status` names (`None`: not one of them).
    pub fn parse(value: &str) -> Option<Self> {
        [
            ActionStatus::Pending,
            ActionStatus::Sending,
            ActionStatus::Sent,
            ActionStatus::Rejected,
            ActionStatus::Superseded,
            ActionStatus::Unknown,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

/// What an update that settles an action removes besides the lease: its open-index keys.
const SETTLES: &str = ", openShard, openSince";

/// How a lease request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Taken, from this status.
    Acquired { from: ActionStatus },
    /// Not taken: this status stands.
    Refused(ActionStatus),
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

    /// Takes the lease of an unsettled action — pending, unknown, or sending under a lease that
    /// has run out — for `lease_id` until `until_ms`: only the lease holder calls the receiver,
    /// so twin deliveries never call at once. Acquired, it says the status it was taken from
    /// (`Unknown`, or `Sending` under an expired lease: a call may have gone out); refused, the
    /// status that stands (`Sending`: a twin holds a live lease; settled ones).
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn lease_action(
        &self,
        action_id: &str,
        lease_id: &str,
        until_ms: i64,
    ) -> Result<Lease, StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression("SET #status = :sending, leaseId = :lease, leaseUntil = :until")
            .condition_expression(
                "attribute_exists(pk) AND (#status IN (:pending, :unknown) OR (#status = :sending AND leaseUntil < :now))",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":pending", s(ActionStatus::Pending.as_str()))
            .expression_attribute_values(":unknown", s(ActionStatus::Unknown.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":until", n(until_ms))
            .expression_attribute_values(":now", n(now_millis))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let status_of = |item: Option<
            &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        >| {
            item.and_then(|item| items::string(item, "status"))
                .and_then(ActionStatus::parse)
                .ok_or_else(|| StoreError::Corrupt(format!("action {action_id} is not recorded")))
        };
        match result {
            Ok(answer) => Ok(Lease::Acquired {
                from: status_of(answer.attributes())?,
            }),
            Err(e) => match e.into_service_error() {
                aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                    Ok(Lease::Refused(status_of(c.item())?))
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// Renews this holder's lease until `until_ms`, right before the call: `false` when the
    /// lease is no longer this holder's (it ran out and a twin took it over) — then it must not
    /// call. What happened before the call (the status question, reads, credentials) may have
    /// taken any time; only the call itself runs under a lease known to be live.
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn renew_lease(
        &self,
        action_id: &str,
        lease_id: &str,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression("SET leaseUntil = :until")
            .condition_expression("#status = :sending AND leaseId = :lease")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":until", n(until_ms))
            .send()
            .await;
        conditional_update(result)
    }

    /// Records what the receiver's status endpoint said of the action (`said`: `delivered`,
    /// `not delivered`, or why it did not say), under the lease and before anything follows
    /// from it: a call after "not delivered" is on the record as made on that answer.
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn note_receiver_status(
        &self,
        action_id: &str,
        lease_id: &str,
        said: &str,
    ) -> Result<bool, StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression("SET receiverSaid = :said, receiverAskedAt = :now")
            .condition_expression("#status = :sending AND leaseId = :lease")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":said", s(said.chars().take(512).collect::<String>()))
            .expression_attribute_values(":now", n(now_millis))
            .send()
            .await;
        conditional_update(result)
    }

    /// Records one execution attempt under the lease: the final status (`Sent`/`Rejected`), or
    /// `Pending` again with the error of a transient failure (`Unknown` when the call may have
    /// reached a receiver that does not deduplicate), releasing the lease. Only the
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
        // Settled (`SENT`, `REJECTED`): out of the open index; `PENDING` or `UNKNOWN` stay in it.
        let settles = if status.settled() { SETTLES } else { "" };
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression(format!(
                "SET #status = :status, attempts = if_not_exists(attempts, :zero) + :one, \
                 lastHttpStatus = :http, lastDetail = :detail, updatedAt = :now \
                 REMOVE leaseId, leaseUntil{settles}"
            ))
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
        lease_holders_write(result)
    }
}

/// What each item of a delinquency change's transaction stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Claim,
    Action,
    Latest,
}

impl ServicingStore {
    /// The account's latest delinquency change recorded by this consumer (consistent read).
    #[tracing::instrument(skip_all, fields(account = %account))]
    pub async fn latest_change(
        &self,
        account: &AccountId,
    ) -> Result<Option<LatestDelinquencyRecord>, StoreError> {
        self.get_record(LatestDelinquencyRecord::key(&self.config.consumer, account))
            .await
    }

    /// Commits a delinquency change as ONE `TransactWriteItems`: the claim of `unit` (a
    /// downstream consumer's, `Effect::Intent`) and, when `superseded_by` is `None` (no later
    /// change was read), its intent `PENDING` and `change` as the account's latest, put only if
    /// the stored one is still earlier (by `occurredAt`, then `eventId`) or this very change.
    /// When a later change was read, the claim is `STALE` and the intent is recorded
    /// `SUPERSEDED`, never to be executed. `VersionConflict`: a later change was recorded
    /// after the read — read again, judge again.
    #[tracing::instrument(skip_all, fields(event_id = %change.event_id))]
    pub async fn commit_change(
        &self,
        unit: &UnitOfWork<'_>,
        change: &LatestDelinquencyRecord,
        superseded_by: Option<&LatestDelinquencyRecord>,
    ) -> Result<CommitOutcome, StoreError> {
        let (now, now_millis) = now_epoch();
        let expires_at = now + self.config.claim_retention.as_secs() as i64;
        let verdict = match superseded_by {
            None => Verdict::Applied,
            Some(_) => Verdict::Stale,
        };
        let claim = items::claim_item(
            &self.config.consumer,
            unit,
            verdict,
            now,
            Some(expires_at),
            None,
        )?;
        let claim = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(claim))
            .condition_expression("attribute_not_exists(pk) OR expiresAt < :now")
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        let mut parts = vec![Part::Claim];
        let mut transaction = vec![TransactWriteItem::builder().put(claim).build()];
        if let Effect::Intent(Some(intent)) = unit.effect {
            let pending = items::action_item(intent, now)?;
            let item = match superseded_by {
                None => pending,
                Some(later) => crate::schema::to_item(&ActionItem {
                    status: ActionStatus::Superseded.as_str().into(),
                    last_detail: Some(superseded_detail(later)),
                    updated_at: Some(now_millis),
                    ..crate::schema::from_item(pending)?
                })?,
            };
            parts.push(Part::Action);
            transaction.push(self.put(item, Some(CREATE_ONLY))?);
        }
        if superseded_by.is_none() {
            let (pk, sk) = LatestDelinquencyRecord::key(&self.config.consumer, unit.account_id);
            let record = LatestDelinquencyRecord {
                pk,
                sk,
                updated_at: now,
                ..change.clone()
            };
            // Only forward: none yet, or the stored one is earlier (or is this very change).
            let condition: Condition = (
                "attribute_not_exists(pk) OR #at < :at OR (#at = :at AND #event <= :event)",
                Some(HashMap::from([
                    ("#at".to_owned(), "occurredAt".to_owned()),
                    ("#event".to_owned(), "eventId".to_owned()),
                ])),
                Some(HashMap::from([
                    (":at".to_owned(), n(change.occurred_at)),
                    (":event".to_owned(), s(&change.event_id)),
                ])),
            );
            parts.push(Part::Latest);
            transaction.push(self.put(crate::schema::to_item(&record)?, Some(condition))?);
        }
        let reasons = match self.combiner.send(transaction, None).await? {
            Answer::Committed => return Ok(CommitOutcome::Committed),
            Answer::Withdrawn => return Ok(CommitOutcome::Contended),
            Answer::Cancelled(reasons) => reasons,
        };
        let (mut claimed, mut acted, mut moved, mut contended) = (None, false, false, false);
        for (reason, part) in reasons.iter().zip(&parts) {
            match (part, reason.code().unwrap_or("None")) {
                (_, "None") => {}
                (Part::Claim, "ConditionalCheckFailed") => {
                    claimed = Some(crate::commit::refused_claim(reason, unit.fingerprint)?);
                }
                // Only this change writes its action: it was committed before and its claim
                // has expired since — a duplicate.
                (Part::Action, "ConditionalCheckFailed") => acted = true,
                (Part::Latest, "ConditionalCheckFailed") => moved = true,
                (_, "TransactionConflict") => contended = true,
                _ => {}
            }
        }
        if let Some(outcome) = claimed {
            return Ok(outcome);
        }
        if acted {
            return Ok(CommitOutcome::Duplicate);
        }
        if moved {
            return Ok(CommitOutcome::VersionConflict);
        }
        if contended {
            return Ok(CommitOutcome::Contended);
        }
        let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        Err(if codes.iter().any(|c| refuses_the_request(c)) {
            StoreError::Rejected(format!("transaction cancelled: {codes:?}"))
        } else {
            StoreError::Transient(format!("transaction cancelled: {codes:?}"))
        })
    }

    /// Settles a leased action as `SUPERSEDED` without calling (`later`, a later change of its
    /// account, was recorded), releasing the lease. Only the lease holder records it, as an
    /// outcome.
    #[tracing::instrument(skip_all, fields(action_id))]
    pub async fn supersede_action(
        &self,
        action_id: &str,
        lease_id: &str,
        later: &LatestDelinquencyRecord,
    ) -> Result<(), StoreError> {
        let (_, now_millis) = now_epoch();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::action_key(action_id))))
            .update_expression(format!(
                "SET #status = :superseded, lastDetail = :detail, updatedAt = :now \
                 REMOVE leaseId, leaseUntil{SETTLES}"
            ))
            .condition_expression(
                "attribute_exists(pk) AND #status = :sending AND leaseId = :lease",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":superseded", s(ActionStatus::Superseded.as_str()))
            .expression_attribute_values(":sending", s(ActionStatus::Sending.as_str()))
            .expression_attribute_values(":lease", s(lease_id))
            .expression_attribute_values(":detail", s(superseded_detail(later)))
            .expression_attribute_values(":now", n(now_millis))
            .send()
            .await;
        lease_holders_write(result)
    }
}

/// A write only the lease holder may make: refused, the lease ran out and another delivery
/// took the action over (its outcome is that delivery's to record).
fn lease_holders_write<T>(
    result: Result<
        T,
        aws_sdk_dynamodb::error::SdkError<
            aws_sdk_dynamodb::operation::update_item::UpdateItemError,
        >,
    >,
) -> Result<(), StoreError> {
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

fn superseded_detail(later: &LatestDelinquencyRecord) -> String {
    format!(
        "superseded by {} ({} -> {}, occurredAt {} ms)",
        later.event_id, later.from_bucket, later.to_bucket, later.occurred_at
    )
}
