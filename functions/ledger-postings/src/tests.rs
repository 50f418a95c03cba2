use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use serde_json::json;

use super::*;

/// A handler whose store points nowhere: only paths that never reach DynamoDB may run.
fn offline() -> LedgerPostingsHandler {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("k", "s", None, None, "test"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    LedgerPostingsHandler::new(ServicingStore::new(
        client,
        servicing_store::StoreConfig::new("t", CONSUMER),
    ))
}

#[tokio::test]
async fn when_an_event_moves_no_money_should_ignore_it_without_a_record() {
    let handler = offline();
    for detail_type in ["CreditLimitChanged", "DelinquencyChanged"] {
        let body = json!({"source": "servicing.account-state", "detail-type": detail_type,
            "detail": {"eventId": "evt_1", "eventType": detail_type, "accountId": "acc_1"}});
        let (result, record) = handler.process_one("m-1", &body.to_string(), Some(1)).await;
        assert_eq!((result, record), (MessageResult::Ignored, None));
    }
    // A fee of zero moves nothing either.
    let body = json!({"detail-type": "FeeAssessed", "detail": {"eventId": "evt_2",
        "eventType": "FeeAssessed", "accountId": "acc_1", "amountMinor": 0, "currency": "EUR",
        "occurredAt": "2026-09-01T00:00:00Z", "trigger": {"sourceSystem": "core", "sourceEventId": "f1"}}});
    let (result, _) = handler.process_one("m-2", &body.to_string(), None).await;
    assert_eq!(result, MessageResult::Ignored);
}

#[test]
fn when_a_delivery_is_settled_should_record_its_verdict_and_how() {
    let record = || DecisionRecord::new(CONSUMER, "m-1", Verdict::Retried, DecidedBy::Decode);
    let collision = settle(
        record(),
        &MessageResult::Quarantined {
            code: COLLISION,
            reason: "posted with another fingerprint".into(),
        },
    );
    assert_eq!(
        (
            collision.verdict,
            collision.decided_by,
            collision.code.as_deref()
        ),
        (Verdict::Collision, DecidedBy::RefusedClaim, Some(COLLISION))
    );
    let posted = settle(
        record(),
        &MessageResult::Posted {
            posting_date: "2026-09-01".parse().expect("date"),
        },
    );
    assert_eq!(
        (posted.verdict, posted.decided_by),
        (Verdict::Applied, DecidedBy::Claim)
    );
}
