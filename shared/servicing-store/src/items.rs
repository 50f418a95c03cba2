//! Key layout and explicit item mapping of the single servicing table (see `infra/schema.md`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::{AccountId, DomainEvent, ParkedFacts, SourceRef, StoredAllocation};

use crate::{LoanItem, RecentFacts, StoreError};

pub type Item = HashMap<String, AttributeValue>;

pub const PK: &str = "pk";
pub const SK: &str = "sk";
pub const ITEM_TYPE: &str = "itemType";
pub const VERSION: &str = "version";
pub const FINGERPRINT: &str = "fingerprint";
pub const VERDICT: &str = "verdict";
pub const REVERSED_BY: &str = "reversedBy";
/// The loan item's currency (`LoanAccount::currency`).
pub const CURRENCY: &str = "currency";
/// The loan item's recently applied facts (`RecentFacts`).
pub const RECENT_FACTS: &str = "recentFacts";
/// The loan item's parked facts (`ParkedFacts`, absent when none).
pub const PARKED_FACTS: &str = "parkedFacts";
pub const ACCOUNT_ID: &str = "accountId";

pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// `(pk, sk)` of a loan's state item.
pub fn loan_key(account: &AccountId) -> (String, String) {
    (format!("LOAN#{account}"), "STATE".to_owned())
}

/// Allocations live in the loan's partition, keyed by the payment's identity.
pub fn allocation_key(account: &AccountId, payment: &SourceRef) -> (String, String) {
    (
        format!("LOAN#{account}"),
        format!("ALLOC#{}#{}", payment.system, payment.event_id),
    )
}

/// Claims are keyed by `(consumer, sourceSystem, sourceEventId)` and not by account, so a reused
/// identity on another account is still caught as a collision. `sourceSystem` cannot contain
/// `#` (contract charset), so the key is unambiguous even when `sourceEventId` does.
pub fn claim_key(consumer: &str, source: &SourceRef) -> (String, String) {
    (
        format!("CLAIM#{consumer}#{}#{}", source.system, source.event_id),
        "CLAIM".to_owned(),
    )
}

pub fn action_key(action_id: &str) -> (String, String) {
    (format!("ACTION#{action_id}"), "ACTION".to_owned())
}

pub fn action_item(intent: &crate::ActionIntent, now: i64) -> Result<Item, StoreError> {
    let (pk, sk) = action_key(&intent.action_id);
    crate::schema::to_item(&crate::schema::ActionItem {
        pk,
        sk,
        item_type: crate::schema::ActionItem::ITEM_TYPE.into(),
        action_id: intent.action_id.clone(),
        account_id: intent.account_id.as_str().into(),
        event_id: intent.event_id.clone(),
        status: crate::ActionStatus::Pending.as_str().into(),
        attempts: 0,
        payload: intent.payload.to_string(),
        created_at: now,
        lease_id: None,
        lease_until: None,
        last_http_status: None,
        last_detail: None,
        updated_at: None,
    })
}

pub fn outbox_key(event_id: &str) -> (String, String) {
    (format!("OUTBOX#{event_id}"), "OUTBOX".to_owned())
}

/// Quarantine items are partitioned per consumer and day, sorted by time then message id.
pub fn quarantine_key(
    consumer: &str,
    day: &str,
    at_millis: i64,
    message_id: &str,
) -> (String, String) {
    (
        format!("QUARANTINE#{consumer}#{day}"),
        format!("{at_millis:013}#{message_id}"),
    )
}

pub fn key_item((pk, sk): (String, String)) -> Item {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

fn with_key(mut item: Item, key: (String, String), item_type: &str) -> Item {
    item.extend(key_item(key));
    item.insert(ITEM_TYPE.to_owned(), s(item_type));
    item
}

/// The loan item: the account's fields (absent while the account is not opened and the item
/// only holds facts parked before its opening), its version, recent and parked facts.
pub fn loan_item(loan: &LoanItem) -> Result<Item, StoreError> {
    let item: Item = match &loan.account {
        Some(account) => serde_dynamo::to_item(account).map_err(encode_error)?,
        None => HashMap::from([(ACCOUNT_ID.to_owned(), s(loan.account_id.as_str()))]),
    };
    let mut item = with_key(item, loan_key(&loan.account_id), "LOAN");
    item.insert(VERSION.to_owned(), n(loan.version));
    // In the arrears index only while something billed is unpaid (a sparse index).
    if let Some(attributes) = loan
        .account
        .as_ref()
        .and_then(crate::arrears::arrears_attributes)
    {
        item.extend(attributes);
    }
    if !loan.recent.is_empty() {
        item.insert(RECENT_FACTS.to_owned(), loan.recent.encode());
    }
    if !loan.parked.is_empty() {
        let parked = serde_dynamo::to_attribute_value(&loan.parked).map_err(encode_error)?;
        item.insert(PARKED_FACTS.to_owned(), parked);
    }
    Ok(item)
}

pub fn loan_from_item(mut item: Item) -> Result<LoanItem, StoreError> {
    let version = number(&item, VERSION)?;
    let recent = RecentFacts::decode(item.get(RECENT_FACTS))?;
    let parked: ParkedFacts = match item.remove(PARKED_FACTS) {
        Some(value) => serde_dynamo::from_attribute_value(value).map_err(decode_error)?,
        None => ParkedFacts::default(),
    };
    let account_id = string(&item, ACCOUNT_ID)
        .and_then(|id| AccountId::parse(id).ok())
        .ok_or_else(|| StoreError::Corrupt("loan item without a valid accountId".into()))?;
    let account = if item.contains_key(CURRENCY) {
        Some(serde_dynamo::from_item(item).map_err(decode_error)?)
    } else {
        None
    };
    Ok(LoanItem {
        account_id,
        account,
        version,
        recent,
        parked,
    })
}

pub fn allocation_item(allocation: &StoredAllocation) -> Result<Item, StoreError> {
    let item: Item = serde_dynamo::to_item(allocation).map_err(encode_error)?;
    Ok(with_key(
        item,
        allocation_key(&allocation.account_id, &allocation.payment),
        "ALLOCATION",
    ))
}

pub fn allocation_from_item(item: Item) -> Result<StoredAllocation, StoreError> {
    serde_dynamo::from_item(item).map_err(decode_error)
}

pub fn source_ref_value(source: &SourceRef) -> Result<AttributeValue, StoreError> {
    serde_dynamo::to_attribute_value(source).map_err(encode_error)
}

/// What a consumer decided about a fact, stored with its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Applied,
    Stale,
    Rejected,
    /// Waiting on the loan item for another fact; judged again when that one applies.
    Parked,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Applied => "APPLIED",
            Verdict::Stale => "STALE",
            Verdict::Rejected => "REJECTED",
            Verdict::Parked => "PARKED",
        }
    }
}

