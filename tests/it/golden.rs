//! Golden vectors: every hash and id the product persists or sends, pinned to its exact value.
//! A change to serialization, canonical form or derivation would turn every redelivery into a
//! collision (fingerprints), every API retry into a 422 (request fingerprints, keys), every
//! notification into a second one (event and action ids): such a change must fail here first,
//! and ship only with a migration. Values computed once from the code and reviewed by hand.

use chrono::{TimeZone, Utc};
use integration_tests::Engine;
use integration_tests::api_gateway::event;
use integration_tests::servicing::{Servicing, fixture};
use payments_api::{IdempotencyKey, PaymentsApi, Principal};
use serde_json::{Value, json};
use servicing_domain::{AccountId, DomainEvent, Fingerprint, ServicingEvent, SourceRef};

/// `(sample file, line index, fingerprint)`: the contract's sample streams as consumed.
const FINGERPRINTS: &[(&str, usize, &str)] = &[
    (
        "basic.jsonl",
        0,
        "sha256:faf6605c0561d8ba3486d68da809dc64fec2e375746fd0877da483ef3c9484eb",
    ),
    (
        "basic.jsonl",
        1,
        "sha256:a52e28b283ebe1e57746e5e19196e1184914bffae9c461dcaca167be2e947112",
    ),
    (
        "basic.jsonl",
        2,
        "sha256:b539a284df6d984c9e694590fd070ea42ca288dbae00ebc92a04ea14c09cb8ce",
    ),
    (
        "basic.jsonl",
        3,
        "sha256:b18b2f4915428bc2e955ea2556d399fedb63b6bd51c064f832d669cb230f24aa",
    ),
    (
        "basic.jsonl",
        4,
        "sha256:bdd75d2aa042612e50aa87e8bdc0a995e32962ed8a70c2fd9cae61a69ed34bd5",
    ),
    (
        "basic.jsonl",
        5,
        "sha256:2029b3ed380dd7b4c465aa85c9b53e28ea2329d467e22d8407362383bc3366c7",
    ),
    (
        "basic.jsonl",
        6,
        "sha256:3917a23b5f7de325847f23be6cb774a91a6a37656f7b2abedd8b865c2d4064f9",
    ),
    (
        "basic.jsonl",
        7,
        "sha256:33b333e9d078b53b9d4513fbfd14b00e3915cdd4b3d8b0116effd60559418d05",
    ),
    (
        "basic.jsonl",
        8,
        "sha256:1b783a0b496011259c9978942d36054fbba0dfe290fc4838d52a6bb26293182d",
    ),
    (
        "basic.jsonl",
        9,
        "sha256:f57b157cfec2b6bb8e2c2d509d9da3ec80671628516b34e49380a4bfec40ca27",
    ),
    (
        "aging.jsonl",
        0,
        "sha256:4e5a7ad337847293e2cff6250f373747f82b66beea2ed17091c4e31d2d9041c9",
    ),
    (
        "aging.jsonl",
        1,
        "sha256:cba04fd890e7c9390c0175a63fccf6f0dc1fd5d07a6413c9f9fb6a6374eccde4",
    ),
    (
        "aging.jsonl",
        2,
        "sha256:98a63d57d653dec8c5e9d547def618eb5187197296f07811afcaa9e49e0f33c0",
    ),
    (
        "aging.jsonl",
        3,
        "sha256:9aab17406364ecbe93703110389db6eaf59e7d99b494cb846b42229f4d370346",
    ),
    (
        "aging.jsonl",
        4,
        "sha256:534bb46b5ae11cf30946e3c517e6a533d7963ec573800107a9c1e1e2cdb820a5",
    ),
    (
        "aging.jsonl",
        5,
        "sha256:534bb46b5ae11cf30946e3c517e6a533d7963ec573800107a9c1e1e2cdb820a5",
    ),
    (
        "aging.jsonl",
        6,
        "sha256:8dab88e41b596c894156e879b3f6f16c99120d63cdd562b88a2dba9e89cb3de4",
    ),
    (
        "aging.jsonl",
        7,
        "sha256:99ec6fbb39c72ea689059516c5e9ae4f3455ff2287211d51b3e27ce753cd6d11",
    ),
    (
        "aging.jsonl",
        8,
        "sha256:f7fd8aa1bb922292ea31e2f6e78a629fa387131dda66d01e2fe5a062b1f9e5ed",
    ),
];

#[test]
fn the_fingerprints_of_the_contract_samples_never_change() {
    let mut found = Vec::new();
    for name in ["basic.jsonl", "aging.jsonl"] {
        for (i, line) in fixture(name)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
        {
            let event = ServicingEvent::decode(line.as_bytes()).expect("a sample decodes");
            found.push((name, i, Fingerprint::of(&event).as_str().to_owned()));
        }
    }
    let pinned: Vec<(&str, usize, String)> = FINGERPRINTS
        .iter()
        .map(|(n, i, f)| (*n, *i, (*f).to_owned()))
        .collect();
    assert_eq!(found, pinned, "{found:#?}");
}

