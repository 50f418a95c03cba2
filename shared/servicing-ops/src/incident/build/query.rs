//! What an incident report covers: the window, the consumer and the filters, which records
//! they select and what the table must be asked for them. Separate from the report: it is the
//! part `reconstruct` needs before any read.

use chrono::{DateTime, Duration, Utc};
use servicing_telemetry::{DecisionRecord, Verdict, bounded_source};

use super::identity;
use crate::incident::{Collected, Timed, Wanted};

/// What the report covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Decided at or after.
    pub from: DateTime<Utc>,
    /// Decided before.
    pub to: DateTime<Utc>,
    /// The deduplicating consumer whose deliveries are reported (`account-state`).
    pub consumer: String,
    /// Only this source's deliveries (`api` matches every API caller).
    pub source_system: Option<String>,
    pub account_id: Option<String>,
    /// Applied facts this long before the window are compared for suspected duplicates.
    pub lookback: Duration,
}

impl Query {
    pub(super) fn in_window(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }

    pub(super) fn matches(&self, record: &DecisionRecord) -> bool {
        let source = record.source_system.as_deref();
        let source_ok = match self.source_system.as_deref() {
            None => true,
            Some("api") => source.is_some_and(|s| bounded_source(Some(s)) == "api"),
            Some(wanted) => source == Some(wanted),
        };
        let account_ok = match self.account_id.as_deref() {
            None => true,
            Some(wanted) => record.account_id.as_deref() == Some(wanted),
        };
        record.consumer == self.consumer && source_ok && account_ok
    }

    /// The window's deliveries of the consumer that match the filters.
    pub(super) fn selected<'a>(
        &'a self,
        collected: &'a Collected,
    ) -> impl Iterator<Item = &'a Timed> + 'a {
        collected
            .records
            .iter()
            .filter(|t| self.in_window(t.at) && self.matches(&t.record))
    }

    /// What the table must be asked for this report.
    pub fn wanted(&self, collected: &Collected) -> Wanted {
        let mut wanted = Wanted {
            consumer: self.consumer.clone(),
            from: Some(self.from),
            to: Some(self.to),
            ..Wanted::default()
        };
        for t in self.selected(collected) {
            let r = &t.record;
            let verdict = r.effective_verdict();
            if matches!(verdict, Verdict::Applied | Verdict::Collision)
                && let Some(identity) = identity(r)
            {
                wanted.identities.insert(identity);
            }
            if verdict == Verdict::Collision {
                wanted.quarantined_messages.insert(r.message_id.clone());
            }
            if let Some(account) = &r.account_id {
                wanted.accounts.insert(account.clone());
            }
        }
        // The collections actions of those accounts created in the window may come from their
        // other facts applied in it (another source, the daily close): their records are read
        // too, so each bucket change they published names its action (read by key).
        for t in collected.records.iter().filter(|t| {
            self.in_window(t.at)
                && t.record.consumer == self.consumer
                && t.record.effective_verdict() == Verdict::Applied
                && t.record
                    .account_id
                    .as_ref()
                    .is_some_and(|a| wanted.accounts.contains(a))
        }) {
            if let Some(identity) = identity(&t.record) {
                wanted.identities.insert(identity);
            }
        }
        // Undecodable bodies name no account: their quarantine items may (the account
        // filter cannot select them before that).
        for t in collected.records.iter().filter(|t| {
            self.in_window(t.at)
                && t.record.consumer == self.consumer
                && t.record.account_id.is_none()
                && t.record.verdict == Verdict::Quarantined
        }) {
            wanted
                .quarantined_messages
                .insert(t.record.message_id.clone());
        }
        wanted
    }
}
