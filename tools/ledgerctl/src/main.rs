//! `ledgerctl`: operator commands. For now: `replay`, which runs a JSON Lines event stream
//! through the in-memory ledger (the domain core with full consumer semantics) and prints the
//! final state of every account, the counts and a reconciliation line.

use std::process::ExitCode;

use servicing_domain::Ledger;

const USAGE: &str = "usage: ledgerctl replay <events.jsonl> [--retry-budget N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("replay") => replay(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn replay(args: &[String]) -> ExitCode {
    let (path, budget) = match args {
        [path] => (path, 5),
        [path, flag, n] if flag == "--retry-budget" => match n.parse() {
            Ok(n) => (path, n),
            Err(_) => {
                eprintln!("--retry-budget must be a whole number, got {n:?}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let input = match std::fs::read(path) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let lines = input
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace));

    let mut ledger = Ledger::new();
    ledger.replay(lines, budget);

    let report = ledger.report();
    match serde_json::to_string_pretty(&report) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("cannot render the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    let c = ledger.counts();
    let accounted = c.applied + c.stale + c.duplicates + c.collisions + c.quarantined + c.deferred;
    let balanced = accounted == c.received;
    eprintln!(
        "reconciliation: received {} = applied {} + stale {} + duplicates {} + collisions {} + quarantined {} + deferred {} -> {}",
        c.received,
        c.applied,
        c.stale,
        c.duplicates,
        c.collisions,
        c.quarantined,
        c.deferred,
        if balanced { "OK" } else { "MISMATCH" }
    );
    if balanced {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
