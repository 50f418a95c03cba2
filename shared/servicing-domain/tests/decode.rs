//! Bad input gets a specific reason naming the field and the rule.

mod common;

use common::event;
use serde_json::json;
use servicing_domain::{DecodeError, EventKind, ServicingEvent};

const T: &str = "2026-10-20T10:15:00Z";

fn payment() -> serde_json::Value {
    event(
        "p1",
        "PAYMENT_SETTLED",
        T,
        json!({"amountMinor": 25000, "currency": "EUR"}),
    )
}

fn rejection(body: &str) -> String {
    match ServicingEvent::decode(body.as_bytes()) {
        Ok(e) => panic!("accepted {body}: {e:?}"),
        Err(e) => e.to_string(),
    }
}

fn with(mut base: serde_json::Value, field: &str, value: serde_json::Value) -> String {
    base[field] = value;
    base.to_string()
}

fn without(mut base: serde_json::Value, field: &str) -> String {
    base.as_object_mut().expect("object").remove(field);
    base.to_string()
}

#[test]
fn when_body_is_not_a_json_object_should_say_so() {
    assert!(rejection("{not json").starts_with("body is not valid UTF-8 JSON"));
    assert!(rejection("").starts_with("body is not valid UTF-8 JSON"));
    assert_eq!(rejection("[1,2]"), "body must be a JSON object");
    assert_eq!(rejection("\"PAYMENT\""), "body must be a JSON object");
    let invalid_utf8 = [b'{', 0xff, b'}'];
    assert!(matches!(
        ServicingEvent::decode(&invalid_utf8),
        Err(DecodeError::NotJson(_))
    ));
}

#[test]
fn when_a_field_is_wrong_should_name_the_field_and_the_rule() {
    let cases: Vec<(String, &str)> = vec![
        (
            without(payment(), "sourceSystem"),
            "field `sourceSystem`: is required",
        ),
        (
            with(payment(), "sourceSystem", json!("")),
            "field `sourceSystem`: must be 1..64",
        ),
        (
            with(payment(), "sourceSystem", json!("a b")),
            "field `sourceSystem`: must match",
        ),
        (
            with(payment(), "sourceEventId", json!("x".repeat(129))),
            "field `sourceEventId`: must be 1..128",
        ),
        (
            with(payment(), "sourceEventId", json!("tab\there")),
            "field `sourceEventId`: must be printable",
        ),
        (
            with(payment(), "accountId", json!(42)),
            "field `accountId`: must be a string",
        ),
        (
            with(payment(), "accountId", json!("acc/1")),
            "field `accountId`: must match",
        ),
        (
            without(payment(), "eventTime"),
            "field `eventTime`: is required",
        ),
        (
            with(payment(), "eventTime", json!("2026-10-20 10:15")),
            "field `eventTime`: must be an RFC 3339",
        ),
        (
            with(payment(), "eventTime", json!("2026-10-20T10:15:00")),
            "field `eventTime`: must be an RFC 3339",
        ),
        (
            with(payment(), "eventType", json!("PAYMENT_SETTLE")),
            "field `eventType`: unknown event type",
        ),
        (
            with(payment(), "eventType", json!(null)),
            "field `eventType`: is required",
        ),
        (
            with(payment(), "amountMinor", json!(-1)),
            "field `amountMinor`: must be an integer of minor units",
        ),
        (
            with(payment(), "amountMinor", json!(10.5)),
            "field `amountMinor`: must be an integer, not a fraction",
        ),
        (
            with(payment(), "amountMinor", json!(1.0)),
            "field `amountMinor`: must be an integer, not a fraction",
        ),
        (
            with(payment(), "amountMinor", json!("25000")),
            "field `amountMinor`: must be an integer",
        ),
        (
            with(payment(), "amountMinor", json!(1_000_000_000_000_001_i64)),
            "field `amountMinor`: must be an integer of minor units in 0..=10^15",
        ),
        (
            with(payment(), "amountMinor", json!(u64::MAX)),
            "field `amountMinor`: is too large",
        ),
        (
            without(payment(), "amountMinor"),
            "field `amountMinor`: is required",
        ),
        (
            with(payment(), "currency", json!("eur")),
            "field `currency`: must be an ISO 4217",
        ),
        (
            without(payment(), "currency"),
            "field `currency`: is required",
        ),
        (
            with(payment(), "schemaVersion", json!(2)),
            "field `schemaVersion`: major version 2 is not supported",
        ),
        (
            with(payment(), "schemaVersion", json!("1")),
            "field `schemaVersion`: must be an integer",
        ),
        (
            with(payment(), "eventId", json!(7)),
            "field `eventId`: must be a string",
        ),
    ];
    for (body, want) in cases {
        let got = rejection(&body);
        assert!(
            got.starts_with(want),
            "for {body}\n  got:  {got}\n  want: {want}…"
        );
    }
}

