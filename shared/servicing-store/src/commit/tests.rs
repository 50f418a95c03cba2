//! Unit tests of the commit engine: what a unit of work announces it adds to a transaction is
//! what building the transaction adds (the group planner sizes transactions by it).

use servicing_domain::{LoanAccount, Outcome, ServicingEvent, apply};

use super::*;
use crate::StoreConfig;

fn store() -> ServicingStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    ServicingStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        StoreConfig::new("table", "account-state"),
    )
}

fn applied(account: Option<&LoanAccount>, body: &str) -> (ServicingEvent, Box<Applied>) {
    let event = ServicingEvent::decode(body.as_bytes()).expect("event");
    match apply(account, &event, None) {
        Outcome::Applied(applied) => (event, applied),
        other => panic!("not applied: {other:?}"),
    }
}

#[test]
fn when_units_are_built_should_add_exactly_the_items_their_effects_announce() {
    let (open, opened) = applied(
        None,
        r#"{"sourceSystem":"core-banking","sourceEventId":"open-1","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":50000,"currency":"EUR"}"#,
    );
    let (pay, paid) = applied(
        Some(&opened.account),
        r#"{"sourceSystem":"psp","sourceEventId":"pay-1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T09:00:00Z","amountMinor":1000,"currency":"EUR"}"#,
    );
    assert!(paid.allocation.is_some() && !paid.outbox.is_empty());
    // One record per fact: the payment's events and allocation ride on its claim.
    let fingerprint = Fingerprint::of(&pay);
    let entry = QuarantineEntry::new("m-1", "{}", "currency_mismatch", "a reason");
    let intent = ActionIntent {
        action_id: "act-1".into(),
        account_id: open.account_id.clone(),
        event_id: "evt-1".into(),
        payload: serde_json::json!({}),
    };
    let effects = [
        Effect::Apply(&opened),
        Effect::Apply(&paid),
        Effect::Stale,
        Effect::Park,
        Effect::Reject(entry),
        Effect::Intent(Some(&intent)),
        Effect::Intent(None),
        Effect::Confirm,
    ];
    let store = store();
    for effect in effects {
        let announced = effect.items();
        let unit = UnitOfWork {
            source: &pay.source,
            event_type: "PAYMENT_SETTLED",
            account_id: &pay.account_id,
            fingerprint: &fingerprint,
            released: false,
            effect,
        };
        let built = store
            .transaction_items(std::slice::from_ref(&unit), None, 1_700_000_000, 0)
            .expect("transaction");
        assert_eq!(built.items.len(), announced, "{:?}", unit.effect);
    }
}
