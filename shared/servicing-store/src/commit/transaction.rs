//! Building a commit's `TransactWriteItems`: the loan write (or version check) once, then per
//! unit its claim and its own items, each with the role its cancellation reason is read by.
//! Separate from the engine's entry points because it is the one place that knows every item's
//! condition.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use servicing_domain::{AccountId, AllocationWrite, SourceRef};

use super::{Effect, LoanWrite, Role, Transaction, UnitOfWork};
use crate::conditions::{CREATE_ONLY, Condition, version_condition};
use crate::errors::invalid_request;
use crate::items::{self, Item, Verdict, n, s};
use crate::schema::ReversalMark;
use crate::{ServicingStore, StoreError};

impl ServicingStore {
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
            Some(LoanWrite::Put {
                item,
                expected,
                apart_before,
            }) => {
                let put = self.put(items::loan_item(item)?, Some(version_condition(expected)))?;
                transaction.push(Role::Loan, put);
                // Under the loan's version condition: written and deleted with what they follow.
                for fact in item.parked.apart() {
                    if !apart_before.contains(&fact.source) {
                        let body = items::parked_body_item(&item.account_id, fact);
                        transaction.push(Role::Plain, self.put(body, None)?);
                    }
                }
                for gone in apart_before {
                    if !item.parked.apart().any(|f| &f.source == gone) {
                        let key = items::parked_body_key(&item.account_id, gone);
                        transaction.push(Role::Plain, self.delete(key)?);
                    }
                }
            }
            Some(LoanWrite::Check {
                account_id,
                expected,
            }) => transaction.push(Role::Loan, self.version_check(account_id, expected)?),
            None => {}
        }
        let expires_at = now + self.config.claim_retention.as_secs() as i64;
        for (i, unit) in units.iter().enumerate() {
            if let Effect::Confirm = unit.effect {
                transaction.push(Role::Claim(i), self.claim_confirmation(unit, now)?);
                continue;
            }
            let (verdict, applied) = match unit.effect {
                Effect::Apply(applied) => (Verdict::Applied, Some(applied)),
                Effect::Intent(_) => (Verdict::Applied, None),
                Effect::Stale => (Verdict::Stale, None),
                Effect::Reject(_) => (Verdict::Rejected, None),
                Effect::Park => (Verdict::Parked, None),
                Effect::Confirm => unreachable!("checked above"),
            };
            // An applied payment is remembered for as long as its allocation: for good. So is an
            // applied reversal: resent after its claim expired naming another payment, it would
            // reverse that one too (its mark sits on the first payment only).
            let moves_an_allocation = applied.is_some_and(|a| a.allocation.is_some());
            let expiry = (!moves_an_allocation).then_some(expires_at);
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
                    if let Some(AllocationWrite::MarkReversed {
                        payment,
                        reversal,
                        fact,
                    }) = &applied.allocation
                    {
                        let mark = ReversalMark {
                            by: reversal.clone(),
                            fact: Some(fact.clone()),
                        };
                        transaction.push(Role::Reversal(i), self.mark_reversed(payment, &mark)?);
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
                Effect::Intent(None) | Effect::Stale | Effect::Park | Effect::Confirm => {}
            }
        }
        Ok(transaction)
    }

    /// A reversal's mark on its payment's record, once: an applied payment not reversed yet.
    fn mark_reversed(
        &self,
        payment: &SourceRef,
        mark: &ReversalMark,
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                &self.config.consumer,
                payment,
            ))))
            .update_expression("SET #reversedBy = :reversal")
            .condition_expression(
                "#verdict = :applied AND #eventType = :payment AND attribute_not_exists(#reversedBy)",
            )
            .expression_attribute_names("#verdict", items::VERDICT)
            .expression_attribute_names("#eventType", items::EVENT_TYPE)
            .expression_attribute_names("#reversedBy", items::REVERSED_BY)
            .expression_attribute_values(":applied", items::s(Verdict::Applied.as_str()))
            .expression_attribute_values(":payment", items::s(items::PAYMENT_SETTLED))
            .expression_attribute_values(":reversal", items::reversal_mark_value(mark)?)
            // Tells this reversal (reversedBy is itself: a duplicate) from another.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// An unconditional delete of the item at `key`.
    pub(crate) fn delete(&self, key: (String, String)) -> Result<TransactWriteItem, StoreError> {
        let delete = Delete::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(key)))
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().delete(delete).build())
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

    /// The check of an already applied fact's claim: none live, or one with its fingerprint;
    /// a live one with another payload is returned on refusal (`ALL_OLD`): a collision.
    fn claim_confirmation(
        &self,
        unit: &UnitOfWork<'_>,
        now: i64,
    ) -> Result<TransactWriteItem, StoreError> {
        let check = ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                &self.config.consumer,
                unit.source,
            ))))
            .condition_expression(
                "attribute_not_exists(pk) OR expiresAt < :now OR #fingerprint = :fingerprint",
            )
            .expression_attribute_names("#fingerprint", items::FINGERPRINT)
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":fingerprint", s(unit.fingerprint.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(invalid_request)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
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
