//! The payments API handler, fed real API Gateway HTTP API (payload 2.0) events, against real
//! DynamoDB engines. The scenarios also prove `docs/openapi.json`: every documented status of
//! every operation must be produced by one of them (API Gateway's own answers, marked
//! `x-produced-by: api-gateway`, excepted), every problem carries the request id as its
//! `instance`, and every problem type the crate can emit is enumerated there.

use std::collections::BTreeSet;
use std::sync::Mutex;

use futures_util::future::join_all;
use integration_tests::Engine;
use integration_tests::api_gateway::event;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::servicing::{Servicing, sqs_message};
use lambda_http::{Body, Response};
use payments_api::PaymentsApi;
use serde_json::{Value, json};
use servicing_domain::ServicingEvent;

on_both_engines!(
    when_every_documented_status_is_exercised_should_match_the_openapi_document,
    when_20_concurrent_posts_share_one_key_should_store_one_outbox_item,
    when_a_role_retries_from_another_session_should_replay_not_pay_twice,
    when_a_key_is_reused_after_its_retention_should_refuse_it_not_accept_a_lost_payment,
    when_a_key_is_sent_as_a_structured_header_string_should_be_the_same_key_as_the_bare_one,
    when_two_idempotency_keys_arrive_comma_joined_should_refuse_them_storing_nothing,
    when_a_payment_is_accepted_and_applied_should_keep_its_raw_key_nowhere,
    when_a_fact_under_the_api_prefix_was_not_accepted_by_the_api_should_quarantine_it,
    when_any_request_of_a_batch_with_api_facts_fails_should_end_as_without_the_fault,
);

pub(crate) const ALICE: &str = "arn:aws:iam::123456789012:user/alice";
pub(crate) const BOB: &str = "arn:aws:iam::123456789012:user/bob";

pub(crate) fn post(principal: Option<&str>, key: Option<&str>, body: &str) -> lambda_http::Request {
    event(
        "POST",
        "/v1/payments",
        "POST /v1/payments",
        principal,
        key,
        Some(body),
    )
}

fn get(path: &str, route: &str) -> lambda_http::Request {
    event("GET", path, route, Some(ALICE), None, None)
}

/// The status route's template and route key.
pub(crate) const PAYMENT: &str = "/v1/payments/{operationId}";
pub(crate) const PAYMENT_ROUTE: &str = "GET /v1/payments/{operationId}";

/// `GET /v1/payments/{operationId}` as API Gateway (payload 2.0, IAM authorizer) sends it: the
/// support's events only fill `{accountId}`, so this one sets its own path parameter.
pub(crate) fn get_payment(principal: Option<&str>, operation_id: &str) -> lambda_http::Request {
    let path = format!("/v1/payments/{operation_id}");
    let mut context = json!({
        "accountId": "123456789012", "apiId": "a1b2c3d4", "domainName": "a1b2c3d4.execute-api.us-east-1.amazonaws.com",
        "domainPrefix": "a1b2c3d4", "requestId": "req-1", "routeKey": PAYMENT_ROUTE, "stage": "$default",
        "time": "30/Nov/2026:10:00:00 +0000", "timeEpoch": 1_796_000_000_000_i64,
        "http": {"method": "GET", "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.10", "userAgent": "it"},
    });
    if let Some(arn) = principal {
        context["authorizer"] = json!({"iam": {"accessKey": "AKIAEXAMPLE", "accountId": "123456789012",
            "callerId": "AIDAEXAMPLE", "userArn": arn, "userId": "AIDAEXAMPLE"}});
    }
    let raw = json!({
        "version": "2.0", "routeKey": PAYMENT_ROUTE, "rawPath": path, "rawQueryString": "",
        "headers": {"user-agent": "it"}, "requestContext": context,
        "pathParameters": {"operationId": operation_id}, "isBase64Encoded": false,
    });
    lambda_http::request::from_str(&raw.to_string()).expect("API Gateway v2 event")
}

/// The problem type's name (the last segment of its `type` URI).
pub(crate) fn problem_type(response: &Response<Body>) -> String {
    body_json(response)["type"]
        .as_str()
        .and_then(|t| t.rsplit('/').next())
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn body_json(response: &Response<Body>) -> Value {
    match response.body() {
        Body::Text(text) => serde_json::from_str(text).expect("JSON body"),
        other => panic!("unexpected body {other:?}"),
    }
}

pub(crate) fn header<'a>(response: &'a Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

pub(crate) fn payment(account: &str, amount: i64, reference: &str) -> String {
    json!({"accountId": account, "amountMinor": amount, "currency": "EUR", "reference": reference})
        .to_string()
}

/// The events the API's records carry (one per accepted payment).
pub(crate) async fn api_outbox(servicing: &Servicing) -> Vec<servicing_store::OutboxEvent> {
    servicing
        .outbox_records()
        .await
        .into_iter()
        .filter(|record| record.source == payments_api::EVENT_SOURCE)
        .collect()
}

/// Alice's payment of `amount` on `account` under `key`, accepted (202): the detail of the event
/// its record carries, what the relay sends on to account-state.
pub(crate) async fn accepted_payment(
    servicing: &Servicing,
    key: &str,
    account: &str,
    amount: i64,
    reference: &str,
) -> Value {
    let (accepted, _) = api(servicing, None)
        .post(&post(
            Some(ALICE),
            Some(key),
            &payment(account, amount, reference),
        ))
        .await;
    assert_eq!(accepted.status(), 202);
    api_outbox(servicing)
        .await
        .into_iter()
        .find(|e| e.detail["reference"] == reference)
        .expect("the accepted payment's event")
        .detail
}

fn api(servicing: &Servicing, faults: Option<&FaultPlan>) -> PaymentsApi {
    PaymentsApi::new(match faults {
        Some(faults) => servicing.faulty_store("payments-api", faults),
        None => servicing.store("payments-api"),
    })
}

pub(crate) async fn open_account(servicing: &Servicing, account: &str) {
    let body = json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{account}"), "eventType": "LOAN_OPENED",
        "accountId": account, "eventTime": "2026-09-01T09:00:00Z", "principalMinor": 100_000, "currency": "EUR"});
    servicing
        .handler()
        .process(&[sqs_message("open", &body.to_string(), 1)])
        .await;
}

