//! Decoding of canonical servicing events (see the contract in `docs/EVENTS.md`).
//!
//! Decoding is hand-written rather than derived so that every rejection names the field and the
//! rule it broke: those reasons are what an operator reads in a quarantine record.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::types::{AccountId, Amount, Currency, Money, RuleViolation, SourceRef};

/// Default `MAX_EVENT_TIME_SKEW`: how far ahead of the consumer's clock an `eventTime` may be.
pub const DEFAULT_MAX_EVENT_TIME_SKEW: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

/// The quarantine code of an event dated too far ahead.
pub const EVENT_TIME_IN_FUTURE: &str = "event_time_in_future";

/// The only schema major version this build understands.
pub const SCHEMA_VERSION: i64 = 1;

/// A decoded, validated servicing event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicingEvent {
    pub source: SourceRef,
    pub account_id: AccountId,
    pub event_time: DateTime<Utc>,
    /// Minted by a transport; logged for tracing, never used for identity or fingerprints.
    pub transport_event_id: Option<String>,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    LoanOpened {
        principal: Money,
        credit_limit: Option<Amount>,
    },
    InstallmentDue {
        installment_no: u32,
        due_date: NaiveDate,
        principal: Amount,
        interest: Amount,
    },
    InterestAccrued {
        amount: Money,
    },
    FeeAssessed {
        amount: Money,
        fee_type: String,
    },
    PaymentSettled {
        amount: Money,
    },
    PaymentReversed {
        amount: Money,
        reversal_of: SourceRef,
    },
    CreditLimitSet {
        limit: Money,
        sequence: u64,
    },
}

impl EventKind {
    pub fn wire_name(&self) -> &'static str {
        match self {
            EventKind::LoanOpened { .. } => "LOAN_OPENED",
            EventKind::InstallmentDue { .. } => "INSTALLMENT_DUE",
            EventKind::InterestAccrued { .. } => "INTEREST_ACCRUED",
            EventKind::FeeAssessed { .. } => "FEE_ASSESSED",
            EventKind::PaymentSettled { .. } => "PAYMENT_SETTLED",
            EventKind::PaymentReversed { .. } => "PAYMENT_REVERSED",
            EventKind::CreditLimitSet { .. } => "CREDIT_LIMIT_SET",
        }
    }
}

/// Why a message is not a valid event. Always permanent: the message goes to quarantine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("body is not valid UTF-8 JSON: {0}")]
    NotJson(String),
    #[error("body must be a JSON object")]
    NotAnObject,
    #[error("ambiguous body: {0}")]
    DuplicateKey(String),
    #[error("field `{field}`: {rule}")]
    Field { field: &'static str, rule: String },
}

impl DecodeError {
    /// A short stable code for metrics and quarantine indexes.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::NotJson(_) => "not_json",
            DecodeError::NotAnObject => "not_an_object",
            DecodeError::DuplicateKey(_) => "duplicate_key",
            DecodeError::Field { .. } => "invalid_field",
        }
    }
}

fn field_error(field: &'static str, rule: impl Into<String>) -> DecodeError {
    DecodeError::Field {
        field,
        rule: rule.into(),
    }
}

fn with_field(field: &'static str) -> impl Fn(RuleViolation) -> DecodeError {
    move |v| field_error(field, v.0)
}

