//! The outbox relay: DynamoDB stream records in, EventBridge `PutEvents` out.
//!
//! A fact's record (or an API idempotency record) carries the events its write publishes in its
//! `outbox` attribute; only the write that applied the fact matters: an INSERT, or a MODIFY by
//! the put that applied a parked fact or renewed an expired claim. The one later write to a
//! record with events — a reversal's mark on its payment's allocation — is skipped (the event
//! source mapping filters on `outbox` too, but the code does not rely on it). A record's events
//! are published together, in stream order, in chunks of at most 10 entries and 256 KB. Every
//! entry of every response is checked; the first record with a failed entry is returned as the
//! batch item failure, so Lambda resumes there and nothing after a failure is skipped. Later
//! records of the batch may have been published already and are published again on the retry:
//! duplicates are accepted by design, consumers deduplicate on `eventId`.
//!
//! API-originated payments (`servicing.payments-api` / `PaymentSettled`) are also put on the
//! FIFO servicing queue, as the contract event itself, with `MessageGroupId = accountId` (each
//! account in order, no account behind another's) and `MessageDeduplicationId = eventId` (a FIFO
//! queue refuses a send without one; an EventBridge rule target can set neither per event).
//! That send is part of the record's publication: a failure checkpoints at the record, except
//! an entry SQS refuses as the sender's fault (`SenderFault`: invalid characters, too large),
//! which no retry can send: it is quarantined (`sqs_refused`, with SQS's code and message) and
//! the relay moves on, instead of holding the shard until Lambda drops the whole batch.
//!
//! Every stream record that carries events leaves one decision record (consumer
//! `outbox-relay`, `messageId` = the stream record's `eventID`): `published`, `sent` (an API
//! payment also put on the servicing queue), `quarantined`, or `retried` (the checkpoint and
//! every record after it). Skipped records leave none. They are built in `decisions`.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use servicing_store::{OutboxEvent, QuarantineEntry, ServicingStore, StoreError};
use servicing_telemetry::DecisionRecord;

mod config;
mod decisions;
pub use config::Config;
pub use servicing_settings::{ConfigError, FromSettings};

/// EventBridge's limit for one entry and for one `PutEvents` request.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
pub const MAX_ENTRIES_PER_REQUEST: usize = 10;
pub const CONSUMER: &str = "outbox-relay";

use servicing_store::items::{OUTBOX, REVERSED_BY, TRACE_HEADER};

/// A reversal's mark on its payment's record (`reversedBy`): a later write to an applied
/// record, whose events were published by the write that applied it.
fn is_reversal_mark(image: &HashMap<String, serde_dynamo::AttributeValue>) -> bool {
    image.contains_key(REVERSED_BY)
}

/// The outbox events account-state must apply (the API's accepted payments).
const API_PAYMENTS: (&str, &str) = ("servicing.payments-api", "PaymentSettled");

/// A message for the servicing queue.
#[derive(Debug, Clone)]
struct Enqueue {
    body: String,
    group: String,
    deduplication: String,
    trace_header: Option<String>,
}

/// A record whose events will be published.
#[derive(Debug)]
struct Publishable<'a> {
    record: &'a EventRecord,
    sequence_number: &'a str,
    entries: Vec<PutEventsRequestEntry>,
    size: usize,
    enqueue: Option<Enqueue>,
    /// Its decision record, before the verdict.
    evidence: DecisionRecord,
}

/// How far the servicing-queue sends of a chunk got.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Enqueued {
    /// Records (from the chunk's start) done with: sent, or refused for good and quarantined.
    done: usize,
    /// Of those, the quarantined ones (by position in the chunk), with the reason.
    quarantined: Vec<(usize, String)>,
    /// Why the sends stopped short of the chunk's end, when they did.
    stopped: Option<String>,
}

impl Enqueued {
    fn all(published: &[Publishable<'_>]) -> Self {
        Self {
            done: published.len(),
            quarantined: Vec::new(),
            stopped: None,
        }
    }
}

/// Quarantine code of a record that cannot be published.
const UNPUBLISHABLE: &str = "unpublishable";
/// Quarantine code of an API payment the servicing queue refused as the sender's fault.
const SQS_REFUSED: &str = "sqs_refused";

/// The first record of a batch that was not published, by its sequence number: the batch's
/// checkpoint (Lambda retries from it), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FailedAt {
    sequence: String,
    reason: String,
}

impl FailedAt {
    fn new(sequence: &str, reason: impl Into<String>) -> Self {
        Self {
            sequence: sequence.to_owned(),
            reason: reason.into(),
        }
    }
}

