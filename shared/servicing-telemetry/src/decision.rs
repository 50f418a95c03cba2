//! The evidence of each decision: one [`DecisionRecord`] line per delivery (schema:
//! `docs/decision-record.schema.json`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::configured_level;

/// The version of [`DecisionRecord`]'s JSON form (`recordVersion`), which
/// `docs/decision-record.schema.json` describes. Removing or redefining a field is a new version.
pub const DECISION_RECORD_VERSION: u64 = 1;

/// `recordVersion`: written as [`DECISION_RECORD_VERSION`]; a reader refuses any other, since
/// another version may mean other things by the same field names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "u64", try_from = "u64")]
pub struct RecordVersion;

impl From<RecordVersion> for u64 {
    fn from(_: RecordVersion) -> u64 {
        DECISION_RECORD_VERSION
    }
}

impl TryFrom<u64> for RecordVersion {
    type Error = String;
    fn try_from(version: u64) -> Result<Self, String> {
        match version {
            DECISION_RECORD_VERSION => Ok(RecordVersion),
            other => Err(format!(
                "recordVersion {other}, expected {DECISION_RECORD_VERSION}"
            )),
        }
    }
}

/// `kind`: the one kind of record this is (a reader refuses another).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    #[default]
    Decision,
}

/// What became of one delivery (or of one parked fact judged again: [`Verdict::Released`]).
///
/// account-state and collections use `applied` to `retried` (collections: no `parked` nor
/// `released`); the outbox relay `published`, `sent`, `quarantined` and `retried`; the payments
/// API `accepted` to `refused`. Wire values are kebab-case (the one-word ones are unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Applied,
    Duplicate,
    Collision,
    Stale,
    Parked,
    /// A parked fact judged again in this batch; what became of it is the record's `outcome`.
    Released,
    Quarantined,
    /// A batch item failure: SQS (or the stream, from the relay's checkpoint) delivers it again.
    Retried,
    /// Relay: every event of the stream record was accepted by EventBridge.
    Published,
    /// Relay: published, and the API payment it carries was put on the servicing queue.
    Sent,
    /// API: the command's idempotency record and event were stored now (202).
    Accepted,
    /// API: the same key with the same request: the stored answer, replayed.
    Replayed,
    /// API: the same key with another request (422).
    KeyReused,
    /// API: the key was used longer ago than its retention (422).
    KeyExpired,
    /// API: a request with this key is still being committed (409).
    InFlight,
    /// API: refused before any idempotency record (validation, unknown account, other currency,
    /// no principal, the store failing).
    Refused,
}

impl Verdict {
    /// Every verdict, in the order of the schema's `verdict` enum.
    pub const WIRE: [Verdict; 16] = [
        Verdict::Applied,
        Verdict::Duplicate,
        Verdict::Collision,
        Verdict::Stale,
        Verdict::Parked,
        Verdict::Released,
        Verdict::Quarantined,
        Verdict::Retried,
        Verdict::Published,
        Verdict::Sent,
        Verdict::Accepted,
        Verdict::Replayed,
        Verdict::KeyReused,
        Verdict::KeyExpired,
        Verdict::InFlight,
        Verdict::Refused,
    ];

    /// The wire value (`verdict`, `outcome`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Applied => "applied",
            Verdict::Duplicate => "duplicate",
            Verdict::Collision => "collision",
            Verdict::Stale => "stale",
            Verdict::Parked => "parked",
            Verdict::Released => "released",
            Verdict::Quarantined => "quarantined",
            Verdict::Retried => "retried",
            Verdict::Published => "published",
            Verdict::Sent => "sent",
            Verdict::Accepted => "accepted",
            Verdict::Replayed => "replayed",
            Verdict::KeyReused => "key-reused",
            Verdict::KeyExpired => "key-expired",
            Verdict::InFlight => "in-flight",
            Verdict::Refused => "refused",
        }
    }
}

/// How a verdict was reached (`decidedBy`; the schema describes each value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecidedBy {
    /// The fact's claim was committed now, with its effect: nothing had claimed it before.
    Claim,
    /// The loan item (read or cached) lists the fact among its recent facts, same fingerprint.
    RecentFacts,
    /// The loan item holds the fact parked (same fingerprint: duplicate, other: collision).
    ParkedList,
    /// DynamoDB refused the claim: the stored fingerprint told duplicate from collision.
    RefusedClaim,
    /// The domain's judgment on the account state (stale, rejected, parked, time bound...).
    BusinessRule,
    /// The body is not a valid event: identity, type, account and time are then absent.
    Decode,
    /// DynamoDB refused the request as such: quarantined as `store_rejected`.
    StoreRejected,
    /// Every retry, whatever the cause; the record's reason says which.
    Transient,
    /// Processing the account panicked (a bug): its messages are retried.
    Panic,
    /// Relay: what the stream record carries, and what EventBridge (and the servicing queue)
    /// answered for it.
    StreamRecord,
    /// API: the caller-scoped idempotency record (stored now, found, expired or in flight).
    IdempotencyRecord,
    /// API: the request itself (principal, key, body, time bound), before any record.
    Validation,
}

