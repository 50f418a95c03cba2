//! Reads of an account's partition: the loan item with what its reversals refer to, and the
//! stored allocations.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::KeysAndAttributes;
use servicing_domain::{
    AccountId, LoanAccount, ParkedFacts, ReversalTarget, SourceRef, StoredAllocation,
};

use crate::errors::{classify, invalid_request};
use crate::items::{self, Item, Verdict, s};
use crate::{RecentFacts, ServicingStore, StoreError};

/// DynamoDB's limit of keys per `BatchGetItem`.
pub(crate) const BATCH_GET_MAX_KEYS: usize = 100;

/// The loan item: the account (`None` while only facts parked before its opening are held),
/// the version the item carries (optimistic concurrency: +1 per fact that changes it), the
/// facts recently applied to it and the facts parked on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoanItem {
    pub account_id: AccountId,
    pub account: Option<LoanAccount>,
    pub version: u64,
    pub recent: RecentFacts,
    pub parked: ParkedFacts,
}

/// What is known of a reversal's payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Applied on this account: its stored allocation.
    Applied(StoredAllocation),
    /// Claimed as applied on another account.
    Elsewhere(AccountId),
    /// Claimed as an applied fact that is not a `PAYMENT_SETTLED` (on any account), with its
    /// `eventType`: a reversal of it is refused at once.
    NotAPayment(String),
    /// Not applied (no allocation here, no applied claim anywhere).
    NotApplied,
}

impl Target {
    /// What is known of a reversal's target from its record (its claim, which carries the
    /// allocation of a payment applied; it may be missing).
    fn of(account_id: &AccountId, claim: Option<Item>) -> Result<Target, StoreError> {
        let Some(claim) = claim else {
            return Ok(Target::NotApplied);
        };
        if let Some(allocation) = items::allocation_from_claim(&claim)?
            && &allocation.account_id == account_id
        {
            return Ok(Target::Applied(allocation));
        }
        let event_type = items::string(&claim, items::EVENT_TYPE).unwrap_or_default();
        let applied = items::string(&claim, items::VERDICT) == Some(Verdict::Applied.as_str());
        if applied && event_type != items::PAYMENT_SETTLED {
            return Ok(Target::NotAPayment(event_type.to_owned()));
        }
        Ok(match items::applied_elsewhere(&claim, account_id) {
            Some(other) => Target::Elsewhere(other),
            None => Target::NotApplied,
        })
    }
}

/// What consistent reads of an account return: its loan item and what is known of the payments
/// its reversals refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub loan: Option<LoanItem>,
    pub targets: HashMap<SourceRef, Target>,
}

impl Snapshot {
    pub fn account(&self) -> Option<&LoanAccount> {
        self.loan.as_ref().and_then(|l| l.account.as_ref())
    }

    /// What a reversal of `payment` finds: `None` when the payment was never read.
    pub fn reversal_target(&self, payment: &SourceRef) -> Option<Option<ReversalTarget<'_>>> {
        Some(match self.targets.get(payment)? {
            Target::Applied(allocation) => Some(ReversalTarget::Applied(allocation)),
            Target::Elsewhere(account) => Some(ReversalTarget::AppliedElsewhere(account)),
            Target::NotAPayment(event_type) => Some(ReversalTarget::NotAPayment(event_type)),
            Target::NotApplied => None,
        })
    }
}

impl ServicingStore {
    /// One consistent read of the account's loan item — with the bodies of its parked facts kept
    /// apart — and what is known of `payments` (the payments its reversals refer to): each
    /// payment's record, which holds its allocation when applied and names the account it was
    /// applied on. One request, whichever the account: a `Query` of the loan's partition (the
    /// item and its bodies) when no payment is asked for, else one `BatchGetItem` of the item and
    /// the records (then a `Query` for bodies apart, only for an account that has any).
    #[tracing::instrument(skip_all, fields(account = %account_id))]
    pub async fn load(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
    ) -> Result<Snapshot, StoreError> {
        let mut snapshot = Snapshot::default();
        if payments.is_empty() {
            let (pk, sk) = items::loan_key(account_id);
            let mut partition = self.partition(pk, None).await?;
            let Some(at) = partition
                .iter()
                .position(|item| items::string(item, items::SK) == Some(sk.as_str()))
            else {
                return Ok(snapshot);
            };
            let mut loan = items::loan_from_item(partition.swap_remove(at))?;
            fill_apart_bodies(&mut loan, &partition)?;
            snapshot.loan = Some(loan);
            return Ok(snapshot);
        }
        let loan = items::loan_key(account_id);
        snapshot.loan = self
            .read_targets(account_id, payments, Some(loan), &mut snapshot.targets)
            .await?
            .map(items::loan_from_item)
            .transpose()?;
        if let Some(loan) = snapshot.loan.as_mut() {
            self.read_apart_bodies(loan).await?;
        }
        Ok(snapshot)
    }