/// What to do with one stream record.
enum Plan<'a> {
    /// Not an outbox insert: nothing to do.
    Skip,
    Publish(Box<Publishable<'a>>),
    /// Can never be published (undecodable image, over the size limit): quarantine, move on.
    Quarantine {
        reason: String,
        evidence: Box<DecisionRecord>,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    pub published: u64,
    pub skipped: u64,
    pub quarantined: u64,
    /// Records not confirmed (the failed one and everything after it).
    pub failed: u64,
    /// Sequence number of the first record that failed: the checkpoint.
    pub checkpoint: Option<String>,
    /// One decision record per record that carries events, in stream order (none for the
    /// skipped ones).
    pub decisions: Vec<DecisionRecord>,
}

impl RelayReport {
    pub fn response(&self) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        if let Some(sequence) = &self.checkpoint {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence.clone());
            response.batch_item_failures.push(failure);
        }
        response
    }

    pub fn metrics(&self) -> [(&'static str, u64); 4] {
        [
            ("RelayPublished", self.published),
            ("RelaySkipped", self.skipped),
            ("RelayQuarantined", self.quarantined),
            ("RelayFailed", self.failed),
        ]
    }
}

#[derive(Debug, Clone)]
pub struct OutboxRelay {
    events: aws_sdk_eventbridge::Client,
    store: ServicingStore,
    event_bus: String,
    /// Where API payments go to be applied (the FIFO servicing queue), when configured.
    servicing_queue: Option<(aws_sdk_sqs::Client, String)>,
}

impl OutboxRelay {
    /// `store` writes the quarantine items (its consumer name should be [`CONSUMER`]).
    pub fn new(
        events: aws_sdk_eventbridge::Client,
        store: ServicingStore,
        event_bus: impl Into<String>,
    ) -> Self {
        Self {
            events,
            store,
            event_bus: event_bus.into(),
            servicing_queue: None,
        }
    }

    /// Also puts API payments on the FIFO servicing queue at `queue_url`.
    pub fn with_servicing_queue(
        mut self,
        sqs: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
    ) -> Self {
        self.servicing_queue = Some((sqs, queue_url.into()));
        self
    }

    /// The Lambda entry point: relays, prints each decision record (stamped with the X-Ray
    /// trace of the invocation) and the batch's EMF line.
    pub async fn handle(&self, event: Event) -> DynamoDbEventResponse {
        let mut report = self.relay(&event.records).await;
        decisions::emit(&mut report.decisions);
        servicing_telemetry::emit(CONSUMER, &report.metrics());
        report.response()
    }

    pub async fn relay(&self, records: &[EventRecord]) -> RelayReport {
        let mut report = RelayReport::default();
        let mut chunk: Vec<Publishable<'_>> = Vec::new();
        let mut chunk_bytes = 0;

        for (position, record) in records.iter().enumerate() {
            match self.plan(record) {
                Plan::Skip => report.skipped += 1,
                Plan::Publish(item) => {
                    let entries: usize = chunk.iter().map(|p| p.entries.len()).sum();
                    if entries + item.entries.len() > MAX_ENTRIES_PER_REQUEST
                        || chunk_bytes + item.size > MAX_REQUEST_BYTES
                    {
                        if let Err(failed_at) = self.flush(&mut chunk, &mut report).await {
                            return self.fail_from(report, records, failed_at);
                        }
                        chunk_bytes = 0;
                    }
                    chunk_bytes += item.size;
                    chunk.push(*item);
                }
                Plan::Quarantine { reason, evidence } => {
                    // Publish what precedes it first, or a failed quarantine write would
                    // checkpoint past unpublished records.
                    if let Err(failed_at) = self.flush(&mut chunk, &mut report).await {
                        return self.fail_from(report, records, failed_at);
                    }
                    chunk_bytes = 0;
                    match self.quarantine(record, UNPUBLISHABLE, &reason).await {
                        Ok(()) => {
                            report.quarantined += 1;
                            let decision = decisions::quarantined(*evidence, UNPUBLISHABLE, reason);
                            report.decisions.push(decision);
                        }
                        Err(failure) => {
                            return self.fail_from(
                                report,
                                records,
                                FailedAt::new(&position_sequence(records, position), failure),
                            );
                        }
                    }
                }
            }
        }
        if let Err(failed_at) = self.flush(&mut chunk, &mut report).await {
            return self.fail_from(report, records, failed_at);
        }
        report
    }

