//! `ledgerctl`: operator commands (`ledgerctl --help`, `ledgerctl <command> --help`).
//!
//! Every command that touches AWS first prints on stderr what it acts on (endpoint, region,
//! account, table): the table and queue come from `--table`/`--queue`, else from `--stack`'s
//! outputs, else from the environment (`source .local/env` exports the local stack's).
//!
//! - `replay`: a JSON Lines stream through the in-memory ledger (no AWS).
//! - `state`, `reconcile`, `incident`: what is stored, whether it reconciles, what a window did.
//! - `parked`, `quarantine`, `actions`, `payment`: look things up (`ops.rs`, `quarantine.rs`,
//!   `runbook.rs`).
//! - `ledger show`: an account's accounting sub-ledger (`ledger.rs`).
//! - `send`, `close`, `quarantine redrive`, `dlq redrive`, `outbox republish`, `open backfill`,
//!   `log backfill`, `ledger close`, `ledger backfill`: change things;
//!   each has `--dry-run`.
//!
//! Exit status: 0 when the command did what it says and its invariant holds, 1 when not (or
//! it failed), 2 for a command line it cannot parse.

mod incident;
mod ledger;
mod ops;
mod quarantine;
mod replay;
mod runbook;
mod state;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use servicing_domain::AccountId;

#[derive(Debug, Parser)]
#[command(
    name = "ledgerctl",
    version,
    about = "Operator commands of the loan-servicing consumers",
    after_help = "Locally: `source .local/env` (written by infra/demo.sh), then e.g. `ledgerctl parked list`.\nOn AWS: `ledgerctl --help` per command; pass --stack NAME (the stack's outputs name the table and queues)."
)]
struct Cli {
    /// Print JSON instead of text (list, inspect and lookup commands).
    #[arg(long, global = true)]
    json: bool,
    /// Where the commands that touch AWS act: before or after the command, e.g.
    /// `ledgerctl --stack loan-servicing-prod reconcile --money`.
    #[command(flatten)]
    target: target::Target,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a JSON Lines stream through the in-memory ledger; print every account, the counts
    /// and a reconciliation line. Facts that wait for another are parked and applied right
    /// after it.
    Replay(replay::ReplayArgs),
    /// Print an account as stored; with --expect, exit 1 unless every state field matches.
    State(state::StateArgs),
    /// SourceEventCount -> CanonicalUniqueEventCount -> AppliedBusinessEventCount and the money
    /// checks over a window; exit 1 unless the identity holds.
    Reconcile(ops::ReconcileArgs),
    /// What a window's deliveries did, account by account: each fact's verdict, duplicates
    /// absorbed, collisions with both payloads, money applied with its split, bucket changes,
    /// collections actions, suspected duplicates under different identities; totals and an
    /// evidence manifest (JSON or HTML).
    Incident(incident::IncidentArgs),
    /// Parked facts: their account, identity, since when, and what they wait for.
    #[command(subcommand)]
    Parked(ops::ParkedCommand),
    /// Quarantined messages: list, inspect, redrive with their original identity.
    #[command(subcommand)]
    Quarantine(quarantine::QuarantineCommand),
    /// Collections actions: list (by account, by status), inspect one.
    #[command(subcommand)]
    Actions(runbook::ActionsCommand),
    /// What happened to an API payment: its idempotency record, its fact, its allocation.
    Payment(runbook::PaymentArgs),
    /// Dead-letter queues: peek, redrive to the queue they came from.
    #[command(subcommand)]
    Dlq(runbook::DlqCommand),
    /// The outbox: republish the events of records written in a window (after the relay gave
    /// up on a stream batch: the stream has dropped it by then).
    #[command(subcommand)]
    Outbox(runbook::OutboxCommand),
    /// Replay a stream to the servicing queue; refuses facts whose claim is missing or expires
    /// before the queue may deliver them (up to 14 days): they could apply twice.
    Send(ops::SendArgs),
    /// The open index (what the daily run reads): backfill items written before it.
    #[command(subcommand)]
    Open(ops::OpenCommand),
    /// The record log (what a window's reconciliation reads): list records written before it.
    #[command(subcommand)]
    Log(ops::LogCommand),
    /// The accounting sub-ledger: an account's entries, closing periods, backfilling.
    #[command(subcommand)]
    Ledger(ledger::LedgerCommand),
    /// Close a business day by hand (the daily aging job's work, for a day the schedule
    /// missed): one BUSINESS_DAY_CLOSED per account in arrears; --dry-run lists them.
    Close(ops::CloseArgs),
}

fn account_id(value: &str) -> Result<AccountId, String> {
    AccountId::parse(value).map_err(|e| e.to_string())
}

