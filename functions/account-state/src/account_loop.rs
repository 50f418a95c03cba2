//! One account's loop: its events run through [`AccountRun`], each step's requests (reads,
//! the group's commit) performed here and the answers handed back. Separate from the batch:
//! the run decides what comes next and what a failure leaves undone; this loop only performs.

use servicing_domain::{AccountId, SourceRef};
use servicing_store::StoreError;

use crate::AccountStateHandler;
use crate::account::{AccountRun, Failure, Step};
use crate::batch::{AccountResults, Pending};
use crate::deadline::Deadline;
use crate::decisions::Trail;
use crate::group::Group;
use crate::quarantine::STORE_REJECTED;
use crate::report::MessageResult;

/// Why a request was not sent: the rest of the account is left for redelivery.
const DEADLINE_NEAR: &str = "the invocation's deadline was near";

impl AccountStateHandler {
    /// Runs the account's events through [`AccountRun`]: this loop performs each step's
    /// requests and hands the answers back; the run decides what comes next and what is left
    /// undone after a failure.
    #[tracing::instrument(skip_all, fields(account = %account, events = pending.len()))]
    pub(crate) async fn process_account(
        &self,
        account: &AccountId,
        pending: &[Pending<'_>],
        deadline: Deadline,
    ) -> AccountResults {
        let mut run = AccountRun::new(pending, self.cache.get(account));
        let mut trail = Trail::new(self.store.consumer(), pending);
        loop {
            let now = servicing_store::epoch_seconds();
            let step = run.next_step(now, self.config.max_transaction_items);
            let sends = matches!(step, Step::Read(_) | Step::ReadTargets(_) | Step::Commit(_));
            if sends && deadline.passed() {
                // As if this request had failed transiently: the rest comes back, in order.
                tracing::warn!(alert = "deadline", "the invocation's deadline is near");
                let near = StoreError::NotSent(DEADLINE_NEAR.to_owned());
                self.fail(&mut run, &mut trail, near, deadline).await;
                continue;
            }
            match step {
                Step::Done => break,
                Step::Read(payments) => {
                    let payments: Vec<&SourceRef> = payments.iter().collect();
                    match deadline.bound(self.store.load(account, &payments)).await {
                        Ok(snapshot) => run.read(snapshot),
                        Err(e) => self.fail(&mut run, &mut trail, e, deadline).await,
                    }
                }
                Step::ReadTargets(missing) => {
                    let wanted: Vec<&SourceRef> = missing.iter().collect();
                    let read = match run.snapshot_mut() {
                        Some(snapshot) => {
                            let read = self.store.load_targets(account, &wanted, snapshot);
                            deadline.bound(read).await
                        }
                        None => Ok(()),
                    };
                    match read {
                        Ok(()) => run.targets_read(missing),
                        Err(e) => self.fail(&mut run, &mut trail, e, deadline).await,
                    }
                }
                Step::Known(known) => {
                    let loan = run.snapshot_mut().and_then(|s| s.loan.as_ref());
                    trail.known(&known, loan, now);
                    for (index, collision) in known {
                        let result = match collision {
                            None => MessageResult::Duplicate,
                            Some(stored) => {
                                self.collision(&pending[index], &stored, deadline).await
                            }
                        };
                        run.settle(index, result);
                    }
                }
                Step::Commit(group) => {
                    self.commit(account, &mut run, &mut trail, *group, deadline)
                        .await
                }
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
        deadline: Deadline,
    ) {
        let pending = run.pending();
        let units = group.units(pending);
        // Group commit may hold the transaction while other accounts read: it leaves only
        // before the deadline, or not at all.
        let commit = self.store.commit_all_before(
            &units,
            Some(group.loan_write(account)),
            deadline.last_start(),
        );
        let answer = deadline.bound(commit).await;
        drop(units);
        if let Ok(commit) = &answer {
            trail.answered(&group, &commit.outcomes);
        }
        match answer {
            Ok(commit) if commit.all_committed() => run.committed(group),
            Ok(commit) => match run.refused(&group, commit, self.config.max_commit_attempts) {
                Ok(refused) => {
                    for (index, stored) in refused.collisions {
                        let result = self.collision(&pending[index], &stored, deadline).await;
                        run.settle(index, result);
                    }
                    if let Some(rounds) = refused.reread_after {
                        let wait = servicing_store::backoff(rounds, self.config.conflict_backoff);
                        tokio::time::sleep(wait).await;
                    }
                }
                Err(e) => self.fail(run, trail, e, deadline).await,
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
                        self.quarantine_released(&loan, &released.fact, reason.clone(), deadline)
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
                            self.fail(run, trail, e, deadline).await;
                        }
                    }
                    // Refused again: retried (and dead-lettered), never blamed on a neighbour.
                    Err(StoreError::Rejected(why)) => {
                        let e = StoreError::Transient(format!("{lost}: {why}"));
                        self.fail(run, trail, e, deadline).await;
                    }
                    Err(e) => self.fail(run, trail, e, deadline).await,
                }
            }
            // The commit may or may not have happened (e.g. a lost response).
            Err(e) => self.fail(run, trail, e, deadline).await,
        }
    }

    /// A store failure: the run decides what it leaves undone; a request DynamoDB refused as
    /// such quarantines its event (it will never succeed). Corrupt stored data needs an
    /// operator: retried (the DLQ catches it) rather than guessed.
    async fn fail(
        &self,
        run: &mut AccountRun<'_, '_>,
        trail: &mut Trail<'_, '_>,
        e: StoreError,
        deadline: Deadline,
    ) {
        if let Failure::Quarantine(index, reason) = run.fail(e) {
            tracing::error!(error = %reason, "DynamoDB refused the request");
            let reason = format!("DynamoDB refused the request: {reason}");
            let entry = run.pending()[index].quarantine_entry(STORE_REJECTED, &reason);
            let result = self.quarantine(&entry, deadline).await;
            trail.store_rejected(index, reason);
            run.quarantined(index, result);
        }
    }
}
