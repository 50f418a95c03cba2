//! The account-state consumer: an SQS batch in, `batchItemFailures` out.
//!
//! Per batch: decode every message (bad input → quarantine, acknowledged), group by account,
//! run accounts in parallel (bounded) and each account's events in batch order with the state
//! carried between them. A fact that waits for another (its account's opening, the payment it
//! reverses) is parked on the loan item and acknowledged; it is applied right after what it
//! waits for. A transient failure fails that account's later events in the batch too, so SQS
//! redelivers them in order.
//!
//! Every delivery, and every parked fact judged again, leaves a [`DecisionRecord`] (`decisions`).
//!
//! Here the handler and its entry point. The batch is decoded and its accounts run in `batch`,
//! one account's requests performed in `account_loop` (what comes next decided in `account`, a
//! group planned in `group`), the quarantine written in `quarantine`; `origin` holds facts
//! under the payments API's prefix to the payments it accepted; `report` holds what the
//! handler answers, `deadline` when it stops starting requests.

mod account;
mod account_loop;
mod batch;
mod cache;
mod config;
mod deadline;
mod decisions;
mod group;
mod metrics;
mod origin;
mod quarantine;
mod report;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use servicing_store::ServicingStore;

pub use cache::StateCache;
pub use config::{Config, ConfigError};
pub use deadline::{
    ANSWER_FLOOR, Deadline, SHORTEST_INVOCATION, SHORTEST_REQUEST, TooShort, answer_reserve,
};
pub use decisions::emit_decisions;
pub use metrics::BatchCounts;
pub use origin::API_PAYMENT_NOT_ACCEPTED;
pub use report::{BatchReport, MessageResult};
pub use servicing_settings::FromSettings;
pub use servicing_store::MAX_TRANSACTION_ITEMS;
pub use servicing_telemetry::{
    ContentKeyer, ContentParts, DecidedBy, DecisionRecord, Verdict, decision_emf_documents,
    decision_line, decision_time,
};

#[derive(Debug)]
pub struct AccountStateHandler {
    store: ServicingStore,
    config: Config,
    cache: StateCache,
    /// Keys the decision records' content keys (the secret in `CONTENT_KEY_SECRET_ARN`).
    content_keyer: ContentKeyer,
}

impl AccountStateHandler {
    pub fn new(store: ServicingStore, config: Config, content_keyer: ContentKeyer) -> Self {
        let cache = StateCache::new(config.state_cache_capacity);
        Self {
            store,
            config,
            cache,
            content_keyer,
        }
    }

    /// The Lambda entry point: process (no read or commit started past the deadline), print the
    /// decision records (stamped with the Lambda request id and the X-Ray trace id), emit the
    /// metrics lines, answer the failures.
    pub async fn handle_invocation(
        &self,
        event: SqsEvent,
        request_id: Option<&str>,
        deadline: Deadline,
    ) -> SqsBatchResponse {
        let mut report = self.process_until(&event.records, deadline).await;
        decisions::stamp(&mut report.decisions, request_id);
        report.counts.emit(self.store.consumer());
        emit_decisions(self.store.consumer(), &report.decisions);
        report.response()
    }
}
