//! Key layout and explicit item mapping of the single servicing table (see `infra/schema.md`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use servicing_domain::{
    AccountId, AllocationWrite, Applied, DomainEvent, ParkedFact, ParkedFacts, SourceRef,
    StoredAllocation,
};

use crate::schema::{ClaimRecord, OutboxEvent};

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
/// Every record's layout version (`schema::SCHEMA_VERSION`).
pub const SCHEMA_VERSION: &str = "schemaVersion";
/// A record's events (`ClaimRecord::outbox`, `IdempotencyRecord::outbox`): a payment's carry
/// its allocation; and the trace of the write that put them there.
pub const OUTBOX: &str = "outbox";
pub const TRACE_HEADER: &str = "traceHeader";
/// A fact's identity on its record (`ClaimRecord::source_system`, `source_event_id`).
pub const SOURCE_SYSTEM: &str = "sourceSystem";
pub const SOURCE_EVENT_ID: &str = "sourceEventId";
/// A fact record's type (`ClaimRecord::event_type`), and the type whose applied records hold an
/// allocation.
pub const EVENT_TYPE: &str = "eventType";
pub const PAYMENT_SETTLED: &str = "PAYMENT_SETTLED";
/// The sparse index listing the payments an account's ledger does not (no money; earlier
/// releases), and its key (`ClaimRecord::allocated_to`).
pub const ALLOCATIONS_INDEX: &str = "AllocationsIndex";
pub const ALLOCATED_TO: &str = "allocatedTo";
/// The filter that keeps only what is not past its `expiresAt` (epoch s; bind `:now`). TTL
/// deletes an item past it lazily — days late on AWS, never on DynamoDB Local — so until then
/// the item is still read. Every read that counts or lists records adds it, so what a report
/// says does not depend on when TTL ran; a record is alive through its `expiresAt` second (the
/// claim's own check is `expiresAt < :now`).
pub const UNEXPIRED: &str = "(attribute_not_exists(expiresAt) OR expiresAt >= :now)";

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

/// `(pk, sk)` of a parked fact's body kept apart: in its loan's partition, so the account's
/// bodies are one `Query` (`sk` begins with `PARKED#`).
pub fn parked_body_key(account: &AccountId, source: &SourceRef) -> (String, String) {
    let (pk, _) = loan_key(account);
    (
        pk,
        format!("{PARKED_BODY_PREFIX}{}#{}", source.system, source.event_id),
    )
}

pub const PARKED_BODY_PREFIX: &str = "PARKED#";
/// The raw body on a parked body item.
pub const BODY: &str = "body";