/// (path template, method, status) seen by the scenarios, and the problem types each answered.
#[derive(Default)]
struct Observed(
    Mutex<BTreeSet<(String, String, String)>>,
    Mutex<BTreeSet<(String, String, String, String)>>,
);

impl Observed {
    /// Notes the status; checks on the way what every answer of its kind must carry: a problem
    /// its `instance` (the API Gateway request id, as the decision record's `messageId`), a 202
    /// its `Location`.
    fn saw(&self, path: &str, method: &str, response: &Response<Body>) -> u16 {
        let status = response.status().as_u16();
        if header(response, "content-type") == Some("application/problem+json") {
            assert_eq!(
                body_json(response)["instance"],
                "urn:request:req-1",
                "{method} {path} {status}: the request id a client quotes to support"
            );
            self.1.lock().expect("lock").insert((
                path.into(),
                method.into(),
                status.to_string(),
                problem_type(response),
            ));
        }
        if status == 202 {
            let location = format!(
                "/v1/payments/{}",
                body_json(response)["operationId"]
                    .as_str()
                    .unwrap_or_default()
            );
            assert_eq!(
                header(response, "location"),
                Some(location.as_str()),
                "{method} {path}: every 202, first answer or replay"
            );
        }
        self.0
            .lock()
            .expect("lock")
            .insert((path.into(), method.into(), status.to_string()));
        status
    }
}

