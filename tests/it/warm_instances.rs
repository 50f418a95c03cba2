//! Several warm Lambda instances, each with its own cache, and the reconciler running between
//! their deliveries (architecture invariants 9 and 10): a cache may save work, never settle a
//! verdict or a version. The findings one by one, then a model-based test: random deliveries to
//! two instances, reconciler runs and operators' resends at random points, every step compared
//! with the in-memory ledger.

use account_state::MessageResult;
use futures_util::StreamExt;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::generate::{fee, open, pay, reverse};
use integration_tests::servicing::{Servicing, process};
use integration_tests::soak::{self, SoakConfig, Tally, expire_everything};
use integration_tests::{Engine, record_figure};

on_both_engines!(
    when_the_reconciler_expired_a_fact_a_warm_instance_holds_parked_should_judge_its_resend_again,
    when_the_reconciler_empties_a_loan_item_should_never_repeat_its_version,
    when_dynamodb_refuses_a_released_fact_should_quarantine_it_and_not_the_next_event,
    when_only_the_loan_item_is_written_and_refused_should_not_count_as_committed,
    when_a_stale_instance_finds_its_payment_a_duplicate_should_still_release_what_it_made_ready,
    when_instances_and_the_reconciler_interleave_should_match_the_ledger_at_every_step,
);

async fn when_the_reconciler_expired_a_fact_a_warm_instance_holds_parked_should_judge_its_resend_again(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let warm = servicing.handler();
    let (a, b) = ("acc_warm_resent", "acc_warm_corrected");
    // Fees before their accounts' openings (no reversal in the batch: the cache is used).
    let fee_of = |account: &str| fee(account, &format!("fee-{account}"), 4, 700);
    assert_eq!(
        process(&warm, &[("fa", fee_of(a)), ("fb", fee_of(b))]).await,
        [MessageResult::Parked, MessageResult::Parked]
    );
    // The openings never came: expired, quarantined, their claims released for a resend.
    assert_eq!(expire_everything(&servicing).await, 2);
    // The resends reach the instance that still caches them as parked. It cannot know they
    // were taken off: the store decides. The same payload is parked again (a fresh wait), not
    // a duplicate; a corrected payload is parked too, not a collision with a fact that is gone.
    let mut corrected = fee_of(b);
    corrected["amountMinor"] = 750.into();
    assert_eq!(
        process(&warm, &[("fa2", fee_of(a)), ("fb2", corrected)]).await,
        [MessageResult::Parked, MessageResult::Parked]
    );
    // The openings arrive: each releases its fee.
    assert_eq!(
        process(&warm, &[("oa", open(a)), ("ob", open(b))]).await,
        [MessageResult::Applied, MessageResult::Applied]
    );
    for (account, fees) in [(a, 700), (b, 750)] {
        let (loan, _) = servicing.loan(account).await.expect("loan");
        assert_eq!(loan.fees_outstanding_minor, fees, "{account}");
    }
}

async fn when_the_reconciler_empties_a_loan_item_should_never_repeat_its_version(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let (first, second) = (servicing.handler(), servicing.handler());
    let a = "acc_version_reuse";
    // Instance 1 parks a fee before the opening and caches the item at version 1.
    assert_eq!(
        process(&first, &[("f1", fee(a, "fee-1", 3, 100))]).await,
        [MessageResult::Parked]
    );
    // The reconciler takes it off: the item held nothing else.
    assert_eq!(expire_everything(&servicing).await, 1);
    // Instance 2 parks another fee on the account.
    assert_eq!(
        process(&second, &[("f2", fee(a, "fee-2", 3, 250))]).await,
        [MessageResult::Parked]
    );
    // The opening reaches instance 1, whose cached item says version 1 with fee-1 parked: its
    // version check must fail, so fee-2 is released and the expired fee-1 is not applied.
    assert_eq!(
        process(&first, &[("o", open(a))]).await,
        [MessageResult::Applied]
    );
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        loan.fees_outstanding_minor, 250,
        "fee-2 applied, the expired fee-1 not"
    );
    let parked = servicing_ops::parked::list(&servicing.store("account-state"))
        .await
        .expect("list");
    assert!(parked.is_empty(), "{parked:?}");
}