pub fn claim_item(
    consumer: &str,
    unit: &crate::UnitOfWork<'_>,
    verdict: Verdict,
    now: i64,
    expires_at: i64,
) -> Result<Item, StoreError> {
    let (pk, sk) = claim_key(consumer, unit.source);
    crate::schema::to_item(&crate::schema::ClaimRecord {
        pk,
        sk,
        item_type: crate::schema::ClaimRecord::ITEM_TYPE.into(),
        consumer: consumer.into(),
        source_system: unit.source.system.clone(),
        source_event_id: unit.source.event_id.clone(),
        event_type: unit.event_type.into(),
        account_id: unit.account_id.as_str().into(),
        fingerprint: unit.fingerprint.as_str().into(),
        verdict: verdict.as_str().into(),
        claimed_at: now,
        expires_at,
    })
}

/// The account a claim says its fact was applied on, when that is another than `account`.
pub fn applied_elsewhere(claim: &Item, account: &AccountId) -> Option<AccountId> {
    if string(claim, VERDICT) != Some(Verdict::Applied.as_str()) {
        return None;
    }
    let owner = AccountId::parse(string(claim, ACCOUNT_ID)?).ok()?;
    (&owner != account).then_some(owner)
}

/// The EventBridge `source` of events emitted by a consumer.
pub fn event_source(consumer: &str) -> String {
    format!("servicing.{consumer}")
}

pub fn outbox_item(
    consumer: &str,
    event: &DomainEvent,
    now: i64,
    expires_at: i64,
) -> Result<Item, StoreError> {
    raw_outbox_item(
        &crate::OutboxEntry {
            event_id: event.event_id.clone(),
            source: event_source(consumer),
            detail_type: event.detail_type.clone(),
            account_id: event.account_id.clone(),
            detail: event.detail(),
        },
        now,
        expires_at,
    )
}

pub fn raw_outbox_item(
    entry: &crate::OutboxEntry,
    now: i64,
    expires_at: i64,
) -> Result<Item, StoreError> {
    let (pk, sk) = outbox_key(&entry.event_id);
    crate::schema::to_item(&crate::schema::OutboxRecord {
        pk,
        sk,
        item_type: crate::schema::OutboxRecord::ITEM_TYPE.into(),
        event_id: entry.event_id.clone(),
        source: entry.source.clone(),
        detail_type: entry.detail_type.clone(),
        account_id: entry.account_id.as_str().into(),
        detail: entry.detail.to_string(),
        created_at: now,
        expires_at,
        trace_header: current_trace_header(),
    })
}

/// The X-Ray trace header of the invocation writing the item: lambda_runtime sets
/// `_X_AMZN_TRACE_ID` for each invocation (one at a time per process), so the relay can carry
/// the trace through `PutEvents` and the servicing queue.
fn current_trace_header() -> Option<String> {
    std::env::var("_X_AMZN_TRACE_ID")
        .ok()
        .filter(|h| !h.is_empty())
}

/// Idempotency records of the API are scoped to the caller: the principal is part of the key.
pub fn idempotency_key(principal_scope: &str, key: &str) -> (String, String) {
    (
        format!("IDEMPOTENCY#{principal_scope}#{key}"),
        "IDEMPOTENCY".to_owned(),
    )
}

pub fn number(item: &Item, attribute: &str) -> Result<u64, StoreError> {
    match item.get(attribute) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("{attribute} is not a whole number: {v}"))),
        _ => Err(StoreError::Corrupt(format!("{attribute} is missing"))),
    }
}

pub fn string<'a>(item: &'a Item, attribute: &str) -> Option<&'a str> {
    match item.get(attribute) {
        Some(AttributeValue::S(v)) => Some(v),
        _ => None,
    }
}

/// How a `serde_dynamo` failure is reported, for every item type (here and in `schema`).
pub(crate) fn encode_error(e: serde_dynamo::Error) -> StoreError {
    StoreError::Corrupt(format!("cannot encode item: {e}"))
}

pub(crate) fn decode_error(e: serde_dynamo::Error) -> StoreError {
    StoreError::Corrupt(format!("cannot decode item: {e}"))
}
