//! `GET /v1/payments/{operationId}`: the status of a payment the API accepted, read from what
//! is stored (its idempotency record, then its fact's claim by account-state), for its caller
//! only — two key reads, no scan, no index.

use std::collections::BTreeMap;

use integration_tests::Engine;
use integration_tests::servicing::{Servicing, sqs_message};
use payments_api::PaymentsApi;
use serde_json::{Value, json};
use servicing_domain::{Fingerprint, ServicingEvent, SourceRef};
use servicing_store::schema::ClaimRecord;

use crate::payments_api::{
    ALICE, BOB, api_outbox, body_json, get_payment, header, open_account, payment, post,
    problem_type,
};

on_both_engines!(
    when_a_payment_is_read_by_its_operation_id_should_answer_its_status_to_its_caller_only,
    when_its_fact_is_parked_rejected_stale_or_collided_should_say_so,
    when_no_fact_was_applied_within_the_retention_should_say_it_never_will_be,
);

/// The event of the payment ALICE sent under `key`, as its idempotency record carries it (its
/// `sourceEventId` is the operation id: the key hashed with the caller).
async fn event_of(servicing: &Servicing, key: &str) -> Value {
    let operation = payments_api::operation_id(
        &payments_api::Principal::new(ALICE).expect("principal"),
        &payments_api::IdempotencyKey::parse(Some(key.as_bytes())).expect("key"),
    );
    api_outbox(servicing)
        .await
        .into_iter()
        .map(|e| e.detail)
        .find(|d| d["sourceEventId"] == operation.as_str())
        .expect("the accepted payment's event")
}

/// Puts account-state's claim of `detail`'s fact with `verdict` (what the consumer would have
/// written), fingerprinted as `fingerprint_of` (the fact itself, or another payload).
async fn put_claim(servicing: &Servicing, detail: &Value, verdict: &str, fingerprint_of: &Value) {
    let event = ServicingEvent::from_value(detail).expect("a contract event");
    let other = ServicingEvent::from_value(fingerprint_of).expect("a contract event");
    let source = SourceRef {
        system: event.source.system.clone(),
        event_id: event.source.event_id.clone(),
    };
    let (pk, sk) = servicing_store::items::claim_key("account-state", &source);
    let now = servicing_store::epoch_seconds();
    let claim = ClaimRecord {
        pk,
        sk,
        item_type: ClaimRecord::ITEM_TYPE.into(),
        schema_version: servicing_store::schema::SCHEMA_VERSION,
        consumer: "account-state".into(),
        source_system: source.system,
        source_event_id: source.event_id,
        event_type: "PAYMENT_SETTLED".into(),
        account_id: event.account_id.as_str().into(),
        fingerprint: Fingerprint::of(&other).as_str().into(),
        verdict: verdict.into(),
        claimed_at: now,
        expires_at: Some(now + 3600),
        outbox: None,
        allocated_to: None,
        reversed_by: None,
        trace_header: None,
    };
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::schema::to_item(&claim).expect("item"),
        ))
        .send()
        .await
        .expect("put the claim");
}

async fn when_a_payment_is_read_by_its_operation_id_should_answer_its_status_to_its_caller_only(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_status").await;
    let api = PaymentsApi::new(servicing.store("payments-api"));
    let accepted = api
        .handle(post(
            Some(ALICE),
            Some("status-1"),
            &payment("acc_status", 2_500, "inv-s1"),
        ))
        .await;
    assert_eq!(accepted.status(), 202);
    let answer = body_json(&accepted);
    let operation = answer["operationId"].as_str().expect("operation id");
    let location = header(&accepted, "location").expect("Location");
    assert_eq!(location, format!("/v1/payments/{operation}"));

    // Accepted, not yet applied: what the 202 said, read back with two key reads.
    servicing.requests.reset();
    let read = api.handle(get_payment(Some(ALICE), operation)).await;
    assert_eq!(read.status(), 200, "{:?}", read.body());
    assert_eq!(
        servicing.requests.snapshot(),
        BTreeMap::from([("GetItem".to_owned(), 2)]),
        "the record, then its fact's claim: no scan, no query"
    );
    let status = body_json(&read);
    assert_eq!(status["status"], "accepted");
    assert_eq!(status["operationId"], operation);
    assert_eq!(status["sourceSystem"], answer["sourceSystem"]);
    assert_eq!(status["sourceEventId"], operation);
    assert_eq!(status["payment"], answer["payment"]);
    assert!(status["acceptedAt"].as_str().is_some(), "{status}");
    assert!(status.get("allocation").is_none(), "{status}");

    // Another caller cannot tell it from an id that was never issued: 404 both, never 403.
    let probed = api.handle(get_payment(Some(BOB), operation)).await;
    let never = api
        .handle(get_payment(Some(BOB), "op_ffffffffffffffffffffffff"))
        .await;
    for response in [&probed, &never] {
        assert_eq!(response.status(), 404);
        assert_eq!(problem_type(response), "unknown-payment");
    }
    // A path parameter that is no operation id is never echoed (a problem body ends up in
    // logs, consoles and support tickets).
    let hostile = "op_<img src=x onerror=alert(1)>";
    let refused = api.handle(get_payment(Some(BOB), hostile)).await;
    assert_eq!(refused.status(), 404);
    assert!(
        !body_json(&refused).to_string().contains("<img"),
        "{}",
        body_json(&refused)
    );
    // A role's other session is the same caller.
    let role = "arn:aws:sts::123456789012:assumed-role/payments-client";
    let by_role = api
        .handle(post(
            Some(&format!("{role}/task-1")),
            Some("status-role"),
            &payment("acc_status", 100, "inv-r"),
        ))
        .await;
    let role_operation = body_json(&by_role)["operationId"]
        .as_str()
        .expect("operation id")
        .to_owned();
    let other_session = api
        .handle(get_payment(
            Some(&format!("{role}/task-2")),
            &role_operation,
        ))
        .await;
    assert_eq!(other_session.status(), 200);

    // Applied by account-state: the allocation, from the same claim read.
    let detail = event_of(&servicing, "status-1").await;
    servicing
        .handler()
        .process(&[sqs_message("m-status-1", &detail.to_string(), 1)])
        .await;
    let applied = body_json(&api.handle(get_payment(Some(ALICE), operation)).await);
    assert_eq!(applied["status"], "applied", "{applied}");
    assert_eq!(
        applied["allocation"],
        json!({"fees": 0, "interest": 0, "principal": 2_500, "credit": 0})
    );
    assert!(applied["appliedOn"].as_str().is_some(), "{applied}");
    assert_eq!(applied["reversedBy"], Value::Null);
}

