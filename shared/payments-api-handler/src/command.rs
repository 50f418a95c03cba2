//! Parsing of the API's inputs into typed values; every rejection names the field and the rule.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use servicing_domain::{AccountId, Amount, Currency, Fingerprint, types::RuleViolation};
use sha2::{Digest, Sha256};

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

/// An `Idempotency-Key` header: 1..=255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, String> {
        let raw = raw.ok_or("the Idempotency-Key header is required")?;
        let text = std::str::from_utf8(raw).map_err(|_| "Idempotency-Key must be ASCII")?;
        if text.is_empty() || text.len() > 255 {
            return Err("Idempotency-Key must be 1..255 characters".into());
        }
        if !text.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err("Idempotency-Key must be printable ASCII without spaces".into());
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a contract `sourceEventId` (1..128 printable ASCII): itself when it fits,
    /// else its SHA-256 (keys up to 255 characters are accepted at the edge).
    pub fn source_event_id(&self) -> String {
        if self.0.len() <= 128 {
            self.0.clone()
        } else {
            format!("sha256-{}", hex(&Sha256::digest(self.0.as_bytes())))
        }
    }
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
        hex(&Sha256::digest(self.0.as_bytes()))[..32].to_owned()
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
            Some(Value::String(s)) => Some(s.clone()),
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
            Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s) {
                Ok(t) => Some(Some(t.with_timezone(&Utc))),
                Err(_) => {
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

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_key_is_missing_empty_long_or_unprintable_should_refuse() {
        assert!(IdempotencyKey::parse(None).is_err());
        assert!(IdempotencyKey::parse(Some(b"")).is_err());
        assert!(IdempotencyKey::parse(Some("k".repeat(256).as_bytes())).is_err());
        assert!(IdempotencyKey::parse(Some(b"has space")).is_err());
        assert!(IdempotencyKey::parse(Some(b"tab\t")).is_err());
        assert!(IdempotencyKey::parse(Some("k".repeat(255).as_bytes())).is_ok());
    }

    #[test]
    fn when_a_key_exceeds_the_contract_length_should_hash_it_into_the_source_event_id() {
        let short = IdempotencyKey::parse(Some(b"order-1")).expect("valid");
        assert_eq!(short.source_event_id(), "order-1");
        let long = IdempotencyKey::parse(Some("k".repeat(200).as_bytes())).expect("valid");
        assert!(long.source_event_id().starts_with("sha256-"));
        assert!(long.source_event_id().len() <= 128);
    }

    #[test]
    fn when_the_principal_does_not_fit_the_contract_charset_should_use_its_scope() {
        let user = Principal::new("client-42").expect("principal");
        assert_eq!(user.source_system(), "api:client-42");
        let arn = Principal::new("arn:aws:iam::123456789012:user/alice").expect("principal");
        assert_eq!(arn.source_system(), format!("api:{}", arn.scope()));
    }

    #[test]
    fn when_a_reference_is_re_encoded_should_be_the_same_request_counted_in_characters() {
        let body = |reference: &str| {
            serde_json::json!({"accountId": "acc_1", "amountMinor": 100, "currency": "EUR", "reference": reference})
                .to_string()
        };
        let composed = PaymentCommand::parse(body("caf\u{e9}").as_bytes()).expect("valid");
        let decomposed = PaymentCommand::parse(body("cafe\u{301}").as_bytes()).expect("valid");
        assert_eq!(
            composed.fingerprint(),
            decomposed.fingerprint(),
            "a replay, not a 422"
        );
        assert_eq!(decomposed.reference, "caf\u{e9}");
        // 140 characters of two bytes each fit; 141 do not.
        assert!(PaymentCommand::parse(body(&"\u{e9}".repeat(140)).as_bytes()).is_ok());
        assert!(PaymentCommand::parse(body(&"\u{e9}".repeat(141)).as_bytes()).is_err());
    }

    #[test]
    fn when_the_body_has_several_errors_should_report_each_field() {
        let errors =
            PaymentCommand::parse(br#"{"accountId":"a b","amountMinor":-5,"currency":"eur"}"#)
                .expect_err("invalid")
                .expect("field errors");
        let fields: Vec<&str> = errors.iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["accountId", "amountMinor", "currency", "reference"]
        );
    }
}