impl DecidedBy {
    /// The wire value (`decidedBy`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Claim => "claim",
            DecidedBy::RecentFacts => "recent-facts",
            DecidedBy::ParkedList => "parked-list",
            DecidedBy::RefusedClaim => "refused-claim",
            DecidedBy::BusinessRule => "business-rule",
            DecidedBy::Decode => "decode",
            DecidedBy::StoreRejected => "store-rejected",
            DecidedBy::Transient => "transient",
            DecidedBy::Panic => "panic",
            DecidedBy::StreamRecord => "stream-record",
            DecidedBy::IdempotencyRecord => "idempotency-record",
            DecidedBy::Validation => "validation",
        }
    }
}

/// The evidence of one decision: which delivery, which fact, what became of it and how that was
/// decided. A field the consumer does not know (an undecodable body has no identity) is `None`
/// and absent from the JSON, never guessed. The record never carries the payload itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub record_version: RecordVersion,
    pub kind: RecordKind,
    pub consumer: String,
    /// The SQS message; for a released record, the message that brought the parked fact; the
    /// stream record's `eventID` (relay); the API Gateway request id (API).
    pub message_id: String,
    /// SQS `ApproximateReceiveCount`: absent when SQS did not say, and on a released record
    /// (its message was received in an earlier batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    /// The Lambda request id of the invocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The X-Ray trace id of the invocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// RFC 3339, UTC, as the consumer fingerprints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time: Option<String>,
    /// The event's `amountMinor` (payments, reversals, fees, interest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<i64>,
    /// The event's ISO 4217 currency (any event that carries one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// `sha256:<hex>` of the event's business fields: what tells a duplicate from a collision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Evidence only, see [`content_key`]: never used to suppress or merge anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_key: Option<String>,
    /// The `eventId`s of the events a stream record carried (relay only), in its order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_ids: Option<Vec<String>>,
    pub verdict: Verdict,
    /// On a [`Verdict::Released`] record only: what became of the parked fact judged again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Verdict>,
    pub decided_by: DecidedBy,
    /// The quarantine code (quarantined, or a released fact quarantined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it was quarantined or retried, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was decided (RFC 3339, UTC, milliseconds): stamped by [`print_decision`] when
    /// unset. What an incident window selects on (`ledgerctl incident --from --to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
}

impl DecisionRecord {
    /// A record of `message_id` with nothing known but the verdict (fill in what is known).
    pub fn new(consumer: &str, message_id: &str, verdict: Verdict, decided_by: DecidedBy) -> Self {
        Self {
            record_version: RecordVersion,
            kind: RecordKind::Decision,
            consumer: consumer.to_owned(),
            message_id: message_id.to_owned(),
            receive_count: None,
            request_id: None,
            trace_id: None,
            source_system: None,
            source_event_id: None,
            event_type: None,
            account_id: None,
            event_time: None,
            amount_minor: None,
            currency: None,
            fingerprint: None,
            content_key: None,
            event_ids: None,
            verdict,
            outcome: None,
            decided_by,
            code: None,
            reason: None,
            decided_at: None,
        }
    }

    /// The verdict that counts for the money and the verdict metrics: the outcome of a released
    /// fact, the verdict of a delivery.
    pub fn effective_verdict(&self) -> Verdict {
        match (self.verdict, self.outcome) {
            (Verdict::Released, Some(outcome)) => outcome,
            (verdict, _) => verdict,
        }
    }

