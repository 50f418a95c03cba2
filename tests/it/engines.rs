//! Proof that the local engines have the semantics the product relies on, driven through the
//! AWS SDK for Rust: claim puts in transactions, cancellation reasons with the old item, streams
//! (on both DynamoDB engines), SQS and EventBridge → SQS (on MiniStack).

use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, StreamSpecification, StreamViewType,
    TransactWriteItem,
};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use integration_tests::{Engine, unique_name};

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

async fn create_streamed_table(client: &aws_sdk_dynamodb::Client, name: &str) -> String {
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attr"),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("sk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attr"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("sk")
                .key_type(KeyType::Range)
                .build()
                .expect("key"),
        )
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .expect("stream spec"),
        )
        .send()
        .await
        .expect("create table");
    let described = client
        .describe_table()
        .table_name(name)
        .send()
        .await
        .expect("describe");
    described
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("table has a stream")
        .to_owned()
}

/// The claim put + a business item, all-or-nothing, the claim asking for ALL_OLD on failure.
fn claim_transaction(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    fingerprint: &str,
    version: &str,
) -> aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder {
    let claim = Put::builder()
        .table_name(table)
        .item("pk", s("CLAIM#account-state#psp#pmt_1"))
        .item("sk", s("CLAIM"))
        .item("fingerprint", s(fingerprint))
        .condition_expression("attribute_not_exists(pk)")
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .expect("claim put");
    let loan = Put::builder()
        .table_name(table)
        .item("pk", s("LOAN#acc_1"))
        .item("sk", s("STATE"))
        .item("version", AttributeValue::N(version.to_owned()))
        .build()
        .expect("loan put");
    client
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(claim).build())
        .transact_items(TransactWriteItem::builder().put(loan).build())
}

async fn claim_put_fails_on_the_second_try_with_the_old_item(engine: Engine) {
    let client = engine.dynamodb().await;
    let table = unique_name("engine-proof");
    let stream_arn = create_streamed_table(&client, &table).await;

    claim_transaction(&client, &table, "sha256:first", "1")
        .send()
        .await
        .expect("first commit");
    let err = claim_transaction(&client, &table, "sha256:second", "2")
        .send()
        .await
        .expect_err("second claim must be refused");
    let TransactWriteItemsError::TransactionCanceledException(cancelled) = err.into_service_error()
    else {
        panic!("expected TransactionCanceledException");
    };
    let reasons = cancelled.cancellation_reasons();
    assert_eq!(reasons.len(), 2, "one reason per item: {reasons:?}");
    assert_eq!(reasons[0].code(), Some("ConditionalCheckFailed"));
    let old = reasons[0].item().expect("ALL_OLD returns the stored claim");
    assert_eq!(old.get("fingerprint"), Some(&s("sha256:first")));
    assert_eq!(reasons[1].code(), Some("None"));

    // Nothing of the cancelled transaction was written.
    let loan = client
        .get_item()
        .table_name(&table)
        .key("pk", s("LOAN#acc_1"))
        .key("sk", s("STATE"))
        .consistent_read(true)
        .send()
        .await
        .expect("get");
    assert_eq!(
        loan.item().and_then(|i| i.get("version")),
        Some(&AttributeValue::N("1".into()))
    );

    // The stream holds exactly the two inserts of the committed transaction.
    let streams = aws_sdk_dynamodbstreams::Client::new(&engine.sdk_config().await);
    let records = read_stream(&streams, &stream_arn, 2).await;
    let keys: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            let data = r.dynamodb().expect("record data");
            let pk = match data.keys().and_then(|k| k.get("pk")) {
                Some(aws_sdk_dynamodbstreams::types::AttributeValue::S(v)) => v.clone(),
                other => panic!("unexpected key {other:?}"),
            };
            (
                r.event_name()
                    .map(|e| e.as_str().to_owned())
                    .unwrap_or_default(),
                pk,
            )
        })
        .collect();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    assert_eq!(
        keys_sorted,
        vec![
            (
                "INSERT".to_owned(),
                "CLAIM#account-state#psp#pmt_1".to_owned()
            ),
            ("INSERT".to_owned(), "LOAN#acc_1".to_owned()),
        ],
        "{engine:?} stream records"
    );
    client
        .delete_table()
        .table_name(&table)
        .send()
        .await
        .expect("delete table");
}

