//! What a fact writes, by AWS's billing rules (`integration_tests::capacity`): one record per
//! fact, under 1 KB when it carries one event, so a first-time fact costs 2 WCU for its record
//! plus its share of the loan write — measured on the items the engines actually store.

use std::collections::BTreeMap;

use integration_tests::Engine;
use integration_tests::capacity::{item_json, item_size};
use integration_tests::servicing::Servicing;

on_both_engines!(when_the_samples_are_applied_should_keep_each_fact_record_within_its_kb_budget);

async fn when_the_samples_are_applied_should_keep_each_fact_record_within_its_kb_budget(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    for sample in ["basic.jsonl", "delinquent.jsonl", "aging.jsonl"] {
        servicing.deliver_fixture(sample).await;
    }
    // Per fact type and number of events carried, the largest record.
    let mut largest: BTreeMap<(String, usize), (usize, String)> = BTreeMap::new();
    for item in servicing.items_of_type("CLAIM").await {
        let json = item_json(&item);
        // A payment is listed through its account's ledger: its record is in no index (an
        // index write is 1 WCU more per payment, 0.40 per fact at 40 % payments). Only one of
        // no money, which the ledger does not post, is (the samples have none).
        assert!(
            json.get("allocatedTo").is_none(),
            "{} carries an index key: {json}",
            json["pk"]["S"]
        );
        let events = json["outbox"]["S"].as_str().map_or(0, |o| {
            serde_json::from_str::<Vec<serde_json::Value>>(o).map_or(0, |v| v.len())
        });
        // In Lambda a record that carries events also carries its invocation's trace header.
        let size = item_size(&json) + if events > 0 { TRACE_HEADER_BYTES } else { 0 };
        let kind = json["eventType"]["S"].as_str().unwrap_or("?").to_owned();
        let slot = largest.entry((kind, events)).or_default();
        if size > slot.0 {
            *slot = (size, json["pk"]["S"].as_str().unwrap_or("?").to_owned());
        }
    }
    assert!(
        largest.len() >= 5,
        "the samples cover the fact types: {largest:?}"
    );
    for ((kind, events), (size, pk)) in &largest {
        integration_tests::record_figure(&format!(
            "largest {kind} record with {events} event(s): {size} bytes"
        ));
        // One event (or none): under 1 KB, 2 WCU — a payment too, its allocation stored once
        // (in its PaymentApplied event). Two (the bucket moved: the fact's event and
        // DelinquencyChanged, a few times in an account's life): under 2 KB, 4 WCU.
        let limit = 1024 * (*events).max(1);
        assert!(
            *size < limit,
            "{kind}: record {pk} with {events} event(s) is {size} bytes, over {limit}"
        );
    }
}

/// `traceHeader` with a header as Lambda sets it
/// (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`).
const TRACE_HEADER_BYTES: usize = "traceHeader".len() + 74;
