//! A servicing table on a local engine, the account-state handler wired to it, and readers that
//! turn stored items back into the report shape of the contract's `*.expected.json`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use account_state::{AccountStateHandler, Config};
use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
};
use serde_json::{Value, json};
use servicing_domain::{AccountId, Ledger, LoanAccount, ServicingEvent, StoredAllocation};
use servicing_store::OutboxEvent;
use servicing_store::items::{ALLOCATED_TO, ALLOCATIONS_INDEX, OUTBOX, REVERSED_BY};
use servicing_store::schema::{self, ClaimRecord, IdempotencyRecord, QuarantineRecord};
use servicing_store::{ServicingStore, StoreConfig, arrears, open};

use crate::capacity::CapacityMeter;
use crate::faults::FaultPlan;

use crate::{Engine, unique_name};

/// Counts DynamoDB requests by operation (`x-amz-target`), retries included: what an event costs.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<Mutex<BTreeMap<String, u64>>>);

impl RequestCounter {
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn reset(&self) {
        if let Ok(mut m) = self.0.lock() {
            m.clear();
        }
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    pub fn get(&self, operation: &str) -> u64 {
        self.snapshot().get(operation).copied().unwrap_or_default()
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("unknown");
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        if let Ok(mut m) = self.0.lock() {
            *m.entry(operation).or_default() += 1;
        }
        Ok(())
    }
}

/// Creates a table with the servicing schema (pk/sk, the sparse arrears index, NEW_IMAGE
/// stream), as `template.yaml` does.
pub async fn create_servicing_table(client: &aws_sdk_dynamodb::Client) -> String {
    create_table(client, true).await
}

/// `stream: false` only for benchmarks: DynamoDB Local's stream emulation adds tens of
/// milliseconds to every write (measured: TransactWriteItems of 4 puts p50 1.6 ms without a
/// stream, 51 ms with one), which AWS's asynchronous streams do not.
pub async fn create_table(client: &aws_sdk_dynamodb::Client, stream: bool) -> String {
    let name = unique_name("servicing");
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("attribute")
    };
    let key = |n: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .expect("key")
    };
    // A sparse index of keys only, sharded (`hash`) and ordered (`range`).
    let keys_only = |index: &str, hash: &str, range: &str| {
        GlobalSecondaryIndex::builder()
            .index_name(index)
            .key_schema(key(hash, KeyType::Hash))
            .key_schema(key(range, KeyType::Range))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            )
            .build()
            .expect("index")
    };
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .attribute_definitions(attr(arrears::ARREARS_SHARD))
        .attribute_definitions(attr(arrears::ARREARS_SINCE))
        .attribute_definitions(attr(ALLOCATED_TO))
        .attribute_definitions(attr(open::OPEN_SHARD))
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(open::OPEN_SINCE)
                .attribute_type(ScalarAttributeType::N)
                .build()
                .expect("attribute"),
        )
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .global_secondary_indexes(keys_only(
            arrears::ARREARS_INDEX,
            arrears::ARREARS_SHARD,
            arrears::ARREARS_SINCE,
        ))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(ALLOCATIONS_INDEX)
                .key_schema(key(ALLOCATED_TO, KeyType::Hash))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::Include)
                        .non_key_attributes(OUTBOX)
                        .non_key_attributes(REVERSED_BY)
                        .build(),
                )
                .build()
                .expect("index"),
        )
        .global_secondary_indexes(keys_only(
            open::OPEN_INDEX,
            open::OPEN_SHARD,
            open::OPEN_SINCE,
        ))
        .set_stream_specification(stream.then(|| {
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .expect("stream")
        }))
        .send()
        .await
        .expect("create table");
    name
}

/// A servicing table and everything needed to drive the account-state handler against it.
#[derive(Debug, Clone)]
pub struct Servicing {
    pub engine: Engine,
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub requests: RequestCounter,
    /// Capacity units by AWS's rules of every request the client sends (`crate::capacity`).
    pub capacity: CapacityMeter,
}

impl Servicing {
    pub async fn new(engine: Engine) -> Self {
        Self::with_stream(engine, true).await
    }

    /// See [`create_table`]: benchmarks only.
    pub async fn with_stream(engine: Engine, stream: bool) -> Self {
        let requests = RequestCounter::default();
        let capacity = CapacityMeter::default();
        let sdk = engine.sdk_config().await;
        let config = aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(requests.clone())
            .interceptor(capacity.clone())
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let table = create_table(&client, stream).await;
        requests.reset();
        capacity.reset();
        Self {
            engine,
            client,
            table,
            requests,
            capacity,
        }
    }

    pub fn config(&self) -> Config {
        Config::for_table(&self.table)
    }

    /// A handler as one Lambda instance would have it (its own state cache).
    pub fn handler(&self) -> AccountStateHandler {
        self.handler_with(self.config())
    }