/// Reads every shard from the start until `want` records arrived (bounded wait).
async fn read_stream(
    streams: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    want: usize,
) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
    let mut records = Vec::new();
    for _ in 0..50 {
        records.clear();
        let description = streams
            .describe_stream()
            .stream_arn(stream_arn)
            .send()
            .await
            .expect("describe stream");
        let shards = description
            .stream_description()
            .map(|d| d.shards().to_vec())
            .unwrap_or_default();
        for shard in shards {
            let mut iterator = streams
                .get_shard_iterator()
                .stream_arn(stream_arn)
                .shard_id(shard.shard_id().unwrap_or_default())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("iterator")
                .shard_iterator
                .clone();
            // Follow the iterator until a page comes back empty.
            while let Some(it) = iterator.take() {
                let page = streams
                    .get_records()
                    .shard_iterator(it)
                    .send()
                    .await
                    .expect("records");
                if page.records().is_empty() {
                    break;
                }
                records.extend(page.records().iter().cloned());
                iterator = page.next_shard_iterator().map(str::to_owned);
            }
        }
        if records.len() >= want {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("stream gave {} records, wanted {want}", records.len());
}

#[tokio::test]
async fn when_a_claim_is_put_twice_on_dynamodb_local_should_cancel_with_the_old_item() {
    claim_put_fails_on_the_second_try_with_the_old_item(Engine::DynamoDbLocal).await;
}

#[tokio::test]
async fn when_a_claim_is_put_twice_on_ministack_should_cancel_with_the_old_item() {
    claim_put_fails_on_the_second_try_with_the_old_item(Engine::MiniStack).await;
}

#[tokio::test]
async fn when_a_message_is_sent_to_ministack_sqs_should_be_received_with_its_receive_count() {
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let queue = sqs
        .create_queue()
        .queue_name(unique_name("proof"))
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("queue url");
    sqs.send_message()
        .queue_url(&queue)
        .message_body(r#"{"hello":"sqs"}"#)
        .send()
        .await
        .expect("send");
    let received = sqs
        .receive_message()
        .queue_url(&queue)
        .wait_time_seconds(5)
        .message_system_attribute_names(
            aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
        )
        .send()
        .await
        .expect("receive");
    let message = &received.messages()[0];
    assert_eq!(message.body(), Some(r#"{"hello":"sqs"}"#));
    let count = message.attributes().and_then(|a| {
        a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
    });
    assert_eq!(count.map(String::as_str), Some("1"));
    sqs.delete_queue()
        .queue_url(&queue)
        .send()
        .await
        .expect("delete queue");
}

#[tokio::test]
async fn when_an_event_is_put_on_ministack_eventbridge_should_reach_the_ruled_queue() {
    let config = Engine::MiniStack.sdk_config().await;
    let events = aws_sdk_eventbridge::Client::new(&config);
    let routed = integration_tests::routing::RoutedBus::new(
        &config,
        serde_json::json!({"source": ["servicing.test"], "detail-type": ["DelinquencyChanged"]}),
    )
    .await;
    let bus = routed.bus.clone();

    let entry = |detail_type: &str| {
        aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&bus)
            .source("servicing.test")
            .detail_type(detail_type)
            .detail(r#"{"eventId":"evt_1","toBucket":"DPD_30_59"}"#)
            .build()
    };
    let put = events
        .put_events()
        .entries(entry("DelinquencyChanged"))
        .entries(entry("FeeAssessed")) // not matched by the rule
        .send()
        .await
        .expect("put events");
    assert_eq!(put.failed_entry_count(), 0);
    assert!(put.entries().iter().all(|e| e.event_id().is_some()));

    // Drained until the queue stays empty: an unexpected second delivery would show up here.
    let envelopes = routed.drain().await;
    assert_eq!(
        envelopes.len(),
        1,
        "only the matching event is routed: {envelopes:?}"
    );
    let envelope = &envelopes[0];
    assert_eq!(envelope["detail-type"], "DelinquencyChanged");
    assert_eq!(envelope["detail"]["eventId"], "evt_1");
}
