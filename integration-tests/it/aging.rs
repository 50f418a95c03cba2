//! Business days close (contract: "Business days close, so a silent account still ages"): the
//! aging sample through the consumer on both engines, whatever duplicates are injected.

use futures_util::StreamExt;
use integration_tests::servicing::{Servicing, assert_state_matches, fixture, sqs_message};
use integration_tests::{Engine, Rng};
use serde_json::Value;
use servicing_consumer::MessageResult;

on_both_engines!(
    when_the_aging_sample_is_delivered_with_duplicates_anywhere_should_reach_its_expected_state,
);

/// Delivery orders per engine.
const CASES: u64 = 12;

async fn when_the_aging_sample_is_delivered_with_duplicates_anywhere_should_reach_its_expected_state(
    engine: Engine,
) {
    let expected: Value = serde_json::from_str(&fixture("aging.expected.json")).expect("json");
    let lines: Vec<String> = fixture("aging.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    let cases = (0..CASES).map(|seed| {
        let (expected, lines) = (&expected, &lines);
        async move {
            let servicing = Servicing::with_stream(engine, false).await;
            let mut rng = Rng(seed * 48_271 + 11);
            // Copies of random lines land anywhere after their original: the distinct
            // events keep their order (the sample's own order, a stale close included).
            let mut stream = lines.clone();
            let copies = if seed == 0 {
                0
            } else {
                1 + rng.below(lines.len())
            };
            for _ in 0..copies {
                let line = lines[rng.below(lines.len())].clone();
                let first = stream.iter().position(|l| *l == line).unwrap_or(0);
                let at = first + 1 + rng.below(stream.len() - first);
                stream.insert(at, line);
            }
            let handler = servicing.handler();
            let (mut applied, mut stale, mut duplicates) = (0, 0, 0);
            let mut next = 0;
            while next < stream.len() {
                let take = (1 + rng.below(4)).min(stream.len() - next);
                let messages: Vec<_> = stream[next..next + take]
                    .iter()
                    .enumerate()
                    .map(|(i, body)| sqs_message(&format!("m{}", next + i), body, 1))
                    .collect();
                next += take;
                for (_, result) in handler.process(&messages).await.results {
                    match result {
                        MessageResult::Applied => applied += 1,
                        MessageResult::Stale => stale += 1,
                        MessageResult::Duplicate => duplicates += 1,
                        other => panic!("{engine:?} case {seed}: {other:?}"),
                    }
                }
            }
            let context = format!("{engine:?} case {seed} ({copies} copies)");
            let counts = &expected["counts"];
            assert_eq!(
                (applied, stale, duplicates),
                (
                    counts["applied"].as_u64().unwrap_or_default(),
                    counts["stale"].as_u64().unwrap_or_default(),
                    counts["duplicates"].as_u64().unwrap_or_default() + copies as u64
                ),
                "{context}"
            );
            let account = expected["accountId"].as_str().expect("account");
            let report = servicing.account_report(account).await;
            assert_state_matches(&report, expected, &context);
            servicing.drop_table().await;
        }
    });
    futures_util::stream::iter(cases)
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
}
