//! Helpers shared by the domain's integration tests.
#![allow(dead_code)]

use serde_json::{Value, json};

pub fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../fixtures/samples/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

pub fn lines(stream: &str) -> Vec<String> {
    stream
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// A valid event of `event_type` for account `acc_1`, with `extra` fields merged in.
pub fn event(id: &str, event_type: &str, time: &str, extra: Value) -> Value {
    let mut e = json!({
        "sourceSystem": "test",
        "sourceEventId": id,
        "eventType": event_type,
        "accountId": "acc_1",
        "eventTime": time,
    });
    if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(extra.clone());
    }
    e
}

pub fn opened(time: &str, principal: i64) -> Value {
    event(
        "open",
        "LOAN_OPENED",
        time,
        json!({"principalMinor": principal, "currency": "EUR"}),
    )
}
