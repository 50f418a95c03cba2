//! The contract's business rules, one scenario each.

mod common;

use common::{event, opened};
use serde_json::{Value, json};
use servicing_domain::{Bucket, Disposition, Ledger, ServicingEvent, apply, outbox::detail_types};

fn ingest_all(ledger: &mut Ledger, events: &[Value]) -> Vec<Disposition> {
    events
        .iter()
        .map(|e| ledger.ingest(e.to_string().as_bytes()))
        .collect()
}

fn account(ledger: &Ledger) -> servicing_domain::LoanAccount {
    let id = servicing_domain::AccountId::parse("acc_1").expect("id");
    ledger.account(&id).expect("account exists").clone()
}

fn pay(id: &str, time: &str, amount: i64) -> Value {
    event(
        id,
        "PAYMENT_SETTLED",
        time,
        json!({"amountMinor": amount, "currency": "EUR"}),
    )
}

fn reverse(id: &str, time: &str, amount: i64, of: &str) -> Value {
    event(
        id,
        "PAYMENT_REVERSED",
        time,
        json!({"amountMinor": amount, "currency": "EUR",
               "reversalOf": {"sourceSystem": "test", "sourceEventId": of}}),
    )
}

fn due(no: u32, due_date: &str, principal: i64, interest: i64) -> Value {
    event(
        &format!("due-{no}"),
        "INSTALLMENT_DUE",
        &format!("{due_date}T00:00:00Z"),
        json!({"installmentNo": no, "dueDate": due_date, "principalMinor": principal, "interestMinor": interest}),
    )
}

fn quarantine_reason(d: &Disposition) -> &str {
    match d {
        Disposition::Quarantined { reason } => reason,
        other => panic!("expected quarantine, got {other:?}"),
    }
}

#[test]
fn when_a_reversal_arrives_before_its_payment_should_park_it_and_apply_it_right_after() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
            pay("p1", "2026-09-02T00:00:00Z", 5_000),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
        ],
    );
    assert!(matches!(&d[1], Disposition::Parked(why) if why.code() == "reversal_target_missing"));
    assert_eq!(
        d[3],
        Disposition::Duplicate,
        "a parked fact, once applied, is claimed"
    );
    let c = ledger.counts();
    assert_eq!(
        (c.applied, c.parked, c.released, c.quarantined),
        (3, 1, 1, 0)
    );
    assert!(c.balances());
    assert_eq!(account(&ledger).principal_outstanding_minor, 100_000);
    assert_eq!(ledger.parked().count(), 0);
}

#[test]
fn when_the_reversal_target_never_arrives_should_quarantine_it_after_the_park_retention() {
    let mut ledger = Ledger::new();
    let stream = [
        opened("2026-09-01T00:00:00Z", 100_000).to_string(),
        reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p-missing").to_string(),
    ];
    ledger.replay(stream.iter().map(|s| s.as_bytes()));
    assert_eq!(ledger.parked().count(), 1);
    assert_eq!(ledger.expire_parked(0), 0, "not older than the cutoff yet");
    assert_eq!(ledger.expire_parked(1), 1);
    assert!(
        ledger.quarantine()[0]
            .reason
            .starts_with("awaited_fact_missing")
    );
    assert!(ledger.quarantine()[0].reason.contains("test:p-missing"));
    assert!(
        ledger.quarantine()[0].raw_body.contains("p-missing"),
        "raw body is kept"
    );
    // Its claim is released: a resend can still apply once the payment is there.
    let d = ingest_all(
        &mut ledger,
        &[
            pay("p-missing", "2026-09-02T00:00:00Z", 5_000),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p-missing"),
        ],
    );
    assert_eq!(d, [Disposition::Applied, Disposition::Applied]);
}

#[test]
fn when_events_arrive_before_their_opening_should_park_them_and_apply_them_in_order_after_it() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            pay("p1", "2026-09-02T00:00:00Z", 5_000),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
            opened("2026-09-01T00:00:00Z", 100_000),
        ],
    );
    assert!(matches!(&d[0], Disposition::Parked(why) if why.code() == "account_not_opened"));
    assert!(matches!(&d[1], Disposition::Parked(_)));
    assert_eq!(d[2], Disposition::Applied);
    let c = ledger.counts();
    assert_eq!((c.applied, c.parked, c.released), (3, 2, 2));
    assert_eq!(account(&ledger).principal_outstanding_minor, 100_000);
    assert!(ledger.allocations().all(|a| a.reversed_by.is_some()));
}

