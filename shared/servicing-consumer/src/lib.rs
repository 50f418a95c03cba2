//! The account-state consumer: an SQS batch in, `batchItemFailures` out.
//!
//! Per batch: decode every message (bad input → quarantine, acknowledged), group by account,
//! run accounts in parallel (bounded) and each account's events in batch order with the state
//! carried between them. A fact that waits for another (its account's opening, the payment it
//! reverses) is parked on the loan item and acknowledged; it is applied right after what it
//! waits for. A transient failure fails that account's later events in the batch too, so SQS
//! redelivers them in order.

mod cache;
mod config;
mod group;
mod metrics;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::{FutureExt, StreamExt};
use servicing_domain::{
    AccountId, DecodeError, EVENT_TIME_IN_FUTURE, Fingerprint, ServicingEvent, SourceRef,
};
use servicing_store::{CommitOutcome, QuarantineEntry, ServicingStore, Snapshot, StoreError};

pub use cache::StateCache;
pub use config::{Config, ConfigError};
use group::{Answer, Group, Stop, Subject};
pub use metrics::BatchCounts;
pub use servicing_settings::FromSettings;
pub use servicing_store::MAX_TRANSACTION_ITEMS;

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
                        report.record(message_id, self.quarantine(&entry).await);
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
    ) -> AccountResults {
        // Unwind safety: a panic leaves nothing half-written (a commit is one transaction) and
        // the cache is only a hint, dropped for the account below.
        let run = AssertUnwindSafe(self.process_account(&account, &pending));
        match run.catch_unwind().await {
            Ok(results) => results,
            Err(_) => {
                tracing::error!(alert = "panic", account = %account, "processing panicked; the account's messages will be redelivered");
                self.cache.forget(&account);
                let messages = pending
                    .iter()
                    .map(|p| {
                        let reason = "processing this account panicked".to_owned();
                        (p.message_id.to_owned(), MessageResult::Retry { reason })
                    })
                    .collect();
                AccountResults {
                    messages,
                    released: Vec::new(),
                }
            }
        }
    }

    #[tracing::instrument(skip_all, fields(account = %account, events = pending.len()))]
    async fn process_account(
        &self,
        account: &AccountId,
        pending: &[Pending<'_>],
    ) -> AccountResults {
        let mut work = AccountWork {
            targets: pending
                .iter()
                .filter_map(|p| p.event.reversal_target().cloned())
                .collect(),
            // A warm cached state saves the read; reversals always read (their payments).
            snapshot: None,
            confirmed: false,
            max_units: usize::MAX,
            released: Vec::new(),
        };
        if work.targets.is_empty() {
            work.snapshot = self.cache.get(account).map(|loan| Snapshot {
                loan: Some(loan),
                targets: HashMap::new(),
            });
        }
        let mut results: Vec<MessageResult> = Vec::with_capacity(pending.len());
        loop {
            let rest = &pending[results.len()..];
            let ready = work
                .snapshot
                .as_ref()
                .and_then(|s| s.loan.as_ref())
                .is_some_and(|l| l.parked.has_ready());
            if rest.is_empty() && !ready {
                break;
            }
            let answer = self.settle_next_group(account, rest, &mut work).await;
            results.extend(answer.settled);
            if let Some(at) = answer.failed_at {
                match rest.get(at) {
                    // SQS must redeliver the account's later events after the failed one, in
                    // order.
                    Some(first) => {
                        let reason = format!(
                            "an earlier event of this account failed ({})",
                            first.message_id
                        );
                        results.resize(pending.len(), MessageResult::Retry { reason });
                    }
                    // Every event is settled but a released fact's commit failed: nothing would
                    // bring it back (the account may get no later message), so the account's
                    // last event is redelivered. Its redelivery is a duplicate, and the state
                    // read for it releases the ready fact again.
                    None => {
                        if let Some(last) = results.last_mut() {
                            *last = MessageResult::Retry {
                                reason: "a parked fact this batch released failed to commit"
                                    .to_owned(),
                            };
                        }
                    }
                }
                break;
            }
        }
        match work.snapshot.and_then(|s| s.loan) {
            Some(state) => self.cache.put(state),
            None => self.cache.forget(account),
        }
        let messages = pending
            .iter()
            .map(|p| p.message_id.to_owned())
            .zip(results)
            .collect();
        AccountResults {
            messages,
            released: work.released,
        }
    }

    /// Settles the account's next group: ready parked facts and a run of its next events (the
    /// longest that fits one transaction). Claims refused in a cancelled group are settled from
    /// that answer (a duplicate costs no extra request); the others are planned again without
    /// them. The steps: read the state, settle what it already knows (`settle_known_facts`),
    /// read missing reversal targets, commit, then `committed`, `refused` (re-read and retry
    /// within the attempt budget), one fact per transaction after a request DynamoDB refused as
    /// such, or `failed_at`.
    async fn settle_next_group(
        &self,
        account: &AccountId,
        pending: &[Pending<'_>],
        work: &mut AccountWork,
    ) -> GroupAnswer {
        let mut settling = Settling {
            settled: vec![None; pending.len()],
            conflicts: 0,
        };
        loop {
            // The state (and the reversals' payments): read once per batch unless a refusal or a
            // failure made it stale; a warm cache may have it already.
            if !work.confirmed
                && work
                    .snapshot
                    .as_ref()
                    .is_some_and(|cached| group::holds_parked(pending, &settling.settled, cached))
            {
                // A cached parked fact may have been taken off since (expired by the
                // reconciler, its claim released for a resend): only the store can say.
                work.snapshot = None;
            }
            let snap = match &mut work.snapshot {
                Some(snap) => snap,
                None => {
                    let targets: Vec<&SourceRef> = work.targets.iter().collect();
                    match self.store.load(account, &targets).await {
                        Ok(loaded) => {
                            work.confirmed = true;
                            work.snapshot.insert(loaded)
                        }
                        Err(e) => return self.failed_at(pending, &mut settling.settled, e).await,
                    }
                }
            };
            let now = servicing_store::epoch_seconds();
            self.settle_known_facts(pending, &mut settling.settled, snap, now)
                .await;
            let group = Group::plan(
                pending,
                &settling.settled,
                snap,
                self.config.max_transaction_items,
                work.max_units,
                now,
            );
            if let Stop::NeedTargets(missing) = &group.stop {
                let wanted: Vec<&SourceRef> = missing.iter().collect();
                if let Err(e) = self.store.load_targets(account, &wanted, snap).await {
                    return self.failed_at(pending, &mut settling.settled, e).await;
                }
                work.targets.extend(missing.iter().cloned());
                continue;
            }
            if group.members.is_empty() {
                return GroupAnswer::settled(settling.settled, pending.len());
            }
            let units = group.units(pending);
            let answer = self
                .store
                .commit_all(&units, Some(group.loan_write(account)))
                .await;
            drop(units);
            match answer {
                Ok(outcomes) if outcomes.iter().all(|o| *o == CommitOutcome::Committed) => {
                    let full = group.stop == Stop::Full;
                    Self::committed(
                        group,
                        pending,
                        &mut settling.settled,
                        snap,
                        &mut work.released,
                    );
                    if full {
                        // The rest goes into the next group (the ready parked facts first).
                        let end = first_unsettled(&settling.settled).unwrap_or(pending.len());
                        return GroupAnswer::settled(settling.settled, end);
                    }
                }
                Ok(outcomes) => {
                    match self.refused(&group, outcomes, pending, &mut settling).await {
                        Ok(false) => {}
                        Ok(true) => work.snapshot = None,
                        Err(e) => {
                            work.snapshot = None;
                            return self.failed_at(pending, &mut settling.settled, e).await;
                        }
                    }
                }
                // Nothing was written: the same facts again, one per transaction.
                Err(StoreError::Rejected(_)) if group.members.len() > 1 => work.max_units = 1,
                // A released fact DynamoDB refuses on its own (e.g. the item it would grow is
                // over the size limit) is quarantined itself — off the loan item, its claim
                // released for a resend — never the event that happens to come next.
                Err(StoreError::Rejected(reason)) if group.sole_released().is_some() => {
                    let outcome = match (group.sole_released(), &snap.loan) {
                        (Some(released), Some(loan)) => {
                            let reason = format!("DynamoDB refused the request: {reason}");
                            self.quarantine_released(loan, &released.fact, reason).await
                        }
                        _ => Ok(false),
                    };
                    work.snapshot = None;
                    match outcome {
                        Ok(true) => work.released.push(MessageResult::Quarantined {
                            code: STORE_REJECTED.to_owned(),
                        }),
                        Ok(false) if settling.conflicts + 1 < self.config.max_commit_attempts => {
                            settling.conflicts += 1;
                        }
                        Ok(false) => {
                            let e = StoreError::Transient(
                                "a refused released fact could not be taken off its account".into(),
                            );
                            return self.failed_at(pending, &mut settling.settled, e).await;
                        }
                        Err(e) => return self.failed_at(pending, &mut settling.settled, e).await,
                    }
                }
                Err(e) => {
                    // The commit may or may not have happened (e.g. a lost response).
                    work.snapshot = None;
                    return self.failed_at(pending, &mut settling.settled, e).await;
                }
            }
        }
    }

    /// Events the state already answers: a recent or parked fact redelivered (a duplicate), or
    /// with another payload (a collision) — no request.
    async fn settle_known_facts(
        &self,
        pending: &[Pending<'_>],
        settled: &mut [Option<MessageResult>],
        snap: &Snapshot,
        now: i64,
    ) {
        for (index, collision) in group::known_facts(pending, settled, snap, now) {
            settled[index] = Some(match collision {
                None => MessageResult::Duplicate,
                Some(stored) => self.collision(&pending[index], &stored).await,
            });
        }
    }

    /// The group committed: its members' answers, its parked facts judged again.
    fn committed(
        group: Group,
        pending: &[Pending<'_>],
        settled: &mut [Option<MessageResult>],
        snap: &mut Snapshot,
        released: &mut Vec<MessageResult>,
    ) {
        for answer in group.committed(pending, snap) {
            match answer {
                Answer::Message(index, result) => settled[index] = Some(result),
                Answer::Released(source, result) => {
                    tracing::info!(source = %source, "parked fact judged again");
                    released.push(result);
                }
            }
        }
    }

    /// The group was cancelled: duplicates and collisions are answered from the refusal; any
    /// other refusal means the state moved (`Ok(true)`: re-read and plan again, after a
    /// backoff) — an error once the attempt budget is spent.
    async fn refused(
        &self,
        group: &Group,
        outcomes: Vec<CommitOutcome>,
        pending: &[Pending<'_>],
        settling: &mut Settling,
    ) -> Result<bool, StoreError> {
        let mut reread = false;
        for (member, outcome) in group.members_with_units(pending).zip(outcomes) {
            let index = match &member.subject {
                Subject::Pending(index) => Some(*index),
                Subject::Released(_) => None,
            };
            match (outcome, index) {
                (CommitOutcome::Duplicate, Some(i)) => {
                    settling.settled[i] = Some(MessageResult::Duplicate);
                }
                (CommitOutcome::Collision { stored }, Some(i)) => {
                    settling.settled[i] = Some(self.collision(&pending[i], &stored).await);
                }
                (CommitOutcome::Withdrawn, _) => {}
                _ => reread = true,
            }
        }
        if reread {
            settling.conflicts += 1;
            if settling.conflicts >= self.config.max_commit_attempts {
                return Err(StoreError::Transient(format!(
                    "still conflicting after {} attempts",
                    settling.conflicts
                )));
            }
            tracing::info!(
                attempt = settling.conflicts,
                "concurrent change; re-reading"
            );
            tokio::time::sleep(servicing_store::backoff(
                settling.conflicts,
                self.config.conflict_backoff,
            ))
            .await;
        }
        Ok(reread)
    }

    /// A store failure while settling: the first unsettled event gets it (quarantined when
    /// DynamoDB refuses it as such, else retried), and with it the run ends.
    async fn failed_at(
        &self,
        pending: &[Pending<'_>],
        settled: &mut Vec<Option<MessageResult>>,
        error: StoreError,
    ) -> GroupAnswer {
        let Some(first) = first_unsettled(settled) else {
            tracing::warn!(error = %error, "a parked fact's commit failed; it stays parked");
            return GroupAnswer {
                settled: settled_run(std::mem::take(settled), pending.len()),
                failed_at: Some(pending.len()),
            };
        };
        let result = self.store_failure(&pending[first], error).await;
        let retry = matches!(result, MessageResult::Retry { .. });
        settled[first] = Some(result);
        GroupAnswer {
            settled: settled_run(std::mem::take(settled), first + 1),
            failed_at: retry.then_some(first),
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

    /// Transient store errors are retried by SQS. A request DynamoDB refuses as such (e.g. an
    /// item over the size limit) will never succeed: quarantine it. Corrupt stored data needs
    /// an operator: retry (and let the DLQ catch it) rather than guess.
    async fn store_failure(&self, p: &Pending<'_>, error: StoreError) -> MessageResult {
        match error {
            StoreError::Rejected(reason) => {
                tracing::error!(error = %reason, "DynamoDB refused the request");
                let reason = format!("DynamoDB refused the request: {reason}");
                let entry = p.quarantine_entry(STORE_REJECTED, &reason);
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

/// The first event without an answer.
fn first_unsettled(settled: &[Option<MessageResult>]) -> Option<usize> {
    settled.iter().position(Option::is_none)
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

/// One account's answers: per message, and the verdicts of its parked facts judged again.
struct AccountResults {
    messages: Vec<(String, MessageResult)>,
    released: Vec<MessageResult>,
}

/// One group's answers: the events of its run it settled, in order, and — when something
/// failed — the index of the first event that must be retried (the run's length when only
/// parked facts were involved).
struct GroupAnswer {
    settled: Vec<MessageResult>,
    failed_at: Option<usize>,
}

impl GroupAnswer {
    /// The first `len` events, all settled, nothing failed.
    fn settled(settled: Vec<Option<MessageResult>>, len: usize) -> Self {
        Self {
            settled: settled_run(settled, len),
            failed_at: None,
        }
    }
}

/// Where settling one group stands: each event's answer once known, and the commit rounds
/// lost to concurrent writers so far.
struct Settling {
    settled: Vec<Option<MessageResult>>,
    conflicts: u32,
}

/// What settling an account's events carries from one group to the next.
struct AccountWork {
    /// The payments its reversals refer to (read with the account).
    targets: Vec<SourceRef>,
    snapshot: Option<Snapshot>,
    /// The snapshot was read from the store in this invocation (not a warm cache's hint).
    /// A cached state may answer a fact it lists as recently applied — an applied fact stays
    /// applied — but never one it holds parked.
    confirmed: bool,
    /// Facts per transaction; 1 for the rest of the batch once DynamoDB refused a group's
    /// request as such (too large, invalid), so one bad item cannot take the others with it.
    max_units: usize,
    released: Vec<MessageResult>,
}

fn receive_count(message: &SqsMessage) -> u32 {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}
