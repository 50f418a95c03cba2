use chrono::NaiveDate;
use serde_json::json;

use super::*;

fn date(s: &str) -> NaiveDate {
    s.parse().expect("date")
}

fn applied(id: &str, allocation: Value, amount: i64) -> Value {
    json!({"eventId": id, "eventType": "PaymentApplied", "accountId": "acc_1",
        "occurredAt": "2026-09-10T12:00:00Z", "trigger": {"sourceSystem": "psp", "sourceEventId": "p1"},
        "payment": {"sourceSystem": "psp", "sourceEventId": "p1"}, "amountMinor": amount, "currency": "EUR",
        "allocation": allocation, "installmentsPaid": []})
}

#[test]
fn when_a_payment_posts_should_credit_each_part_of_its_allocation_against_its_providers_cash() {
    let detail = applied(
        "evt_1",
        json!({"fees": 500, "interest": 1000, "principal": 3000, "credit": 0}),
        4500,
    );
    let entry = entry_of(&detail).expect("valid").expect("moves money");
    let cash = LedgerAccount::CashClearing("psp".into());
    assert_eq!(
        entry.transfers,
        vec![
            Transfer {
                debit: cash.clone(),
                credit: LedgerAccount::FeesReceivable,
                amount_minor: 500
            },
            Transfer {
                debit: cash.clone(),
                credit: LedgerAccount::InterestReceivable,
                amount_minor: 1000
            },
            Transfer {
                debit: cash,
                credit: LedgerAccount::PrincipalReceivable,
                amount_minor: 3000
            },
        ]
    );
    let mut ledger = SubLedger::default();
    ledger.post(&entry).expect("posts");
    assert_eq!(ledger.trial_balance(), 0);
    assert_eq!(
        ledger.balance(&LedgerAccount::CashClearing("psp".into())),
        4500
    );
}

#[test]
fn when_a_reversal_posts_should_be_the_exact_opposite_linked_to_the_payments_entry() {
    let allocation = json!({"fees": 0, "interest": 200, "principal": 700, "credit": 100});
    let payment = entry_of(&applied("evt_p", allocation.clone(), 1000))
        .expect("valid")
        .expect("entry");
    let mut reversal = applied("evt_r", allocation, 1000);
    reversal["eventType"] = json!("PaymentReversed");
    let reversed = entry_of(&reversal).expect("valid").expect("entry");
    let payment_id = DomainEvent::id_for(
        detail_types::PAYMENT_APPLIED,
        &SourceRef {
            system: "psp".into(),
            event_id: "p1".into(),
        },
    );
    assert_eq!(reversed.reverses.as_deref(), Some(payment_id.as_str()));
    // The payment's entry under the id its event has on the bus.
    let payment = JournalEntry {
        entry_id: payment_id,
        ..payment
    };
    for (p, r) in payment.transfers.iter().zip(&reversed.transfers) {
        assert_eq!(
            (&p.debit, &p.credit, p.amount_minor),
            (&r.credit, &r.debit, r.amount_minor)
        );
    }
    assert_eq!(reversed.fails_to_undo(&payment), None);
    // What the reconciliation refuses: another split, another account, another entry.
    let mut split = reversed.clone();
    split.transfers[0].amount_minor -= 1;
    split.transfers[1].amount_minor += 1;
    let mut elsewhere = reversed.clone();
    elsewhere.account_id = AccountId::parse("acc_2").expect("id");
    let mut unlinked = reversed.clone();
    unlinked.reverses = Some("evt_other".into());
    for (wrong, says) in [
        (&split, "transfers"),
        (&elsewhere, "acc_2"),
        (&unlinked, "evt_other"),
    ] {
        let why = wrong.fails_to_undo(&payment).expect("refused");
        assert!(why.contains(says), "{why}");
    }
    let why = payment
        .fails_to_undo(&payment)
        .expect("a payment undoes nothing");
    assert!(why.contains("not a reversal"), "{why}");
    let mut ledger = SubLedger::default();
    ledger.post(&payment).expect("posts");
    ledger.post(&reversed).expect("posts");
    assert!(
        ledger.balances.values().all(|v| *v == 0),
        "{:?}",
        ledger.balances
    );
}

