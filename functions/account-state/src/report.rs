//! What the handler answers: each message's result, and the batch's report, whose retried
//! messages become the `batchItemFailures` SQS delivers again. Public: the integration tests and
//! the bench read them.

use aws_lambda_events::event::sqs::SqsBatchResponse;
use servicing_telemetry::DecisionRecord;

use crate::metrics::BatchCounts;

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageResult {
    Applied,
    Stale,
    Duplicate,
    /// Same identity, other payload: quarantined with both fingerprints, the first fact stands.
    Collision,
    /// Permanent problem (bad input, business rejection): stored with the raw body and reason,
    /// acknowledged.
    Quarantined {
        code: String,
    },
    /// Waits for another fact: kept with its raw body on the loan item, acknowledged.
    Parked,
    /// Reported as a batch item failure: SQS delivers it again.
    Retry {
        reason: String,
    },
}

/// The result of a batch: one entry per message (by message id), the counts, and the decision
/// records: one per message, plus one `released` record per parked fact judged again.
#[derive(Debug, Default)]
pub struct BatchReport {
    pub results: Vec<(String, MessageResult)>,
    pub counts: BatchCounts,
    pub decisions: Vec<DecisionRecord>,
}

impl BatchReport {
    pub fn response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for (id, result) in &self.results {
            if matches!(result, MessageResult::Retry { .. }) {
                response.add_failure(id.clone());
            }
        }
        response
    }
}
