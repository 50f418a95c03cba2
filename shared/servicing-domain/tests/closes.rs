//! `BUSINESS_DAY_CLOSED`: a silent account still ages. The contract's "Business days close"
//! rules, one scenario each, through the ledger's deliveries (what the consumer sees), then the
//! outcomes `apply` gives and the daily job's close as the ledger runs it.

mod common;

use common::{event, fixture, lines, opened};
use serde_json::{Value, json};
use servicing_domain::{
    AccountId, Bucket, Disposition, Ledger, LoanAccount, Outcome, ServicingEvent, Staleness, apply,
    outbox::detail_types,
};

fn ingest_all(ledger: &mut Ledger, events: &[Value]) -> Vec<Disposition> {
    events
        .iter()
        .map(|e| ledger.ingest(e.to_string().as_bytes()))
        .collect()
}

fn account(ledger: &Ledger) -> LoanAccount {
    let id = AccountId::parse("acc_1").expect("id");
    ledger.account(&id).expect("account exists").clone()
}

fn date(text: &str) -> chrono::NaiveDate {
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("date")
}

/// The scheduler's close of `business_date` for `acc_1`.
fn close(business_date: &str) -> Value {
    json!({
        "sourceSystem": "scheduler",
        "sourceEventId": format!("close-{business_date}-acc_1"),
        "eventType": "BUSINESS_DAY_CLOSED",
        "accountId": "acc_1",
        "eventTime": format!("{business_date}T23:59:59Z"),
        "businessDate": business_date,
    })
}

/// Installment `no` of `principal + interest`, billed at `billed` and due on `due_date`.
fn bill(no: u32, billed: &str, due_date: &str, principal: i64, interest: i64) -> Value {
    event(
        &format!("due-{no}"),
        "INSTALLMENT_DUE",
        billed,
        json!({"installmentNo": no, "dueDate": due_date, "principalMinor": principal, "interestMinor": interest}),
    )
}

fn pay(id: &str, time: &str, amount: i64) -> Value {
    event(
        id,
        "PAYMENT_SETTLED",
        time,
        json!({"amountMinor": amount, "currency": "EUR"}),
    )
}

fn fee(id: &str, time: &str, amount: i64) -> Value {
    event(
        id,
        "FEE_ASSESSED",
        time,
        json!({"amountMinor": amount, "currency": "EUR", "feeType": "LATE_FEE"}),
    )
}

fn delinquency_changes(ledger: &Ledger) -> Vec<(String, String, u64, String)> {
    ledger
        .outbox()
        .iter()
        .filter(|e| e.detail_type == detail_types::DELINQUENCY_CHANGED)
        .map(|e| {
            let s = |k: &str| e.payload[k].as_str().unwrap_or_default().to_owned();
            (
                s("fromBucket"),
                s("toBucket"),
                e.payload["dpd"].as_u64().unwrap_or_default(),
                e.trigger.to_string(),
            )
        })
        .collect()
}

/// An opened account with 9000 due on 2026-10-01, billed on 2026-09-25 (business date then).
fn delinquent() -> Vec<Value> {
    vec![
        opened("2026-09-01T09:00:00Z", 100_000),
        bill(1, "2026-09-25T00:00:00Z", "2026-10-01", 8_000, 1_000),
    ]
}

