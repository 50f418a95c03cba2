//! Per-batch counts of the account-state consumer.

use crate::MessageResult;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub applied: u64,
    pub duplicate: u64,
    pub collision: u64,
    pub stale: u64,
    pub quarantined: u64,
    /// Parked until the fact they wait for is applied (acknowledged).
    pub parked: u64,
    /// Parked facts judged again in this batch (their verdicts are in the counts above too:
    /// `messages + released = applied + duplicate + collision + stale + quarantined + parked +
    /// retried`).
    pub released: u64,
    /// Reported as batch item failures (SQS redelivers them).
    pub retried: u64,
    /// `TransactWriteItems` requests the batch cost (shared by its accounts).
    pub transactions: u64,
    /// Messages whose FIFO `MessageGroupId` is not their body's `accountId`: applied by the
    /// body, counted as the producer's error (contract, "Transport").
    pub group_mismatch: u64,
}

impl BatchCounts {
    pub(crate) fn count(&mut self, result: &MessageResult) {
        let slot = match result {
            MessageResult::Applied => &mut self.applied,
            MessageResult::Stale => &mut self.stale,
            MessageResult::Duplicate => &mut self.duplicate,
            MessageResult::Collision => &mut self.collision,
            MessageResult::Quarantined { .. } => &mut self.quarantined,
            MessageResult::Parked => &mut self.parked,
            MessageResult::Retry { .. } => &mut self.retried,
        };
        *slot += 1;
    }

    /// EMF metric names and values (namespace `LoanServicing`, dimension `Consumer`).
    pub fn metrics(&self) -> [(&'static str, u64); 10] {
        [
            ("Applied", self.applied),
            ("Duplicate", self.duplicate),
            ("Collision", self.collision),
            ("Stale", self.stale),
            ("Quarantined", self.quarantined),
            ("Parked", self.parked),
            ("Released", self.released),
            ("Retried", self.retried),
            ("Transactions", self.transactions),
            ("GroupMismatch", self.group_mismatch),
        ]
    }

    pub fn emit(&self, consumer: &str) {
        servicing_telemetry::emit(consumer, &self.metrics());
    }
}
