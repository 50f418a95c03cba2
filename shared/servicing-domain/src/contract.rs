//! The published contracts as data: the fields of every inbound event type (what the decoder
//! reads) and of every event on the bus (what `apply` publishes), and the JSON Schemas of
//! `docs/schemas/` generated from them. Each rule is built from the constants the decoder and
//! the types check against, so a limit changes in one place.
//!
//! The tables are held to the code by `tests/contract.rs`: a body built from a table decodes; a
//! field it omits or breaks is the field the decoder names; the schema agrees with the decoder
//! on generated bodies; every event `apply` publishes over generated streams validates; and the
//! files in `docs/schemas/` are exactly what this module generates (`UPDATE_SCHEMAS=1` rewrites
//! them).

use serde_json::{Value, json};

use crate::account::Bucket;
use crate::event::{MAX_FEE_TYPE_LEN, MAX_INSTALLMENT_NO, SCHEMA_VERSION};
use crate::outbox::{DOMAIN_EVENT_SCHEMA_VERSION, detail_types};
use crate::types::{AccountId, Currency, MAX_AMOUNT_MINOR, SourceRef};

/// Where the published schemas are named (their `$id`s); the files live in `docs/schemas/`.
pub const SCHEMA_BASE_URI: &str = "https://loan-servicing.example/schemas";

/// What one field must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    SourceSystem,
    SourceEventId,
    AccountId,
    /// RFC 3339 with an offset.
    Timestamp,
    /// `YYYY-MM-DD`.
    Date,
    /// Minor units, `0..=MAX_AMOUNT_MINOR`.
    Amount,
    Currency,
    /// An integer in `1..=max`.
    Count {
        max: i64,
    },
    FeeType,
    /// `{sourceSystem, sourceEventId}`: a fact's identity.
    Identity,
    SchemaVersion,
    /// The bus detail's major version (absent on events published before it was written).
    DomainSchemaVersion,
    /// A transport's own id (inbound `eventId`): any string.
    TransportId,
    /// The bus event's own id, derived from its fact and type (`evt_` + 32 hex).
    DomainEventId,
    Bucket,
    /// Days past due: an integer ≥ 0.
    Days,
    /// A payment's split: `{fees, interest, principal, credit}`, each an amount.
    Allocation,
    /// `[{installmentNo, amountMinor}]`.
    InstallmentParts,
}

/// One field of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub rule: Rule,
    pub required: bool,
    /// May carry `null` (read as absent inbound; written for an absent value on the bus).
    pub nullable: bool,
}

const fn req(name: &'static str, rule: Rule) -> Field {
    Field {
        name,
        rule,
        required: true,
        nullable: false,
    }
}

const fn opt(name: &'static str, rule: Rule) -> Field {
    Field {
        name,
        rule,
        required: false,
        nullable: true,
    }
}

/// The fields every inbound event carries, besides `eventType`.
pub const INBOUND_ENVELOPE: &[Field] = &[
    opt("schemaVersion", Rule::SchemaVersion),
    req("sourceSystem", Rule::SourceSystem),
    req("sourceEventId", Rule::SourceEventId),
    req("accountId", Rule::AccountId),
    req("eventTime", Rule::Timestamp),
    opt("eventId", Rule::TransportId),
];

const INSTALLMENT_NO: Rule = Rule::Count {
    max: MAX_INSTALLMENT_NO,
};
const SEQUENCE: Rule = Rule::Count { max: i64::MAX };

/// The fields of each inbound event type, besides the envelope.
pub const INBOUND: &[(&str, &[Field])] = &[
    (
        "LOAN_OPENED",
        &[
            req("principalMinor", Rule::Amount),
            req("currency", Rule::Currency),
            opt("creditLimitMinor", Rule::Amount),
        ],
    ),
    (
        "INSTALLMENT_DUE",
        &[
            req("installmentNo", INSTALLMENT_NO),
            req("dueDate", Rule::Date),
            req("principalMinor", Rule::Amount),
            req("interestMinor", Rule::Amount),
        ],
    ),
    (
        "INTEREST_ACCRUED",
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
        ],
    ),
    (
        "FEE_ASSESSED",
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("feeType", Rule::FeeType),
        ],
    ),
    (
        "PAYMENT_SETTLED",
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
        ],
    ),
    (
        "PAYMENT_REVERSED",
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("reversalOf", Rule::Identity),
        ],
    ),
    (
        "CREDIT_LIMIT_SET",
        &[
            req("creditLimitMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("sequence", SEQUENCE),
        ],
    ),
    ("BUSINESS_DAY_CLOSED", &[req("businessDate", Rule::Date)]),
];