async fn when_dynamodb_refuses_a_released_fact_should_quarantine_it_and_not_the_next_event(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let a = "acc_refused_release";
    process(&handler, &[("o", open(a))]).await;
    assert_eq!(
        process(&handler, &[("r", reverse(a, "rev-1", "pay-1", 4, 700))]).await,
        [MessageResult::Parked]
    );
    // Request 0 reads the account (a reversal's payment is read with it), 1 commits the
    // payment, 2 the released reversal with the fee: refused as a request, and again when
    // the reversal goes alone (3).
    let cold = servicing.faulty_handler(servicing.config(), &faults);
    faults.at_request(2, Fault::Invalid);
    faults.at_request(3, Fault::Invalid);
    let results = process(
        &cold,
        &[
            ("p", pay(a, "pay-1", 3, 700)),
            ("f", fee(a, "fee-1", 5, 40)),
        ],
    )
    .await;
    assert_eq!(faults.pending(), 0, "both faults taken");
    assert_eq!(results, [MessageResult::Applied, MessageResult::Applied]);
    let quarantine = servicing.quarantine().await;
    let codes: Vec<(Option<&str>, &str)> = quarantine
        .iter()
        .map(|q| (q.source_event_id.as_deref(), q.code.as_str()))
        .collect();
    assert_eq!(codes, [(Some("rev-1"), "store_rejected")]);
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        (
            loan.principal_outstanding_minor,
            loan.fees_outstanding_minor
        ),
        (99_300, 40)
    );
    let parked = servicing_ops::parked::list(&servicing.store("account-state"))
        .await
        .expect("list");
    assert!(parked.is_empty(), "off the loan item: {parked:?}");
    // Its claim is released: a resend is judged again (here it applies).
    assert_eq!(
        process(
            &servicing.handler(),
            &[("r2", reverse(a, "rev-1", "pay-1", 4, 700))]
        )
        .await,
        [MessageResult::Applied]
    );
}

async fn when_only_the_loan_item_is_written_and_refused_should_not_count_as_committed(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let a = "acc_loan_only";
    // A reversal before its account's opening, of a payment that is not there yet.
    assert_eq!(
        process(&handler, &[("r", reverse(a, "rev-1", "pay-1", 4, 700))]).await,
        [MessageResult::Parked]
    );
    // The opening releases it, and it parks again (now for its payment): a group of its own
    // that writes only the loan item once the first group was refused as a request and split.
    // Request 0 reads the payment, 1 commits opening + release (refused), 2 the opening alone,
    // 3 the release alone: cancelled by a concurrent transaction.
    faults.at_request(1, Fault::Invalid);
    faults.at_request(3, Fault::TransactionConflict);
    let results = process(&handler, &[("o", open(a))]).await;
    assert_eq!(faults.pending(), 0, "both faults taken");
    assert_eq!(results, [MessageResult::Applied]);
    // Cancelled is not committed: it was written again, nothing is left ready.
    let loan = servicing
        .store("account-state")
        .load(&servicing_domain::AccountId::parse(a).expect("id"), &[])
        .await
        .expect("load")
        .loan
        .expect("loan");
    let parked: Vec<_> = loan.parked.iter().map(|f| f.awaits.is_some()).collect();
    assert_eq!(
        parked,
        [true],
        "rev-1 waits for its payment: {:?}",
        loan.parked
    );
    assert_eq!(
        loan.version, 3,
        "parked, opened, judged again (parked for its payment)"
    );
    // And the payment, when it comes, releases it for good.
    assert_eq!(
        process(&servicing.handler(), &[("p", pay(a, "pay-1", 3, 700))]).await,
        [MessageResult::Applied]
    );
    let (account, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        account.principal_outstanding_minor, 100_000,
        "paid, then reversed"
    );
}

