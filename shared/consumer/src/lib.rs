//! The account-state consumer: an SQS batch in, `batchItemFailures` out.
//!
//! Per batch: decode every message (bad input → quarantine, acknowledged), group by account,
//! run accounts in parallel (bounded) and each account's events in batch order with the state
//! carried between them. A failed event fails that account's later events in the batch too, so
//! SQS redelivers them in order.

mod cache;
mod config;
mod group;
mod metrics;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::{FutureExt, StreamExt};
use servicing_domain::{AccountId, DecodeError, Fingerprint, ServicingEvent, SourceRef};
use servicing_store::{CommitOutcome, QuarantineEntry, ServicingStore, Snapshot, StoreError};

pub use cache::StateCache;
pub use config::{Config, ConfigError};
use group::Group;
pub use metrics::BatchCounts;
pub use servicing_store::MAX_TRANSACTION_ITEMS;

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageResult {
    Applied,
    Stale,
    Duplicate,
    /// Same identity, other payload: quarantined with both fingerprints, the first fact stands.
    Collision,
    /// Permanent problem (bad input, business rejection, spent retry budget): stored with the
    /// raw body and reason, acknowledged.
    Quarantined {
        code: String,
    },
    /// Reported as a batch item failure: SQS delivers it again.
    Retry {
        reason: String,
    },
}

/// The result of a batch: one entry per message (by message id) and the counts.
#[derive(Debug, Default)]
pub struct BatchReport {
    pub results: Vec<(String, MessageResult)>,
    pub counts: BatchCounts,
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

