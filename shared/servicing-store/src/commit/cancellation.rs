//! Reading a cancelled transaction back to each fact: a refused claim (duplicate or collision)
//! and the reason the other units share. Separate from building the transaction: it only reads
//! DynamoDB's answer against the items' roles.

use aws_sdk_dynamodb::types::CancellationReason;
use servicing_domain::Fingerprint;

use super::{Commit, CommitOutcome, Role, UnitOfWork};
use crate::StoreError;
use crate::errors::{is_throttling, refuses_the_request};
use crate::items;

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
/// duplicate in the transaction is known from this one answer. The loan's own failed condition
/// is returned beside the outcomes: when every unit was refused it shows in none of them, yet
/// the state the group was judged on is stale.
pub(super) fn map_cancellation(
    reasons: &[CancellationReason],
    roles: &[Role],
    units: &[UnitOfWork<'_>],
) -> Result<Commit, StoreError> {
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
                let marked = reason
                    .item()
                    .and_then(|item| items::allocation_from_claim(item).ok().flatten())
                    .filter(|allocation| allocation.reversed_by.as_ref() == Some(units[*i].source));
                match marked {
                    // Its own mark: a duplicate, unless the mark kept another payload's tag.
                    Some(allocation) => {
                        let outcome = match allocation.reversal_fact {
                            Some(tag) if tag != units[*i].fingerprint.tag() => {
                                CommitOutcome::Collision {
                                    stored: Fingerprint::from_stored(tag.to_string()),
                                }
                            }
                            _ => CommitOutcome::Duplicate,
                        };
                        refused[*i].get_or_insert(outcome);
                    }
                    None => condition_failed[*i] = true,
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
    let outcomes = match units.is_empty() {
        true => vec![others],
        false => refused
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|| others.clone()))
            .collect(),
    };
    Ok(Commit {
        outcomes,
        loan_moved,
    })
}
