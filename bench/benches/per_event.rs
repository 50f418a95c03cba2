//! Per-event CPU cost of the account-state path without I/O: decode + validate, fingerprint,
//! the recent-facts lookup and update (a full list), apply, and building the
//! `TransactWriteItems` request.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use servicing_domain::SourceRef;
use servicing_domain::{Fingerprint, Outcome, ServicingEvent, apply};
use servicing_store::{
    Effect, LoanItem, LoanWrite, RECENT_FACTS_MAX, RecentFacts, ServicingStore, StoreConfig,
    UnitOfWork,
};

const OPEN: &str = r#"{"sourceSystem":"core-banking","sourceEventId":"open-1","eventType":"LOAN_OPENED","accountId":"acc_1","eventTime":"2026-09-01T09:00:00Z","principalMinor":100000,"currency":"EUR"}"#;
const DUE: &str = r#"{"sourceSystem":"scheduler","sourceEventId":"due-1","eventType":"INSTALLMENT_DUE","accountId":"acc_1","eventTime":"2026-10-01T00:00:00Z","installmentNo":1,"dueDate":"2026-10-01","principalMinor":8000,"interestMinor":1000}"#;
const PAYMENT: &str = r#"{"sourceSystem":"payment-provider","sourceEventId":"pmt_10001","eventType":"PAYMENT_SETTLED","accountId":"acc_1","eventTime":"2026-10-20T10:15:00Z","amountMinor":25000,"currency":"EUR"}"#;

fn applied(state: Option<&servicing_domain::LoanAccount>, body: &str) -> servicing_domain::Applied {
    let event = ServicingEvent::decode(body.as_bytes()).expect("valid");
    match apply(state, &event, None) {
        Outcome::Applied(a) => *a,
        other => panic!("{other:?}"),
    }
}

fn per_event(c: &mut Criterion) {
    let opened = applied(None, OPEN).account;
    let with_due = applied(Some(&opened), DUE).account;
    let payment = ServicingEvent::decode(PAYMENT.as_bytes()).expect("valid");

    c.bench_function("decode + validate (PAYMENT_SETTLED)", |b| {
        b.iter(|| ServicingEvent::decode(black_box(PAYMENT.as_bytes())).expect("valid"))
    });
    c.bench_function("fingerprint", |b| {
        b.iter(|| Fingerprint::of(black_box(&payment)))
    });
    c.bench_function("apply (waterfall + installments + DPD)", |b| {
        b.iter(|| apply(black_box(Some(&with_due)), black_box(&payment), None))
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = runtime.block_on(async {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        ServicingStore::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            StoreConfig::new("t", "account-state"),
        )
    });
    let outcome = applied(Some(&with_due), PAYMENT);
    let fingerprint = Fingerprint::of(&payment);
    const NOW: i64 = 1_796_000_000;
    // A busy account: the list is full of other payments.
    let others: Vec<SourceRef> = (0..RECENT_FACTS_MAX)
        .map(|i| SourceRef {
            system: "payment-provider".into(),
            event_id: format!("pmt_{i:05}"),
        })
        .collect();
    let recent = RecentFacts::default().with(others.iter().map(|s| (s, &fingerprint)), NOW);
    let loan = |account: &servicing_domain::LoanAccount, recent: RecentFacts| LoanItem {
        account_id: account.account_id.clone(),
        account: Some(account.clone()),
        version: 3,
        recent,
        parked: Default::default(),
    };
    let item = loan(&outcome.account, recent.clone());
    c.bench_function(
        "build TransactWriteItems (claim, loan, allocation, outbox)",
        |b| {
            b.iter(|| {
                let unit = UnitOfWork {
                    source: &payment.source,
                    event_type: payment.kind.wire_name(),
                    account_id: &payment.account_id,
                    fingerprint: &fingerprint,
                    released: false,
                    effect: Effect::Apply(&outcome),
                };
                let write = LoanWrite::Put {
                    item: &item,
                    expected: Some(2),
                    apart_before: &[],
                };
                store
                    .transaction_items(
                        black_box(std::slice::from_ref(&unit)),
                        Some(write),
                        NOW,
                        NOW * 1000,
                    )
                    .expect("items")
            })
        },
    );
    c.bench_function(
        "whole path: decode + fingerprint + recent facts + apply + build request",
        |b| {
            b.iter(|| {
                let event = ServicingEvent::decode(black_box(PAYMENT.as_bytes())).expect("valid");
                let fingerprint = Fingerprint::of(&event);
                assert!(!recent.holds(&event.source, &fingerprint, NOW));
                let Outcome::Applied(outcome) = apply(Some(&with_due), &event, None) else {
                    unreachable!()
                };
                let unit = UnitOfWork {
                    source: &event.source,
                    event_type: event.kind.wire_name(),
                    account_id: &event.account_id,
                    fingerprint: &fingerprint,
                    released: false,
                    effect: Effect::Apply(&outcome),
                };
                let item = loan(
                    &outcome.account,
                    recent.with([(&event.source, &fingerprint)], NOW),
                );
                let write = LoanWrite::Put {
                    item: &item,
                    expected: Some(2),
                    apart_before: &[],
                };
                store
                    .transaction_items(std::slice::from_ref(&unit), Some(write), NOW, NOW * 1000)
                    .expect("items")
                    .items
                    .len()
            })
        },
    );
}

criterion_group!(benches, per_event);
criterion_main!(benches);