/// Typed access to the fields of one JSON object, each miss naming the field.
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn opt(&self, field: &'static str) -> Option<&'a Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn req(&self, field: &'static str) -> Result<&'a Value, DecodeError> {
        self.opt(field)
            .ok_or_else(|| field_error(field, "is required"))
    }

    fn str(&self, field: &'static str) -> Result<&'a str, DecodeError> {
        self.req(field)?
            .as_str()
            .ok_or_else(|| field_error(field, "must be a string"))
    }

    fn int_value(field: &'static str, value: &Value) -> Result<i64, DecodeError> {
        match value {
            Value::Number(n) if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
            Value::Number(n) if n.is_u64() => Err(field_error(field, "is too large")),
            // A float in JSON: say which spelling was refused, so a producer can fix it.
            Value::Number(n) => Err(field_error(
                field,
                match n.as_f64() {
                    Some(f) if f == 0.0 && f.is_sign_negative() => {
                        "must be a plain integer, not negative (-0)"
                    }
                    Some(f) if f.fract() != 0.0 => "must be an integer, not a fraction",
                    _ => {
                        "must be an integer, not a fraction: write it without a decimal point or exponent"
                    }
                },
            )),
            _ => Err(field_error(field, "must be an integer")),
        }
    }

    fn int(&self, field: &'static str) -> Result<i64, DecodeError> {
        Self::int_value(field, self.req(field)?)
    }

    fn amount(&self, field: &'static str) -> Result<Amount, DecodeError> {
        Amount::new(self.int(field)?).map_err(with_field(field))
    }

    fn opt_amount(&self, field: &'static str) -> Result<Option<Amount>, DecodeError> {
        self.opt(field)
            .map(|v| Amount::new(Self::int_value(field, v)?).map_err(with_field(field)))
            .transpose()
    }

    fn currency(&self) -> Result<Currency, DecodeError> {
        Currency::parse(self.str("currency")?).map_err(with_field("currency"))
    }

    fn money(&self, field: &'static str) -> Result<Money, DecodeError> {
        Ok(Money::new(self.amount(field)?, self.currency()?))
    }

    fn positive(&self, field: &'static str, max: i64) -> Result<i64, DecodeError> {
        let value = self.int(field)?;
        if !(1..=max).contains(&value) {
            return Err(field_error(
                field,
                format!("must be an integer in 1..={max}"),
            ));
        }
        Ok(value)
    }

    fn date(&self, field: &'static str) -> Result<NaiveDate, DecodeError> {
        NaiveDate::parse_from_str(self.str(field)?, "%Y-%m-%d")
            .map_err(|_| field_error(field, "must be a calendar date YYYY-MM-DD"))
    }

    fn timestamp(&self, field: &'static str) -> Result<DateTime<Utc>, DecodeError> {
        DateTime::parse_from_rfc3339(self.str(field)?)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| field_error(field, "must be an RFC 3339 timestamp with offset"))
    }
}

impl ServicingEvent {
    /// Decodes one message body.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| DecodeError::NotJson(e.to_string()))?;
        // Readers disagree on which of two equal keys counts (serde_json keeps the last): the
        // quarantined raw body and an applied amount could differ, so such a body is refused.
        unique_keys(body).map_err(DecodeError::DuplicateKey)?;
        Self::from_value(&value)
    }

    pub fn from_value(value: &Value) -> Result<Self, DecodeError> {
        let fields = Fields(value.as_object().ok_or(DecodeError::NotAnObject)?);

        if let Some(version) = fields.opt("schemaVersion") {
            let version = Fields::int_value("schemaVersion", version)?;
            if version != SCHEMA_VERSION {
                return Err(field_error(
                    "schemaVersion",
                    format!(
                        "major version {version} is not supported (supported: {SCHEMA_VERSION})"
                    ),
                ));
            }
        }
        let system = SourceRef::parse_system(fields.str("sourceSystem")?)
            .map_err(with_field("sourceSystem"))?;
        let event_id = SourceRef::parse_event_id(fields.str("sourceEventId")?)
            .map_err(with_field("sourceEventId"))?;
        let account_id =
            AccountId::parse(fields.str("accountId")?).map_err(with_field("accountId"))?;
        let event_time = fields.timestamp("eventTime")?;
        let transport_event_id = match fields.opt("eventId") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(field_error("eventId", "must be a string")),
        };

        let kind = match fields.str("eventType")? {
            "LOAN_OPENED" => EventKind::LoanOpened {
                principal: fields.money("principalMinor")?,
                credit_limit: fields.opt_amount("creditLimitMinor")?,
            },
            "INSTALLMENT_DUE" => EventKind::InstallmentDue {
                installment_no: u32::try_from(fields.positive("installmentNo", 100_000)?)
                    .map_err(|_| field_error("installmentNo", "is too large"))?,
                due_date: fields.date("dueDate")?,
                principal: fields.amount("principalMinor")?,
                interest: fields.amount("interestMinor")?,
            },
            "INTEREST_ACCRUED" => EventKind::InterestAccrued {
                amount: fields.money("amountMinor")?,
            },
            "FEE_ASSESSED" => EventKind::FeeAssessed {
                amount: fields.money("amountMinor")?,
                fee_type: parse_fee_type(fields.str("feeType")?)?,
            },
            "PAYMENT_SETTLED" => EventKind::PaymentSettled {
                amount: fields.money("amountMinor")?,
            },
            "PAYMENT_REVERSED" => EventKind::PaymentReversed {
                amount: fields.money("amountMinor")?,
                reversal_of: parse_reversal_of(fields.req("reversalOf")?)?,
            },
            "CREDIT_LIMIT_SET" => EventKind::CreditLimitSet {
                limit: fields.money("creditLimitMinor")?,
                sequence: fields.positive("sequence", i64::MAX)?.unsigned_abs(),
            },
            other => {
                return Err(field_error(
                    "eventType",
                    format!("unknown event type {:?}", truncate(other, 64)),
                ));
            }
        };

        Ok(ServicingEvent {
            source: SourceRef { system, event_id },
            account_id,
            event_time,
            transport_event_id,
            kind,
        })
    }

    /// Why `eventTime` cannot be trusted at `now`: more than `max_skew` ahead of the consumer's
    /// clock (business time only moves forward for an account, so one event dated in the
    /// future would age its arrears for good). Quarantined unclaimed, so a corrected resend can
    /// still apply.
    pub fn too_far_ahead(
        &self,
        now: DateTime<Utc>,
        max_skew: std::time::Duration,
    ) -> Option<String> {
        let skew = chrono::Duration::from_std(max_skew).unwrap_or(chrono::Duration::MAX);
        let limit = now.checked_add_signed(skew)?;
        (self.event_time > limit).then(|| {
            format!(
                "eventTime {} is more than {} s ahead of the consumer's clock ({})",
                self.event_time.to_rfc3339_opts(SecondsFormat::Secs, true),
                max_skew.as_secs(),
                now.to_rfc3339_opts(SecondsFormat::Secs, true)
            )
        })
    }

    /// The business date of the event: the UTC calendar date of `eventTime`.
    pub fn business_date(&self) -> NaiveDate {
        self.event_time.date_naive()
    }

    /// The payment a reversal refers to, which the caller must look up before `apply`.
    pub fn reversal_target(&self) -> Option<&SourceRef> {
        match &self.kind {
            EventKind::PaymentReversed { reversal_of, .. } => Some(reversal_of),
            _ => None,
        }
    }

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
        };
        if let (Some(target), Value::Object(extra)) = (v.as_object_mut(), extra) {
            target.extend(extra);
        }
        v
    }
}

fn parse_fee_type(value: &str) -> Result<String, DecodeError> {
    let ok = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(field_error("feeType", "must match [A-Z0-9_]{1,64}"));
    }
    Ok(value.to_owned())
}

fn parse_reversal_of(value: &Value) -> Result<SourceRef, DecodeError> {
    let fields = Fields(value.as_object().ok_or_else(|| {
        field_error(
            "reversalOf",
            "must be an object {sourceSystem, sourceEventId}",
        )
    })?);
    let system = fields
        .str("sourceSystem")
        .map_err(|_| field_error("reversalOf", "needs a string sourceSystem"))?;
    let event_id = fields
        .str("sourceEventId")
        .map_err(|_| field_error("reversalOf", "needs a string sourceEventId"))?;
    SourceRef::new(system, event_id).map_err(|v| field_error("reversalOf", v.0))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `Err` naming the key when a JSON object in `body` has the same key twice (at any depth,
/// escapes decoded): readers disagree on which value counts.
pub fn unique_keys(body: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<UniqueKeys>(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Deserialises any JSON, failing on an object that has the same key twice (at any depth).
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the key `{key}` appears twice in one object"
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(self)
    }
}