    pub fn handler_with(&self, config: Config) -> AccountStateHandler {
        let store = ServicingStore::new(self.client.clone(), config.store_config("account-state"));
        AccountStateHandler::new(store, config, content_keyer())
    }

    /// A handler whose commits meet `faults` (see [`crate::faults`]).
    pub fn faulty_handler(&self, config: Config, faults: &FaultPlan) -> AccountStateHandler {
        let store = ServicingStore::new(
            faults.client(&self.client),
            config.store_config("account-state"),
        );
        AccountStateHandler::new(store, config, content_keyer())
    }

    /// Delivers a sample stream (`fixtures/samples/<name>`) as one batch to a fresh handler.
    pub async fn deliver_fixture(&self, name: &str) {
        let messages: Vec<_> = fixture(name)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| sqs_message(&format!("{name}-{i}"), l, 1))
            .collect();
        self.handler().process(&messages).await;
    }

    pub async fn loan(&self, account: &str) -> Option<(LoanAccount, u64)> {
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(format!("LOAN#{account}")))
            .key("sk", AttributeValue::S("STATE".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("get loan");
        // An item without the account's fields only holds facts parked before its opening.
        got.item
            .filter(|item| item.contains_key("currency"))
            .map(|item| {
                let version = match item.get("version") {
                    Some(AttributeValue::N(v)) => v.parse().expect("version"),
                    other => panic!("version missing: {other:?}"),
                };
                (serde_dynamo::from_item(item).expect("loan item"), version)
            })
    }

    /// The store as `consumer` sees this table (default claim retention).
    pub fn store(&self, consumer: &str) -> ServicingStore {
        ServicingStore::new(self.client.clone(), StoreConfig::new(&self.table, consumer))
    }

    /// Lists every record the table's stream carried so far in the record log, as the relay
    /// does before it publishes (`servicing_store::record_log`): what a window's reconciliation
    /// reads. Again and again as a test goes on: the log is a set.
    pub async fn keep_record_log(&self) {
        let log = self.stream_record_log().await;
        self.store("outbox-relay")
            .write_record_log(&log, "test-stream")
            .await
            .expect("the record log");
    }

    /// What the relay would list of the table's whole stream so far (`RecordLog::add_change`).
    pub async fn stream_record_log(&self) -> servicing_store::record_log::RecordLog {
        let config = self.engine.sdk_config().await;
        let records = crate::streams::read_all(
            &aws_sdk_dynamodbstreams::Client::new(&config),
            &self.client,
            &self.table,
        )
        .await;
        let mut log = servicing_store::record_log::RecordLog::default();
        for record in &records {
            log.add_change(
                &record.event_name,
                &record.change.keys,
                &record.change.new_image,
                record.change.approximate_creation_date_time.timestamp(),
            );
        }
        log
    }

    /// `consumer`'s store whose commits meet `faults`.
    pub fn faulty_store(&self, consumer: &str, faults: &FaultPlan) -> ServicingStore {
        ServicingStore::new(
            faults.client(&self.client),
            StoreConfig::new(&self.table, consumer),
        )
    }

    /// The account's allocations as servicing stored them (its payments' records).
    pub async fn allocations(&self, account: &str) -> Vec<StoredAllocation> {
        let id = AccountId::parse(account).expect("account id");
        servicing_ops::report::allocations(&self.store("test-reader"), &id)
            .await
            .expect("allocations")
    }

    /// Every item of the table, whatever its type (a test table is small).
    pub async fn all_items(&self) -> Vec<std::collections::HashMap<String, AttributeValue>> {
        self.client
            .scan()
            .table_name(&self.table)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .expect("scan")
    }

    /// Every item of one type, past its expiry or not (a scan: fine for a test table).
    pub async fn items_of_type(
        &self,
        item_type: &str,
    ) -> Vec<std::collections::HashMap<String, AttributeValue>> {
        // The table as it is, expired items included: the operators' reads (`scan_types`)
        // leave out what is past its expiry, and tests check that too.
        self.client
            .scan()
            .table_name(&self.table)
            .filter_expression("itemType = :type")
            .expression_attribute_values(":type", AttributeValue::S(item_type.to_owned()))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .expect("scan")
    }

    /// Outbox details (parsed) for one account, in business-time order.
    pub async fn outbox(&self, account: &str) -> Vec<Value> {
        let mut details: Vec<Value> = self
            .outbox_records()
            .await
            .into_iter()
            .filter(|event| event.detail["accountId"] == account)
            .map(|event| event.detail)
            .collect();
        details.sort_by(|a, b| {
            (a["occurredAt"].as_str(), a["eventType"].as_str())
                .cmp(&(b["occurredAt"].as_str(), b["eventType"].as_str()))
        });
        details
    }

    /// The stored state of `account` in the shape of the contract's `*.expected.json`
    /// (without `counts`, which belong to the deliveries, not to the state).
    pub async fn account_report(&self, account: &str) -> Value {
        let id = AccountId::parse(account).expect("account id");
        servicing_ops::report::account_report(&self.store("test-reader"), &id)
            .await
            .expect("report")
            .expect("account exists")
    }

    /// Deletes the table: benchmarks drop theirs so every run finds the engine in the same state
    /// (DynamoDB Local slows down as tables accumulate).
    pub async fn drop_table(&self) {
        self.client
            .delete_table()
            .table_name(&self.table)
            .send()
            .await
            .expect("delete the table");
    }

    /// Every item of a record type, decoded through the store's schema.
    pub async fn records<T: serde::de::DeserializeOwned>(&self, item_type: &str) -> Vec<T> {
        self.items_of_type(item_type)
            .await
            .into_iter()
            .map(|item| schema::from_item(item).expect("a record of its schema"))
            .collect()
    }

    pub async fn quarantine(&self) -> Vec<QuarantineRecord> {
        self.records(QuarantineRecord::ITEM_TYPE).await
    }

    pub async fn claims(&self) -> Vec<ClaimRecord> {
        self.records(ClaimRecord::ITEM_TYPE).await
    }

    /// Every event the table's records carry for the relay: the facts' and the API's.
    pub async fn outbox_records(&self) -> Vec<OutboxEvent> {
        let mut events = Vec::new();
        for claim in self.claims().await {
            events.extend(claim.events().expect("outbox events"));
        }
        let commands: Vec<IdempotencyRecord> = self.records(IdempotencyRecord::ITEM_TYPE).await;
        for command in commands {
            events.extend(OutboxEvent::decode(command.outbox.as_deref()).expect("outbox events"));
        }
        events
    }
}