#[test]
fn when_an_event_moves_no_money_should_post_nothing_and_a_broken_one_should_say_why() {
    let limit =
        json!({"eventId": "evt_l", "eventType": "CreditLimitChanged", "accountId": "acc_1"});
    assert_eq!(entry_of(&limit), Ok(None));
    let bucket =
        json!({"eventId": "evt_d", "eventType": "DelinquencyChanged", "accountId": "acc_1"});
    assert_eq!(entry_of(&bucket), Ok(None));
    let unbalanced = applied(
        "evt_1",
        json!({"fees": 0, "interest": 0, "principal": 3000, "credit": 0}),
        4500,
    );
    let error = entry_of(&unbalanced).expect_err("allocation short of the amount");
    assert!(error.0.contains("does not add up"), "{error}");
    let mut no_currency = applied(
        "evt_1",
        json!({"fees": 0, "interest": 0, "principal": 1, "credit": 0}),
        1,
    );
    no_currency
        .as_object_mut()
        .expect("object")
        .remove("currency");
    assert!(entry_of(&no_currency).is_err());
    // A time the bus schema refuses (chrono alone reads a space for `T`) is not posted on a
    // guessed date.
    let mut spaced = applied(
        "evt_1",
        json!({"fees": 0, "interest": 0, "principal": 1, "credit": 0}),
        1,
    );
    spaced["occurredAt"] = json!("2026-09-10 12:00:00Z");
    let error = entry_of(&spaced).expect_err("not RFC 3339 by its grammar");
    assert!(error.0.contains("occurredAt"), "{error}");
}

#[test]
fn when_an_event_is_of_an_unknown_schema_major_should_refuse_it_even_if_it_moves_no_money() {
    let mut payment = applied(
        "evt_1",
        json!({"fees": 0, "interest": 0, "principal": 1, "credit": 0}),
        1,
    );
    payment["schemaVersion"] = json!(2);
    let error = entry_of(&payment).expect_err("a major this build does not know");
    assert!(
        error.0.contains("schemaVersion 2 is not supported"),
        "{error}"
    );
    let limit = json!({"schemaVersion": 3, "eventId": "evt_l", "eventType": "CreditLimitChanged", "accountId": "acc_1"});
    assert!(
        entry_of(&limit).is_err(),
        "it cannot know that a later major moves no money"
    );
    payment["schemaVersion"] = json!(1);
    assert!(entry_of(&payment).is_ok());
}

#[test]
fn when_the_business_date_is_in_a_closed_period_should_post_to_the_first_open_day() {
    assert_eq!(posting_date(date("2026-09-10"), None), date("2026-09-10"));
    assert_eq!(
        posting_date(date("2026-09-10"), Some(date("2026-09-09"))),
        date("2026-09-10")
    );
    assert_eq!(
        posting_date(date("2026-09-10"), Some(date("2026-09-10"))),
        date("2026-09-11")
    );
    assert_eq!(
        posting_date(date("2026-09-01"), Some(date("2026-09-30"))),
        date("2026-10-01")
    );
}

#[test]
fn when_an_entry_is_in_another_currency_should_refuse_it_and_change_nothing() {
    let mut ledger = SubLedger::default();
    let entry = entry_of(&applied(
        "evt_1",
        json!({"fees": 0, "interest": 0, "principal": 10, "credit": 0}),
        10,
    ))
    .expect("valid")
    .expect("entry");
    ledger.post(&entry).expect("posts");
    let before = ledger.clone();
    let dollars = JournalEntry {
        currency: Currency::parse("USD").expect("code"),
        ..entry
    };
    assert!(ledger.post(&dollars).is_err());
    assert_eq!(ledger, before);
}