/// The events file of `replay`, `reconcile --source` and `send`.
type EventsFile = PathBuf;

/// An `--account` filter: an account id as the contract spells one (a typo with a space or a
/// stray character is an error, not a filter that silently matches nothing).
fn account(text: &str) -> Result<String, String> {
    account_id(text)
        .map(|a| a.as_str().to_owned())
        .map_err(|e| format!("{text:?} is not an account id: {e}"))
}

/// A time as operators type it: RFC 3339 / ISO 8601 (`2026-11-02T10:00:00Z`, an offset, or a
/// date for its midnight UTC).
fn time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Some(t) = servicing_ops::incident::records::parse_time(text) {
        return Ok(t);
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            format!("{text:?} is not an ISO 8601 time such as 2026-11-02T10:00:00Z or 2026-11-02")
        })
}

use servicing_ops::iso;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let target = &cli.target;
    let outcome = match cli.command {
        Command::Replay(args) => replay::run(&args),
        Command::State(args) => state::run(&args, target),
        Command::Reconcile(args) => ops::reconcile(&args, target),
        Command::Incident(args) => incident::run(&args, target),
        Command::Parked(command) => ops::parked(&command, json, target),
        Command::Quarantine(command) => quarantine::quarantine(&command, json, target),
        Command::Actions(command) => runbook::actions(&command, json, target),
        Command::Payment(args) => runbook::payment(&args, json, target),
        Command::Dlq(command) => runbook::dlq(&command, json, target),
        Command::Outbox(command) => runbook::outbox(&command, target),
        Command::Send(args) => ops::send(&args, target),
        Command::Close(args) => ops::close(&args, target),
        Command::Open(command) => ops::open(&command, target),
        Command::Log(command) => ops::log(&command, target),
        Command::Ledger(command) => ledger::ledger(&command, json, target),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(problem) => {
            eprintln!("{problem:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::Cli;

    /// Flags that take a value, and what an operator would type when a doc names the flag alone
    /// (`--from --to`) or with a one-letter placeholder.
    fn value_for(flag: &str) -> Option<&'static str> {
        Some(match flag {
            "--from" | "--to" | "--since" => "2026-11-02T10:00:00Z",
            "--date" => "2026-11-02",
            "--table" => "loan-servicing-ServicingTable-1A2B3C4D",
            "--stack" | "--confirm" => "loan-servicing-prod",
            "--queue" => "https://sqs.eu-west-1.amazonaws.com/111122223333/servicing.fifo",
            "--account" => "acc_1001",
            "--source-system" => "psp",
            "--code" => "collision",
            "--consumer" => "account-state",
            "--caller" => "arn:aws:iam::111122223333:user/alice",
            "--key" => "order-7781",
            "--records" => "./records",
            "--out" | "--expect" => "out.json",
            "--format" => "json",
            "--settlement" | "--source" => "file.csv",
            "--status" => "pending",
            "--event-bus" => "bus",
            "--hours"
            | "--max"
            | "--seed"
            | "--inject-duplicates"
            | "--grace-minutes"
            | "--action-grace-minutes"
            | "--retention-days"
            | "--lookback-minutes" => "10",
            _ => return None,
        })
    }

    /// A placeholder of the docs' synopses, as an operator fills it.
    fn fill(word: &str, after: Option<&str>) -> Option<String> {
        let value = match word {
            "…" => return None,
            "T" | "T1" | "T2" | "D" | "A" | "S" | "N" | "C" | "F" | "K" | "URL" | "ARN" | "PCT"
            | "PATH…" | "<name>" => after.and_then(value_for).unwrap_or("x"),
            "<id>" | "<id>…" | "ID" => "account-state/2026-11-02/1762077600000/m-1",
            "ACCOUNT" | "<accountId>" => "acc_1001",
            "<events.jsonl>" => "events.jsonl",
            _ => word,
        };
        Some(value.to_owned())
    }

    /// The argv of a doc's command line: optional parts kept, the first of alternatives, every
    /// placeholder filled, a value after a flag named alone.
    fn argv(line: &str) -> Vec<String> {
        let line = line
            .replace(['[', ']'], "")
            .replace("<the bucket's objects>", "./records");
        let mut words: Vec<String> = Vec::new();
        let tokens: Vec<&str> = line.split_whitespace().collect();
        for (i, token) in tokens.iter().enumerate() {
            let token = token.split("\\|").next().unwrap_or(token);
            let token = token.split('|').next().unwrap_or(token);
            let previous = words.last().map(String::as_str);
            if let Some(word) = fill(token, previous) {
                words.push(word);
            }
            let next = tokens.get(i + 1).copied();
            let named_alone = next.is_none_or(|n| n.starts_with("--"));
            if let Some(value) = value_for(token).filter(|_| named_alone) {
                words.push(value.to_owned());
            }
        }
        words
    }

    #[test]
    fn when_the_docs_show_a_command_line_should_parse_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut pages = vec![root.join("README.md")];
        for entry in std::fs::read_dir(root.join("docs")).expect("docs") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
        let mut checked = 0;
        let mut failures = Vec::new();
        for page in &pages {
            let text = std::fs::read_to_string(page).expect("page");
            for span in text.split('`').skip(1).step_by(2) {
                let Some(line) = span
                    .strip_prefix("target/debug/ledgerctl ")
                    .or_else(|| span.strip_prefix("ledgerctl "))
                else {
                    continue;
                };
                if line.contains("<command>") {
                    continue;
                }
                let mut args = vec!["ledgerctl".to_owned()];
                args.extend(argv(line));
                // A command named alone (`ledgerctl send`) must exist: its help parses.
                let mention =
                    !line.contains(' ') || !line.contains('-') && line.split(' ').count() <= 2;
                if mention {
                    args.push("--help".into());
                }
                checked += 1;
                match Cli::try_parse_from(&args) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                        ) => {}
                    Err(e) => failures.push(format!(
                        "{}: `ledgerctl {line}` as {args:?}: {}",
                        page.file_name().unwrap_or_default().to_string_lossy(),
                        e.kind()
                    )),
                }
            }
        }
        assert!(
            checked > 40,
            "only {checked} command lines found in the docs"
        );
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn when_the_target_comes_before_or_after_the_command_should_parse_both() {
        for args in [
            ["ledgerctl", "--stack", "s", "reconcile", "--money"],
            ["ledgerctl", "reconcile", "--money", "--stack", "s"],
        ] {
            let cli = Cli::try_parse_from(args).expect("parses");
            assert!(cli.target.named(), "{args:?}");
        }
        let version = Cli::try_parse_from(["ledgerctl", "--version"]).expect_err("prints");
        assert_eq!(version.kind(), ErrorKind::DisplayVersion);
        let typo = Cli::try_parse_from(["ledgerctl", "actions", "list", "--status", "pendng"])
            .expect_err("a typo is an error");
        assert_eq!(typo.kind(), ErrorKind::InvalidValue);
        assert!(
            typo.to_string().contains("pending"),
            "lists the values: {typo}"
        );
    }

    /// Every filter is checked: a quarantine code out of the closed set (listing the codes),
    /// an account id no account can have.
    #[test]
    fn when_a_filter_holds_a_typo_should_refuse_it() {
        let list = |flag: &str, value: &str| {
            Cli::try_parse_from(["ledgerctl", "quarantine", "list", flag, value])
        };
        assert!(list("--code", "event_time_in_future").is_ok());
        let typo = list("--code", "colision").expect_err("not a code");
        assert_eq!(typo.kind(), ErrorKind::InvalidValue);
        assert!(typo.to_string().contains("collision"), "{typo}");
        assert!(list("--account", "acc_1001").is_ok());
        let typo = list("--account", "acc 1001").expect_err("not an account id");
        assert_eq!(typo.kind(), ErrorKind::ValueValidation);
        for args in [
            ["ledgerctl", "parked", "list", "--account", "acc/1"],
            ["ledgerctl", "actions", "list", "--account", "acc 1"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        // A consumer or a dead-letter queue out of the stack's set, before anything is read.
        let window = [
            "--from",
            "2026-11-02T10:00:00Z",
            "--to",
            "2026-11-02T11:00:00Z",
        ];
        let incident = |consumer: &str| {
            let mut args = vec!["ledgerctl", "incident", "--consumer", consumer];
            args.extend(window);
            Cli::try_parse_from(args)
        };
        assert!(incident("ledger-postings").is_ok());
        let typo = incident("acount-state").expect_err("not a consumer");
        assert_eq!(typo.kind(), ErrorKind::InvalidValue);
        assert!(typo.to_string().contains("account-state"), "{typo}");
        let dlq = |name: &str| Cli::try_parse_from(["ledgerctl", "dlq", "peek", name]);
        assert!(dlq("ledger").is_ok());
        assert!(dlq("https://sqs.eu-west-1.amazonaws.com/111122223333/dlq.fifo").is_ok());
        let typo = dlq("servcing").expect_err("not a DLQ");
        assert_eq!(typo.kind(), ErrorKind::ValueValidation);
        assert!(
            typo.to_string().contains("servicing, collections"),
            "{typo}"
        );
    }
}
