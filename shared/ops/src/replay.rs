//! Guarded replays: sending a stream (an export, a DLQ dump) to the servicing queue again is
//! harmless while every fact's claim is alive. A fact whose claim may have expired would apply a
//! second time, so the guard refuses a replay holding facts older than the claim retention that
//! have no live claim.

use servicing_domain::ServicingEvent;

use crate::{account_state_claim, failed, now_epoch_secs, number};

/// Why a replay was refused, per fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub line: usize,
    pub reason: String,
}

/// Checks every line; returns the refusals (empty: safe to send).
pub async fn check(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    lines: &[Vec<u8>],
    retention_secs: i64,
) -> Result<Vec<Refusal>, String> {
    let now = now_epoch_secs();
    let mut refusals = Vec::new();
    for (i, body) in lines.iter().enumerate() {
        // Undecodable lines are harmless: they will be quarantined again.
        let Ok(event) = ServicingEvent::decode(body) else {
            continue;
        };
        let age = now - event.event_time.timestamp();
        if age < retention_secs {
            continue;
        }
        let claim = account_state_claim(client, table, &event.source).await?;
        let live = claim
            .as_ref()
            .and_then(|c| number(c, "expiresAt"))
            .is_some_and(|expires| expires > now);
        if !live {
            refusals.push(Refusal {
                line: i + 1,
                reason: format!(
                    "{} happened {} days ago, beyond the {}-day claim retention, and has no live claim: \
                     if it was applied before, replaying it would apply it again",
                    event.source,
                    age / 86_400,
                    retention_secs / 86_400
                ),
            });
        }
    }
    Ok(refusals)
}

/// Sends the lines to the FIFO servicing queue (group = account), in order, 10 per request.
pub async fn send(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    lines: &[Vec<u8>],
) -> Result<usize, String> {
    let mut sent = 0;
    for (chunk_no, chunk) in lines.chunks(10).enumerate() {
        let mut request = sqs.send_message_batch().queue_url(queue_url);
        for (i, body) in chunk.iter().enumerate() {
            let body = String::from_utf8_lossy(body).into_owned();
            let group = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["accountId"].as_str().map(str::to_owned))
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| "replay".to_owned());
            let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body)
                .message_group_id(group)
                .message_deduplication_id(format!("replay-{}-{chunk_no}-{i}", now_epoch_secs()))
                .build()
                .map_err(|e| e.to_string())?;
            request = request.entries(entry);
        }
        let out = request.send().await.map_err(failed("cannot send"))?;
        if !out.failed().is_empty() {
            return Err(format!(
                "{} messages were refused: {:?}",
                out.failed().len(),
                out.failed()
            ));
        }
        sent += chunk.len();
    }
    Ok(sent)
}