#[test]
fn when_a_silent_account_is_closed_day_by_day_should_age_and_notify_once_at_30_days() {
    let mut ledger = Ledger::new();
    ingest_all(&mut ledger, &delinquent());
    let money_before = ledger.outbox().len();
    let d = ingest_all(
        &mut ledger,
        &[
            close("2026-10-02"),
            close("2026-10-15"),
            close("2026-10-31"),
        ],
    );
    assert_eq!(d, [const { Disposition::Applied }; 3]);
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd, a.delinquency_bucket),
        (date("2026-10-31"), 30, Bucket::Dpd30To59)
    );
    assert_eq!(
        (a.principal_outstanding_minor, a.interest_outstanding_minor),
        (100_000, 1_000),
        "no money moves"
    );
    assert_eq!(a.installments[0].paid_minor, 0);
    // A close writes no domain event of its own: only the two bucket moves.
    let written: Vec<&str> = ledger.outbox()[money_before..]
        .iter()
        .map(|e| e.detail_type.as_str())
        .collect();
    assert_eq!(written, [detail_types::DELINQUENCY_CHANGED; 2]);
    assert_eq!(
        delinquency_changes(&ledger),
        [
            (
                "CURRENT".into(),
                "DPD_1_29".into(),
                1,
                "scheduler:close-2026-10-02-acc_1".into()
            ),
            (
                "DPD_1_29".into(),
                "DPD_30_59".into(),
                30,
                "scheduler:close-2026-10-31-acc_1".into()
            ),
        ]
    );
}

#[test]
fn when_a_close_is_not_later_than_the_business_date_should_be_stale() {
    let mut ledger = Ledger::new();
    let mut stream = delinquent();
    stream.push(fee("f1", "2026-10-10T08:00:00Z", 500)); // business date 2026-10-10, dpd 9
    ingest_all(&mut ledger, &stream);
    let before = account(&ledger);
    let outbox = ledger.outbox().len();
    let d = ingest_all(
        &mut ledger,
        &[
            close("2026-10-10"),
            close("2026-10-05"),
            close("2026-09-20"),
        ],
    );
    assert_eq!(d, [const { Disposition::Stale }; 3]);
    assert_eq!(account(&ledger), before, "not applied");
    assert_eq!(ledger.outbox().len(), outbox, "nothing written");
    // A later close applies; its redelivery is a duplicate; an earlier one after it is stale.
    let d = ingest_all(
        &mut ledger,
        &[
            close("2026-10-11"),
            close("2026-10-11"),
            close("2026-10-10"),
        ],
    );
    assert_eq!(
        d,
        [
            Disposition::Applied,
            Disposition::Duplicate,
            Disposition::Duplicate
        ]
    );
    let d = ingest_all(&mut ledger, &[close("2026-10-08")]);
    assert_eq!(d, [Disposition::Stale]);
    assert_eq!(account(&ledger).dpd, 10);
    let c = ledger.counts();
    assert_eq!((c.stale, c.duplicates, c.quarantined), (4, 2, 0));
    assert!(c.balances());
}

#[test]
fn when_nothing_is_past_due_a_close_should_be_stale() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            opened("2026-09-01T09:00:00Z", 100_000),
            close("2026-09-10"), // no installment at all
            bill(1, "2026-09-25T00:00:00Z", "2026-10-01", 8_000, 1_000),
            close("2026-09-30"), // billed, not due yet
            close("2026-10-01"), // due that day: not past due yet
        ],
    );
    assert_eq!(d[1], Disposition::Stale);
    assert_eq!(d[3..], [Disposition::Stale, Disposition::Stale]);
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd),
        (date("2026-09-25"), 0),
        "a stale close does not move the business date"
    );
    // Paid in full before it is past due: the next closes find nothing to age.
    let d = ingest_all(
        &mut ledger,
        &[
            pay("p1", "2026-10-01T10:00:00Z", 9_000),
            close("2026-10-02"),
            close("2026-12-31"),
        ],
    );
    assert_eq!(
        d,
        [Disposition::Applied, Disposition::Stale, Disposition::Stale]
    );
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd, a.delinquency_bucket),
        (date("2026-10-01"), 0, Bucket::Current)
    );
    assert!(delinquency_changes(&ledger).is_empty());
    assert_eq!(ledger.counts().stale, 5);
}