#[test]
fn when_type_specific_fields_are_wrong_should_name_them() {
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (
            event(
                "i",
                "INSTALLMENT_DUE",
                T,
                json!({"installmentNo": 0, "dueDate": "2026-10-01", "principalMinor": 1, "interestMinor": 1}),
            ),
            "field `installmentNo`: must be an integer in 1..=",
        ),
        (
            event(
                "i",
                "INSTALLMENT_DUE",
                T,
                json!({"installmentNo": 1, "dueDate": "2026-02-30", "principalMinor": 1, "interestMinor": 1}),
            ),
            "field `dueDate`: must be a calendar date",
        ),
        (
            event(
                "i",
                "INSTALLMENT_DUE",
                T,
                json!({"installmentNo": 1, "dueDate": "2026-10-01", "interestMinor": 1}),
            ),
            "field `principalMinor`: is required",
        ),
        (
            event(
                "f",
                "FEE_ASSESSED",
                T,
                json!({"amountMinor": 1, "currency": "EUR", "feeType": "late fee"}),
            ),
            "field `feeType`: must match",
        ),
        (
            event(
                "r",
                "PAYMENT_REVERSED",
                T,
                json!({"amountMinor": 1, "currency": "EUR"}),
            ),
            "field `reversalOf`: is required",
        ),
        (
            event(
                "r",
                "PAYMENT_REVERSED",
                T,
                json!({"amountMinor": 1, "currency": "EUR", "reversalOf": "p1"}),
            ),
            "field `reversalOf`: must be an object",
        ),
        (
            event(
                "r",
                "PAYMENT_REVERSED",
                T,
                json!({"amountMinor": 1, "currency": "EUR", "reversalOf": {"sourceSystem": "psp"}}),
            ),
            "field `reversalOf`: needs a string sourceEventId",
        ),
        (
            event(
                "l",
                "CREDIT_LIMIT_SET",
                T,
                json!({"creditLimitMinor": 1, "currency": "EUR", "sequence": 0}),
            ),
            "field `sequence`: must be an integer in 1..=",
        ),
        (
            event(
                "l",
                "CREDIT_LIMIT_SET",
                T,
                json!({"creditLimitMinor": 1, "currency": "EUR"}),
            ),
            "field `sequence`: is required",
        ),
        (
            event(
                "o",
                "LOAN_OPENED",
                T,
                json!({"principalMinor": 1, "currency": "EUR", "creditLimitMinor": -5}),
            ),
            "field `creditLimitMinor`: must be an integer of minor units",
        ),
    ];
    for (body, want) in cases {
        let body = body.to_string();
        let got = rejection(&body);
        assert!(
            got.starts_with(want),
            "for {body}\n  got:  {got}\n  want: {want}…"
        );
    }
}

