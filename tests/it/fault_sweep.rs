//! A fault at every request of a run, not only at the first commit (architecture invariant 10):
//! for each generated stream (the ordering property's: facts that wait for another delivered
//! early, duplicates injected, random batch cuts), a clean run counts the DynamoDB requests it
//! makes, each identified by its operation and the account it touches (accounts run side by
//! side: request N of one run need not be request N of another); then, for every such request
//! and every fault kind that differs there — throttling past the SDK's retries and a 5xx for
//! any request, a response lost after the commit and a cancelling concurrent transaction for a
//! commit — a fresh run faults that request
//! (whatever its kind: a read, a commit, a release's commit, a quarantine write) and
//! redelivers what it reports failed, as SQS would. Every run must end in the in-memory
//! ledger's state: balances, allocations, outbox events, claims, nothing left parked.

use account_state::{AccountStateHandler, MessageResult};
use futures_util::StreamExt;
use integration_tests::faults::{Fault, FaultPlan, Signature};
use integration_tests::generate::ordering_case;
use integration_tests::servicing::{Servicing, sqs_message};
use integration_tests::{Engine, Rng, record_figure};
use servicing_domain::Ledger;

on_both_engines!(when_any_request_of_a_run_fails_should_still_reach_the_ledger_state);

/// Generated streams per engine.
const STREAMS: u64 = 8;
/// The faulted runs `docs/testing.md` claims per engine, at least: fewer and the sweep proves
/// less than it says.
const DOCUMENTED_RUNS: usize = 800;
const KINDS: [Fault; 4] = [
    Fault::Throttle,
    Fault::ServerError,
    Fault::LoseResponse,
    // Taken by a commit only (a read answers it as a throttle would): DynamoDB's cancellation
    // by a concurrent transaction, which no local engine produces.
    Fault::TransactionConflict,
];

/// One generated case: its accounts (named after `tag`, so runs share a table), the queue's
/// bodies and the ledger's in-order result.
struct Case {
    accounts: Vec<String>,
    bodies: Vec<String>,
    ledger: Ledger,
}

fn case(seed: u64, tag: &str) -> Case {
    let mut rng = Rng(seed * 2_654_435_761 + 29);
    let accounts: Vec<String> = (0..3).map(|a| format!("acc_s{seed}_{tag}_{a}")).collect();
    let (ledger, bodies) = ordering_case(&mut rng, &accounts, seed.is_multiple_of(2));
    Case {
        accounts,
        bodies,
        ledger,
    }
}

/// Delivers the case in batch cuts drawn from `seed` (the same for every run of a case), each
/// failed message back at the head of the queue with its receive count raised. After each
/// batch, an account whose messages were all acknowledged holds no parked fact that is ready.
async fn deliver(servicing: &Servicing, handler: &AccountStateHandler, case: &Case, seed: u64) {
    let mut rng = Rng(seed + 7_919);
    let mut queue: std::collections::VecDeque<(String, &String, u32)> = case
        .bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("m{i}"), b, 1))
        .collect();
    let mut rounds = 0;
    while !queue.is_empty() {
        rounds += 1;
        assert!(rounds < 500, "the run does not settle: {queue:?}");
        let size = (1 + rng.below(10)).min(queue.len());
        let batch: Vec<_> = queue.drain(..size).collect();
        let messages: Vec<_> = batch
            .iter()
            .map(|(id, body, n)| sqs_message(id, body, *n))
            .collect();
        let report = handler.process(&messages).await;
        let retried: std::collections::HashSet<&str> = report
            .results
            .iter()
            .filter(|(_, r)| matches!(r, MessageResult::Retry { .. }))
            .map(|(id, _)| id.as_str())
            .collect();
        servicing
            .assert_nothing_ready_once_acknowledged(&messages, &retried)
            .await;
        for (id, body, n) in batch.into_iter().rev() {
            if retried.contains(id.as_str()) {
                queue.push_front((id, body, n + 1));
            }
        }
    }
}

async fn when_any_request_of_a_run_fails_should_still_reach_the_ledger_state(engine: Engine) {
    let mut runs = 0usize;
    let mut by_operation: std::collections::BTreeMap<String, usize> = Default::default();
    for seed in 0..STREAMS {
        let clean = case(seed, "sweep");
        let faults = FaultPlan::default();
        let servicing = &Servicing::with_stream(engine, false).await;
        let handler = servicing.faulty_handler(servicing.config(), &faults);
        deliver(servicing, &handler, &clean, seed).await;
        let context = format!("{engine:?} stream {seed}, no fault");
        servicing
            .assert_accounts_match(&clean.ledger, &clean.accounts, &context)
            .await;
        servicing.drop_table().await;
        // Every request of the clean run by what it does (the same accounts in every run, each
        // run on its own table), and only the faults that differ there: a read cannot be
        // cancelled by a concurrent transaction, nor lose a response that changed anything.
        let signatures: std::collections::BTreeSet<Signature> =
            faults.signatures().into_iter().collect();
        let plans: Vec<(Signature, Fault)> = signatures
            .into_iter()
            .flat_map(|signature| {
                let commit = signature.operation == "TransactWriteItems";
                KINDS
                    .into_iter()
                    .filter(move |kind| {
                        commit || matches!(kind, Fault::Throttle | Fault::ServerError)
                    })
                    .map(move |kind| (signature.clone(), kind))
            })
            .collect();
        runs += plans.len();
        for (signature, _) in &plans {
            *by_operation.entry(signature.operation.clone()).or_default() += 1;
        }
        let faulted = plans.into_iter().map(|(signature, kind)| async move {
            let case = case(seed, "sweep");
            let faults = FaultPlan::default();
            let context = format!("{engine:?} stream {seed}, {kind:?} at {signature}");
            faults.at_signature(signature, kind);
            // A table per run (the checks scan it) and a fresh instance: a cold cache.
            let servicing = &Servicing::with_stream(engine, false).await;
            let handler = servicing.faulty_handler(servicing.config(), &faults);
            deliver(servicing, &handler, &case, seed).await;
            assert_eq!(faults.pending(), 0, "{context}: the fault was never taken");
            servicing
                .assert_claims_match(&case.ledger, &case.bodies, &context)
                .await;
            servicing
                .assert_accounts_match(&case.ledger, &case.accounts, &context)
                .await;
            servicing.drop_table().await;
        });
        futures_util::stream::iter(faulted)
            .buffer_unordered(8)
            .collect::<Vec<()>>()
            .await;
    }
    record_figure(&format!(
        "fault sweep ({engine:?}): {runs} faulted runs over {STREAMS} generated streams, every request by operation and account (requests faulted per operation: {by_operation:?}) x {{throttle, 5xx}}, commits also x {{lost response, transaction conflict}}"
    ));
    assert!(
        by_operation.contains_key("TransactWriteItems") && by_operation.len() >= 2,
        "{engine:?}: the sweep reached {by_operation:?}"
    );
    assert!(
        runs >= DOCUMENTED_RUNS,
        "{engine:?}: {runs} faulted runs, docs/testing.md claims {DOCUMENTED_RUNS}"
    );
}