#[test]
fn when_a_reversal_refers_to_another_accounts_payment_should_reject_it() {
    let mut ledger = Ledger::new();
    let mut other_open = opened("2026-09-01T00:00:00Z", 100_000);
    other_open["accountId"] = json!("acc_2");
    other_open["sourceEventId"] = json!("open-2");
    let mut other_pay = pay("p1", "2026-09-02T00:00:00Z", 5_000);
    other_pay["accountId"] = json!("acc_2");
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            other_open,
            other_pay,
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
        ],
    );
    assert!(quarantine_reason(&d[3]).starts_with("reversal_account_mismatch"));
}

#[test]
fn when_a_payment_is_reversed_twice_by_different_reversals_should_quarantine_the_second() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            pay("p1", "2026-09-02T00:00:00Z", 5_000),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
            reverse("r2", "2026-09-04T00:00:00Z", 5_000, "p1"),
            reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
        ],
    );
    assert!(
        quarantine_reason(&d[3])
            .starts_with("already_reversed: payment test:p1 was already reversed by test:r1")
    );
    assert_eq!(d[4], Disposition::Duplicate);
    assert_eq!(account(&ledger).principal_outstanding_minor, 100_000);
}

#[test]
fn when_reversal_amount_or_currency_differs_should_quarantine() {
    let mut ledger = Ledger::new();
    let mut usd = reverse("r2", "2026-09-03T00:00:00Z", 5_000, "p1");
    usd["currency"] = json!("USD");
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            pay("p1", "2026-09-02T00:00:00Z", 5_000),
            reverse("r1", "2026-09-03T00:00:00Z", 4_000, "p1"),
            usd,
        ],
    );
    assert!(quarantine_reason(&d[2]).starts_with("reversal_amount_mismatch"));
    assert!(
        quarantine_reason(&d[3]).starts_with("currency_mismatch: currency USD differs from EUR")
    );
}

#[test]
fn when_the_same_identity_carries_another_payload_should_count_a_collision_and_keep_the_first() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            pay("p1", "2026-09-02T00:00:00Z", 5_000),
            pay("p1", "2026-09-02T00:00:00Z", 6_000),
        ],
    );
    assert!(matches!(&d[2], Disposition::Collision { stored, received } if stored != received));
    assert_eq!(account(&ledger).principal_outstanding_minor, 95_000);
    let q = &ledger.quarantine()[0];
    assert!(q.reason.starts_with("collision: stored sha256:"));
    assert!(q.raw_body.contains("6000"));
}

#[test]
fn when_limits_arrive_out_of_sequence_should_apply_only_newer_ones() {
    let limit = |id: &str, seq: u64, amount: i64| {
        event(
            id,
            "CREDIT_LIMIT_SET",
            "2026-09-05T00:00:00Z",
            json!({"creditLimitMinor": amount, "currency": "EUR", "sequence": seq}),
        )
    };
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            limit("l3", 3, 300),
            limit("l2", 2, 200),
            limit("l3b", 3, 333),
            limit("l4", 4, 400),
        ],
    );
    assert_eq!(d[2], Disposition::Stale);
    assert_eq!(d[3], Disposition::Stale);
    assert_eq!(account(&ledger).credit_limit_minor, Some(400));
}

