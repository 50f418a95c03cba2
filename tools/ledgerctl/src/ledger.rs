//! `ledgerctl ledger show | close | correct | backfill | migrate`: the accounting sub-ledger (`docs/ledger.md`).

use chrono::NaiveDate;
use ledger_postings::LedgerPostingsHandler;
use servicing_domain::AccountId;
use servicing_domain::journal::Posting;
use servicing_ops::money::minor;
use servicing_store::{ServicingStore, StoreConfig};

use crate::ops::runtime;
use crate::target::{Change, Target};

#[derive(Debug, clap::Subcommand)]
pub enum LedgerCommand {
    /// An account's sub-ledger: its balances and every entry (posting date, business date,
    /// what caused it, its transfers), e.g. `ledgerctl ledger show --account acc_1001`.
    Show {
        #[arg(long, value_parser = crate::account_id)]
        account: AccountId,
    },
    /// Close the accounting periods up to a day: a later event dated in them is posted to the
    /// first open day, its business date kept (a backdated posting). A close never reopens a
    /// period. E.g. `ledgerctl ledger close --through 2026-11-30`.
    Close {
        /// The last day to close (UTC), e.g. `--through 2026-11-30`.
        #[arg(long, value_name = "DATE")]
        through: NaiveDate,
        /// Also vouch for those days: the daily reconciler, which has not seen the ledger settle
        /// since before them, reads from the day after instead (recorded with your identity).
        /// Only after reconciling them by hand (`ledgerctl reconcile --money --hours N`).
        #[arg(long)]
        vouch: bool,
        /// Say what would be closed; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
    /// Post an operator's correcting entry on one account: one transfer between two ledger
    /// accounts (never cash clearing), under an id you choose for the account (the same command
    /// again posts nothing; the id with anything else is refused), stamped with your identity
    /// and reason; a dry run reads what the post would find.
    /// Entries are never edited or deleted: this is how a person changes the ledger. E.g.
    /// `ledgerctl ledger correct --account acc_1001 --id fee-twice-2026-12-01 --debit
    /// 4100:fee_income --credit 1120:fees_receivable --amount-minor 500 --reason "fee assessed
    /// twice" --dry-run`.
    Correct {
        #[command(flatten)]
        order: ledgerctl::ledger_correct::CorrectionOrder,
        /// Say what would be posted; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
    /// Post what servicing published that the ledger has not posted (a consumer added later,
    /// or back after its queue's retention), through the ledger's own handler; other consumers
    /// are not touched, and events already posted post nothing. Reads every fact's record (a
    /// one-off). E.g. `ledgerctl ledger backfill --dry-run`.
    Backfill {
        /// Only these accounts' events, e.g. `--account acc_1001` (repeatable).
        #[arg(long, value_parser = crate::account_id)]
        account: Vec<AccountId>,
        /// Count the events; post nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
    /// Open the ledger of accounts older than what its events can bring (the bus's archive,
    /// the facts' records): posts every event servicing still holds for them, then one opening
    /// balance each (`open_<account>`, once per account, ever) moving the rest of servicing's
    /// balances — receivables and customer credit — against 3000:opening_balances, as of the
    /// loan version read; a fact applied meanwhile refuses it (run again). Replay the archive
    /// first. E.g. `ledgerctl ledger migrate --account acc_1001 --reason "ledger deployed onto
    /// older history" --dry-run`.
    Migrate {
        /// The accounts, e.g. `--account acc_1001` (repeatable).
        #[arg(long, value_parser = crate::account_id, required = true)]
        account: Vec<AccountId>,
        /// Why: kept on each opening entry for good.
        #[arg(long)]
        reason: String,
        /// Say what would be posted; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

pub fn ledger(command: &LedgerCommand, json: bool, target: &Target) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let store = ServicingStore::new(
            target.dynamodb(),
            StoreConfig::new(&target.table, ledger_postings::CONSUMER),
        );
        match command {
            LedgerCommand::Show { account } => show(&store, account, json).await,
            LedgerCommand::Close {
                through,
                vouch,
                dry_run,
                change,
            } => {
                // A close never reopens: a day not over yet (UTC) cannot be closed by a typo.
                let today = chrono::DateTime::from_timestamp(servicing_ops::epoch_seconds(), 0)
                    .map(|t| t.date_naive())
                    .unwrap_or_default();
                if *through >= today {
                    anyhow::bail!(
                        "--through {through}: only days that are over can be closed (today is {today}, UTC)"
                    );
                }
                let end = through
                    .succ_opt()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .map(|t| t.and_utc().timestamp())
                    .ok_or_else(|| anyhow::anyhow!("--through {through}: no day after it"))?;
                let operator = target.authorize(change, *dry_run).await?;
                let closed = store.closed_through_any().await?;
                // What the daily reconciler has checked: a close does not vouch for more unless
                // asked to.
                let settled = store.ledger_settled_through().await?;
                let unsettled = settled.is_some_and(|at| at < end);
                let settled_line = match settled {
                    Some(at) if unsettled => format!(
                        "the daily reconciler has seen the ledger settled only through {}",
                        servicing_ops::iso(at)
                    ),
                    Some(at) => format!(
                        "the daily reconciler has seen the ledger settled through {}",
                        servicing_ops::iso(at)
                    ),
                    None => "the daily reconciler has not run yet".to_owned(),
                };
                if *dry_run {
                    println!(
                        "closed through {}; would close through {through}{}; {settled_line} (dry run: nothing written)",
                        closed.map_or("nothing".to_owned(), |d| d.to_string()),
                        if *vouch { " and vouch for it" } else { "" }
                    );
                    return Ok(true);
                }
                let newly = store.close_ledger_period(*through).await?;
                if newly {
                    println!("ledger closed through {through} (by {operator}); {settled_line}");
                } else {
                    println!(
                        "already closed through {} (a close never reopens a period); {settled_line}",
                        closed.map_or("?".to_owned(), |d| d.to_string())
                    );
                }
                // Tried whether or not the close was new: a vouch that failed after its close
                // is made by running the command again.
                if *vouch {
                    if store.advance_ledger_settled(end, Some(&operator)).await? {
                        println!(
                            "vouched: the daily reconciler reads the ledger from {} (by {operator})",
                            servicing_ops::iso(end)
                        );
                    } else {
                        println!("vouched already: the daily reconciler reads from later");
                    }
                } else if unsettled {
                    println!(
                        "not vouched: the daily reconciler keeps reading from where it last saw the ledger settled (--vouch, once those days are reconciled by hand)"
                    );
                }
                Ok(newly || *vouch)
            }
            LedgerCommand::Correct {
                order,
                dry_run,
                change,
            } => {
                let operator = target.authorize(change, *dry_run).await?;
                let handler = LedgerPostingsHandler::for_operators(store.clone());
                // Posted, posted before or a dry run: done (a refusal is an error).
                let (_, line) =
                    ledgerctl::ledger_correct::correct(&handler, &store, order, &operator, *dry_run)
                        .await?;
                println!("{line}");
                Ok(true)
            }
            LedgerCommand::Backfill {
                account,
                dry_run,
                change,
            } => {
                let operator = target.authorize(change, *dry_run).await?;
                let accounts: Vec<String> = account.iter().map(|a| a.as_str().to_owned()).collect();
                let events =
                    ledgerctl::ledger_backfill::published_events(store.client(), &target.table, &accounts)
                        .await?;
                let handler = LedgerPostingsHandler::for_operators(store.clone());
                let done = ledgerctl::ledger_backfill::backfill(&handler, &events, *dry_run).await;
                println!(
                    "{}{} (by {operator})",
                    done.line(),
                    if *dry_run { " (dry run: nothing posted)" } else { "" }
                );
                Ok(done.failed == 0 && done.quarantined == 0)
            }
            LedgerCommand::Migrate {
                account,
                reason,
                dry_run,
                change,
            } => {
                let operator = target.authorize(change, *dry_run).await?;
                let handler = LedgerPostingsHandler::for_operators(store.clone());
                let done = ledgerctl::ledger_migrate::migrate(
                    &handler, &store, account, reason, &operator, *dry_run,
                )
                .await?;
                for migration in &done {
                    println!("{}", migration.line());
                }
                println!("(by {operator})");
                Ok(done.iter().all(|m| m.outcome.is_ok()))
            }
        }
    })
}

async fn show(store: &ServicingStore, account: &AccountId, json: bool) -> anyhow::Result<bool> {
    let journal = store.journal(account).await?;
    let mut postings: Vec<Posting> = journal
        .entries
        .iter()
        .map(|e| e.posting())
        .collect::<Result<_, _>>()?;
    postings.sort_by(|a, b| {
        (a.posting_date, a.entry.effective_at, &a.entry.entry_id).cmp(&(
            b.posting_date,
            b.entry.effective_at,
            &b.entry.entry_id,
        ))
    });
    if json {
        let out = serde_json::json!({
            "accountId": account.as_str(),
            "balances": journal.balances.as_ref().map(|b| &b.balances),
            "currency": journal.balances.as_ref().and_then(|b| b.currency).map(|c| c.as_str().to_owned()),
            "entries": postings,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(journal.balances.is_some());
    }
    let Some(balances) = &journal.balances else {
        println!("{account}: nothing posted");
        return Ok(false);
    };
    let currency = balances
        .currency
        .map(|c| c.as_str().to_owned())
        .unwrap_or_default();
    println!(
        "{account} ({currency}), {} entries, version {}",
        balances.entries, balances.version
    );
    for (code, balance) in &balances.balances {
        println!("  {code:<32} {:>14}", minor(*balance));
    }
    for p in &postings {
        let e = &p.entry;
        let backdated = if p.posting_date != e.effective_at.date_naive() {
            format!(
                " (business date {}: its period was closed)",
                e.effective_at.date_naive()
            )
        } else {
            String::new()
        };
        println!(
            "{} {} {} from {}{}{}",
            p.posting_date,
            e.entry_id,
            e.event_type,
            e.trigger,
            e.reverses
                .as_ref()
                .map(|r| format!(", reverses {r}"))
                .unwrap_or_default(),
            backdated
        );
        if let Some(c) = &e.correction {
            println!("    posted by {}: {}", c.by, c.reason);
        }
        for t in &e.transfers {
            println!(
                "    Dr {:<32} Cr {:<32} {:>12}",
                t.debit.code(),
                t.credit.code(),
                minor(t.amount_minor)
            );
        }
    }
    Ok(true)
}
