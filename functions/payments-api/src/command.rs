//! Parsing of the API's inputs into typed values; every rejection names the field and the rule.
//! The `Idempotency-Key` header's grammar is `command/idempotency_key.rs`.

mod idempotency_key;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use servicing_domain::{AccountId, Amount, Currency, Fingerprint, types::RuleViolation};

pub use idempotency_key::{IdempotencyKey, KeyError};

/// One invalid input: which field, which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: &'static str,
    pub rule: String,
}

fn field(field: &'static str, rule: impl Into<String>) -> FieldError {
    FieldError {
        field,
        rule: rule.into(),
    }
}

/// The first character of `text` an SQS message body cannot carry (SQS allows #x9, #xA, #xD,
/// #x20-#xD7FF, #xE000-#xFFFD and #x10000-#x10FFFF; a `char` is never a surrogate), so the API
/// never accepts a payment the relay could not send to the servicing queue.
fn sqs_refused_char(text: &str) -> Option<char> {
    text.chars().find(|c| {
        !matches!(
            c,
            '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..
        )
    })
}

/// Whether SQS can carry the string field `name`; if not, the error names the character: the
/// API refuses it (422) rather than accept a payment that would be stuck at the relay.
fn sqs_carries(name: &'static str, text: &str, errors: &mut Vec<FieldError>) -> bool {
    let Some(c) = sqs_refused_char(text) else {
        return true;
    };
    errors.push(field(
        name,
        format!(
            "must not contain U+{:04X} (a queue message cannot carry it)",
            u32::from(c)
        ),
    ));
    false
}

/// The authenticated caller, from the IAM or JWT authorizer's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(String);

impl Principal {
    pub fn new(id: impl Into<String>) -> Option<Self> {
        let id = id.into();
        (!id.is_empty()).then_some(Self(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A key-safe, fixed-length scope for storage keys (a principal may contain `#`).
    pub fn scope(&self) -> String {
        servicing_store::items::principal_scope(&self.0)
    }

    /// The contract `sourceSystem` of this caller's payments: `api:<principal>` when that fits
    /// the contract's charset and length, else `api:<scope>`.
    pub fn source_system(&self) -> String {
        let candidate = format!("api:{}", self.0);
        match servicing_domain::SourceRef::parse_system(&candidate) {
            Ok(system) => system,
            Err(RuleViolation(_)) => format!("api:{}", self.scope()),
        }
    }
}

/// A validated `POST /v1/payments` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentCommand {
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub reference: String,
    pub event_time: Option<DateTime<Utc>>,
}

impl PaymentCommand {
    /// Parses the body; collects every field error rather than stopping at the first.
    pub fn parse(body: &[u8]) -> Result<Self, Result<Vec<FieldError>, String>> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| Err(format!("the body is not JSON: {e}")))?;
        servicing_domain::event::unique_keys(body)
            .map_err(|e| Err(format!("the body is ambiguous: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| Err("the body must be a JSON object".to_owned()))?;
        let mut errors = Vec::new();
        let text = |name: &'static str, errors: &mut Vec<FieldError>| match object.get(name) {
            Some(Value::String(s)) => sqs_carries(name, s, errors).then(|| s.clone()),
            None | Some(Value::Null) => {
                errors.push(field(name, "is required"));
                None
            }
            Some(_) => {
                errors.push(field(name, "must be a string"));
                None
            }
        };
        let account_id = text("accountId", &mut errors).and_then(|s| {
            AccountId::parse(&s)
                .map_err(|e| errors.push(field("accountId", e.0)))
                .ok()
        });
        let amount = match object.get("amountMinor") {
            Some(Value::Number(n)) if n.is_i64() => {
                let minor = n.as_i64().unwrap_or_default();
                if minor <= 0 {
                    errors.push(field(
                        "amountMinor",
                        "must be a positive integer of minor units",
                    ));
                    None
                } else {
                    Amount::new(minor)
                        .map_err(|e| errors.push(field("amountMinor", e.0)))
                        .ok()
                }
            }
            Some(Value::Number(n)) if n.is_u64() => {
                errors.push(field("amountMinor", "is too large"));
                None
            }
            Some(Value::Number(_)) => {
                errors.push(field("amountMinor", "must be an integer, not a fraction"));
                None
            }
            None | Some(Value::Null) => {
                errors.push(field("amountMinor", "is required"));
                None
            }
            Some(_) => {
                errors.push(field("amountMinor", "must be an integer"));
                None
            }
        };
        let currency = text("currency", &mut errors).and_then(|s| {
            Currency::parse(&s)
                .map_err(|e| errors.push(field("currency", e.0)))
                .ok()
        });
        let reference = text("reference", &mut errors).and_then(|s| {
            // NFC first: a retry whose client encoded "é" as e + combining accent is the same
            // reference (a replay, not a 422), and 140 counts characters, not bytes.
            let s: String = unicode_normalization::UnicodeNormalization::nfc(s.as_str()).collect();
            let ok = (1..=140).contains(&s.chars().count()) && s.chars().all(|c| !c.is_control());
            if !ok {
                errors.push(field(
                    "reference",
                    "must be 1..140 characters without control characters",
                ));
            }
            ok.then_some(s)
        });
        let event_time = match object.get("eventTime") {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) if !sqs_carries("eventTime", s, &mut errors) => None,
            Some(Value::String(s)) => match servicing_domain::event::parse_timestamp(s) {
                Some(t) => Some(Some(t)),
                None => {
                    errors.push(field(
                        "eventTime",
                        "must be an RFC 3339 timestamp with offset",
                    ));
                    None
                }
            },
            Some(_) => {
                errors.push(field("eventTime", "must be a string"));
                None
            }
        };
        match (account_id, amount, currency, reference, event_time) {
            (Some(account_id), Some(amount), Some(currency), Some(reference), Some(event_time))
                if errors.is_empty() =>
            {
                Ok(Self {
                    account_id,
                    amount,
                    currency,
                    reference,
                    event_time,
                })
            }
            _ => Err(Ok(errors)),
        }
    }

    /// The request fingerprint: what the caller asked for, independent of JSON formatting.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_value(&json!({
            "accountId": self.account_id.as_str(),
            "amountMinor": self.amount.minor(),
            "currency": self.currency,
            "reference": self.reference,
            "eventTime": self.event_time.map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        }))
    }
}

#[cfg(test)]
mod tests;
