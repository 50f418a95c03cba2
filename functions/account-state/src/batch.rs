//! One batch: every message decoded (an undecodable one, or one too far ahead, quarantined at
//! once), the rest grouped by account in batch order, the accounts run side by side (bounded,
//! a panic confined to its account), and their answers and decision records gathered into the
//! [`BatchReport`]. Separate from the account loop: this part knows SQS messages, the loop one
//! account's events.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use aws_lambda_events::event::sqs::SqsMessage;
use futures_util::{FutureExt, StreamExt};
use servicing_domain::{AccountId, EVENT_TIME_IN_FUTURE, Fingerprint, ServicingEvent};
use servicing_store::QuarantineEntry;
use servicing_telemetry::{DecidedBy, DecisionRecord};

use crate::AccountStateHandler;
use crate::deadline::Deadline;
use crate::decisions;
use crate::report::{BatchReport, MessageResult};

/// A decoded message waiting for its account's turn.
pub(crate) struct Pending<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) body: &'a str,
    pub(crate) receive_count: u32,
    pub(crate) event: ServicingEvent,
    pub(crate) fingerprint: Fingerprint,
}

impl<'a> Pending<'a> {
    /// What the quarantine keeps of a decoded message: raw body, identity, fingerprint, reason.
    pub(crate) fn quarantine_entry(
        &'a self,
        code: &'a str,
        reason: &'a str,
    ) -> QuarantineEntry<'a> {
        QuarantineEntry {
            source: Some(&self.event.source),
            account_id: Some(&self.event.account_id),
            received_fingerprint: Some(&self.fingerprint),
            receive_count: Some(self.receive_count),
            ..QuarantineEntry::new(self.message_id, self.body, code, reason)
        }
    }
}

impl AccountStateHandler {
    /// A batch with no deadline (tools, tests, the bench).
    pub async fn process(&self, messages: &[SqsMessage]) -> BatchReport {
        self.process_until(messages, Deadline::NONE).await
    }

    /// A batch in which no read or commit starts after `deadline`: what is left then is
    /// answered as retries (`deadline`).
    pub async fn process_until(&self, messages: &[SqsMessage], deadline: Deadline) -> BatchReport {
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
                        let result = self.quarantine(&entry, deadline).await;
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
                        .quarantine_undecodable(message_id, body, receive_count, &error, deadline)
                        .await;
                    let record = decisions::undecodable(consumer, message, &result, &error);
                    report.decisions.push(record);
                    report.record(message_id, result);
                }
            }
        }

        // Facts under the payments API's prefix apply only as payments it accepted (one read).
        self.hold_to_accepted_payments(&mut by_account, &mut report, deadline)
            .await;

        // Each account registers as a participant of group commit when it is taken up (all the
        // accounts that will run side by side, before any of them runs): their commits then
        // leave together, one transaction for several accounts.
        let results: Vec<AccountResults> = futures_util::stream::iter(by_account)
            .map(|(account, pending)| {
                let participant = self.store.participant();
                self.process_account_isolated(account, pending, participant, deadline)
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
        decisions::stamp_senders(&mut report.decisions, messages);
        decisions::seal_content_keys(&mut report.decisions, &self.content_keyer);
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
        deadline: Deadline,
    ) -> AccountResults {
        // Unwind safety: a panic leaves nothing half-written (a commit is one transaction) and
        // the cache is only a hint, dropped for the account below.
        let run = AssertUnwindSafe(self.process_account(&account, &pending, deadline));
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
}

impl BatchReport {
    pub(crate) fn record(&mut self, message_id: &str, result: MessageResult) {
        self.counts.count(&result);
        self.results.push((message_id.to_owned(), result));
    }
}

/// One account's answers and records: per message, and of its parked facts judged again.
pub(crate) struct AccountResults {
    pub(crate) messages: Vec<(String, MessageResult)>,
    pub(crate) released: Vec<MessageResult>,
    pub(crate) decisions: Vec<DecisionRecord>,
}

pub(crate) fn receive_count(message: &SqsMessage) -> u32 {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}
