//! Domain events the account-state consumer emits through the outbox.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::account::Bucket;
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

/// The schema major version of a domain event's `detail` (its `schemaVersion`; an event
/// published before it was written carries none and is version 1).
pub const DOMAIN_EVENT_SCHEMA_VERSION: i64 = 1;

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

    /// Every type, in the order the contract lists the facts that cause them.
    pub const ALL: [&str; 8] = [
        LOAN_OPENED,
        INSTALLMENT_DUE,
        INTEREST_ACCRUED,
        FEE_ASSESSED,
        PAYMENT_APPLIED,
        PAYMENT_REVERSED,
        CREDIT_LIMIT_CHANGED,
        DELINQUENCY_CHANGED,
    ];
}

/// Whether a consumer of the bus can read this `detail`: its `schemaVersion`, when it has one,
/// is the major version this build publishes. An unknown major is refused rather than guessed.
pub fn check_schema_version(detail: &Value) -> Result<(), String> {
    match detail.get("schemaVersion") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_i64() == Some(DOMAIN_EVENT_SCHEMA_VERSION) => Ok(()),
        Some(v) => Err(match v.as_i64() {
            Some(major) => format!(
                "schemaVersion {major} is not supported (supported: {DOMAIN_EVENT_SCHEMA_VERSION})"
            ),
            None => "schemaVersion must be an integer".to_owned(),
        }),
    }
}

impl DomainEvent {
    pub fn new(
        detail_type: &str,
        account_id: &AccountId,
        trigger: &SourceRef,
        occurred_at: DateTime<Utc>,
        payload: Value,
    ) -> Self {
        Self {
            event_id: Self::id_for(detail_type, trigger),
            detail_type: detail_type.to_owned(),
            account_id: account_id.clone(),
            trigger: trigger.clone(),
            occurred_at,
            payload,
        }
    }

    /// The id of the event of this type a fact causes (a reversal names its payment's
    /// `PaymentApplied` by it).
    pub fn id_for(detail_type: &str, trigger: &SourceRef) -> String {
        let digest = Sha256::digest(
            format!("{detail_type}\n{}\n{}", trigger.system, trigger.event_id).as_bytes(),
        );
        format!("evt_{}", &hex::encode(digest)[..32])
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
            "schemaVersion": DOMAIN_EVENT_SCHEMA_VERSION,
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

/// The allocation a `PaymentApplied` event carries, as stored (`reversed_by` unset): the
/// event is the allocation's one stored copy (a fact's record keeps the events it published,
/// and the allocation twice would push the record past the 1 KB a write is billed by). The
/// inverse of the payload `apply` builds for a payment; `None` for any other event.
pub fn payment_allocation(detail: &Value) -> Option<crate::StoredAllocation> {
    if detail["eventType"] != detail_types::PAYMENT_APPLIED {
        return None;
    }
    let occurred_at = crate::event::parse_timestamp(detail["occurredAt"].as_str()?)?;
    Some(crate::StoredAllocation {
        payment: SourceRef {
            system: detail["payment"]["sourceSystem"].as_str()?.to_owned(),
            event_id: detail["payment"]["sourceEventId"].as_str()?.to_owned(),
        },
        account_id: AccountId::parse(detail["accountId"].as_str()?).ok()?,
        currency: serde_json::from_value(detail["currency"].clone()).ok()?,
        amount_minor: detail["amountMinor"].as_i64()?,
        allocation: serde_json::from_value(detail["allocation"].clone()).ok()?,
        installments_paid: serde_json::from_value(detail["installmentsPaid"].clone()).ok()?,
        applied_on: occurred_at.date_naive(),
        reversed_by: None,
        reversal_fact: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocationWrite, Outcome, ServicingEvent, apply};

    #[test]
    fn when_a_payment_applies_should_carry_its_stored_allocation_in_its_event() {
        let open = ServicingEvent::decode(br#"{"sourceSystem":"core","sourceEventId":"o1","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":50000,"currency":"EUR"}"#).expect("event");
        let due = ServicingEvent::decode(br#"{"sourceSystem":"core","sourceEventId":"d1","eventType":"INSTALLMENT_DUE","accountId":"acc_1","eventTime":"2026-09-05T09:00:00Z","installmentNo":1,"dueDate":"2026-09-05","principalMinor":4000,"interestMinor":500,"currency":"EUR"}"#).expect("event");
        let pay = ServicingEvent::decode(br#"{"sourceSystem":"psp","sourceEventId":"p1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T23:59:59.5+00:00","amountMinor":3000,"currency":"EUR"}"#).expect("event");
        let mut account = None;
        let mut last = None;
        for event in [&open, &due, &pay] {
            match apply(account.as_ref(), event, None) {
                Outcome::Applied(applied) => {
                    account = Some(applied.account.clone());
                    last = Some(applied);
                }
                other => panic!("not applied: {other:?}"),
            }
        }
        let applied = last.expect("payment applied");
        let Some(AllocationWrite::Record(stored)) = &applied.allocation else {
            panic!("a payment stores its allocation");
        };
        assert!(!stored.installments_paid.is_empty());
        let event = &applied.outbox[0];
        assert_eq!(payment_allocation(&event.detail()).as_ref(), Some(stored));
        assert_eq!(
            payment_allocation(&json!({"eventType": "FeeAssessed"})),
            None
        );
    }
}
