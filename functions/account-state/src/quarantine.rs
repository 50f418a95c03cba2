//! The quarantine writes: a fact that will never apply (undecodable, a collision, refused by
//! DynamoDB as such) is stored with its raw body and reason, and acknowledged. Separate because
//! the batch (before any account runs) and the account loop both write there, the same way.

use servicing_domain::{DecodeError, Fingerprint};
use servicing_store::{QuarantineEntry, StoreError};

use crate::AccountStateHandler;
use crate::batch::Pending;
use crate::deadline::Deadline;
use crate::report::MessageResult;

/// The quarantine code of a fact whose request DynamoDB refused as such.
pub(crate) const STORE_REJECTED: &str = "store_rejected";

impl AccountStateHandler {
    /// Takes a released fact DynamoDB refused off the loan item into quarantine (`Ok(false)`:
    /// the loan item moved meanwhile, or its claim is not `PARKED`: judged again after a
    /// re-read).
    pub(crate) async fn quarantine_released(
        &self,
        loan: &servicing_store::LoanItem,
        fact: &servicing_domain::ParkedFact,
        reason: String,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        tracing::error!(source = %fact.source, "DynamoDB refused a released fact; quarantined");
        let expired = servicing_store::ExpiredFact {
            fact,
            code: STORE_REJECTED,
            reason,
        };
        let expire = self
            .store
            .expire_parked(loan, std::slice::from_ref(&expired));
        let outcome = deadline.bound(expire).await?;
        Ok(outcome == servicing_store::ExpiryOutcome::Expired)
    }

    pub(crate) async fn collision(
        &self,
        p: &Pending<'_>,
        stored: &Fingerprint,
        deadline: Deadline,
    ) -> MessageResult {
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
        match self.quarantine(&entry, deadline).await {
            MessageResult::Quarantined { .. } => MessageResult::Collision,
            other => other,
        }
    }

    pub(crate) async fn quarantine_undecodable(
        &self,
        message_id: &str,
        body: &str,
        receive_count: u32,
        error: &DecodeError,
        deadline: Deadline,
    ) -> MessageResult {
        let reason = error.to_string();
        let entry = QuarantineEntry {
            receive_count: Some(receive_count),
            ..QuarantineEntry::new(message_id, body, error.code(), &reason)
        };
        self.quarantine(&entry, deadline).await
    }

    pub(crate) async fn quarantine(
        &self,
        entry: &QuarantineEntry<'_>,
        deadline: Deadline,
    ) -> MessageResult {
        match deadline.bound(self.store.quarantine(entry)).await {
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