#[test]
fn when_the_account_is_not_opened_a_close_should_be_stale_not_parked() {
    let mut ledger = Ledger::new();
    let d = ingest_all(
        &mut ledger,
        &[
            close("2026-10-02"),
            pay("p1", "2026-09-02T00:00:00Z", 1_000), // waits for the opening
            close("2026-10-03"),
        ],
    );
    assert_eq!(d[0], Disposition::Stale);
    assert!(matches!(d[1], Disposition::Parked(_)));
    assert_eq!(d[2], Disposition::Stale);
    assert_eq!(ledger.parked().count(), 1, "only the payment waits");
    assert!(ledger.accounts().next().is_none(), "a close opens nothing");
    let d = ingest_all(
        &mut ledger,
        &[opened("2026-09-01T09:00:00Z", 100_000), close("2026-10-02")],
    );
    assert_eq!(d, [Disposition::Applied, Disposition::Duplicate]);
    let c = ledger.counts();
    assert_eq!(
        (c.applied, c.stale, c.parked, c.released, c.duplicates),
        (2, 2, 1, 1, 1)
    );
    assert!(c.balances());
    assert_eq!(account(&ledger).principal_outstanding_minor, 99_000);
}

#[test]
fn when_a_close_keeps_the_bucket_should_apply_with_no_outbox_event() {
    let mut ledger = Ledger::new();
    ingest_all(&mut ledger, &delinquent());
    ingest_all(&mut ledger, &[close("2026-10-02")]);
    let outbox = ledger.outbox().len();
    let d = ingest_all(&mut ledger, &[close("2026-10-15")]);
    assert_eq!(d, [Disposition::Applied]);
    assert_eq!(ledger.outbox().len(), outbox);
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd, a.delinquency_bucket),
        (date("2026-10-15"), 14, Bucket::Dpd1To29)
    );
}

#[test]
fn when_an_event_is_dated_before_a_close_should_not_move_the_business_date_back() {
    let mut ledger = Ledger::new();
    ingest_all(&mut ledger, &delinquent());
    ingest_all(&mut ledger, &[close("2026-10-31")]);
    let d = ingest_all(
        &mut ledger,
        &[
            fee("f1", "2026-10-20T00:00:00Z", 500),
            pay("p1", "2026-10-21T00:00:00Z", 5_000), // fee 500, interest 1000, principal 3500
        ],
    );
    assert_eq!(d, [Disposition::Applied, Disposition::Applied]);
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd, a.delinquency_bucket),
        (date("2026-10-31"), 30, Bucket::Dpd30To59),
        "still as of the close: a late-delivered older event does not un-age arrears"
    );
    // Paid off by a payment dated before the close: cured as of the business date.
    ingest_all(&mut ledger, &[pay("p2", "2026-10-25T00:00:00Z", 4_500)]);
    let a = account(&ledger);
    assert_eq!(
        (a.business_date, a.dpd, a.delinquency_bucket),
        (date("2026-10-31"), 0, Bucket::Current)
    );
    let last = delinquency_changes(&ledger).pop().expect("a cure");
    assert_eq!(
        last,
        ("DPD_30_59".into(), "CURRENT".into(), 0, "test:p2".into())
    );
    // A later event moves it on, as always.
    ingest_all(&mut ledger, &[fee("f2", "2026-11-02T00:00:00Z", 100)]);
    assert_eq!(account(&ledger).business_date, date("2026-11-02"));
}

#[test]
fn when_the_aging_sample_is_replayed_closes_should_write_only_delinquency_changes() {
    let mut ledger = Ledger::new();
    let stream = lines(&fixture("aging.jsonl"));
    ledger.replay(stream.iter().map(|l| l.as_bytes()));
    let by_closes: Vec<&str> = ledger
        .outbox()
        .iter()
        .filter(|e| e.trigger.event_id.starts_with("close-"))
        .map(|e| e.detail_type.as_str())
        .collect();
    assert_eq!(by_closes, [detail_types::DELINQUENCY_CHANGED; 2]);
    let id = AccountId::parse("acc_5501").expect("id");
    assert_eq!(
        ledger.account(&id).expect("opened").business_date,
        date("2026-11-03"),
        "the last close was stale, the payment's date stands"
    );
}

