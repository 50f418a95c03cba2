//! Counters as CloudWatch Embedded Metric Format: one JSON line on stdout per batch, turned into
//! metrics by CloudWatch Logs without any API call, plus one structured log line with the same
//! numbers for people reading logs.
//!
//! And the evidence of each decision: one [`DecisionRecord`] line per delivery (`decision`),
//! with per-source EMF documents computed from a batch's records (`by_source`), and the keyed
//! content key those records carry (`content_key`).

mod by_source;
pub mod content_key;
mod decision;
mod trace;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

pub use by_source::{SourceTally, bounded_source, decision_emf_documents, emit_decision_metrics};
pub use decision::{
    DECISION_RECORD_VERSION, DecidedBy, DecisionRecord, RecordKind, RecordVersion, SENT_BY,
    SENT_BY_MAX, Verdict, decision_line, decision_time, print_decision, sent_by, sent_by_of,
};

pub use content_key::{ContentKeyer, ContentParts};
pub use trace::{current_trace_id, with_trace};

pub const NAMESPACE: &str = "LoanServicing";

/// The level an EMF line declares so that Lambda's log-level filter keeps it: with JSON logs
/// Lambda drops application lines below `AWS_LAMBDA_LOG_LEVEL` and reads a line without a
/// level as INFO, so under a raised level (WARN, ERROR) the metrics would vanish. The line
/// declares the configured level itself (INFO when lower or unset), the one level always kept.
pub fn emf_level(configured: Option<&str>) -> &'static str {
    match configured.map(str::to_ascii_uppercase).as_deref() {
        Some("WARN") => "WARN",
        Some("ERROR") => "ERROR",
        Some("FATAL") => "FATAL",
        _ => "INFO",
    }
}

/// The EMF document for `counts`, with the `Consumer` dimension, at `level` (see [`emf_level`]).
pub fn emf_document(
    consumer: &str,
    counts: &[(&str, u64)],
    timestamp_millis: u64,
    level: &str,
) -> Value {
    let metrics: Vec<(&str, &str, i64)> = counts
        .iter()
        .map(|(name, n)| (*name, "Count", i64::try_from(*n).unwrap_or(i64::MAX)))
        .collect();
    emf_group_document(
        &[("Consumer", consumer)],
        &[&["Consumer"]],
        &metrics,
        timestamp_millis,
        level,
    )
}

/// One EMF document: `dimensions` with their values, declared under the dimension `sets`.
pub(crate) fn emf_group_document(
    dimensions: &[(&str, &str)],
    sets: &[&[&str]],
    metrics: &[(&str, &str, i64)],
    timestamp_millis: u64,
    level: &str,
) -> Value {
    let mut doc = Map::new();
    doc.insert("level".into(), json!(level));
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_millis,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": sets,
                "Metrics": metrics.iter().map(|(name, unit, _)| json!({"Name": name, "Unit": unit})).collect::<Vec<_>>(),
            }],
        }),
    );
    for (name, value) in dimensions {
        doc.insert((*name).to_owned(), json!(value));
    }
    for (name, _, value) in metrics {
        doc.insert((*name).to_owned(), json!(value));
    }
    Value::Object(doc)
}

/// Prints the EMF line and logs the same counts once.
pub fn emit(consumer: &str, counts: &[(&str, u64)]) {
    // EMF must be a line of its own on stdout.
    println!(
        "{}",
        emf_document(consumer, counts, now_millis(), configured_level())
    );
    let fields: Map<String, Value> = counts
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    let counts = Value::Object(fields).to_string();
    tracing::info!(consumer, counts, "batch done");
}

pub(crate) fn configured_level() -> &'static str {
    emf_level(std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref())
}

pub(crate) fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
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
            "INFO",
        );
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "Duplicate"
        );
        assert_eq!(doc["Applied"], 3);
        assert_eq!(doc["Consumer"], "account-state");
    }

    #[test]
    fn when_the_log_level_is_raised_should_declare_a_level_lambda_keeps() {
        assert_eq!(emf_level(Some("WARN")), "WARN");
        assert_eq!(emf_level(Some("error")), "ERROR");
        assert_eq!(emf_level(Some("FATAL")), "FATAL");
        for kept_at_info in [
            None,
            Some("INFO"),
            Some("DEBUG"),
            Some("TRACE"),
            Some("bogus"),
        ] {
            assert_eq!(emf_level(kept_at_info), "INFO");
        }
        let doc = emf_document("collections", &[("Retried", 1)], 0, emf_level(Some("WARN")));
        assert_eq!(doc["level"], "WARN");
    }
}
