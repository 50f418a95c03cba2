//! Faults no local engine produces on demand — throttling, a 5xx, `TransactionConflict`, a
//! request refused as such, a lost response, a slow request, a panic — injected from the
//! tests' side, under the SDK: an HTTP connector that wraps the real one and consults the plan
//! on each request. Queued faults take the next commit (`TransactWriteItems`; a panic takes
//! whatever request comes next); a fault armed with [`FaultPlan::at_request`] takes the Nth
//! request of any kind, so a sweep can fault every request of a run in turn.
//! Production code has no seam: the store under test is the one that ships, over a client
//! whose HTTP layer misbehaves on cue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use serde_json::{Value, json};

/// One fault, taken by the next `TransactWriteItems` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Not sent; answered `ThrottlingException`, as DynamoDB throttling would.
    Throttle,
    /// Not sent; answered `TransactionCanceledException` with a `TransactionConflict` reason.
    TransactionConflict,
    /// Sent and committed, then the connection fails: the caller cannot know it committed.
    LoseResponse,
    /// Panics on the next request of any kind (an account's read runs in that account's
    /// task), as a bug in the handler would.
    Panic,
    /// Not sent; answered `ValidationException`, as a request DynamoDB refuses as such (a
    /// transaction over 4 MB) would be.
    Invalid,
    /// Not sent; answered HTTP 500 `InternalServerError`, once the SDK's retries are spent.
    ServerError,
    /// Sent after this pause, then answered as usual: a slow request (a throttled table, a
    /// long connect) whatever its kind.
    Slow(std::time::Duration),
}

/// A request identified by what it does, not by when it comes: the `nth` (from 0) request of
/// `operation` (`GetItem`, `TransactWriteItems`, …) that touches `account`'s loan item (`""`:
/// none, e.g. a quarantine write). Accounts run side by side, so request N of one run need not
/// be request N of another; the nth commit of an account is the same in every run up to a fault.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signature {
    pub operation: String,
    pub account: String,
    pub nth: u64,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let account = if self.account.is_empty() {
            "no account"
        } else {
            &self.account
        };
        write!(f, "{} #{} of {account}", self.operation, self.nth)
    }
}

#[derive(Debug, Clone, Default)]
pub struct FaultPlan(Arc<Mutex<PlanState>>);

#[derive(Debug, Default)]
struct PlanState {
    queued: VecDeque<Fault>,
    /// `(n, fault)`: the request numbered `n` (counting every request from 0) takes `fault`.
    armed: Vec<(u64, Fault)>,
    /// `(n, fault)`: the commit numbered `n` (counting `TransactWriteItems` from 0) takes it.
    armed_commits: Vec<(u64, Fault)>,
    requests: u64,
    commits: u64,
    /// Faults armed for a request by what it does.
    armed_signatures: Vec<(Signature, Fault)>,
    /// Requests seen per (operation, account), and every request's signatures in order.
    seen: std::collections::HashMap<(String, String), u64>,
    signatures: Vec<Signature>,
    /// When each request was handed to the connector, in order.
    started: Vec<std::time::SystemTime>,
    /// Every `(IAM action, partition key)` the requests asked for (see [`access_of`]).
    access: std::collections::BTreeSet<(String, String)>,
    /// Every read's `(IAM action, partition key, attributes)` (see [`reads_of`]).
    reads: std::collections::BTreeSet<Read>,
}

/// A read as IAM's `dynamodb:Attributes` sees it: the action, the partition key, and the
/// top-level attributes its projection names (`None`: no projection, so every attribute).
pub type Read = (String, String, Option<std::collections::BTreeSet<String>>);

impl FaultPlan {
    pub fn push(&self, fault: Fault) {
        self.state().queued.push_back(fault);
    }

    pub fn pending(&self) -> usize {
        let state = self.state();
        state.queued.len()
            + state.armed.len()
            + state.armed_commits.len()
            + state.armed_signatures.len()
    }

    /// Arms `fault` for the request `signature` names, whenever it comes.
    pub fn at_signature(&self, signature: Signature, fault: Fault) {
        self.state().armed_signatures.push((signature, fault));
    }

    /// The signatures of every request so far, in order (a request touching several accounts'
    /// loan items — group commit — has one per account).
    pub fn signatures(&self) -> Vec<Signature> {
        self.state().signatures.clone()
    }

    /// Arms `fault` for the `n`th commit (`TransactWriteItems`) from now (0: the next one),
    /// whatever the reads between.
    pub fn at_commit(&self, n: u64, fault: Fault) {
        let mut state = self.state();
        let at = state.commits + n;
        state.armed_commits.push((at, fault));
    }

    /// Arms `fault` for the `n`th request from now (0: the next one), whatever its kind (several
    /// may be armed).
    pub fn at_request(&self, n: u64, fault: Fault) {
        let mut state = self.state();
        let at = state.requests + n;
        state.armed.push((at, fault));
    }

    /// Every `(IAM action, partition key)` asked for so far: a `TransactWriteItems` counts as
    /// the item actions IAM authorizes it by, a `Query` of an index as `index/<name>`.
    pub fn access(&self) -> std::collections::BTreeSet<(String, String)> {
        self.state().access.clone()
    }

