//! The contract's sample streams reach their expected final state exactly, also with
//! re-serialised duplicates injected.

mod common;

use common::{fixture, lines};
use proptest::prelude::*;
use serde_json::Value;
use servicing_domain::Ledger;

fn replay(bodies: &[String]) -> Ledger {
    let mut ledger = Ledger::new();
    ledger.replay(bodies.iter().map(|b| b.as_bytes()));
    ledger
}

/// Checks the single-account report against an `*.expected.json` fixture, field by field;
/// `injected` duplicates are delivered on top of those the sample itself holds.
fn assert_matches_expected(ledger: &Ledger, expected: &Value, injected: u64) {
    let report = ledger.report();
    let accounts = report["accounts"].as_array().expect("accounts");
    assert_eq!(accounts.len(), 1, "one account in the sample");
    let account = &accounts[0];
    for (field, want) in expected.as_object().expect("object") {
        match field.as_str() {
            "note" => {}
            "counts" => {
                for (count, want) in want.as_object().expect("counts") {
                    let want = if count == "duplicates" {
                        Value::from(want.as_u64().expect("a count") + injected)
                    } else {
                        want.clone()
                    };
                    assert_eq!(report["counts"][count], want, "counts.{count}");
                }
            }
            _ => assert_eq!(&account[field], want, "field {field}"),
        }
    }
}

/// Every `<name>.jsonl` with a `<name>.expected.json` beside it.
const SAMPLES: [&str; 3] = ["basic", "delinquent", "aging"];

#[test]
fn when_a_sample_is_replayed_in_order_should_reach_the_expected_state() {
    for name in SAMPLES {
        let expected: Value = serde_json::from_str(&fixture(&format!("{name}.expected.json")))
            .expect("expected json");
        let ledger = replay(&lines(&fixture(&format!("{name}.jsonl"))));
        assert_matches_expected(&ledger, &expected, 0);
        assert!(ledger.quarantine().is_empty(), "{name}");
    }
}

#[test]
fn when_every_line_is_delivered_twice_re_serialised_should_only_count_duplicates() {
    for name in SAMPLES {
        every_line_twice(name);
    }
}

fn every_line_twice(name: &str) {
    let expected: Value =
        serde_json::from_str(&fixture(&format!("{name}.expected.json"))).expect("expected json");
    let originals = lines(&fixture(&format!("{name}.jsonl")));
    let mut stream = Vec::new();
    for line in &originals {
        stream.push(line.clone());
        stream.push(reserialised(line, "transport-xyz"));
    }
    let ledger = replay(&stream);
    assert_matches_expected(&ledger, &expected, originals.len() as u64);
}

/// A transport's copy of `line`: pretty-printed, keys in another order, its own `eventId`.
fn reserialised(line: &str, transport_id: &str) -> String {
    let mut v: serde_json::Map<String, Value> = serde_json::from_str(line).expect("json");
    v.insert("eventId".into(), Value::from(transport_id));
    let reordered: serde_json::Map<String, Value> = v.into_iter().rev().collect();
    serde_json::to_string_pretty(&reordered).expect("json")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Any line delivered again anywhere after itself (as is, or re-serialised by a transport)
    /// is a duplicate: the sample still reaches its expected state. For `aging`, a copy of a
    /// close delivered after a later-dated event is still a duplicate, never applied late.
    #[test]
    fn when_lines_are_delivered_again_at_random_later_positions_should_reach_the_expected_state(
        sample in prop::sample::select(SAMPLES.to_vec()),
        copies in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<bool>()),
            0..24,
        ),
    ) {
        let expected: Value = serde_json::from_str(&fixture(&format!("{sample}.expected.json")))
            .expect("expected json");
        let originals = lines(&fixture(&format!("{sample}.jsonl")));
        let mut delivered: Vec<(usize, String)> = originals.iter().cloned().enumerate().collect();
        for (n, (line, offset, reserialise)) in copies.iter().enumerate() {
            let i = line.index(originals.len());
            let first = delivered.iter().position(|(j, _)| *j == i).expect("original present");
            let at = first + 1 + offset.index(delivered.len() - first);
            let body = if *reserialise {
                reserialised(&originals[i], &format!("sqs-{n}"))
            } else {
                originals[i].clone()
            };
            delivered.insert(at, (i, body));
        }
        let ledger = replay(&delivered.into_iter().map(|(_, b)| b).collect::<Vec<_>>());
        assert_matches_expected(&ledger, &expected, copies.len() as u64);
        prop_assert!(ledger.quarantine().is_empty(), "{:?}", ledger.quarantine());
    }
}
