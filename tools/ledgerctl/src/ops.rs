//! `ledgerctl reconcile | parked | send | close`: operations on a deployed table
//! (`target.rs` says which, before acting); `quarantine` is `quarantine.rs`'s.

use serde_json::json;
use servicing_ops::{reconcile, replay};

use crate::target::{Change, QueueArg, Target};
use crate::{EventsFile, iso};

/// `reconcile`
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The consumer whose claims are reconciled, e.g. `--consumer collections`.
    #[arg(long, default_value = "account-state", value_parser = clap::builder::PossibleValuesParser::new(["account-state", "collections"]))]
    consumer: String,
    /// The window, ending now, in hours (at most 399 days: the record log and the quarantine
    /// are read by hour and day), e.g. `--hours 48`. With --money: the business dates
    /// totalled are those on which the window's facts moved money (each date whole), and the
    /// settlement's.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(1..=24 * 399))]
    hours: i64,
    /// The source stream (JSON Lines) to reconcile against, e.g. `--source prov-a-2026-11-02.jsonl`.
    #[arg(long, conflicts_with = "money", value_name = "FILE")]
    source: Option<EventsFile>,
    /// Reconcile money instead: every API payment answered 202 applied; applied payments less
    /// reversals by source, currency and business date; suspected duplicates under different
    /// identities; the ledger's postings against all of that (every sub-ledger the sum of its
    /// entries and equal to servicing, the trial balance zero). Exits 1 when something does
    /// not reconcile.
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
    /// With --money: hold the ledger of every account to servicing, not only of those the
    /// window touched — an audit, and a full read of the table (a scan) that says so; the
    /// daily run never makes it.
    #[arg(long, requires = "money")]
    every_account: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum ParkedCommand {
    /// Every parked fact (optionally of one account).
    List {
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long, value_parser = crate::account)]
        account: Option<String>,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum OpenCommand {
    /// Once, after deploying the open index (issue #33): give every item written before it that
    /// is still open — a loan holding parked facts, an unsettled action, an accepted API
    /// payment — the index keys the daily run reads by. Reads the whole table (a one-off);
    /// harmless to repeat. Run it after every function runs the new code.
    Backfill {
        /// Count what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum LogCommand {
    /// Once, after deploying the record log (issue #33): list every fact's record written
    /// before it, which the window's and the money's reconciliation would otherwise never
    /// read. Reads the whole table (a one-off); harmless to repeat. Run it once the relay runs
    /// the new code.
    Backfill {
        /// Count what would be listed; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

/// `send`
#[derive(Debug, clap::Args)]
pub struct SendArgs {
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
    #[command(flatten)]
    change: Change,
}

/// `close`: the daily close by hand, for a day the schedule missed.
#[derive(Debug, clap::Args)]
pub struct CloseArgs {
    #[command(flatten)]
    queue: QueueArg,
    /// The business day to close (YYYY-MM-DD), e.g. `--date 2026-10-31`. A missed day is
    /// caught up by closing the latest one: DPD depends only on the date.
    #[arg(long)]
    date: chrono::NaiveDate,
    /// List the accounts in arrears on that day; send nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    change: Change,
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

pub fn reconcile(args: &ReconcileArgs, target: &Target) -> anyhow::Result<bool> {
    if args.money {
        return reconcile_money(args, target);
    }
    let (consumer, hours) = (&args.consumer, args.hours);
    let source = args.source.as_ref().map(read_lines).transpose()?;
    let now = servicing_ops::epoch_seconds();
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
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

fn reconcile_money(args: &ReconcileArgs, target: &Target) -> anyhow::Result<bool> {
    let settlement = match &args.settlement {
        Some(path) => servicing_ops::money::parse_settlement(
            &std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?,
        )?,
        None => Vec::new(),
    };
    let now = servicing_ops::epoch_seconds();
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let report = servicing_ops::money::reconcile_money(
            &target.dynamodb(),
            &target.table,
            &settlement,
            (now - args.hours * 3600, now + 1),
            now,
            servicing_ops::money::Grace {
                accepted_secs: args.grace_minutes * 60,
                action_secs: args.action_grace_minutes * 60,
            },
        )
        .await?;
        for line in report.lines() {
            println!("{line}");
        }
        // The third leg: what the ledger posted, against servicing (and so the settlements).
        let accounts = if args.every_account {
            println!("ledger: every account (a full read of the table)");
            servicing_ops::ledger::Accounts::Every
        } else {
            servicing_ops::ledger::Accounts::Touched
        };
        let ledger = servicing_ops::ledger::reconcile_accounts(
            &target.dynamodb(),
            &target.table,
            &report,
            servicing_ops::epoch_seconds(),
            args.grace_minutes * 60,
            accounts,
        )
        .await?;
        for line in ledger.lines() {
            println!("{line}");
        }
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, servicing_store::APPLIER),
        );
        // The daily run's mark: said, never a reason for this report to fail.
        let reach_hours = servicing_ops::ledger::REACH_DAYS * 24;
        match store.ledger_settled_through().await {
            // Older than the daily window: the daily run reads back to it.
            Ok(Some(through)) if now - through > 25 * 3600 => {
                let hours = (now - through + 3599) / 3600;
                println!(
                    "the daily reconciler last saw the ledger settled through {}: {}",
                    iso(through),
                    if hours <= reach_hours {
                        format!("it reads from there until a run settles; the same reach here: --hours {hours}")
                    } else {
                        format!("beyond the {reach_hours} hours it reads again, it closes nothing until those days are reconciled here (--hours {}) and vouched for (ledger close --vouch)", hours.min(24 * 399))
                    }
                );
            }
            Ok(_) => {}
            Err(e) => println!("(where the daily reconciler reads from is unknown: {e})"),
        }
        // A suspected duplicate new in the window needs a person, as in the daily run.
        Ok(report.holds_since(report.window.0) && ledger.holds())
    })
}

pub fn parked(command: &ParkedCommand, json: bool, target: &Target) -> anyhow::Result<bool> {
    let ParkedCommand::List { account } = command;
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, servicing_store::APPLIER),
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

pub fn send(args: &SendArgs, target: &Target) -> anyhow::Result<bool> {
    let lines = read_lines(&args.events)?;
    runtime()?.block_on(async {
        let target = target.resolve(Some(&args.queue)).await?;
        let refusals = replay::check(&target.dynamodb(), &target.table, &lines).await?;
        for r in &refusals {
            eprintln!("line {}: {}", r.line, r.reason);
        }
        if !refusals.is_empty() && !args.allow_beyond_retention {
            eprintln!("refused: {} facts may apply twice; nothing was sent (--allow-beyond-retention after checking them)", refusals.len());
            return Ok(false);
        }
        let queue = target.queue()?;
        let operator = target.authorize(&args.change, args.dry_run).await?;
        if args.dry_run {
            println!("would send {} messages to {queue} (dry run: nothing sent)", lines.len());
            return Ok(true);
        }
        let sent = replay::send(&target.sqs(), queue, &lines, &operator).await?;
        println!("sent {sent} messages to {queue} (by {operator})");
        Ok(true)
    })
}

pub fn close(args: &CloseArgs, target: &Target) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        let target = target.resolve(Some(&args.queue)).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, "aging"),
        );
        let queue = if args.dry_run { "" } else { target.queue()? };
        let operator = target.authorize(&args.change, args.dry_run).await?;
        let close = aging::close_day(
            &store,
            &target.sqs(),
            queue,
            args.date,
            args.dry_run,
            &operator,
        )
        .await?;
        if args.dry_run {
            for account in &close.accounts {
                println!("{account}");
            }
        }
        println!("{} (by {operator})", close.line());
        Ok(true)
    })
}

