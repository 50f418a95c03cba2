//! Domain events the account-state consumer emits through the outbox.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::account::Bucket;
use crate::fingerprint::hex;
use crate::types::{AccountId, SourceRef};

/// One event for the outbox. `event_id` is derived from the triggering fact and the event type,
/// so recomputing an outcome (after a version conflict, or on a replay) yields the same id and
/// downstream consumers can deduplicate on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainEvent {
    pub event_id: String,
    pub detail_type: String,
    pub account_id: AccountId,
    pub trigger: SourceRef,
    pub occurred_at: DateTime<Utc>,
    /// The type-specific fields.
    pub payload: Value,
}

/// Names of the domain event types (EventBridge `detail-type`).
pub mod detail_types {
    pub const LOAN_OPENED: &str = "LoanOpened";
    pub const INSTALLMENT_DUE: &str = "InstallmentDue";
    pub const INTEREST_ACCRUED: &str = "InterestAccrued";
    pub const FEE_ASSESSED: &str = "FeeAssessed";
    pub const PAYMENT_APPLIED: &str = "PaymentApplied";
    pub const PAYMENT_REVERSED: &str = "PaymentReversed";
    pub const CREDIT_LIMIT_CHANGED: &str = "CreditLimitChanged";
    pub const DELINQUENCY_CHANGED: &str = "DelinquencyChanged";
}

impl DomainEvent {
    pub fn new(
        detail_type: &str,
        account_id: &AccountId,
        trigger: &SourceRef,
        occurred_at: DateTime<Utc>,
        payload: Value,
    ) -> Self {
        let digest = Sha256::digest(
            format!("{detail_type}\n{}\n{}", trigger.system, trigger.event_id).as_bytes(),
        );
        Self {
            event_id: format!("evt_{}", &hex(&digest)[..32]),
            detail_type: detail_type.to_owned(),
            account_id: account_id.clone(),
            trigger: trigger.clone(),
            occurred_at,
            payload,
        }
    }

    pub fn delinquency_changed(
        account_id: &AccountId,
        trigger: &SourceRef,
        occurred_at: DateTime<Utc>,
        from: Bucket,
        to: Bucket,
        dpd: u32,
    ) -> Self {
        Self::new(
            detail_types::DELINQUENCY_CHANGED,
            account_id,
            trigger,
            occurred_at,
            json!({
                "fromBucket": from.as_str(),
                "toBucket": to.as_str(),
                "dpd": dpd,
                "triggerSourceSystem": trigger.system,
                "triggerSourceEventId": trigger.event_id,
            }),
        )
    }

    /// The JSON published downstream (EventBridge `detail`): envelope fields plus the payload.
    pub fn detail(&self) -> Value {
        let mut detail = json!({
            "eventId": self.event_id,
            "eventType": self.detail_type,
            "accountId": self.account_id.as_str(),
            "occurredAt": self.occurred_at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            "trigger": {"sourceSystem": self.trigger.system, "sourceEventId": self.trigger.event_id},
        });
        if let (Some(out), Some(payload)) = (detail.as_object_mut(), self.payload.as_object()) {
            for (k, v) in payload {
                out.insert(k.clone(), v.clone());
            }
        }
        detail
    }
}