#[test]
fn when_arrears_age_past_30_days_should_emit_delinquency_changes_and_cure_on_payment() {
    let mut ledger = Ledger::new();
    let interest = |id: &str, time: &str| {
        event(
            id,
            "INTEREST_ACCRUED",
            time,
            json!({"amountMinor": 100, "currency": "EUR"}),
        )
    };
    ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            due(1, "2026-10-01", 8_000, 1_000),
            interest("i1", "2026-10-31T00:00:00Z"),   // dpd 30
            interest("i2", "2026-12-01T00:00:00Z"),   // dpd 61
            pay("p1", "2026-12-02T00:00:00Z", 5_000), // partial: installment still unpaid
            pay("p2", "2026-12-03T00:00:00Z", 5_000), // pays it off
        ],
    );
    let changes: Vec<(String, String, u64, String)> = ledger
        .outbox()
        .iter()
        .filter(|e| e.detail_type == detail_types::DELINQUENCY_CHANGED)
        .map(|e| {
            (
                e.payload["fromBucket"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e.payload["toBucket"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e.payload["dpd"].as_u64().unwrap_or_default(),
                e.trigger.event_id.clone(),
            )
        })
        .collect();
    let expected = [
        ("CURRENT", "DPD_30_59", 30, "i1"),
        ("DPD_30_59", "DPD_60_89", 61, "i2"),
        ("DPD_60_89", "CURRENT", 0, "p2"),
    ];
    assert_eq!(changes.len(), expected.len(), "{changes:?}");
    for (got, want) in changes.iter().zip(expected) {
        assert_eq!(
            (got.0.as_str(), got.1.as_str(), got.2, got.3.as_str()),
            want
        );
    }
    let a = account(&ledger);
    assert_eq!((a.dpd, a.delinquency_bucket), (0, Bucket::Current));
}

#[test]
fn when_a_reversal_undoes_an_installment_payment_should_restore_arrears() {
    let mut ledger = Ledger::new();
    ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            due(1, "2026-10-01", 8_000, 1_000),
            pay("p1", "2026-10-05T00:00:00Z", 9_000),
            reverse("r1", "2026-10-20T00:00:00Z", 9_000, "p1"),
        ],
    );
    let a = account(&ledger);
    assert_eq!(a.installments[0].paid_minor, 0);
    assert_eq!((a.dpd, a.delinquency_bucket), (19, Bucket::Dpd1To29));
    assert_eq!(a.interest_outstanding_minor, 1_000);
}

#[test]
fn when_events_conflict_with_the_account_should_reject_with_a_code() {
    let mut ledger = Ledger::new();
    let mut second_open = opened("2026-09-02T00:00:00Z", 5);
    second_open["sourceEventId"] = json!("open-again");
    let mut usd_fee = event(
        "f1",
        "FEE_ASSESSED",
        "2026-09-03T00:00:00Z",
        json!({"amountMinor": 100, "currency": "USD", "feeType": "LATE_FEE"}),
    );
    let mut dup_installment = due(1, "2026-10-01", 1, 1);
    dup_installment["sourceEventId"] = json!("due-1-again");
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            second_open,
            due(1, "2026-10-01", 1, 1),
            dup_installment,
            {
                usd_fee["accountId"] = json!("acc_1");
                usd_fee
            },
        ],
    );
    assert!(quarantine_reason(&d[1]).starts_with("account_exists"));
    assert!(quarantine_reason(&d[3]).starts_with("installment_exists"));
    assert!(quarantine_reason(&d[4]).starts_with("currency_mismatch"));
}

#[test]
fn when_an_outcome_is_recomputed_should_mint_the_same_outbox_ids() {
    let e = ServicingEvent::decode(opened("2026-09-01T00:00:00Z", 1).to_string().as_bytes())
        .expect("valid");
    let ids = |o: servicing_domain::Outcome| match o {
        servicing_domain::Outcome::Applied(a) => a
            .outbox
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ids(apply(None, &e, None)), ids(apply(None, &e, None)));
}

#[test]
fn when_an_event_is_dated_beyond_the_skew_should_quarantine_it_unclaimed() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-09-05T00:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc);
    let mut ledger = Ledger::with_clock(now, servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW);
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            pay("p1", "2099-01-01T00:00:00Z", 5_000),
            pay("p1", "2026-09-05T12:00:00Z", 5_000),
            due(1, "2026-08-01", 100, 10),
        ],
    );
    assert!(quarantine_reason(&d[1]).starts_with("event_time_in_future"));
    assert_eq!(
        d[2],
        Disposition::Applied,
        "not claimed: the corrected resend applies"
    );
    assert!(quarantine_reason(&d[3]).starts_with("due_before_opening"));
    assert_eq!(account(&ledger).dpd, 0);
}

fn fee(id: &str, time: &str, amount: i64) -> Value {
    event(
        id,
        "FEE_ASSESSED",
        time,
        json!({"amountMinor": amount, "currency": "EUR", "feeType": "LATE_FEE"}),
    )
}

