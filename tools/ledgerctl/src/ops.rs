//! `ledgerctl reconcile | quarantine | send`: operations on a deployed table (endpoint and
//! credentials from the standard AWS variables, e.g. `source .local/env`).

use servicing_ops::{quarantine, reconcile, replay};

use crate::{EventsFile, Table};

/// `reconcile`
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    table: Table,
    /// The consumer whose claims are reconciled.
    #[arg(long, default_value = "account-state")]
    consumer: String,
    /// The window, ending now.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(1..=24 * 3650))]
    hours: i64,
    /// The source stream (JSON Lines) to reconcile against.
    #[arg(long, conflicts_with = "money")]
    source: Option<EventsFile>,
    /// Reconcile money instead: every API payment answered 202 applied; applied payments less
    /// reversals by source, currency and business date; suspected duplicates under different
    /// identities. Exits 1 when something does not reconcile.
    #[arg(long)]
    money: bool,
    /// With --money: a provider's settlement totals (CSV `source,date,currency,total`, e.g.
    /// `prov-a,2026-11-02,EUR,10000.00`), each compared with what was applied.
    #[arg(long, requires = "money")]
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
    /// Every parked fact.
    List(Table),
}

#[derive(Debug, clap::Subcommand)]
pub enum QuarantineCommand {
    /// Every quarantined message (one line each).
    List {
        #[command(flatten)]
        table: Table,
        /// Only this consumer's.
        #[arg(long)]
        consumer: Option<String>,
    },
    /// Messages in full, raw body included.
    Inspect {
        #[command(flatten)]
        table: Table,
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Re-send bodies with their original identity (collisions are refused; so is an unclaimed
    /// fact quarantined so long ago that it may have applied since and its claim expired).
    Redrive {
        #[command(flatten)]
        table: Table,
        /// The servicing queue.
        #[arg(long)]
        queue: String,
        #[arg(required = true)]
        ids: Vec<String>,
        /// Overrides the claim retention each item recorded when it was quarantined (its
        /// consumer's CLAIM_RETENTION_DAYS, as deployed then); needed only for items written
        /// before they recorded it, which are refused without it. No default: a guess could
        /// let a fact that applied since be applied twice.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=3650))]
        retention_days: Option<i64>,
        /// Redrive even a fact that may have applied since (after checking it).
        #[arg(long)]
        allow_beyond_retention: bool,
    },
}

/// `send`
#[derive(Debug, clap::Args)]
pub struct SendArgs {
    #[command(flatten)]
    table: Table,
    /// The servicing queue.
    #[arg(long)]
    queue: String,
    events: EventsFile,
    /// Send even facts that could apply twice (after checking them).
    #[arg(long)]
    allow_beyond_retention: bool,
}

/// `close`: the daily close by hand, for a day the schedule missed.
#[derive(Debug, clap::Args)]
pub struct CloseArgs {
    #[command(flatten)]
    table: Table,
    /// The servicing queue (required unless --dry-run).
    #[arg(long, required_unless_present = "dry_run")]
    queue: Option<String>,
    /// The business day to close (YYYY-MM-DD), e.g. 2026-10-31. A missed day is caught up by
    /// closing the latest one: DPD depends only on the date.
    #[arg(long)]
    date: chrono::NaiveDate,
    /// List the accounts in arrears on that day; send nothing.
    #[arg(long)]
    dry_run: bool,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
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
    let (table, consumer, hours) = (&args.table.table, &args.consumer, args.hours);
    let source = args.source.as_ref().map(read_lines).transpose()?;
    let now = servicing_ops::epoch_seconds();
    runtime()?.block_on(async {
        let dynamodb = aws_sdk_dynamodb::Client::new(&aws_setup::load().await);
        let report = reconcile::reconcile(
            &dynamodb,
            table,
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
        let dynamodb = aws_sdk_dynamodb::Client::new(&aws_setup::load().await);
        let report = servicing_ops::money::reconcile_money(
            &dynamodb,
            &args.table.table,
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

pub fn quarantine(command: &QuarantineCommand) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        match command {
            QuarantineCommand::List { table, consumer } => {
                let items = quarantine::list(&dynamodb, &table.table, consumer.as_deref()).await?;
                for q in &items {
                    let source = q
                        .source
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "-".into());
                    println!(
                        "{}\t{}\t{}\t{}\t{}\tredriven {}x",
                        q.id, q.consumer, q.code, source, q.reason, q.redrive_count
                    );
                }
                println!("{} quarantined", items.len());
                Ok(true)
            }
            QuarantineCommand::Inspect { table, ids } => {
                for id in ids {
                    let q = quarantine::inspect(&dynamodb, &table.table, id).await?;
                    println!("{}", inspection(&q));
                }
                Ok(true)
            }
            QuarantineCommand::Redrive {
                table,
                queue,
                ids,
                retention_days,
                allow_beyond_retention,
            } => {
                let options = quarantine::RedriveOptions {
                    claim_retention_secs: retention_days.map(|days| days * 86_400),
                    allow_beyond_retention: *allow_beyond_retention,
                };
                let sqs = aws_sdk_sqs::Client::new(&sdk);
                let mut all_ok = true;
                for id in ids {
                    match quarantine::redrive(&dynamodb, &sqs, &table.table, queue, id, options)
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
        "id:          {}\nconsumer:    {}\ncode:        {}\nreason:      {}\nmessage id:  {}\nsource:      {}\naccount:     {}\nfingerprint: {}\nclaim kept:  {retention}\nredriven:    {}x\nraw body:    {body}\n",
        q.id,
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

pub fn parked(command: &ParkedCommand) -> anyhow::Result<bool> {
    let ParkedCommand::List(Table { table }) = command;
    runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let store = servicing_store::ServicingStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            servicing_store::StoreConfig::new(table, "account-state"),
        );
        let parked = servicing_ops::parked::list(&store).await?;
        for view in &parked {
            println!("{}", view.line());
        }
        println!("{} parked", parked.len());
        Ok(true)
    })
}

pub fn send(args: &SendArgs) -> anyhow::Result<bool> {
    let (table, queue) = (&args.table.table, &args.queue);
    let lines = read_lines(&args.events)?;
    runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let refusals = replay::check(&dynamodb, table, &lines).await?;
        for r in &refusals {
            eprintln!("line {}: {}", r.line, r.reason);
        }
        if !refusals.is_empty() && !args.allow_beyond_retention {
            eprintln!("refused: {} facts may apply twice; nothing was sent (--allow-beyond-retention after checking them)", refusals.len());
            return Ok(false);
        }
        let sent = replay::send(&aws_sdk_sqs::Client::new(&sdk), queue, &lines).await?;
        println!("sent {sent} messages to {queue}");
        Ok(true)
    })
}

pub fn close(args: &CloseArgs) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let store = servicing_store::ServicingStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            servicing_store::StoreConfig::new(&args.table.table, "aging"),
        );
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let queue = args.queue.as_deref().unwrap_or_default();
        let close =
            servicing_ops::aging::close_day(&store, &sqs, queue, args.date, args.dry_run).await?;
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
            "QUARANTINE#x|1#m",
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
