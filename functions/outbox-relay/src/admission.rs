//! What a record may publish, by the item it comes from: a write to the table is no licence to
//! put anything on the bus or on the servicing queue. Account-state's fact records
//! (`CLAIM#account-state#…`) publish its domain events about the record's own account, on the
//! bus; the API's idempotency records (`IDEMPOTENCY#<scope>#<operationId>`) send one
//! `PaymentSettled` of their own operation from an `api:` source, to the servicing queue only
//! (the bus carries domain events alone, in one envelope). Anything else — another key prefix,
//! source or detail type, an event about another account or operation — is refused with the
//! reason, and the record quarantined. Separate from planning: the rules read on their own.

use std::collections::HashMap;

use serde_dynamo::AttributeValue;
use servicing_domain::outbox::detail_types;
use servicing_store::OutboxEvent;

use crate::plan::API_PAYMENTS;

/// account-state's fact records and the events they may carry.
const FACT_RECORDS: &str = "CLAIM#account-state#";
const FACT_SOURCE: &str = SOURCES[0];
const DOMAIN_EVENTS: [&str; 8] = detail_types::ALL;
/// The API's idempotency records and what their one event must say.
const API_RECORDS: &str = "IDEMPOTENCY#";
const API_EVENT_TYPE: &str = "PAYMENT_SETTLED";
const API_SOURCE_PREFIX: &str = "api:";

/// Every `source` the relay may publish on the bus: the relay role's `events:source` condition
/// lists exactly these (policy rule E9133 reads this line).
pub const SOURCES: [&str; 1] = ["servicing.account-state"];

fn string<'a>(image: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    match image.get(name) {
        Some(AttributeValue::S(s)) => s,
        _ => "",
    }
}

/// `Ok` when the record whose new image is `image` may publish `event`; else why not.
pub(crate) fn admit(
    image: &HashMap<String, AttributeValue>,
    event: &OutboxEvent,
) -> Result<(), String> {
    let pk = string(image, "pk");
    let kind = (event.source.as_str(), event.detail_type.as_str());
    let detail = &event.detail;
    let field = |name: &str| detail[name].as_str().unwrap_or_default();
    if pk.starts_with(FACT_RECORDS) {
        if kind.0 != FACT_SOURCE || !DOMAIN_EVENTS.contains(&kind.1) {
            return Err(format!(
                "a fact record may publish {FACT_SOURCE} domain events only, not {} / {}",
                kind.0, kind.1
            ));
        }
        if field("eventType") != kind.1 {
            return Err(format!(
                "a {} event whose detail says eventType {:?}",
                kind.1,
                field("eventType")
            ));
        }
        let account = string(image, "accountId");
        if account.is_empty() || field("accountId") != account {
            return Err(format!(
                "a fact record of account {account:?} may not publish an event about account {:?}",
                field("accountId")
            ));
        }
        return Ok(());
    }
    if let Some(key) = pk.strip_prefix(API_RECORDS) {
        let operation = key.rsplit('#').next().unwrap_or_default();
        if kind != API_PAYMENTS || field("eventType") != API_EVENT_TYPE {
            return Err(format!(
                "an idempotency record may publish one {} / {} ({API_EVENT_TYPE}) only, not {} / {} ({:?})",
                API_PAYMENTS.0,
                API_PAYMENTS.1,
                kind.0,
                kind.1,
                field("eventType")
            ));
        }
        if !field("sourceSystem").starts_with(API_SOURCE_PREFIX) {
            return Err(format!(
                "an API payment must come from an {API_SOURCE_PREFIX} source, not {:?}",
                field("sourceSystem")
            ));
        }
        if operation.is_empty() || field("eventId") != operation {
            return Err(format!(
                "an idempotency record of operation {operation:?} may not publish event {:?}",
                field("eventId")
            ));
        }
        return Ok(());
    }
    let prefix: String = pk.split('#').next().unwrap_or_default().to_owned();
    Err(format!(
        "records under {prefix:?}# publish nothing: {} / {} refused",
        kind.0, kind.1
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn when_the_bus_sources_are_listed_should_name_the_fact_records_only() {
        assert_eq!(super::SOURCES, [super::FACT_SOURCE]);
        assert!(!super::SOURCES.contains(&super::API_PAYMENTS.0));
    }
}
