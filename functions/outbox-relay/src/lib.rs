//! The outbox relay: DynamoDB stream records in, EventBridge `PutEvents` out.
//!
//! A fact's record (or an API idempotency record) carries the events its write publishes in its
//! `outbox` attribute; only the write that applied the fact matters: an INSERT, or a MODIFY by
//! the put that applied a parked fact or renewed an expired claim. The later writes to a record
//! with events — a reversal's mark on its payment's allocation, the reconciler's confirmation
//! that an accepted API payment applied — are skipped (the event
//! source mapping filters on `outbox` too, but the code does not rely on it). A record's events
//! are published together, in stream order, in chunks of at most 10 entries and 256 KB. Every
//! entry of every response is checked; the first record with a failed entry is returned as the
//! batch item failure, so Lambda resumes there and nothing after a failure is skipped. Later
//! records of the batch may have been published already and are published again on the retry:
//! duplicates are accepted by design, consumers deduplicate on `eventId`.
//!
//! API-originated payments (an outbox `servicing.payments-api` / `PaymentSettled`) go to the
//! FIFO servicing queue alone, as the contract event itself — the bus carries domain events
//! only, in one envelope (account-state publishes the payment's `PaymentApplied`) — with
//! `MessageGroupId = accountId` (each account in order, no account behind another's) and
//! `MessageDeduplicationId = eventId` (a FIFO queue refuses a send without one; an EventBridge
//! rule target can set neither per event).
//! That send is part of the record's publication: a failure checkpoints at the record, except
//! an entry SQS refuses as the sender's fault (`SenderFault`: invalid characters, too large),
//! which no retry can send: it is quarantined (`sqs_refused`, with SQS's code and message) and
//! the relay moves on, instead of holding the shard until Lambda drops the whole batch.
//!
//! Before publishing, the batch's facts' records (every verdict, events or none: the event
//! source mapping passes them all) are listed in the record log (`servicing_store::record_log`)
//! by the hour they were claimed and the business date of their money events, and the ledger's
//! journal entries by their key (an entry changed or removed by hand by its account alone, to
//! be read whole) and sub-ledgers by their account, the hour written and their cash's date:
//! what the daily reconciliation reads instead of the table.
//!
//! Every stream record that carries events leaves one decision record (consumer
//! `outbox-relay`, `messageId` = the stream record's `eventID`): `published`, `sent` (an API
//! payment put on the servicing queue), `quarantined`, or `retried` (the checkpoint and
//! every record after it). Skipped records leave none. They are built in `decisions`.
//!
//! Here the handler and its batch loop. What to do with one record is planned in `plan`; a chunk
//! is published in `publish`, its API payments sent in `servicing_queue`; a record that will not
//! go is quarantined or checkpointed at in `failures`.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use servicing_store::ServicingStore;
use servicing_store::record_log::RecordLog;
use servicing_telemetry::DecisionRecord;

mod admission;
mod config;
mod decisions;
mod failures;
mod plan;
mod publish;
mod servicing_queue;
pub use admission::SOURCES;
pub use config::Config;
pub use servicing_settings::{ConfigError, FromSettings};

use failures::{FailedAt, UNPUBLISHABLE, position_sequence};
use plan::{Plan, Publishable};

/// EventBridge's limit for one entry and for one `PutEvents` request.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
pub const MAX_ENTRIES_PER_REQUEST: usize = 10;
pub const CONSUMER: &str = "outbox-relay";

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

    /// Sends API payments to the FIFO servicing queue at `queue_url` (without one, they are
    /// quarantined: they have nowhere else to go).
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
        if let Err(failed_at) = self.log_records(records).await {
            return self.fail_from(report, records, failed_at);
        }
        let mut chunk: Vec<Publishable<'_>> = Vec::new();
        let mut chunk_bytes = 0;

        for (position, record) in records.iter().enumerate() {
            match self.plan(record) {
                Plan::Skip => report.skipped += 1,
                Plan::Publish(item) => {
                    let slots: usize = chunk.iter().map(Publishable::slots).sum();
                    if slots + item.slots() > MAX_ENTRIES_PER_REQUEST
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

    /// Lists the batch's facts' records and ledger writes in the record log before anything is
    /// published, so a failure checkpoints at the batch's first record: the batch comes again
    /// whole, nothing of it published yet.
    async fn log_records(&self, records: &[EventRecord]) -> Result<(), FailedAt> {
        let mut log = RecordLog::default();
        for record in records {
            log.add_change(
                &record.event_name,
                &record.change.keys,
                &record.change.new_image,
                record.change.approximate_creation_date_time.timestamp(),
            );
        }
        let Some(first) = records.first().filter(|_| !log.is_empty()) else {
            return Ok(());
        };
        self.store
            .write_record_log(&log, &first.event_id)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "record log write failed");
                FailedAt::new(
                    &position_sequence(records, 0),
                    format!("the record log could not be written: {e}"),
                )
            })
    }
}
