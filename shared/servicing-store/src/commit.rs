//! The commit engine: units of work, each fact's items in ONE `TransactWriteItems` (several
//! facts of one account may share it), and the mapping of a refusal back to each fact.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use servicing_domain::{AccountId, AllocationWrite, Applied, Fingerprint, SourceRef};

use crate::conditions::{CREATE_ONLY, Condition, version_condition};
use crate::errors::{invalid_request, is_throttling, refuses_the_request};
use crate::items::{self, Item, Verdict, n, s};
use crate::{ActionIntent, LoanItem, QuarantineEntry, ServicingStore, StoreError, now_epoch};

/// The effect a unit of work commits next to its claim.
#[derive(Debug)]
pub enum Effect<'a> {
    /// Apply: the loan write and the fact's record carrying its events and (a payment) its
    /// allocation; a reversal also marks its payment's record.
    Apply(&'a Applied),
    /// Stale set-state event: only the claim.
    Stale,
    /// A business rejection: the claim and the quarantine item.
    Reject(QuarantineEntry<'a>),
    /// Parked (it waits for another fact): the claim only; the fact itself is on the loan item.
    Park,
    /// A downstream consumer's claim, with the intent of an external action when the event
    /// calls for one (the loan is not involved: no version check).
    Intent(Option<&'a ActionIntent>),
}

impl Effect<'_> {
    /// The items its unit of work adds to a transaction: its record and its own items (the loan
    /// write, shared by a group's units, is not counted). The group planner sizes transactions
    /// with it; `transaction_items` is what it must agree with (unit-tested).
    pub fn items(&self) -> usize {
        1 + match self {
            Effect::Apply(applied) => usize::from(matches!(
                applied.allocation,
                Some(AllocationWrite::MarkReversed { .. })
            )),
            Effect::Intent(intent) => usize::from(intent.is_some()),
            Effect::Reject(_) => 1,
            Effect::Stale | Effect::Park => 0,
        }
    }
}

/// One fact's unit of work.
#[derive(Debug)]
pub struct UnitOfWork<'a> {
    pub source: &'a SourceRef,
    /// The fact's type (the contract's `eventType`, or the domain event type a downstream
    /// consumer claims), kept on the claim for reconciliation.
    pub event_type: &'a str,
    pub account_id: &'a AccountId,
    pub fingerprint: &'a Fingerprint,
    /// A parked fact judged again: its claim replaces its own `PARKED` claim instead of being
    /// created.
    pub released: bool,
    pub effect: Effect<'a>,
}

/// The loan item's part in a transaction (its condition is every verdict's condition).
#[derive(Debug, Clone, Copy)]
pub enum LoanWrite<'a> {
    /// Put the new item, where the stored one is at `expected` (`None`: no item yet).
    Put {
        item: &'a LoanItem,
        expected: Option<u64>,
    },
    /// The item is unchanged: only check it is still at `expected`.
    Check {
        account_id: &'a AccountId,
        expected: Option<u64>,
    },
}

/// How a commit ended, when DynamoDB answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Everything was written; for `Apply` the loan is now at `expected_version + 1`.
    Committed,
    /// The fact was claimed before with the same fingerprint: nothing to do.
    Duplicate,
    /// The fact was claimed before with another payload: the first one stands.
    Collision { stored: Fingerprint },
    /// Another writer changed the loan first: re-read, recompute, retry.
    VersionConflict,
    /// The allocation was changed concurrently (e.g. reversed by another reversal): re-read,
    /// recompute (which will see the new state), retry.
    BusinessConditionFailed(String),
    /// DynamoDB cancelled the transaction because another transaction touched the same items
    /// (`TransactionConflict`): retry.
    Contended,
    /// Nothing of this unit was written because another unit of the same transaction was
    /// refused (its claim existed), or another account's commit sharing the transaction failed:
    /// commit it again (without the refused ones). The loan was where it was expected, so the
    /// state read before still holds.
    Withdrawn,
}

/// The write items of a transaction and what each stands for (to read its cancellation reason).
#[derive(Debug)]
pub struct Transaction {
    pub items: Vec<TransactWriteItem>,
    roles: Vec<Role>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Unit `i`'s claim.
    Claim(usize),
    /// The loan write or version check shared by the units.
    Loan,
    /// Unit `i`'s own conditional item whose failure means the state moved (a released fact's
    /// claim): re-read.
    Condition(usize),
    /// Unit `i`'s own create-only item, keyed by the fact (its action intent): if it exists,
    /// this very fact was applied before although its claim is gone — a duplicate, which no
    /// re-read would change.
    Evidence(usize),
    /// Unit `i`'s mark on the payment it reverses: refused with the payment's record
    /// (`ALL_OLD`), whose `reversedBy` tells this reversal (a duplicate) from another one
    /// (re-read).
    Reversal(usize),
    /// An unconditional put (quarantine).
    Plain,
}

