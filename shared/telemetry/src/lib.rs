//! Counters as CloudWatch Embedded Metric Format: one JSON line on stdout per batch, turned into
//! metrics by CloudWatch Logs without any API call, plus one structured log line with the same
//! numbers for people reading logs.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "LoanServicing";

/// The EMF document for `counts`, with the `Consumer` dimension.
pub fn emf_document(consumer: &str, counts: &[(&str, u64)], timestamp_millis: u64) -> Value {
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_millis,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Consumer"]],
                "Metrics": counts.iter().map(|(name, _)| json!({"Name": name, "Unit": "Count"})).collect::<Vec<_>>(),
            }],
        }),
    );
    doc.insert("Consumer".into(), json!(consumer));
    for (name, value) in counts {
        doc.insert((*name).to_owned(), json!(value));
    }
    Value::Object(doc)
}

/// Prints the EMF line and logs the same counts once.
pub fn emit(consumer: &str, counts: &[(&str, u64)]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    // EMF must be a line of its own on stdout.
    println!("{}", emf_document(consumer, counts, now));
    let fields: Map<String, Value> = counts
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    let counts = Value::Object(fields).to_string();
    tracing::info!(consumer, counts, "batch done");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_counts_are_rendered_should_declare_every_metric_with_its_value() {
        let doc = emf_document(
            "account-state",
            &[("Applied", 3), ("Duplicate", 1)],
            1_700_000_000_000,
        );
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "Duplicate"
        );
        assert_eq!(doc["Applied"], 3);
        assert_eq!(doc["Consumer"], "account-state");
    }
}