#[test]
fn when_a_close_is_for_a_day_that_has_not_begun_should_quarantine_it_unclaimed() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-10-05T01:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc);
    let mut ledger = Ledger::with_clock(now, servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW);
    ingest_all(&mut ledger, &delinquent());
    let mut future = close("2026-12-31");
    future["eventTime"] = json!("2026-10-04T23:59:59Z");
    let d = ingest_all(
        &mut ledger,
        &[future, close("2026-10-04"), close("2026-10-05")],
    );
    match &d[0] {
        Disposition::Quarantined { reason } => {
            assert!(reason.starts_with("event_time_in_future"), "{reason}");
            assert!(reason.contains("businessDate 2026-12-31"), "{reason}");
        }
        other => panic!("expected quarantine, got {other:?}"),
    }
    assert_eq!(d[1..], [Disposition::Applied, Disposition::Applied]);
    assert_eq!(account(&ledger).dpd, 4);
}

#[test]
fn when_apply_judges_a_stale_close_should_say_why() {
    let decode = |v: &Value| ServicingEvent::decode(v.to_string().as_bytes()).expect("valid");
    let stale = |o: Outcome| match o {
        Outcome::Stale(why) => why,
        other => panic!("expected stale, got {other:?}"),
    };
    let c = decode(&close("2026-10-02"));
    assert_eq!(stale(apply(None, &c, None)), Staleness::AccountNotOpened);

    let mut ledger = Ledger::new();
    ingest_all(&mut ledger, &delinquent());
    let a = account(&ledger);
    let early = decode(&close("2026-09-25"));
    assert_eq!(
        stale(apply(Some(&a), &early, None)),
        Staleness::BusinessDate {
            business_date: date("2026-09-25"),
            account_business_date: date("2026-09-25"),
        }
    );
    let not_due = decode(&close("2026-10-01"));
    let why = stale(apply(Some(&a), &not_due, None));
    assert_eq!(
        why,
        Staleness::NothingPastDue {
            business_date: date("2026-10-01")
        }
    );
    assert_eq!(why.code(), "nothing_past_due");
    // A reversal target, a payment: a close is none, and its outcome carries no allocation.
    let Outcome::Applied(applied) = apply(Some(&a), &c, None) else {
        panic!("applies")
    };
    assert_eq!(applied.allocation, None);
    assert_eq!(applied.outbox.len(), 1);
    assert!(applied.delinquency_change().is_some());
    // Recomputed (a version conflict): the same outbox id.
    let Outcome::Applied(again) = apply(Some(&a), &c, None) else {
        panic!("applies")
    };
    assert_eq!(again.outbox, applied.outbox);
}

#[test]
fn when_the_daily_job_is_run_in_the_ledger_should_close_only_accounts_past_due() {
    let mut ledger = Ledger::new();
    let mut other_open = opened("2026-09-01T09:00:00Z", 50_000);
    other_open["accountId"] = json!("acc_2");
    other_open["sourceEventId"] = json!("open-2");
    let mut stream = delinquent();
    stream.push(other_open);
    ingest_all(&mut ledger, &stream);
    let run = ledger.close_business_day(date("2026-10-05"));
    let acc_1 = AccountId::parse("acc_1").expect("id");
    assert_eq!(run, [(acc_1.clone(), Disposition::Applied)]);
    assert_eq!(account(&ledger).dpd, 4);
    // Safe to run twice for one day: the same identity, a duplicate.
    let run = ledger.close_business_day(date("2026-10-05"));
    assert_eq!(run, [(acc_1, Disposition::Duplicate)]);
    assert!(ledger.close_business_day(date("2026-10-01")).is_empty());
    // The job's close is the contract's: the same fact as the sample's line.
    let sample = lines(&fixture("aging.jsonl"))[2].clone();
    let from_sample = ServicingEvent::decode(sample.as_bytes()).expect("valid");
    let built = ServicingEvent::business_day_closed(
        &AccountId::parse("acc_5501").expect("id"),
        date("2026-10-02"),
    );
    assert_eq!(built, from_sample);
    assert_eq!(
        servicing_domain::Fingerprint::of(&built),
        servicing_domain::Fingerprint::of(&from_sample)
    );
}