    /// Every read so far with the attributes it asked for.
    pub fn reads(&self) -> std::collections::BTreeSet<Read> {
        self.state().reads.clone()
    }

    /// Requests seen so far (faulted ones included).
    pub fn requests(&self) -> u64 {
        self.state().requests
    }

    /// When each request so far started (was handed to the HTTP layer), in order.
    pub fn request_starts(&self) -> Vec<std::time::SystemTime> {
        self.state().started.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PlanState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fault this request takes: the armed one when its number comes, else the next queued
    /// one if it applies to a commit (`commit`) or is a panic.
    fn next_for(&self, request: &HttpRequest) -> Option<Fault> {
        let operation = request
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or_default()
            .to_owned();
        let commit = operation == "TransactWriteItems";
        let accounts = loan_accounts(request.body().bytes().unwrap_or_default());
        let access = access_of(&operation, request.body().bytes().unwrap_or_default());
        let reads = reads_of(&operation, request.body().bytes().unwrap_or_default());
        let mut state = self.state();
        state.access.extend(access);
        state.reads.extend(reads);
        let number = state.requests;
        state.requests += 1;
        state.started.push(std::time::SystemTime::now());
        let mut signatures = Vec::new();
        for account in accounts {
            let seen = state
                .seen
                .entry((operation.clone(), account.clone()))
                .or_default();
            signatures.push(Signature {
                operation: operation.clone(),
                account,
                nth: *seen,
            });
            *seen += 1;
        }
        state.signatures.extend(signatures.iter().cloned());
        if let Some(i) = state
            .armed_signatures
            .iter()
            .position(|(s, _)| signatures.contains(s))
        {
            return Some(state.armed_signatures.swap_remove(i).1);
        }
        if let Some(i) = state.armed.iter().position(|(at, _)| *at == number) {
            return Some(state.armed.swap_remove(i).1);
        }
        if commit {
            let number = state.commits;
            state.commits += 1;
            if let Some(i) = state.armed_commits.iter().position(|(at, _)| *at == number) {
                return Some(state.armed_commits.swap_remove(i).1);
            }
        }
        match state.queued.front() {
            Some(Fault::Panic) => state.queued.pop_front(),
            Some(_) if commit => state.queued.pop_front(),
            _ => None,
        }
    }

    /// `client`'s configuration over this plan. One attempt per request: a fault is what the
    /// store sees once the SDK's own retries are spent.
    pub fn client(&self, client: &aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
        let config = client.config();
        let inner = config
            .http_client()
            .expect("the test client has an HTTP client");
        let faulty = SharedHttpClient::new(FaultyHttpClient {
            inner,
            plan: self.clone(),
        });
        aws_sdk_dynamodb::Client::from_conf(
            config
                .to_builder()
                .http_client(faulty)
                .retry_config(RetryConfig::standard().with_max_attempts(1))
                .build(),
        )
    }
}

#[derive(Debug)]
struct FaultyHttpClient {
    inner: SharedHttpClient,
    plan: FaultPlan,
}

impl HttpClient for FaultyHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(FaultyConnector {
            inner: self.inner.http_connector(settings, components),
            plan: self.plan.clone(),
        })
    }
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    plan: FaultPlan,
}

/// The accounts whose loan items a request names (`LOAN#<account>` keys), each once, in
/// order; `[""]` when it names none.
/// What IAM authorizes a DynamoDB request by: `(dynamodb:<action>, partition key)` per item it
/// names (`index/<name>:<the index's partition key>` for a query of an index, `*` for a scan).
fn access_of(operation: &str, body: &[u8]) -> Vec<(String, String)> {
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let pk = |item: &Value| item["pk"]["S"].as_str().unwrap_or_default().to_owned();
    let action = |name: &str| format!("dynamodb:{name}");
    match operation {
        "GetItem" | "PutItem" | "UpdateItem" | "DeleteItem" => {
            let item = if operation == "PutItem" {
                &body["Item"]
            } else {
                &body["Key"]
            };
            vec![(action(operation), pk(item))]
        }
        "BatchGetItem" => body["RequestItems"]
            .as_object()
            .into_iter()
            .flat_map(|tables| tables.values())
            .flat_map(|t| t["Keys"].as_array().cloned().unwrap_or_default())
            .map(|key| (action(operation), pk(&key)))
            .collect(),
        "Query" => match body["IndexName"].as_str() {
            // IAM's leading keys of an index query are the index's partition key values: the
            // value the key condition's first equality names.
            Some(index) => {
                let condition = body["KeyConditionExpression"].as_str().unwrap_or_default();
                let placeholder = condition
                    .split_once("= ")
                    .map(|(_, rest)| rest.split_whitespace().next().unwrap_or_default());
                let key = placeholder
                    .and_then(|p| body["ExpressionAttributeValues"][p]["S"].as_str())
                    .unwrap_or_default();
                vec![(action(operation), format!("index/{index}:{key}"))]
            }
            None => {
                let pk = body["ExpressionAttributeValues"][":pk"]["S"].as_str();
                vec![(action(operation), pk.unwrap_or_default().to_owned())]
            }
        },
        "Scan" => vec![(action(operation), "*".to_owned())],
        "TransactWriteItems" | "TransactGetItems" => body["TransactItems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let (kind, member) = entry.as_object()?.iter().next()?;
                let (name, item) = match kind.as_str() {
                    "Put" => ("PutItem", &member["Item"]),
                    "Update" => ("UpdateItem", &member["Key"]),
                    "Delete" => ("DeleteItem", &member["Key"]),
                    "ConditionCheck" => ("ConditionCheckItem", &member["Key"]),
                    "Get" => ("GetItem", &member["Key"]),
                    _ => return None,
                };
                Some((action(name), pk(item)))
            })
            .collect(),
        other => vec![(action(other), String::new())],
    }
}

