//! `ledgerctl`: operator commands (`ledgerctl --help`, `ledgerctl <command> --help`).
//!
//! - `incident`: a window's deliveries account by account, from decision records (`incident.rs`).
//! - `replay`: run a JSON Lines stream through the in-memory ledger (no AWS).
//! - `state`: read an account from a deployed table (endpoint from the standard AWS variables)
//!   and optionally check it against an `*.expected.json`.
//! - `reconcile`, `parked`, `quarantine`, `send`, `close`: operations on a deployed table
//!   (`ops.rs`).
//!
//! Exit status: 0 when the command did what it says and its invariant holds, 1 when not (or
//! it failed), 2 for a command line it cannot parse.

mod incident;
mod ops;
mod replay;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use servicing_domain::AccountId;

#[derive(Debug, Parser)]
#[command(
    name = "ledgerctl",
    about = "Operator commands of the loan-servicing consumers"
)]
struct Cli {
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
    /// Parked facts: their account, identity, since when, and what they wait for.
    #[command(subcommand)]
    Parked(ops::ParkedCommand),
    /// Quarantined messages: list, inspect, redrive with their original identity.
    #[command(subcommand)]
    Quarantine(ops::QuarantineCommand),
    /// Replay a stream to the servicing queue; refuses facts whose claim is missing or expires
    /// before the queue may deliver them (up to 14 days): they could apply twice.
    Send(ops::SendArgs),
    /// Close a business day by hand (the daily aging job's work, for a day the schedule
    /// missed): one BUSINESS_DAY_CLOSED per account in arrears; --dry-run lists them.
    Close(ops::CloseArgs),
    /// What a window's deliveries did, account by account: each fact's verdict, duplicates
    /// absorbed, collisions with both payloads, money applied with its split, bucket changes,
    /// collections actions, suspected duplicates under different identities; totals and an
    /// evidence manifest (JSON or HTML).
    Incident(incident::IncidentArgs),
}

/// `--table`: the servicing table of a deployed stack.
#[derive(Debug, clap::Args)]
struct Table {
    #[arg(long)]
    table: String,
}

fn account_id(value: &str) -> Result<AccountId, String> {
    AccountId::parse(value).map_err(|e| e.to_string())
}

/// The events file of `replay`, `reconcile --source` and `send`.
type EventsFile = PathBuf;

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Replay(args) => replay::run(&args),
        Command::State(args) => state::run(&args),
        Command::Reconcile(args) => ops::reconcile(&args),
        Command::Parked(command) => ops::parked(&command),
        Command::Quarantine(command) => ops::quarantine(&command),
        Command::Send(args) => ops::send(&args),
        Command::Close(args) => ops::close(&args),
        Command::Incident(args) => incident::run(&args),
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