#[test]
fn the_derived_ids_and_keys_never_change() {
    let trigger = SourceRef {
        system: "psp".into(),
        event_id: "p-1".into(),
    };
    let account = AccountId::parse("acc_1").expect("account");
    let at = Utc.with_ymd_and_hms(2026, 10, 20, 0, 0, 0).unwrap();
    let applied = DomainEvent::new("PaymentApplied", &account, &trigger, at, json!({}));
    let changed = DomainEvent::new("DelinquencyChanged", &account, &trigger, at, json!({}));
    let principal = Principal::new("arn:aws:iam::111122223333:user/alice").expect("principal");
    let key = IdempotencyKey::parse(Some(b"order-7781")).expect("key");
    let found = json!({
        "evt PaymentApplied": applied.event_id,
        "evt DelinquencyChanged": changed.event_id,
        "claim key": servicing_store::items::claim_key("account-state", &trigger).0,
        "principal scope": principal.scope(),
        "principal sourceSystem": principal.source_system(),
        "operation id": payments_api::operation_id(&principal, &key),
        "idempotency record key": servicing_store::items::idempotency_key(&principal.scope(), &payments_api::operation_id(&principal, &key)).0,
        "content key": integration_tests::servicing::content_keyer().key(&account_state::ContentParts { account_id: "acc_1".into(), amount_minor: Some(2500), currency: Some("EUR".into()), event_time: "2026-11-02T10:00:00Z".into(), reference: Some("INV-7".into()) }),
        "dedup id": servicing_ops::replay::Addressing::of(r#"{"sourceSystem":"psp","sourceEventId":"p-1","accountId":"acc_1"}"#).deduplication_id,
        "dedup id, colon system": servicing_ops::replay::Addressing::of(r#"{"sourceSystem":"api:x","sourceEventId":"p-1","accountId":"acc_1"}"#).deduplication_id,
    });
    // Each checked by hand against its definition (e.g. `evt_` = the first 32 hex of
    // sha256("PaymentApplied\npsp\np-1"); the principal scope = the first 32 hex of
    // sha256(its ARN); the content key = the first 8 hex of sha256("content-key-id\n" + the
    // tests' secret), ':', then `openssl dgst -sha256 -hmac <secret>` of
    // "acc_1|2500|EUR|2026-11-02T10:00:00Z|INV-7").
    let pinned = json!({
        "claim key": "CLAIM#account-state#psp#p-1",
        "content key": "df8218ce:5e28d3d6cb6e6b88740988fcd4eee1153d241f32e259da0fd7cd91546f95a90b",
        "dedup id": "psp:p-1",
        "dedup id, colon system": "#id:sha256:5127bd9db0540a87136d6d2629a957563a8dd5e66771576fe912167c1d84813e",
        "evt DelinquencyChanged": "evt_f690e595e9668db4b0c876d6aafd00fa",
        "evt PaymentApplied": "evt_20323a62cc828c4329e9d87ad9d59fdf",
        "idempotency record key": "IDEMPOTENCY#5778c30d3fe8c123cb2ab0d5a82c81b6#op_3d1b1e8a1294bc15d53f9bbf",
        "operation id": "op_3d1b1e8a1294bc15d53f9bbf",
        "principal scope": "5778c30d3fe8c123cb2ab0d5a82c81b6",
        "principal sourceSystem": "api:5778c30d3fe8c123cb2ab0d5a82c81b6"
    });
    assert_eq!(
        found,
        pinned,
        "{}",
        serde_json::to_string_pretty(&found).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_api_operation_id_and_request_fingerprint_never_change() {
    let servicing = Servicing::new(Engine::DynamoDbLocal).await;
    let open = json!({"sourceSystem": "core", "sourceEventId": "open-golden", "eventType": "LOAN_OPENED",
        "accountId": "acc_golden", "eventTime": "2026-10-01T09:00:00Z", "principalMinor": 100_000, "currency": "EUR"});
    let handler = servicing.handler();
    handler
        .process(&[integration_tests::servicing::sqs_message(
            "open",
            &open.to_string(),
            1,
        )])
        .await;
    let api = PaymentsApi::new(servicing.store("payments-api"));
    let body = json!({"accountId": "acc_golden", "amountMinor": 1234, "currency": "EUR",
        "reference": "INV-1", "eventTime": "2026-10-02T10:00:00Z"});
    let response = api
        .handle(event(
            "POST",
            "/v1/payments",
            "POST /v1/payments",
            Some("arn:aws:iam::111122223333:user/alice"),
            Some("golden-1"),
            Some(&body.to_string()),
        ))
        .await;
    assert_eq!(response.status().as_u16(), 202);
    let answer: Value = serde_json::from_slice(response.body()).expect("json");
    let record = servicing
        .records::<servicing_store::schema::IdempotencyRecord>("IDEMPOTENCY")
        .await
        .pop()
        .expect("the key's record");
    let found =
        json!({"operationId": answer["operationId"], "requestFingerprint": record.fingerprint});
    // `op_` = the first 24 hex of sha256(principal scope + "\n" + key), checked by hand.
    let pinned = json!({"operationId": "op_05a1373bc4838bda426e837b",
        "requestFingerprint": "sha256:59c24a5e6eee7be697ad8c590855acc02435e5cd2d209ae7eb40810a3383297d"});
    assert_eq!(found, pinned, "{found}");
}