async fn when_its_fact_is_parked_rejected_stale_or_collided_should_say_so(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_fates").await;
    let api = PaymentsApi::new(servicing.store("payments-api"));
    let mut operations = BTreeMap::new();
    for key in [
        "fate-parked",
        "fate-rejected",
        "fate-stale",
        "fate-collision",
    ] {
        let response = api
            .handle(post(
                Some(ALICE),
                Some(key),
                &payment("acc_fates", 300, key),
            ))
            .await;
        assert_eq!(response.status(), 202);
        operations.insert(key, body_json(&response)["operationId"].clone());
    }
    for (key, verdict) in [
        ("fate-parked", "PARKED"),
        ("fate-rejected", "REJECTED"),
        ("fate-stale", "STALE"),
    ] {
        let detail = event_of(&servicing, key).await;
        put_claim(&servicing, &detail, verdict, &detail).await;
    }
    // Another payload under the payment's identity got there first (applied; through the queue
    // no longer possible — account-state quarantines an `api:` fact the API did not accept —
    // so a record from before that check): this payment is the collision, never applied.
    let detail = event_of(&servicing, "fate-collision").await;
    let mut impostor = detail.clone();
    impostor["amountMinor"] = json!(301);
    put_claim(&servicing, &detail, "APPLIED", &impostor).await;
    let results = servicing
        .handler()
        .process(&[sqs_message("m-collision", &detail.to_string(), 1)])
        .await
        .results;
    assert_eq!(
        results[0].1,
        account_state::MessageResult::Collision,
        "{results:?}"
    );

    for (key, status, reason) in [
        ("fate-parked", "parked", None),
        ("fate-rejected", "rejected", Some("rejected")),
        ("fate-stale", "rejected", Some("stale")),
        ("fate-collision", "rejected", Some("collision")),
    ] {
        let operation = operations[key].as_str().expect("operation id");
        let response = api.handle(get_payment(Some(ALICE), operation)).await;
        assert_eq!(response.status(), 200, "{key}");
        let read = body_json(&response);
        assert_eq!(read["status"], status, "{key}: {read}");
        assert_eq!(read["reason"].as_str(), reason, "{key}: {read}");
        assert!(read.get("allocation").is_none(), "{key}: {read}");
    }
}

async fn when_no_fact_was_applied_within_the_retention_should_say_it_never_will_be(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_lost").await;
    let short = servicing_store::StoreConfig {
        claim_retention: std::time::Duration::from_secs(1),
        ..servicing_store::StoreConfig::new(&servicing.table, "payments-api")
    };
    let api = PaymentsApi::new(servicing_store::ServicingStore::new(
        servicing.client.clone(),
        short,
    ));
    let response = api
        .handle(post(
            Some(ALICE),
            Some("lost-1"),
            &payment("acc_lost", 100, "inv-lost"),
        ))
        .await;
    let operation = body_json(&response)["operationId"]
        .as_str()
        .expect("operation id")
        .to_owned();
    assert_eq!(
        body_json(&api.handle(get_payment(Some(ALICE), &operation)).await)["status"],
        "accepted"
    );
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    // Past the retention with no fact applied: nothing will apply it any more (an applied
    // payment's claim is kept for good), so it is not "accepted" for ever.
    let read = body_json(&api.handle(get_payment(Some(ALICE), &operation)).await);
    assert_eq!(read["status"], "rejected", "{read}");
    assert_eq!(read["reason"], "not-applied-within-retention", "{read}");
}
