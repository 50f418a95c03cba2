//! The ledger's JSON report, as `ledgerctl replay` prints it. Separate from the handling of
//! deliveries: it only reads the ledger.

use serde_json::{Value, json};

use super::Ledger;
use crate::account::LoanAccount;
use crate::outbox::{DomainEvent, detail_types};

impl Ledger {
    /// A JSON report: per account the state, its allocations and delinquency history, plus the
    /// counts and the quarantine reasons.
    pub fn report(&self) -> Value {
        let accounts: Vec<Value> = self
            .accounts
            .values()
            .map(|account| self.account_report(account))
            .collect();
        json!({
            "accounts": accounts,
            "counts": self.counts,
            "parked": self.parked().map(|(account, fact)| json!({
                "accountId": account,
                "source": fact.source.to_string(),
                "awaits": fact.awaits.as_ref().map(|a| a.awaited(account)),
            })).collect::<Vec<_>>(),
            "quarantine": self.quarantine.iter().map(|q| json!({
                "source": q.source.as_ref().map(ToString::to_string),
                "reason": q.reason,
            })).collect::<Vec<_>>(),
        })
    }

    fn account_report(&self, account: &LoanAccount) -> Value {
        let changes: Vec<Value> = self
            .outbox
            .iter()
            .filter(|e| {
                e.account_id == account.account_id
                    && e.detail_type == detail_types::DELINQUENCY_CHANGED
            })
            .map(DomainEvent::detail)
            .collect();
        let allocations = self
            .allocations
            .values()
            .filter(|a| a.account_id == account.account_id);
        crate::report::account_report(account, allocations, &changes)
    }
}