impl ServicingStore {
    /// Commits one unit of work that leaves the loan alone (a downstream consumer's claim) as
    /// ONE `TransactWriteItems`.
    pub async fn commit(&self, unit: &UnitOfWork<'_>) -> Result<CommitOutcome, StoreError> {
        let units = std::slice::from_ref(unit);
        let mut outcomes = self.commit_all(units, None).await?;
        outcomes
            .pop()
            .ok_or_else(|| StoreError::Rejected("a commit without its outcome".into()))
    }

    /// Commits the units of ONE account (in order, each judged on the state its predecessors
    /// leave) and its loan write in ONE `TransactWriteItems` (which concurrent commits of other
    /// accounts may share). One outcome per unit, in order: all `Committed`, or none committed.
    /// Without units (only the loan item changes: a released fact parked again), one outcome
    /// for the loan write itself — never an empty answer, which would read as "all committed".
    #[tracing::instrument(skip_all, fields(units = units.len()))]
    pub async fn commit_all(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
    ) -> Result<Vec<CommitOutcome>, StoreError> {
        let (now, now_millis) = now_epoch();
        let transaction = self.transaction_items(units, loan, now, now_millis)?;
        let answers = units.len().max(1);
        let outcomes = match self.combiner.send(transaction.items).await? {
            crate::combine::Answer::Committed => vec![CommitOutcome::Committed; answers],
            crate::combine::Answer::Withdrawn => vec![CommitOutcome::Withdrawn; answers],
            crate::combine::Answer::Cancelled(reasons) => {
                map_cancellation(&reasons, &transaction.roles, units)?
            }
        };
        Ok(outcomes)
    }

    /// The loan's version check (claim-only verdicts: the loan is still at the judged version).
    fn version_check(
        &self,
        account_id: &AccountId,
        expected_version: Option<u64>,
    ) -> Result<TransactWriteItem, StoreError> {
        let (condition, names, values) = version_condition(expected_version);
        let check = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::loan_key(account_id))))
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// The items of the units' `TransactWriteItems`: the loan write (or version check) once,
    /// then per unit its claim and its own items.
    pub fn transaction_items(
        &self,
        units: &[UnitOfWork<'_>],
        loan: Option<LoanWrite<'_>>,
        now: i64,
        now_millis: i64,
    ) -> Result<Transaction, StoreError> {
        let mut transaction = Transaction {
            items: Vec::with_capacity(units.len() * 4 + 1),
            roles: Vec::with_capacity(units.len() * 4 + 1),
        };
        match loan {
            Some(LoanWrite::Put { item, expected }) => {
                let put = self.put(items::loan_item(item)?, Some(version_condition(expected)))?;
                transaction.push(Role::Loan, put);
            }
            Some(LoanWrite::Check {
                account_id,
                expected,
            }) => transaction.push(Role::Loan, self.version_check(account_id, expected)?),
            None => {}
        }
        let expires_at = now + self.config.claim_retention.as_secs() as i64;
        for (i, unit) in units.iter().enumerate() {
            let (verdict, applied) = match unit.effect {
                Effect::Apply(applied) => (Verdict::Applied, Some(applied)),
                Effect::Intent(_) => (Verdict::Applied, None),
                Effect::Stale => (Verdict::Stale, None),
                Effect::Reject(_) => (Verdict::Rejected, None),
                Effect::Park => (Verdict::Parked, None),
            };
            // An applied payment is remembered for as long as its allocation: for good.
            let is_payment =
                applied.is_some_and(|a| matches!(a.allocation, Some(AllocationWrite::Record(_))));
            let expiry = (!is_payment).then_some(expires_at);
            let claim =
                items::claim_item(&self.config.consumer, unit, verdict, now, expiry, applied)?;
            if unit.released {
                // Its own PARKED claim (or none, if an operator removed it): the loan's version
                // condition guarantees the fact is still parked.
                let condition = (
                    "attribute_not_exists(pk) OR #verdict = :parked",
                    Some(HashMap::from([(
                        "#verdict".to_owned(),
                        items::VERDICT.to_owned(),
                    )])),
                    Some(HashMap::from([(
                        ":parked".to_owned(),
                        s(Verdict::Parked.as_str()),
                    )])),
                );
                transaction.push(Role::Condition(i), self.put(claim, Some(condition))?);
            } else {
                transaction.push(Role::Claim(i), self.claim_put(claim, now)?);
            }

            match &unit.effect {
                Effect::Apply(applied) => {
                    if let Some(AllocationWrite::MarkReversed { payment, reversal }) =
                        &applied.allocation
                    {
                        transaction.push(Role::Reversal(i), self.mark_reversed(payment, reversal)?);
                    }
                }
                Effect::Intent(Some(intent)) => {
                    let item = items::action_item(intent, now)?;
                    transaction.push(Role::Evidence(i), self.put(item, Some(CREATE_ONLY))?);
                }
                Effect::Reject(entry) => {
                    let item = self.quarantine_item(entry, now_millis)?;
                    transaction.push(Role::Plain, self.put(item, None)?);
                }
                Effect::Intent(None) | Effect::Stale | Effect::Park => {}
            }
        }
        Ok(transaction)
    }

    /// A reversal's mark on its payment's record, once: an applied payment (it carries
    /// `allocatedTo`) not reversed yet.
    fn mark_reversed(
        &self,
        payment: &SourceRef,
        reversal: &SourceRef,
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                &self.config.consumer,
                payment,
            ))))
            .update_expression("SET #reversedBy = :reversal")
            .condition_expression(
                "attribute_exists(#allocatedTo) AND attribute_not_exists(#reversedBy)",
            )
            .expression_attribute_names("#allocatedTo", items::ALLOCATED_TO)
            .expression_attribute_names("#reversedBy", items::REVERSED_BY)
            .expression_attribute_values(":reversal", items::source_ref_value(reversal)?)
            // Tells this reversal (reversedBy is itself: a duplicate) from another.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// A put of `item` into the table, under `condition` when given.
    pub(crate) fn put(
        &self,
        item: Item,
        condition: Option<Condition>,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item));
        if let Some((expression, names, values)) = condition {
            put = put
                .condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values);
        }
        Ok(TransactWriteItem::builder()
            .put(put.build().map_err(invalid_request)?)
            .build())
    }

    /// A put of a fact's claim: only where none
    /// is live — one past its stored expiry no longer counts, whether or not TTL deleted it yet —
    /// and the live one returned on refusal (`ALL_OLD`), to tell a repeat from a collision.
    fn claim_put(&self, item: Item, now: i64) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk) OR expiresAt < :now")
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}

