//! The canonical wire form of an event, which fingerprints are computed over and the project's
//! own producers emit. Separate from decoding: it is the one place the event is written back.

use chrono::SecondsFormat;
use serde_json::{Value, json};

use super::{EventKind, SCHEMA_VERSION, ServicingEvent};

impl ServicingEvent {
    /// The canonical wire form: business fields only (no transport `eventId`), explicit
    /// `schemaVersion`, timestamps normalised to UTC. The fingerprint is computed over it, and
    /// producers inside this project (the payments API) emit exactly this.
    pub fn canonical_json(&self) -> Value {
        let mut v = json!({
            "schemaVersion": SCHEMA_VERSION,
            "sourceSystem": self.source.system,
            "sourceEventId": self.source.event_id,
            "eventType": self.kind.wire_name(),
            "accountId": self.account_id.as_str(),
            "eventTime": self.event_time.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        });
        let extra = match &self.kind {
            EventKind::LoanOpened {
                principal,
                credit_limit,
            } => {
                let mut e =
                    json!({"principalMinor": principal.minor(), "currency": principal.currency});
                if let Some(limit) = credit_limit {
                    e["creditLimitMinor"] = json!(limit.minor());
                }
                e
            }
            EventKind::InstallmentDue {
                installment_no,
                due_date,
                principal,
                interest,
            } => json!({
                "installmentNo": installment_no,
                "dueDate": due_date.format("%Y-%m-%d").to_string(),
                "principalMinor": principal.minor(),
                "interestMinor": interest.minor(),
            }),
            EventKind::InterestAccrued { amount } | EventKind::PaymentSettled { amount } => {
                json!({"amountMinor": amount.minor(), "currency": amount.currency})
            }
            EventKind::FeeAssessed { amount, fee_type } => json!({
                "amountMinor": amount.minor(), "currency": amount.currency, "feeType": fee_type,
            }),
            EventKind::PaymentReversed {
                amount,
                reversal_of,
            } => json!({
                "amountMinor": amount.minor(), "currency": amount.currency,
                "reversalOf": {"sourceSystem": reversal_of.system, "sourceEventId": reversal_of.event_id},
            }),
            EventKind::CreditLimitSet { limit, sequence } => json!({
                "creditLimitMinor": limit.minor(), "currency": limit.currency, "sequence": sequence,
            }),
            EventKind::BusinessDayClosed { business_date } => json!({
                "businessDate": business_date.format("%Y-%m-%d").to_string(),
            }),
        };
        if let (Some(target), Value::Object(extra)) = (v.as_object_mut(), extra) {
            target.extend(extra);
        }
        v
    }
}
