//! The evidence of each decision: one [`DecisionRecord`] line per delivery (schema:
//! `docs/decision-record.schema.json`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::configured_level;
use crate::content_key::{ContentKeyer, ContentParts};

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
    /// Who sent the message, as its [`SENT_BY`] attribute says: an operator's ARN (a redrive, a
    /// resend), or the component that sent it (`reconciler`, `aging`).
    /// Absent on a producer's message. The sender's word (any principal allowed to send may
    /// set it): the proof is CloudTrail's record of the `SendMessage` call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_by: Option<String>,
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
    /// Evidence only, see [`crate::content_key`]: never used to suppress or merge anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_key: Option<String>,
    /// What [`DecisionRecord::seal_content_key`] makes the content key of; never written
    /// anywhere (it holds the payment reference).
    #[serde(skip)]
    pub content: Option<ContentParts>,
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
    /// Why it was quarantined or retried, when known: written as [`bounded_reason`] keeps it.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_bounded_reason"
    )]
    pub reason: Option<String>,
    /// When it was decided (RFC 3339, UTC, milliseconds): stamped by [`print_decision`] when
    /// unset. What an incident window selects on (`ledgerctl incident --from --to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
}

/// The most characters of a [`DecisionRecord::reason`] a record keeps. A reason may quote what
/// a caller sent (a duplicate key's name, a problem's detail), and the records are kept 7 years
/// under lock: a bounded prefix says why, the payload stays in the quarantine it came from.
pub const REASON_MAX: usize = 512;

/// `reason` as a record keeps it: control characters (a terminal escape, a line break) as
/// U+FFFD, and at most [`REASON_MAX`] characters, the last an ellipsis when it was cut.
pub fn bounded_reason(reason: &str) -> String {
    let printable = |c: char| if c.is_control() { '\u{fffd}' } else { c };
    match reason.char_indices().nth(REASON_MAX) {
        None => reason.chars().map(printable).collect(),
        Some(_) => reason
            .chars()
            .take(REASON_MAX - 1)
            .map(printable)
            .chain(['…'])
            .collect(),
    }
}

fn serialize_bounded_reason<S: serde::Serializer>(
    reason: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match reason {
        Some(reason) => serializer.serialize_str(&bounded_reason(reason)),
        None => serializer.serialize_none(),
    }
}

/// The SQS message attribute naming who sent a message that no producer sent: the operator
/// (ledgerctl) or the component that re-sent it. Read into [`DecisionRecord::sent_by`].
pub const SENT_BY: &str = "sentBy";

/// The longest [`SENT_BY`] value a decision record keeps (an IAM ARN is at most 2048
/// characters; a role session's is far shorter): a longer or unprintable one is not kept.
pub const SENT_BY_MAX: usize = 512;

/// The value of a [`SENT_BY`] attribute as a record keeps it: printable ASCII, bounded; else
/// nothing (the attribute is the sender's word, and a log line is no place for arbitrary text).
pub fn sent_by(value: &str) -> Option<String> {
    (!value.is_empty()
        && value.len() <= SENT_BY_MAX
        && value.bytes().all(|b| (0x20..=0x7e).contains(&b)))
    .then(|| value.to_owned())
}

/// What a record keeps of an SQS message's [`SENT_BY`] attribute ([`sent_by`]), if it has one.
pub fn sent_by_of(message: &aws_lambda_events::event::sqs::SqsMessage) -> Option<String> {
    message
        .message_attributes
        .get(SENT_BY)
        .and_then(|a| a.string_value.as_deref())
        .and_then(sent_by)
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
            sent_by: None,
            source_system: None,
            source_event_id: None,
            event_type: None,
            account_id: None,
            event_time: None,
            amount_minor: None,
            currency: None,
            fingerprint: None,
            content_key: None,
            content: None,
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

    /// Replaces the record's content parts by their key under `keyer` (before the record is
    /// printed: the parts hold the payment reference, the key does not reveal it).
    pub fn seal_content_key(&mut self, keyer: &ContentKeyer) {
        if let Some(parts) = self.content.take() {
            self.content_key = Some(keyer.key(&parts));
        }
    }

    /// The JSON form (camelCase; `None` fields absent).
    pub fn to_json(&self) -> Value {
        // Strings, integers and enums only: serializing cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
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
pub(crate) mod tests;
