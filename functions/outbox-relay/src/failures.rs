//! When a record will not go. One that can never be published is quarantined (the item keeps
//! its image and why) and the relay moves on; one that may pass on a retry is the batch's
//! checkpoint, and it and every record after it are recorded `retried`. Separate from the
//! publishing, which only says where it stopped.

use aws_lambda_events::event::dynamodb::EventRecord;
use servicing_store::QuarantineEntry;

use crate::plan::Plan;
use crate::{OutboxRelay, RelayReport, decisions};

/// Quarantine code of a record that cannot be published.
pub(crate) const UNPUBLISHABLE: &str = "unpublishable";
/// Quarantine code of an API payment the servicing queue refused as the sender's fault.
pub(crate) const SQS_REFUSED: &str = "sqs_refused";

/// The first record of a batch that was not published, by its sequence number: the batch's
/// checkpoint (Lambda retries from it), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailedAt {
    sequence: String,
    reason: String,
}

impl FailedAt {
    pub(crate) fn new(sequence: &str, reason: impl Into<String>) -> Self {
        Self {
            sequence: sequence.to_owned(),
            reason: reason.into(),
        }
    }
}

impl OutboxRelay {
    /// Writes the quarantine item; on failure, why (the record is then retried).
    pub(crate) async fn quarantine(
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
    pub(crate) fn fail_from(
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

pub(crate) fn position_sequence(records: &[EventRecord], position: usize) -> String {
    records[position]
        .change
        .sequence_number
        .clone()
        .unwrap_or_default()
}