/// Issue 30: two instances, batch size 1. The instance that applied a payment could not commit
/// the reversal it made ready, so the payment comes back — to the other instance, whose warm
/// state predates the payment. Its transaction is cancelled with the claim refused (a
/// duplicate) *and* the loan's version condition failed: the state it judged on is stale, so
/// it reads again and releases the reversal before it acknowledges.
async fn when_a_stale_instance_finds_its_payment_a_duplicate_should_still_release_what_it_made_ready(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let first = servicing.faulty_handler(servicing.config(), &faults);
    let second = servicing.handler();
    let a = "acc_stale_duplicate";
    assert_eq!(
        process(&second, &[("o", open(a))]).await,
        [MessageResult::Applied]
    );
    assert_eq!(
        process(&second, &[("r", reverse(a, "rev-1", "pay-1", 4, 700))]).await,
        [MessageResult::Parked]
    );
    // Warms the second instance with the reversal parked (no reversal in it: its cache holds).
    assert_eq!(
        process(&second, &[("f", fee(a, "fee-1", 4, 300))]).await,
        [MessageResult::Applied]
    );
    // The first instance applies the payment; the reversal's commit (its second) fails.
    faults.at_commit(1, Fault::ServerError);
    let got = process(&first, &[("p", pay(a, "pay-1", 3, 700))]).await;
    assert_eq!(faults.pending(), 0, "the release's commit was faulted");
    assert!(
        matches!(got.as_slice(), [MessageResult::Retry { .. }]),
        "the payment carries the unreleased reversal back: {got:?}"
    );
    // Its redelivery reaches the second instance.
    assert_eq!(
        process(&second, &[("p2", pay(a, "pay-1", 3, 700))]).await,
        [MessageResult::Duplicate]
    );
    let loan = servicing
        .store("account-state")
        .load(&servicing_domain::AccountId::parse(a).expect("id"), &[])
        .await
        .expect("load")
        .loan
        .expect("loan");
    assert!(loan.parked.is_empty(), "released: {:?}", loan.parked);
    let (account, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        account.principal_outstanding_minor, 100_000,
        "paid, then reversed"
    );
}

/// Model-based cases per engine.
const MODEL_CASES: u64 = 40;

/// Issue 30: three warm instances, each delivery to a random one, batch sizes 1 and up to 10,
/// FIFO and standard order, faults at random request indices (throttling past the SDK's
/// retries, a 5xx, a response lost after the commit, a cancelling concurrent transaction),
/// operators' resends and collisions, the reconciler's expiry and the daily business-day close
/// between deliveries (`integration_tests::soak`): every final verdict equals the ledger's, and
/// whenever nothing is owed a redelivery every account equals the ledger's. It fails on the
/// code before a failed loan condition made a snapshot stale (a ready reversal left behind).
async fn when_instances_and_the_reconciler_interleave_should_match_the_ledger_at_every_step(
    engine: Engine,
) {
    let cases = (0..MODEL_CASES).map(|seed| async move {
        let servicing = Servicing::with_stream(engine, false).await;
        let config = SoakConfig {
            seed,
            accounts: 3,
            instances: 3,
            largest_batch: if seed.is_multiple_of(2) { 1 } else { 10 },
            fifo: !seed.is_multiple_of(3),
            duplicate_percent: 0,
            fault_percent: 33,
            kill_percent: 0,
        };
        soak::run_case(&servicing, &config).await
    });
    let mut tally = Tally::default();
    for case in futures_util::stream::iter(cases)
        .buffer_unordered(8)
        .collect::<Vec<Tally>>()
        .await
    {
        tally.add(case);
    }
    record_figure(&format!(
        "model-based warm instances ({engine:?}): 3 instances, batch sizes 1 and up to 10: {}",
        tally.line()
    ));
    assert!(
        tally.differences.is_empty(),
        "{engine:?}: {}",
        tally.differences[..tally.differences.len().min(5)].join("\n")
    );
    // The model must reach what docs/testing.md claims: otherwise it proves less than it says.
    assert!(
        tally.deliveries >= 1_200 && tally.redelivered >= 300,
        "{engine:?}: {}",
        tally.line()
    );
    assert!(tally.faults.iter().all(|n| *n >= 50), "{}", tally.line());
    assert!(
        tally.collisions >= 20 && tally.reconciler_runs >= 100 && tally.closes >= 50,
        "{}",
        tally.line()
    );
}
