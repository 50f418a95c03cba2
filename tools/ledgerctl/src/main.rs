//! `ledgerctl`: operator commands.
//!
//! - `replay`: run a JSON Lines stream through the in-memory ledger (no AWS).
//! - `state`: read an account from a deployed table (endpoint from the standard AWS variables)
//!   and optionally check it against an `*.expected.json`.
//! - `reconcile`, `quarantine`, `send`: operations (see `ops.rs`).

mod ops;
mod replay;
mod state;

use std::process::ExitCode;

const USAGE: &str = "usage:
  ledgerctl replay <events.jsonl> [--inject-duplicates PERCENT] [--seed N]
      deliver that share of the lines a second time, each copy after its original (seeded,
      reproducible); facts that wait for another are parked and applied right after it
  ledgerctl state --table TABLE <accountId> [--expect FILE.expected.json]
      print the stored account; with --expect, exit 1 unless every state field matches
  ledgerctl reconcile --table TABLE [--consumer account-state] [--hours 24] [--source FILE.jsonl]
      SourceEventCount -> CanonicalUniqueEventCount -> AppliedBusinessEventCount and the money
      checks; exit 1 unless the identity holds
  ledgerctl parked list --table TABLE
      every parked fact: its account, identity, since when, and what it waits for
  ledgerctl quarantine list --table TABLE [--consumer C]
  ledgerctl quarantine inspect --table TABLE <id>...
  ledgerctl quarantine redrive --table TABLE --queue URL <id>... [--retention-days 35] [--allow-beyond-retention]
      re-send quarantined bodies with their original identity (collisions are refused; so is an
      unclaimed fact quarantined so long ago that it may have applied since and its claim expired)
  ledgerctl send --table TABLE --queue URL FILE.jsonl [--allow-beyond-retention]
      replay a stream to the servicing queue; refuses facts whose claim is missing or expires
      before the queue may deliver them (up to 14 days): they could apply twice";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.split_first() {
        Some((command, rest)) if command == "replay" => {
            replay::parse(rest).map(|a| replay::run(&a))
        }
        Some((command, rest)) if command == "state" => state::parse(rest).map(|a| state::run(&a)),
        Some((command, rest)) if command == "reconcile" => ops::reconcile(rest),
        Some((command, rest)) if command == "quarantine" => ops::quarantine(rest),
        Some((command, rest)) if command == "parked" => ops::parked(rest),
        Some((command, rest)) if command == "send" => ops::send(rest),
        _ => Err("expected a command".to_owned()),
    };
    outcome.unwrap_or_else(|problem| {
        eprintln!("{problem}\n{USAGE}");
        ExitCode::from(2)
    })
}
