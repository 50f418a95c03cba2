//! Properties of the state machine over random event streams.

mod common;

use chrono::{Duration, NaiveDate};
use common::event;
use proptest::prelude::*;
use serde_json::{Value, json};
use servicing_domain::{AccountId, Ledger, LoanAccount, Outcome, ServicingEvent, apply};

#[derive(Debug, Clone)]
enum Op {
    Due {
        principal: i64,
        interest: i64,
    },
    Interest(i64),
    Fee(i64),
    Pay(i64),
    /// Reverse the n-th earlier payment (modulo the number of payments so far).
    Reverse(usize),
    Limit {
        sequence: u64,
        amount: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..40_000i64, 0..5_000i64).prop_map(|(principal, interest)| Op::Due { principal, interest }),
        1 => (0..10_000i64).prop_map(Op::Interest),
        1 => (0..10_000i64).prop_map(Op::Fee),
        3 => (0..150_000i64).prop_map(Op::Pay),
        1 => any::<usize>().prop_map(Op::Reverse),
        1 => (1..6u64, 0..500_000i64).prop_map(|(sequence, amount)| Op::Limit { sequence, amount }),
    ]
}

/// Turns ops into a JSON Lines stream for `acc_1`, days advancing by `gaps`.
fn stream(principal: i64, ops: &[(Op, i64)]) -> Vec<Value> {
    let start = NaiveDate::from_ymd_opt(2026, 1, 1).expect("date");
    let at = |day: i64| format!("{}T12:00:00Z", start + Duration::days(day));
    let mut events = vec![event(
        "open",
        "LOAN_OPENED",
        &at(0),
        json!({"principalMinor": principal, "currency": "EUR"}),
    )];
    let (mut day, mut installment, mut payments) = (0i64, 0u32, Vec::<(String, i64)>::new());
    for (i, (op, gap)) in ops.iter().enumerate() {
        day += gap;
        let id = format!("e{i}");
        let e = match op {
            Op::Due {
                principal,
                interest,
            } => {
                installment += 1;
                event(
                    &id,
                    "INSTALLMENT_DUE",
                    &at(day),
                    json!({"installmentNo": installment,
                    "dueDate": (start + Duration::days(day)).to_string(),
                    "principalMinor": principal, "interestMinor": interest}),
                )
            }
            Op::Interest(a) => event(
                &id,
                "INTEREST_ACCRUED",
                &at(day),
                json!({"amountMinor": a, "currency": "EUR"}),
            ),
            Op::Fee(a) => event(
                &id,
                "FEE_ASSESSED",
                &at(day),
                json!({"amountMinor": a, "currency": "EUR", "feeType": "LATE_FEE"}),
            ),
            Op::Pay(a) => {
                payments.push((id.clone(), *a));
                event(
                    &id,
                    "PAYMENT_SETTLED",
                    &at(day),
                    json!({"amountMinor": a, "currency": "EUR"}),
                )
            }
            Op::Reverse(n) if !payments.is_empty() => {
                let (target, amount) = &payments[n % payments.len()];
                event(
                    &id,
                    "PAYMENT_REVERSED",
                    &at(day),
                    json!({"amountMinor": amount, "currency": "EUR",
                    "reversalOf": {"sourceSystem": "test", "sourceEventId": target}}),
                )
            }
            Op::Reverse(_) => continue,
            Op::Limit { sequence, amount } => event(
                &id,
                "CREDIT_LIMIT_SET",
                &at(day),
                json!({"creditLimitMinor": amount, "currency": "EUR", "sequence": sequence}),
            ),
        };
        events.push(e);
    }
    events
}

fn ops() -> impl Strategy<Value = (i64, Vec<(Op, i64)>)> {
    (
        0..200_000i64,
        prop::collection::vec((op(), 0..12i64), 0..40),
    )
}

fn assert_balances_sound(a: &LoanAccount) {
    assert!(a.principal_outstanding_minor >= 0);
    assert!(a.interest_outstanding_minor >= 0);
    assert!(a.fees_outstanding_minor >= 0);
    assert!(a.credit_balance_minor >= 0);
    for i in &a.installments {
        assert!((0..=i.due_minor).contains(&i.paid_minor), "{i:?}");
    }
}

