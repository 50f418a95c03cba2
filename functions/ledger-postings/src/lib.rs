//! The ledger-postings consumer: money-moving domain events (EventBridge → SQS) in, one
//! balanced double-entry journal entry per event and the account's sub-ledger out
//! (`docs/ledger.md`).
//!
//! Protocol, per message:
//! 1. decode the EventBridge envelope; an event that moves no money is ignored (no claim: it
//!    posts nothing), a detail that is not a valid money event is quarantined with its reason;
//! 2. read the account's balances and the event's entry (one consistent `BatchGetItem`: an
//!    entry there is a duplicate or a collision, decided without a transaction) and the last
//!    closed day (cached for a minute: the commit checks it anyway);
//! 3. post: the entry (the claim of `(ledger-postings, eventId)`), the balances at the version
//!    read, the check that the posting date is open — ONE transaction. A refused entry is a
//!    duplicate (same detail) or a collision (quarantined, the first stands); moved balances or
//!    a close in between: read again, post again.
//!
//! Postings commute (a balance is a sum), so delivery order does not matter: the queue is a
//! standard one (`docs/ledger.md`, "Why a standard queue").

mod config;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, NaiveDate};
use futures_util::StreamExt;
use serde_json::Value;
use servicing_domain::Fingerprint;
use servicing_domain::journal::{
    JournalEntry, LedgerAccount, Posting, entry_of, missing_currency, posting_date,
};
use servicing_store::journal::PostOutcome;
use servicing_store::{QuarantineEntry, ServicingStore, StoreError};
use servicing_telemetry::{DecidedBy, DecisionRecord, Verdict};

pub use config::Config;
pub use servicing_settings::{ConfigError, FromSettings};

pub const CONSUMER: &str = "ledger-postings";

/// Quarantine codes: a body that is not a valid money event; an event id posted with another
/// detail; an entry the account's sub-ledger refuses (another currency, an overflow).
pub const INVALID_EVENT: &str = "invalid_event";
pub const COLLISION: &str = "collision";
pub const UNPOSTABLE: &str = "unpostable";
/// An event of a fact the account's opening balance holds (`ledger migrate`).
pub const BEFORE_OPENING: &str = "before_opening";

/// Posts of one event that lose to a concurrent posting or close before the message is retried.
const POST_ATTEMPTS: u32 = 6;
/// How long the last closed day read is trusted (the commit checks it in any case).
const PERIOD_CACHE: Duration = Duration::from_secs(60);

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageResult {
    /// Posted now, to this period.
    Posted {
        posting_date: NaiveDate,
    },
    /// Posted before: nothing new.
    Duplicate,
    /// An event that moves no money: nothing to post.
    Ignored,
    Quarantined {
        code: &'static str,
        reason: String,
    },
    Retry {
        reason: String,
    },
}

#[derive(Debug)]
pub struct LedgerPostingsHandler {
    store: ServicingStore,
    concurrency: usize,
    /// The last closed day as read, and when.
    closed: Mutex<Option<(Option<NaiveDate>, Instant)>>,
    /// A bill without a currency on an account with no sub-ledger yet takes servicing's loan
    /// currency (operators' catch-up: `ledgerctl ledger backfill`/`migrate`, whose credentials
    /// read loans; the Lambda's role does not, and waits for the account's opening instead).
    currency_from_servicing: bool,
}

/// A batch's results (by message id, in order) and the decision record of each money event
/// delivered (and of each body that does not decode), in the same order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerReport {
    pub results: Vec<(String, MessageResult)>,
    pub decisions: Vec<DecisionRecord>,
}

/// A batch's outcomes, as EMF metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub posted: u64,
    pub duplicate: u64,
    pub ignored: u64,
    pub quarantined: u64,
    pub retried: u64,
    /// Entries posted to the first open day because their business date was closed.
    pub backdated: u64,
}

impl BatchCounts {
    /// EMF metric names and values (namespace `LoanServicing`, dimension `Consumer`).
    pub fn metrics(&self) -> [(&'static str, u64); 6] {
        [
            ("Applied", self.posted),
            ("Duplicate", self.duplicate),
            ("Ignored", self.ignored),
            ("Quarantined", self.quarantined),
            ("Retried", self.retried),
            ("BackdatedPostings", self.backdated),
        ]
    }
}

impl LedgerPostingsHandler {
    pub fn new(store: ServicingStore) -> Self {
        Self {
            store,
            concurrency: 8,
            closed: Mutex::new(None),
            currency_from_servicing: false,
        }
    }

