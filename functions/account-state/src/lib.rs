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

mod account;
mod cache;
mod config;
mod decisions;
mod group;
mod metrics;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::{FutureExt, StreamExt};
use servicing_domain::{
    AccountId, DecodeError, EVENT_TIME_IN_FUTURE, Fingerprint, ServicingEvent, SourceRef,
};
use servicing_store::{CommitOutcome, QuarantineEntry, ServicingStore, StoreError};

use account::{AccountRun, Failure, Step};
pub use cache::StateCache;
pub use config::{Config, ConfigError};
use decisions::Trail;
pub use decisions::emit_decisions;
use group::Group;
pub use metrics::BatchCounts;
pub use servicing_settings::FromSettings;
pub use servicing_store::MAX_TRANSACTION_ITEMS;
pub use servicing_telemetry::{
    DecidedBy, DecisionRecord, Verdict, content_key, decision_emf_documents, decision_line,
    decision_time,
};

/// The quarantine code of a fact whose request DynamoDB refused as such.
const STORE_REJECTED: &str = "store_rejected";

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

/// A decoded message waiting for its account's turn.
struct Pending<'a> {
    message_id: &'a str,
    body: &'a str,
    receive_count: u32,
    event: ServicingEvent,
    fingerprint: Fingerprint,
}

impl<'a> Pending<'a> {
    /// What the quarantine keeps of a decoded message: raw body, identity, fingerprint, reason.
    fn quarantine_entry(&'a self, code: &'a str, reason: &'a str) -> QuarantineEntry<'a> {
        QuarantineEntry {
            source: Some(&self.event.source),
            account_id: Some(&self.event.account_id),
            received_fingerprint: Some(&self.fingerprint),
            receive_count: Some(self.receive_count),
            ..QuarantineEntry::new(self.message_id, self.body, code, reason)
        }
    }
}

#[derive(Debug)]
pub struct AccountStateHandler {
    store: ServicingStore,
    config: Config,
    cache: StateCache,
}

impl AccountStateHandler {
    pub fn new(store: ServicingStore, config: Config) -> Self {
        let cache = StateCache::new(config.state_cache_capacity);
        Self {
            store,
            config,
            cache,
        }
    }

    /// The Lambda entry point: process, print the decision records (stamped with the Lambda
    /// request id and the X-Ray trace id), emit the metrics lines, answer the failures.
    pub async fn handle_invocation(
        &self,
        event: SqsEvent,
        request_id: Option<&str>,
    ) -> SqsBatchResponse {
        let mut report = self.process(&event.records).await;
        decisions::stamp(&mut report.decisions, request_id);
        report.counts.emit(self.store.consumer());
        emit_decisions(self.store.consumer(), &report.decisions);
        report.response()
    }

