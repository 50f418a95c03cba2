//! A `DelinquencyChanged` as this consumer reads it: its detail parsed, its place among its
//! account's changes (`occurredAt`, then `eventId`), and the contract's rule and action id for
//! the notification it calls for. Separate from the handler: pure, no I/O.

use serde_json::{Value, json};
use servicing_domain::{AccountId, Bucket};
use servicing_store::ActionIntent;
use servicing_store::schema::LatestDelinquencyRecord;

use crate::CONSUMER;

/// The relevant fields of a `DelinquencyChanged` detail.
#[derive(Debug, Clone)]
pub(crate) struct DelinquencyChanged {
    pub(crate) event_id: String,
    pub(crate) account_id: AccountId,
    from_bucket: Bucket,
    to_bucket: Bucket,
    /// `occurredAt`, epoch milliseconds.
    occurred_at: i64,
    pub(crate) detail: Value,
}

/// Where a change stands among its account's changes: by `occurredAt`, then by `eventId` (the
/// same order as the condition of the latest-change put in the store).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ChangeOrder<'a> {
    occurred_at: i64,
    event_id: &'a str,
}

fn order_of(record: &LatestDelinquencyRecord) -> ChangeOrder<'_> {
    ChangeOrder {
        occurred_at: record.occurred_at,
        event_id: &record.event_id,
    }
}

/// The recorded change later than `order`, if `latest` is one.
pub(crate) fn later_than(
    latest: Option<LatestDelinquencyRecord>,
    order: &ChangeOrder<'_>,
) -> Option<LatestDelinquencyRecord> {
    latest.filter(|l| order_of(l) > *order)
}

impl DelinquencyChanged {
    pub(crate) fn parse(envelope: &Value) -> Result<Option<Self>, String> {
        if envelope["detail-type"] != "DelinquencyChanged" {
            return Ok(None);
        }
        let detail = &envelope["detail"];
        servicing_domain::outbox::check_schema_version(detail)?;
        let event_id = detail["eventId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or("detail.eventId is missing")?
            .to_owned();
        let account_id = AccountId::parse(detail["accountId"].as_str().unwrap_or_default())
            .map_err(|e| format!("detail.accountId: {e}"))?;
        let bucket = |field: &str| {
            serde_json::from_value::<Bucket>(detail[field].clone())
                .map_err(|_| format!("detail.{field} is not a bucket: {}", detail[field]))
        };
        let to_bucket = bucket("toBucket")?;
        let from_bucket = bucket("fromBucket")?;
        let occurred_at = detail["occurredAt"]
            .as_str()
            .and_then(servicing_domain::event::parse_timestamp)
            .map(|t| t.timestamp_millis())
            .ok_or_else(|| {
                format!(
                    "detail.occurredAt is not an RFC 3339 time: {}",
                    detail["occurredAt"]
                )
            })?;
        Ok(Some(Self {
            event_id,
            account_id,
            from_bucket,
            to_bucket,
            occurred_at,
            detail: detail.clone(),
        }))
    }

    pub(crate) fn order(&self) -> ChangeOrder<'_> {
        ChangeOrder {
            occurred_at: self.occurred_at,
            event_id: &self.event_id,
        }
    }

    /// The contract's rule: a move to a WORSE bucket that is `DPD_30_59` or worse notifies; an
    /// improvement (e.g. 60-89 -> 30-59 after a partial payment) and a cure do not.
    pub(crate) fn calls_for_notice(&self) -> bool {
        self.to_bucket > self.from_bucket && self.to_bucket.needs_collections_action()
    }

    pub(crate) fn record(&self) -> LatestDelinquencyRecord {
        LatestDelinquencyRecord::new(
            CONSUMER,
            &self.account_id,
            &self.event_id,
            self.occurred_at,
            self.from_bucket,
            self.to_bucket,
        )
    }

    /// The contract's action id: stable for this event, so every replay uses the same one.
    fn action_id(&self) -> String {
        servicing_store::items::collections_action_id(
            self.account_id.as_str(),
            self.to_bucket.as_str(),
            &self.event_id,
        )
    }

    pub(crate) fn intent(&self) -> Option<ActionIntent> {
        self.calls_for_notice().then(|| {
            let action_id = self.action_id();
            ActionIntent {
                payload: json!({
                    "actionId": action_id,
                    "type": "collections_notification",
                    "accountId": self.account_id.as_str(),
                    "toBucket": self.to_bucket.as_str(),
                    "fromBucket": self.detail["fromBucket"],
                    "dpd": self.detail["dpd"],
                    "eventId": self.event_id,
                }),
                action_id,
                account_id: self.account_id.clone(),
                event_id: self.event_id.clone(),
            }
        })
    }
}
