//! Properties of the state machine over random event streams.

mod common;

use std::collections::HashMap;

use chrono::{Duration, NaiveDate};
use common::event;
use proptest::prelude::*;
use serde_json::{Value, json};
use servicing_domain::{
    AccountId, Bucket, Disposition, Ledger, LoanAccount, Outcome, ServicingEvent, apply,
    journal::{SubLedger, entry_of},
    outbox::detail_types,
};

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
    /// A `BUSINESS_DAY_CLOSED` for the current day plus this offset (earlier days are stale).
    Close(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..40_000i64, 0..5_000i64).prop_map(|(principal, interest)| Op::Due { principal, interest }),
        1 => (0..10_000i64).prop_map(Op::Interest),
        1 => (0..10_000i64).prop_map(Op::Fee),
        3 => (0..150_000i64).prop_map(Op::Pay),
        1 => any::<usize>().prop_map(Op::Reverse),
        1 => (1..6u64, 0..500_000i64).prop_map(|(sequence, amount)| Op::Limit { sequence, amount }),
        1 => (-5..20i64).prop_map(Op::Close),
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
            Op::Close(offset) => close(&id, start + Duration::days(day + offset)),
        };
        events.push(e);
    }
    events
}

/// A `BUSINESS_DAY_CLOSED` of `acc_1` for `date`, dated at its end as the contract says.
fn close(id: &str, date: NaiveDate) -> Value {
    event(
        id,
        "BUSINESS_DAY_CLOSED",
        &format!("{date}T23:59:59Z"),
        json!({"businessDate": date.to_string()}),
    )
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

/// What the contract says arrears are, written out independently of the crate: installments
/// owing `principal + interest` from their due date; the waterfall fees → interest → principal
/// → credit, whose interest and principal parts pay installments oldest first; a reversal puts
/// back exactly what its payment took; business time is the date of the latest applied event
/// (a close included), never moving backwards.
#[derive(Debug, Default)]
struct Model {
    fees: i64,
    interest: i64,
    principal: i64,
    credit: i64,
    /// (due date, owed, paid), in order of number.
    installments: Vec<(NaiveDate, i64, i64)>,
    payments: HashMap<String, Paid>,
    limit_sequence: u64,
    business_date: Option<NaiveDate>,
}

#[derive(Debug)]
struct Paid {
    /// fees, interest, principal, credit.
    split: [i64; 4],
    /// (installment index, amount).
    installments: Vec<(usize, i64)>,
    reversed: bool,
}

fn date_of(v: &Value, field: &str) -> NaiveDate {
    let text = v[field].as_str().expect("a date field");
    NaiveDate::parse_from_str(&text[..10], "%Y-%m-%d").expect("date")
}

fn minor(v: &Value, field: &str) -> i64 {
    v[field].as_i64().expect("an integer field")
}

impl Model {
    /// Days past due on `date`: from the oldest due date with something unpaid, floored at 0.
    fn dpd_at(&self, date: NaiveDate) -> u32 {
        self.installments
            .iter()
            .filter(|(_, owed, paid)| paid < owed)
            .map(|(due, _, _)| (date - *due).num_days())
            .max()
            .map_or(0, |days| u32::try_from(days.max(0)).expect("small"))
    }

    fn dpd(&self) -> u32 {
        self.business_date.map_or(0, |d| self.dpd_at(d))
    }

    /// Applies one (first) delivery; `false` when the contract says it is not applied.
    fn apply(&mut self, e: &Value) -> bool {
        let date = date_of(e, "eventTime");
        match e["eventType"].as_str().expect("type") {
            "LOAN_OPENED" => self.principal = minor(e, "principalMinor"),
            "INSTALLMENT_DUE" => {
                let (p, i) = (minor(e, "principalMinor"), minor(e, "interestMinor"));
                self.interest += i;
                self.installments.push((date_of(e, "dueDate"), p + i, 0));
            }
            "INTEREST_ACCRUED" => self.interest += minor(e, "amountMinor"),
            "FEE_ASSESSED" => self.fees += minor(e, "amountMinor"),
            "PAYMENT_SETTLED" => {
                let mut left = minor(e, "amountMinor");
                let mut take = |balance: &mut i64| {
                    let part = left.min(*balance);
                    *balance -= part;
                    left -= part;
                    part
                };
                let fees = take(&mut self.fees);
                let interest = take(&mut self.interest);
                let principal = take(&mut self.principal);
                self.credit += left;
                let mut to_installments = interest + principal;
                let mut paid = Vec::new();
                let mut order: Vec<usize> = (0..self.installments.len()).collect();
                order.sort_by_key(|&i| (self.installments[i].0, i));
                for i in order {
                    let (_, owed, done) = &mut self.installments[i];
                    let part = to_installments.min(*owed - *done);
                    if part > 0 {
                        *done += part;
                        to_installments -= part;
                        paid.push((i, part));
                    }
                }
                let id = e["sourceEventId"].as_str().expect("id").to_owned();
                let split = [fees, interest, principal, left];
                self.payments.insert(
                    id,
                    Paid {
                        split,
                        installments: paid,
                        reversed: false,
                    },
                );
            }
            "PAYMENT_REVERSED" => {
                let target = e["reversalOf"]["sourceEventId"].as_str().expect("target");
                let paid = self
                    .payments
                    .get_mut(target)
                    .expect("reverses a generated payment");
                if paid.reversed {
                    return false; // a second reversal: a business error
                }
                paid.reversed = true;
                let [fees, interest, principal, credit] = paid.split;
                self.fees += fees;
                self.interest += interest;
                self.principal += principal;
                self.credit -= credit;
                for (i, part) in &paid.installments {
                    self.installments[*i].2 -= part;
                }
            }
            "CREDIT_LIMIT_SET" => {
                let sequence = e["sequence"].as_u64().expect("sequence");
                if sequence <= self.limit_sequence {
                    return false;
                }
                self.limit_sequence = sequence;
            }
            "BUSINESS_DAY_CLOSED" => {
                let day = date_of(e, "businessDate");
                if self.business_date.is_some_and(|b| day <= b) || self.dpd_at(day) == 0 {
                    return false;
                }
                self.business_date = Some(day);
                return true;
            }
            other => panic!("unexpected {other}"),
        }
        self.business_date = Some(self.business_date.map_or(date, |b| b.max(date)));
        true
    }
}

/// The account's money and installments: what a close must never change.
fn money(a: &LoanAccount) -> LoanAccount {
    LoanAccount {
        dpd: 0,
        delinquency_bucket: Bucket::Current,
        business_date: NaiveDate::MIN,
        ..a.clone()
    }
}

/// The closes appended after a stream: increasing dates, each maybe followed by a resend of
/// an earlier close (a duplicate) or by a close of an earlier, never closed date (stale).
#[derive(Debug, Clone)]
enum Mixed {
    Nothing,
    Resend(prop::sample::Index, bool),
    Late(prop::sample::Index),
}

fn mixed() -> impl Strategy<Value = Mixed> {
    prop_oneof![
        2 => Just(Mixed::Nothing),
        1 => (any::<prop::sample::Index>(), any::<bool>()).prop_map(|(i, r)| Mixed::Resend(i, r)),
        1 => any::<prop::sample::Index>().prop_map(Mixed::Late),
    ]
}

/// The validator of a bus event type's schema (built once per type).
fn bus_validator(detail_type: &str) -> &'static jsonschema::Validator {
    static VALIDATORS: std::sync::OnceLock<HashMap<&'static str, jsonschema::Validator>> =
        std::sync::OnceLock::new();
    let all = VALIDATORS.get_or_init(|| {
        servicing_domain::contract::DOMAIN
            .iter()
            .map(|(t, _)| {
                let schema = servicing_domain::contract::domain_schema(t).expect("a type");
                let validator = jsonschema::draft202012::options()
                    .should_validate_formats(true)
                    .build(&schema)
                    .expect("a valid JSON Schema");
                (*t, validator)
            })
            .collect()
    });
    all.get(detail_type)
        .unwrap_or_else(|| panic!("{detail_type} has no published schema"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// After every delivery, DPD and bucket are those of the account's business date: the
    /// latest applied event's date (a close included), never moved back by an older event.
    #[test]
    fn dpd_is_always_as_of_the_latest_applied_date((principal, ops) in ops()) {
        let mut ledger = Ledger::new();
        let mut model = Model::default();
        for e in stream(principal, &ops) {
            let applied = model.apply(&e);
            let d = ledger.ingest(e.to_string().as_bytes());
            prop_assert_eq!(d == Disposition::Applied, applied, "{} gave {:?}", e, d);
            let a = the_account(&ledger);
            prop_assert_eq!(Some(a.business_date), model.business_date);
            prop_assert_eq!(a.dpd, model.dpd(), "after {}", e);
            prop_assert_eq!(a.delinquency_bucket, Bucket::for_dpd(model.dpd()));
        }
    }

    /// For any stream, closes appended for increasing dates — with resends of earlier closes
    /// (duplicates) and closes of earlier dates (stale) mixed in — leave the DPD as of the last
    /// close date (or of the stream's own business date, when that is later), computed here
    /// from the installments and what was paid. A close moves no money and writes at most one
    /// `DelinquencyChanged`, triggered by itself, exactly when the bucket moves.
    #[test]
    fn closes_for_increasing_dates_give_the_dpd_as_of_the_last_one(
        (principal, ops) in ops(),
        first in 0..500i64,
        steps in prop::collection::vec((1..45i64, mixed()), 1..12),
    ) {
        let start = NaiveDate::from_ymd_opt(2026, 1, 1).expect("date");
        let mut ledger = Ledger::new();
        let mut model = Model::default();
        for e in stream(principal, &ops) {
            model.apply(&e);
            ledger.ingest(e.to_string().as_bytes());
        }
        let stream_date = model.business_date.expect("opened");
        let mut sent: Vec<Value> = Vec::new();
        let mut closed = std::collections::BTreeSet::new();
        let mut date = start + Duration::days(first);
        let mut deliveries: Vec<(Value, bool)> = Vec::new(); // (body, a resend)
        for (n, (gap, mix)) in steps.iter().enumerate() {
            if n > 0 {
                date += Duration::days(*gap);
            }
            let c = close(&format!("close-{date}-acc_1"), date);
            closed.insert(date);
            sent.push(c.clone());
            deliveries.push((c, false));
            match mix {
                Mixed::Nothing => {}
                Mixed::Resend(i, reserialise) => {
                    let mut again = sent[i.index(sent.len())].clone();
                    if *reserialise {
                        again["eventId"] = json!(format!("sqs-{n}"));
                    }
                    deliveries.push((again, true));
                }
                Mixed::Late(i) => {
                    let earlier = date - Duration::days(1 + i.index(60) as i64);
                    if closed.insert(earlier) {
                        let c = close(&format!("late-{earlier}-acc_1"), earlier);
                        sent.push(c.clone());
                        deliveries.push((c, false));
                    }
                }
            }
        }
        let last = date;
        for (body, resend) in &deliveries {
            let before = the_account(&ledger);
            let outbox_before = ledger.outbox().len();
            let applies = !resend && model.apply(body);
            let late = body["sourceEventId"].as_str().is_some_and(|id| id.starts_with("late-"));
            prop_assert!(!(late && applies), "a close of an earlier date is stale: {}", body);
            let d = ledger.ingest(body.to_string().as_bytes());
            let after = the_account(&ledger);
            let new_events = &ledger.outbox()[outbox_before..];
            let want = if *resend {
                Disposition::Duplicate
            } else if applies {
                Disposition::Applied
            } else {
                Disposition::Stale
            };
            prop_assert_eq!(&d, &want, "{}", body);
            prop_assert_eq!(money(&after), money(&before), "a close moves no money");
            prop_assert_eq!(after.dpd, model.dpd());
            if d != Disposition::Applied {
                prop_assert_eq!(&after, &before);
                prop_assert!(new_events.is_empty());
                continue;
            }
            prop_assert_eq!(after.business_date, date_of(body, "businessDate"));
            let moved = after.delinquency_bucket != before.delinquency_bucket;
            prop_assert_eq!(new_events.len(), usize::from(moved), "{:?}", new_events);
            for e in new_events {
                prop_assert_eq!(e.detail_type.as_str(), detail_types::DELINQUENCY_CHANGED);
                prop_assert_eq!(Some(e.trigger.event_id.as_str()), body["sourceEventId"].as_str());
                prop_assert_eq!(e.payload["dpd"].as_u64(), Some(u64::from(after.dpd)));
            }
        }
        let a = the_account(&ledger);
        let as_of = last.max(stream_date);
        prop_assert_eq!(a.dpd, model.dpd_at(as_of), "dpd as of {}", as_of);
        prop_assert_eq!(a.delinquency_bucket, Bucket::for_dpd(model.dpd_at(as_of)));
        if model.dpd_at(last) > 0 && last > stream_date {
            prop_assert_eq!(a.business_date, last);
        }
        let resends = deliveries.iter().filter(|(_, r)| *r).count() as u64;
        prop_assert_eq!(ledger.counts().duplicates, resends);
        prop_assert!(ledger.quarantine().len() == ledger.counts().quarantined as usize);
    }

    /// Every event `apply` publishes is exactly what its published schema
    /// (`docs/schemas/bus/`) describes: every field it writes is named there, with its rule.
    #[test]
    fn every_published_event_matches_its_bus_schema((principal, ops) in ops()) {
        let mut ledger = Ledger::new();
        for e in stream(principal, &ops) {
            ledger.ingest(e.to_string().as_bytes());
        }
        for event in ledger.outbox() {
            let detail = event.detail();
            let errors: Vec<String> = bus_validator(&event.detail_type)
                .iter_errors(&detail)
                .map(|e| e.to_string())
                .collect();
            prop_assert!(errors.is_empty(), "{}: {:?}", detail, errors);
        }
    }

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

    /// Whatever order and redeliveries servicing's published events reach the ledger in, the
    /// sub-ledger kept from them (one entry per event id) equals servicing's balances, every
    /// entry balances and so does the whole (the trial balance is zero).
    #[test]
    fn the_sub_ledger_equals_servicing_for_any_delivery_of_its_events(
        (principal, ops) in ops(),
        swaps in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..60),
        copies in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut ledger = Ledger::new();
        for e in stream(principal, &ops) {
            ledger.ingest(e.to_string().as_bytes());
        }
        let mut details: Vec<Value> = ledger.outbox().iter().map(|e| e.detail()).collect();
        if !details.is_empty() {
            for copy in &copies {
                details.push(details[copy.index(details.len())].clone());
            }
            for (a, b) in &swaps {
                let (a, b) = (a.index(details.len()), b.index(details.len()));
                details.swap(a, b);
            }
        }
        let (mut sub, mut posted) = (SubLedger::default(), std::collections::HashSet::new());
        for detail in &details {
            let Some(entry) = entry_of(detail).expect("every published event posts or moves nothing") else {
                continue;
            };
            for t in &entry.transfers {
                prop_assert!(t.amount_minor > 0 && t.debit != t.credit, "{t:?}");
            }
            if posted.insert(entry.entry_id.clone()) {
                sub.post(&entry).expect("posts");
            }
        }
        prop_assert_eq!(sub.trial_balance(), 0);
        let differences = sub.differences(&the_account(&ledger));
        prop_assert!(differences.is_empty(), "{differences:?}");
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