    fn plan<'a>(&self, record: &'a EventRecord) -> Plan<'a> {
        let image = &record.change.new_image;
        let applied_by_this_write = matches!(record.event_name.as_str(), "INSERT" | "MODIFY")
            && image.contains_key(OUTBOX)
            && !is_reversal_mark(image);
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
        let mut entries = Vec::with_capacity(events.len());
        let mut size = 0;
        let mut enqueue = None;
        for event in events {
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
            // EventBridge counts Source, DetailType, Detail (and Time/Resources, unused here).
            let entry_size = event.source.len() + event.detail_type.len() + detail.len();
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
            if self.servicing_queue.is_some()
                && (event.source.as_str(), event.detail_type.as_str()) == API_PAYMENTS
            {
                let Some(group) = event.detail["accountId"].as_str().filter(|a| !a.is_empty())
                else {
                    return Plan::Quarantine {
                        reason: format!(
                            "API payment {} has no accountId to group it by",
                            event.event_id()
                        ),
                        evidence,
                    };
                };
                enqueue = Some(Enqueue {
                    body: detail.clone(),
                    group: group.to_owned(),
                    deduplication: event.event_id().to_owned(),
                    trace_header: trace_header.clone(),
                });
            }
            entries.push(
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.event_bus)
                    .source(event.source)
                    .detail_type(event.detail_type)
                    .detail(detail)
                    .set_trace_header(trace_header.clone())
                    .build(),
            );
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

    /// Sends the chunk; on any failure, the first record not published.
    async fn flush(
        &self,
        chunk: &mut Vec<Publishable<'_>>,
        report: &mut RelayReport,
    ) -> Result<(), FailedAt> {
        if chunk.is_empty() {
            return Ok(());
        }
        let sent = std::mem::take(chunk);
        let result = self
            .events
            .put_events()
            .set_entries(Some(
                sent.iter()
                    .flat_map(|p| p.entries.iter().cloned())
                    .collect(),
            ))
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(e) => {
                let error = aws_sdk_eventbridge::error::DisplayErrorContext(&e).to_string();
                tracing::warn!(error, "PutEvents failed");
                return Err(FailedAt::new(
                    sent[0].sequence_number,
                    format!("PutEvents failed: {error}"),
                ));
            }
        };
        let results = output.entries();
        // Entries answer in request order; a short answer is treated as failed from its end.
        let total: usize = sent.iter().map(|p| p.entries.len()).sum();
        let first_failed_entry = (0..total).find(|&i| {
            results
                .get(i)
                .is_none_or(|r| r.error_code().is_some() || r.event_id().is_none())
        });
        if output.failed_entry_count() > 0 || first_failed_entry.is_some() {
            let entry = first_failed_entry.unwrap_or(0);
            // The record that entry belongs to: every record before it was published whole.
            let mut i = 0;
            let mut seen = 0;
            while i < sent.len() && seen + sent[i].entries.len() <= entry {
                seen += sent[i].entries.len();
                i += 1;
            }
            let i = i.min(sent.len() - 1);
            let code = results
                .get(entry)
                .and_then(|r| r.error_code())
                .unwrap_or("missing result");
            tracing::warn!(
                failed = output.failed_entry_count(),
                first_code = code,
                "PutEvents rejected entries"
            );
            // What published before the failure still goes to the queue; then checkpoint.
            let enqueued = self.enqueue(&sent[..i]).await;
            enqueued.settle(&sent, report);
            let reason = enqueued.stopped.unwrap_or_else(|| {
                format!("EventBridge did not accept event {entry} of the request: {code}")
            });
            return Err(FailedAt::new(sent[enqueued.done].sequence_number, reason));
        }
        let enqueued = self.enqueue(&sent).await;
        enqueued.settle(&sent, report);
        if enqueued.done < sent.len() {
            let reason = enqueued.stopped.unwrap_or_default();
            return Err(FailedAt::new(sent[enqueued.done].sequence_number, reason));
        }
        Ok(())
    }

    /// Sends the API payments of `published` to the servicing queue, in order; returns how many
    /// records (from the start) are done with: all, or up to the first send that failed for a
    /// reason a retry may cure. An entry refused as the sender's fault before it is quarantined.
    async fn enqueue(&self, published: &[Publishable<'_>]) -> Enqueued {
        let all = Enqueued::all(published);
        let Some((sqs, queue_url)) = &self.servicing_queue else {
            return all;
        };
        let wanted: Vec<(usize, &Enqueue)> = published
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.enqueue.as_ref().map(|e| (i, e)))
            .collect();
        if wanted.is_empty() {
            return all;
        }
        let entries: Result<Vec<_>, _> = wanted
            .iter()
            .map(|(i, e)| {
                // The trace continues in account-state (SQS's AWSTraceHeader system attribute).
                let trace = e
                    .trace_header
                    .as_ref()
                    .map(|header| {
                        aws_sdk_sqs::types::MessageSystemAttributeValue::builder()
                            .data_type("String")
                            .string_value(header)
                            .build()
                    })
                    .transpose()?;
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&e.body)
                    .message_group_id(&e.group)
                    .message_deduplication_id(&e.deduplication)
                    .set_message_system_attributes(trace.map(|value| {
                        HashMap::from([(
                            aws_sdk_sqs::types::MessageSystemAttributeNameForSends::AwsTraceHeader,
                            value,
                        )])
                    }))
                    .build()
            })
            .collect();
        let first = |stopped: String| Enqueued {
            done: wanted[0].0,
            quarantined: Vec::new(),
            stopped: Some(stopped),
        };
        let entries = match entries {
            Ok(entries) => entries,
            Err(e) => return first(format!("cannot build the servicing queue send: {e}")),
        };
        match sqs
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Err(e) => {
                let error = aws_sdk_sqs::error::DisplayErrorContext(&e).to_string();
                tracing::warn!(error, "SendMessageBatch failed");
                first(format!("SendMessageBatch failed: {error}"))
            }
            Ok(output) => {
                let mut failed: Vec<(usize, &aws_sdk_sqs::types::BatchResultErrorEntry)> = output
                    .failed()
                    .iter()
                    .filter_map(|f| f.id().parse::<usize>().ok().map(|i| (i, f)))
                    .filter(|(i, _)| *i < published.len())
                    .collect();
                if failed.is_empty() {
                    return all;
                }
                failed.sort_by_key(|(i, _)| *i);
                tracing::warn!(
                    failed = failed.len(),
                    refused = failed.iter().filter(|(_, f)| f.sender_fault()).count(),
                    "servicing queue refused API payments"
                );
                // A failure on SQS's side may pass on a retry: checkpoint at the first one. An
                // entry refused as the sender's fault never will: quarantined, and passed.
                let transient = failed.iter().find(|(_, f)| !f.sender_fault());
                let retry_from = transient.map_or(published.len(), |(i, _)| *i);
                let stopped = transient.map(|(_, f)| {
                    format!(
                        "the servicing queue did not take the API payment: {}: {}",
                        f.code(),
                        f.message().unwrap_or("no message")
                    )
                });
                let mut quarantined = Vec::new();
                for (i, refused) in failed.iter().filter(|(i, _)| *i < retry_from) {
                    let reason = format!(
                        "the servicing queue refused API payment {} as the sender's fault: {}: {}",
                        published[*i]
                            .enqueue
                            .as_ref()
                            .map_or("", |e| e.deduplication.as_str()),
                        refused.code(),
                        refused.message().unwrap_or("no message"),
                    );
                    if let Err(failure) = self
                        .quarantine(published[*i].record, SQS_REFUSED, &reason)
                        .await
                    {
                        return Enqueued {
                            done: *i,
                            quarantined,
                            stopped: Some(failure),
                        };
                    }
                    quarantined.push((*i, reason));
                }
                Enqueued {
                    done: retry_from,
                    quarantined,
                    stopped,
                }
            }
        }
    }

    /// Writes the quarantine item; on failure, why (the record is then retried).
    async fn quarantine(
        &self,
        record: &EventRecord,
        code: &str,
        reason: &str,
    ) -> Result<(), String> {
        let raw = serde_json::to_string(&record.change.new_image).unwrap_or_default();
        let entry = QuarantineEntry::new(&record.event_id, &raw, code, reason);
        match self.store.quarantine(&entry).await {
            Ok(()) => {
                tracing::error!(reason, "outbox record quarantined");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "quarantine write failed");
                Err(format!("the {code} quarantine write failed: {e}"))
            }
        }
    }

    /// Everything from the failed record on is unconfirmed; the checkpoint is that record. Each
    /// of them that carries events is recorded `retried`: the checkpoint with why it failed, the
    /// ones after it as delivered again from it.
    fn fail_from(
        &self,
        mut report: RelayReport,
        records: &[EventRecord],
        FailedAt { sequence, reason }: FailedAt,
    ) -> RelayReport {
        let position = records
            .iter()
            .position(|r| r.change.sequence_number.as_deref() == Some(&sequence))
            .unwrap_or(0);
        for (offset, record) in records[position..].iter().enumerate() {
            let evidence = match self.plan(record) {
                Plan::Skip => continue,
                Plan::Publish(item) => item.evidence,
                Plan::Quarantine { evidence, .. } => *evidence,
            };
            let why = match offset {
                0 => reason.clone(),
                _ => format!("after the checkpoint {sequence}: delivered again from it"),
            };
            report.decisions.push(decisions::retried(evidence, why));
        }
        report.failed = (records.len() - position) as u64;
        report.checkpoint = Some(sequence);
        report
    }
}

/// A record's `outbox` events.
fn outbox_events(
    image: &HashMap<String, serde_dynamo::AttributeValue>,
) -> Result<Vec<OutboxEvent>, StoreError> {
    match image.get(OUTBOX) {
        Some(serde_dynamo::AttributeValue::S(json)) => OutboxEvent::decode(Some(json)),
        _ => Err(StoreError::Corrupt("outbox is not a string".into())),
    }
}

fn position_sequence(records: &[EventRecord], position: usize) -> String {
    records[position]
        .change
        .sequence_number
        .clone()
        .unwrap_or_default()
}
