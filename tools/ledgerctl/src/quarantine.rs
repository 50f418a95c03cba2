//! `ledgerctl quarantine list | inspect | redrive`: quarantined messages on a deployed table
//! (`target.rs` says which, before acting). Apart from `ops.rs`: the largest command group, with
//! its own filters, printing (a line per item, an inspection, JSON) and guarded re-sends.

use serde_json::json;
use servicing_ops::quarantine;

use crate::iso;
use crate::ops::runtime;
use crate::target::{Change, QueueArg, Target};

#[derive(Debug, clap::Subcommand)]
pub enum QuarantineCommand {
    /// Quarantined messages, oldest first (one line each), with filters.
    List {
        /// Only this consumer's.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(quarantine::QUARANTINING))]
        consumer: Option<String>,
        /// Only those quarantined at or after this time (ISO 8601), e.g. `--since
        /// 2026-11-02T10:00:00Z`; default: the last 7 days. Reads one partition per consumer
        /// and day, at most 400 days.
        #[arg(long, value_parser = crate::time, conflicts_with = "all")]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Every item ever quarantined: reads the whole table (an audit).
        #[arg(long)]
        all: bool,
        /// Only this code, e.g. `--code collision` or `--code event_time_in_future` (the
        /// codes and what each means: docs/runbook.md, "Quarantine codes").
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(servicing_store::listable_code_names()))]
        code: Option<String>,
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long, value_parser = crate::account)]
        account: Option<String>,
    },
    /// Messages in full, raw body included.
    Inspect {
        /// Ids as `list` prints them, e.g. `account-state/2026-11-02/1762077600000/3f2a…`.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Re-send bodies with their original identity (collisions are refused; so is an unclaimed
    /// fact quarantined so long ago that it may have applied since and its claim expired).
    Redrive {
        #[command(flatten)]
        queue: QueueArg,
        /// Ids as `list` prints them.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        /// Overrides the claim retention each item recorded when it was quarantined (its
        /// consumer's CLAIM_RETENTION_DAYS, as deployed then); needed only for items written
        /// before they recorded it, which are refused without it. No default: a guess could
        /// let a fact that applied since be applied twice. E.g. `--retention-days 35`.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=3650))]
        retention_days: Option<i64>,
        /// Redrive even a fact that may have applied since (after checking it).
        #[arg(long)]
        allow_beyond_retention: bool,
        /// Say what would be redriven (each item's judgment); send nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

/// What `quarantine list` reads without `--since`.
const DEFAULT_DAYS: i64 = 7;

pub fn quarantine(
    command: &QuarantineCommand,
    json: bool,
    target: &Target,
) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        match command {
            QuarantineCommand::List {
                consumer,
                since,
                all,
                code,
                account,
            } => {
                let listing = match since {
                    _ if *all => quarantine::Listing::All,
                    Some(since) => quarantine::Listing::Window(
                        since.timestamp_millis(),
                        (servicing_ops::epoch_seconds() + 1) * 1000,
                    ),
                    None => quarantine::Listing::last_days(DEFAULT_DAYS),
                };
                let target = target.resolve(None).await?;
                let items: Vec<quarantine::Quarantined> = quarantine::list(
                    &target.dynamodb(),
                    &target.table,
                    consumer.as_deref(),
                    listing,
                )
                .await?
                .into_iter()
                .filter(|q| code.as_ref().is_none_or(|c| &q.code == c))
                .filter(|q| {
                    account
                        .as_ref()
                        .is_none_or(|a| q.account_id.as_ref() == Some(a))
                })
                .collect();
                if json {
                    let all: Vec<_> = items.iter().map(quarantined_json).collect();
                    println!("{}", serde_json::to_string_pretty(&all)?);
                    return Ok(true);
                }
                for q in &items {
                    let source = q
                        .source
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "-".into());
                    println!(
                        "{}\t{}\t{}\t{}\t{}\t{}\tredriven {}x",
                        q.id,
                        iso(q.quarantined_at_ms / 1000),
                        q.consumer,
                        q.code,
                        source,
                        q.reason,
                        q.redrive_count
                    );
                }
                let read = match listing {
                    quarantine::Listing::Window(from, _) => {
                        format!("since {}; --since to look further back", iso(from / 1000))
                    }
                    quarantine::Listing::All => "every item: a full read of the table".into(),
                };
                println!("{} quarantined ({read})", items.len());
                Ok(true)
            }
            QuarantineCommand::Inspect { ids } => {
                let target = target.resolve(None).await?;
                for id in ids {
                    let q = quarantine::inspect(&target.dynamodb(), &target.table, id).await?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&quarantined_json(&q))?);
                    } else {
                        println!("{}", inspection(&q));
                    }
                }
                Ok(true)
            }
            QuarantineCommand::Redrive {
                queue,
                ids,
                retention_days,
                allow_beyond_retention,
                dry_run,
                change,
            } => {
                let target = target.resolve(Some(queue)).await?;
                let operator = target.authorize(change, *dry_run).await?;
                let options = quarantine::RedriveOptions {
                    claim_retention_secs: retention_days.map(|days| days * 86_400),
                    allow_beyond_retention: *allow_beyond_retention,
                    operator: Some(operator),
                };
                let (dynamodb, sqs) = (target.dynamodb(), target.sqs());
                let mut all_ok = true;
                for id in ids {
                    if *dry_run {
                        let q = quarantine::inspect(&dynamodb, &target.table, id).await?;
                        println!(
                            "would redrive {} ({} {}, redriven {}x): {}",
                            q.id,
                            q.code,
                            q.source
                                .as_ref()
                                .map(ToString::to_string)
                                .unwrap_or_default(),
                            q.redrive_count,
                            if q.code == "collision" {
                                "refused: a collision is never redriven"
                            } else {
                                "judged by its claim when redriven"
                            }
                        );
                        continue;
                    }
                    match quarantine::redrive(
                        &dynamodb,
                        &sqs,
                        &target.table,
                        target.queue()?,
                        id,
                        options.clone(),
                    )
                    .await
                    {
                        Ok(r) => println!(
                            "redriven {} as message {}{}",
                            r.id,
                            r.message_id,
                            if r.released_claim {
                                " (its REJECTED claim was released)"
                            } else {
                                ""
                            }
                        ),
                        Err(why) => {
                            all_ok = false;
                            eprintln!("refused {id}: {why:#}");
                        }
                    }
                }
                Ok(all_ok)
            }
        }
    })
}

