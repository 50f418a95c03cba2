//! The outbox relay: DynamoDB stream records in, EventBridge `PutEvents` out.
//!
//! Only outbox INSERTs matter (the event source mapping filters on them too, but the code does
//! not rely on it). Records are published in stream order in chunks of at most 10 entries and
//! 256 KB. Every entry of every response is checked; the first record whose entry failed is
//! returned as the batch item failure, so Lambda resumes there and nothing after a failure is
//! skipped. Later records of the batch may have been published already and are published again
//! on the retry: duplicates are accepted by design, consumers deduplicate on `eventId`.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde::Deserialize;
use servicing_store::{QuarantineEntry, ServicingStore};

/// EventBridge's limit for one entry and for one `PutEvents` request.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
pub const MAX_ENTRIES_PER_REQUEST: usize = 10;
pub const CONSUMER: &str = "outbox-relay";

/// The outbox item fields the relay needs (see `infra/schema.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutboxItem {
    item_type: String,
    event_id: String,
    source: String,
    detail_type: String,
    detail: String,
}

/// A record that will be published.
#[derive(Debug)]
struct Publishable<'a> {
    sequence_number: &'a str,
    entry: PutEventsRequestEntry,
    size: usize,
}

/// What to do with one stream record.
enum Plan<'a> {
    /// Not an outbox insert: nothing to do.
    Skip,
    Publish(Publishable<'a>),
    /// Can never be published (undecodable image, over the size limit): quarantine, move on.
    Quarantine {
        reason: String,
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
        }
    }

    pub async fn handle(&self, event: Event) -> DynamoDbEventResponse {
        let report = self.relay(&event.records).await;
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
                    if chunk.len() == MAX_ENTRIES_PER_REQUEST
                        || chunk_bytes + item.size > MAX_REQUEST_BYTES
                    {
                        if let Err(failed_at) = self.flush(&mut chunk, &mut report).await {
                            return self.fail_from(report, records, failed_at);
                        }
                        chunk_bytes = 0;
                    }
                    chunk_bytes += item.size;
                    chunk.push(item);
                }
                Plan::Quarantine { reason } => {
                    // Publish what precedes it first, or a failed quarantine write would
                    // checkpoint past unpublished records.
                    if let Err(failed_at) = self.flush(&mut chunk, &mut report).await {
                        return self.fail_from(report, records, failed_at);
                    }
                    chunk_bytes = 0;
                    if self.quarantine(record, &reason).await {
                        report.quarantined += 1;
                    } else {
                        return self.fail_from(
                            report,
                            records,
                            position_sequence(records, position),
                        );
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
        if record.event_name != "INSERT" {
            return Plan::Skip;
        }
        let is_outbox = matches!(
            record.change.new_image.get("itemType"),
            Some(serde_dynamo::AttributeValue::S(t)) if t == "OUTBOX"
        );
        if !is_outbox {
            return Plan::Skip;
        }
        let Some(sequence_number) = record.change.sequence_number.as_deref() else {
            return Plan::Quarantine {
                reason: "stream record has no sequence number".into(),
            };
        };
        let item: OutboxItem = match serde_dynamo::from_item(record.change.new_image.clone()) {
            Ok(item) => item,
            Err(e) => {
                return Plan::Quarantine {
                    reason: format!("undecodable outbox image: {e}"),
                };
            }
        };
        debug_assert_eq!(item.item_type, "OUTBOX");
        // EventBridge counts Source, DetailType, Detail (and Time/Resources, unused here).
        let size = item.source.len() + item.detail_type.len() + item.detail.len();
        if size > MAX_REQUEST_BYTES {
            return Plan::Quarantine {
                reason: format!(
                    "outbox event {} is {size} bytes, over EventBridge's {MAX_REQUEST_BYTES}-byte entry limit",
                    item.event_id
                ),
            };
        }
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.event_bus)
            .source(item.source)
            .detail_type(item.detail_type)
            .detail(item.detail)
            .build();
        Plan::Publish(Publishable {
            sequence_number,
            entry,
            size,
        })
    }

    /// Sends the chunk; on any failure returns the sequence number of the first failed record.
    async fn flush(
        &self,
        chunk: &mut Vec<Publishable<'_>>,
        report: &mut RelayReport,
    ) -> Result<(), String> {
        if chunk.is_empty() {
            return Ok(());
        }
        let sent = std::mem::take(chunk);
        let result = self
            .events
            .put_events()
            .set_entries(Some(sent.iter().map(|p| p.entry.clone()).collect()))
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(e) => {
                tracing::warn!(error = %aws_sdk_eventbridge::error::DisplayErrorContext(&e), "PutEvents failed");
                return Err(sent[0].sequence_number.to_owned());
            }
        };
        let results = output.entries();
        // Entries answer in request order; a short answer is treated as failed from its end.
        let first_failed = (0..sent.len()).find(|&i| {
            results
                .get(i)
                .is_none_or(|r| r.error_code().is_some() || r.event_id().is_none())
        });
        if output.failed_entry_count() > 0 || first_failed.is_some() {
            let i = first_failed.unwrap_or(0);
            let code = results
                .get(i)
                .and_then(|r| r.error_code())
                .unwrap_or("missing result");
            tracing::warn!(
                failed = output.failed_entry_count(),
                first_code = code,
                "PutEvents rejected entries"
            );
            report.published += i as u64;
            return Err(sent[i].sequence_number.to_owned());
        }
        report.published += sent.len() as u64;
        Ok(())
    }

    async fn quarantine(&self, record: &EventRecord, reason: &str) -> bool {
        let raw = serde_json::to_string(&record.change.new_image).unwrap_or_default();
        let entry = QuarantineEntry::new(&record.event_id, &raw, "unpublishable", reason);
        match self.store.quarantine(&entry).await {
            Ok(()) => {
                tracing::error!(reason, "outbox record quarantined");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "quarantine write failed");
                false
            }
        }
    }

    /// Everything from the failed record on is unconfirmed; the checkpoint is that record.
    fn fail_from(
        &self,
        mut report: RelayReport,
        records: &[EventRecord],
        sequence: String,
    ) -> RelayReport {
        let position = records
            .iter()
            .position(|r| r.change.sequence_number.as_deref() == Some(&sequence))
            .unwrap_or(0);
        report.failed = (records.len() - position) as u64;
        report.checkpoint = Some(sequence);
        report
    }
}

fn position_sequence(records: &[EventRecord], position: usize) -> String {
    records[position]
        .change
        .sequence_number
        .clone()
        .unwrap_or_default()
}
