//! The decision records of a batch: how each verdict was reached, noted beside the account run
//! (which keeps the verdicts only), and the records built from the pending messages and their
//! results. `account_loop.rs` tells the [`Trail`] what it sees at each step; nothing here does
//! I/O but printing.

use std::collections::{HashMap, HashSet};

use aws_lambda_events::event::sqs::SqsMessage;
use servicing_domain::{Currency, DecodeError, EventKind, Fingerprint, ServicingEvent};
use servicing_store::{CommitOutcome, LoanItem};
use servicing_telemetry::{ContentKeyer, ContentParts, DecidedBy, DecisionRecord, Verdict};

use crate::batch::Pending;
use crate::group::{Group, Judged, Member, Released, Subject};
use crate::quarantine::STORE_REJECTED;
use crate::report::MessageResult;

/// Prints each decision record (one line each), then the per-source EMF documents computed
/// from them (counts by verdict per source and event type, money per source and currency).
pub fn emit_decisions(consumer: &str, decisions: &[DecisionRecord]) {
    for record in decisions {
        servicing_telemetry::print_decision(record);
    }
    servicing_telemetry::emit_decision_metrics(consumer, decisions);
}

/// Stamps the invocation on every record: the Lambda request id, and the X-Ray trace id
/// (from the invocation context: `servicing_telemetry::with_trace`).
pub(crate) fn stamp(decisions: &mut [DecisionRecord], request_id: Option<&str>) {
    let trace_id = servicing_telemetry::current_trace_id();
    for record in decisions {
        record.request_id = request_id.map(str::to_owned);
        record.trace_id.clone_from(&trace_id);
    }
}

/// A message without `ApproximateReceiveCount` is taken as received once; its records say
/// nothing rather than that guess.
pub(crate) fn drop_unknown_receive_counts(
    decisions: &mut [DecisionRecord],
    messages: &[SqsMessage],
) {
    let uncounted: HashSet<&str> = messages
        .iter()
        .filter(|m| !m.attributes.contains_key("ApproximateReceiveCount"))
        .map(|m| m.message_id.as_deref().unwrap_or_default())
        .collect();
    for record in decisions {
        if uncounted.contains(record.message_id.as_str()) {
            record.receive_count = None;
        }
    }
}

/// Each record's content key, made under the deployment's secret (the parts dropped).
pub(crate) fn seal_content_keys(decisions: &mut [DecisionRecord], keyer: &ContentKeyer) {
    for record in decisions {
        record.seal_content_key(keyer);
    }
}

/// Who sent each message no producer sent (its `sentBy` attribute: an operator's ARN, the
/// reconciler, the daily close), on the records of its delivery.
pub(crate) fn stamp_senders(decisions: &mut [DecisionRecord], messages: &[SqsMessage]) {
    let senders: HashMap<&str, String> = messages
        .iter()
        .filter_map(|m| {
            let sent_by = servicing_telemetry::sent_by_of(m)?;
            Some((m.message_id.as_deref().unwrap_or_default(), sent_by))
        })
        .collect();
    for record in decisions {
        record.sent_by = senders.get(record.message_id.as_str()).cloned();
    }
}

/// The record of a body that is not a valid event: nothing of the fact is known.
pub(crate) fn undecodable(
    consumer: &str,
    message: &SqsMessage,
    result: &MessageResult,
    error: &DecodeError,
) -> DecisionRecord {
    let message_id = message.message_id.as_deref().unwrap_or_default();
    let (verdict, by) = (Verdict::Quarantined, DecidedBy::Decode);
    let mut record = DecisionRecord {
        receive_count: Some(crate::batch::receive_count(message)),
        ..DecisionRecord::new(consumer, message_id, verdict, by)
    };
    settle(&mut record, result, Some(error.to_string()));
    record
}

impl Pending<'_> {
    /// This delivery's record, decided by `decided_by` with `result`.
    pub(crate) fn decision(
        &self,
        consumer: &str,
        decided_by: DecidedBy,
        result: &MessageResult,
        reason: Option<String>,
    ) -> DecisionRecord {
        let mut record = self.record(consumer, decided_by);
        settle(&mut record, result, reason);
        record
    }

    /// This delivery's record before its verdict.
    fn record(&self, consumer: &str, decided_by: DecidedBy) -> DecisionRecord {
        fact_record(
            consumer,
            self.message_id,
            Some(self.receive_count),
            &self.event,
            &self.fingerprint,
            self.body,
            decided_by,
        )
    }
}

/// How an account's verdicts were reached: per pending event, and the released facts in the
/// order the run keeps their verdicts (each group's released members in group order, as
/// [`Group::committed`] answers them).
pub(crate) struct Trail<'p, 'a> {
    consumer: &'p str,
    pending: &'p [Pending<'a>],
    by: Vec<Option<DecidedBy>>,
    /// Why a pending event was quarantined, when known (business rejection, refused request).
    reasons: Vec<Option<String>>,
    /// The records of the released facts (verdict and outcome set by [`Trail::finish`]), with
    /// the reason of a rejection.
    released: Vec<(DecisionRecord, Option<String>)>,
}