impl Transaction {
    fn push(&mut self, role: Role, item: TransactWriteItem) {
        self.roles.push(role);
        self.items.push(item);
    }
}

/// A claim refused with its stored item (`ALL_OLD`): a duplicate of `fingerprint`, or a
/// collision with the fingerprint stored.
pub(crate) fn refused_claim(
    reason: &CancellationReason,
    fingerprint: &Fingerprint,
) -> Result<CommitOutcome, StoreError> {
    let stored = reason
        .item()
        .and_then(|item| items::string(item, items::FINGERPRINT))
        .map(|f| Fingerprint::from_stored(f.to_owned()))
        .ok_or_else(|| {
            StoreError::Corrupt("refused claim came back without its fingerprint".into())
        })?;
    Ok(if &stored == fingerprint {
        CommitOutcome::Duplicate
    } else {
        CommitOutcome::Collision { stored }
    })
}

/// Maps the reasons of a cancelled transaction to one outcome per unit. A refused claim wins
/// for its unit: the fact was judged before. So does a refused item that only this fact could
/// have written (its action, or its own mark on the payment it reverses): the fact was applied
/// before, its claim is gone (expired) — a duplicate, which no re-read could change. The other units share the reason the transaction
/// failed for: the loan moved (`VersionConflict`), an allocation or action item was not as
/// judged (`BusinessConditionFailed`), a concurrent transaction (`Contended`), or only refused
/// claims (`Withdrawn`). DynamoDB reports a reason per item (both local engines too), so every
/// duplicate in the transaction is known from this one answer.
fn map_cancellation(
    reasons: &[CancellationReason],
    roles: &[Role],
    units: &[UnitOfWork<'_>],
) -> Result<Vec<CommitOutcome>, StoreError> {
    let mut refused: Vec<Option<CommitOutcome>> = vec![None; units.len()];
    let mut condition_failed = vec![false; units.len()];
    let (mut loan_moved, mut contended, mut throttled) = (false, false, false);
    for (reason, role) in reasons.iter().zip(roles) {
        let code = reason.code().unwrap_or("None");
        match (role, code) {
            (_, "None") => {}
            (Role::Claim(i), "ConditionalCheckFailed") => {
                refused[*i] = Some(refused_claim(reason, units[*i].fingerprint)?);
            }
            (Role::Loan, "ConditionalCheckFailed") => loan_moved = true,
            (Role::Condition(i), "ConditionalCheckFailed") => condition_failed[*i] = true,
            (Role::Evidence(i), "ConditionalCheckFailed") => {
                refused[*i].get_or_insert(CommitOutcome::Duplicate);
            }
            (Role::Reversal(i), "ConditionalCheckFailed") => {
                let by_itself = reason
                    .item()
                    .and_then(|item| items::allocation_from_claim(item).ok().flatten())
                    .and_then(|allocation| allocation.reversed_by)
                    .is_some_and(|by| &by == units[*i].source);
                if by_itself {
                    refused[*i].get_or_insert(CommitOutcome::Duplicate);
                } else {
                    condition_failed[*i] = true;
                }
            }
            (_, "TransactionConflict") => contended = true,
            (_, code) if is_throttling(code) => throttled = true,
            _ => {}
        }
    }
    let any_refused = refused.iter().any(Option::is_some);
    // A refused unit's own conditions fail too (a duplicate payment's allocation exists): its
    // claim explains them. Only an unrefused unit's failed condition means the state moved.
    let condition_failed = refused
        .iter()
        .zip(&condition_failed)
        .any(|(refused, failed)| refused.is_none() && *failed);
    let others = if loan_moved {
        CommitOutcome::VersionConflict
    } else if condition_failed {
        CommitOutcome::BusinessConditionFailed("allocation or action condition failed".into())
    } else if contended || (throttled && any_refused) {
        CommitOutcome::Contended
    } else if any_refused {
        CommitOutcome::Withdrawn
    } else {
        let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        return Err(if codes.iter().any(|c| refuses_the_request(c)) {
            StoreError::Rejected(format!("transaction cancelled: {codes:?}"))
        } else {
            StoreError::Transient(format!("transaction cancelled: {codes:?}"))
        });
    };
    if units.is_empty() {
        return Ok(vec![others]);
    }
    Ok(refused
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| others.clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use servicing_domain::{LoanAccount, Outcome, ServicingEvent, apply};

    use super::*;
    use crate::StoreConfig;

    fn store() -> ServicingStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        ServicingStore::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            StoreConfig::new("table", "account-state"),
        )
    }

    fn applied(account: Option<&LoanAccount>, body: &str) -> (ServicingEvent, Box<Applied>) {
        let event = ServicingEvent::decode(body.as_bytes()).expect("event");
        match apply(account, &event, None) {
            Outcome::Applied(applied) => (event, applied),
            other => panic!("not applied: {other:?}"),
        }
    }

    #[test]
    fn when_units_are_built_should_add_exactly_the_items_their_effects_announce() {
        let (open, opened) = applied(
            None,
            r#"{"sourceSystem":"core-banking","sourceEventId":"open-1","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":50000,"currency":"EUR"}"#,
        );
        let (pay, paid) = applied(
            Some(&opened.account),
            r#"{"sourceSystem":"psp","sourceEventId":"pay-1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T09:00:00Z","amountMinor":1000,"currency":"EUR"}"#,
        );
        assert!(paid.allocation.is_some() && !paid.outbox.is_empty());
        // One record per fact: the payment's events and allocation ride on its claim.
        let fingerprint = Fingerprint::of(&pay);
        let entry = QuarantineEntry::new("m-1", "{}", "rule", "a reason");
        let intent = ActionIntent {
            action_id: "act-1".into(),
            account_id: open.account_id.clone(),
            event_id: "evt-1".into(),
            payload: serde_json::json!({}),
        };
        let effects = [
            Effect::Apply(&opened),
            Effect::Apply(&paid),
            Effect::Stale,
            Effect::Park,
            Effect::Reject(entry),
            Effect::Intent(Some(&intent)),
            Effect::Intent(None),
        ];
        let store = store();
        for effect in effects {
            let announced = effect.items();
            let unit = UnitOfWork {
                source: &pay.source,
                event_type: "PAYMENT_SETTLED",
                account_id: &pay.account_id,
                fingerprint: &fingerprint,
                released: false,
                effect,
            };
            let built = store
                .transaction_items(std::slice::from_ref(&unit), None, 1_700_000_000, 0)
                .expect("transaction");
            assert_eq!(built.items.len(), announced, "{:?}", unit.effect);
        }
    }
}