#[test]
fn when_codes_are_stored_should_read_back_as_the_same_ledger_accounts() {
    for account in [
        LedgerAccount::CashClearing("core:v2".into()),
        LedgerAccount::PrincipalReceivable,
        LedgerAccount::InterestReceivable,
        LedgerAccount::FeesReceivable,
        LedgerAccount::CustomerCredit,
        LedgerAccount::Disbursements,
        LedgerAccount::Suspense,
        LedgerAccount::OpeningBalances,
        LedgerAccount::InterestIncome,
        LedgerAccount::FeeIncome,
    ] {
        assert_eq!(LedgerAccount::parse(&account.code()), Some(account));
    }
}

#[test]
fn when_an_operator_corrects_should_post_one_balanced_transfer_and_never_on_cash() {
    let account = AccountId::parse("acc_1").expect("id");
    let eur = Currency::parse("EUR").expect("code");
    let why = || Correction {
        reason: "fee assessed twice by hand".into(),
        by: "arn:aws:iam::123456789012:user/ops".into(),
    };
    let transfer = |debit, credit, amount_minor| Transfer {
        debit,
        credit,
        amount_minor,
    };
    let at = DateTime::from_timestamp(1_796_000_000, 0).expect("a time");
    let entry = correcting_entry(
        "fix-fee-2026-12-01",
        account.clone(),
        eur,
        transfer(LedgerAccount::FeeIncome, LedgerAccount::FeesReceivable, 500),
        why(),
        at,
    )
    .expect("a correction");
    assert_eq!(entry.entry_id, "corr_fix-fee-2026-12-01");
    assert_eq!(entry.event_type, MANUAL_CORRECTION);
    assert_eq!(entry.cash_date(), None, "no cash: not in the cash by date");
    let mut ledger = SubLedger::default();
    ledger.post(&entry).expect("posts");
    assert_eq!(ledger.trial_balance(), 0);
    assert_eq!(ledger.balance(&LedgerAccount::FeesReceivable), -500);
    // What is refused before anything is read or written.
    let refused = [
        (
            "bad id!",
            transfer(LedgerAccount::Suspense, LedgerAccount::FeeIncome, 1),
            why(),
        ),
        (
            "x",
            transfer(LedgerAccount::Suspense, LedgerAccount::FeeIncome, 0),
            why(),
        ),
        (
            "x",
            transfer(LedgerAccount::Suspense, LedgerAccount::Suspense, 1),
            why(),
        ),
        (
            "x",
            transfer(
                LedgerAccount::CashClearing("psp".into()),
                LedgerAccount::Suspense,
                1,
            ),
            why(),
        ),
        (
            "x",
            transfer(LedgerAccount::Suspense, LedgerAccount::FeeIncome, 1),
            Correction {
                reason: " ".into(),
                by: "ops".into(),
            },
        ),
    ];
    for (id, t, c) in refused {
        assert!(
            correcting_entry(id, account.clone(), eur, t.clone(), c, at).is_err(),
            "{id} {t:?}"
        );
    }
}