#[test]
fn when_a_reversal_names_an_applied_fee_or_reversal_should_quarantine_it_at_once() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            fee("f1", "2026-09-02T00:00:00Z", 500),
            pay("p1", "2026-09-03T00:00:00Z", 5_000),
            reverse("r1", "2026-09-04T00:00:00Z", 5_000, "p1"),
            reverse("x1", "2026-09-05T00:00:00Z", 500, "f1"),
            reverse("x2", "2026-09-05T00:00:00Z", 5_000, "r1"),
        ],
    );
    let why = quarantine_reason(&d[4]);
    assert!(
        why.starts_with("reversal_target_not_a_payment") && why.contains("test:f1"),
        "{why}"
    );
    assert!(why.contains("FEE_ASSESSED"), "{why}");
    let why = quarantine_reason(&d[5]);
    assert!(
        why.starts_with("reversal_target_not_a_payment") && why.contains("PAYMENT_REVERSED"),
        "{why}"
    );
    assert_eq!(ledger.parked().count(), 0, "never parked");
    let a = account(&ledger);
    assert_eq!(
        (a.fees_outstanding_minor, a.principal_outstanding_minor),
        (500, 100_000)
    );
}

#[test]
fn when_a_reversal_parked_on_a_fee_sees_the_fee_apply_should_release_and_reject_it() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            reverse("x1", "2026-09-05T00:00:00Z", 500, "f1"),
            fee("f1", "2026-09-02T00:00:00Z", 500),
        ],
    );
    assert!(matches!(&d[1], Disposition::Parked(why) if why.code() == "reversal_target_missing"));
    assert_eq!(d[2], Disposition::Applied);
    assert_eq!(ledger.parked().count(), 0, "released, not parked again");
    let c = ledger.counts();
    assert_eq!(
        (c.applied, c.parked, c.released, c.quarantined),
        (2, 1, 1, 1)
    );
    assert!(c.balances());
    let q = &ledger.quarantine()[0];
    assert!(
        q.reason.starts_with("reversal_target_not_a_payment"),
        "{}",
        q.reason
    );
    assert_eq!(account(&ledger).fees_outstanding_minor, 500);
}

#[test]
fn when_an_opening_or_installment_comes_back_unclaimed_should_be_already_applied() {
    let decode = |v: &Value| ServicingEvent::decode(v.to_string().as_bytes()).expect("valid");
    let open = decode(&opened("2026-09-01T00:00:00Z", 100_000));
    let servicing_domain::Outcome::Applied(opened_state) = apply(None, &open, None) else {
        panic!("opens")
    };
    let account = opened_state.account;
    // The same fact again (its claim expired): a duplicate, nothing to write.
    assert_eq!(
        apply(Some(&account), &open, None),
        servicing_domain::Outcome::AlreadyApplied
    );
    // Another opening (other identity, or other payload) is still refused.
    let mut other_id = opened("2026-09-01T00:00:00Z", 100_000);
    other_id["sourceEventId"] = json!("open-2");
    let mut other_payload = opened("2026-09-01T00:00:00Z", 100_001);
    other_payload["sourceEventId"] = json!("open");
    for other in [other_id, other_payload] {
        assert!(matches!(
            apply(Some(&account), &decode(&other), None),
            servicing_domain::Outcome::Rejected(r) if r.code == "account_exists"
        ));
    }

    let bill = decode(&due(1, "2026-10-01", 8_000, 1_000));
    let servicing_domain::Outcome::Applied(billed) = apply(Some(&account), &bill, None) else {
        panic!("bills")
    };
    let account = billed.account;
    assert_eq!(
        apply(Some(&account), &bill, None),
        servicing_domain::Outcome::AlreadyApplied
    );
    let mut rebill = due(1, "2026-10-01", 8_000, 1_000);
    rebill["sourceEventId"] = json!("due-1-again");
    let other_amount = due(1, "2026-10-01", 8_000, 1_001);
    for other in [rebill, other_amount] {
        assert!(matches!(
            apply(Some(&account), &decode(&other), None),
            servicing_domain::Outcome::Rejected(r) if r.code == "installment_exists"
        ));
    }
}