/// A parked fact's body kept apart from its loan item.
pub fn parked_body_item(account: &AccountId, fact: &ParkedFact) -> Item {
    let mut item = with_key(
        HashMap::from([
            (ACCOUNT_ID.to_owned(), s(account.as_str())),
            (BODY.to_owned(), s(fact.body.as_str())),
        ]),
        parked_body_key(account, &fact.source),
        "PARKED_BODY",
    );
    item.insert(SCHEMA_VERSION.to_owned(), n(crate::schema::SCHEMA_VERSION));
    item
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

/// The contract's id of the collections notification a `DelinquencyChanged` calls for: stable for
/// the change, so every replay uses the same one (and a report finds it by key).
pub fn collections_action_id(account_id: &str, to_bucket: &str, event_id: &str) -> String {
    format!("collections_notification:{account_id}:{to_bucket}:{event_id}")
}

pub fn action_key(action_id: &str) -> (String, String) {
    (format!("ACTION#{action_id}"), "ACTION".to_owned())
}

pub fn action_item(intent: &crate::ActionIntent, now: i64) -> Result<Item, StoreError> {
    let (pk, sk) = action_key(&intent.action_id);
    let mut item = crate::schema::to_item(&crate::schema::ActionItem {
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
        receiver_said: None,
        receiver_asked_at: None,
    })?;
    // In the open index until it settles (`SENT`, `REJECTED`, `SUPERSEDED` remove it).
    item.extend(crate::open::OpenKind::Action.attributes(&intent.action_id, now));
    Ok(item)
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

/// A message's quarantine mark: written with its quarantine record, in one transaction, only
/// where none is yet, so a message that comes back after its record was written (its answer
/// lost) keeps its first record. In the consumer's quarantine prefix, apart from its days.
pub fn quarantined_message_key(consumer: &str, message_id: &str) -> (String, String) {
    (
        format!("QUARANTINE#{consumer}#message#{message_id}"),
        "MESSAGE".to_owned(),
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
    item.insert(SCHEMA_VERSION.to_owned(), n(crate::schema::SCHEMA_VERSION));
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
        // Bodies kept apart are in their own items (`parked_body_item`), not here.
        let mut parked = loan.parked.clone();
        for fact in parked.iter_mut().filter(|f| f.body_apart) {
            fact.body.clear();
        }
        let parked = serde_dynamo::to_attribute_value(&parked).map_err(encode_error)?;
        item.insert(PARKED_FACTS.to_owned(), parked);
        // In the open index while it holds parked facts: the daily expiry reads these loans only.
        let oldest = loan
            .parked
            .iter()
            .map(|f| f.parked_at)
            .min()
            .unwrap_or_default();
        item.extend(crate::open::OpenKind::Parked.attributes(loan.account_id.as_str(), oldest));
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

/// A reversal's mark on its payment's record, as stored in `reversedBy`.
pub fn reversal_mark_value(
    mark: &crate::schema::ReversalMark,
) -> Result<AttributeValue, StoreError> {
    serde_dynamo::to_attribute_value(mark).map_err(encode_error)
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

/// A fact's record: its claim and, when `applied`, the events to publish and a payment's
/// allocation (`None` expiry: remembered for good — an applied payment).
pub fn claim_item(
    consumer: &str,
    unit: &crate::UnitOfWork<'_>,
    verdict: Verdict,
    now: i64,
    expires_at: Option<i64>,
    applied: Option<&Applied>,
) -> Result<Item, StoreError> {
    let (pk, sk) = claim_key(consumer, unit.source);
    let events: Vec<OutboxEvent> = applied
        .map(|a| a.outbox.iter().map(|e| outbox_event(consumer, e)).collect())
        .unwrap_or_default();
    // A payment is listed through its account's ledger, not by an index write of its own
    // (`ServicingStore::allocations`) — except one that moves no money, which the ledger posts
    // nothing for: the sparse `AllocationsIndex` lists it (rare: 1 WCU each).
    let allocated_to = applied.and_then(|a| match &a.allocation {
        Some(AllocationWrite::Record(stored)) if stored.amount_minor == 0 => {
            Some(stored.account_id.as_str().to_owned())
        }
        _ => None,
    });
    let outbox = OutboxEvent::encode(&events)?;
    crate::schema::to_item(&ClaimRecord {
        pk,
        sk,
        item_type: ClaimRecord::ITEM_TYPE.into(),
        schema_version: crate::schema::SCHEMA_VERSION,
        consumer: consumer.into(),
        source_system: unit.source.system.clone(),
        source_event_id: unit.source.event_id.clone(),
        event_type: unit.event_type.into(),
        account_id: unit.account_id.as_str().into(),
        fingerprint: unit.fingerprint.as_str().into(),
        verdict: verdict.as_str().into(),
        claimed_at: now,
        expires_at,
        trace_header: outbox.as_ref().and_then(|_| current_trace_header()),
        outbox,
        allocated_to,
        reversed_by: None,
    })
}

/// The allocation a fact record carries (`None` on any other record), from its raw item or its
/// `AllocationsIndex` entry (which projects `outbox` and `reversedBy`).
pub fn allocation_from_claim(claim: &Item) -> Result<Option<StoredAllocation>, StoreError> {
    let reversed_by: Option<crate::schema::ReversalMark> = claim
        .get(REVERSED_BY)
        .map(|value| serde_dynamo::from_attribute_value(value.clone()).map_err(decode_error))
        .transpose()?;
    crate::schema::allocation_of(string(claim, OUTBOX), reversed_by.as_ref())
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

/// A domain event as the relay publishes it.
pub fn outbox_event(consumer: &str, event: &DomainEvent) -> OutboxEvent {
    OutboxEvent {
        source: event_source(consumer),
        detail_type: event.detail_type.clone(),
        detail: event.detail(),
    }
}

/// The X-Ray trace header of the invocation writing the item (its context's, see
/// `servicing_telemetry::with_trace`), so the relay can carry the trace through `PutEvents`
/// and the servicing queue.
pub(crate) fn current_trace_header() -> Option<String> {
    servicing_telemetry::current_trace_id()
}

/// Idempotency records of the API are scoped to the caller: the principal is part of the key.
pub fn idempotency_key(principal_scope: &str, key: &str) -> (String, String) {
    (
        format!("IDEMPOTENCY#{principal_scope}#{key}"),
        "IDEMPOTENCY".to_owned(),
    )
}

/// The `sourceSystem` prefix reserved for the payments API: its payments are `api:<principal>`
/// (or `api:<scope>` when the principal does not fit the contract's charset or length), and
/// account-state applies a fact under it only as a payment the API accepted.
pub const API_SOURCE_PREFIX: &str = "api:";

/// A caller's key-safe, fixed-length scope (a principal may contain `#`): the first 32 hex
/// digits of sha256(principal).
pub fn principal_scope(principal: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(principal.as_bytes()))[..32].to_owned()
}

/// The keys under which the API may have recorded the payment `source` names (none when it is
/// not under `api:`): `api:<name>` is the principal `name`'s, or — when `name` is 32 lowercase
/// hex digits — may be the scope itself. Both are asked; the record's event tells which.
pub fn accepted_command_keys(source: &SourceRef) -> Vec<(String, String)> {
    let Some(name) = source.system.strip_prefix(API_SOURCE_PREFIX) else {
        return Vec::new();
    };
    let mut keys = vec![idempotency_key(&principal_scope(name), &source.event_id)];
    let is_scope = name.len() == 32
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if is_scope {
        keys.push(idempotency_key(name, &source.event_id));
    }
    keys
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
