//! The relay's decision records: what a stream record that carries events is known to be
//! (its `eventID`, its events' ids, its account and fact), and the verdict each comes to:
//! `published`, `sent`, `quarantined` or `retried`. `plan`, `publish`, `servicing_queue` and
//! `failures` say what happened to each record; nothing here does I/O but printing.

use aws_lambda_events::event::dynamodb::EventRecord;
use servicing_store::OutboxEvent;
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

use crate::failures::SQS_REFUSED;
use crate::plan::{API_PAYMENTS, Publishable};
use crate::servicing_queue::Enqueued;
use crate::{CONSUMER, RelayReport};

// What a fact's record (`ClaimRecord`) says of its fact, for the decision record; an
// idempotency record's fact is named by its event's detail.
use servicing_store::items::{ACCOUNT_ID, ITEM_TYPE, SOURCE_EVENT_ID, SOURCE_SYSTEM};
use servicing_store::schema::IdempotencyRecord;
const IDEMPOTENCY: &str = IdempotencyRecord::ITEM_TYPE;

/// A stream record's decision record before its verdict (`published`, by `stream-record`):
/// the stream record's `eventID`, the ids of its events (when they decode), its account and
/// the fact it relays: the `sourceSystem` and `sourceEventId` of a fact's record, those of the
/// API payment's detail for an idempotency record (which names no fact of its own). Nothing it
/// does not carry.
pub(crate) fn evidence(record: &EventRecord, events: Option<&[OutboxEvent]>) -> DecisionRecord {
    let image = &record.change.new_image;
    let text = |name: &str| match image.get(name) {
        Some(serde_dynamo::AttributeValue::S(value)) if !value.is_empty() => Some(value.clone()),
        _ => None,
    };
    let api_payment = events
        .into_iter()
        .flatten()
        .find(|e| (e.source.as_str(), e.detail_type.as_str()) == API_PAYMENTS);
    let of_payment = |name: &str| {
        api_payment
            .and_then(|e| e.detail[name].as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let idempotency_record = text(ITEM_TYPE).as_deref() == Some(IDEMPOTENCY);
    let (source_system, source_event_id) = match (text(SOURCE_SYSTEM), text(SOURCE_EVENT_ID)) {
        (Some(system), Some(id)) => (Some(system), Some(id)),
        _ if idempotency_record => match (of_payment(SOURCE_SYSTEM), of_payment(SOURCE_EVENT_ID)) {
            (Some(system), Some(id)) => (Some(system), Some(id)),
            _ => (None, None),
        },
        _ => (None, None),
    };
    let account_id =
        text(ACCOUNT_ID).or_else(|| idempotency_record.then(|| of_payment(ACCOUNT_ID)).flatten());
    let event_ids: Vec<String> = events
        .into_iter()
        .flatten()
        .map(|e| e.event_id().to_owned())
        .filter(|id| !id.is_empty())
        .collect();
    DecisionRecord {
        source_system,
        source_event_id,
        account_id,
        event_ids: (!event_ids.is_empty()).then_some(event_ids),
        ..DecisionRecord::new(
            CONSUMER,
            &record.event_id,
            Verdict::Published,
            DecidedBy::StreamRecord,
        )
    }
}

impl Enqueued {
    /// Counts the records done with and notes their decisions: quarantined, sent (an API
    /// payment put on the queue) or published.
    pub(crate) fn settle(&self, published: &[Publishable<'_>], report: &mut RelayReport) {
        for (i, item) in published.iter().enumerate().take(self.done) {
            let record = match self.quarantined.iter().find(|(q, _)| *q == i) {
                Some((_, reason)) => {
                    report.quarantined += 1;
                    quarantined(item.evidence.clone(), SQS_REFUSED, reason.clone())
                }
                None => {
                    report.published += 1;
                    DecisionRecord {
                        verdict: match item.enqueue {
                            Some(_) => Verdict::Sent,
                            None => Verdict::Published,
                        },
                        ..item.evidence.clone()
                    }
                }
            };
            report.decisions.push(record);
        }
    }
}

/// The record of a stream record quarantined under `code`, for `reason`.
pub(crate) fn quarantined(evidence: DecisionRecord, code: &str, reason: String) -> DecisionRecord {
    DecisionRecord {
        verdict: Verdict::Quarantined,
        code: Some(code.to_owned()),
        reason: Some(reason),
        ..evidence
    }
}

/// The record of a stream record left to the checkpoint (Lambda delivers it again), and why.
pub(crate) fn retried(evidence: DecisionRecord, reason: String) -> DecisionRecord {
    DecisionRecord {
        verdict: Verdict::Retried,
        decided_by: DecidedBy::Transient,
        reason: Some(reason),
        ..evidence
    }
}

/// Stamps each record with the X-Ray trace of the invocation (from the invocation context: `servicing_telemetry::with_trace`) and prints
/// it (one line each).
pub(crate) fn emit(decisions: &mut [DecisionRecord]) {
    let trace_id = servicing_telemetry::current_trace_id();
    for record in decisions {
        record.trace_id.clone_from(&trace_id);
        servicing_telemetry::print_decision(record);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::outbox_events;
    use crate::servicing_queue::Enqueue;

    /// A stream INSERT of `image` (DynamoDB JSON), as Lambda delivers it.
    fn stream_record(seq: &str, image: Value) -> EventRecord {
        serde_json::from_value(json!({
            "eventID": format!("rec-{seq}"), "eventName": "INSERT", "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {"SequenceNumber": seq, "SizeBytes": 1, "StreamViewType": "NEW_IMAGE",
                "ApproximateCreationDateTime": 0, "Keys": {"pk": {"S": "pk"}, "sk": {"S": "sk"}},
                "NewImage": image}
        }))
        .expect("stream record")
    }

    fn outbox(events: Value) -> Value {
        json!({"S": events.to_string()})
    }

    /// A fact's record (claim) whose write moved the bucket: its event and a change.
    fn fact_record(seq: &str) -> EventRecord {
        stream_record(
            seq,
            json!({"pk": {"S": "CLAIM#account-state#psp#p-1"}, "sk": {"S": "CLAIM"},
            "itemType": {"S": "CLAIM"}, "sourceSystem": {"S": "psp"},
            "sourceEventId": {"S": "p-1"}, "accountId": {"S": "acc_1"},
            "outbox": outbox(json!([
                {"source": "servicing.account-state", "detailType": "PaymentApplied",
                    "detail": {"eventId": "evt_1"}},
                {"source": "servicing.account-state", "detailType": "DelinquencyChanged",
                    "detail": {"eventId": "evt_1-dq"}},
            ]))}),
        )
    }

    /// An API idempotency record: no fact attributes, its payment's detail names the fact.
    fn api_record(seq: &str) -> EventRecord {
        stream_record(
            seq,
            json!({"pk": {"S": "IDEMPOTENCY#scope#k"}, "sk": {"S": "IDEMPOTENCY"},
                "itemType": {"S": "IDEMPOTENCY"},
                "outbox": outbox(json!([{"source": "servicing.payments-api",
                    "detailType": "PaymentSettled", "detail": {"eventId": "op_1",
                    "sourceSystem": "api:client-1", "sourceEventId": "order-1",
                    "accountId": "acc_2", "amountMinor": 100, "currency": "EUR"}}]))}),
        )
    }

    fn events_of(record: &EventRecord) -> Vec<OutboxEvent> {
        outbox_events(&record.change.new_image).expect("events")
    }

    #[test]
    fn when_a_facts_record_is_relayed_should_name_the_record_its_events_account_and_fact() {
        let record = fact_record("7");
        let named = evidence(&record, Some(&events_of(&record)));
        assert_eq!(
            named.to_json(),
            json!({"recordVersion": 1, "kind": "decision", "consumer": "outbox-relay",
                "messageId": "rec-7", "sourceSystem": "psp", "sourceEventId": "p-1",
                "accountId": "acc_1", "eventIds": ["evt_1", "evt_1-dq"],
                "verdict": "published", "decidedBy": "stream-record"})
        );
    }

    #[test]
    fn when_an_api_record_is_relayed_should_name_the_payment_from_its_detail() {
        let record = api_record("8");
        let named = evidence(&record, Some(&events_of(&record)));
        assert_eq!(
            (
                named.source_system.as_deref(),
                named.source_event_id.as_deref(),
                named.account_id.as_deref(),
                named.event_ids.clone(),
            ),
            (
                Some("api:client-1"),
                Some("order-1"),
                Some("acc_2"),
                Some(vec!["op_1".to_owned()])
            )
        );
        // A fact's record without its fact attributes: nothing is taken from the detail.
        let mut claim = api_record("9");
        claim.change.new_image.insert(
            "itemType".into(),
            serde_dynamo::AttributeValue::S("CLAIM".into()),
        );
        let unnamed = evidence(&claim, Some(&events_of(&claim)));
        assert_eq!((unnamed.source_system, unnamed.account_id), (None, None));
    }

    #[test]
    fn when_the_outbox_does_not_decode_should_name_no_events() {
        let mut record = fact_record("3");
        record.change.new_image.insert(
            "outbox".into(),
            serde_dynamo::AttributeValue::S("[{\"detail\": 1}]".into()),
        );
        assert!(outbox_events(&record.change.new_image).is_err());
        let named = evidence(&record, None);
        assert_eq!(named.event_ids, None);
        assert_eq!(named.source_event_id.as_deref(), Some("p-1"));
    }

    fn publishable(record: &EventRecord, enqueue: bool) -> Publishable<'_> {
        Publishable {
            record,
            sequence_number: record.change.sequence_number.as_deref().unwrap_or_default(),
            entries: Vec::new(),
            size: 0,
            enqueue: enqueue.then(|| Enqueue {
                body: "{}".into(),
                group: "acc_2".into(),
                deduplication: "op_1".into(),
                trace_header: None,
            }),
            evidence: evidence(record, Some(&events_of(record))),
        }
    }

    #[test]
    fn when_a_chunk_is_settled_should_record_published_sent_and_quarantined_and_count_them() {
        let (fact, api, refused, later) = (
            fact_record("1"),
            api_record("2"),
            api_record("3"),
            api_record("4"),
        );
        let chunk = [
            publishable(&fact, false),
            publishable(&api, true),
            publishable(&refused, true),
            publishable(&later, true),
        ];
        let enqueued = Enqueued {
            done: 3,
            quarantined: vec![(2, "refused as the sender's fault".into())],
            stopped: Some("InternalError".into()),
        };
        let mut report = RelayReport::default();
        enqueued.settle(&chunk, &mut report);
        assert_eq!((report.published, report.quarantined), (2, 1));
        let verdicts: Vec<(&str, Verdict, Option<&str>)> = report
            .decisions
            .iter()
            .map(|d| (d.message_id.as_str(), d.verdict, d.code.as_deref()))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("rec-1", Verdict::Published, None),
                ("rec-2", Verdict::Sent, None),
                ("rec-3", Verdict::Quarantined, Some(SQS_REFUSED)),
            ],
            "the record not done with is left to the checkpoint"
        );
        assert_eq!(
            report.decisions[2].reason.as_deref(),
            Some("refused as the sender's fault")
        );
    }
}