async fn when_every_documented_status_is_exercised_should_match_the_openapi_document(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_api").await;
    let faults = FaultPlan::default();
    let api = api(&servicing, Some(&faults));
    let seen = Observed::default();
    let pay = "/v1/payments";
    let loan = "/v1/loans/{accountId}";
    let allocations = "/v1/loans/{accountId}/allocations";

    // 202, then the replay (same key, same body, other JSON formatting): one round trip each,
    // the account's existence and currency checked inside the transaction, no read first.
    servicing.requests.reset();
    let first = api
        .handle(post(
            Some(ALICE),
            Some("order-1"),
            &payment("acc_api", 2_500, "inv-1"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &first), 202);
    let accepted = body_json(&first);
    assert_eq!(accepted["status"], "accepted");
    assert_eq!(header(&first, "idempotent-replayed"), None);
    let reformatted = serde_json::to_string_pretty(
        &serde_json::from_str::<Value>(&payment("acc_api", 2_500, "inv-1")).expect("json"),
    )
    .expect("json");
    let replay = api
        .handle(post(Some(ALICE), Some("order-1"), &reformatted))
        .await;
    assert_eq!(seen.saw(pay, "post", &replay), 202);
    assert_eq!(header(&replay, "idempotent-replayed"), Some("true"));
    assert_eq!(
        body_json(&replay),
        accepted,
        "the stored body, byte for byte the same answer"
    );
    assert_eq!(
        servicing.requests.snapshot(),
        std::collections::BTreeMap::from([("TransactWriteItems".to_owned(), 2)])
    );

    // The same key from another caller is another caller's key: its own payment.
    let bob = api
        .handle(post(
            Some(BOB),
            Some("order-1"),
            &payment("acc_api", 2_500, "inv-1"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &bob), 202);
    assert_eq!(header(&bob, "idempotent-replayed"), None);
    assert_ne!(body_json(&bob)["operationId"], accepted["operationId"]);

    // 422: key reused with another body; invalid fields; a currency other than the account's.
    let reused = api
        .handle(post(
            Some(ALICE),
            Some("order-1"),
            &payment("acc_api", 9_999, "inv-1"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &reused), 422);
    assert_eq!(
        header(&reused, "content-type"),
        Some("application/problem+json")
    );
    assert!(
        body_json(&reused)["type"]
            .as_str()
            .expect("type")
            .ends_with("/idempotency-key-reused")
    );
    let invalid = api
        .handle(post(
            Some(ALICE),
            Some("order-2"),
            r#"{"accountId":"acc api","amountMinor":-5,"currency":"euro","reference":""}"#,
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &invalid), 422);
    let fields: Vec<String> = body_json(&invalid)["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["field"].as_str().expect("field").to_owned())
        .collect();
    assert_eq!(
        fields,
        ["accountId", "amountMinor", "currency", "reference"]
    );
    // A payment dated beyond the skew: refused, nothing stored (it would age arrears for good).
    let future = api
        .handle(post(
            Some(ALICE),
            Some("order-future"),
            r#"{"accountId":"acc_api","amountMinor":100,"currency":"EUR","reference":"x","eventTime":"2099-01-01T00:00:00Z"}"#,
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &future), 422);
    assert_eq!(body_json(&future)["errors"][0]["field"], "eventTime");
    let usd = api
        .handle(post(
            Some(ALICE),
            Some("order-3"),
            &payment("acc_api", 100, "x").replace("EUR", "USD"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &usd), 422);
    assert!(
        body_json(&usd)["detail"]
            .as_str()
            .expect("detail")
            .contains("currency: must be the account's currency EUR")
    );

    // 400: the key missing, empty, too long, unprintable; the body not JSON.
    for key in [None, Some(""), Some(&*"k".repeat(256)), Some("with space")] {
        let response = api
            .handle(post(Some(ALICE), key, &payment("acc_api", 100, "x")))
            .await;
        assert_eq!(seen.saw(pay, "post", &response), 400, "key {key:?}");
    }
    // 400: a string that is not one; two keys (API Gateway joins duplicate headers).
    for (key, kind) in [
        (r#""order-4"#, "malformed-idempotency-key"),
        ("order-4,order-5", "multiple-idempotency-keys"),
    ] {
        let response = api
            .handle(post(Some(ALICE), Some(key), &payment("acc_api", 100, "x")))
            .await;
        assert_eq!(seen.saw(pay, "post", &response), 400, "key {key:?}");
        assert_eq!(problem_type(&response), kind);
    }
    let not_json = api
        .handle(post(Some(ALICE), Some("order-4"), "{amountMinor: 1"))
        .await;
    assert_eq!(seen.saw(pay, "post", &not_json), 400);
    let twice = api
        .handle(post(
            Some(ALICE),
            Some("order-twice"),
            r#"{"accountId":"acc_api","amountMinor":100,"amountMinor":100000,"currency":"EUR","reference":"x"}"#,
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &twice), 400);
    assert!(
        body_json(&twice)["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("appears twice")
    );

    // 401: no principal. 404: unknown account.
    let anonymous = api
        .handle(post(None, Some("order-5"), &payment("acc_api", 100, "x")))
        .await;
    assert_eq!(seen.saw(pay, "post", &anonymous), 401);
    let unknown = api
        .handle(post(
            Some(ALICE),
            Some("order-6"),
            &payment("acc_nobody", 100, "x"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &unknown), 404);

    // 503: the store throttled; 409: a twin request keeps the key in flight.
    faults.push(Fault::Throttle);
    let throttled = api
        .handle(post(
            Some(ALICE),
            Some("order-7"),
            &payment("acc_api", 100, "x"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &throttled), 503);
    assert_eq!(header(&throttled, "retry-after"), Some("1"));
    for _ in 0..4 {
        faults.push(Fault::TransactionConflict);
    }
    let in_flight = api
        .handle(post(
            Some(ALICE),
            Some("order-8"),
            &payment("acc_api", 100, "x"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &in_flight), 409);
    assert_eq!(header(&in_flight, "retry-after"), Some("1"));
    // 500: DynamoDB refused the request as such (nothing stored; the instance is what the
    // caller quotes).
    faults.push(Fault::Invalid);
    let refused = api
        .handle(post(
            Some(ALICE),
            Some("order-9"),
            &payment("acc_api", 100, "x"),
        ))
        .await;
    assert_eq!(seen.saw(pay, "post", &refused), 500);
    assert_eq!(problem_type(&refused), "internal");

    // 422: a key used beyond its retention (here 1 s) stays refused: a tombstone.
    let short = servicing_store::StoreConfig {
        claim_retention: std::time::Duration::from_secs(1),
        ..servicing_store::StoreConfig::new(&servicing.table, "payments-api")
    };
    let forgetful = PaymentsApi::new(servicing_store::ServicingStore::new(
        servicing.client.clone(),
        short,
    ));
    let old = payment("acc_api", 100, "old");
    let first = forgetful
        .handle(post(Some(BOB), Some("order-old"), &old))
        .await;
    assert_eq!(seen.saw(pay, "post", &first), 202);
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let expired = forgetful
        .handle(post(Some(BOB), Some("order-old"), &old))
        .await;
    assert_eq!(seen.saw(pay, "post", &expired), 422);
    assert_eq!(problem_type(&expired), "idempotency-key-expired");

    // Nothing was stored for any refused request: three accepted payments, three outbox items.
    assert_eq!(servicing.items_of_type("IDEMPOTENCY").await.len(), 3);
    let api_events: Vec<Value> = api_outbox(&servicing)
        .await
        .iter()
        .map(|event| event.detail.clone())
        .collect();
    assert_eq!(api_events.len(), 3);
    for detail in &api_events {
        // The outbox carries a canonical contract event the servicing queue accepts as is.
        let event = ServicingEvent::from_value(detail).expect("canonical PAYMENT_SETTLED");
        assert!(event.source.system.starts_with("api:"));
        // Its identity is the operation (the key hashed with the caller), never the raw key.
        assert!(
            event.source.event_id.starts_with("op_"),
            "{}",
            event.source.event_id
        );
    }

    // Reads.
    let found = api
        .handle(get("/v1/loans/acc_api", "GET /v1/loans/{accountId}"))
        .await;
    assert_eq!(seen.saw(loan, "get", &found), 200);
    let state = body_json(&found);
    assert_eq!(
        (
            state["principalOutstandingMinor"].as_i64(),
            state["version"].as_u64()
        ),
        (Some(100_000), Some(1))
    );
    let missing = api
        .handle(get("/v1/loans/acc_nobody", "GET /v1/loans/{accountId}"))
        .await;
    assert_eq!(seen.saw(loan, "get", &missing), 404);
    let malformed = api
        .handle(get("/v1/loans/acc%20x", "GET /v1/loans/{accountId}"))
        .await;
    assert_eq!(seen.saw(loan, "get", &malformed), 422);
    let listed = api
        .handle(get(
            "/v1/loans/acc_api/allocations",
            "GET /v1/loans/{accountId}/allocations",
        ))
        .await;
    assert_eq!(seen.saw(allocations, "get", &listed), 200);
    assert_eq!(
        body_json(&listed)["allocations"],
        json!([]),
        "the API's payments apply through the queue, later"
    );
    let none = api
        .handle(get(
            "/v1/loans/acc_nobody/allocations",
            "GET /v1/loans/{accountId}/allocations",
        ))
        .await;
    assert_eq!(seen.saw(allocations, "get", &none), 404);
    let malformed = api
        .handle(get(
            "/v1/loans/acc%20x/allocations",
            "GET /v1/loans/{accountId}/allocations",
        ))
        .await;
    assert_eq!(seen.saw(allocations, "get", &malformed), 422);
    // The reads' store failures (the next request, whatever it is): throttled (503, retry),
    // refused (500).
    for (fault, status) in [(Fault::Throttle, 503), (Fault::Invalid, 500)] {
        faults.at_request(0, fault);
        let response = api
            .handle(get("/v1/loans/acc_api", "GET /v1/loans/{accountId}"))
            .await;
        assert_eq!(seen.saw(loan, "get", &response), status);
        faults.at_request(0, fault);
        let response = api
            .handle(get(
                "/v1/loans/acc_api/allocations",
                "GET /v1/loans/{accountId}/allocations",
            ))
            .await;
        assert_eq!(seen.saw(allocations, "get", &response), status);
    }

    // The payment's status, at the Location of its 202: for its caller only.
    let operation = accepted["operationId"].as_str().expect("operation id");
    let status = api.handle(get_payment(Some(ALICE), operation)).await;
    assert_eq!(seen.saw(PAYMENT, "get", &status), 200);
    assert_eq!(body_json(&status)["status"], "accepted");
    assert_eq!(body_json(&status)["operationId"], operation);
    for (caller, id) in [
        (BOB, operation),
        (ALICE, "op_000000000000000000000000"),
        (ALICE, "not-an-operation"),
    ] {
        let response = api.handle(get_payment(Some(caller), id)).await;
        assert_eq!(seen.saw(PAYMENT, "get", &response), 404, "{caller} {id}");
        assert_eq!(problem_type(&response), "unknown-payment");
    }
    let anonymous = api.handle(get_payment(None, operation)).await;
    assert_eq!(seen.saw(PAYMENT, "get", &anonymous), 401);
    for (fault, status) in [(Fault::Throttle, 503), (Fault::Invalid, 500)] {
        faults.at_request(0, fault);
        let response = api.handle(get_payment(Some(ALICE), operation)).await;
        assert_eq!(seen.saw(PAYMENT, "get", &response), status);
    }

    // The document and the behaviour agree.
    let doc = openapi();
    let mut documented = BTreeSet::new();
    let mut documented_types = BTreeSet::new();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            let responses = operation["responses"].as_object().expect("responses");
            // API Gateway answers these itself, before or instead of the function: documented
            // on every route, produced by no handler test.
            for status in ["403", "413", "429", "504"] {
                let response = responses.get(status).map(|r| resolve(&doc, r));
                assert_eq!(
                    response.map(|r| &r["x-produced-by"]),
                    Some(&json!("api-gateway")),
                    "{method} {path} documents API Gateway's {status}"
                );
            }
            for (status, response) in responses {
                let response = resolve(&doc, response);
                if response["x-produced-by"] == "api-gateway" {
                    continue;
                }
                documented.insert((path.clone(), method.clone(), status.clone()));
                for kind in response["x-problem-types"].as_array().into_iter().flatten() {
                    let kind = kind.as_str().expect("a problem type").to_owned();
                    documented_types.insert((path.clone(), method.clone(), status.clone(), kind));
                }
            }
        }
    }
    let answered = seen.1.lock().expect("lock").clone();
    let unlisted: Vec<_> = answered.difference(&documented_types).collect();
    let unanswered: Vec<_> = documented_types.difference(&answered).collect();
    assert!(
        unlisted.is_empty(),
        "problem types answered but not listed on their response (x-problem-types): {unlisted:?}"
    );
    assert!(
        unanswered.is_empty(),
        "problem types listed on a response no test produced there: {unanswered:?}"
    );
    let observed = seen.0.lock().expect("lock").clone();
    let undocumented: Vec<_> = observed.difference(&documented).collect();
    let untested: Vec<_> = documented.difference(&observed).collect();
    assert!(
        undocumented.is_empty(),
        "statuses produced but not documented: {undocumented:?}"
    );
    assert!(
        untested.is_empty(),
        "documented statuses no test produced: {untested:?}"
    );
}

fn openapi() -> Value {
    serde_json::from_str(include_str!("../../docs/openapi.json")).expect("openapi.json")
}

/// `value`, or what its local `$ref` (`#/components/...`) names.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => doc.pointer(pointer).expect("a $ref to this document"),
        None => value,
    }
}

/// Every problem type the crate can emit (one enum: a problem cannot be built without one) is
/// enumerated in the document with its status, meaning and retryability, and nothing else is.
#[test]
fn when_the_crate_can_emit_a_problem_type_should_enumerate_it_in_the_openapi_document() {
    use payments_api::ProblemType;
    let doc = openapi();
    let listed = doc["components"]["schemas"]["ProblemType"]["oneOf"]
        .as_array()
        .expect("ProblemType.oneOf");
    for kind in ProblemType::ALL {
        let entry = listed
            .iter()
            .find(|e| e["const"] == kind.uri())
            .unwrap_or_else(|| panic!("{} is not enumerated", kind.uri()));
        assert_eq!(entry["x-status"], kind.status(), "{}", kind.slug());
        assert_eq!(
            entry["x-retryable-with-same-key"],
            kind.retryable_with_same_key(),
            "{}",
            kind.slug()
        );
        assert_eq!(entry["title"], kind.title(), "{}", kind.slug());
        let meaning = entry["description"].as_str().unwrap_or_default();
        assert!(
            meaning.starts_with(&format!("{}. ", kind.status())) && meaning.len() > 40,
            "{}: {meaning}",
            kind.slug()
        );
    }
    assert_eq!(
        listed.len(),
        ProblemType::ALL.len(),
        "a documented type the crate never emits"
    );
    // Each response lists only types of its own status.
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                for slug in resolve(&doc, response)["x-problem-types"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let kind = ProblemType::ALL
                        .into_iter()
                        .find(|k| k.slug() == slug)
                        .unwrap_or_else(|| panic!("{method} {path} {status}: unknown {slug}"));
                    assert_eq!(kind.status().to_string(), *status, "{method} {path}");
                }
            }
        }
    }
    // The key's retention and tombstone, the status route and its Location are documented.
    let key = &doc["paths"]["/v1/payments"]["post"]["parameters"][0]["description"];
    for needle in [
        "IDEMPOTENCY_RETENTION_DAYS",
        "idempotency-key-expired",
        "never reused",
    ] {
        assert!(
            key.as_str().unwrap_or_default().contains(needle),
            "{needle}"
        );
    }
    assert!(
        doc["paths"]["/v1/payments"]["post"]["responses"]["202"]["headers"]["Location"].is_object()
    );
    assert!(doc["paths"][PAYMENT]["get"]["responses"]["200"].is_object());
}

async fn when_20_concurrent_posts_share_one_key_should_store_one_outbox_item(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_race").await;
    let apis: Vec<PaymentsApi> = (0..20).map(|_| api(&servicing, None)).collect();
    let body = payment("acc_race", 7_700, "race");
    let responses = join_all(
        apis.iter()
            .map(|a| a.handle(post(Some(ALICE), Some("race-key"), &body))),
    )
    .await;
    let statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 409),
        "{statuses:?}"
    );
    let fresh = responses
        .iter()
        .filter(|r| r.status() == 202 && header(r, "idempotent-replayed").is_none())
        .count();
    assert_eq!(
        fresh, 1,
        "exactly one request created the payment: {statuses:?}"
    );
    let operation_ids: BTreeSet<String> = responses
        .iter()
        .filter(|r| r.status() == 202)
        .map(|r| body_json(r)["operationId"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(
        operation_ids.len(),
        1,
        "every 202 answers the same operation"
    );
    let outbox = api_outbox(&servicing).await;
    assert_eq!(outbox.len(), 1);
    // The event is the domain's canonical form plus the transport fields the contract
    // tolerates: what the consumer decodes and fingerprints is exactly what the API wrote.
    let mut detail: Value = outbox[0].detail.clone();
    let decoded = ServicingEvent::decode(detail.to_string().as_bytes()).expect("a contract event");
    let object = detail.as_object_mut().expect("object");
    assert_eq!(object.remove("reference"), Some(json!("race")));
    assert!(object.remove("eventId").is_some());
    assert_eq!(detail, decoded.canonical_json());
}

async fn when_a_role_retries_from_another_session_should_replay_not_pay_twice(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_role").await;
    let api = api(&servicing, None);
    let body = payment("acc_role", 4_200, "inv-role");
    // One ECS task's session, then (credentials refreshed, or another pod) another one.
    let first = api
        .handle(post(
            Some("arn:aws:sts::123456789012:assumed-role/payments-client/task-1"),
            Some("role-key"),
            &body,
        ))
        .await;
    assert_eq!(first.status(), 202);
    let retry = api
        .handle(post(
            Some("arn:aws:sts::123456789012:assumed-role/payments-client/botocore-session-1796000000"),
            Some("role-key"),
            &body,
        ))
        .await;
    assert_eq!(retry.status(), 202);
    assert_eq!(header(&retry, "idempotent-replayed"), Some("true"));
    assert_eq!(body_json(&first), body_json(&retry));
    // Another role with the same key is another caller: its own payment.
    let other = api
        .handle(post(
            Some("arn:aws:sts::123456789012:assumed-role/other-client/task-1"),
            Some("role-key"),
            &body,
        ))
        .await;
    assert_eq!(other.status(), 202);
    assert_eq!(header(&other, "idempotent-replayed"), None);
    assert_eq!(
        api_outbox(&servicing).await.len(),
        2,
        "one payment per role"
    );
}

async fn when_a_key_is_reused_after_its_retention_should_refuse_it_not_accept_a_lost_payment(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_retained").await;
    let short = servicing_store::StoreConfig {
        claim_retention: std::time::Duration::from_secs(1),
        ..servicing_store::StoreConfig::new(&servicing.table, "payments-api")
    };
    let api = PaymentsApi::new(servicing_store::ServicingStore::new(
        servicing.client.clone(),
        short,
    ));
    let body = payment("acc_retained", 900, "inv-old");
    let first = api.handle(post(Some(ALICE), Some("old-key"), &body)).await;
    assert_eq!(first.status(), 202);
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    // Before: a fresh 202 whose outbox put modified the first event's item (a MODIFY the relay
    // skips) — accepted, never applied. Now the key stays refused: same body or another.
    for reused in [body.clone(), payment("acc_retained", 901, "inv-new")] {
        let again = api
            .handle(post(Some(ALICE), Some("old-key"), &reused))
            .await;
        assert_eq!(again.status(), 422);
        assert!(
            body_json(&again)["type"]
                .as_str()
                .unwrap_or_default()
                .ends_with("/idempotency-key-expired")
        );
    }
    assert_eq!(
        api_outbox(&servicing).await.len(),
        1,
        "only the first payment"
    );
    // A new key is a new payment.
    let fresh = api.handle(post(Some(ALICE), Some("new-key"), &body)).await;
    assert_eq!(fresh.status(), 202);
}

async fn when_a_key_is_sent_as_a_structured_header_string_should_be_the_same_key_as_the_bare_one(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_quoted").await;
    let api = api(&servicing, None);
    let body = payment("acc_quoted", 1_500, "inv-q");
    // The draft's form (an RFC 8941 sf-string), then the bare token: one key, one payment.
    let quoted = api
        .handle(post(Some(ALICE), Some(r#""order-q1""#), &body))
        .await;
    assert_eq!(quoted.status(), 202, "{:?}", quoted.body());
    // The payment is its operation, never the raw key.
    assert_eq!(
        body_json(&quoted)["sourceEventId"],
        body_json(&quoted)["operationId"]
    );
    let bare = api.handle(post(Some(ALICE), Some("order-q1"), &body)).await;
    assert_eq!(bare.status(), 202);
    assert_eq!(header(&bare, "idempotent-replayed"), Some("true"));
    assert_eq!(body_json(&bare), body_json(&quoted));
    // Spaces around the string are no part of it; `\"` and `\\` are its only escapes.
    let padded = api
        .handle(post(Some(ALICE), Some(r#"  "order-q1" "#), &body))
        .await;
    assert_eq!(header(&padded, "idempotent-replayed"), Some("true"));
    let escaped = api
        .handle(post(Some(ALICE), Some(r#""order-\"q2\\""#), &body))
        .await;
    assert_eq!(escaped.status(), 202);
    let unescaped = payments_api::operation_id(
        &payments_api::Principal::new(ALICE).expect("principal"),
        &payments_api::IdempotencyKey::parse(Some(br#"order-"q2\"#)).expect("key"),
    );
    assert_eq!(body_json(&escaped)["sourceEventId"], unescaped.as_str());
    let same = api
        .handle(post(Some(ALICE), Some(r#"order-"q2\"#), &body))
        .await;
    assert_eq!(header(&same, "idempotent-replayed"), Some("true"));
    assert_eq!(
        api_outbox(&servicing).await.len(),
        2,
        "two keys, two payments"
    );

    // A value that opens a string and is not one is refused as malformed, not taken as a key.
    for malformed in [
        r#""order-q3"#,
        r#""order\q3""#,
        r#""order-q3"x"#,
        r#""order-q3";v=1"#,
        "\"order\tq3\"",
    ] {
        let response = api.handle(post(Some(ALICE), Some(malformed), &body)).await;
        assert_eq!(response.status(), 400, "{malformed}");
        assert_eq!(
            problem_type(&response),
            "malformed-idempotency-key",
            "{malformed}"
        );
    }
    // A well-formed string whose key breaks the key grammar: the key is invalid.
    for invalid in [r#""""#, r#""order q4""#] {
        let response = api.handle(post(Some(ALICE), Some(invalid), &body)).await;
        assert_eq!(response.status(), 400, "{invalid}");
        assert_eq!(
            problem_type(&response),
            "invalid-idempotency-key",
            "{invalid}"
        );
    }
    assert_eq!(api_outbox(&servicing).await.len(), 2, "nothing more stored");
}

async fn when_two_idempotency_keys_arrive_comma_joined_should_refuse_them_storing_nothing(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_twice").await;
    let api = api(&servicing, None);
    let body = payment("acc_twice", 700, "inv-2");
    // API Gateway (payload 2.0) joins duplicate headers with commas: two keys are not one.
    for joined in [
        "order-a,order-b",
        "order-a, order-b",
        r#""order-a", "order-b""#,
        r#""order-a","order-b""#,
        r#""order-a", order-b"#,
        "order-a,order-a",
    ] {
        let response = api.handle(post(Some(ALICE), Some(joined), &body)).await;
        assert_eq!(response.status(), 400, "{joined}");
        assert_eq!(
            problem_type(&response),
            "multiple-idempotency-keys",
            "{joined}"
        );
    }
    assert!(servicing.items_of_type("IDEMPOTENCY").await.is_empty());
    // A comma inside a string is part of its one key.
    let one = api
        .handle(post(Some(ALICE), Some(r#""order-a,b""#), &body))
        .await;
    assert_eq!(one.status(), 202);
    let expected = payments_api::operation_id(
        &payments_api::Principal::new(ALICE).expect("principal"),
        &payments_api::IdempotencyKey::parse(Some(br#""order-a,b""#)).expect("key"),
    );
    assert_eq!(body_json(&one)["sourceEventId"], expected.as_str());
}

/// `infra/schema.md`: "the raw key is never stored". A client's key may carry what it should not
/// (an order number, a customer reference): it identifies the payment only hashed with the
/// caller — in the 202, the decision records, the event on the bus and every item the API and
/// the consumer write (kept for years, some under a compliance lock).
async fn when_a_payment_is_accepted_and_applied_should_keep_its_raw_key_nowhere(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_rawkey").await;
    let api = api(&servicing, None);
    let raw = "order-4711-customer-jane";
    let body = payment("acc_rawkey", 1_500, "inv-raw");
    let mut seen = Vec::new();
    for sent in [
        body.clone(),
        body.clone(),
        payment("acc_rawkey", 1_501, "inv-raw"),
    ] {
        let (response, decision) = api.post(&post(Some(ALICE), Some(raw), &sent)).await;
        seen.push(format!("{}", body_json(&response)));
        seen.push(serde_json::to_string(&decision).expect("decision"));
    }
    let events = api_outbox(&servicing).await;
    assert_eq!(events.len(), 1);
    let wire = events[0].detail.to_string();
    seen.push(wire.clone());
    let results = servicing
        .handler()
        .process(&[sqs_message("m-raw", &wire, 1)])
        .await
        .results;
    assert_eq!(
        results[0].1,
        account_state::MessageResult::Applied,
        "{results:?}"
    );
    seen.extend(
        servicing
            .all_items()
            .await
            .iter()
            .map(|item| format!("{item:?}")),
    );
    let leaks: Vec<&String> = seen.iter().filter(|text| text.contains(raw)).collect();
    assert!(leaks.is_empty(), "{engine:?}: the raw key in {leaks:#?}");
}

/// `api:` is the payments API's: a fact under it applies only as the payment the API accepted
/// (its idempotency record), whoever put it on the queue. Forged under a principal's name or
/// its scope, or an accepted payment altered on the way: quarantined, the loan untouched; the
/// accepted payment itself applies, under either reading of its name.
async fn when_a_fact_under_the_api_prefix_was_not_accepted_by_the_api_should_quarantine_it(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_forged").await;
    let genuine = accepted_payment(&servicing, "order-1", "acc_forged", 2_500, "inv-1").await;
    let operation = genuine["sourceEventId"]
        .as_str()
        .expect("operation id")
        .to_owned();
    let with = |changes: Value| {
        let mut body = genuine.clone();
        for (field, value) in changes.as_object().expect("changes") {
            body[field] = value.clone();
        }
        body.to_string()
    };
    let scope = payments_api::Principal::new(ALICE)
        .expect("principal")
        .scope();
    let forged = [
        // Another amount under the accepted payment's identity.
        with(json!({"amountMinor": 250_000})),
        // An identity the API never gave: under a principal's name, under a scope.
        with(
            json!({"sourceSystem": "api:mallory", "sourceEventId": "op_000000000000000000000001"}),
        ),
        with(
            json!({"sourceSystem": format!("api:{scope}"), "sourceEventId": "op_000000000000000000000002"}),
        ),
        // The accepted operation under another caller's name.
        with(json!({"sourceSystem": "api:mallory"})),
    ];
    let messages: Vec<_> = forged
        .iter()
        .enumerate()
        .map(|(i, body)| sqs_message(&format!("m-forged-{i}"), body, 1))
        .collect();
    let report = servicing.handler().process(&messages).await;
    for (id, result) in &report.results {
        assert_eq!(
            *result,
            account_state::MessageResult::Quarantined {
                code: "api_payment_not_accepted".to_owned()
            },
            "{id}"
        );
    }
    let (loan, _) = servicing.loan("acc_forged").await.expect("loan");
    assert_eq!(loan.principal_outstanding_minor, 100_000, "nothing applied");
    let quarantined = servicing.quarantine().await;
    assert_eq!(quarantined.len(), forged.len());
    assert!(
        quarantined
            .iter()
            .all(|q| q.code == "api_payment_not_accepted" && !q.raw_body.is_empty()),
        "{quarantined:?}"
    );
    // Never redriven: a forged fact is a security matter, and it would only be refused again.
    let listed = servicing_ops::quarantine::list(
        &servicing.client,
        &servicing.table,
        None,
        servicing_ops::quarantine::Listing::last_days(1),
    )
    .await
    .expect("list");
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let refused = servicing_ops::quarantine::redrive(
        &servicing.client,
        &sqs,
        &servicing.table,
        "unused",
        &listed[0].id,
        servicing_ops::quarantine::RedriveOptions::default(),
    )
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("never a redrive")),
        "{refused:?}"
    );

    // The accepted payment, sent on by the relay (or resent by an operator): applied once.
    let results = servicing
        .handler()
        .process(&[
            sqs_message("m-genuine", &genuine.to_string(), 1),
            sqs_message("m-genuine-again", &genuine.to_string(), 2),
        ])
        .await
        .results;
    assert_eq!(
        results[0].1,
        account_state::MessageResult::Applied,
        "{results:?}"
    );
    assert_eq!(
        results[1].1,
        account_state::MessageResult::Duplicate,
        "{results:?}"
    );

    // Its record gone (one written before records were kept for good, deleted by TTL): the
    // applied fact's claim proves a resend, never another payload under its identity.
    let key = servicing_store::items::idempotency_key(&scope, &operation);
    servicing
        .client
        .delete_item()
        .table_name(&servicing.table)
        .set_key(Some(servicing_store::items::key_item(key)))
        .send()
        .await
        .expect("delete the record");
    let report = servicing
        .handler()
        .process(&[
            sqs_message("m-genuine-late", &genuine.to_string(), 1),
            sqs_message("m-forged-late", &forged[0], 1),
        ])
        .await;
    let of = |id: &str| result_of(&report, id);
    assert_eq!(
        of("m-genuine-late"),
        account_state::MessageResult::Duplicate,
        "{:?}",
        report.results
    );
    assert_eq!(
        of("m-forged-late"),
        account_state::MessageResult::Quarantined {
            code: "api_payment_not_accepted".to_owned()
        },
        "{:?}",
        report.results
    );

    // A record that does not decode answers for its own fact, not for the batch's others.
    let second = accepted_payment(&servicing, "order-2", "acc_forged", 700, "inv-2").await;
    let mut broken = second.clone();
    broken["sourceEventId"] = json!("op_000000000000000000000009");
    let (pk, sk) = servicing_store::items::idempotency_key(&scope, "op_000000000000000000000009");
    let text = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .item("pk", text(&pk))
        .item("sk", text(&sk))
        .item("itemType", text("IDEMPOTENCY"))
        .item("outbox", text("not json"))
        .send()
        .await
        .expect("put a broken record");
    let report = servicing
        .handler()
        .process(&[
            sqs_message("m-broken", &broken.to_string(), 1),
            sqs_message("m-second", &second.to_string(), 1),
        ])
        .await;
    let of = |id: &str| result_of(&report, id);
    assert_eq!(
        of("m-broken"),
        account_state::MessageResult::Quarantined {
            code: "api_payment_not_accepted".to_owned()
        },
        "{:?}",
        report.results
    );
    assert_eq!(
        of("m-second"),
        account_state::MessageResult::Applied,
        "{:?}",
        report.results
    );
    let (loan, _) = servicing.loan("acc_forged").await.expect("loan");
    assert_eq!(loan.principal_outstanding_minor, 100_000 - 2_500 - 700);
    assert!(operation.starts_with("op_"));
}

/// The origin check's read is one more request of the batch: a fault at every request index
/// (the read, the quarantine write, the account reads, the commit; failed or its answer lost),
/// then the retried messages redelivered, ends where a run without faults does — the
/// accepted payment applied once, the forged one quarantined once, the other account's fact
/// applied once.
async fn when_any_request_of_a_batch_with_api_facts_fails_should_end_as_without_the_fault(
    engine: Engine,
) {
    for fault in [Fault::ServerError, Fault::LoseResponse] {
        for index in 0.. {
            let servicing = Servicing::new(engine).await;
            open_account(&servicing, "acc_api_a").await;
            open_account(&servicing, "acc_api_b").await;
            let genuine = accepted_payment(&servicing, "k-1", "acc_api_a", 2_500, "inv-1").await;
            let mut forged = genuine.clone();
            forged["sourceEventId"] = json!("op_000000000000000000000007");
            let other = integration_tests::generate::pay("acc_api_b", "pmt-b", 3, 400);
            let mut pending = vec![
                ("m-forged".to_owned(), forged.to_string()),
                ("m-genuine".to_owned(), genuine.to_string()),
                ("m-other".to_owned(), other.to_string()),
            ];
            let plan = FaultPlan::default();
            plan.at_request(index, fault);
            let faulty = servicing.faulty_handler(servicing.config(), &plan);
            for delivery in 1..=4 {
                let messages: Vec<_> = pending
                    .iter()
                    .map(|(id, body)| sqs_message(id, body, delivery))
                    .collect();
                let report = if delivery == 1 {
                    faulty.process(&messages).await
                } else {
                    servicing.handler().process(&messages).await
                };
                pending.retain(|(id, _)| {
                    matches!(
                        result_of(&report, id),
                        account_state::MessageResult::Retry { .. }
                    )
                });
            }
            assert!(
                pending.is_empty(),
                "{fault:?} at {index}: still retried {pending:?}"
            );
            let principal = |account: &'static str| {
                let servicing = &servicing;
                async move {
                    servicing
                        .loan(account)
                        .await
                        .expect("loan")
                        .0
                        .principal_outstanding_minor
                }
            };
            assert_eq!(
                principal("acc_api_a").await,
                100_000 - 2_500,
                "{fault:?} at {index}"
            );
            assert_eq!(
                principal("acc_api_b").await,
                100_000 - 400,
                "{fault:?} at {index}"
            );
            let refused: Vec<_> = servicing
                .quarantine()
                .await
                .into_iter()
                .filter(|q| q.code == "api_payment_not_accepted")
                .collect();
            // One record, even where the quarantine write's answer was lost and its message
            // came back.
            let messages: Vec<&str> = refused.iter().map(|q| q.message_id.as_str()).collect();
            assert_eq!(messages, ["m-forged"], "{fault:?} at {index}");
            // Past the batch's last request the fault never fired: every index was covered.
            if plan.pending() > 0 {
                assert!(index >= 3, "the batch made only {index} requests");
                break;
            }
        }
    }
}

/// The result of message `id` in `report` (results are not in message order).
fn result_of(report: &account_state::BatchReport, id: &str) -> account_state::MessageResult {
    report
        .results
        .iter()
        .find(|(m, _)| m == id)
        .map(|(_, r)| r.clone())
        .expect("a result per message")
}
