//! `ledgerctl`: operator commands. For now: `replay`, which runs a JSON Lines event stream
//! through the in-memory ledger (the domain core with full consumer semantics) and prints the
//! final state of every account, the counts and a reconciliation line.

use std::process::ExitCode;

use servicing_domain::Ledger;

const USAGE: &str = "usage: ledgerctl replay <events.jsonl> [--inject-duplicates PERCENT] [--seed N] [--retry-budget N]

  --inject-duplicates PERCENT  deliver that share of the lines a second time, each copy somewhere
                               after its original (as SQS redelivery or a producer retry would)
  --seed N                     seed for where the copies go (default 7): runs are reproducible
  --retry-budget N             deliveries of a deferred event before it is quarantined (default 5)";

#[derive(Debug)]
struct ReplayArgs {
    path: String,
    duplicate_percent: u64,
    seed: u64,
    retry_budget: u32,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.split_first() {
        Some((command, rest)) if command == "replay" => parse_replay(rest),
        _ => Err("expected a command".to_owned()),
    };
    match parsed {
        Ok(args) => replay(&args),
        Err(problem) => {
            eprintln!("{problem}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse_replay(args: &[String]) -> Result<ReplayArgs, String> {
    let mut parsed = ReplayArgs {
        path: String::new(),
        duplicate_percent: 0,
        seed: 7,
        retry_budget: 5,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |flag: &str| -> Result<u64, String> {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            value
                .parse()
                .map_err(|_| format!("{flag} must be a whole number, got {value:?}"))
        };
        match arg.as_str() {
            "--inject-duplicates" => parsed.duplicate_percent = number(arg)?,
            "--seed" => parsed.seed = number(arg)?,
            "--retry-budget" => {
                parsed.retry_budget = u32::try_from(number(arg)?).map_err(|e| e.to_string())?
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            path if parsed.path.is_empty() => parsed.path = path.to_owned(),
            extra => return Err(format!("unexpected argument {extra:?}")),
        }
    }
    if parsed.path.is_empty() {
        return Err("missing the events file".to_owned());
    }
    Ok(parsed)
}

/// Inserts copies of `percent`% of the lines, each after its original. Deterministic per seed.
fn inject_duplicates<'a>(lines: &[&'a [u8]], percent: u64, seed: u64) -> Vec<&'a [u8]> {
    let mut state = seed.max(1);
    let mut next = move |bound: usize| -> usize {
        // xorshift64: tiny, reproducible, good enough to scatter copies.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound.max(1) as u64) as usize
    };
    let copies = (lines.len() as u64 * percent).div_ceil(100) as usize;
    let mut delivered: Vec<(usize, &[u8])> = lines.iter().copied().enumerate().collect();
    for _ in 0..copies {
        let line = next(lines.len());
        let original = delivered.iter().position(|(i, _)| *i == line).unwrap_or(0);
        let at = original + 1 + next(delivered.len() - original);
        delivered.insert(at, (line, lines[line]));
    }
    delivered.into_iter().map(|(_, body)| body).collect()
}

fn replay(args: &ReplayArgs) -> ExitCode {
    let input = match std::fs::read(&args.path) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("cannot read {}: {e}", args.path);
            return ExitCode::FAILURE;
        }
    };
    let lines: Vec<&[u8]> = input
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    let delivered = inject_duplicates(&lines, args.duplicate_percent, args.seed);
    eprintln!(
        "replaying {} lines of {} as {} deliveries",
        lines.len(),
        args.path,
        delivered.len()
    );

    let mut ledger = Ledger::new();
    ledger.replay(delivered, args.retry_budget);

    match serde_json::to_string_pretty(&ledger.report()) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("cannot render the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    let c = ledger.counts();
    let accounted = c.applied + c.stale + c.duplicates + c.collisions + c.quarantined + c.deferred;
    let balanced = accounted == c.received;
    println!(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_duplicates_are_injected_should_place_every_copy_after_its_original() {
        let lines: Vec<&[u8]> = vec![b"a", b"b", b"c", b"d"];
        let delivered = inject_duplicates(&lines, 100, 42);
        assert_eq!(delivered.len(), 8);
        for line in &lines {
            let positions: Vec<usize> = (0..delivered.len())
                .filter(|&i| delivered[i] == *line)
                .collect();
            assert!(!positions.is_empty());
        }
        // Distinct lines keep their relative order at their first occurrence.
        let mut firsts: Vec<&[u8]> = Vec::new();
        for body in &delivered {
            if !firsts.contains(body) {
                firsts.push(body);
            }
        }
        assert_eq!(firsts, lines);
        assert_eq!(
            delivered,
            inject_duplicates(&lines, 100, 42),
            "reproducible"
        );
    }
}