    /// The handler operators' commands post through: as the Lambda's, and a bill without a
    /// currency on an account the ledger has not posted yet takes servicing's loan currency
    /// (an account migrated from older history may have no entry to say it).
    pub fn for_operators(store: ServicingStore) -> Self {
        Self {
            currency_from_servicing: true,
            ..Self::new(store)
        }
    }

    /// The Lambda entry point: processes, prints each decision record and the batch's EMF line.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let report = self.process_batch(&event.records).await;
        let trace_id = servicing_telemetry::current_trace_id();
        for record in &report.decisions {
            servicing_telemetry::print_decision(&DecisionRecord {
                trace_id: trace_id.clone(),
                ..record.clone()
            });
        }
        let mut response = SqsBatchResponse::default();
        let mut counts = BatchCounts::default();
        for (id, result) in &report.results {
            match result {
                MessageResult::Posted { .. } => counts.posted += 1,
                MessageResult::Duplicate => counts.duplicate += 1,
                MessageResult::Ignored => counts.ignored += 1,
                MessageResult::Quarantined { .. } => counts.quarantined += 1,
                MessageResult::Retry { .. } => {
                    counts.retried += 1;
                    response.add_failure(id.clone());
                }
            }
        }
        counts.backdated = report
            .decisions
            .iter()
            .filter(|d| {
                d.reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with(BACKDATED))
            })
            .count() as u64;
        servicing_telemetry::emit(CONSUMER, &counts.metrics());
        response
    }

    /// Messages are independent (one event each; postings commute): processed concurrently,
    /// bounded.
    pub async fn process_batch(&self, messages: &[SqsMessage]) -> LedgerReport {
        let processed: Vec<(String, MessageResult, Option<DecisionRecord>)> =
            futures_util::stream::iter(messages)
                .map(|m| async move {
                    let id = m.message_id.clone().unwrap_or_default();
                    let body = m.body.as_deref().unwrap_or_default();
                    let receive_count = m
                        .attributes
                        .get("ApproximateReceiveCount")
                        .and_then(|n| n.parse().ok());
                    let (result, record) = self.process_one(&id, body, receive_count).await;
                    let sent_by = servicing_telemetry::sent_by_of(m);
                    let record = record.map(|r| DecisionRecord { sent_by, ..r });
                    (id, result, record)
                })
                .buffered(self.concurrency)
                .collect()
                .await;
        let mut report = LedgerReport::default();
        for (id, result, record) in processed {
            report.results.push((id, result));
            report.decisions.extend(record);
        }
        report
    }

    /// One delivery: its result and decision record (none for an event that moves no money).
    #[tracing::instrument(skip_all, fields(message_id))]
    pub async fn process_one(
        &self,
        message_id: &str,
        body: &str,
        receive_count: Option<u32>,
    ) -> (MessageResult, Option<DecisionRecord>) {
        let mut record = DecisionRecord {
            receive_count,
            ..DecisionRecord::new(CONSUMER, message_id, Verdict::Retried, DecidedBy::Decode)
        };
        let envelope = match serde_json::from_str::<Value>(body) {
            Ok(envelope) => envelope,
            Err(e) => {
                let reason = format!("body is not JSON: {e}");
                let result = self
                    .quarantine(message_id, body, INVALID_EVENT, reason)
                    .await;
                return (result.clone(), Some(settle(record, &result)));
            }
        };
        record.source_system = envelope["source"].as_str().map(str::to_owned);
        let detail = &envelope["detail"];
        // A major this build does not know is refused before anything is read for it.
        if let Err(reason) = servicing_domain::outbox::check_schema_version(detail) {
            let result = self
                .quarantine(message_id, body, INVALID_EVENT, reason)
                .await;
            return (result.clone(), Some(settle(record, &result)));
        }
        // A bill published before events carried its currency: its account's, from the
        // sub-ledger its opening posted (the fingerprint stays the detail's as published).
        let completed = match self.with_account_currency(detail).await {
            Ok(completed) => completed,
            Err(reason) => {
                let result = MessageResult::Retry { reason };
                record.source_event_id = detail["eventId"].as_str().map(str::to_owned);
                record.account_id = detail["accountId"].as_str().map(str::to_owned);
                record.fingerprint = Some(Fingerprint::of_value(detail).as_str().to_owned());
                return (result.clone(), Some(settle(record, &result)));
            }
        };
        let decoded = match entry_of(completed.as_ref().unwrap_or(detail)) {
            Ok(entry) => Ok(entry.map(|e| (e, detail.clone()))),
            Err(e) => Err(format!("not a postable money event: {e}")),
        };
        let (entry, detail) = match decoded {
            Ok(Some(found)) => found,
            Ok(None) => return (MessageResult::Ignored, None),
            Err(reason) => {
                let result = self
                    .quarantine(message_id, body, INVALID_EVENT, reason)
                    .await;
                return (result.clone(), Some(settle(record, &result)));
            }
        };
        let fingerprint = Fingerprint::of_value(&detail);
        record.source_event_id = Some(entry.entry_id.clone());
        record.account_id = Some(entry.account_id.as_str().to_owned());
        record.currency = Some(entry.currency.as_str().to_owned());
        record.amount_minor = detail["amountMinor"].as_i64();
        record.fingerprint = Some(fingerprint.as_str().to_owned());
        let result = match self.post(&entry, &fingerprint).await {
            Ok(Ok(result)) => result,
            Ok(Err((code, reason))) => self.quarantine(message_id, body, code, reason).await,
            Err(e) => MessageResult::Retry {
                reason: e.to_string(),
            },
        };
        if let MessageResult::Posted { posting_date } = &result
            && *posting_date != entry.effective_at.date_naive()
        {
            record.reason = Some(format!(
                "{BACKDATED}: effective {}, its period was closed",
                entry.effective_at.date_naive()
            ));
        }
        (result.clone(), Some(settle(record, &result)))
    }

    /// `detail` with its account's currency when it is a bill published without one (`None`:
    /// nothing to add); an error (retry) while the account has no sub-ledger to say it.
    async fn with_account_currency(&self, detail: &Value) -> Result<Option<Value>, String> {
        if !missing_currency(detail) {
            return Ok(None);
        }
        let account = detail["accountId"]
            .as_str()
            .and_then(|a| servicing_domain::AccountId::parse(a).ok());
        let Some(account) = account else {
            return Ok(None);
        };
        let mut currency = self
            .store
            .sub_ledger(&account)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|r| r.currency);
        if currency.is_none() && self.currency_from_servicing {
            currency = self
                .store
                .loan_state(&account)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|loan| loan.account)
                .map(|state| state.currency);
        }
        let Some(currency) = currency else {
            return Err(format!(
                "a bill without a currency on {account}: waits for the account's opening to be posted"
            ));
        };
        let mut completed = detail.clone();
        completed["currency"] = Value::String(currency.as_str().to_owned());
        Ok(Some(completed))
    }

    /// Reads, posts, and again when the balances moved or a close came in between. The inner
    /// error is a quarantine (code, reason). Also how an operator's correcting entry is posted
    /// (`ledgerctl ledger correct`): the same claim, balances and period check as any event's.
    pub async fn post(
        &self,
        entry: &JournalEntry,
        fingerprint: &Fingerprint,
    ) -> Result<Result<MessageResult, (&'static str, String)>, StoreError> {
        let collision = |stored: &str| {
            format!(
                "collision: event {} was posted with fingerprint {stored}, this one has {fingerprint}",
                entry.entry_id
            )
        };
        for attempt in 0..POST_ATTEMPTS {
            let (read, posted) = self
                .store
                .sub_ledger_and_entry(&entry.account_id, &entry.entry_id)
                .await?;
            // Posted before: told apart by the detail's fingerprint, without a transaction.
            if let Some(posted) = posted {
                return Ok(match posted.fingerprint == fingerprint.as_str() {
                    true => Ok(MessageResult::Duplicate),
                    false => Err((COLLISION, collision(&posted.fingerprint))),
                });
            }
            // An account opened from servicing holds in its opening every fact whose record
            // had gone: such a fact's event (an archive replay, a redrive) is not posted again.
            // Only migrated accounts pay this read.
            let opened = read.as_ref().is_some_and(|r| {
                r.balances
                    .contains_key(&LedgerAccount::OpeningBalances.code())
            });
            if opened
                && entry.correction.is_none()
                && !self.store.fact_record_held(&entry.trigger).await?
            {
                return Ok(Err((
                    BEFORE_OPENING,
                    format!(
                        "{} is opened from servicing ({}) and servicing holds no record of {}: its opening balance holds this fact already",
                        entry.account_id,
                        servicing_domain::journal::opening_id(&entry.account_id),
                        entry.trigger
                    ),
                )));
            }
            let closed = self.closed_through(attempt > 0).await?;
            let mut next = read.as_ref().map(|r| r.sub_ledger()).unwrap_or_default();
            if let Err(e) = next.post(entry) {
                return Ok(Err((UNPOSTABLE, e.0)));
            }
            let posting = Posting {
                entry: entry.clone(),
                processed_at: DateTime::from_timestamp_millis(servicing_store::epoch_millis())
                    .unwrap_or_default(),
                posting_date: posting_date(entry.effective_at.date_naive(), closed),
            };
            match self
                .store
                .post_entry(&posting, fingerprint, read.as_ref(), &next, None)
                .await?
            {
                PostOutcome::Posted => {
                    return Ok(Ok(MessageResult::Posted {
                        posting_date: posting.posting_date,
                    }));
                }
                PostOutcome::Duplicate => return Ok(Ok(MessageResult::Duplicate)),
                PostOutcome::Collision { stored } => {
                    return Ok(Err((COLLISION, collision(stored.as_str()))));
                }
                PostOutcome::Moved | PostOutcome::Contended => {
                    tokio::time::sleep(servicing_store::backoff(
                        attempt + 1,
                        Duration::from_millis(20),
                    ))
                    .await;
                }
            }
        }
        Err(StoreError::Transient(format!(
            "{POST_ATTEMPTS} postings of {} lost to concurrent writers",
            entry.entry_id
        )))
    }

    /// The last closed day: the cached read unless `fresh` or older than a minute.
    async fn closed_through(&self, fresh: bool) -> Result<Option<NaiveDate>, StoreError> {
        let cached = *self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((closed, at)) = cached
            && !fresh
            && at.elapsed() < PERIOD_CACHE
        {
            return Ok(closed);
        }
        let closed = self.store.closed_through_any().await?;
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = Some((closed, Instant::now()));
        Ok(closed)
    }

    async fn quarantine(
        &self,
        message_id: &str,
        body: &str,
        code: &'static str,
        reason: String,
    ) -> MessageResult {
        let entry = QuarantineEntry::new(message_id, body, code, &reason);
        match self.store.quarantine(&entry).await {
            Ok(()) => {
                tracing::warn!(code, reason, "quarantined");
                MessageResult::Quarantined { code, reason }
            }
            Err(e) => MessageResult::Retry {
                reason: e.to_string(),
            },
        }
    }
}

