//! Quarantine: list, inspect, redrive. A redrive sends the original body again, so the fact
//! keeps its identity (it can never become a new fact); collisions are never redriven.

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::SourceRef;

use servicing_store::schema::{self, QuarantineRecord};

use crate::{Item, account_state_claim, epoch_seconds, failed, scan_types, text};

/// One quarantine item, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// `pk|sk`: what `inspect` and `redrive` take.
    pub id: String,
    pub consumer: String,
    pub code: String,
    pub reason: String,
    pub message_id: String,
    pub source: Option<SourceRef>,
    pub account_id: Option<String>,
    pub quarantined_at_ms: i64,
    pub redrive_count: i64,
    pub raw_body: String,
}

impl Quarantined {
    fn from_item(item: Item) -> anyhow::Result<Self> {
        let r: QuarantineRecord = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("a quarantine item does not decode: {e}"))?;
        Ok(Self {
            id: format!("{}|{}", r.pk, r.sk),
            source: r.source(),
            consumer: r.consumer,
            code: r.code,
            reason: r.reason,
            message_id: r.message_id,
            account_id: r.account_id,
            quarantined_at_ms: r.quarantined_at,
            redrive_count: r.redrive_count.unwrap_or_default(),
            raw_body: r.raw_body,
        })
    }
}

/// Every quarantine item (of one consumer), oldest first.
pub async fn list(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: Option<&str>,
) -> anyhow::Result<Vec<Quarantined>> {
    let mut all: Vec<Quarantined> = scan_types(client, table, &[QuarantineRecord::ITEM_TYPE])
        .await?
        .remove(QuarantineRecord::ITEM_TYPE)
        .unwrap_or_default()
        .into_iter()
        .map(Quarantined::from_item)
        .filter(|q| {
            q.as_ref()
                .map_or(true, |q| consumer.is_none_or(|c| q.consumer == c))
        })
        .collect::<Result<_, _>>()?;
    all.sort_by(|a, b| (a.quarantined_at_ms, &a.id).cmp(&(b.quarantined_at_ms, &b.id)));
    Ok(all)
}

fn split_id(id: &str) -> anyhow::Result<(String, String)> {
    id.split_once('|')
        .map(|(pk, sk)| (pk.to_owned(), sk.to_owned()))
        .ok_or_else(|| {
            anyhow::anyhow!("{id:?} is not a quarantine id (pk|sk, as `list` prints it)")
        })
}

