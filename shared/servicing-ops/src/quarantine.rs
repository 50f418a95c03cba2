//! Quarantine: list, inspect, redrive. A redrive sends the original body again, so the fact
//! keeps its identity (it can never become a new fact); collisions are never redriven.

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::SourceRef;

use servicing_store::schema::{self, QuarantineRecord};

use crate::{Item, account_state_claim, epoch_seconds, failed, scan_types, text};

/// One quarantine item, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// `<consumer>/<day>/<millis>/<message id>` ([`item_id`]): what `inspect` and `redrive` take.
    pub id: String,
    pub consumer: String,
    pub code: String,
    pub reason: String,
    pub message_id: String,
    pub source: Option<SourceRef>,
    pub account_id: Option<String>,
    pub quarantined_at_ms: i64,
    pub redrive_count: i64,
    /// Who redrove it last (the caller's ARN).
    pub redriven_by: Option<String>,
    /// The body, or only its first bytes when `raw_body_truncated`.
    pub raw_body: String,
    /// `(bytes, sha256)` of a body too large to keep whole (`raw_body` is its prefix).
    pub raw_body_truncated: Option<(u64, String)>,
    /// The fingerprint of the quarantined payload (absent for undecodable input).
    pub received_fingerprint: Option<String>,
    /// The claim retention of the consumer that quarantined it (seconds; absent on items
    /// written before quarantine items recorded it).
    pub claim_retention_secs: Option<i64>,
}

impl Quarantined {
    fn from_item(item: Item) -> anyhow::Result<Self> {
        let r: QuarantineRecord = schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("a quarantine item does not decode: {e}"))?;
        Ok(Self {
            id: item_id(&r.pk, &r.sk),
            source: r.source(),
            consumer: r.consumer,
            code: r.code,
            reason: r.reason,
            message_id: r.message_id,
            account_id: r.account_id,
            quarantined_at_ms: r.quarantined_at,
            redrive_count: r.redrive_count.unwrap_or_default(),
            redriven_by: r.redriven_by,
            raw_body_truncated: r.raw_body_truncated.then(|| {
                (
                    r.raw_body_bytes.unwrap_or_default(),
                    r.raw_body_sha256.unwrap_or_default(),
                )
            }),
            raw_body: r.raw_body,
            received_fingerprint: r.received_fingerprint,
            claim_retention_secs: r.claim_retention_secs,
        })
    }
}

/// The consumers that quarantine: the first part of every quarantine partition's key.
pub const QUARANTINING: [&str; 4] = [
    servicing_store::APPLIER,
    "collections",
    "ledger-postings",
    "outbox-relay",
];

/// The most days one listing queries (a year and a bit: beyond, `--all`).
pub const MAX_DAYS: i64 = 400;

/// Which quarantine items a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Quarantined in `[from, to)` (epoch ms): one `Query` per consumer and UTC day of the
    /// window (the items are partitioned so), whatever the table's history.
    Window(i64, i64),
    /// Every item ever quarantined: a scan of the whole table (an audit).
    All,
}

impl Listing {
    /// The last `days` days, up to now.
    pub fn last_days(days: i64) -> Self {
        let now_ms = epoch_seconds() * 1000 + 1000;
        Listing::Window(now_ms - days * 86_400_000, now_ms)
    }
}