    /// The JSON form (camelCase; `None` fields absent).
    pub fn to_json(&self) -> Value {
        // Strings, integers and enums only: serializing cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// The content key of a fact: SHA-256 (lowercase hex) of
/// `accountId|amountMinor|currency|eventTime|reference`, a missing part written as the empty
/// string (`reference` is the producer's payment reference, when the body has one).
///
/// Evidence only. It lets an auditor find the same money movement asserted under two
/// identities (a provider's event and an API call for one payment, a file resent with new ids);
/// it NEVER suppresses, merges or deduplicates anything: two genuine payments of the same amount
/// at the same time share a key, and deduplication stays on `(sourceSystem, sourceEventId)`.
pub fn content_key(
    account_id: &str,
    amount_minor: Option<i64>,
    currency: Option<&str>,
    event_time: &str,
    reference: Option<&str>,
) -> String {
    let amount = amount_minor.map(|a| a.to_string()).unwrap_or_default();
    let text = format!(
        "{account_id}|{amount}|{}|{event_time}|{}",
        currency.unwrap_or_default(),
        reference.unwrap_or_default()
    );
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// The line a decision record is printed as: its JSON plus the `level` Lambda's log filter
/// reads (see [`crate::emf_level`]). Nothing else: no payload, no message.
pub fn decision_line(record: &DecisionRecord, level: &str) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        #[serde(flatten)]
        record: &'a DecisionRecord,
        level: &'a str,
    }
    serde_json::to_string(&Line { record, level }).unwrap_or_default()
}

/// Prints one decision record as one JSON line on stdout, at the level an EMF line declares,
/// stamped with the time of decision when the record has none.
pub fn print_decision(record: &DecisionRecord) {
    if record.decided_at.is_some() {
        println!("{}", decision_line(record, configured_level()));
    } else {
        let stamped = DecisionRecord {
            decided_at: Some(decision_time(std::time::SystemTime::now().into())),
            ..record.clone()
        };
        println!("{}", decision_line(&stamped, configured_level()));
    }
}

/// The `decidedAt` form of a time: RFC 3339, UTC, milliseconds (`2026-11-02T10:00:00.000Z`).
pub fn decision_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::emf_level;

    const TIME: &str = "2026-11-02T10:00:00Z";

    /// A payment of `acc_1` from `source`, as the consumer records it.
    pub(crate) fn payment(source: &str, id: &str, amount: i64, verdict: Verdict) -> DecisionRecord {
        let by = match verdict {
            Verdict::Applied => DecidedBy::Claim,
            _ => DecidedBy::RecentFacts,
        };
        DecisionRecord {
            receive_count: Some(1),
            source_system: Some(source.into()),
            source_event_id: Some(id.into()),
            event_type: Some("PAYMENT_SETTLED".into()),
            account_id: Some("acc_1".into()),
            event_time: Some(TIME.into()),
            amount_minor: Some(amount),
            currency: Some("EUR".into()),
            fingerprint: Some(format!("sha256:{}", "0".repeat(64))),
            content_key: Some(content_key("acc_1", Some(amount), Some("EUR"), TIME, None)),
            ..DecisionRecord::new("account-state", &format!("m-{id}"), verdict, by)
        }
    }

    #[test]
    fn when_a_content_key_is_computed_should_hash_the_pipe_joined_parts_with_empty_for_missing() {
        // `printf 'acc_1|2500|EUR|2026-11-02T10:00:00Z|INV-7' | sha256sum`
        assert_eq!(
            content_key("acc_1", Some(2500), Some("EUR"), TIME, Some("INV-7")),
            "84ecc3b219fe8ba8576c693f8208de557b6f33eaea321fc6124722b47cb4b299"
        );
        assert_eq!(
            content_key("acc_1", None, None, TIME, None),
            format!("{:x}", Sha256::digest(b"acc_1|||2026-11-02T10:00:00Z|"))
        );
    }

    /// A record with every field known.
    fn full() -> DecisionRecord {
        DecisionRecord {
            outcome: Some(Verdict::Quarantined),
            code: Some("store_rejected".into()),
            reason: Some("too big".into()),
            decided_at: Some("2026-11-02T10:00:01.250Z".into()),
            request_id: Some("req-1".into()),
            trace_id: Some("Root=1-abc".into()),
            decided_by: DecidedBy::StoreRejected,
            ..payment("prov-a", "p1", 2500, Verdict::Released)
        }
    }

