//! The soak in short (issue 30; the long one is the `soak` bench binary, `docs/testing.md`):
//! three warm instances, FIFO and standard order, 30 % duplicates, random faults, instances
//! killed in the middle of a batch, the reconciler and the daily close interleaved — and no
//! difference from the in-memory ledger, verdict by verdict and account by account.

use futures_util::StreamExt;
use integration_tests::servicing::Servicing;
use integration_tests::soak::{self, SoakConfig, Tally};
use integration_tests::{Engine, record_figure};

on_both_engines!(when_production_shaped_traffic_runs_a_while_should_differ_from_the_ledger_nowhere);

/// Cases per engine (each its own table, three accounts).
const CASES: u64 = 16;

async fn when_production_shaped_traffic_runs_a_while_should_differ_from_the_ledger_nowhere(
    engine: Engine,
) {
    let cases = (0..CASES).map(|seed| async move {
        let servicing = Servicing::with_stream(engine, false).await;
        soak::run_case(&servicing, &SoakConfig::mix(1_000 + seed)).await
    });
    let mut tally = Tally::default();
    for case in futures_util::stream::iter(cases)
        .buffer_unordered(8)
        .collect::<Vec<Tally>>()
        .await
    {
        tally.add(case);
    }
    record_figure(&format!("soak (short, {engine:?}): {}", tally.line()));
    assert!(
        tally.differences.is_empty(),
        "{engine:?}: {}",
        tally.differences[..tally.differences.len().min(5)].join("\n")
    );
    // What docs/testing.md claims the short soak reaches, at least.
    assert!(
        tally.deliveries >= 500 && tally.kills >= 10 && tally.duplicates_sent >= 100,
        "{engine:?}: {}",
        tally.line()
    );
    assert!(tally.faults.iter().all(|n| *n >= 20), "{}", tally.line());
}
