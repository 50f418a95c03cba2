//! `ledgerctl ledger backfill`: the ledger consumer catches up on what servicing published
//! before it existed (or while it was down past its queue's retention), without touching any
//! other consumer. Locally it reads the published events where they are kept for good — the
//! facts' records (`outbox`) — and runs them through the ledger's own handler, in-process, as
//! its Lambda would; on AWS the same is done by replaying the bus's archive to the ledger's rule
//! only (`docs/ledger.md`). Postings are claimed per event, so a backfill over events already
//! posted live posts nothing twice, and the result equals live consumption.

use aws_lambda_events::event::sqs::SqsMessage;
use ledger_postings::{LedgerPostingsHandler, MessageResult};
use serde_json::json;
use servicing_store::schema::{self, ClaimRecord};

/// What a backfill did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backfilled {
    /// Events read from the records (of the accounts asked for).
    pub events: u64,
    pub posted: u64,
    pub already_posted: u64,
    /// Events that move no money.
    pub ignored: u64,
    pub quarantined: u64,
    /// Left for another run (a transient failure): the backfill does not hold.
    pub failed: u64,
}

impl Backfilled {
    pub fn line(&self) -> String {
        format!(
            "ledger backfill: {} events read, {} posted now, {} already posted, {} move no money, {} quarantined, {} failed (run again)",
            self.events,
            self.posted,
            self.already_posted,
            self.ignored,
            self.quarantined,
            self.failed
        )
    }
}

/// The EventBridge envelope of a published event, as the ledger's queue delivers it.
fn envelope(event: &servicing_store::OutboxEvent) -> String {
    json!({"source": event.source, "detail-type": event.detail_type, "detail": event.detail})
        .to_string()
}

/// Every event the applied facts' records published (of `accounts`, or all), in the order they
/// were applied. One scan of the facts' records: a one-off, like any backfill.
pub async fn published_events(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    accounts: &[String],
) -> anyhow::Result<Vec<servicing_store::OutboxEvent>> {
    let mut found = servicing_ops::scan_types(client, table, &[ClaimRecord::ITEM_TYPE]).await?;
    let mut records: Vec<ClaimRecord> = Vec::new();
    for item in found.remove(ClaimRecord::ITEM_TYPE).unwrap_or_default() {
        let record: ClaimRecord = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("a fact's record does not decode: {e}"))?;
        if record.consumer == servicing_store::APPLIER
            && record.verdict == "APPLIED"
            && (accounts.is_empty() || accounts.contains(&record.account_id))
        {
            records.push(record);
        }
    }
    records.sort_by_key(|r| (r.claimed_at, r.source()));
    let mut events = Vec::new();
    for record in records {
        events.extend(record.events().map_err(|e| {
            anyhow::anyhow!("the events of {} do not decode: {e}", record.source())
        })?);
    }
    Ok(events)
}

/// Runs `events` through the ledger's handler, 10 per batch (an SQS batch); with `dry_run`,
/// counts them only.
pub async fn backfill(
    handler: &LedgerPostingsHandler,
    events: &[servicing_store::OutboxEvent],
    dry_run: bool,
) -> Backfilled {
    let mut done = Backfilled {
        events: events.len() as u64,
        ..Backfilled::default()
    };
    if dry_run {
        return done;
    }
    for chunk in events.chunks(10) {
        let messages: Vec<SqsMessage> = chunk
            .iter()
            .map(|event| {
                let mut message = SqsMessage::default();
                message.message_id = Some(format!("backfill-{}", event.event_id()));
                message.body = Some(envelope(event));
                message
            })
            .collect();
        for (_, result) in handler.process_batch(&messages).await.results {
            match result {
                MessageResult::Posted { .. } => done.posted += 1,
                MessageResult::Duplicate => done.already_posted += 1,
                MessageResult::Ignored => done.ignored += 1,
                MessageResult::Quarantined { .. } => done.quarantined += 1,
                MessageResult::Retry { .. } => done.failed += 1,
            }
        }
    }
    done
}