    /// One consistent read of the loan item alone: the bodies of its parked facts kept apart
    /// are left empty (for readers of the account, not of its parked facts: one `GetItem`).
    pub async fn loan_state(&self, account_id: &AccountId) -> Result<Option<LoanItem>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(items::key_item(items::loan_key(account_id))))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        got.item.map(items::loan_from_item).transpose()
    }

    /// Fills in the bodies of `loan`'s parked facts kept apart: one consistent `Query` of the
    /// loan's partition, only for an account that has any.
    pub async fn read_apart_bodies(&self, loan: &mut LoanItem) -> Result<(), StoreError> {
        if loan.parked.apart().next().is_none() {
            return Ok(());
        }
        let (pk, _) = items::loan_key(&loan.account_id);
        let found = self.partition(pk, Some(items::PARKED_BODY_PREFIX)).await?;
        fill_apart_bodies(loan, &found)
    }

    /// A loan's partition (its item and its parked bodies; only the items whose sort key starts
    /// with `prefix`, when given), consistently. The bodies are bounded (`MAX_PARKED_BYTES`), so
    /// this is one page but for a full account's.
    async fn partition(&self, pk: String, prefix: Option<&str>) -> Result<Vec<Item>, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.config.table)
            .expression_attribute_values(":pk", s(pk))
            .consistent_read(true);
        let query = match prefix {
            None => query.key_condition_expression("pk = :pk"),
            Some(prefix) => query
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":prefix", s(prefix)),
        };
        query
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)
    }

    /// Reads what is known of `payments` into `snapshot` (a reversal's payment that was not
    /// read with the account: e.g. a parked reversal released later in the batch).
    pub async fn load_targets(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
        snapshot: &mut Snapshot,
    ) -> Result<(), StoreError> {
        self.read_targets(account_id, payments, None, &mut snapshot.targets)
            .await
            .map(|_| ())
    }

    /// `BatchGetItem` of `loan` (returned) and, per payment, its record;
    /// each payment's target goes into `targets` (a claim of an applied fact of another type
    /// than `PAYMENT_SETTLED` makes it [`Target::NotAPayment`]).
    async fn read_targets(
        &self,
        account_id: &AccountId,
        payments: &[&SourceRef],
        loan: Option<(String, String)>,
        targets: &mut HashMap<SourceRef, Target>,
    ) -> Result<Option<Item>, StoreError> {
        // A batch may refer to one payment several times (a reversal and a chargeback): each
        // key once, or DynamoDB refuses the request.
        let unique: std::collections::BTreeSet<&SourceRef> = payments.iter().copied().collect();
        let mut keys: Vec<(String, String)> = loan.iter().cloned().collect();
        for payment in &unique {
            keys.push(items::claim_key(&self.config.consumer, payment));
        }
        let mut found: HashMap<(String, String), Item> = HashMap::new();
        for chunk in keys.chunks(BATCH_GET_MAX_KEYS) {
            found.extend(self.batch_get(chunk).await?);
        }
        for payment in unique {
            let claim = found.remove(&items::claim_key(&self.config.consumer, payment));
            let target = Target::of(account_id, claim)?;
            targets.insert(payment.clone(), target);
        }
        Ok(loan.and_then(|key| found.remove(&key)))
    }

    /// One `BatchGetItem` (consistent), asked again for what DynamoDB leaves unprocessed.
    pub(crate) async fn batch_get(
        &self,
        keys: &[(String, String)],
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        self.batch_get_attributes(keys, None).await
    }

    /// [`Self::batch_get`] of only the named attributes (with `pk` and `sk`), when the role may
    /// read no others (`dynamodb:Attributes`).
    pub(crate) async fn batch_get_attributes(
        &self,
        keys: &[(String, String)],
        attributes: Option<&[&str]>,
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let projection = attributes.map(|names| {
            [items::PK, items::SK]
                .iter()
                .chain(names)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        });
        let mut request = KeysAndAttributes::builder()
            .set_keys(Some(keys.iter().cloned().map(items::key_item).collect()))
            .set_projection_expression(projection)
            .consistent_read(true)
            .build()
            .map_err(invalid_request)?;
        let mut found = HashMap::new();
        for _ in 0..5 {
            let got = self
                .client
                .batch_get_item()
                .request_items(&self.config.table, request)
                .send()
                .await
                .map_err(classify)?;
            for item in got
                .responses
                .and_then(|mut r| r.remove(&self.config.table))
                .unwrap_or_default()
            {
                let key = (
                    items::string(&item, items::PK)
                        .unwrap_or_default()
                        .to_owned(),
                    items::string(&item, items::SK)
                        .unwrap_or_default()
                        .to_owned(),
                );
                found.insert(key, item);
            }
            match got
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.config.table))
            {
                Some(rest) if !rest.keys.is_empty() => request = rest,
                _ => return Ok(found),
            }
        }
        Err(StoreError::Transient(
            "BatchGetItem kept returning unprocessed keys".into(),
        ))
    }

    /// Every stored allocation of an account, in the order of the payments' identities, each
    /// read from its payment's own record as servicing stored it. Which payments: those the
    /// account's ledger posted (its journal's `PaymentApplied` entries name them: the ledger
    /// is the account's index of its money, kept anyway), and those the sparse
    /// `AllocationsIndex` lists — a payment that moves no money (the ledger posts nothing for
    /// it) and records written before the journal was the listing. So a payment costs no index
    /// write. A payment applied a moment ago is listed once the ledger has posted it (seconds;
    /// one whose event the ledger quarantined, once it is posted); its record is read by key at
    /// once (`GET /v1/payments/{id}` for the API's). A posted payment whose record holds no
    /// allocation on this account is left out and logged: the money reconciliation names it.
    pub async fn allocations(
        &self,
        account_id: &AccountId,
    ) -> Result<Vec<StoredAllocation>, StoreError> {
        // Keyed by the payment: listed in the order of its identity, each once.
        let mut by_payment: std::collections::BTreeMap<SourceRef, StoredAllocation> = self
            .indexed_allocations(account_id)
            .await?
            .into_iter()
            .map(|a| (a.payment.clone(), a))
            .collect();
        let posted: Vec<(String, String)> = self
            .posted_payments(account_id)
            .await?
            .into_iter()
            .filter(|p| !by_payment.contains_key(p))
            .map(|p| items::claim_key(crate::APPLIER, &p))
            .collect();
        for chunk in posted.chunks(BATCH_GET_MAX_KEYS) {
            let found = self
                .batch_get_attributes(chunk, Some(&[items::OUTBOX, items::REVERSED_BY]))
                .await?;
            for key in chunk {
                let allocation = found
                    .get(key)
                    .map(items::allocation_from_claim)
                    .transpose()?
                    .flatten()
                    .filter(|a| &a.account_id == account_id);
                let Some(allocation) = allocation else {
                    tracing::warn!(
                        account = %account_id,
                        record = %key.0,
                        "the ledger posted a payment whose record holds no allocation on its account"
                    );
                    continue;
                };
                by_payment.insert(allocation.payment.clone(), allocation);
            }
        }
        Ok(by_payment.into_values().collect())
    }

    /// The payments the account's ledger posted: the trigger of each `PaymentApplied` entry of
    /// its partition (one `Query`, eventually consistent — the listing trails the ledger by
    /// seconds anyway; its cost grows with the account's money events, as the index's did with
    /// its payments).
    async fn posted_payments(&self, account_id: &AccountId) -> Result<Vec<SourceRef>, StoreError> {
        let (pk, _) = crate::journal::sub_ledger_key(account_id);
        let found: Vec<Item> = self
            .client
            .query()
            .table_name(&self.config.table)
            .key_condition_expression("pk = :pk")
            .filter_expression("#eventType = :paid")
            .projection_expression("#posting")
            .expression_attribute_names("#eventType", items::EVENT_TYPE)
            .expression_attribute_names("#posting", crate::journal::POSTING)
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(
                ":paid",
                s(servicing_domain::outbox::detail_types::PAYMENT_APPLIED),
            )
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)?;
        found
            .iter()
            .map(|item| {
                let posting = items::string(item, crate::journal::POSTING).unwrap_or_default();
                serde_json::from_str::<servicing_domain::journal::Posting>(posting)
                    .map(|p| p.entry.trigger)
                    .map_err(|e| {
                        StoreError::Corrupt(format!("a journal entry of {account_id}: {e}"))
                    })
            })
            .collect()
    }

    /// The allocations the sparse `AllocationsIndex` lists for the account (eventually
    /// consistent): records that carry `allocatedTo`, written before the ledger's journal
    /// was the listing.
    async fn indexed_allocations(
        &self,
        account_id: &AccountId,
    ) -> Result<Vec<StoredAllocation>, StoreError> {
        let found: Vec<Item> = self
            .client
            .query()
            .table_name(&self.config.table)
            .index_name(items::ALLOCATIONS_INDEX)
            .key_condition_expression("#account = :account")
            .expression_attribute_names("#account", items::ALLOCATED_TO)
            .expression_attribute_values(":account", s(account_id.as_str()))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)?;
        let mut allocations = Vec::with_capacity(found.len());
        for item in &found {
            allocations.extend(items::allocation_from_claim(item)?);
        }
        Ok(allocations)
    }
}

