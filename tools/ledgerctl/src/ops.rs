//! `ledgerctl reconcile | parked | quarantine | send | close`: operations on a deployed table
//! (`target.rs` says which, before acting).

use serde_json::json;
use servicing_ops::{quarantine, reconcile, replay};

use crate::target::{QueueArg, Target};
use crate::{EventsFile, iso};

/// `reconcile`
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    target: Target,
    /// The consumer whose claims are reconciled, e.g. `--consumer collections`.
    #[arg(long, default_value = "account-state")]
    consumer: String,
    /// The window, ending now, in hours, e.g. `--hours 48`.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(1..=24 * 3650))]
    hours: i64,
    /// The source stream (JSON Lines) to reconcile against, e.g. `--source prov-a-2026-11-02.jsonl`.
    #[arg(long, conflicts_with = "money", value_name = "FILE")]
    source: Option<EventsFile>,
    /// Reconcile money instead: every API payment answered 202 applied; applied payments less
    /// reversals by source, currency and business date; suspected duplicates under different
    /// identities. Exits 1 when something does not reconcile.
    #[arg(long)]
    money: bool,
    /// With --money: a provider's settlement totals (CSV `source,date,currency,total`, e.g.
    /// `prov-a,2026-11-02,EUR,10000.00`), each compared with what was applied.
    #[arg(long, requires = "money", value_name = "CSV")]
    settlement: Option<std::path::PathBuf>,
    /// With --money: API payments accepted less than this long ago are listed as in flight,
    /// not as missing.
    #[arg(long, default_value_t = 15, requires = "money", value_parser = clap::value_parser!(i64).range(0..=24 * 60))]
    grace_minutes: i64,
    /// With --money: a collections action still PENDING (or SENDING past its lease) this long
    /// after it was created is named as stuck.
    #[arg(long, default_value_t = 60, requires = "money", value_parser = clap::value_parser!(i64).range(0..=24 * 60 * 30))]
    action_grace_minutes: i64,
}

#[derive(Debug, clap::Subcommand)]
pub enum ParkedCommand {
    /// Every parked fact (optionally of one account).
    List {
        #[command(flatten)]
        target: Target,
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long)]
        account: Option<String>,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum QuarantineCommand {
    /// Quarantined messages, oldest first (one line each), with filters.
    List {
        #[command(flatten)]
        target: Target,
        /// Only this consumer's: `account-state`, `collections`, `outbox-relay`.
        #[arg(long)]
        consumer: Option<String>,
        /// Only those quarantined at or after this time (ISO 8601), e.g. `--since 2026-11-02T10:00:00Z`.
        #[arg(long, value_parser = crate::time)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Only this code, e.g. `--code collision` or `--code event_time_in_future`.
        #[arg(long)]
        code: Option<String>,
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long)]
        account: Option<String>,
    },
    /// Messages in full, raw body included.
    Inspect {
        #[command(flatten)]
        target: Target,
        /// Ids as `list` prints them, e.g. `account-state/2026-11-02/1762077600000/3f2a…`.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Re-send bodies with their original identity (collisions are refused; so is an unclaimed
    /// fact quarantined so long ago that it may have applied since and its claim expired).
    Redrive {
        #[command(flatten)]
        target: Target,
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
    },
}

/// `send`
#[derive(Debug, clap::Args)]
pub struct SendArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    queue: QueueArg,
    /// The facts to send, JSON Lines, e.g. `prov-a-2026-11-02.jsonl`.
    #[arg(value_name = "FILE")]
    events: EventsFile,
    /// Send even facts that could apply twice (after checking them).
    #[arg(long)]
    allow_beyond_retention: bool,
    /// Check every fact and say what would be sent; send nothing.
    #[arg(long)]
    dry_run: bool,
}

/// `close`: the daily close by hand, for a day the schedule missed.
#[derive(Debug, clap::Args)]
pub struct CloseArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    queue: QueueArg,
    /// The business day to close (YYYY-MM-DD), e.g. `--date 2026-10-31`. A missed day is
    /// caught up by closing the latest one: DPD depends only on the date.
    #[arg(long)]
    date: chrono::NaiveDate,
    /// List the accounts in arrears on that day; send nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the runtime: {e}"))
}

fn read_lines(path: &EventsFile) -> anyhow::Result<Vec<Vec<u8>>> {
    let input =
        std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Ok(input
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(<[u8]>::to_vec)
        .collect())
}

pub fn reconcile(args: &ReconcileArgs) -> anyhow::Result<bool> {
    if args.money {
        return reconcile_money(args);
    }
    let (consumer, hours) = (&args.consumer, args.hours);
    let source = args.source.as_ref().map(read_lines).transpose()?;
    let now = servicing_ops::epoch_seconds();
    runtime()?.block_on(async {
        let target = args.target.resolve(None).await?;
        let report = reconcile::reconcile(
            &target.dynamodb(),
            &target.table,
            consumer,
            (now - hours * 3600, now + 1),
            source.as_deref(),
        )
        .await?;
        for line in report.lines() {
            println!("{line}");
        }
        Ok(report.holds())
    })
}

