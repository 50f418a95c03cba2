//! Guarded replays: sending a fact to the servicing queue again is harmless while its claim
//! lives until the queue has delivered it — it is then a duplicate. A fact is judged by its
//! claim, never by its `eventTime`: without a live claim nobody can tell "never applied" from
//! "applied, and its claim has expired since", and the second would apply twice.

use servicing_domain::{ServicingEvent, SourceRef};

use crate::{account_state_claim, epoch_seconds, failed};

/// SQS keeps a message at most 14 days: a sent fact may be delivered that late.
pub const QUEUE_RETENTION_SECS: i64 = 14 * 86_400;

/// Why a replay was refused, per fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub line: usize,
    pub reason: String,
}

/// What the claims say about sending `source` again now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWindow {
    /// Claimed, and the claim outlives any delivery of the message: a resend is a duplicate.
    Covered,
    /// Claimed, but the claim expires (at this epoch second) before the queue might deliver.
    ExpiresFirst(i64),
    /// No live claim.
    Unclaimed,
}

/// The claim of `source` against the queue's delivery horizon.
pub async fn claim_window(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    source: &SourceRef,
    now: i64,
) -> anyhow::Result<ClaimWindow> {
    let claim = account_state_claim(client, table, source).await?;
    Ok(match claim.map(|c| c.expires_at) {
        Some(expires) if expires > now + QUEUE_RETENTION_SECS => ClaimWindow::Covered,
        Some(expires) if expires > now => ClaimWindow::ExpiresFirst(expires),
        _ => ClaimWindow::Unclaimed,
    })
}

/// Checks every line; returns the refusals (empty: safe to send). A fact is safe when its claim
/// outlives the queue's retention; unclaimed or soon-expiring facts are refused (send them with
/// `--allow-beyond-retention` once you know they were never applied).
pub async fn check(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    lines: &[Vec<u8>],
) -> anyhow::Result<Vec<Refusal>> {
    let now = epoch_seconds();
    let mut refusals = Vec::new();
    for (i, body) in lines.iter().enumerate() {
        // Undecodable lines are harmless: they will be quarantined again.
        let Ok(event) = ServicingEvent::decode(body) else {
            continue;
        };
        let reason = match claim_window(client, table, &event.source, now).await? {
            ClaimWindow::Covered => continue,
            ClaimWindow::ExpiresFirst(at) => format!(
                "{}'s claim expires in {} days, before the queue may deliver it (up to 14): after that a resend would apply it again",
                event.source,
                (at - now) / 86_400
            ),
            ClaimWindow::Unclaimed => format!(
                "{} has no live claim: if it was applied before and its claim expired, replaying it would apply it again",
                event.source
            ),
        };
        refusals.push(Refusal {
            line: i + 1,
            reason,
        });
    }
    Ok(refusals)
}

/// Sends the lines to the FIFO servicing queue (group = account), in order, 10 per request.
pub async fn send(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    lines: &[Vec<u8>],
) -> anyhow::Result<usize> {
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
                .message_deduplication_id(format!("replay-{}-{chunk_no}-{i}", epoch_seconds()))
                .build()?;
            request = request.entries(entry);
        }
        let out = request.send().await.map_err(failed("cannot send"))?;
        if !out.failed().is_empty() {
            return Err(anyhow::anyhow!(
                "{} messages were refused: {:?}",
                out.failed().len(),
                out.failed()
            ));
        }
        sent += chunk.len();
    }
    Ok(sent)
}
