//! Decoding of canonical servicing events (see the contract in `docs/EVENTS.md`).
//!
//! Decoding is hand-written rather than derived so that every rejection names the field and the
//! rule it broke: those reasons are what an operator reads in a quarantine record.
//!
//! Separate from the event model: the typed field access and the integer rules are only the
//! decoder's business.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Map, Value};

use super::duplicate_keys::unique_keys;
use super::wire_time::{parse_date, parse_timestamp};
use super::{EventKind, MAX_FEE_TYPE_LEN, MAX_INSTALLMENT_NO, SCHEMA_VERSION, ServicingEvent};
use crate::types::{AMOUNT_RULE, AccountId, Amount, Currency, Money, RuleViolation, SourceRef};

/// The UTF-8 encoding of U+FEFF, which some tools write at the start of a text.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

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

/// Why a JSON value is not an `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotAnInt {
    /// A whole number above `i64::MAX` (an integer beyond `u64`, or `1e30`, arrives as a float).
    TooLarge,
    /// A whole number below `i64::MIN`.
    TooNegative,
    NegativeZero,
    Fraction,
    /// A whole number spelt with a decimal point or an exponent (`1.0`, `1e3`).
    NotPlain,
    NotANumber,
}

impl NotAnInt {
    fn rule(self) -> &'static str {
        match self {
            NotAnInt::TooLarge => "is too large",
            NotAnInt::TooNegative => "is too large a negative number",
            NotAnInt::NegativeZero => "must be a plain integer, not negative (-0)",
            NotAnInt::Fraction => "must be an integer, not a fraction",
            NotAnInt::NotPlain => {
                "must be an integer, not a fraction: write it without a decimal point or exponent"
            }
            NotAnInt::NotANumber => "must be an integer",
        }
    }
}

/// 2^63: the first magnitude an `i64` cannot hold (exact as an `f64`).
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

fn integer(value: &Value) -> Result<i64, NotAnInt> {
    let Value::Number(n) = value else {
        return Err(NotAnInt::NotANumber);
    };
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    if n.is_u64() {
        return Err(NotAnInt::TooLarge);
    }
    // A float in JSON (serde_json also reads an integer beyond `u64` as one): say which
    // spelling was refused, so a producer can fix it.
    let f = n.as_f64().unwrap_or(f64::NAN);
    Err(if f == 0.0 && f.is_sign_negative() {
        NotAnInt::NegativeZero
    } else if f.abs() >= I64_LIMIT && f.is_sign_negative() {
        NotAnInt::TooNegative
    } else if f.abs() >= I64_LIMIT {
        NotAnInt::TooLarge
    } else if f.fract() != 0.0 {
        NotAnInt::Fraction
    } else {
        NotAnInt::NotPlain
    })
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
        integer(value).map_err(|e| field_error(field, e.rule()))
    }

    /// An amount: too large for any integer and over the contract's limit are both told the
    /// limit; a negative number, however large, is told it must not be negative (the same rule).
    fn amount_value(field: &'static str, value: &Value) -> Result<Amount, DecodeError> {
        match integer(value) {
            Ok(minor) => Amount::new(minor).map_err(with_field(field)),
            Err(NotAnInt::TooLarge) => {
                Err(field_error(field, format!("is too large: {AMOUNT_RULE}")))
            }
            Err(NotAnInt::TooNegative) => Err(field_error(field, AMOUNT_RULE)),
            Err(e) => Err(field_error(field, e.rule())),
        }
    }

    fn amount(&self, field: &'static str) -> Result<Amount, DecodeError> {
        Self::amount_value(field, self.req(field)?)
    }

    fn opt_amount(&self, field: &'static str) -> Result<Option<Amount>, DecodeError> {
        self.opt(field)
            .map(|v| Self::amount_value(field, v))
            .transpose()
    }

    fn currency(&self) -> Result<Currency, DecodeError> {
        Currency::parse(self.str("currency")?).map_err(with_field("currency"))
    }

    fn money(&self, field: &'static str) -> Result<Money, DecodeError> {
        Ok(Money::new(self.amount(field)?, self.currency()?))
    }

    fn positive(&self, field: &'static str, max: i64) -> Result<i64, DecodeError> {
        let value = match integer(self.req(field)?) {
            Ok(value) => value,
            Err(NotAnInt::TooLarge) => {
                return Err(field_error(
                    field,
                    format!("is too large: must be an integer in 1..={max}"),
                ));
            }
            Err(NotAnInt::TooNegative) => i64::MIN,
            Err(e) => return Err(field_error(field, e.rule())),
        };
        if !(1..=max).contains(&value) {
            return Err(field_error(
                field,
                format!("must be an integer in 1..={max}"),
            ));
        }
        Ok(value)
    }

    fn date(&self, field: &'static str) -> Result<NaiveDate, DecodeError> {
        parse_date(self.str(field)?)
            .ok_or_else(|| field_error(field, "must be a calendar date YYYY-MM-DD"))
    }

    fn timestamp(&self, field: &'static str) -> Result<DateTime<Utc>, DecodeError> {
        parse_timestamp(self.str(field)?)
            .ok_or_else(|| field_error(field, "must be an RFC 3339 timestamp with offset"))
    }
}

impl ServicingEvent {
    /// Decodes one message body. A leading UTF-8 byte order mark is ignored (RFC 8259 lets a
    /// parser do so; some producers' tools write one): the event, so its fingerprint, is the
    /// one of the body without it.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
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
                installment_no: u32::try_from(
                    fields.positive("installmentNo", MAX_INSTALLMENT_NO)?,
                )
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
            "BUSINESS_DAY_CLOSED" => EventKind::BusinessDayClosed {
                business_date: fields.date("businessDate")?,
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
}

fn parse_fee_type(value: &str) -> Result<String, DecodeError> {
    let ok = (1..=MAX_FEE_TYPE_LEN).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(field_error(
            "feeType",
            format!("must match [A-Z0-9_]{{1,{MAX_FEE_TYPE_LEN}}}"),
        ));
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

/// At most `max` characters of `s` (of text a caller chose, quoted in an error).
pub(super) fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
