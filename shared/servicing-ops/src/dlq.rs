//! Dead-letter queues: look at what is there, and move it back to the queue it came from.
//!
//! A redrive re-sends each message's body to its source queue and deletes it from the
//! dead-letter queue only once the send succeeded (a crash in between re-sends it: harmless,
//! every fact is deduplicated by its claim, every action by its `actionId`). To a FIFO queue it
//! goes to the body's account group with a deduplication id of its own (`redrive:<message id>`),
//! so SQS never drops it as a copy of its first send; it interleaves with new messages of that
//! account, which the consumer orders by business rules (parking), not by arrival.

use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};

use crate::failed;
use crate::replay::Addressing;

/// One message as operators see it (the body is shown: dead letters are the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub message_id: String,
    pub receive_count: u32,
    /// Epoch milliseconds of its first send (to the source queue).
    pub sent_at_ms: i64,
    pub group: Option<String>,
    /// Who sent it, when no producer did (its `sentBy` attribute: an operator's redrive or
    /// resend, the reconciler, the daily close).
    pub sent_by: Option<String>,
    pub body: String,
    receipt: String,
}

/// At most `max` messages, each received with a short visibility timeout so another look or a
/// redrive sees them again within `hold_secs`.
async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    max: usize,
    hold_secs: i32,
) -> anyhow::Result<Vec<DeadLetter>> {
    let mut out: Vec<DeadLetter> = Vec::new();
    while out.len() < max {
        let got = sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages((max - out.len()).min(10) as i32)
            .visibility_timeout(hold_secs)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names(servicing_telemetry::SENT_BY)
            .send()
            .await
            .map_err(failed(format!("cannot receive from {queue}")))?;
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let attribute = |name: MessageSystemAttributeName| {
                m.attributes().and_then(|a| a.get(&name)).cloned()
            };
            if out
                .iter()
                .any(|d| Some(&d.message_id) == m.message_id.as_ref())
            {
                continue;
            }
            out.push(DeadLetter {
                message_id: m.message_id.clone().unwrap_or_default(),
                receive_count: attribute(MessageSystemAttributeName::ApproximateReceiveCount)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_default(),
                sent_at_ms: attribute(MessageSystemAttributeName::SentTimestamp)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_default(),
                group: attribute(MessageSystemAttributeName::MessageGroupId),
                sent_by: m
                    .message_attributes()
                    .and_then(|a| a.get(servicing_telemetry::SENT_BY))
                    .and_then(|v| v.string_value())
                    .map(str::to_owned),
                body: m.body.clone().unwrap_or_default(),
                receipt: m.receipt_handle.clone().unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// Up to `max` messages of `queue`, left where they are (visible again in 5 s).
pub async fn peek(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    max: usize,
) -> anyhow::Result<Vec<DeadLetter>> {
    receive(sqs, queue, max, 5).await
}

/// What a redrive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redrive {
    pub moved: Vec<String>,
    /// `(message id, why)`: left in the dead-letter queue.
    pub refused: Vec<(String, String)>,
}

/// Moves up to `max` messages from `dlq` to `to` (a `.fifo` URL is addressed as above), marked
/// as sent by `sent_by` (the operator).
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    dlq: &str,
    to: &str,
    max: usize,
    sent_by: &str,
) -> anyhow::Result<Redrive> {
    let fifo = to.ends_with(".fifo");
    let letters = receive(sqs, dlq, max, 60).await?;
    let mut done = Redrive::default();
    for chunk in letters.chunks(10) {
        let mut request = sqs.send_message_batch().queue_url(to);
        for (i, letter) in chunk.iter().enumerate() {
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&letter.body)
                .message_attributes(
                    servicing_telemetry::SENT_BY,
                    crate::replay::sent_by(sent_by)?,
                );
            if fifo {
                let group = letter
                    .group
                    .clone()
                    .unwrap_or_else(|| Addressing::of(&letter.body).group);
                entry = entry
                    .message_group_id(group)
                    .message_deduplication_id(format!("redrive:{}", letter.message_id));
            }
            request = request.entries(entry.build()?);
        }
        let sent = request
            .send()
            .await
            .map_err(failed(format!("cannot send to {to}")))?;
        for failure in sent.failed() {
            let letter = failure
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| chunk.get(i));
            if let Some(letter) = letter {
                done.refused.push((
                    letter.message_id.clone(),
                    failure.message().unwrap_or("refused").to_owned(),
                ));
            }
        }
        for entry in sent.successful() {
            let Some(letter) = entry.id().parse::<usize>().ok().and_then(|i| chunk.get(i)) else {
                continue;
            };
            sqs.delete_message()
                .queue_url(dlq)
                .receipt_handle(&letter.receipt)
                .send()
                .await
                .map_err(failed(format!(
                    "sent {} to {to} but cannot delete it from {dlq} (it will be sent again: harmless)",
                    letter.message_id
                )))?;
            done.moved.push(letter.message_id.clone());
        }
    }
    Ok(done)
}
