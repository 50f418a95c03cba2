//! API Gateway HTTP API (payload 2.0) events, as the payments API receives them.

use serde_json::{Value, json};

/// An HTTP API (payload 2.0) event, as API Gateway sends it with an IAM authorizer.
pub fn event(
    method: &str,
    path: &str,
    route: &str,
    principal: Option<&str>,
    key: Option<&str>,
    body: Option<&str>,
) -> lambda_http::Request {
    let mut headers = json!({"content-type": "application/json", "user-agent": "it"});
    if let Some(key) = key {
        headers["idempotency-key"] = json!(key);
    }
    let mut context = json!({
        "accountId": "123456789012", "apiId": "a1b2c3d4", "domainName": "a1b2c3d4.execute-api.us-east-1.amazonaws.com",
        "domainPrefix": "a1b2c3d4", "requestId": "req-1", "routeKey": route, "stage": "$default",
        "time": "30/Nov/2026:10:00:00 +0000", "timeEpoch": 1_796_000_000_000_i64,
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.10", "userAgent": "it"},
    });
    if let Some(arn) = principal {
        context["authorizer"] = json!({"iam": {"accessKey": "AKIAEXAMPLE", "accountId": "123456789012",
            "callerId": "AIDAEXAMPLE", "userArn": arn, "userId": "AIDAEXAMPLE"}});
    }
    let account = path.split('/').nth(3).unwrap_or_default();
    let raw = json!({
        "version": "2.0", "routeKey": route, "rawPath": path, "rawQueryString": "", "headers": headers,
        "requestContext": context,
        "pathParameters": if route.contains("{accountId}") { json!({"accountId": account}) } else { Value::Null },
        "body": body, "isBase64Encoded": false,
    });
    lambda_http::request::from_str(&raw.to_string()).expect("API Gateway v2 event")
}
