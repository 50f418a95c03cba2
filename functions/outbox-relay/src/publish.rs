//! Publishing a chunk of records: one `PutEvents` request of its domain events (none when the
//! chunk holds API payments alone), every entry of its answer checked, then the servicing-queue
//! sends of its API payments. It answers where the chunk stopped; the batch loop checkpoints
//! there.

use crate::failures::FailedAt;
use crate::plan::Publishable;
use crate::{OutboxRelay, RelayReport};

impl OutboxRelay {
    /// Sends the chunk; on any failure, the first record not published.
    pub(crate) async fn flush(
        &self,
        chunk: &mut Vec<Publishable<'_>>,
        report: &mut RelayReport,
    ) -> Result<(), FailedAt> {
        if chunk.is_empty() {
            return Ok(());
        }
        let sent = std::mem::take(chunk);
        if sent.iter().any(|p| !p.entries.is_empty()) {
            self.put_events(&sent, report).await?;
        }
        let enqueued = self.enqueue(&sent).await;
        enqueued.settle(&sent, report);
        if enqueued.done < sent.len() {
            let reason = enqueued.stopped.unwrap_or_default();
            return Err(FailedAt::new(sent[enqueued.done].sequence_number, reason));
        }
        Ok(())
    }

    /// The chunk's `PutEvents`; on a failed entry, what was published before its record still
    /// goes to the queue, then the first record not done with is the checkpoint.
    async fn put_events(
        &self,
        sent: &[Publishable<'_>],
        report: &mut RelayReport,
    ) -> Result<(), FailedAt> {
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
            enqueued.settle(sent, report);
            let reason = enqueued.stopped.unwrap_or_else(|| {
                format!("EventBridge did not accept event {entry} of the request: {code}")
            });
            return Err(FailedAt::new(sent[enqueued.done].sequence_number, reason));
        }
        Ok(())
    }
}
