//! Parked facts the reconciler takes off their account (expired, or reversing another account's
//! payment).

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};
use servicing_domain::{AccountId, SourceRef};

use crate::conditions::version_condition;
use crate::errors::{classify, classify_service, invalid_request};
use crate::items::{self, Verdict, s};
use crate::open::OpenKind;
use crate::{LoanItem, QuarantineEntry, ServicingStore, StoreError, now_epoch};

/// How an expiry transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpiryOutcome {
    /// Taken off: quarantined, claims released.
    Expired,
    /// The loan item moved meanwhile: read it again.
    Moved,
    /// These facts' claims are not `PARKED` (an inconsistency for an operator): nothing was
    /// written; the others can go without them.
    ClaimsNotParked(Vec<SourceRef>),
}

/// A loan item the parked-facts scan could not decode: its key and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndecodableLoan {
    pub pk: String,
    pub error: String,
}

/// A parked fact to take off its account, with the quarantine code and reason.
#[derive(Debug, Clone)]
pub struct ExpiredFact<'a> {
    pub fact: &'a servicing_domain::ParkedFact,
    pub code: &'a str,
    pub reason: String,
}

impl ServicingStore {
    /// Takes parked facts off an account for good (the reconciler: waited past the park
    /// retention, or a reversal whose payment was applied on another account), in ONE
    /// transaction per loan item: the loan item without them (its version raised, never deleted),
    /// their `PARKED` claims deleted — so a resend can still apply — and a quarantine item each
    /// with its raw body.
    pub async fn expire_parked(
        &self,
        loan: &LoanItem,
        expired: &[ExpiredFact<'_>],
    ) -> Result<ExpiryOutcome, StoreError> {
        let (_, now_millis) = now_epoch();
        let mut next = loan.clone();
        for fact in expired {
            next.parked.remove(&fact.fact.source);
        }
        next.version += 1;
        // Kept even when it holds nothing any more (a tombstone carrying the version): a new
        // item would start again at version 1, and a warm instance holding the old version 1
        // would pass its version check and overwrite it.
        let loan_write = self.put(
            items::loan_item(&next)?,
            Some(version_condition(Some(loan.version))),
        )?;
        let mut request = self
            .client
            .transact_write_items()
            .transact_items(loan_write);
        for expired in expired {
            let fact = expired.fact;
            let claim = Delete::builder()
                .table_name(&self.config.table)
                .set_key(Some(items::key_item(items::claim_key(
                    &self.config.consumer,
                    &fact.source,
                ))))
                .condition_expression("attribute_not_exists(pk) OR #verdict = :parked")
                .expression_attribute_names("#verdict", items::VERDICT)
                .expression_attribute_values(":parked", s(Verdict::Parked.as_str()))
                .build()
                .map_err(invalid_request)?;
            let entry = QuarantineEntry {
                source: Some(&fact.source),
                account_id: Some(&loan.account_id),
                received_fingerprint: Some(&fact.fingerprint),
                ..QuarantineEntry::new(&fact.message_id, &fact.body, expired.code, &expired.reason)
            };
            request = request
                .transact_items(TransactWriteItem::builder().delete(claim).build())
                .transact_items(self.put(self.quarantine_item(&entry, now_millis)?, None)?);
        }
        // After every fact's pair (their positions tell refused claims below): the bodies kept
        // apart leave with their facts.
        for expired in expired.iter().filter(|e| e.fact.body_apart) {
            let key = items::parked_body_key(&loan.account_id, &expired.fact.source);
            request = request.transact_items(self.delete(key)?);
        }
        match request.send().await {
            Ok(_) => Ok(ExpiryOutcome::Expired),
            Err(e) => match e.into_service_error() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let codes = crate::errors::cancellation_codes(&c);
                    // Items: the loan write, then per fact its claim delete and its quarantine.
                    let refused_claims: Vec<SourceRef> = expired
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| codes.get(1 + 2 * i) == Some(&"ConditionalCheckFailed"))
                        .map(|(_, e)| e.fact.source.clone())
                        .collect();
                    if !refused_claims.is_empty() {
                        Ok(ExpiryOutcome::ClaimsNotParked(refused_claims))
                    } else if codes.iter().all(|c| {
                        matches!(
                            *c,
                            "None" | "ConditionalCheckFailed" | "TransactionConflict"
                        )
                    }) {
                        Ok(ExpiryOutcome::Moved)
                    } else {
                        Err(StoreError::Transient(format!(
                            "transaction cancelled: {codes:?}"
                        )))
                    }
                }
                other => Err(classify_service(other)),
            },
        }
    }

    /// The accounts whose loan items hold parked facts, from the open index (never a scan:
    /// what it reads grows with the accounts holding parked facts, not with the table), oldest
    /// parked first. The index lags the table: read each loan before acting on it.
    pub async fn parked_accounts(
        &self,
    ) -> Result<Vec<Result<AccountId, UndecodableLoan>>, StoreError> {
        Ok(self
            .open(OpenKind::Parked)
            .await?
            .into_iter()
            .map(|entry| {
                entry
                    .pk
                    .strip_prefix("LOAN#")
                    .and_then(|id| AccountId::parse(id).ok())
                    .ok_or_else(|| UndecodableLoan {
                        pk: entry.pk.clone(),
                        error: "not a loan key".into(),
                    })
            })
            .collect())
    }

    /// The loan item of `account` with its parked facts' bodies (one consistent read), when it
    /// still holds parked facts; an item that does not decode is returned as such.
    pub async fn parked_loan(
        &self,
        account: &AccountId,
    ) -> Result<Option<Result<LoanItem, UndecodableLoan>>, StoreError> {
        match self.load(account, &[]).await {
            Ok(snapshot) => Ok(snapshot.loan.filter(|loan| !loan.parked.is_empty()).map(Ok)),
            Err(e @ StoreError::Corrupt(_)) => Ok(Some(Err(UndecodableLoan {
                pk: items::loan_key(account).0,
                error: e.to_string(),
            }))),
            Err(e) => Err(e),
        }
    }

    /// Every loan item that holds parked facts ([`Self::parked_accounts`], each read by
    /// [`Self::parked_loan`]); one undecodable item is reported, not a failed listing.
    pub async fn parked_loans(&self) -> Result<Vec<Result<LoanItem, UndecodableLoan>>, StoreError> {
        let mut loans = Vec::new();
        for account in self.parked_accounts().await? {
            match account {
                Ok(account) => loans.extend(self.parked_loan(&account).await?),
                Err(undecodable) => loans.push(Err(undecodable)),
            }
        }
        Ok(loans)
    }

    /// The claim `consumer`'s store holds for `source` says it was applied on another account
    /// than `account`: that account.
    pub async fn applied_elsewhere(
        &self,
        source: &SourceRef,
        account: &AccountId,
    ) -> Result<Option<AccountId>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::claim_key(
                &self.config.consumer,
                source,
            ))))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        Ok(got
            .item
            .and_then(|claim| items::applied_elsewhere(&claim, account)))
    }
}