/// The reads a request makes (`GetItem`, `BatchGetItem`, `Query`, `Scan`), each with the
/// top-level attributes of its projection, `#names` resolved.
fn reads_of(operation: &str, body: &[u8]) -> Vec<Read> {
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let attributes = |request: &Value| {
        let projection = request["ProjectionExpression"].as_str()?;
        Some(
            projection
                .split(',')
                .map(|path| {
                    let top = path.trim().split(['.', '[']).next().unwrap_or_default();
                    request["ExpressionAttributeNames"][top]
                        .as_str()
                        .unwrap_or(top)
                        .to_owned()
                })
                .collect(),
        )
    };
    let batch_attributes = |key_pk: &str| {
        json["RequestItems"]
            .as_object()
            .into_iter()
            .flat_map(|tables| tables.values())
            .find(|t| {
                t["Keys"]
                    .as_array()
                    .is_some_and(|keys| keys.iter().any(|k| k["pk"]["S"] == key_pk))
            })
            .and_then(attributes)
    };
    match operation {
        "GetItem" | "Query" | "Scan" => access_of(operation, body)
            .into_iter()
            .map(|(action, key)| (action, key, attributes(&json)))
            .collect(),
        "BatchGetItem" => access_of(operation, body)
            .into_iter()
            .map(|(action, key)| {
                let projected = batch_attributes(&key);
                (action, key, projected)
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn loan_accounts(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let mut accounts: Vec<String> = Vec::new();
    for (at, _) in text.match_indices("\"LOAN#") {
        let rest = &text[at + 6..];
        let account: String = rest.chars().take_while(|c| *c != '"').collect();
        if !accounts.contains(&account) {
            accounts.push(account);
        }
    }
    if accounts.is_empty() {
        accounts.push(String::new());
    }
    accounts
}

/// A DynamoDB error answer (awsJson 1.0), status 400.
fn answer(kind: &str, extra: Value) -> Response<SdkBody> {
    answer_with(400, kind, extra)
}

fn answer_with(status: u16, kind: &str, extra: Value) -> Response<SdkBody> {
    let mut body = json!({
        "__type": format!("com.amazonaws.dynamodb.v20120810#{kind}"),
        "message": "injected",
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let mut response = Response::new(
        StatusCode::try_from(status).expect("status"),
        SdkBody::from(body.to_string()),
    );
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

impl HttpConnector for FaultyConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let commit = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".TransactWriteItems"));
        match self.plan.next_for(&request) {
            None => self.inner.call(request),
            Some(Fault::Throttle) => {
                HttpConnectorFuture::ready(Ok(answer("ThrottlingException", json!({}))))
            }
            Some(Fault::ServerError) => {
                HttpConnectorFuture::ready(Ok(answer_with(500, "InternalServerError", json!({}))))
            }
            Some(Fault::Invalid) => {
                HttpConnectorFuture::ready(Ok(answer("ValidationException", json!({}))))
            }
            // Only transactions are cancelled; a read armed with it is throttled instead.
            Some(Fault::TransactionConflict) if !commit => {
                HttpConnectorFuture::ready(Ok(answer("ThrottlingException", json!({}))))
            }
            Some(Fault::TransactionConflict) => {
                // One reason per item, as DynamoDB answers: the first item conflicted.
                let items = request
                    .body()
                    .bytes()
                    .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                    .and_then(|b| b["TransactItems"].as_array().map(Vec::len))
                    .unwrap_or(1);
                let reasons: Vec<Value> = (0..items)
                    .map(|i| json!({"Code": if i == 0 { "TransactionConflict" } else { "None" }}))
                    .collect();
                HttpConnectorFuture::ready(Ok(answer(
                    "TransactionCanceledException",
                    json!({"CancellationReasons": reasons}),
                )))
            }
            Some(Fault::Panic) => panic!("injected: a bug in the handler"),
            Some(Fault::Slow(pause)) => {
                let inner = self.inner.clone();
                HttpConnectorFuture::new(async move {
                    tokio::time::sleep(pause).await;
                    inner.call(request).await
                })
            }
            Some(Fault::LoseResponse) => {
                let sent = self.inner.call(request);
                HttpConnectorFuture::new(async move {
                    sent.await?;
                    Err(ConnectorError::other(
                        "injected: the response was lost after the commit".into(),
                        None,
                    ))
                })
            }
        }
    }
}