#[test]
fn when_the_event_is_valid_should_decode_typed_values() {
    let e = ServicingEvent::decode(payment().to_string().as_bytes()).expect("valid");
    assert_eq!(e.source.to_string(), "test:p1");
    assert_eq!(e.account_id.as_str(), "acc_1");
    assert_eq!(e.business_date().to_string(), "2026-10-20");
    match e.kind {
        EventKind::PaymentSettled { amount } => {
            assert_eq!(amount.minor(), 25000);
            assert_eq!(amount.currency.as_str(), "EUR");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Unknown extra fields are tolerated (forward compatible) and do not enter the fingerprint.
    let mut extended = payment();
    extended["comment"] = json!("from batch 7");
    assert!(ServicingEvent::decode(extended.to_string().as_bytes()).is_ok());
}

#[test]
fn when_an_object_has_the_same_key_twice_should_refuse_it_as_ambiguous() {
    let base = r#""sourceSystem":"psp","sourceEventId":"d1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","currency":"EUR""#;
    let twice = format!(r#"{{{base},"amountMinor":100,"amountMinor":100000}}"#);
    assert!(matches!(
        ServicingEvent::decode(twice.as_bytes()),
        Err(DecodeError::DuplicateKey(why)) if why.contains("`amountMinor` appears twice")
    ));
    // The same key spelt with an escape is the same key.
    let escaped = format!(r#"{{{base},"amountMinor":100,"\u0061mountMinor":5}}"#);
    assert_eq!(
        ServicingEvent::decode(escaped.as_bytes())
            .map_err(|e| e.code())
            .err(),
        Some("duplicate_key")
    );
    // Nested objects too.
    let nested = format!(
        r#"{{{base},"amountMinor":100,"reversalOf":{{"sourceSystem":"a","sourceSystem":"b","sourceEventId":"x"}}}}"#
    );
    assert_eq!(
        ServicingEvent::decode(nested.as_bytes())
            .map_err(|e| e.code())
            .err(),
        Some("duplicate_key")
    );
    let once = format!(r#"{{{base},"amountMinor":100}}"#);
    assert!(ServicingEvent::decode(once.as_bytes()).is_ok());
}

#[test]
fn when_an_amount_is_not_a_plain_integer_should_say_what_is_wrong() {
    let with_amount = |amount: &str| {
        format!(
            r#"{{"sourceSystem":"psp","sourceEventId":"n1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","currency":"EUR","amountMinor":{amount}}}"#
        )
    };
    for (amount, says) in [
        ("50000.0", "without a decimal point or exponent"),
        ("1e3", "without a decimal point or exponent"),
        ("0.5", "not a fraction"),
        ("-0", "not negative (-0)"),
        ("-5", "in 0..=10^15"),
    ] {
        let why = rejection(&with_amount(amount));
        assert!(
            why.contains("`amountMinor`") && why.contains(says),
            "{amount}: {why}"
        );
    }
}

#[test]
fn when_a_currency_is_three_capitals_but_no_iso_4217_code_should_refuse_it() {
    let with_currency = |code: &str| {
        format!(
            r#"{{"sourceSystem":"psp","sourceEventId":"c1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","amountMinor":100,"currency":"{code}"}}"#
        )
    };
    for code in ["EUR", "USD", "JPY", "CHF"] {
        assert!(
            ServicingEvent::decode(with_currency(code).as_bytes()).is_ok(),
            "{code}"
        );
    }
    for code in ["ABC", "EUX", "XTS", "XXX", "XAU"] {
        let why = rejection(&with_currency(code));
        assert!(
            why.contains("`currency`") && why.contains("ISO 4217"),
            "{code}: {why}"
        );
    }
}

#[test]
fn when_a_number_is_too_large_for_its_type_should_say_too_large() {
    let with_amount = |amount: &str| {
        format!(
            r#"{{"sourceSystem":"psp","sourceEventId":"n1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","currency":"EUR","amountMinor":{amount}}}"#
        )
    };
    for amount in [
        "1e30",
        "99999999999999999999",
        "18446744073709551615",
        "9223372036854775808",
        "1.5e300",
    ] {
        let why = rejection(&with_amount(amount));
        assert!(
            why.starts_with("field `amountMinor`: is too large") && why.contains("10^15"),
            "{amount}: {why}"
        );
    }
    // In range of the type but over the contract's limit: the limit is named.
    for amount in ["1000000000000001", "9223372036854775807"] {
        assert_eq!(
            rejection(&with_amount(amount)),
            "field `amountMinor`: must be an integer of minor units in 0..=10^15",
            "{amount}"
        );
    }
    // A huge negative number is refused as negative, as any negative amount.
    let why = rejection(&with_amount("-99999999999999999999"));
    assert!(why.contains("in 0..=10^15"), "{why}");
    // Other integers too.
    let limit = |sequence: &str| {
        format!(
            r#"{{"sourceSystem":"psp","sourceEventId":"l1","eventType":"CREDIT_LIMIT_SET","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","currency":"EUR","creditLimitMinor":1,"sequence":{sequence}}}"#
        )
    };
    for sequence in ["1e30", "99999999999999999999"] {
        let why = rejection(&limit(sequence));
        assert!(
            why.starts_with("field `sequence`: is too large"),
            "{sequence}: {why}"
        );
    }
    let bill = event(
        "i",
        "INSTALLMENT_DUE",
        T,
        json!({"installmentNo": 1, "dueDate": "2026-10-01", "principalMinor": 1, "interestMinor": 1}),
    )
    .to_string()
    .replace(r#""installmentNo":1"#, r#""installmentNo":1e30"#);
    let why = rejection(&bill);
    assert!(
        why.starts_with("field `installmentNo`: is too large"),
        "{why}"
    );
}

#[test]
fn when_a_body_starts_with_a_utf8_bom_should_decode_it_as_without() {
    let plain = payment().to_string();
    let mut with_bom = vec![0xEF, 0xBB, 0xBF];
    with_bom.extend_from_slice(plain.as_bytes());
    let decoded = ServicingEvent::decode(&with_bom).expect("a leading BOM is ignored");
    let without = ServicingEvent::decode(plain.as_bytes()).expect("valid");
    assert_eq!(decoded, without);
    assert_eq!(
        servicing_domain::Fingerprint::of(&decoded),
        servicing_domain::Fingerprint::of(&without)
    );
    // Only one leading BOM, and only at the start.
    let mut twice = vec![0xEF, 0xBB, 0xBF];
    twice.extend_from_slice(&with_bom);
    assert!(matches!(
        ServicingEvent::decode(&twice),
        Err(DecodeError::NotJson(_))
    ));
    let inside = plain.replacen('{', "{\u{feff}", 1);
    assert!(ServicingEvent::decode(inside.as_bytes()).is_err());
}

/// The decoding cases of the integration tests' bad-input corpus get the code and the words
/// it expects from the decoder alone (the business cases need an account: not checked here).
#[test]
fn when_the_bad_input_corpus_is_decoded_should_give_each_decode_case_its_code_and_words() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/bad-input.jsonl"
    );
    let corpus = std::fs::read_to_string(path).expect("corpus");
    let mut checked = 0;
    for line in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("corpus line");
        let code = case["code"].as_str().expect("code");
        if ![
            "not_json",
            "not_an_object",
            "invalid_field",
            "duplicate_key",
        ]
        .contains(&code)
        {
            continue;
        }
        let body = case["body"].as_str().expect("body");
        let words = case["reason"].as_str().expect("reason");
        match ServicingEvent::decode(body.as_bytes()) {
            Ok(_) => panic!("accepted {body}"),
            Err(e) => {
                assert_eq!(e.code(), code, "{body}");
                let reason = e.to_string();
                assert!(reason.contains(words), "{body}: {reason:?} lacks {words:?}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 30, "{checked} decode cases");
}

#[test]
fn when_a_business_day_close_is_decoded_should_require_a_business_date() {
    let close = event(
        "close-2026-10-02-acc_1",
        "BUSINESS_DAY_CLOSED",
        "2026-10-02T23:59:59Z",
        json!({"businessDate": "2026-10-02"}),
    );
    let e = ServicingEvent::decode(close.to_string().as_bytes()).expect("valid");
    let day = chrono::NaiveDate::from_ymd_opt(2026, 10, 2).expect("date");
    assert_eq!(e.kind, EventKind::BusinessDayClosed { business_date: day });
    assert_eq!(e.kind.wire_name(), "BUSINESS_DAY_CLOSED");
    assert_eq!(e.business_date(), day);
    let cases = [
        (
            without(close.clone(), "businessDate"),
            "field `businessDate`: is required",
        ),
        (
            with(close.clone(), "businessDate", json!(null)),
            "field `businessDate`: is required",
        ),
        (
            with(close.clone(), "businessDate", json!(20261002)),
            "field `businessDate`: must be a string",
        ),
        (
            with(close.clone(), "businessDate", json!("2026-02-30")),
            "field `businessDate`: must be a calendar date YYYY-MM-DD",
        ),
        (
            with(close.clone(), "businessDate", json!("2026-10-02T00:00:00Z")),
            "field `businessDate`: must be a calendar date",
        ),
        (
            with(close.clone(), "eventTime", json!("2026-10-02")),
            "field `eventTime`: must be an RFC 3339",
        ),
        (
            without(close.clone(), "accountId"),
            "field `accountId`: is required",
        ),
        (
            with(close.clone(), "schemaVersion", json!(2)),
            "field `schemaVersion`: major version 2",
        ),
    ];
    for (body, want) in cases {
        let got = rejection(&body);
        assert!(
            got.starts_with(want),
            "for {body}\n  got:  {got}\n  want: {want}…"
        );
    }
}

#[test]
fn when_a_duplicate_key_is_long_should_quote_only_its_first_64_characters() {
    let key = "k".repeat(10_000);
    let body = format!(r#"{{"{key}":1,"{key}":2}}"#);
    let Err(DecodeError::DuplicateKey(why)) = ServicingEvent::decode(body.as_bytes()) else {
        panic!("a duplicate key is refused as such");
    };
    assert!(
        why.contains(&format!("`{}` appears twice", "k".repeat(64))),
        "{why}"
    );
    assert!(why.len() < 200, "{} bytes", why.len());
}