pub fn log(command: &LogCommand, target: &Target) -> anyhow::Result<bool> {
    let LogCommand::Backfill { dry_run, change } = command;
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let operator = target.authorize(change, *dry_run).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, "ledgerctl"),
        );
        let done = servicing_ops::backfill::record_log(&store, *dry_run).await?;
        println!(
            "facts' records: {} to list, {} that do not decode (not listed); ledger items: {} to list, {} that do not decode (listed by their account, for the next reconciliation to report); {} (by {operator})",
            done.records,
            done.undecodable,
            done.ledger_items,
            done.undecodable_ledger_items,
            if *dry_run {
                "dry run: nothing written".to_owned()
            } else {
                format!("{} log items written", done.items)
            }
        );
        Ok(done.undecodable + done.undecodable_ledger_items == 0)
    })
}

pub fn open(command: &OpenCommand, target: &Target) -> anyhow::Result<bool> {
    let OpenCommand::Backfill { dry_run, change } = command;
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let operator = target.authorize(change, *dry_run).await?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, "ledgerctl"),
        );
        let done = servicing_ops::backfill::open_index(&store, *dry_run).await?;
        let [loans, actions, accepted] = done.found;
        let [w_loans, w_actions, w_accepted] = done.written;
        println!(
            "open items without index keys: {loans} loans holding parked facts, {actions} unsettled actions, {accepted} accepted API payments; {} (by {operator})",
            if *dry_run {
                "dry run: nothing written".to_owned()
            } else {
                format!("given their keys: {w_loans}, {w_actions}, {w_accepted}")
            }
        );
        Ok(true)
    })
}
