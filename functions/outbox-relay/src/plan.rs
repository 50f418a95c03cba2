//! What to do with one stream record: skip it (not the write that applied a fact), publish its
//! events (their `PutEvents` entries, and an API payment's servicing-queue message), or
//! quarantine it (it can never be published). Separate from the sending: planning does no I/O,
//! so the checkpoint can plan the records after it again to record them.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_eventbridge::primitives::{DateTime, DateTimeFormat};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use servicing_store::items::{OUTBOX, REVERSED_BY, TRACE_HEADER};
use servicing_store::{OutboxEvent, StoreError};
use servicing_telemetry::DecisionRecord;

use crate::servicing_queue::Enqueue;
use crate::{MAX_REQUEST_BYTES, OutboxRelay, decisions};

/// A reversal's mark on its payment's record (`reversedBy`): a later write to an applied
/// record, whose events were published by the write that applied it.
fn is_reversal_mark(image: &HashMap<String, serde_dynamo::AttributeValue>) -> bool {
    image.contains_key(REVERSED_BY)
}

/// A later write to an API payment's idempotency record, which is put once (create-only): the
/// reconciler's confirmation that the payment applied, never a publication.
fn is_later_write_of_an_api_record(record: &EventRecord) -> bool {
    record.event_name == "MODIFY"
        && matches!(
            record.change.new_image.get("pk"),
            Some(serde_dynamo::AttributeValue::S(pk)) if pk.starts_with("IDEMPOTENCY#")
        )
}

/// What EventBridge counts for an entry's `Time` when it is set.
const TIME_BYTES: usize = 14;

/// When the fact behind an event happened (its `occurredAt`, else its `eventTime`): the bus's
/// `time`, which archive replays and rules select on, is business time, not when the relay
/// happened to publish (a record relayed late, or republished, keeps its time). Never later
/// than `now`: a producer's clock may run ahead (within the consumers' skew bound), the bus's
/// must not. `None`: EventBridge stamps the publication time.
fn business_time(detail: &serde_json::Value, now: DateTime) -> Option<DateTime> {
    ["occurredAt", "eventTime"]
        .iter()
        .filter_map(|field| detail[field].as_str())
        .find_map(|text| DateTime::from_str(text, DateTimeFormat::DateTimeWithOffset).ok())
        .map(|time| time.min(now))
}

/// The outbox events account-state must apply (the API's accepted payments): sent to the
/// servicing queue, never published on the bus.
pub(crate) const API_PAYMENTS: (&str, &str) = ("servicing.payments-api", "PaymentSettled");

/// A record whose events will be published.
#[derive(Debug)]
pub(crate) struct Publishable<'a> {
    pub(crate) record: &'a EventRecord,
    pub(crate) sequence_number: &'a str,
    /// Its `PutEvents` entries (none for an API payment, which goes to the queue alone).
    pub(crate) entries: Vec<PutEventsRequestEntry>,
    pub(crate) size: usize,
    pub(crate) enqueue: Option<Enqueue>,
    /// Its decision record, before the verdict.
    pub(crate) evidence: DecisionRecord,
}

impl Publishable<'_> {
    /// What it takes of a chunk's 10 entries: its `PutEvents` entries, and its message of the
    /// `SendMessageBatch` (also 10 at most).
    pub(crate) fn slots(&self) -> usize {
        self.entries.len() + usize::from(self.enqueue.is_some())
    }
}

/// What to do with one stream record.
pub(crate) enum Plan<'a> {
    /// Not an outbox insert: nothing to do.
    Skip,
    Publish(Box<Publishable<'a>>),
    /// Can never be published (undecodable image, over the size limit): quarantine, move on.
    Quarantine {
        reason: String,
        evidence: Box<DecisionRecord>,
    },
}