/// The reason prefix of a posting whose business date was in a closed period.
const BACKDATED: &str = "backdated";

/// The record of a delivery with its result.
fn settle(mut record: DecisionRecord, result: &MessageResult) -> DecisionRecord {
    let (verdict, by) = match result {
        MessageResult::Posted { .. } => (Verdict::Applied, DecidedBy::Claim),
        MessageResult::Duplicate => (Verdict::Duplicate, DecidedBy::RefusedClaim),
        // Never recorded: an event that moves no money leaves no record (see `process_one`).
        MessageResult::Ignored => (Verdict::Stale, DecidedBy::BusinessRule),
        MessageResult::Quarantined { code, reason } => {
            record.code = Some((*code).to_owned());
            record.reason = Some(reason.clone());
            let by = match *code {
                COLLISION => DecidedBy::RefusedClaim,
                INVALID_EVENT => DecidedBy::Decode,
                _ => DecidedBy::BusinessRule,
            };
            let verdict = match *code {
                COLLISION => Verdict::Collision,
                _ => Verdict::Quarantined,
            };
            (verdict, by)
        }
        MessageResult::Retry { reason } => {
            record.reason = Some(reason.clone());
            (Verdict::Retried, DecidedBy::Transient)
        }
    };
    record.verdict = verdict;
    record.decided_by = by;
    record
}

#[cfg(test)]
mod tests;
