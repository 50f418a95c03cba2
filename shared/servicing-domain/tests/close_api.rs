//! `BUSINESS_DAY_CLOSED` at the API: why `apply` finds a close stale, and the daily job's
//! close as the ledger runs it.

mod common;

use common::{event, fixture, lines, opened};
use serde_json::{Value, json};
use servicing_domain::{
    AccountId, Disposition, Ledger, LoanAccount, Outcome, ServicingEvent, Staleness, apply,
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

/// An opened account with 9000 due on 2026-10-01, billed on 2026-09-25 (business date then).
fn delinquent() -> Vec<Value> {
    vec![
        opened("2026-09-01T09:00:00Z", 100_000),
        event(
            "due-1",
            "INSTALLMENT_DUE",
            "2026-09-25T00:00:00Z",
            json!({"installmentNo": 1, "dueDate": "2026-10-01", "principalMinor": 8_000, "interestMinor": 1_000}),
        ),
    ]
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
