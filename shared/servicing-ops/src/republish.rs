//! Republishing after the relay gave up: the stream keeps a record 24 hours, the relay retries
//! a batch `RelayMaximumRetryAttempts` times; a batch it gave up on (its metadata in the relay's
//! failure queue) is gone from the stream. The events are still on the facts' records: these
//! are the records that carry events, written in a window, as the stream records the relay
//! would have read (the relay publishes them again — harmless: every consumer deduplicates on
//! `eventId`, account-state on the API payment's identity).

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use servicing_store::items::{OUTBOX, REVERSED_BY};
use servicing_store::schema::{ClaimRecord, IdempotencyRecord};

use crate::{Item, scan_types, text};

/// A record carrying events, written in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Carrier {
    pub pk: String,
    pub account_id: Option<String>,
    /// Epoch seconds of the write that applied (or accepted) it.
    pub written_at: i64,
    /// The stream record the relay reads for it (DynamoDB JSON, as Lambda delivers it).
    pub stream_record: Value,
}

/// The records carrying events written in `[from, to)` (epoch s), optionally of one account:
/// facts' records by `claimedAt`, the API's accepted commands by `createdAt`. One scan pass,
/// the one honest read here: the relay lists a batch in the record log before publishing it,
/// so a batch it gave up on may be missing from the log as well as from the bus.
pub async fn carriers(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    (from, to): (i64, i64),
    account: Option<&str>,
) -> anyhow::Result<Vec<Carrier>> {
    let mut by_type = scan_types(
        client,
        table,
        &[ClaimRecord::ITEM_TYPE, IdempotencyRecord::ITEM_TYPE],
    )
    .await?;
    let mut out = Vec::new();
    for (item_type, time_field) in [
        (ClaimRecord::ITEM_TYPE, "claimedAt"),
        (IdempotencyRecord::ITEM_TYPE, "createdAt"),
    ] {
        for mut item in by_type.remove(item_type).unwrap_or_default() {
            if !item.contains_key(OUTBOX) {
                continue;
            }
            let written_at = number(&item, time_field).unwrap_or_default();
            let account_id = text(&item, "accountId")
                .map(str::to_owned)
                .or_else(|| api_account(&item));
            if written_at < from
                || written_at >= to
                || account.is_some_and(|a| account_id.as_deref() != Some(a))
            {
                continue;
            }
            // The applying write's image: a reversal's later mark is not part of it.
            item.remove(REVERSED_BY);
            let pk = text(&item, servicing_store::items::PK)
                .unwrap_or_default()
                .to_owned();
            out.push(Carrier {
                stream_record: stream_record(&pk, written_at, item)?,
                pk,
                account_id,
                written_at,
            });
        }
    }
    out.sort_by(|a, b| (a.written_at, &a.pk).cmp(&(b.written_at, &b.pk)));
    Ok(out)
}

fn number(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

/// An accepted API command's account, from the event it carries.
fn api_account(item: &Item) -> Option<String> {
    let events: Value = serde_json::from_str(text(item, OUTBOX)?).ok()?;
    events[0]["detail"]["accountId"].as_str().map(str::to_owned)
}

fn stream_record(pk: &str, written_at: i64, item: Item) -> anyhow::Result<Value> {
    let sk = text(&item, servicing_store::items::SK)
        .unwrap_or_default()
        .to_owned();
    let image: serde_dynamo::Item = item.into();
    Ok(json!({
        "eventID": format!("republish-{pk}"),
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "awsRegion": std::env::var("AWS_REGION").unwrap_or_default(),
        "dynamodb": {
            // In the order of the writes (the relay checkpoints on it, one batch at a time).
            "SequenceNumber": format!("{written_at:012}"),
            "SizeBytes": 1,
            "StreamViewType": "NEW_IMAGE",
            "ApproximateCreationDateTime": written_at,
            "Keys": {"pk": {"S": pk}, "sk": {"S": sk}},
            "NewImage": serde_json::to_value(&image)?,
        }
    }))
}