    pub async fn process(&self, messages: &[SqsMessage]) -> BatchReport {
        let transactions_before = self.store.transactions_sent();
        let mut report = BatchReport::default();
        let mut by_account: Vec<(AccountId, Vec<Pending<'_>>)> = Vec::new();
        let mut index: HashMap<AccountId, usize> = HashMap::new();

        let consumer = self.store.consumer();
        let now = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
        for message in messages {
            let message_id = message.message_id.as_deref().unwrap_or_default();
            let body = message.body.as_deref().unwrap_or_default();
            let receive_count = receive_count(message);
            match ServicingEvent::decode(body.as_bytes()) {
                Ok(event) => {
                    if message
                        .attributes
                        .get("MessageGroupId")
                        .is_some_and(|group| group != event.account_id.as_str())
                    {
                        // Order is kept per group: this producer's messages of one account
                        // may be applied out of order. The body says whose fact it is.
                        tracing::warn!(
                            alert = "group_mismatch",
                            account = %event.account_id,
                            source_system = event.source.system,
                            "producer error: MessageGroupId is not the event's accountId"
                        );
                        report.counts.group_mismatch += 1;
                    }
                    let fingerprint = Fingerprint::of(&event);
                    if let Some(reason) = event.too_far_ahead(now, self.config.max_event_time_skew)
                    {
                        let pending = Pending {
                            message_id,
                            body,
                            receive_count,
                            event,
                            fingerprint,
                        };
                        let entry = pending.quarantine_entry(EVENT_TIME_IN_FUTURE, &reason);
                        let result = self.quarantine(&entry).await;
                        let by = DecidedBy::BusinessRule;
                        let record = pending.decision(consumer, by, &result, Some(reason));
                        report.decisions.push(record);
                        report.record(message_id, result);
                        continue;
                    }
                    let slot = *index.entry(event.account_id.clone()).or_insert_with(|| {
                        by_account.push((event.account_id.clone(), Vec::new()));
                        by_account.len() - 1
                    });
                    by_account[slot].1.push(Pending {
                        message_id,
                        body,
                        receive_count,
                        event,
                        fingerprint,
                    });
                }
                Err(error) => {
                    let result = self
                        .quarantine_undecodable(message_id, body, receive_count, &error)
                        .await;
                    let record = decisions::undecodable(consumer, message, &result, &error);
                    report.decisions.push(record);
                    report.record(message_id, result);
                }
            }
        }

        // Each account registers as a participant of group commit when it is taken up (all the
        // accounts that will run side by side, before any of them runs): their commits then
        // leave together, one transaction for several accounts.
        let results: Vec<AccountResults> = futures_util::stream::iter(by_account)
            .map(|(account, pending)| {
                let participant = self.store.participant();
                self.process_account_isolated(account, pending, participant)
            })
            .buffer_unordered(self.config.account_concurrency)
            .collect()
            .await;
        for account in results {
            for (id, result) in account.messages {
                report.record(&id, result);
            }
            for result in account.released {
                report.counts.released += 1;
                report.counts.count(&result);
            }
            report.decisions.extend(account.decisions);
        }
        decisions::drop_unknown_receive_counts(&mut report.decisions, messages);
        // One batch at a time per Lambda instance: the difference is this batch's.
        report.counts.transactions = self.store.transactions_sent() - transactions_before;
        report
    }

    /// A panic (a bug) while processing one account fails that account's messages only: SQS
    /// brings them back (and, past `maxReceiveCount`, to the DLQ) while the other accounts of
    /// the batch are acknowledged. Without this the runtime would fail the whole invocation,
    /// and on the FIFO queue every message group of the batch would wait for the poison one.
    async fn process_account_isolated(
        &self,
        account: AccountId,
        pending: Vec<Pending<'_>>,
        _participant: servicing_store::Participant,
    ) -> AccountResults {
        // Unwind safety: a panic leaves nothing half-written (a commit is one transaction) and
        // the cache is only a hint, dropped for the account below.
        let run = AssertUnwindSafe(self.process_account(&account, &pending));
        match run.catch_unwind().await {
            Ok(results) => results,
            Err(_) => {
                tracing::error!(alert = "panic", account = %account, "processing panicked; the account's messages will be redelivered");
                self.cache.forget(&account);
                let result = MessageResult::Retry {
                    reason: "processing this account panicked".to_owned(),
                };
                let messages = pending
                    .iter()
                    .map(|p| (p.message_id.to_owned(), result.clone()))
                    .collect();
                AccountResults {
                    messages,
                    released: Vec::new(),
                    decisions: decisions::panicked(self.store.consumer(), &pending, &result),
                }
            }
        }
    }

    /// Runs the account's events through [`AccountRun`]: this loop performs each step's
    /// requests and hands the answers back; the run decides what comes next and what is left
    /// undone after a failure.
    #[tracing::instrument(skip_all, fields(account = %account, events = pending.len()))]
    async fn process_account(
        &self,
        account: &AccountId,
        pending: &[Pending<'_>],
    ) -> AccountResults {
        let mut run = AccountRun::new(pending, self.cache.get(account));
        let mut trail = Trail::new(self.store.consumer(), pending);
        loop {
            let now = servicing_store::epoch_seconds();
            match run.next_step(now, self.config.max_transaction_items) {
                Step::Done => break,
                Step::Read(payments) => {
                    let payments: Vec<&SourceRef> = payments.iter().collect();
                    match self.store.load(account, &payments).await {
                        Ok(snapshot) => run.read(snapshot),
                        Err(e) => self.fail(&mut run, &mut trail, e).await,
                    }
                }
                Step::ReadTargets(missing) => {
                    let wanted: Vec<&SourceRef> = missing.iter().collect();
                    let read = match run.snapshot_mut() {
                        Some(snapshot) => self.store.load_targets(account, &wanted, snapshot).await,
                        None => Ok(()),
                    };
                    match read {
                        Ok(()) => run.targets_read(missing),
                        Err(e) => self.fail(&mut run, &mut trail, e).await,
                    }
                }
                Step::Known(known) => {
                    let loan = run.snapshot_mut().and_then(|s| s.loan.as_ref());
                    trail.known(&known, loan, now);
                    for (index, collision) in known {
                        let result = match collision {
                            None => MessageResult::Duplicate,
                            Some(stored) => self.collision(&pending[index], &stored).await,
                        };
                        run.settle(index, result);
                    }
                }
                Step::Commit(group) => self.commit(account, &mut run, &mut trail, *group).await,
            }
        }
        let finished = run.finish();
        match finished.state {
            Some(state) => self.cache.put(state),
            None => self.cache.forget(account),
        }
        let decisions = trail.finish(&finished.results, &finished.released);
        let messages = pending
            .iter()
            .map(|p| p.message_id.to_owned())
            .zip(finished.results)
            .collect();
        AccountResults {
            messages,
            released: finished.released,
            decisions,
        }
    }

    /// Commits a group (the longest run of the account's ready parked facts and next events
    /// that fits one transaction) and hands the answer to the run. Claims refused in a
    /// cancelled group are settled from that answer (a duplicate costs no extra request).
    async fn commit(
        &self,
        account: &AccountId,
        run: &mut AccountRun<'_, '_>,
        trail: &mut Trail<'_, '_>,
        group: Group,
    ) {
        let pending = run.pending();
        let units = group.units(pending);
        let answer = self
            .store
            .commit_all(&units, Some(group.loan_write(account)))
            .await;
        drop(units);
        if let Ok(outcomes) = &answer {
            trail.answered(&group, outcomes);
        }
        match answer {
            Ok(outcomes) if outcomes.iter().all(|o| *o == CommitOutcome::Committed) => {
                run.committed(group);
            }
            Ok(outcomes) => match run.refused(&group, outcomes, self.config.max_commit_attempts) {
                Ok(refused) => {
                    for (index, stored) in refused.collisions {
                        let result = self.collision(&pending[index], &stored).await;
                        run.settle(index, result);
                    }
                    if let Some(rounds) = refused.reread_after {
                        let wait = servicing_store::backoff(rounds, self.config.conflict_backoff);
                        tokio::time::sleep(wait).await;
                    }
                }
                Err(e) => self.fail(run, trail, e).await,
            },
            // Nothing was written: the same facts again, one per transaction.
            Err(StoreError::Rejected(_)) if group.members.len() > 1 => run.split(),
            // A released fact DynamoDB refuses on its own (e.g. the item it would grow is over
            // the size limit) is quarantined itself — off the loan item, its claim released for
            // a resend — never the event that happens to come next.
            Err(StoreError::Rejected(reason)) if group.sole_released().is_some() => {
                let loan = run.snapshot_mut().and_then(|s| s.loan.clone());
                let reason = format!("DynamoDB refused the request: {reason}");
                let outcome = match (group.sole_released(), loan) {
                    (Some(released), Some(loan)) => {
                        self.quarantine_released(&loan, &released.fact, reason.clone())
                            .await
                    }
                    _ => Ok(false),
                };
                let lost = "a refused released fact could not be taken off its account";
                match outcome {
                    Ok(true) => {
                        trail.released_store_rejected(&group, reason);
                        run.released_quarantined(STORE_REJECTED);
                    }
                    Ok(false) => {
                        if let Err(e) = run.lost_round(self.config.max_commit_attempts, lost) {
                            self.fail(run, trail, e).await;
                        }
                    }
                    // Refused again: retried (and dead-lettered), never blamed on a neighbour.
                    Err(StoreError::Rejected(why)) => {
                        let e = StoreError::Transient(format!("{lost}: {why}"));
                        self.fail(run, trail, e).await;
                    }
                    Err(e) => self.fail(run, trail, e).await,
                }
            }
            // The commit may or may not have happened (e.g. a lost response).
            Err(e) => self.fail(run, trail, e).await,
        }
    }

    /// A store failure: the run decides what it leaves undone; a request DynamoDB refused as
    /// such quarantines its event (it will never succeed). Corrupt stored data needs an
    /// operator: retried (the DLQ catches it) rather than guessed.
    async fn fail(&self, run: &mut AccountRun<'_, '_>, trail: &mut Trail<'_, '_>, e: StoreError) {
        if let Failure::Quarantine(index, reason) = run.fail(e) {
            tracing::error!(error = %reason, "DynamoDB refused the request");
            let reason = format!("DynamoDB refused the request: {reason}");
            let entry = run.pending()[index].quarantine_entry(STORE_REJECTED, &reason);
            let result = self.quarantine(&entry).await;
            trail.store_rejected(index, reason);
            run.quarantined(index, result);
        }
    }

    /// Takes a released fact DynamoDB refused off the loan item into quarantine (`Ok(false)`:
    /// the loan item moved meanwhile, or its claim is not `PARKED`: judged again after a
    /// re-read).
    async fn quarantine_released(
        &self,
        loan: &servicing_store::LoanItem,
        fact: &servicing_domain::ParkedFact,
        reason: String,
    ) -> Result<bool, StoreError> {
        tracing::error!(source = %fact.source, "DynamoDB refused a released fact; quarantined");
        let expired = servicing_store::ExpiredFact {
            fact,
            code: STORE_REJECTED,
            reason,
        };
        let outcome = self
            .store
            .expire_parked(loan, std::slice::from_ref(&expired))
            .await?;
        Ok(outcome == servicing_store::ExpiryOutcome::Expired)
    }

    async fn collision(&self, p: &Pending<'_>, stored: &Fingerprint) -> MessageResult {
        tracing::error!(
            alert = "collision",
            stored = %stored,
            received = %p.fingerprint,
            "same identity, different payload: the first fact stands"
        );
        let reason = format!(
            "collision: {} was claimed with fingerprint {stored}, this payload has {}",
            p.event.source, p.fingerprint
        );
        let entry = QuarantineEntry {
            stored_fingerprint: Some(stored),
            ..p.quarantine_entry("collision", &reason)
        };
        match self.quarantine(&entry).await {
            MessageResult::Quarantined { .. } => MessageResult::Collision,
            other => other,
        }
    }

    async fn quarantine_undecodable(
        &self,
        message_id: &str,
        body: &str,
        receive_count: u32,
        error: &DecodeError,
    ) -> MessageResult {
        let reason = error.to_string();
        let entry = QuarantineEntry {
            receive_count: Some(receive_count),
            ..QuarantineEntry::new(message_id, body, error.code(), &reason)
        };
        self.quarantine(&entry).await
    }

    async fn quarantine(&self, entry: &QuarantineEntry<'_>) -> MessageResult {
        match self.store.quarantine(entry).await {
            Ok(()) => {
                tracing::warn!(code = entry.code, reason = entry.reason, "quarantined");
                MessageResult::Quarantined {
                    code: entry.code.to_owned(),
                }
            }
            Err(e) => MessageResult::Retry {
                reason: format!("quarantine write failed: {e}"),
            },
        }
    }
}

impl BatchReport {
    fn record(&mut self, message_id: &str, result: MessageResult) {
        self.counts.count(&result);
        self.results.push((message_id.to_owned(), result));
    }
}

/// One account's answers and records: per message, and of its parked facts judged again.
struct AccountResults {
    messages: Vec<(String, MessageResult)>,
    released: Vec<MessageResult>,
    decisions: Vec<DecisionRecord>,
}

fn receive_count(message: &SqsMessage) -> u32 {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}
