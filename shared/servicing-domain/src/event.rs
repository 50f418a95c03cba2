//! Decoding of canonical servicing events (see the contract in `docs/EVENTS.md`).
//!
//! Decoding is hand-written rather than derived so that every rejection names the field and the
//! rule it broke: those reasons are what an operator reads in a quarantine record.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::types::{AMOUNT_RULE, AccountId, Amount, Currency, Money, RuleViolation, SourceRef};

/// Default `MAX_EVENT_TIME_SKEW`: how far ahead of the consumer's clock an `eventTime` may be.
pub const DEFAULT_MAX_EVENT_TIME_SKEW: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

/// The quarantine code of an event dated too far ahead.
pub const EVENT_TIME_IN_FUTURE: &str = "event_time_in_future";

/// The UTF-8 encoding of U+FEFF, which some tools write at the start of a text.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The `sourceSystem` of the daily job's `BUSINESS_DAY_CLOSED` events.
pub const CLOSE_SOURCE_SYSTEM: &str = "scheduler";

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
    /// The servicing side closed `business_date` for the account: its business date moves
    /// there and arrears are recomputed as of it. No money moves.
    BusinessDayClosed {
        business_date: NaiveDate,
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
            EventKind::BusinessDayClosed { .. } => "BUSINESS_DAY_CLOSED",
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
        if self.event_time > limit {
            return Some(format!(
                "eventTime {} is more than {} s ahead of the consumer's clock ({})",
                self.event_time.to_rfc3339_opts(SecondsFormat::Secs, true),
                max_skew.as_secs(),
                now.to_rfc3339_opts(SecondsFormat::Secs, true)
            ));
        }
        // A close moves business time to its `businessDate`, whatever its `eventTime` says: a
        // day that has not begun yet (beyond the same skew) would age the account for good.
        match self.kind {
            EventKind::BusinessDayClosed { business_date }
                if business_date.and_time(chrono::NaiveTime::MIN).and_utc() > limit =>
            {
                Some(format!(
                    "businessDate {business_date} begins more than {} s ahead of the consumer's clock ({})",
                    max_skew.as_secs(),
                    now.to_rfc3339_opts(SecondsFormat::Secs, true)
                ))
            }
            _ => None,
        }
    }

    /// The business date of the event: a `BUSINESS_DAY_CLOSED`'s `businessDate`, else the UTC
    /// calendar date of `eventTime`.
    pub fn business_date(&self) -> NaiveDate {
        match self.kind {
            EventKind::BusinessDayClosed { business_date } => business_date,
            _ => self.event_time.date_naive(),
        }
    }

    /// The close the daily job emits for `account_id` and `business_date`, as the contract
    /// names it: `sourceSystem = "scheduler"`, `sourceEventId = "close-<businessDate>-<accountId>"`,
    /// `eventTime` = the end of that date (UTC). So a second run for the same day, or a
    /// manual close of it, is the same fact again (a duplicate).
    pub fn business_day_closed(account_id: &AccountId, business_date: NaiveDate) -> Self {
        let date = business_date.format("%Y-%m-%d");
        let end_of_day = business_date
            .and_hms_opt(23, 59, 59)
            .unwrap_or_else(|| business_date.and_time(chrono::NaiveTime::MIN));
        ServicingEvent {
            source: SourceRef {
                system: CLOSE_SOURCE_SYSTEM.to_owned(),
                event_id: format!("close-{date}-{account_id}"),
            },
            account_id: account_id.clone(),
            event_time: end_of_day.and_utc(),
            transport_event_id: None,
            kind: EventKind::BusinessDayClosed { business_date },
        }
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
