//! Per-batch counts, emitted as one CloudWatch EMF line and one structured log line.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::MessageResult;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub applied: u64,
    pub duplicate: u64,
    pub collision: u64,
    pub stale: u64,
    pub quarantined: u64,
    /// Reported as batch item failures (SQS redelivers them).
    pub retried: u64,
}

pub const METRIC_NAMESPACE: &str = "LoanServicing";

impl BatchCounts {
    pub(crate) fn count(&mut self, result: &MessageResult) {
        let slot = match result {
            MessageResult::Applied => &mut self.applied,
            MessageResult::Stale => &mut self.stale,
            MessageResult::Duplicate => &mut self.duplicate,
            MessageResult::Collision => &mut self.collision,
            MessageResult::Quarantined { .. } => &mut self.quarantined,
            MessageResult::Retry { .. } => &mut self.retried,
        };
        *slot += 1;
    }

    /// The EMF document for these counts (Embedded Metric Format: CloudWatch turns the line
    /// into metrics without any API call).
    pub fn emf(&self, consumer: &str, timestamp_millis: u128) -> serde_json::Value {
        let names = [
            "Applied",
            "Duplicate",
            "Collision",
            "Stale",
            "Quarantined",
            "Retried",
        ];
        json!({
            "_aws": {
                "Timestamp": timestamp_millis as u64,
                "CloudWatchMetrics": [{
                    "Namespace": METRIC_NAMESPACE,
                    "Dimensions": [["Consumer"]],
                    "Metrics": names.iter().map(|n| json!({"Name": n, "Unit": "Count"})).collect::<Vec<_>>(),
                }],
            },
            "Consumer": consumer,
            "Applied": self.applied,
            "Duplicate": self.duplicate,
            "Collision": self.collision,
            "Stale": self.stale,
            "Quarantined": self.quarantined,
            "Retried": self.retried,
        })
    }

    pub fn emit(&self, consumer: &str) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        // EMF must be a line of its own on stdout.
        println!("{}", self.emf(consumer, now));
        tracing::info!(
            consumer,
            applied = self.applied,
            duplicate = self.duplicate,
            collision = self.collision,
            stale = self.stale,
            quarantined = self.quarantined,
            retried = self.retried,
            "batch done"
        );
    }
}