#[test]
fn when_an_account_is_migrated_should_open_its_ledger_at_servicings_balances_whatever_it_held() {
    let eur = Currency::parse("EUR").expect("code");
    let account = AccountId::parse("acc_migrated").expect("id");
    let at = DateTime::from_timestamp(1_796_000_000, 0).expect("a time");
    let by = || Correction {
        reason: "older than the archive".into(),
        by: "arn:aws:iam::123456789012:user/ops".into(),
    };
    // A small generator: servicing's balances, and a ledger that holds part, all, more or
    // none of them (the events it could still be given), cash included.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut below = |n: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % n as u64) as i64
    };
    for case in 0..500 {
        let mut servicing = LoanAccount::opened(
            account.clone(),
            eur,
            below(3) * below(100_000),
            None,
            date("2026-01-01"),
        );
        servicing.interest_outstanding_minor = below(2) * below(5_000);
        servicing.fees_outstanding_minor = below(2) * below(2_000);
        servicing.credit_balance_minor = below(2) * below(3_000);
        let mut ledger = SubLedger::default();
        let events = [
            json!({"eventId": "evt_o", "eventType": "LoanOpened", "accountId": "acc_migrated",
                "occurredAt": "2026-01-01T00:00:00Z", "trigger": {"sourceSystem": "core", "sourceEventId": "o"},
                "currency": "EUR", "principalMinor": below(100_000)}),
            json!({"eventId": "evt_f", "eventType": "FeeAssessed", "accountId": "acc_migrated",
                "occurredAt": "2026-01-02T00:00:00Z", "trigger": {"sourceSystem": "core", "sourceEventId": "f"},
                "currency": "EUR", "amountMinor": below(3_000)}),
            {
                let (fees, credit) = (below(500), below(4_000));
                let mut paid = applied(
                    "evt_p",
                    json!({"fees": fees, "interest": 0, "principal": 0, "credit": credit}),
                    fees + credit,
                );
                paid["accountId"] = json!("acc_migrated");
                paid
            },
        ];
        for event in events.iter().filter(|_| below(2) == 1) {
            if let Some(entry) = entry_of(event).expect("a money event") {
                ledger.post(&entry).expect("posts");
            }
        }
        let cash = ledger.balance(&LedgerAccount::CashClearing("psp".into()));
        let Some(opening) = opening_entry(&servicing, 7, &ledger, by(), at).expect("opens") else {
            assert!(
                ledger.differences(&servicing).is_empty(),
                "case {case}: nothing to open only when they agree"
            );
            continue;
        };
        assert_eq!(opening.entry_id, "open_acc_migrated");
        assert_eq!(opening.event_type, OPENING_BALANCE);
        assert_eq!(
            opening.trigger.event_id, "acc_migrated@v7",
            "as of the loan version read"
        );
        assert_eq!(opening.cash_date(), None);
        assert!(opening.transfers.iter().all(|t| t.amount_minor > 0
            && [&t.debit, &t.credit].contains(&&LedgerAccount::OpeningBalances)));
        ledger.post(&opening).expect("posts");
        assert_eq!(
            ledger.differences(&servicing),
            Vec::<String>::new(),
            "case {case}"
        );
        assert_eq!(ledger.trial_balance(), 0, "case {case}: it balances");
        assert_eq!(
            ledger.balance(&LedgerAccount::CashClearing("psp".into())),
            cash,
            "cash untouched"
        );
        assert_eq!(
            opening_entry(&servicing, 7, &ledger, by(), at),
            Ok(None),
            "once opened, nothing more"
        );
    }
    // What no migration absorbs, and a migration without a reason.
    let servicing = LoanAccount::opened(account.clone(), eur, 100, None, date("2026-01-01"));
    let mut suspense = SubLedger::default();
    suspense
        .post(
            &correcting_entry(
                "s",
                account.clone(),
                eur,
                Transfer {
                    debit: LedgerAccount::FeesReceivable,
                    credit: LedgerAccount::Suspense,
                    amount_minor: 5,
                },
                by(),
                at,
            )
            .expect("a correction"),
        )
        .expect("posts");
    let usd = SubLedger {
        currency: Some(Currency::parse("USD").expect("code")),
        ..SubLedger::default()
    };
    let silent = Correction {
        reason: "".into(),
        by: "ops".into(),
    };
    for (ledger, by) in [
        (&suspense, by()),
        (&usd, by()),
        (&SubLedger::default(), silent),
    ] {
        assert!(
            opening_entry(&servicing, 1, ledger, by, at).is_err(),
            "{ledger:?}"
        );
    }
    // Only the migration posts opening balances.
    let onto_opening = Transfer {
        debit: LedgerAccount::OpeningBalances,
        credit: LedgerAccount::FeeIncome,
        amount_minor: 1,
    };
    assert!(correcting_entry("x", account, eur, onto_opening, by(), at).is_err());
}