impl Servicing {
    /// After a batch: an account whose messages were all acknowledged (none in `retried`)
    /// holds no parked fact that is ready — nothing would bring the account back, the release
    /// would be lost.
    pub async fn assert_nothing_ready_once_acknowledged(
        &self,
        batch: &[SqsMessage],
        retried: &std::collections::HashSet<&str>,
    ) {
        let mut acknowledged: BTreeMap<AccountId, bool> = BTreeMap::new();
        for message in batch {
            let body = message.body.as_deref().unwrap_or_default();
            if let Ok(event) = ServicingEvent::decode(body.as_bytes()) {
                let id = message.message_id.as_deref().unwrap_or_default();
                let ok = acknowledged.entry(event.account_id).or_insert(true);
                *ok &= !retried.contains(id);
            }
        }
        let store = self.store("account-state");
        for (account, _) in acknowledged.into_iter().filter(|(_, ok)| *ok) {
            let loan = store.load(&account, &[]).await.expect("load").loan;
            let ready: Vec<String> = loan
                .iter()
                .flat_map(|l| l.parked.iter())
                .filter(|f| f.awaits.is_none())
                .map(|f| f.source.to_string())
                .collect();
            assert!(
                ready.is_empty(),
                "{account}: every message acknowledged, yet {ready:?} ready and not released"
            );
        }
    }

    /// The stored state of `accounts` equals the ledger's, account by account: balances,
    /// allocations and delinquency history, the outbox events, and nothing left parked on them
    /// (nor waiting, ready, for a release that never came).
    pub async fn assert_accounts_match(&self, ledger: &Ledger, accounts: &[String], context: &str) {
        let differences = self.account_differences(ledger, accounts).await;
        assert!(
            differences.is_empty(),
            "{context}:\n{}",
            differences.join("\n")
        );
    }

    /// How the stored state of `accounts` differs from the ledger's (empty: it does not), one
    /// line per difference: the report, the outbox, the parked facts.
    pub async fn account_differences(&self, ledger: &Ledger, accounts: &[String]) -> Vec<String> {
        let report = ledger.report();
        let expected: BTreeMap<&str, &Value> = report["accounts"]
            .as_array()
            .expect("accounts")
            .iter()
            .map(|a| (a["accountId"].as_str().unwrap_or_default(), a))
            .collect();
        let store = self.store("account-state");
        let mut differences = Vec::new();
        for account in accounts {
            let id = AccountId::parse(account).expect("account id");
            let stored = servicing_ops::report::account_report(&store, &id)
                .await
                .expect("report");
            let want = expected.get(account.as_str()).copied();
            if stored.as_ref() != want {
                differences.push(format!(
                    "account {account}\n  stored: {stored:?}\n  ledger: {want:?}"
                ));
            }
            let mut want: Vec<Value> = ledger
                .outbox()
                .iter()
                .filter(|e| e.account_id.as_str() == account)
                .map(|e| e.detail())
                .collect();
            let mut got = self.outbox(account).await;
            let by_id = |v: &Value| v["eventId"].as_str().unwrap_or_default().to_owned();
            want.sort_by_key(by_id);
            got.sort_by_key(by_id);
            if got != want {
                differences.push(format!(
                    "outbox of {account}\n  stored: {got:?}\n  ledger: {want:?}"
                ));
            }
            let mut want_parked: Vec<String> = ledger
                .parked()
                .filter(|(a, _)| a.as_str() == account)
                .map(|(_, f)| f.source.to_string())
                .collect();
            let mut parked: Vec<String> = store
                .load(&id, &[])
                .await
                .expect("load")
                .loan
                .map(|l| l.parked.iter().map(|f| f.source.to_string()).collect())
                .unwrap_or_default();
            want_parked.sort();
            parked.sort();
            if parked != want_parked {
                differences.push(format!(
                    "parked on {account}: stored {parked:?}, ledger {want_parked:?}"
                ));
            }
        }
        differences
    }