pub async fn inspect(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &str,
) -> anyhow::Result<Quarantined> {
    let (pk, sk) = split_id(id)?;
    let got = client
        .get_item()
        .table_name(table)
        .key(servicing_store::items::PK, AttributeValue::S(pk))
        .key(servicing_store::items::SK, AttributeValue::S(sk))
        .consistent_read(true)
        .send()
        .await
        .map_err(failed(format!("cannot read {id}")))?;
    got.item
        .filter(|i| text(i, servicing_store::items::ITEM_TYPE) == Some(QuarantineRecord::ITEM_TYPE))
        .map(Quarantined::from_item)
        .ok_or_else(|| anyhow::anyhow!("no quarantine item {id}"))?
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redriven {
    pub id: String,
    /// A business rejection's claim was released so the fact is judged again.
    pub released_claim: bool,
    pub message_id: String,
}

/// Sends the quarantined body of an account-state message back to the servicing queue, after a
/// fix. Refuses collisions (the first fact stands; the source must send a new identity) and
/// facts already applied. A business rejection's claim is released first (conditionally: only
/// a `REJECTED` claim with this payload's fingerprint), else the redelivery would be a duplicate.
/// How long claims deduplicate, and whether the operator accepts redriving a fact the claims
/// cannot vouch for.
#[derive(Debug, Clone, Copy)]
pub struct RedriveWindow {
    pub claim_retention_secs: i64,
    pub allow_beyond_retention: bool,
}

pub async fn redrive(
    client: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    table: &str,
    queue_url: &str,
    id: &str,
    window: RedriveWindow,
) -> anyhow::Result<Redriven> {
    let q = inspect(client, table, id).await?;
    if q.consumer != "account-state" {
        return Err(anyhow::anyhow!(
            "{id} was quarantined by {}; only account-state messages are redriven to the servicing queue",
            q.consumer
        ));
    }
    if q.code == "collision" {
        return Err(anyhow::anyhow!(
            "{id} is a collision: the first fact with this identity stands and a redrive would only collide again; \
             the source must resend under a new identity, or correct the first fact"
        ));
    }
    let mut released_claim = false;
    if let Some(source) = &q.source {
        let claim = account_state_claim(client, table, source).await?;
        match claim.as_ref().map(|c| c.verdict.as_str()) {
            None => {
                // Unclaimed: never applied — unless it was applied after it was quarantined and
                // that claim has expired since. Any claim made after the quarantine lives until
                // at least quarantinedAt + retention; while that outlasts the queue's delivery
                // horizon, "no claim" means "never applied".
                let now = epoch_seconds();
                let covered_until = q.quarantined_at_ms / 1000 + window.claim_retention_secs;
                if covered_until <= now + crate::replay::QUEUE_RETENTION_SECS
                    && !window.allow_beyond_retention
                {
                    return Err(anyhow::anyhow!(
                        "{source} was quarantined {} days ago and has no claim: it may have been applied since \
                         and its claim expired, so a redrive could apply it twice \
                         (--allow-beyond-retention once you know it was never applied)",
                        (now - q.quarantined_at_ms / 1000) / 86_400
                    ));
                }
            }
            Some("REJECTED") => {
                let fingerprint = claim
                    .as_ref()
                    .map(|c| c.fingerprint.clone())
                    .unwrap_or_default();
                client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(servicing_store::items::key_item(
                        servicing_store::items::claim_key("account-state", source),
                    )))
                    .condition_expression("verdict = :rejected AND fingerprint = :fp")
                    .expression_attribute_values(":rejected", AttributeValue::S("REJECTED".into()))
                    .expression_attribute_values(":fp", AttributeValue::S(fingerprint))
                    .send()
                    .await
                    .map_err(failed("cannot release the claim"))?;
                released_claim = true;
            }
            Some(verdict) => {
                return Err(anyhow::anyhow!(
                    "{source} is already claimed as {verdict}: nothing to redrive"
                ));
            }
        }
    }
    let group = serde_json::from_str::<serde_json::Value>(&q.raw_body)
        .ok()
        .and_then(|v| v["accountId"].as_str().map(str::to_owned))
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| "quarantine-redrive".to_owned());
    let sent = sqs
        .send_message()
        .queue_url(queue_url)
        .message_body(&q.raw_body)
        .message_group_id(group)
        .message_deduplication_id(format!(
            "redrive-{}-{}",
            q.redrive_count + 1,
            short_hash(&q.id)
        ))
        .send()
        .await
        .map_err(failed("cannot send"))?;
    let (pk, sk) = split_id(id)?;
    client
        .update_item()
        .table_name(table)
        .key(servicing_store::items::PK, AttributeValue::S(pk))
        .key(servicing_store::items::SK, AttributeValue::S(sk))
        .update_expression(
            "SET redrivenAt = :now, redriveCount = if_not_exists(redriveCount, :zero) + :one",
        )
        .expression_attribute_values(":now", AttributeValue::N(epoch_seconds().to_string()))
        .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .map_err(failed("sent, but cannot mark the item redriven"))?;
    Ok(Redriven {
        id: id.to_owned(),
        released_claim,
        message_id: sent.message_id.unwrap_or_default(),
    })
}

fn short_hash(text: &str) -> String {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    h.write(text.as_bytes());
    format!("{:016x}", h.finish())
}
