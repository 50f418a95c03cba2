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
//! - `send`, `close`, `quarantine redrive`, `dlq redrive`, `outbox republish`: change things;
//!   each has `--dry-run`.
//!
//! Exit status: 0 when the command did what it says and its invariant holds, 1 when not (or
//! it failed), 2 for a command line it cannot parse.

mod incident;
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
    about = "Operator commands of the loan-servicing consumers",
    after_help = "Locally: `source .local/env` (written by infra/demo.sh), then e.g. `ledgerctl parked list`.\nOn AWS: `ledgerctl --help` per command; pass --stack NAME (the stack's outputs name the table and queues)."
)]
struct Cli {
    /// Print JSON instead of text (list, inspect and lookup commands).
    #[arg(long, global = true)]
    json: bool,
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
    /// Close a business day by hand (the daily aging job's work, for a day the schedule
    /// missed): one BUSINESS_DAY_CLOSED per account in arrears; --dry-run lists them.
    Close(ops::CloseArgs),
}

fn account_id(value: &str) -> Result<AccountId, String> {
    AccountId::parse(value).map_err(|e| e.to_string())
}

/// The events file of `replay`, `reconcile --source` and `send`.
type EventsFile = PathBuf;

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
    let outcome = match cli.command {
        Command::Replay(args) => replay::run(&args),
        Command::State(args) => state::run(&args),
        Command::Reconcile(args) => ops::reconcile(&args),
        Command::Incident(args) => incident::run(&args),
        Command::Parked(command) => ops::parked(&command, json),
        Command::Quarantine(command) => quarantine::quarantine(&command, json),
        Command::Actions(command) => runbook::actions(&command, json),
        Command::Payment(args) => runbook::payment(&args, json),
        Command::Dlq(command) => runbook::dlq(&command, json),
        Command::Outbox(command) => runbook::outbox(&command),
        Command::Send(args) => ops::send(&args),
        Command::Close(args) => ops::close(&args),
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
