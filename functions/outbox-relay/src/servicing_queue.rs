//! The FIFO servicing queue: an API payment's message, its `SendMessageBatch`, and how far the
//! sends of a chunk got; an entry SQS refuses as the sender's fault is quarantined here.
//! Separate from `PutEvents`: another service, with its own answer and failure rules.

use std::collections::HashMap;

use crate::OutboxRelay;
use crate::failures::SQS_REFUSED;
use crate::plan::Publishable;

/// A message for the servicing queue.
#[derive(Debug, Clone)]
pub(crate) struct Enqueue {
    pub(crate) body: String,
    pub(crate) group: String,
    pub(crate) deduplication: String,
    pub(crate) trace_header: Option<String>,
}

/// How far the servicing-queue sends of a chunk got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Enqueued {
    /// Records (from the chunk's start) done with: sent, or refused for good and quarantined.
    pub(crate) done: usize,
    /// Of those, the quarantined ones (by position in the chunk), with the reason.
    pub(crate) quarantined: Vec<(usize, String)>,
    /// Why the sends stopped short of the chunk's end, when they did.
    pub(crate) stopped: Option<String>,
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

impl OutboxRelay {
    /// Sends the API payments of `published` to the servicing queue, in order; returns how many
    /// records (from the start) are done with: all, or up to the first send that failed for a
    /// reason a retry may cure. An entry refused as the sender's fault before it is quarantined.
    pub(crate) async fn enqueue(&self, published: &[Publishable<'_>]) -> Enqueued {
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
}
