//! DynamoDB stream records read from a real engine, turned into the Lambda event shape
//! (`aws_lambda_events` DynamoDB `EventRecord`), so the relay is fed what Lambda would feed it.

use std::time::Duration;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use serde_json::{Map, Value, json};

/// DynamoDB JSON (`{"S": "..."}` …) of a stream attribute value.
fn dynamodb_json(value: &AttributeValue) -> Value {
    match value {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        AttributeValue::L(items) => {
            json!({"L": items.iter().map(dynamodb_json).collect::<Vec<_>>()})
        }
        AttributeValue::M(map) => json!({"M": image(map)}),
        other => panic!("attribute type not used by the servicing table: {other:?}"),
    }
}

fn image(map: &std::collections::HashMap<String, AttributeValue>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), dynamodb_json(v)))
            .collect::<Map<_, _>>(),
    )
}

/// Every record of the table's stream so far (all shards, from the start), in Lambda's shape.
pub async fn read_all(
    streams: &aws_sdk_dynamodbstreams::Client,
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<EventRecord> {
    let described = dynamodb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .expect("describe");
    let stream_arn = described
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("stream")
        .to_owned();
    let description = streams
        .describe_stream()
        .stream_arn(&stream_arn)
        .send()
        .await
        .expect("describe stream");
    let mut records = Vec::new();
    for shard in description
        .stream_description()
        .map(|d| d.shards().to_vec())
        .unwrap_or_default()
    {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&stream_arn)
            .shard_id(shard.shard_id().unwrap_or_default())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("iterator")
            .shard_iterator;
        let mut empty_pages = 0;
        while let Some(it) = iterator.take() {
            let page = streams
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .expect("records");
            if page.records().is_empty() {
                empty_pages += 1;
                if empty_pages > 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for r in page.records() {
                let data = r.dynamodb().expect("stream data");
                let event = json!({
                    "eventID": r.event_id().unwrap_or_default(),
                    "eventName": r.event_name().map(|e| e.as_str()).unwrap_or_default(),
                    "eventSource": "aws:dynamodb",
                    "eventVersion": "1.1",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": stream_arn,
                    "dynamodb": {
                        "ApproximateCreationDateTime": data.approximate_creation_date_time().map(|t| t.secs()).unwrap_or_default(),
                        "Keys": data.keys().map(image).unwrap_or(json!({})),
                        "NewImage": data.new_image().map(image).unwrap_or(json!({})),
                        "SequenceNumber": data.sequence_number().unwrap_or_default(),
                        "SizeBytes": data.size_bytes().unwrap_or_default(),
                        "StreamViewType": "NEW_IMAGE",
                    },
                });
                records.push(serde_json::from_value(event).expect("lambda stream record"));
            }
            iterator = page.next_shard_iterator().map(str::to_owned);
        }
    }
    records
}
