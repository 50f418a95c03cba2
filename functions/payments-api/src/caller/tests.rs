use super::{iam_caller, idempotency_key, principal};
use crate::KeyError;

fn jwt_request(claims: serde_json::Value) -> lambda_http::Request {
    let raw = serde_json::json!({
        "version": "2.0", "routeKey": "POST /v1/payments", "rawPath": "/v1/payments", "rawQueryString": "",
        "headers": {}, "isBase64Encoded": false,
        "requestContext": {"accountId": "123456789012", "apiId": "a", "domainName": "a.example", "domainPrefix": "a",
            "requestId": "r", "routeKey": "POST /v1/payments", "stage": "$default", "time": "t", "timeEpoch": 0,
            "http": {"method": "POST", "path": "/v1/payments", "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "t"},
            "authorizer": {"jwt": {"claims": claims, "scopes": null}}},
    });
    lambda_http::request::from_str(&raw.to_string()).expect("event")
}

#[test]
fn when_two_issuers_have_a_user_with_the_same_sub_should_scope_them_apart() {
    let a = principal(&jwt_request(
        serde_json::json!({"iss": "https://idp-a.example", "sub": "42"}),
    ));
    let b = principal(&jwt_request(
        serde_json::json!({"iss": "https://idp-b.example", "sub": "42"}),
    ));
    let (a, b) = (a.expect("principal"), b.expect("principal"));
    assert_ne!(a.scope(), b.scope());
    assert_eq!(a.as_str(), "jwt:https://idp-a.example|sub:42");
    // A client-credentials token has no sub: its client id, never confused with a sub.
    let client = principal(&jwt_request(
        serde_json::json!({"iss": "https://idp-a.example", "client_id": "42"}),
    ));
    assert_ne!(client.expect("principal").scope(), a.scope());
}

#[test]
fn when_the_request_holds_two_idempotency_key_values_should_refuse_both_not_take_the_first() {
    let mut request = lambda_http::Request::new(lambda_http::Body::Empty);
    request
        .headers_mut()
        .append("idempotency-key", "order-1".parse().expect("value"));
    assert_eq!(
        idempotency_key(&request).map(|k| k.as_str().to_owned()),
        Ok("order-1".to_owned())
    );
    request
        .headers_mut()
        .append("idempotency-key", "order-2".parse().expect("value"));
    assert!(matches!(
        idempotency_key(&request),
        Err(KeyError::Multiple(_))
    ));
}

#[test]
fn when_a_role_is_assumed_should_scope_the_caller_by_the_role_not_the_session() {
    let role = "arn:aws:iam::123456789012:role/payments-client";
    for session in ["ecs-task-1", "botocore-session-1796000000", "pod-7f9c"] {
        let arn = format!("arn:aws:sts::123456789012:assumed-role/payments-client/{session}");
        assert_eq!(iam_caller(&arn), role);
    }
    assert_eq!(
        iam_caller("arn:aws-us-gov:sts::123456789012:assumed-role/r/s"),
        "arn:aws-us-gov:iam::123456789012:role/r"
    );
    // Users and other ARNs stay as they are.
    for arn in [
        "arn:aws:iam::123456789012:user/ops/alice",
        "arn:aws:sts::123456789012:federated-user/bob",
        "AIDAEXAMPLE",
    ] {
        assert_eq!(iam_caller(arn), arn);
    }
}