fn quarantined_json(q: &quarantine::Quarantined) -> serde_json::Value {
    json!({
        "id": q.id, "consumer": q.consumer, "code": q.code, "reason": q.reason,
        "messageId": q.message_id,
        "sourceSystem": q.source.as_ref().map(|s| s.system.clone()),
        "sourceEventId": q.source.as_ref().map(|s| s.event_id.clone()),
        "accountId": q.account_id, "quarantinedAt": iso(q.quarantined_at_ms / 1000),
        "redriveCount": q.redrive_count, "rawBody": q.raw_body,
        "rawBodyTruncated": q.raw_body_truncated.is_some(),
        "receivedFingerprint": q.received_fingerprint,
        "claimRetentionDays": q.claim_retention_secs.map(|s| s / 86_400),
    })
}

/// What `quarantine inspect` prints of one item.
fn inspection(q: &quarantine::Quarantined) -> String {
    let retention = q.claim_retention_secs.map_or_else(
        || "not recorded (redrive needs --retention-days)".to_owned(),
        |s| format!("{} days", s / 86_400),
    );
    let body = match &q.raw_body_truncated {
        Some((bytes, sha256)) => format!(
            "{bytes} bytes, sha256 {sha256}; kept only its first {} bytes (not redrivable):\n             {}",
            q.raw_body.len(),
            q.raw_body
        ),
        None => q.raw_body.clone(),
    };
    format!(
        "id:          {}\nquarantined: {}\nconsumer:    {}\ncode:        {}\nreason:      {}\nmessage id:  {}\nsource:      {}\naccount:     {}\nfingerprint: {}\nclaim kept:  {retention}\nredriven:    {}x{}\nraw body:    {body}\n",
        q.id,
        iso(q.quarantined_at_ms / 1000),
        q.consumer,
        q.code,
        q.reason,
        q.message_id,
        q.source
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        q.account_id.clone().unwrap_or_default(),
        q.received_fingerprint.clone().unwrap_or_default(),
        q.redrive_count,
        q.redriven_by
            .as_ref()
            .map(|by| format!(", last by {by}"))
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests;
