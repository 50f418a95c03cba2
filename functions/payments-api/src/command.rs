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

/// The prefix of a hashed `Idempotency-Key` in a `sourceEventId`; reserved (a key that starts
/// with it is hashed as well).
const HASHED_KEY_PREFIX: &str = "sha256-";

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

/// Why an `Idempotency-Key` header was refused (each a problem type of its own: a client
/// branches on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Missing, or its key breaks the key grammar (length, characters).
    Invalid(String),
    /// It opens an RFC 8941 string (`"`) that is not a well-formed one.
    Malformed(String),
    /// More than one key: two headers (API Gateway's payload 2.0 joins them with commas).
    Multiple(String),
}

impl KeyError {
    pub fn problem_type(&self) -> crate::problem::ProblemType {
        use crate::problem::ProblemType;
        match self {
            KeyError::Invalid(_) => ProblemType::InvalidIdempotencyKey,
            KeyError::Malformed(_) => ProblemType::MalformedIdempotencyKey,
            KeyError::Multiple(_) => ProblemType::MultipleIdempotencyKeys,
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            KeyError::Invalid(d) | KeyError::Malformed(d) | KeyError::Multiple(d) => d,
        }
    }

    pub(crate) fn multiple() -> Self {
        KeyError::Multiple(
            "more than one Idempotency-Key (two headers arrive comma-joined): send exactly one"
                .into(),
        )
    }
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.detail())
    }
}

impl std::error::Error for KeyError {}

/// An `Idempotency-Key`: 1..=255 printable ASCII characters without spaces, sent either as an
/// RFC 8941 string (`"…"`, as draft-ietf-httpapi-idempotency-key-header defines the field,
/// with `\"` and `\\` its only escapes) or bare. `"abc"` and `abc` are the same key.
///
/// A bare key cannot hold a comma: API Gateway's payload 2.0 joins duplicate headers with
/// commas, so `a,b` may be two keys, and is refused rather than guessed at (a key that needs a
/// comma is sent as a string, `"a,b"`, whose comma is inside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, KeyError> {
        let invalid = |why: &str| KeyError::Invalid(why.to_owned());
        let raw = raw.ok_or_else(|| invalid("the Idempotency-Key header is required"))?;
        let text =
            std::str::from_utf8(raw).map_err(|_| invalid("Idempotency-Key must be ASCII"))?;
        // RFC 8941 discards the spaces around a field's value; a bare key keeps its grammar.
        let trimmed = text.trim_matches(' ');
        let key = if trimmed.starts_with('"') {
            unquote(trimmed)?
        } else if text.contains(',') {
            return Err(KeyError::multiple());
        } else {
            text.to_owned()
        };
        if key.is_empty() || key.len() > 255 {
            return Err(invalid("Idempotency-Key must be 1..255 characters"));
        }
        if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(invalid(
                "Idempotency-Key must be printable ASCII without spaces",
            ));
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a contract `sourceEventId` (1..128 printable ASCII): itself when it fits,
    /// else `sha256-<hex>` of it (keys up to 255 characters are accepted at the edge). A key
    /// that starts with that reserved prefix is hashed too, so the hashed form only ever comes
    /// from hashing: two keys never share a `sourceEventId` (one payment for two 202s).
    pub fn source_event_id(&self) -> String {
        if self.0.len() <= 128 && !self.0.starts_with(HASHED_KEY_PREFIX) {
            self.0.clone()
        } else {
            format!(
                "{HASHED_KEY_PREFIX}{}",
                hex(&Sha256::digest(self.0.as_bytes()))
            )
        }
    }
}