    /// The Lambda entry point: process, emit the metrics line, answer the failures.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let report = self.process(&event.records).await;
        report.counts.emit(self.store.consumer());
        report.response()
    }

    pub async fn process(&self, messages: &[SqsMessage]) -> BatchReport {
        let transactions_before = self.store.transactions_sent();
        let mut report = BatchReport::default();
        let mut by_account: Vec<(AccountId, Vec<Pending<'_>>)> = Vec::new();
        let mut index: HashMap<AccountId, usize> = HashMap::new();

        for message in messages {
            let message_id = message.message_id.as_deref().unwrap_or_default();
            let body = message.body.as_deref().unwrap_or_default();
            let receive_count = receive_count(message);
            match ServicingEvent::decode(body.as_bytes()) {
                Ok(event) => {
                    let fingerprint = Fingerprint::of(&event);
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
                    report.record(message_id, result);
                }
            }
        }

        // Each account registers as a participant of group commit when it is taken up (all the
        // accounts that will run side by side, before any of them runs): their commits then
        // leave together, one transaction for several accounts.
        let results: Vec<Vec<(String, MessageResult)>> = futures_util::stream::iter(by_account)
            .map(|(account, pending)| {
                let participant = self.store.participant();
                self.process_account_isolated(account, pending, participant)
            })
            .buffer_unordered(self.config.account_concurrency)
            .collect()
            .await;
        for (id, result) in results.into_iter().flatten() {
            report.record(&id, result);
        }
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
    ) -> Vec<(String, MessageResult)> {
        // Unwind safety: a panic leaves nothing half-written (a commit is one transaction) and
        // the cache is only a hint, dropped for the account below.
        let run = AssertUnwindSafe(self.process_account(&account, &pending));
        match run.catch_unwind().await {
            Ok(results) => results,
            Err(_) => {
                tracing::error!(alert = "panic", account = %account, "processing panicked; the account's messages will be redelivered");
                self.cache.forget(&account);
                pending
                    .iter()
                    .map(|p| {
                        let reason = "processing this account panicked".to_owned();
                        (p.message_id.to_owned(), MessageResult::Retry { reason })
                    })
                    .collect()
            }
        }
    }

    #[tracing::instrument(skip_all, fields(account = %account, events = pending.len()))]
    async fn process_account(
        &self,
        account: &AccountId,
        pending: &[Pending<'_>],
    ) -> Vec<(String, MessageResult)> {
        let targets: Vec<&SourceRef> = pending
            .iter()
            .filter_map(|p| p.event.reversal_target())
            .collect();
        // A warm cached state saves the read; reversals always read (their allocations).
        let mut snapshot = match self.cache.get(account) {
            Some(cached) if targets.is_empty() => Some(Snapshot {
                account: Some(cached),
                allocations: HashMap::new(),
            }),
            _ => None,
        };
        let mut results: Vec<MessageResult> = Vec::with_capacity(pending.len());
        // Events per transaction; 1 for the rest of the batch once DynamoDB refused a group's
        // request as such (too large, invalid), so one bad item cannot take the others with it.
        let mut max_units = usize::MAX;
        while results.len() < pending.len() {
            let settled = self
                .settle_next_group(
                    &pending[results.len()..],
                    &targets,
                    &mut snapshot,
                    &mut max_units,
                )
                .await;
            let base = results.len();
            let failed = settled
                .iter()
                .position(|r| matches!(r, MessageResult::Retry { .. }));
            results.extend(settled);
            if let Some(at) = failed {
                // SQS must redeliver the account's later events after the failed one, in order.
                let first = pending[base + at].message_id;
                let reason = format!("an earlier event of this account failed ({first})");
                results.resize(pending.len(), MessageResult::Retry { reason });
            }
        }
        match snapshot.and_then(|s| s.account) {
            Some(state) => self.cache.put(state),
            None => self.cache.forget(account),
        }
        pending
            .iter()
            .map(|p| p.message_id.to_owned())
            .zip(results)
            .collect()
    }

    /// Settles a non-empty run of an account's next events: plans the longest group that fits
    /// one transaction, commits it, and answers for each of its events. Claims refused in a
    /// cancelled group are settled from that answer (a duplicate costs no extra request); the
    /// others are planned again without them.
    async fn settle_next_group(
        &self,
        pending: &[Pending<'_>],
        targets: &[&SourceRef],
        snapshot: &mut Option<Snapshot>,
        max_units: &mut usize,
    ) -> Vec<MessageResult> {
        let mut settled: Vec<Option<MessageResult>> = vec![None; pending.len()];
        let mut attempt = 0;
        loop {
            let snap = match snapshot {
                Some(snap) => snap,
                None => match self.store.load(&pending[0].event.account_id, targets).await {
                    Ok(loaded) => snapshot.insert(loaded),
                    Err(e) => {
                        let first = first_unsettled(&settled);
                        settled[first] = Some(self.store_failure(&pending[first], e).await);
                        return settled_run(settled, first + 1);
                    }
                },
            };
            let now = servicing_store::epoch_seconds();
            settle_recent_duplicates(pending, &mut settled, snap, now);
            let group = Group::plan(
                pending,
                &settled,
                snap,
                self.config.max_transaction_items,
                *max_units,
            );
            let Some(first) = group.members.first().map(|m| m.index) else {
                // Everything before `end` is settled; the event at `end` waits for its turn.
                if let Some(why) = &group.deferred {
                    settled[group.end] = Some(self.defer(&pending[group.end], why).await);
                    return settled_run(settled, group.end + 1);
                }
                return settled_run(settled, group.end);
            };
            let recent = group.recent(pending, snap, now);
            let answer = self.store.commit_all(&group.units(pending), &recent).await;
            match answer {
                Ok(outcomes) if outcomes.iter().all(|o| *o == CommitOutcome::Committed) => {
                    let end = group.end;
                    for (index, result) in group.committed(snap, recent) {
                        settled[index] = Some(result);
                    }
                    return settled_run(settled, end);
                }
                Ok(outcomes) => {
                    let mut reread = false;
                    for (member, outcome) in group.members.iter().zip(outcomes) {
                        let p = &pending[member.index];
                        match outcome {
                            CommitOutcome::Duplicate => {
                                settled[member.index] = Some(MessageResult::Duplicate);
                            }
                            CommitOutcome::Collision { stored } => {
                                settled[member.index] = Some(self.collision(p, &stored).await);
                            }
                            CommitOutcome::Withdrawn => {}
                            _ => reread = true,
                        }
                    }
                    if reread {
                        *snapshot = None;
                        attempt += 1;
                        if attempt >= self.config.max_commit_attempts {
                            let first = first_unsettled(&settled);
                            settled[first] = Some(MessageResult::Retry {
                                reason: format!("still conflicting after {attempt} attempts"),
                            });
                            return settled_run(settled, first + 1);
                        }
                        tracing::info!(attempt, "concurrent change; re-reading");
                        tokio::time::sleep(backoff(attempt, self.config.conflict_backoff)).await;
                    }
                }
                // Nothing was written: the same events again, one per transaction.
                Err(StoreError::Rejected(_)) if group.members.len() > 1 => *max_units = 1,
                Err(e) => {
                    // The commit may or may not have happened (e.g. a lost response).
                    *snapshot = None;
                    settled[first] = Some(self.store_failure(&pending[first], e).await);
                    return settled_run(settled, first + 1);
                }
            }
        }
    }

    /// Out-of-order delivery: retried by SQS until the receive budget is spent, then quarantined.
    async fn defer(&self, p: &Pending<'_>, why: &servicing_domain::Deferral) -> MessageResult {
        if p.receive_count < self.config.deferral_receive_budget {
            return MessageResult::Retry {
                reason: why.to_string(),
            };
        }
        let reason = format!(
            "retry budget spent after {} deliveries: {why}",
            p.receive_count
        );
        let entry = p.quarantine_entry(why.code(), &reason);
        self.quarantine(&entry).await
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

    /// Transient store errors are retried by SQS. A request DynamoDB refuses as such (e.g. an
    /// item over the size limit) will never succeed: quarantine it. Corrupt stored data needs
    /// an operator: retry (and let the DLQ catch it) rather than guess.
    async fn store_failure(&self, p: &Pending<'_>, error: StoreError) -> MessageResult {
        match error {
            StoreError::Rejected(reason) => {
                tracing::error!(error = %reason, "DynamoDB refused the request");
                let reason = format!("DynamoDB refused the request: {reason}");
                let entry = p.quarantine_entry("store_rejected", &reason);
                self.quarantine(&entry).await
            }
            other => {
                tracing::warn!(error = %other, "will be retried");
                MessageResult::Retry {
                    reason: other.to_string(),
                }
            }
        }
    }
}

impl BatchReport {
    fn record(&mut self, message_id: &str, result: MessageResult) {
        self.counts.count(&result);
        self.results.push((message_id.to_owned(), result));
    }
}

/// Duplicates of facts the loan lists as recently applied are settled from the state already
/// read: no request, and the group of the new facts beside them is not cancelled by their
/// claims. Anything else goes through its claim.
fn settle_recent_duplicates(
    pending: &[Pending<'_>],
    settled: &mut [Option<MessageResult>],
    snapshot: &Snapshot,
    now: i64,
) {
    let Some(state) = &snapshot.account else {
        return;
    };
    for (p, slot) in pending.iter().zip(settled) {
        if slot.is_none() && state.recent.holds(&p.event.source, &p.fingerprint, now) {
            *slot = Some(MessageResult::Duplicate);
        }
    }
}

/// The first event without an answer (there is one while a group is being settled).
fn first_unsettled(settled: &[Option<MessageResult>]) -> usize {
    settled.iter().position(Option::is_none).unwrap_or(0)
}

/// The answers of the first `len` events, all settled by then.
fn settled_run(settled: Vec<Option<MessageResult>>, len: usize) -> Vec<MessageResult> {
    settled
        .into_iter()
        .take(len)
        .map(|result| {
            result.unwrap_or_else(|| MessageResult::Retry {
                reason: "left unsettled by its group".into(),
            })
        })
        .collect()
}

fn receive_count(message: &SqsMessage) -> u32 {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}

/// Exponential backoff with full jitter, from a cheap per-call random source.
fn backoff(attempt: u32, base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let cap = base.saturating_mul(1 << attempt.min(6));
    let millis = cap.as_millis().max(1) as u64;
    Duration::from_millis(hasher.finish() % millis)
}