fn reconcile_money(args: &ReconcileArgs) -> anyhow::Result<bool> {
    let settlement = match &args.settlement {
        Some(path) => servicing_ops::money::parse_settlement(
            &std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?,
        )?,
        None => Vec::new(),
    };
    runtime()?.block_on(async {
        let target = args.target.resolve(None).await?;
        let report = servicing_ops::money::reconcile_money(
            &target.dynamodb(),
            &target.table,
            &settlement,
            servicing_ops::epoch_seconds(),
            servicing_ops::money::Grace {
                accepted_secs: args.grace_minutes * 60,
                action_secs: args.action_grace_minutes * 60,
            },
        )
        .await?;
        for line in report.lines() {
            println!("{line}");
        }
        Ok(report.holds())
    })
}

pub fn quarantine(command: &QuarantineCommand, json: bool) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        match command {
            QuarantineCommand::List {
                target,
                consumer,
                since,
                code,
                account,
            } => {
                let target = target.resolve(None).await?;
                let items: Vec<quarantine::Quarantined> =
                    quarantine::list(&target.dynamodb(), &target.table, consumer.as_deref())
                        .await?
                        .into_iter()
                        .filter(|q| {
                            since.is_none_or(|t| q.quarantined_at_ms >= t.timestamp_millis())
                        })
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
                println!("{} quarantined", items.len());
                Ok(true)
            }
            QuarantineCommand::Inspect { target, ids } => {
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
                target,
                queue,
                ids,
                retention_days,
                allow_beyond_retention,
                dry_run,
            } => {
                let target = target.resolve(Some(queue)).await?;
                let options = quarantine::RedriveOptions {
                    claim_retention_secs: retention_days.map(|days| days * 86_400),
                    allow_beyond_retention: *allow_beyond_retention,
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
                        options,
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
        "id:          {}\nquarantined: {}\nconsumer:    {}\ncode:        {}\nreason:      {}\nmessage id:  {}\nsource:      {}\naccount:     {}\nfingerprint: {}\nclaim kept:  {retention}\nredriven:    {}x\nraw body:    {body}\n",
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
    )
}

pub fn parked(command: &ParkedCommand, json: bool) -> anyhow::Result<bool> {
    let ParkedCommand::List { target, account } = command;
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, "account-state"),
        );
        let parked: Vec<_> = servicing_ops::parked::list(&store)
            .await?
            .into_iter()
            .filter(|v| account.as_ref().is_none_or(|a| v.account.as_str() == a))
            .collect();
        if json {
            let all: Vec<_> = parked
                .iter()
                .map(|v| {
                    json!({"accountId": v.account.as_str(), "sourceSystem": v.fact.source.system,
                        "sourceEventId": v.fact.source.event_id, "messageId": v.fact.message_id,
                        "parkedAt": iso(v.fact.parked_at),
                        "waitsFor": v.fact.awaits.as_ref().map(|a| a.awaited(&v.account).to_string()),
                        "ready": v.fact.awaits.is_none()})
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&all)?);
            return Ok(true);
        }
        for view in &parked {
            println!("{}", view.line());
        }
        println!("{} parked", parked.len());
        Ok(true)
    })
}

pub fn send(args: &SendArgs) -> anyhow::Result<bool> {
    let lines = read_lines(&args.events)?;
    runtime()?.block_on(async {
        let target = args.target.resolve(Some(&args.queue)).await?;
        let refusals = replay::check(&target.dynamodb(), &target.table, &lines).await?;
        for r in &refusals {
            eprintln!("line {}: {}", r.line, r.reason);
        }
        if !refusals.is_empty() && !args.allow_beyond_retention {
            eprintln!("refused: {} facts may apply twice; nothing was sent (--allow-beyond-retention after checking them)", refusals.len());
            return Ok(false);
        }
        let queue = target.queue()?;
        if args.dry_run {
            println!("would send {} messages to {queue} (dry run: nothing sent)", lines.len());
            return Ok(true);
        }
        let sent = replay::send(&target.sqs(), queue, &lines).await?;
        println!("sent {sent} messages to {queue}");
        Ok(true)
    })
}

pub fn close(args: &CloseArgs) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        let target = args.target.resolve(Some(&args.queue)).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, "aging"),
        );
        let queue = if args.dry_run { "" } else { target.queue()? };
        let close = aging::close_day(&store, &target.sqs(), queue, args.date, args.dry_run).await?;
        if args.dry_run {
            for account in &close.accounts {
                println!("{account}");
            }
        }
        println!("{}", close.line());
        Ok(true)
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: QuarantineCommand,
    }

    fn redrive_retention(args: &[&str]) -> Option<i64> {
        let base = [
            "ledgerctl",
            "redrive",
            "--table",
            "t",
            "--queue",
            "q",
            "account-state/2026-11-02/1/m",
        ];
        let cli = Cli::try_parse_from(base.iter().chain(args)).expect("parses");
        match cli.command {
            QuarantineCommand::Redrive { retention_days, .. } => retention_days,
            other => panic!("not a redrive: {other:?}"),
        }
    }

    #[test]
    fn when_redrive_is_given_no_retention_should_not_assume_one() {
        assert_eq!(
            redrive_retention(&[]),
            None,
            "the item's recorded retention decides"
        );
        assert_eq!(redrive_retention(&["--retention-days", "60"]), Some(60));
    }
}
