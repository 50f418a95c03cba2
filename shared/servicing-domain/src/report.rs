//! The account report: the shape of the contract's `*.expected.json` (minus `counts` and
//! `note`), built from a state, its allocations and its `DelinquencyChanged` details. One place,
//! so the in-memory ledger, the stored state and the fixtures are compared on the same terms.

use serde_json::{Value, json};

use crate::account::{Bucket, LoanAccount, StoredAllocation};

/// `delinquency_changes`: the `detail` of each `DelinquencyChanged` event. They are listed in
/// business-time order (their trigger's `occurredAt`, then `eventId`), whatever order they were
/// applied in: a late fact (a payment of September applied after October's close) is listed
/// where it happened, so the ledger and the store report the same list.
pub fn account_report<'a>(
    account: &LoanAccount,
    allocations: impl IntoIterator<Item = &'a StoredAllocation>,
    delinquency_changes: &[Value],
) -> Value {
    let allocations: serde_json::Map<String, Value> = allocations
        .into_iter()
        .map(|a| {
            let s = a.allocation;
            (
                a.payment.to_string(),
                json!({"fees": s.fees, "interest": s.interest, "principal": s.principal,
                       "credit": s.credit, "reversed": a.reversed_by.is_some()}),
            )
        })
        .collect();
    let mut delinquency_changes: Vec<&Value> = delinquency_changes.iter().collect();
    delinquency_changes.sort_by(|a, b| {
        (a["occurredAt"].as_str(), a["eventId"].as_str())
            .cmp(&(b["occurredAt"].as_str(), b["eventId"].as_str()))
    });
    let notifications = delinquency_changes
        .iter()
        .filter(|d| {
            serde_json::from_value::<Bucket>(d["toBucket"].clone())
                .is_ok_and(|b| b.needs_collections_action())
        })
        .count();
    json!({
        "accountId": account.account_id,
        "currency": account.currency,
        "principalOutstandingMinor": account.principal_outstanding_minor,
        "interestOutstandingMinor": account.interest_outstanding_minor,
        "feesOutstandingMinor": account.fees_outstanding_minor,
        "creditBalanceMinor": account.credit_balance_minor,
        "creditLimitMinor": account.credit_limit_minor,
        "dpd": account.dpd,
        "delinquencyBucket": account.delinquency_bucket,
        "allocations": allocations,
        "delinquencyChanges": delinquency_changes.iter().map(|d| json!({
            "fromBucket": d["fromBucket"],
            "toBucket": d["toBucket"],
            "dpd": d["dpd"],
            "trigger": format!("{}:{}",
                d["triggerSourceSystem"].as_str().unwrap_or_default(),
                d["triggerSourceEventId"].as_str().unwrap_or_default()),
        })).collect::<Vec<_>>(),
        "collectionsNotifications": notifications,
    })
}
