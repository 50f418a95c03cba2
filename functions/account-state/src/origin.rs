//! Facts under the payments API's reserved `sourceSystem` prefix (`api:`) apply only as the
//! payment the API accepted: its idempotency record, put once by the API and never deleted,
//! carries that payment's event (the `outbox` attribute, all account-state may read of it). A
//! message anything else put on the queue under that prefix — forged, or altered on the way —
//! is quarantined. The proof lives in the table, not in who
//! sent the message: SQS cannot tell the legitimate senders apart (the relay, the reconciler's
//! resend of a ready fact, an operator's redrive) from any other principal allowed to send.

use std::collections::HashMap;

use servicing_domain::{AccountId, Fingerprint, ServicingEvent, SourceRef};
use servicing_store::items::API_SOURCE_PREFIX;
use servicing_store::{OutboxEvent, StoreError};
use servicing_telemetry::DecidedBy;

use crate::AccountStateHandler;
use crate::batch::Pending;
use crate::deadline::Deadline;
use crate::report::{BatchReport, MessageResult};

/// The quarantine code of a fact under `api:` that no payment the API accepted proves.
pub const API_PAYMENT_NOT_ACCEPTED: &str = "api_payment_not_accepted";

fn under_api_prefix(pending: &Pending<'_>) -> bool {
    pending.event.source.system.starts_with(API_SOURCE_PREFIX)
}

/// What proves facts under `api:`: the events of the payments the API accepted (by source; an
/// unreadable record is its own fact's error), and, for an identity whose record is gone (one
/// written before records were kept for good, deleted by TTL), the fingerprint of the fact
/// this consumer applied under it.
type Proofs = (
    HashMap<SourceRef, Result<OutboxEvent, StoreError>>,
    HashMap<SourceRef, Fingerprint>,
);

/// Why the proofs do not prove the fact under `source` with `fingerprint` (`None`: they do).
/// The accepted event is what the relay sends on as the message body, so it decodes into the
/// same fact, fingerprint for fingerprint.
fn unproven(
    source: &SourceRef,
    (accepted, applied): &Proofs,
    fingerprint: &Fingerprint,
) -> Option<String> {
    let accepted = match accepted.get(source) {
        Some(Ok(event)) => event,
        Some(Err(e)) => {
            return Some(format!(
                "{source}: the payments API's record under this identity does not decode: {e}"
            ));
        }
        // Applied before, as this very payload: a resend, judged as one.
        None if applied.get(source) == Some(fingerprint) => return None,
        None => {
            return Some(format!(
                "{source} is under the payments API's reserved prefix `{API_SOURCE_PREFIX}`, but the API accepted no payment under this identity"
            ));
        }
    };
    match ServicingEvent::decode(accepted.detail.to_string().as_bytes()) {
        Ok(event) if &Fingerprint::of(&event) == fingerprint => None,
        Ok(event) => Some(format!(
            "{source}: the payments API accepted another payload under this identity (fingerprint {}, this one {fingerprint})",
            Fingerprint::of(&event)
        )),
        Err(e) => Some(format!(
            "{source}: the payment the API accepted under this identity does not decode: {e}"
        )),
    }
}

impl AccountStateHandler {
    /// The proofs of `sources`: their accepted payments; the claims only of those without one.
    async fn proofs(&self, sources: &[&SourceRef]) -> Result<Proofs, StoreError> {
        let accepted = self.store.accepted_commands(sources).await?;
        let recordless: Vec<&SourceRef> = sources
            .iter()
            .copied()
            .filter(|source| !accepted.contains_key(*source))
            .collect();
        let applied = if recordless.is_empty() {
            HashMap::new()
        } else {
            self.store.applied_fingerprints(&recordless).await?
        };
        Ok((accepted, applied))
    }

    /// Takes out of `by_account` every fact under `api:` that no accepted payment proves, into
    /// quarantine, with one read for the whole batch (and one of claims when a record is
    /// gone). When the reads fail, every account holding such a fact is retried whole: an
    /// account's later facts never overtake one that was not judged.
    pub(crate) async fn hold_to_accepted_payments<'a>(
        &self,
        by_account: &mut Vec<(AccountId, Vec<Pending<'a>>)>,
        report: &mut BatchReport,
        deadline: Deadline,
    ) {
        let sources: Vec<&SourceRef> = by_account
            .iter()
            .flat_map(|(_, pending)| pending)
            .filter(|p| under_api_prefix(p))
            .map(|p| &p.event.source)
            .collect();
        if sources.is_empty() {
            return;
        }
        let consumer = self.store.consumer();
        let proofs = match deadline.bound(self.proofs(&sources)).await {
            Ok(proofs) => proofs,
            Err(e) => {
                let result = MessageResult::Retry {
                    reason: format!("the payments API's accepted payments could not be read: {e}"),
                };
                by_account.retain_mut(|(_, pending)| {
                    if !pending.iter().any(under_api_prefix) {
                        return true;
                    }
                    for p in pending.iter() {
                        report.decisions.push(p.decision(
                            consumer,
                            DecidedBy::Transient,
                            &result,
                            None,
                        ));
                        report.record(p.message_id, result.clone());
                    }
                    false
                });
                return;
            }
        };
        let mut refused = Vec::new();
        for (_, pending) in by_account.iter_mut() {
            let mut kept = Vec::with_capacity(pending.len());
            for p in pending.drain(..) {
                let reason = under_api_prefix(&p)
                    .then(|| unproven(&p.event.source, &proofs, &p.fingerprint))
                    .flatten();
                match reason {
                    Some(reason) => refused.push((p, reason)),
                    None => kept.push(p),
                }
            }
            *pending = kept;
        }
        by_account.retain(|(_, pending)| !pending.is_empty());
        for (p, reason) in refused {
            tracing::error!(
                alert = "api_payment_not_accepted",
                source_system = p.event.source.system,
                "a fact under the payments API's prefix that the API did not accept; quarantined"
            );
            let entry = p.quarantine_entry(API_PAYMENT_NOT_ACCEPTED, &reason);
            let result = self.quarantine(&entry, deadline).await;
            report.decisions.push(p.decision(
                consumer,
                DecidedBy::BusinessRule,
                &result,
                Some(reason),
            ));
            report.record(p.message_id, result);
        }
    }
}