impl<'p, 'a> Trail<'p, 'a> {
    pub(crate) fn new(consumer: &'p str, pending: &'p [Pending<'a>]) -> Self {
        Self {
            consumer,
            pending,
            by: vec![None; pending.len()],
            reasons: vec![None; pending.len()],
            released: Vec::new(),
        }
    }

    /// Events answered from the loan item: its recent facts (same fingerprint) come first,
    /// then its parked facts (a collision is always one of those).
    pub(crate) fn known(
        &mut self,
        known: &[(usize, Option<Fingerprint>)],
        loan: Option<&LoanItem>,
        now: i64,
    ) {
        for (index, collision) in known {
            let p = &self.pending[*index];
            let recent = collision.is_none()
                && loan.is_some_and(|l| l.recent.holds(&p.event.source, &p.fingerprint, now));
            self.by[*index] = Some(match recent {
                true => DecidedBy::RecentFacts,
                false => DecidedBy::ParkedList,
            });
        }
    }

    /// DynamoDB answered a group's commit (not a failed request): committed, or cancelled.
    pub(crate) fn answered(&mut self, group: &Group, outcomes: &[CommitOutcome]) {
        match outcomes.iter().all(|o| *o == CommitOutcome::Committed) {
            true => self.committed(group),
            false => self.refused(group, outcomes),
        }
    }

    /// A group committed: each member was decided by its claim (applied) or by the domain.
    fn committed(&mut self, group: &Group) {
        for member in &group.members {
            let reason = match &member.judged {
                Judged::Reject(rejection) => Some(rejection.reason.clone()),
                _ => None,
            };
            match &member.subject {
                Subject::Pending(i) if member.parked_first => {
                    // Answered as parked, then released in the same transaction.
                    self.by[*i] = Some(DecidedBy::BusinessRule);
                    let record = self.pending[*i].record(self.consumer, judged_by(member));
                    self.released.push((record, reason));
                }
                Subject::Pending(i) => {
                    self.by[*i] = Some(judged_by(member));
                    self.reasons[*i] = reason;
                }
                Subject::Released(released) => {
                    let by = match released.event {
                        Some(_) => judged_by(member),
                        None => DecidedBy::Decode,
                    };
                    let record = released_record(self.consumer, released, by);
                    self.released.push((record, reason));
                }
            }
        }
    }

    /// A group was cancelled: the claims DynamoDB refused answer for their events.
    fn refused(&mut self, group: &Group, outcomes: &[CommitOutcome]) {
        for (member, outcome) in group.members_with_units(self.pending).zip(outcomes) {
            if let (
                Subject::Pending(i),
                CommitOutcome::Duplicate | CommitOutcome::Collision { .. },
            ) = (&member.subject, outcome)
            {
                self.by[*i] = Some(DecidedBy::RefusedClaim);
            }
        }
    }

    /// DynamoDB refused the request of the pending event at `index` as such.
    pub(crate) fn store_rejected(&mut self, index: usize, reason: String) {
        self.by[index] = Some(DecidedBy::StoreRejected);
        self.reasons[index] = Some(reason);
    }

    /// DynamoDB refused the request of a group's sole released fact as such: it was
    /// quarantined off the loan item.
    pub(crate) fn released_store_rejected(&mut self, group: &Group, reason: String) {
        if let Some(released) = group.sole_released() {
            let record = released_record(self.consumer, released, DecidedBy::StoreRejected);
            self.released.push((record, Some(reason)));
        }
    }

    /// The records of a finished run: one per pending event (`results`, in order), one
    /// `released` record per parked fact judged again (`released`, in the trail's order).
    pub(crate) fn finish(
        self,
        results: &[MessageResult],
        released: &[MessageResult],
    ) -> Vec<DecisionRecord> {
        let mut decisions: Vec<DecisionRecord> = self
            .pending
            .iter()
            .zip(results)
            .zip(self.by.iter().zip(self.reasons))
            .map(|((p, result), (noted, reason))| {
                p.decision(self.consumer, decided_by(result, *noted), result, reason)
            })
            .collect();
        // Paired by position: a count that differs means the trail missed a step.
        if self.released.len() != released.len() {
            tracing::error!(
                alert = "decision_records_missing",
                noted = self.released.len(),
                released = released.len(),
                "released facts without their identity: no released records for this account"
            );
            return decisions;
        }
        for ((mut record, reason), result) in self.released.into_iter().zip(released) {
            settle(&mut record, result, reason);
            record.outcome = Some(verdict(result));
            record.verdict = Verdict::Released;
            decisions.push(record);
        }
        decisions
    }
}

/// The records of an account whose processing panicked: each message retried.
pub(crate) fn panicked(
    consumer: &str,
    pending: &[Pending<'_>],
    result: &MessageResult,
) -> Vec<DecisionRecord> {
    pending
        .iter()
        .map(|p| p.decision(consumer, DecidedBy::Panic, result, None))
        .collect()
}

/// The verdict a decision record states for a result.
fn verdict(result: &MessageResult) -> Verdict {
    match result {
        MessageResult::Applied => Verdict::Applied,
        MessageResult::Stale => Verdict::Stale,
        MessageResult::Duplicate => Verdict::Duplicate,
        MessageResult::Collision => Verdict::Collision,
        MessageResult::Quarantined { .. } => Verdict::Quarantined,
        MessageResult::Parked => Verdict::Parked,
        MessageResult::Retry { .. } => Verdict::Retried,
    }
}

/// How a committed member was decided: applied by its (new) claim, anything else by the domain.
fn judged_by(member: &Member) -> DecidedBy {
    match member.judged {
        Judged::Apply(_) => DecidedBy::Claim,
        Judged::Stale | Judged::Reject(_) | Judged::Park(_) | Judged::Duplicate => {
            DecidedBy::BusinessRule
        }
    }
}

/// How a result was decided, given what the trail noted. A retry is always `transient`, a
/// refused request `store-rejected`; without a note (not expected) the coarse default: the claim
/// for an applied fact, the domain for the rest.
fn decided_by(result: &MessageResult, noted: Option<DecidedBy>) -> DecidedBy {
    match (result, noted) {
        (MessageResult::Retry { .. }, _) => DecidedBy::Transient,
        (MessageResult::Quarantined { code }, _) if code == STORE_REJECTED => {
            DecidedBy::StoreRejected
        }
        (_, Some(noted)) => noted,
        (MessageResult::Applied, None) => DecidedBy::Claim,
        (_, None) => DecidedBy::BusinessRule,
    }
}

/// Sets a record's verdict from the result: the quarantine code, and the reason of a quarantine
/// (when known) or of a retry.
fn settle(record: &mut DecisionRecord, result: &MessageResult, reason: Option<String>) {
    record.verdict = verdict(result);
    match result {
        MessageResult::Quarantined { code } => {
            record.code = Some(code.clone());
            record.reason = reason;
        }
        MessageResult::Retry { reason } => record.reason = Some(reason.clone()),
        _ => {}
    }
}

/// The record of a released parked fact: the message that brought it (received in an earlier
/// batch: its receive count is not known), its identity and fingerprint; what its stored body
/// says when it still decodes.
fn released_record(consumer: &str, released: &Released, decided_by: DecidedBy) -> DecisionRecord {
    let fact = &released.fact;
    match &released.event {
        Some(event) => fact_record(
            consumer,
            &fact.message_id,
            None,
            event,
            &fact.fingerprint,
            &fact.body,
            decided_by,
        ),
        None => DecisionRecord {
            source_system: Some(fact.source.system.clone()),
            source_event_id: Some(fact.source.event_id.clone()),
            account_id: Some(released.account_id.as_str().to_owned()),
            fingerprint: Some(fact.fingerprint.as_str().to_owned()),
            ..DecisionRecord::new(consumer, &fact.message_id, Verdict::Released, decided_by)
        },
    }
}

/// What a record knows of a decoded fact: identity, type, account, business time, its money,
/// fingerprint and content key.
fn fact_record(
    consumer: &str,
    message_id: &str,
    receive_count: Option<u32>,
    event: &ServicingEvent,
    fingerprint: &Fingerprint,
    body: &str,
    decided_by: DecidedBy,
) -> DecisionRecord {
    let (amount, currency) = money_of(&event.kind);
    let currency = currency.map(|c| c.as_str().to_owned());
    let event_time = event
        .event_time
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let content = ContentParts {
        account_id: event.account_id.as_str().to_owned(),
        amount_minor: amount,
        currency: currency.clone(),
        event_time: event_time.clone(),
        reference: payment_reference(body),
    };
    DecisionRecord {
        receive_count,
        source_system: Some(event.source.system.clone()),
        source_event_id: Some(event.source.event_id.clone()),
        event_type: Some(event.kind.wire_name().to_owned()),
        account_id: Some(event.account_id.as_str().to_owned()),
        event_time: Some(event_time),
        amount_minor: amount,
        currency,
        fingerprint: Some(fingerprint.as_str().to_owned()),
        // Keyed by `seal_content_keys` before anything prints the record.
        content: Some(content),
        // Replaced by `settle` (or by the released verdict).
        ..DecisionRecord::new(consumer, message_id, Verdict::Retried, decided_by)
    }
}

/// The wire `amountMinor` of an event (the types that carry one) and its currency (any type
/// that carries one).
fn money_of(kind: &EventKind) -> (Option<i64>, Option<Currency>) {
    match kind {
        EventKind::InterestAccrued { amount }
        | EventKind::FeeAssessed { amount, .. }
        | EventKind::PaymentSettled { amount }
        | EventKind::PaymentReversed { amount, .. } => {
            (Some(amount.minor()), Some(amount.currency))
        }
        EventKind::LoanOpened { principal, .. } => (None, Some(principal.currency)),
        EventKind::CreditLimitSet { limit, .. } => (None, Some(limit.currency)),
        EventKind::InstallmentDue { .. } | EventKind::BusinessDayClosed { .. } => (None, None),
    }
}

/// The producer's payment `reference` of a body (API payments carry one), for the content key.
fn payment_reference(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value.get("reference")?.as_str().map(str::to_owned)
}