#[test]
fn when_an_opening_or_installment_is_resent_after_its_claim_expired_should_count_a_duplicate() {
    let mut ledger = Ledger::new();
    let stream = [
        opened("2026-09-01T00:00:00Z", 100_000),
        due(1, "2026-10-01", 8_000, 1_000),
    ];
    ingest_all(&mut ledger, &stream);
    let before = account(&ledger);
    for id in ["open", "due-1"] {
        let source = servicing_domain::SourceRef::new("test", id).expect("source");
        assert!(ledger.expire_claim(&source));
    }
    let mut rebill = due(1, "2026-10-01", 8_000, 1_000);
    rebill["sourceEventId"] = json!("due-1-again");
    let mut reopen = opened("2026-09-01T00:00:00Z", 100_000);
    reopen["sourceEventId"] = json!("open-again");
    let d = ingest_all(
        &mut ledger,
        &[stream[0].clone(), stream[1].clone(), rebill, reopen],
    );
    assert_eq!(d[..2], [Disposition::Duplicate, Disposition::Duplicate]);
    assert!(quarantine_reason(&d[2]).starts_with("installment_exists"));
    assert!(quarantine_reason(&d[3]).starts_with("account_exists"));
    assert_eq!(account(&ledger), before, "no write");
    assert_eq!(ledger.outbox().len(), 2, "no second domain event");
}

#[test]
fn when_a_reversal_is_resent_after_its_claim_expired_should_judge_its_payload() {
    let mut ledger = Ledger::new();
    let stream = [
        opened("2026-09-01T00:00:00Z", 100_000),
        pay("p1", "2026-09-02T00:00:00Z", 5_000),
        reverse("r1", "2026-09-03T00:00:00Z", 5_000, "p1"),
    ];
    ingest_all(&mut ledger, &stream);
    let before = account(&ledger);
    let reversal = servicing_domain::SourceRef::new("test", "r1").expect("source");
    assert!(ledger.expire_claim(&reversal));
    // Another payload under the reversal's identity: only the payment's mark remembers it.
    let other = reverse("r1", "2026-09-04T00:00:00Z", 5_000, "p1");
    let d = ingest_all(&mut ledger, &[other]);
    assert!(
        matches!(&d[0], Disposition::Collision { stored, received } if stored.as_str() != received.as_str()),
        "{d:?}"
    );
    let quarantined = ledger.quarantine().last().expect("quarantined");
    assert!(
        quarantined.reason.starts_with("collision"),
        "{}",
        quarantined.reason
    );
    // Its own payload again: a duplicate (the resend's claim expired too).
    assert!(ledger.expire_claim(&reversal));
    let d = ingest_all(&mut ledger, &[stream[2].clone()]);
    assert_eq!(d, [Disposition::Duplicate]);
    assert_eq!(account(&ledger), before, "no write");
}

#[test]
fn when_a_reversal_waits_for_a_fee_applied_on_another_account_should_quarantine_it() {
    let mut ledger = Ledger::new();
    let mut other_open = opened("2026-09-01T00:00:00Z", 100_000);
    other_open["accountId"] = json!("acc_2");
    other_open["sourceEventId"] = json!("open-2");
    let mut other_fee = fee("f1", "2026-09-02T00:00:00Z", 500);
    other_fee["accountId"] = json!("acc_2");
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T00:00:00Z", 100_000),
            reverse("x1", "2026-09-05T00:00:00Z", 500, "f1"),
            other_open,
            other_fee,
        ],
    );
    assert!(matches!(&d[1], Disposition::Parked(_)));
    // The reconciler quarantines it whatever its age.
    assert_eq!(ledger.expire_parked(i64::MIN), 1);
    let q = &ledger.quarantine()[0];
    assert!(
        q.reason.starts_with("reversal_target_not_a_payment") && q.reason.contains("test:f1"),
        "{}",
        q.reason
    );
    assert_eq!(ledger.parked().count(), 0);
    // And a reversal naming it now is refused at once.
    let d = ingest_all(
        &mut ledger,
        &[reverse("x2", "2026-09-06T00:00:00Z", 500, "f1")],
    );
    assert!(quarantine_reason(&d[0]).starts_with("reversal_target_not_a_payment"));
}