/// The fields of one inbound event type (`None`: not a type of the contract).
pub fn inbound_fields(event_type: &str) -> Option<&'static [Field]> {
    INBOUND
        .iter()
        .find(|(t, _)| *t == event_type)
        .map(|(_, fields)| *fields)
}

/// The fields every domain event on the bus carries (its `detail`), besides `eventType`.
pub const DOMAIN_ENVELOPE: &[Field] = &[
    // Written on every event since version 1; events published before carry none.
    Field {
        name: "schemaVersion",
        rule: Rule::DomainSchemaVersion,
        required: false,
        nullable: false,
    },
    req("eventId", Rule::DomainEventId),
    req("accountId", Rule::AccountId),
    req("occurredAt", Rule::Timestamp),
    req("trigger", Rule::Identity),
];

/// The payload fields of each domain event type, besides the envelope.
pub const DOMAIN: &[(&str, &[Field])] = &[
    (
        detail_types::LOAN_OPENED,
        &[
            req("principalMinor", Rule::Amount),
            req("currency", Rule::Currency),
            // Written, as null, when the opening set no limit.
            Field {
                name: "creditLimitMinor",
                rule: Rule::Amount,
                required: true,
                nullable: true,
            },
        ],
    ),
    (
        detail_types::INSTALLMENT_DUE,
        &[
            req("installmentNo", INSTALLMENT_NO),
            req("dueDate", Rule::Date),
            req("principalMinor", Rule::Amount),
            req("interestMinor", Rule::Amount),
            req("currency", Rule::Currency),
        ],
    ),
    (
        detail_types::INTEREST_ACCRUED,
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
        ],
    ),
    (
        detail_types::FEE_ASSESSED,
        &[
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("feeType", Rule::FeeType),
        ],
    ),
    (
        detail_types::PAYMENT_APPLIED,
        &[
            req("payment", Rule::Identity),
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("allocation", Rule::Allocation),
            req("installmentsPaid", Rule::InstallmentParts),
        ],
    ),
    (
        detail_types::PAYMENT_REVERSED,
        &[
            req("payment", Rule::Identity),
            req("amountMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("allocation", Rule::Allocation),
            req("installmentsRestored", Rule::InstallmentParts),
        ],
    ),
    (
        detail_types::CREDIT_LIMIT_CHANGED,
        &[
            req("creditLimitMinor", Rule::Amount),
            req("currency", Rule::Currency),
            req("sequence", SEQUENCE),
        ],
    ),
    (
        detail_types::DELINQUENCY_CHANGED,
        &[
            req("fromBucket", Rule::Bucket),
            req("toBucket", Rule::Bucket),
            req("dpd", Rule::Days),
            req("triggerSourceSystem", Rule::SourceSystem),
            req("triggerSourceEventId", Rule::SourceEventId),
        ],
    ),
];

/// The payload fields of one domain event type (`None`: not a type the consumer publishes).
pub fn domain_fields(detail_type: &str) -> Option<&'static [Field]> {
    DOMAIN
        .iter()
        .find(|(t, _)| *t == detail_type)
        .map(|(_, fields)| *fields)
}

/// Every ISO 4217 code `Currency::parse` accepts, in order: the decoder's own rule, applied to
/// every three upper-case letters.
fn currency_codes() -> Vec<String> {
    let letters = b'A'..=b'Z';
    let mut codes = Vec::new();
    for a in letters.clone() {
        for b in letters.clone() {
            for c in letters.clone() {
                let code = String::from_utf8(vec![a, b, c]).unwrap_or_default();
                if Currency::parse(&code).is_ok() {
                    codes.push(code);
                }
            }
        }
    }
    codes
}

fn string(max: usize, pattern: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "pattern": pattern})
}

fn amount() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": MAX_AMOUNT_MINOR})
}