    #[test]
    fn when_compared_with_the_schema_should_write_its_field_names_and_wire_values() {
        let schema = include_str!("../../../docs/decision-record.schema.json");
        let schema: Value = serde_json::from_str(schema).expect("the schema is JSON");
        let keys = |v: &Value| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<BTreeSet<_>>())
        };
        let mut documented = keys(&schema["properties"]).unwrap_or_default();
        documented.remove("level");
        // Every field: a record with all of account-state's, and a relay record's event ids.
        let every = DecisionRecord {
            event_ids: Some(vec!["evt_1".into()]),
            ..full()
        };
        assert_eq!(keys(&every.to_json()), Some(documented));

        let wire = |field: &str| schema["properties"][field]["enum"].as_array().cloned();
        let verdicts = wire("verdict").unwrap_or_default();
        assert_eq!(
            verdicts,
            Verdict::WIRE.map(|v| json!(v.as_str())),
            "the schema lists every verdict, in order"
        );
        for value in verdicts {
            let verdict: Verdict = serde_json::from_value(value.clone()).expect("a verdict");
            assert_eq!(
                (json!(verdict), json!(verdict.as_str())),
                (value.clone(), value)
            );
        }
        // account-state's values, as they were written before the other consumers had records.
        assert_eq!(
            Verdict::WIRE[..8]
                .iter()
                .map(|v| json!(v))
                .collect::<Vec<_>>(),
            [
                "applied",
                "duplicate",
                "collision",
                "stale",
                "parked",
                "released",
                "quarantined",
                "retried"
            ]
            .map(|v| json!(v))
        );
        let by_values = wire("decidedBy").unwrap_or_default();
        assert_eq!(
            by_values,
            ALL_DECIDED_BY.map(|by| json!(by.as_str())),
            "the schema lists every decidedBy, in order"
        );
        for value in by_values {
            let by: DecidedBy = serde_json::from_value(value.clone()).expect("a decidedBy");
            assert_eq!((json!(by), json!(by.as_str())), (value.clone(), value));
        }
    }

    /// Every [`DecidedBy`], in the schema's order.
    const ALL_DECIDED_BY: [DecidedBy; 12] = [
        DecidedBy::Claim,
        DecidedBy::RecentFacts,
        DecidedBy::ParkedList,
        DecidedBy::RefusedClaim,
        DecidedBy::BusinessRule,
        DecidedBy::Decode,
        DecidedBy::StoreRejected,
        DecidedBy::Transient,
        DecidedBy::Panic,
        DecidedBy::StreamRecord,
        DecidedBy::IdempotencyRecord,
        DecidedBy::Validation,
    ];

    #[test]
    fn when_a_record_is_serialized_should_be_camel_case_versioned_and_omit_the_unknown() {
        let record = full();
        let expected = json!({
            "recordVersion": 1, "kind": "decision", "consumer": "account-state",
            "messageId": "m-p1", "receiveCount": 1, "requestId": "req-1", "traceId": "Root=1-abc",
            "sourceSystem": "prov-a", "sourceEventId": "p1", "eventType": "PAYMENT_SETTLED",
            "accountId": "acc_1", "eventTime": "2026-11-02T10:00:00Z", "amountMinor": 2500,
            "currency": "EUR", "fingerprint": record.fingerprint, "contentKey": record.content_key,
            "verdict": "released", "outcome": "quarantined", "decidedBy": "store-rejected",
            "code": "store_rejected", "reason": "too big", "decidedAt": "2026-11-02T10:00:01.250Z",
        });
        assert_eq!(record.to_json(), expected);

        // An undecodable body: no identity, nothing invented.
        let undecodable = DecisionRecord {
            code: Some("not_json".into()),
            reason: Some("body is not valid UTF-8 JSON".into()),
            ..DecisionRecord::new(
                "account-state",
                "m9",
                Verdict::Quarantined,
                DecidedBy::Decode,
            )
        };
        let expected = json!({
            "recordVersion": 1, "kind": "decision", "consumer": "account-state",
            "messageId": "m9", "verdict": "quarantined", "decidedBy": "decode",
            "code": "not_json", "reason": "body is not valid UTF-8 JSON",
        });
        assert_eq!(undecodable.to_json(), expected);
    }

    #[test]
    fn when_a_printed_line_is_read_back_should_give_the_record_and_refuse_other_versions() {
        let record = full();
        let line = decision_line(&record, emf_level(Some("warn")));
        assert!(!line.contains('\n'), "{line}");
        let mut parsed: Value = serde_json::from_str(&line).expect("json line");
        assert_eq!(parsed["level"], "WARN");
        if let Value::Object(fields) = &mut parsed {
            fields.remove("level");
        }
        assert_eq!(
            parsed,
            record.to_json(),
            "the record and its level, nothing else"
        );
        let read: DecisionRecord = serde_json::from_str(&line).expect("a record");
        assert_eq!(read, record);

        let mut other = record.to_json();
        other["recordVersion"] = json!(2);
        assert!(serde_json::from_value::<DecisionRecord>(other).is_err());
        let mut other = record.to_json();
        other["kind"] = json!("batch");
        assert!(serde_json::from_value::<DecisionRecord>(other).is_err());
    }
}
