//! `ledgerctl ledger correct`: an operator's correcting entry on one account's sub-ledger, the
//! only way a person changes the ledger (entries are never edited or deleted). It is posted as
//! the consumer posts an event — the entry claimed under its id, the balances at the version
//! read, the period checked open — so a second run of the same command is a duplicate and the
//! same id on the same account with anything else a collision, refused (ids are per account,
//! like the entries they name).

use chrono::{DateTime, NaiveDate};
use ledger_postings::{LedgerPostingsHandler, MessageResult};
use servicing_domain::AccountId;
use servicing_domain::fingerprint::Fingerprint;
use servicing_domain::journal::{
    CORRECTION_ID_PREFIX, Correction, LedgerAccount, Transfer, correcting_entry,
};
use servicing_ops::money::minor;
use servicing_store::ServicingStore;

/// What the operator asks for (the command's arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct CorrectionOrder {
    #[arg(long, value_parser = account_id)]
    pub account: AccountId,
    /// The correction's id (1 to 64 letters, digits, '-', '_', '.'), e.g. `--id fee-twice-2026-12-01`.
    #[arg(long)]
    pub id: String,
    /// The ledger account debited, by code (`docs/ledger.md`), e.g. `--debit 4100:fee_income`.
    #[arg(long, value_parser = ledger_account)]
    pub debit: LedgerAccount,
    /// The ledger account credited, by code, e.g. `--credit 1120:fees_receivable`.
    #[arg(long, value_parser = ledger_account)]
    pub credit: LedgerAccount,
    /// The amount in minor units (> 0), e.g. `--amount-minor 500` for 5.00.
    #[arg(long)]
    pub amount_minor: i64,
    /// Why: kept on the entry for good, e.g. `--reason "fee assessed twice"`.
    #[arg(long)]
    pub reason: String,
}

fn account_id(value: &str) -> Result<AccountId, String> {
    AccountId::parse(value).map_err(|e| e.to_string())
}

/// A ledger account by its code; a typo lists the codes a correction may use.
fn ledger_account(code: &str) -> Result<LedgerAccount, String> {
    LedgerAccount::parse(code).ok_or_else(|| {
        let codes: Vec<String> = LedgerAccount::FIXED
            .iter()
            .filter(|a| **a != LedgerAccount::OpeningBalances)
            .map(LedgerAccount::code)
            .collect();
        format!(
            "not a ledger account: one of {} (cash clearing and opening balances are never corrected)",
            codes.join(", ")
        )
    })
}

/// How it ended (a collision or a refusal is an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corrected {
    Posted {
        posting_date: NaiveDate,
    },
    /// Posted before under this id with the same correction: nothing written.
    Duplicate,
    /// `--dry-run`: what would be posted.
    WouldPost,
}

/// Posts `order` through the ledger's own posting (`handler`, over `store`), stamped with `operator`; the
/// currency is the sub-ledger's, else servicing's for the account (an account the ledger has
/// not posted yet).
pub async fn correct(
    handler: &LedgerPostingsHandler,
    store: &ServicingStore,
    order: &CorrectionOrder,
    operator: &str,
    dry_run: bool,
) -> anyhow::Result<(Corrected, String)> {
    let entry_id = format!("{CORRECTION_ID_PREFIX}{}", order.id);
    // One read, as the post makes it: the balances (and their currency) and the id, if taken.
    let (read, posted) = store
        .sub_ledger_and_entry(&order.account, &entry_id)
        .await?;
    let currency = match read.as_ref().and_then(|r| r.currency) {
        Some(currency) => currency,
        None => store
            .loan_state(&order.account)
            .await?
            .and_then(|l| l.account)
            .map(|a| a.currency)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: no sub-ledger and no opened loan: nothing to correct",
                    order.account
                )
            })?,
    };
    let now = DateTime::from_timestamp_millis(servicing_store::epoch_millis()).unwrap_or_default();
    let entry = correcting_entry(
        &order.id,
        order.account.clone(),
        currency,
        Transfer {
            debit: order.debit.clone(),
            credit: order.credit.clone(),
            amount_minor: order.amount_minor,
        },
        Correction {
            reason: order.reason.clone(),
            by: operator.to_owned(),
        },
        now,
    )
    .map_err(|e| anyhow::anyhow!("refused, nothing written: {e}"))?;
    // What the correction is, not who ran it or when: the same command again is a duplicate.
    let fingerprint = Fingerprint::of_value(&serde_json::json!({
        "debit": order.debit.code(),
        "credit": order.credit.code(),
        "amountMinor": order.amount_minor,
        "currency": currency.as_str(),
        "reason": order.reason,
    }));
    let what = format!(
        "{} on {}: Dr {} / Cr {} {} {} ({:?})",
        entry.entry_id,
        order.account,
        order.debit.code(),
        order.credit.code(),
        minor(order.amount_minor),
        currency.as_str(),
        order.reason
    );
    if dry_run {
        // What the post would find: the id taken, or balances that refuse the entry.
        if let Some(posted) = posted {
            if posted.fingerprint == fingerprint.as_str() {
                return Ok((
                    Corrected::Duplicate,
                    format!("posted before: {what} (dry run: nothing written)"),
                ));
            }
            anyhow::bail!(
                "would be refused (collision): {} was posted on {} with another correction",
                entry.entry_id,
                order.account
            );
        }
        let mut next = read.map(|r| r.sub_ledger()).unwrap_or_default();
        next.post(&entry)
            .map_err(|e| anyhow::anyhow!("would be refused (unpostable): {e}"))?;
        return Ok((
            Corrected::WouldPost,
            format!("would post {what} (dry run: nothing written)"),
        ));
    }
    match handler.post(&entry, &fingerprint).await? {
        Ok(MessageResult::Posted { posting_date }) => Ok((
            Corrected::Posted { posting_date },
            format!("posted {what}, posting date {posting_date} (by {operator})"),
        )),
        Ok(MessageResult::Duplicate) => Ok((
            Corrected::Duplicate,
            format!("posted before: {what} (nothing written)"),
        )),
        Ok(other) => anyhow::bail!("{what}: {other:?}"),
        Err((code, reason)) => anyhow::bail!("refused ({code}), nothing written: {reason}"),
    }
}
