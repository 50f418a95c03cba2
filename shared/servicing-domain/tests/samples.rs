//! The contract's sample streams reach their expected final state exactly, also with
//! re-serialised duplicates injected.

mod common;

use common::{fixture, lines};
use serde_json::Value;
use servicing_domain::Ledger;

fn replay(bodies: &[String]) -> Ledger {
    let mut ledger = Ledger::new();
    ledger.replay(bodies.iter().map(|b| b.as_bytes()));
    ledger
}

/// Checks the single-account report against an `*.expected.json` fixture, field by field.
fn assert_matches_expected(ledger: &Ledger, expected: &Value, expected_duplicates: u64) {
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
                        Value::from(expected_duplicates)
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
const SAMPLES: [&str; 2] = ["basic", "delinquent"];

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
        // A transport re-serialises (pretty-printed, keys in another order) and adds its own id.
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(line).expect("json");
        v.insert("eventId".into(), Value::from("transport-xyz"));
        let reordered: serde_json::Map<String, Value> = v.into_iter().rev().collect();
        stream.push(serde_json::to_string_pretty(&reordered).expect("json"));
    }
    let ledger = replay(&stream);
    assert_matches_expected(&ledger, &expected, originals.len() as u64);
}
