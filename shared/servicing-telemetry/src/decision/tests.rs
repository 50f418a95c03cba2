//! The unit tests of the decision record: its JSON against the schema, its line, the content
//! key. Separate from the record itself; `payment` is shared with `by_source`'s tests.

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
        content_key: Some(keyer().key(&ContentParts {
            account_id: "acc_1".into(),
            amount_minor: Some(amount),
            currency: Some("EUR".into()),
            event_time: TIME.into(),
            reference: None,
        })),
        ..DecisionRecord::new("account-state", &format!("m-{id}"), verdict, by)
    }
}

fn keyer() -> ContentKeyer {
    ContentKeyer::new(&[7; 32]).expect("secret")
}

#[test]
fn when_a_record_is_sealed_should_keep_the_key_of_its_parts_and_drop_the_parts() {
    let parts = ContentParts {
        account_id: "acc_1".into(),
        amount_minor: Some(2500),
        currency: Some("EUR".into()),
        event_time: TIME.into(),
        reference: Some("INV-7".into()),
    };
    let mut record = DecisionRecord {
        content: Some(parts.clone()),
        ..payment("prov-a", "p1", 2500, Verdict::Applied)
    };
    record.seal_content_key(&keyer());
    assert_eq!(record.content_key, Some(keyer().key(&parts)));
    assert_eq!(record.content, None);
    assert!(!record.to_json().to_string().contains("INV-7"));
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
        sent_by: Some("arn:aws:iam::111122223333:user/ops-alice".into()),
        decided_by: DecidedBy::StoreRejected,
        ..payment("prov-a", "p1", 2500, Verdict::Released)
    }
}

#[test]
fn when_compared_with_the_schema_should_write_its_field_names_and_wire_values() {
    let schema = include_str!("../../../../docs/decision-record.schema.json");
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
        "sentBy": "arn:aws:iam::111122223333:user/ops-alice",
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

#[test]
fn when_a_message_names_its_sender_should_keep_only_a_bounded_printable_value() {
    let arn = "arn:aws:sts::111122223333:assumed-role/ops/alice";
    assert_eq!(sent_by(arn).as_deref(), Some(arn));
    assert_eq!(sent_by(""), None);
    assert_eq!(sent_by("ops\nalice"), None);
    assert_eq!(sent_by(&"a".repeat(SENT_BY_MAX + 1)), None);
    assert!(sent_by(&"a".repeat(SENT_BY_MAX)).is_some());
}

#[test]
fn when_a_reason_quotes_a_caller_at_length_should_keep_a_bounded_printable_prefix() {
    // A body's duplicate key name, a problem detail: text the caller chose, kept for 7 years.
    let long = format!("the key `{}\u{1b}[2J` appears twice", "k".repeat(100_000));
    let record = DecisionRecord {
        reason: Some(long),
        ..DecisionRecord::new(
            "account-state",
            "m1",
            Verdict::Quarantined,
            DecidedBy::Decode,
        )
    };
    let kept = record.to_json()["reason"]
        .as_str()
        .expect("a reason")
        .to_owned();
    assert_eq!(kept.chars().count(), REASON_MAX);
    assert!(kept.starts_with("the key `kkk"), "{kept}");
    assert!(kept.ends_with('…'), "{kept}");
    let line = decision_line(&record, emf_level(None));
    assert!(line.len() < REASON_MAX + 400, "{} bytes", line.len());

    let escape = DecisionRecord {
        reason: Some("a\u{1b}[2Jb\nc\u{7f}d".into()),
        ..record
    };
    assert_eq!(escape.to_json()["reason"], "a�[2Jb�c�d");
}
