//! `ledgerctl replay`: a JSON Lines stream through the in-memory ledger (the domain core with
//! the full consumer semantics), printing every account's final state, the counts and a
//! reconciliation line.

use servicing_domain::Ledger;

use crate::EventsFile;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    events: EventsFile,
    /// Deliver this share of the lines a second time, each copy after its original.
    #[arg(long = "inject-duplicates", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1000))]
    duplicate_percent: u64,
    /// Seed of the duplicate placement (reproducible).
    #[arg(long, default_value_t = 7)]
    seed: u64,
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

pub fn run(args: &ReplayArgs) -> anyhow::Result<bool> {
    let input = std::fs::read(&args.events)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.events.display()))?;
    let lines: Vec<&[u8]> = input
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    let delivered = inject_duplicates(&lines, args.duplicate_percent, args.seed);
    eprintln!(
        "replaying {} lines of {} as {} deliveries",
        lines.len(),
        args.events.display(),
        delivered.len()
    );

    // The consumer's rules with this machine's clock: an event dated too far ahead is quarantined.
    let now = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
    let mut ledger = Ledger::with_clock(now, servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW);
    ledger.replay(delivered);

    let text = serde_json::to_string_pretty(&ledger.report())
        .map_err(|e| anyhow::anyhow!("cannot render the report: {e}"))?;
    println!("{text}");
    let c = ledger.counts();
    let balanced = c.balances();
    println!(
        "reconciliation: received {} + released {} = applied {} + stale {} + duplicates {} + collisions {} + quarantined {} + parked {} -> {} ({} still parked)",
        c.received,
        c.released,
        c.applied,
        c.stale,
        c.duplicates,
        c.collisions,
        c.quarantined,
        c.parked,
        if balanced { "OK" } else { "MISMATCH" },
        c.parked - c.released
    );
    Ok(balanced)
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