/// Puts each body kept apart (from `found`, the partition's body items) on its parked fact. The
/// loan item and its bodies are written in one transaction, but a partition read over several
/// pages is no snapshot: a body the item names and `found` lacks was released or expired by a
/// write between the pages, and the read is simply made again (a transient error).
fn fill_apart_bodies(loan: &mut LoanItem, found: &[Item]) -> Result<(), StoreError> {
    let mut bodies: HashMap<&str, &str> = found
        .iter()
        .filter_map(|item| {
            Some((
                items::string(item, items::SK)?,
                items::string(item, items::BODY)?,
            ))
        })
        .collect();
    let account_id = loan.account_id.clone();
    for fact in loan.parked.iter_mut().filter(|f| f.body_apart) {
        let (_, sk) = items::parked_body_key(&account_id, &fact.source);
        fact.body = bodies
            .remove(sk.as_str())
            .map(str::to_owned)
            .ok_or_else(|| {
                StoreError::Transient(format!(
                    "the body of {} parked on {account_id} left between the read's pages",
                    fact.source
                ))
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ClaimRecord, to_item};

    fn claim(event_type: &str, verdict: Verdict, account: &str) -> Item {
        to_item(&ClaimRecord {
            pk: "CLAIM#account-state#psp#t1".into(),
            sk: "CLAIM".into(),
            item_type: ClaimRecord::ITEM_TYPE.into(),
            schema_version: crate::schema::SCHEMA_VERSION,
            consumer: crate::APPLIER.into(),
            source_system: "psp".into(),
            source_event_id: "t1".into(),
            event_type: event_type.into(),
            account_id: account.into(),
            fingerprint: "sha256:00".into(),
            verdict: verdict.as_str().into(),
            claimed_at: 1,
            expires_at: Some(2),
            outbox: None,
            allocated_to: None,
            reversed_by: None,
            trace_header: None,
        })
        .expect("claim item")
    }

    #[test]
    fn when_the_target_claim_is_an_applied_fee_should_be_not_a_payment_on_any_account() {
        let here = AccountId::parse("acc_1").expect("id");
        for account in ["acc_1", "acc_2"] {
            let claim = claim("FEE_ASSESSED", Verdict::Applied, account);
            assert_eq!(
                Target::of(&here, Some(claim)).expect("target"),
                Target::NotAPayment("FEE_ASSESSED".into())
            );
        }
        // Not applied (yet): the reversal waits for it.
        let parked = claim("FEE_ASSESSED", Verdict::Parked, "acc_1");
        assert_eq!(
            Target::of(&here, Some(parked)).expect("target"),
            Target::NotApplied
        );
        // A payment applied elsewhere stays a mismatch.
        let payment = claim("PAYMENT_SETTLED", Verdict::Applied, "acc_2");
        assert_eq!(
            Target::of(&here, Some(payment)).expect("target"),
            Target::Elsewhere(AccountId::parse("acc_2").expect("id"))
        );
    }

    #[test]
    fn when_a_reversal_reads_a_not_a_payment_target_should_get_the_domain_variant() {
        let payment = SourceRef::new("psp", "t1").expect("source");
        let snapshot = Snapshot {
            loan: None,
            targets: HashMap::from([(
                payment.clone(),
                Target::NotAPayment("PAYMENT_REVERSED".into()),
            )]),
        };
        assert_eq!(
            snapshot.reversal_target(&payment),
            Some(Some(ReversalTarget::NotAPayment("PAYMENT_REVERSED")))
        );
    }
}