impl Rule {
    /// The JSON Schema of a value under this rule.
    pub fn schema(self) -> Value {
        match self {
            Rule::SourceSystem => string(SourceRef::MAX_SYSTEM_LEN, "^[A-Za-z0-9._:-]+$"),
            Rule::SourceEventId => string(SourceRef::MAX_EVENT_ID_LEN, "^[!-~]+$"),
            Rule::AccountId => string(AccountId::MAX_LEN, "^[A-Za-z0-9_-]+$"),
            Rule::Timestamp => json!({
                "type": "string",
                "format": "date-time",
                "not": {"pattern": crate::event::OUTSIDE_FOUR_DIGIT_YEARS}
            }),
            Rule::Date => {
                json!({"type": "string", "format": "date", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})
            }
            Rule::Amount => amount(),
            Rule::Currency => json!({"enum": currency_codes()}),
            Rule::Count { max } => json!({"type": "integer", "minimum": 1, "maximum": max}),
            Rule::FeeType => string(MAX_FEE_TYPE_LEN, "^[A-Z0-9_]+$"),
            Rule::Identity => json!({
                "type": "object",
                "required": ["sourceSystem", "sourceEventId"],
                "properties": {
                    "sourceSystem": Rule::SourceSystem.schema(),
                    "sourceEventId": Rule::SourceEventId.schema(),
                },
            }),
            Rule::SchemaVersion => json!({"const": SCHEMA_VERSION}),
            Rule::DomainSchemaVersion => json!({"const": DOMAIN_EVENT_SCHEMA_VERSION}),
            Rule::TransportId => json!({"type": "string"}),
            Rule::DomainEventId => json!({"type": "string", "pattern": "^evt_[0-9a-f]{32}$"}),
            Rule::Bucket => {
                json!({"enum": Bucket::ALL.iter().map(|b| b.as_str()).collect::<Vec<_>>()})
            }
            Rule::Days => json!({"type": "integer", "minimum": 0}),
            Rule::Allocation => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["fees", "interest", "principal", "credit"],
                "properties": {
                    "fees": amount(),
                    "interest": amount(),
                    "principal": amount(),
                    "credit": amount(),
                },
            }),
            Rule::InstallmentParts => json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["installmentNo", "amountMinor"],
                    "properties": {
                        "installmentNo": INSTALLMENT_NO.schema(),
                        "amountMinor": amount(),
                    },
                },
            }),
        }
    }
}

/// The object schema of `fields` plus the `eventType` constant.
fn object(event_type: &str, fields: &[&[Field]], closed: bool) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = vec![json!("eventType")];
    properties.insert("eventType".into(), json!({"const": event_type}));
    for field in fields.iter().flat_map(|f| f.iter()) {
        let schema = if field.nullable {
            json!({"anyOf": [field.rule.schema(), {"type": "null"}]})
        } else {
            field.rule.schema()
        };
        properties.insert(field.name.into(), schema);
        if field.required {
            required.push(json!(field.name));
        }
    }
    json!({
        "type": "object",
        "additionalProperties": !closed,
        "required": required,
        "properties": properties,
    })
}

fn document(id: &str, title: String, description: &str, body: Value) -> Value {
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": format!("{SCHEMA_BASE_URI}/{id}"),
        "title": title,
        "description": description,
    });
    if let (Some(out), Some(body)) = (schema.as_object_mut(), body.as_object()) {
        out.extend(body.clone());
    }
    schema
}

/// The JSON Schema of one inbound event type (`docs/schemas/events/<TYPE>.schema.json`).
pub fn inbound_schema(event_type: &str) -> Option<Value> {
    let fields = inbound_fields(event_type)?;
    Some(document(
        &format!("events/{event_type}/{SCHEMA_VERSION}.json"),
        format!("{event_type}, schemaVersion {SCHEMA_VERSION}: a fact on the servicing queue"),
        "One message body on the FIFO servicing queue (MessageGroupId = accountId). Rules, effects \
         and what bad input gets: docs/EVENTS.md. Fields not named here are ignored. What a schema \
         cannot say, the consumer still refuses: an integer written with a decimal point or an \
         exponent (1.0, 1e3), a key twice in one object, an eventTime too far in the future.",
        object(event_type, &[INBOUND_ENVELOPE, fields], false),
    ))
}

/// The JSON Schema of one domain event's `detail` (`docs/schemas/bus/<DetailType>.schema.json`).
pub fn domain_schema(detail_type: &str) -> Option<Value> {
    let fields = domain_fields(detail_type)?;
    Some(document(
        &format!("bus/{detail_type}/{DOMAIN_EVENT_SCHEMA_VERSION}.json"),
        format!(
            "{detail_type}, schemaVersion {DOMAIN_EVENT_SCHEMA_VERSION}: the detail of an event on the servicing bus"
        ),
        "EventBridge source servicing.account-state, detail-type = eventType, time = occurredAt. \
         eventId is stable for the fact and type: consumers deduplicate on it. Events published \
         before schemaVersion was written carry none and are version 1. Meaning of each type: \
         docs/functions.md and docs/ledger.md.",
        object(detail_type, &[DOMAIN_ENVELOPE, fields], true),
    ))
}

/// Every generated schema: its path under `docs/schemas/` and its document.
pub fn published_schemas() -> Vec<(String, Value)> {
    let inbound = INBOUND.iter().filter_map(|(t, _)| {
        inbound_schema(t).map(|schema| (format!("events/{t}.schema.json"), schema))
    });
    let domain = DOMAIN.iter().filter_map(|(t, _)| {
        domain_schema(t).map(|schema| (format!("bus/{t}.schema.json"), schema))
    });
    inbound.chain(domain).collect()
}