/// The content of an RFC 8941 sf-string (`text` starts with its opening quote): `DQUOTE
/// *( %x20-21 / %x23-5B / %x5D-7E / "\\" ( DQUOTE / "\\" ) ) DQUOTE`, then nothing but
/// spaces. A comma after it is a second value (two headers, joined); a `;` would open
/// parameters, which this field does not define.
fn unquote(text: &str) -> Result<String, KeyError> {
    let malformed = |why: &str| KeyError::Malformed(format!("quoted Idempotency-Key: {why}"));
    let mut key = String::with_capacity(text.len());
    let mut chars = text.char_indices().skip(1);
    let rest = loop {
        match chars.next() {
            None => return Err(malformed("no closing quote")),
            Some((_, '\\')) => match chars.next() {
                Some((_, c @ ('"' | '\\'))) => key.push(c),
                _ => return Err(malformed(r#"only \" and \\ are escapes"#)),
            },
            Some((i, '"')) => break &text[i + 1..],
            Some((_, c @ ' '..='~')) => key.push(c),
            Some((_, c)) => {
                return Err(malformed(&format!(
                    "U+{:04X} is not a printable ASCII character",
                    u32::from(c)
                )));
            }
        }
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    match rest.chars().next() {
        None => Ok(key),
        Some(',') => Err(KeyError::multiple()),
        Some(';') => Err(malformed("takes no parameters")),
        Some(_) => Err(malformed("characters after the closing quote")),
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

    fn key(raw: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse(Some(raw.as_bytes())).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn when_a_key_is_an_rfc_8941_string_should_be_the_same_key_as_the_bare_token() {
        assert_eq!(key(r#""abc""#), key("abc"));
        assert_eq!(key(r#""abc""#).as_deref(), Ok("abc"));
        assert_eq!(key(r#"  "abc"  "#).as_deref(), Ok("abc"), "spaces around");
        // `\"` and `\\` are the escapes: the same key as the bare form with those characters.
        assert_eq!(key(r#""a\"b\\c""#).as_deref(), Ok(r#"a"b\c"#));
        assert_eq!(key(r#""a\"b\\c""#), key(r#"a"b\c"#));
        // A comma inside the string is the key's own.
        assert_eq!(key(r#""a,b""#).as_deref(), Ok("a,b"));
        // 255 characters of key, whatever the quoting costs.
        assert!(key(&format!("\"{}\"", "k".repeat(255))).is_ok());
        assert!(key(&format!("\"{}\"", "\\\"".repeat(255))).is_ok());
    }

    #[test]
    fn when_a_quoted_key_is_not_a_well_formed_string_should_refuse_it_as_malformed() {
        for raw in [
            r#""abc"#,
            r#""ab\c""#,
            r#""abc\"#,
            r#""abc"x"#,
            r#""abc" "d""#,
            r#""abc";p=1"#,
            "\"a\tb\"",
            "\"caf\u{e9}\"",
        ] {
            let error = key(raw).expect_err(raw);
            assert!(matches!(error, KeyError::Malformed(_)), "{raw}: {error:?}");
            assert_eq!(error.problem_type().slug(), "malformed-idempotency-key");
        }
        // Well-formed strings whose key breaks the grammar: invalid, not malformed.
        for raw in [r#""""#, r#""a b""#] {
            assert!(matches!(key(raw), Err(KeyError::Invalid(_))), "{raw}");
        }
        assert!(matches!(
            key(&format!("\"{}\"", "k".repeat(256))),
            Err(KeyError::Invalid(_))
        ));
    }

    #[test]
    fn when_two_keys_arrive_comma_joined_should_refuse_them_as_multiple() {
        for raw in [
            "a,b",
            "a, b",
            "a,a",
            ",a",
            "a,",
            r#""a", "b""#,
            r#""a","b""#,
            r#""a" ,b"#,
            "\"a\"\t, \"b\"",
        ] {
            let error = key(raw).expect_err(raw);
            assert!(matches!(error, KeyError::Multiple(_)), "{raw}: {error:?}");
            assert_eq!(error.problem_type().slug(), "multiple-idempotency-keys");
        }
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
    fn when_a_literal_key_names_the_hash_of_a_long_key_should_map_them_to_different_source_event_ids()
     {
        let long = IdempotencyKey::parse(Some("k".repeat(200).as_bytes())).expect("valid");
        let hashed = long.source_event_id();
        // A client may send the hashed form itself as a key: a different key, a different fact.
        let literal = IdempotencyKey::parse(Some(hashed.as_bytes())).expect("valid");
        assert_ne!(
            literal.source_event_id(),
            hashed,
            "two keys, one sourceEventId"
        );
        assert!(literal.source_event_id().starts_with("sha256-"));
        assert!(literal.source_event_id().len() <= 128);
        // Ordinary short keys are unchanged, hashing is stable.
        let short = IdempotencyKey::parse(Some(b"sha256")).expect("valid");
        assert_eq!(short.source_event_id(), "sha256");
        assert_eq!(long.source_event_id(), hashed);
    }

    #[test]
    fn when_a_string_field_holds_a_character_sqs_cannot_carry_should_refuse_it_naming_the_character()
     {
        let body = |account: &str, reference: &str| {
            serde_json::json!({"accountId": account, "amountMinor": 100, "currency": "EUR", "reference": reference})
                .to_string()
        };
        for (reference, named) in [
            ("inv-\u{fffe}", "U+FFFE"),
            ("inv-\u{ffff}", "U+FFFF"),
            ("inv-\u{1}", "U+0001"),
            ("inv-\u{b}", "U+000B"),
        ] {
            let errors = PaymentCommand::parse(body("acc_1", reference).as_bytes())
                .expect_err("SQS cannot carry it")
                .expect("field errors");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].field, "reference");
            assert!(errors[0].rule.contains(named), "{errors:?}");
            // The API's validation problem: 422, naming the field and the character.
            let problem = crate::Problem::validation(errors);
            assert_eq!(problem.status, 422);
            assert!(
                problem.detail.starts_with("reference: "),
                "{}",
                problem.detail
            );
        }
        let errors = PaymentCommand::parse(body("acc_\u{ffff}", "inv-1").as_bytes())
            .expect_err("SQS cannot carry it")
            .expect("field errors");
        assert_eq!(errors[0].field, "accountId");
        assert!(errors[0].rule.contains("U+FFFF"), "{errors:?}");
        // What SQS carries stays accepted: beyond the BMP, and right below the refused pair.
        for reference in ["inv-\u{1f600}", "inv-\u{fffd}", "inv-\u{10ffff}"] {
            assert!(
                PaymentCommand::parse(body("acc_1", reference).as_bytes()).is_ok(),
                "{reference:?}"
            );
        }
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
