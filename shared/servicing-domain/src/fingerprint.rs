//! Payload fingerprints: tell a duplicate (same fact again) from a collision (same identity,
//! different fact).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::event::ServicingEvent;

/// `sha256:<hex>` of the canonical JSON of an event's business fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn of(event: &ServicingEvent) -> Self {
        Self::of_value(&event.canonical_json())
    }

    /// Fingerprint of any JSON value, stable under key order and whitespace.
    pub fn of_value(value: &Value) -> Self {
        let mut canonical = String::new();
        write_canonical(value, &mut canonical);
        Self(format!(
            "sha256:{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        ))
    }

    /// The short tag of this fact that an account keeps for the facts it is made of (its
    /// opening, each installment), so a resend whose claim has expired is still recognised.
    pub fn tag(&self) -> FactTag {
        let digest = self.0.strip_prefix("sha256:").unwrap_or(&self.0);
        FactTag(digest.chars().take(FactTag::LEN).collect())
    }

    /// Wraps a fingerprint read back from storage.
    pub fn from_stored(value: String) -> Self {
        Self(value)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The first 64 bits (16 hex digits) of a fact's fingerprint. The fingerprint covers the
/// identity and the business fields, so equal tags mean the same fact: a resend. The account
/// compares it only with the one fact that already holds the same place (its opening, the
/// installment of that number), so 64 bits leave no practical chance of taking another fact
/// for a resend, and even then nothing is applied twice: both are refused either way. Kept
/// short because it is stored on the loan item, once per installment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FactTag(String);

impl FactTag {
    pub const LEN: usize = 16;

    pub fn of(event: &ServicingEvent) -> Self {
        Fingerprint::of(event).tag()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FactTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Compact JSON with object keys sorted recursively. Written out here rather than relying on
/// `serde_json::Map` ordering, which a dependency enabling `preserve_order` would silently change.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &str) -> Fingerprint {
        Fingerprint::of(&ServicingEvent::decode(body.as_bytes()).expect("valid event"))
    }

    const PAYMENT: &str = r#"{"sourceSystem":"psp","sourceEventId":"p1","eventType":"PAYMENT_SETTLED","accountId":"a1","eventTime":"2026-10-20T10:15:00Z","amountMinor":25000,"currency":"EUR"}"#;

    #[test]
    fn when_keys_are_reordered_and_whitespace_added_should_keep_the_fingerprint() {
        let reordered = r#"{ "currency" : "EUR", "amountMinor": 25000,
            "eventTime":"2026-10-20T10:15:00Z", "accountId":"a1", "eventType":"PAYMENT_SETTLED",
            "sourceEventId":"p1", "sourceSystem":"psp" }"#;
        assert_eq!(fp(PAYMENT), fp(reordered));
    }

    #[test]
    fn when_only_transport_fields_differ_should_keep_the_fingerprint() {
        let with_transport = PAYMENT.replace('}', r#","eventId":"sqs-123","schemaVersion":1}"#);
        let same_instant = PAYMENT.replace("2026-10-20T10:15:00Z", "2026-10-20T12:15:00+02:00");
        assert_eq!(fp(PAYMENT), fp(&with_transport));
        assert_eq!(fp(PAYMENT), fp(&same_instant));
    }

    #[test]
    fn when_a_business_field_differs_should_change_the_fingerprint() {
        assert_ne!(fp(PAYMENT), fp(&PAYMENT.replace("25000", "25001")));
        assert_ne!(fp(PAYMENT), fp(&PAYMENT.replace("EUR", "USD")));
        assert_ne!(fp(PAYMENT), fp(&PAYMENT.replace("\"a1\"", "\"a2\"")));
        assert!(fp(PAYMENT).as_str().starts_with("sha256:"));
    }
}