    /// Every distinct fact of `bodies` has exactly one claim, and the claims' verdicts add up
    /// to the ledger's counts (nothing left `PARKED`).
    pub async fn assert_claims_match(&self, ledger: &Ledger, bodies: &[String], context: &str) {
        let want = ledger.counts();
        let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for body in bodies {
            let event = ServicingEvent::decode(body.as_bytes()).expect("valid");
            if !seen.insert(event.source.clone()) {
                continue;
            }
            let claim =
                servicing_ops::account_state_claim(&self.client, &self.table, &event.source)
                    .await
                    .expect("claim read")
                    .unwrap_or_else(|| panic!("{context}: {} has no claim", event.source));
            *verdicts.entry(claim.verdict).or_default() += 1;
        }
        let verdict = |v: &str| verdicts.get(v).copied().unwrap_or_default();
        assert_eq!(
            (verdict("APPLIED"), verdict("STALE"), verdict("PARKED")),
            (want.applied, want.stale, 0),
            "{context}: claims {verdicts:?}"
        );
    }
}

/// An SQS record as Lambda delivers it.
/// Delivers `(message id, body)` pairs to `handler` as one batch; the verdicts in delivery
/// order (answers come per account, so they are matched back by message id).
pub async fn process(
    handler: &AccountStateHandler,
    bodies: &[(&str, Value)],
) -> Vec<account_state::MessageResult> {
    let messages: Vec<_> = bodies
        .iter()
        .map(|(id, b)| sqs_message(id, &b.to_string(), 1))
        .collect();
    let report = handler.process(&messages).await;
    bodies
        .iter()
        .map(|(id, _)| {
            report
                .results
                .iter()
                .find(|(m, _)| m == id)
                .map(|(_, r)| r.clone())
                .expect("an answer per message")
        })
        .collect()
}

/// Fees enough to push every earlier fact of `account` out of its loan's recent facts, so only
/// claims and allocations know them.
pub async fn push_out_of_recent_facts(handler: &AccountStateHandler, account: &str) {
    for chunk in (0..servicing_store::RECENT_FACTS_MAX)
        .collect::<Vec<_>>()
        .chunks(10)
    {
        let batch: Vec<(String, Value)> = chunk
            .iter()
            .map(|i| {
                let fee = crate::generate::fee(account, &format!("fee-{i}"), 4, 1);
                (format!("f{i}"), fee)
            })
            .collect();
        let refs: Vec<(&str, Value)> = batch
            .iter()
            .map(|(id, v)| (id.as_str(), v.clone()))
            .collect();
        process(handler, &refs).await;
    }
}

pub fn sqs_message(message_id: &str, body: &str, receive_count: u32) -> SqsMessage {
    serde_json::from_value(json!({
        "messageId": message_id,
        "receiptHandle": format!("rh-{message_id}"),
        "body": body,
        "attributes": {"ApproximateReceiveCount": receive_count.to_string()},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
    }))
    .expect("sqs message")
}

pub fn fixture(name: &str) -> String {
    let path = format!("{}/../fixtures/samples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// Asserts a report equals an expected fixture on every state field (not `counts`, not `note`).
pub fn assert_state_matches(report: &Value, expected: &Value, context: &str) {
    for (field, want) in expected.as_object().expect("object") {
        if field == "note" || field == "counts" {
            continue;
        }
        assert_eq!(&report[field], want, "{context}: field {field}");
    }
}

/// The secret of the tests' content keys (a deployment's is generated in Secrets Manager).
pub const CONTENT_KEY_SECRET: &str = "test-content-key-secret-0123456789abcdef";

/// The content keyer every test handler has (one secret, as one deployment has).
pub fn content_keyer() -> account_state::ContentKeyer {
    account_state::ContentKeyer::new(CONTENT_KEY_SECRET.as_bytes()).expect("a long enough secret")
}
