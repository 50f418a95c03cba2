//! Executing a pending action after its commit: under a lease (twin deliveries never call at
//! once), superseded when a later change of the account was recorded, otherwise the call and
//! its outcome recorded. Separate from the claim: it runs on the first delivery and on every
//! replay that finds the intent still pending.

use servicing_store::{ActionStatus, Lease};

use crate::change::{DelinquencyChanged, later_than};
use crate::notifier::Status;
use crate::{ActionOutcome, CollectionsHandler, Delivery};

impl CollectionsHandler {
    /// Executes the stored action if it is still pending and no later change of its account has
    /// been recorded, under a lease so twin deliveries never call at once, and records the
    /// outcome (`SUPERSEDED` when a later change was recorded: never called).
    pub(crate) async fn execute_if_pending(
        &self,
        action_id: &str,
        event: &DelinquencyChanged,
    ) -> Result<ActionOutcome, String> {
        let record = match self.store.action(action_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Err(format!("action {action_id} is not recorded")),
            Err(e) => return Err(e.to_string()),
        };
        let settled = |status| {
            Ok(ActionOutcome {
                status,
                executed_now: false,
            })
        };
        if record.status.settled() {
            return settled(record.status);
        }
        // Long enough for the steps before the call (the call itself runs under a lease renewed
        // right before it): a twin may take over only after that.
        let lease_ms = i64::try_from(self.notifier.timeout().as_millis() * 2).unwrap_or(i64::MAX);
        let lease_id = lease_id();
        let until = servicing_store::epoch_millis().saturating_add(lease_ms + 2_000);
        let leased_from = match self.store.lease_action(action_id, &lease_id, until).await {
            Ok(Lease::Acquired { from }) => from,
            Ok(Lease::Refused(status)) if status.settled() => return settled(status),
            Ok(Lease::Refused(_)) => {
                return Err(format!(
                    "action {action_id} is being executed by another delivery; will retry"
                ));
            }
            Err(e) => return Err(e.to_string()),
        };
        // A receiver that does not deduplicate may already have what an earlier attempt sent
        // (its outcome unknown, or its holder gone while sending): ask it before anything else.
        if !self.notifier.deduplicates()
            && matches!(leased_from, ActionStatus::Unknown | ActionStatus::Sending)
        {
            let answer = self.notifier.status(action_id).await;
            let said = match &answer {
                Status::NotDelivered => "not delivered".to_owned(),
                Status::Delivered => "delivered".to_owned(),
                Status::Unanswered(reason) => format!("no answer: {reason}"),
            };
            // On the record before anything follows from it, the call above all.
            match self
                .store
                .note_receiver_status(action_id, &lease_id, &said)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    return Err(format!(
                        "the lease on action {action_id} ran out while asking the receiver; another delivery has it"
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "could not record what the receiver's status says: {e}"
                    ));
                }
            }
            let (status, detail) = match answer {
                Status::NotDelivered => (None, String::new()),
                Status::Delivered => (
                    Some(ActionStatus::Sent),
                    "delivered (the receiver's status says so): not called again".to_owned(),
                ),
                Status::Unanswered(reason) => (Some(ActionStatus::Unknown), reason),
            };
            if let Some(status) = status {
                if let Err(e) = self
                    .store
                    .record_action(action_id, &lease_id, status, None, &detail)
                    .await
                {
                    return Err(format!(
                        "could not record what the receiver's status says: {e}"
                    ));
                }
                tracing::info!(
                    action_id,
                    status = status.as_str(),
                    "receiver's status asked"
                );
                return match status {
                    ActionStatus::Sent => settled(status),
                    _ => Err(format!(
                        "the receiver's status is unknown ({detail}); asked again before any call"
                    )),
                };
            }
        }
        // Decided at call time, under the lease: the customer is no longer where the notice
        // says once a later change of the account is recorded (a cure handled first, say). A
        // failed read leaves the lease to run out; the redelivery comes after it.
        let later = match self.store.latest_change(&event.account_id).await {
            Ok(latest) => later_than(latest, &event.order()),
            Err(e) => return Err(e.to_string()),
        };
        if let Some(later) = later {
            if let Err(e) = self
                .store
                .supersede_action(action_id, &lease_id, &later)
                .await
            {
                return Err(format!("could not record the action as superseded: {e}"));
            }
            tracing::info!(
                action_id,
                later = later.event_id,
                "a later change was recorded before the call: the notification is superseded"
            );
            return settled(ActionStatus::Superseded);
        }
        // Credentials first (a secret read can be slow), then the lease renewed for the call
        // alone: a twin can take the action over only after this call's time is up.
        if let Err(reason) = self.notifier.prepare().await {
            return Err(format!("no credentials for the call, will retry: {reason}"));
        }
        let until = servicing_store::epoch_millis().saturating_add(lease_ms + 2_000);
        match self.store.renew_lease(action_id, &lease_id, until).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "the lease on action {action_id} ran out before the call; another delivery has it"
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
        let delivery = self.notifier.send(action_id, &record.payload).await;
        let (status, http, detail) = match &delivery {
            Delivery::Accepted { status } => {
                (ActionStatus::Sent, Some(*status), "accepted".to_owned())
            }
            Delivery::Rejected { status, reason } => {
                (ActionStatus::Rejected, Some(*status), reason.clone())
            }
            // To a receiver that does not deduplicate, a call that may have reached it is
            // never simply repeated: the next attempt asks its status first.
            Delivery::Failed {
                status,
                reason,
                maybe_delivered,
            } => {
                let unknown = *maybe_delivered && !self.notifier.deduplicates();
                let status_after = if unknown {
                    ActionStatus::Unknown
                } else {
                    ActionStatus::Pending
                };
                (status_after, *status, reason.clone())
            }
        };
        tracing::info!(
            action_id,
            status = status.as_str(),
            http,
            "notification attempt"
        );
        if let Err(e) = self
            .store
            .record_action(action_id, &lease_id, status, http, &detail)
            .await
        {
            return Err(format!("could not record the action outcome: {e}"));
        }
        match status {
            ActionStatus::Sent | ActionStatus::Rejected => Ok(ActionOutcome {
                status,
                executed_now: true,
            }),
            _ => {
                tracing::warn!(
                    alert = "notification_failed",
                    action_id,
                    status = status.as_str(),
                    "notification failed; retried with the same actionId (after asking the receiver's status when UNKNOWN)"
                );
                Err(format!("notification failed, will retry: {detail}"))
            }
        }
    }
}

/// A lease holder's id: unique per attempt (process id, time, counter).
fn lease_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        servicing_store::epoch_millis(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}
