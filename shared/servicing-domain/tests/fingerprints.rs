//! Pinned fingerprints: a fact's fingerprint is stored with its claim for weeks, so changing
//! the canonical form of an existing kind would turn every redelivery into a collision.

use servicing_domain::{Fingerprint, ServicingEvent};

/// One event of each kind and its fingerprint as computed before `BUSINESS_DAY_CLOSED` existed.
const PINNED: [(&str, &str); 8] = [
    (
        r#"{"sourceSystem":"core-banking","sourceEventId":"open-1","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":120000,"currency":"EUR","creditLimitMinor":200000}"#,
        "sha256:433e70824c572f7e8b5f3ca651db78871dddb3bbf224a70237c92d5a8891f614",
    ),
    (
        r#"{"sourceSystem":"core-banking","sourceEventId":"open-2","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":120000,"currency":"EUR"}"#,
        "sha256:a6bd1fbee0f67a8371ba14c2babbf57534c82702c638fa1071707a6aeb86612a",
    ),
    (
        r#"{"sourceSystem":"scheduler","sourceEventId":"due-1","eventType":"INSTALLMENT_DUE","accountId":"acc_1","eventTime":"2026-09-25T00:00:00Z","installmentNo":1,"dueDate":"2026-10-01","principalMinor":10000,"interestMinor":1200}"#,
        "sha256:fb4ae938719d3825e257c92a78d3789eccc83e5694fc26dfac51b14d66c6dcea",
    ),
    (
        r#"{"sourceSystem":"accrual","sourceEventId":"i-1","eventType":"INTEREST_ACCRUED","accountId":"acc_1","eventTime":"2026-10-15T00:00:00Z","amountMinor":500,"currency":"EUR"}"#,
        "sha256:681fc449176441c336697f1f4cb62a2ede428e90520e83931eed4dfdcf186330",
    ),
    (
        r#"{"sourceSystem":"fees","sourceEventId":"f-1","eventType":"FEE_ASSESSED","accountId":"acc_1","eventTime":"2026-10-16T00:00:00Z","amountMinor":2500,"currency":"EUR","feeType":"LATE_FEE"}"#,
        "sha256:a66cb16e2f2a807effd9227f13e717286905f479eb9dee3c50482c2360243e61",
    ),
    (
        r#"{"sourceSystem":"psp","sourceEventId":"p1","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-10-20T10:15:00.250Z","amountMinor":25000,"currency":"EUR"}"#,
        "sha256:30919254a8d69fc13788ef4b7432b0da4341f06d6a532062f8983303ad26ef1c",
    ),
    (
        r#"{"sourceSystem":"psp","sourceEventId":"r1","eventType":"PAYMENT_REVERSED","accountId":"acc_1","eventTime":"2026-10-21T10:15:00+02:00","amountMinor":25000,"currency":"EUR","reversalOf":{"sourceSystem":"psp","sourceEventId":"p1"}}"#,
        "sha256:b0c37a2e7c40c5c7a2aaa61b9dc404866bba787a3494d46ae8f5256659132913",
    ),
    (
        r#"{"sourceSystem":"limits","sourceEventId":"l1","eventType":"CREDIT_LIMIT_SET","accountId":"acc_1","eventTime":"2026-10-22T00:00:00Z","creditLimitMinor":150000,"currency":"EUR","sequence":3,"schemaVersion":1,"eventId":"x"}"#,
        "sha256:66b1e886431b7ab5620610647c466e259763f70ea9534848381bbbe96c52b653",
    ),
];

#[test]
fn when_an_existing_kind_is_fingerprinted_should_give_its_pinned_value() {
    for (body, pinned) in PINNED {
        let e = ServicingEvent::decode(body.as_bytes()).expect("valid");
        assert_eq!(Fingerprint::of(&e).as_str(), pinned, "{body}");
    }
}

const CLOSE: &str = r#"{"sourceSystem":"scheduler","sourceEventId":"close-2026-10-02-acc_5501","eventType":"BUSINESS_DAY_CLOSED","accountId":"acc_5501","eventTime":"2026-10-02T23:59:59Z","businessDate":"2026-10-02"}"#;

fn fp(body: &str) -> Fingerprint {
    Fingerprint::of(&ServicingEvent::decode(body.as_bytes()).expect("valid"))
}

#[test]
fn when_a_close_is_fingerprinted_should_cover_its_business_date() {
    let canonical = ServicingEvent::decode(CLOSE.as_bytes())
        .expect("valid")
        .canonical_json();
    assert_eq!(canonical["businessDate"], "2026-10-02");
    assert_eq!(canonical["eventType"], "BUSINESS_DAY_CLOSED");
    // Another business date under the same identity is another fact: a collision.
    assert_ne!(
        fp(CLOSE),
        fp(&CLOSE.replace(
            r#""businessDate":"2026-10-02""#,
            r#""businessDate":"2026-10-03""#
        ))
    );
    // Transport fields and key order do not count.
    let resent = CLOSE.replace('}', r#","eventId":"sqs-1","schemaVersion":1}"#);
    assert_eq!(fp(CLOSE), fp(&resent));
    assert_eq!(
        fp(CLOSE).as_str(),
        "sha256:98a63d57d653dec8c5e9d547def618eb5187197296f07811afcaa9e49e0f33c0"
    );
}