fn the_account(ledger: &Ledger) -> LoanAccount {
    ledger
        .account(&AccountId::parse("acc_1").expect("id"))
        .expect("opened")
        .clone()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn allocations_sum_to_the_payment_and_balances_never_go_negative((principal, ops) in ops()) {
        let mut ledger = Ledger::new();
        for e in stream(principal, &ops) {
            ledger.ingest(e.to_string().as_bytes());
            assert_balances_sound(&the_account(&ledger));
        }
        for stored in ledger.allocations() {
            let a = stored.allocation;
            prop_assert!(a.fees >= 0 && a.interest >= 0 && a.principal >= 0 && a.credit >= 0);
            prop_assert_eq!(a.total(), Some(stored.amount_minor));
            let to_installments: i64 = stored.installments_paid.iter().map(|p| p.amount_minor).sum();
            prop_assert!(to_installments <= a.interest + a.principal);
        }
    }

    #[test]
    fn a_reversal_restores_the_state_it_undid((principal, ops) in ops(), amount in 0..300_000i64) {
        let mut ledger = Ledger::new();
        let events = stream(principal, &ops);
        for e in &events {
            ledger.ingest(e.to_string().as_bytes());
        }
        let before = the_account(&ledger);
        let time = format!("{}T23:00:00Z", before.business_date);
        let payment = ServicingEvent::from_value(&event("p-x", "PAYMENT_SETTLED", &time,
            json!({"amountMinor": amount, "currency": "EUR"}))).expect("valid");
        let Outcome::Applied(paid) = apply(Some(&before), &payment, None) else { panic!("payment applies") };
        let Some(servicing_domain::AllocationWrite::Record(stored)) = paid.allocation.clone() else { panic!("allocation") };
        let reversal = ServicingEvent::from_value(&event("r-x", "PAYMENT_REVERSED", &time,
            json!({"amountMinor": amount, "currency": "EUR", "reversalOf": {"sourceSystem": "test", "sourceEventId": "p-x"}}))).expect("valid");
        let Outcome::Applied(reversed) = apply(Some(&paid.account), &reversal, Some(servicing_domain::ReversalTarget::Applied(&stored))) else { panic!("reversal applies") };
        prop_assert_eq!(&reversed.account, &before);
    }

    #[test]
    fn stale_limits_never_apply((principal, ops) in ops()) {
        let mut ledger = Ledger::new();
        for e in stream(principal, &ops) {
            ledger.ingest(e.to_string().as_bytes());
        }
        // The first limit carrying the highest sequence wins; every other is stale or older.
        let mut winner: Option<(u64, i64)> = None;
        for (op, _) in &ops {
            if let Op::Limit { sequence, amount } = op
                && winner.is_none_or(|(s, _)| *sequence > s)
            {
                winner = Some((*sequence, *amount));
            }
        }
        let account = the_account(&ledger);
        prop_assert_eq!(account.credit_limit_minor, winner.map(|(_, a)| a));
        prop_assert_eq!(account.credit_limit_sequence, winner.map_or(0, |(s, _)| s));
    }

    #[test]
    fn duplicates_anywhere_after_the_original_leave_the_state_identical(
        (principal, ops) in ops(),
        copies in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<bool>()), 0..30),
    ) {
        let events: Vec<String> = stream(principal, &ops).iter().map(Value::to_string).collect();
        // Each copy of line i goes somewhere after line i, sometimes re-serialised by a transport.
        let mut delivered: Vec<(usize, String)> = events.iter().cloned().enumerate().collect();
        for (line, offset, reserialise) in &copies {
            let i = line.index(events.len());
            let original = delivered.iter().position(|(j, _)| *j == i).expect("original present");
            let at = original + 1 + offset.index(delivered.len() - original);
            let body = if *reserialise {
                let mut v: Value = serde_json::from_str(&events[i]).expect("json");
                v["eventId"] = json!(format!("sqs-{at}"));
                serde_json::to_string_pretty(&v).expect("json")
            } else {
                events[i].clone()
            };
            delivered.insert(at, (i, body));
        }
        let mut once = Ledger::new();
        once.replay(events.iter().map(String::as_bytes));
        let mut duplicated = Ledger::new();
        duplicated.replay(delivered.iter().map(|(_, b)| b.as_bytes()));

        let strip = |mut report: Value| {
            report["counts"]["duplicates"] = Value::Null;
            report["counts"]["received"] = Value::Null;
            report
        };
        prop_assert_eq!(strip(once.report()), strip(duplicated.report()));
        prop_assert_eq!(duplicated.counts().duplicates, copies.len() as u64);
        prop_assert_eq!(once.outbox(), duplicated.outbox());
    }
}