/// The quarantine items of `consumer` quarantined in `[from_ms, to_ms)`: one consistent `Query`
/// per UTC day of the window, the first and last bounded by time (at most [`MAX_DAYS`] days).
pub async fn in_window(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    (from_ms, to_ms): (i64, i64),
) -> anyhow::Result<Vec<Item>> {
    let day_of = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.date_naive())
            .ok_or_else(|| anyhow::anyhow!("{ms} ms is not a time"))
    };
    if to_ms <= from_ms {
        return Ok(Vec::new());
    }
    let (first, last) = (day_of(from_ms)?, day_of(to_ms - 1)?);
    let days = (last - first).num_days() + 1;
    anyhow::ensure!(
        days <= MAX_DAYS,
        "{days} days of quarantine asked for; at most {MAX_DAYS} (or list them all)"
    );
    let mut found = Vec::new();
    for day in first.iter_days().take(days as usize) {
        let pk = format!("QUARANTINE#{consumer}#{day}");
        // Sort keys are `<13-digit millis>#<message id>`: `~` sorts after every `#<id>`.
        let items: Vec<Item> = client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
            .expression_attribute_values(":from", AttributeValue::S(format!("{from_ms:013}")))
            .expression_attribute_values(":to", AttributeValue::S(format!("{:013}~", to_ms - 1)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(failed(format!("cannot query {pk}")))?;
        found.extend(items);
    }
    Ok(found)
}

/// The quarantine items `listing` reads (of one consumer, or of all of them), oldest first.
pub async fn list(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: Option<&str>,
    listing: Listing,
) -> anyhow::Result<Vec<Quarantined>> {
    let items = match listing {
        Listing::Window(from, to) => {
            let mut items = Vec::new();
            for c in QUARANTINING
                .iter()
                .filter(|c| consumer.is_none_or(|w| w == **c))
            {
                items.extend(in_window(client, table, c, (from, to)).await?);
            }
            items
        }
        Listing::All => scan_types(client, table, &[QuarantineRecord::ITEM_TYPE])
            .await?
            .remove(QuarantineRecord::ITEM_TYPE)
            .unwrap_or_default(),
    };
    let mut all: Vec<Quarantined> = items
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

/// A quarantine item's id as operators type it: `<consumer>/<day>/<millis>/<message id>`, no
/// character a shell treats specially (the key is `QUARANTINE#<consumer>#<day>` and
/// `<millis>#<message id>`).
pub fn item_id(pk: &str, sk: &str) -> String {
    let pk = pk.strip_prefix("QUARANTINE#").unwrap_or(pk);
    format!("{}/{}", pk.replacen('#', "/", 1), sk.replacen('#', "/", 1))
}

/// The key of an id from [`item_id`] (or the `pk|sk` form earlier versions printed).
fn split_id(id: &str) -> anyhow::Result<(String, String)> {
    if let Some((pk, sk)) = id.split_once('|') {
        return Ok((pk.to_owned(), sk.to_owned()));
    }
    let parts: Vec<&str> = id.splitn(4, '/').collect();
    match parts.as_slice() {
        [consumer, day, millis, message] if !message.is_empty() => Ok((
            format!("QUARANTINE#{consumer}#{day}"),
            format!("{millis}#{message}"),
        )),
        _ => anyhow::bail!(
            "{id:?} is not a quarantine id: <consumer>/<day>/<millis>/<message id>, as `ledgerctl quarantine list` prints it"
        ),
    }
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

/// An operator's explicit claim retention for a redrive (`--retention-days`): overrides what
/// the quarantine item recorded.
#[derive(Debug, Clone, Copy)]
pub struct RedriveWindow {
    pub claim_retention_secs: i64,
    pub allow_beyond_retention: bool,
}

/// How a redrive judges an unclaimed fact: by the claim retention its quarantine item recorded
/// (its writer's `CLAIM_RETENTION_DAYS`) unless the operator overrides it; with neither, the
/// redrive is refused — never judged by a default that may not be the deployed value.
#[derive(Debug, Clone, Default)]
pub struct RedriveOptions {
    /// Overrides the recorded claim retention (seconds).
    pub claim_retention_secs: Option<i64>,
    /// Redrive even a fact the claims cannot vouch for (the operator checked it).
    pub allow_beyond_retention: bool,
    /// Who redrives (the caller's ARN): stamped on the item as `redrivenBy`.
    pub operator: Option<String>,
}

impl From<RedriveWindow> for RedriveOptions {
    fn from(window: RedriveWindow) -> Self {
        Self {
            claim_retention_secs: Some(window.claim_retention_secs),
            allow_beyond_retention: window.allow_beyond_retention,
            operator: None,
        }
    }
}

/// Sends the quarantined body of an account-state message back to the servicing queue, after a
/// fix. Refuses collisions (the first fact stands; the source must send a new identity), bodies
/// kept only in part, and facts already applied. A business rejection's claim is released
/// first, else the redelivery would be a duplicate — only a `REJECTED` claim of the
/// quarantined payload (its fingerprint as the quarantine item recorded it): a claim another
/// payload of the same identity holds since stays.
pub async fn redrive(
    client: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    table: &str,
    queue_url: &str,
    id: &str,
    options: impl Into<RedriveOptions>,
) -> anyhow::Result<Redriven> {
    let options = options.into();
    let q = inspect(client, table, id).await?;
    if q.consumer != servicing_store::APPLIER {
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
    if q.code == "api_payment_not_accepted" {
        return Err(anyhow::anyhow!(
            "{id} is a fact under the payments API's reserved prefix that no accepted payment proves: \
             a matter for a security review, never a redrive (it would only be refused again)"
        ));
    }
    if let Some((bytes, sha256)) = &q.raw_body_truncated {
        return Err(anyhow::anyhow!(
            "{id} kept only the first {} bytes of its {bytes}-byte body (sha256 {sha256}): \
             it cannot be redriven; the source must resend it",
            q.raw_body.len()
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
                let Some(retention) = options.claim_retention_secs.or(q.claim_retention_secs)
                else {
                    return Err(anyhow::anyhow!(
                        "{id} records no claim retention (it was quarantined before quarantine items kept it) \
                         and none was given: a redrive cannot tell whether {source} may have been applied since \
                         and its claim expired (--retention-days with the deployed CLAIM_RETENTION_DAYS)"
                    ));
                };
                let now = epoch_seconds();
                let covered_until = q.quarantined_at_ms / 1000 + retention;
                if covered_until <= now + crate::replay::QUEUE_RETENTION_SECS
                    && !options.allow_beyond_retention
                {
                    return Err(anyhow::anyhow!(
                        "{source} was quarantined {} days ago and has no claim: it may have been applied since \
                         and its claim ({} days) expired, so a redrive could apply it twice \
                         (--allow-beyond-retention once you know it was never applied)",
                        (now - q.quarantined_at_ms / 1000) / 86_400,
                        retention / 86_400
                    ));
                }
            }
            Some("REJECTED") => {
                let Some(quarantined) = q.received_fingerprint.as_deref() else {
                    return Err(anyhow::anyhow!(
                        "{id} records no fingerprint of its payload: whether {source}'s REJECTED claim is this \
                         payload's cannot be told, so it is not released"
                    ));
                };
                let claimed = claim.as_ref().map_or("", |c| c.fingerprint.as_str());
                if claimed != quarantined {
                    return Err(another_payload(source, claimed, quarantined));
                }
                let released = client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(servicing_store::items::key_item(
                        servicing_store::items::claim_key(servicing_store::APPLIER, source),
                    )))
                    .condition_expression("verdict = :rejected AND fingerprint = :fp")
                    .expression_attribute_values(":rejected", AttributeValue::S("REJECTED".into()))
                    .expression_attribute_values(":fp", AttributeValue::S(quarantined.to_owned()))
                    .send()
                    .await;
                match released {
                    Ok(_) => released_claim = true,
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                    {
                        return Err(anyhow::anyhow!(
                            "{source}'s claim changed while it was being released (it is no longer this \
                             payload's REJECTED claim): not released, nothing sent; inspect it again"
                        ));
                    }
                    Err(e) => return Err(failed("cannot release the claim")(e)),
                }
            }
            Some(verdict) => {
                return Err(anyhow::anyhow!(
                    "{source} is already claimed as {verdict}: nothing to redrive"
                ));
            }
        }
    }
    let to = crate::replay::Addressing::of(&q.raw_body);
    let mut send = sqs
        .send_message()
        .queue_url(queue_url)
        .message_body(&q.raw_body)
        .message_group_id(to.group)
        .message_deduplication_id(redrive_deduplication_id(
            &to.deduplication_id,
            q.redrive_count + 1,
        ));
    if let Some(who) = &options.operator {
        send = send.message_attributes(servicing_telemetry::SENT_BY, crate::replay::sent_by(who)?);
    }
    let sent = send.send().await.map_err(failed("cannot send"))?;
    let (pk, sk) = split_id(id)?;
    let operator = options.operator.as_deref().unwrap_or("unknown");
    client
        .update_item()
        .table_name(table)
        .key(servicing_store::items::PK, AttributeValue::S(pk))
        .key(servicing_store::items::SK, AttributeValue::S(sk))
        .update_expression(
            "SET redrivenAt = :now, redrivenBy = :who, redriveCount = if_not_exists(redriveCount, :zero) + :one",
        )
        .expression_attribute_values(":who", AttributeValue::S(operator.to_owned()))
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

fn another_payload(source: &SourceRef, claimed: &str, quarantined: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{source}'s REJECTED claim is another payload's (claimed {claimed}, quarantined {quarantined}): \
         it is not released — that payload's rejection stands; redrive its own quarantine item"
    )
}

/// A redrive's deduplication id: the body's identity (as every send derives it, see
/// [`crate::replay::Addressing`]) and which redrive of the item this is. A redrive is an
/// operator's decision taken after the previous delivery was judged, not a retry of a send:
/// under the identity alone SQS would drop it within 5 minutes of that delivery, reporting it
/// sent. Two operators redriving the same item at once send the same id (one is dropped).
fn redrive_deduplication_id(identity: &str, redrive: i64) -> String {
    let id = format!("#redrive-{redrive}:{identity}");
    if id.len() <= crate::replay::MAX_DEDUPLICATION_ID {
        return id;
    }
    format!(
        "#redrive-{redrive}:{}",
        servicing_domain::Fingerprint::of_value(&serde_json::Value::String(identity.to_owned()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_an_item_is_redriven_should_send_under_its_identity_and_redrive_number() {
        assert_eq!(
            redrive_deduplication_id("psp:pay-1", 1),
            "#redrive-1:psp:pay-1"
        );
        assert_ne!(
            redrive_deduplication_id("psp:pay-1", 2),
            redrive_deduplication_id("psp:pay-1", 1)
        );
        let long = "e".repeat(128);
        let id = redrive_deduplication_id(&long, 12);
        assert!(
            id.starts_with("#redrive-12:sha256:") && id.len() <= 128,
            "{id}"
        );
        assert_ne!(id, redrive_deduplication_id(&"f".repeat(128), 12));
    }
}