impl OutboxRelay {
    pub(crate) fn plan<'a>(&self, record: &'a EventRecord) -> Plan<'a> {
        let image = &record.change.new_image;
        let applied_by_this_write = matches!(record.event_name.as_str(), "INSERT" | "MODIFY")
            && image.contains_key(OUTBOX)
            && !is_reversal_mark(image)
            && !is_later_write_of_an_api_record(record);
        if !applied_by_this_write {
            return Plan::Skip;
        }
        let Some(sequence_number) = record.change.sequence_number.as_deref() else {
            return Plan::Quarantine {
                reason: "stream record has no sequence number".into(),
                evidence: Box::new(decisions::evidence(
                    record,
                    outbox_events(image).ok().as_deref(),
                )),
            };
        };
        let events = match outbox_events(image) {
            Ok(events) if !events.is_empty() => events,
            Ok(_) => return Plan::Skip,
            Err(e) => {
                return Plan::Quarantine {
                    reason: format!("undecodable outbox events: {e}"),
                    evidence: Box::new(decisions::evidence(record, None)),
                };
            }
        };
        let evidence = Box::new(decisions::evidence(record, Some(&events)));
        let trace_header = match image.get(TRACE_HEADER) {
            Some(serde_dynamo::AttributeValue::S(header)) => Some(header.clone()),
            _ => None,
        };
        let now = DateTime::from(std::time::SystemTime::now());
        let mut entries = Vec::with_capacity(events.len());
        let mut size = 0;
        let mut enqueue = None;
        for event in events {
            if let Err(refused) = crate::admission::admit(image, &event) {
                return Plan::Quarantine {
                    reason: format!("not publishable from this record: {refused}"),
                    evidence,
                };
            }
            if event.event_id().is_empty() {
                return Plan::Quarantine {
                    reason: format!(
                        "a {} event without an eventId: consumers could not deduplicate it",
                        event.detail_type
                    ),
                    evidence,
                };
            }
            let detail = event.detail.to_string();
            // An API payment goes to the servicing queue only: the bus carries domain events
            // alone, in one envelope (account-state publishes the payment's `PaymentApplied`).
            if (event.source.as_str(), event.detail_type.as_str()) == API_PAYMENTS {
                let refused = |reason: String| Plan::Quarantine {
                    reason,
                    evidence: evidence.clone(),
                };
                if self.servicing_queue.is_none() {
                    return refused(format!(
                        "API payment {}: no servicing queue is configured to send it to",
                        event.event_id()
                    ));
                }
                if enqueue.is_some() {
                    return refused(
                        "an idempotency record carries one API payment, this one more".into(),
                    );
                }
                // SQS's message limit (its body alone counts; the trace is a system attribute).
                if detail.len() > MAX_REQUEST_BYTES {
                    return refused(format!(
                        "API payment {} is {} bytes, over the servicing queue's {MAX_REQUEST_BYTES}-byte message limit",
                        event.event_id(),
                        detail.len()
                    ));
                }
                let Some(group) = event.detail["accountId"].as_str().filter(|a| !a.is_empty())
                else {
                    return refused(format!(
                        "API payment {} has no accountId to group it by",
                        event.event_id()
                    ));
                };
                size += detail.len();
                enqueue = Some(Enqueue {
                    body: detail,
                    group: group.to_owned(),
                    deduplication: event.event_id().to_owned(),
                    trace_header: trace_header.clone(),
                });
                continue;
            }
            let time = business_time(&event.detail, now);
            // EventBridge counts Source, DetailType, Detail, 14 bytes for a Time (and
            // Resources, unused here).
            let entry_size = event.source.len()
                + event.detail_type.len()
                + detail.len()
                + time.map_or(0, |_| TIME_BYTES);
            if entry_size > MAX_REQUEST_BYTES {
                return Plan::Quarantine {
                    reason: format!(
                        "outbox event {} is {entry_size} bytes, over EventBridge's {MAX_REQUEST_BYTES}-byte entry limit",
                        event.event_id()
                    ),
                    evidence,
                };
            }
            size += entry_size;
            entries.push(
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.event_bus)
                    .source(event.source)
                    .detail_type(event.detail_type)
                    .detail(detail)
                    .set_time(time)
                    .set_trace_header(trace_header.clone())
                    .build(),
            );
        }
        // A record's events go in one request and checkpoint together: more than one request
        // takes could never be sent.
        if entries.len() > crate::MAX_ENTRIES_PER_REQUEST {
            return Plan::Quarantine {
                reason: format!(
                    "a record's {} events are more than one PutEvents request takes ({})",
                    entries.len(),
                    crate::MAX_ENTRIES_PER_REQUEST
                ),
                evidence,
            };
        }
        if size > MAX_REQUEST_BYTES {
            return Plan::Quarantine {
                reason: format!(
                    "a record's events are {size} bytes, over EventBridge's {MAX_REQUEST_BYTES}-byte request limit"
                ),
                evidence,
            };
        }
        Plan::Publish(Box::new(Publishable {
            record,
            sequence_number,
            entries,
            size,
            enqueue,
            evidence: *evidence,
        }))
    }
}

/// A record's `outbox` events.
pub(crate) fn outbox_events(
    image: &HashMap<String, serde_dynamo::AttributeValue>,
) -> Result<Vec<OutboxEvent>, StoreError> {
    match image.get(OUTBOX) {
        Some(serde_dynamo::AttributeValue::S(json)) => OutboxEvent::decode(Some(json)),
        _ => Err(StoreError::Corrupt("outbox is not a string".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn business_time_is_the_facts_occurrence_with_its_offset_applied() {
        let now = DateTime::from_secs(1_800_000_000);
        let at = |detail: serde_json::Value| business_time(&detail, now).map(|t| t.secs());
        assert_eq!(
            at(serde_json::json!({"occurredAt": "2026-10-21T11:30:00+02:00"})),
            Some(1_792_575_000)
        );
        assert_eq!(
            at(
                serde_json::json!({"occurredAt": "2026-10-21T09:30:00.250Z", "eventTime": "2026-01-01T00:00:00Z"})
            ),
            Some(1_792_575_000)
        );
        assert_eq!(
            at(serde_json::json!({"eventTime": "2026-10-21T09:30:00Z"})),
            Some(1_792_575_000),
            "a fact without occurredAt: its event time"
        );
        assert_eq!(
            at(serde_json::json!({"occurredAt": "2099-01-01T00:00:00Z"})),
            Some(1_800_000_000),
            "a producer's clock ahead: the bus's now"
        );
        assert_eq!(
            at(serde_json::json!({"occurredAt": "yesterday"})),
            None,
            "unreadable: EventBridge stamps it"
        );
    }
}
