//! The invocation's deadline (account-state): no read or commit starts after it — not even a
//! commit that group commit held while another account's read was slow — what is left is
//! answered as retries with a decision record each, and redelivery ends in the ledger's state
//! whatever moment the deadline falls on. Without it Lambda would end the invocation
//! unanswered: the whole batch redelivered, the records of what was done never printed.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use account_state::{AccountStateHandler, Deadline, MessageResult, Verdict};
use futures_util::StreamExt;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::generate::ordering_case;
use integration_tests::servicing::{Servicing, sqs_message};
use integration_tests::{Engine, Rng, record_figure};
use servicing_domain::Ledger;

on_both_engines!(
    when_the_deadline_is_near_before_any_request_should_send_none_and_retry_the_batch,
    when_any_request_is_slow_past_the_deadline_should_start_none_after_it,
    when_the_deadline_falls_anywhere_in_a_run_should_still_reach_the_ledger_state,
    when_the_function_has_any_timeout_users_configure_should_apply_every_fact,
    when_a_request_hangs_in_a_three_second_invocation_should_answer_before_its_deadline,
);

/// Generated streams per engine.
const STREAMS: u64 = 16;

/// A generated stream of three accounts (facts that wait for another delivered early,
/// duplicates injected) and the ledger's in-order result.
fn case(seed: u64, tag: &str) -> (Vec<String>, Vec<String>, Ledger) {
    let mut rng = Rng(seed * 7_919 + 3);
    let accounts: Vec<String> = (0..3).map(|a| format!("acc_dl{seed}_{tag}_{a}")).collect();
    let (ledger, bodies) = ordering_case(&mut rng, &accounts, seed.is_multiple_of(2));
    (accounts, bodies, ledger)
}

async fn when_the_deadline_is_near_before_any_request_should_send_none_and_retry_the_batch(
    engine: Engine,
) {
    let (accounts, bodies, ledger) = case(100, "near");
    let faults = FaultPlan::default();
    let servicing = &Servicing::with_stream(engine, false).await;
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let messages = messages(&bodies);

    let last_start = SystemTime::now();
    let report = handler
        .process_until(&messages, Deadline::requests_until(last_start))
        .await;

    assert_eq!(
        faults.requests(),
        0,
        "{engine:?}: a request started past the deadline"
    );
    assert_eq!(
        report.response().batch_item_failures.len(),
        messages.len(),
        "{engine:?}: every message is left for redelivery"
    );
    assert_eq!(report.decisions.len(), messages.len());
    assert!(
        report
            .decisions
            .iter()
            .all(|d| d.verdict == Verdict::Retried),
        "{engine:?}: {:?}",
        report.decisions
    );
    // SQS brings the batch back: it applies in full.
    let mut queue = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| (format!("m{i}"), body.clone(), 2))
        .collect();
    let mut rng = Rng(7);
    deliver(servicing, &handler, &mut queue, &mut rng, Duration::ZERO).await;
    let context = format!("{engine:?}, after a batch stopped before its first request");
    servicing
        .assert_accounts_match(&ledger, &accounts, &context)
        .await;
}

/// Function timeouts users configure: AWS's and SAM's default (3 s) up to Lambda's maximum.
const TIMEOUTS_SECONDS: [u64; 5] = [3, 6, 15, 30, 900];
/// The template's `MaxReceiveCount` default: the delivery after it goes to the dead-letter queue.
const MAX_RECEIVE_COUNT: u32 = 8;

/// The deadline Lambda's context carries for an invocation of a function with this timeout
/// that starts now.
fn invocation(timeout: Duration) -> Deadline {
    let at = SystemTime::now() + timeout;
    let millis = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    Deadline::of_invocation(u64::try_from(millis).expect("millis")).expect("the timeout fits")
}

/// Issue 30: with a fixed 12 s reserve, a function with a timeout of 12 s or less started no
/// request and retried every message into the dead-letter queue. The same generated streams
/// at every timeout of the matrix, each batch an invocation of that timeout: every fact
/// applied, nothing dead-lettered.
async fn when_the_function_has_any_timeout_users_configure_should_apply_every_fact(engine: Engine) {
    let mut batches = 0u64;
    for seconds in TIMEOUTS_SECONDS {
        let timeout = Duration::from_secs(seconds);
        for seed in 0..3 {
            let (accounts, bodies, ledger) = case(seed + 40, &format!("t{seconds}"));
            let servicing = &Servicing::with_stream(engine, false).await;
            let handler = servicing.handler();
            let mut queue = queue_of(&bodies);
            let mut rng = Rng(seed + seconds);
            let mut dead_lettered = Vec::new();
            while !queue.is_empty() {
                batches += 1;
                let size = (1 + rng.below(10)).min(queue.len());
                let batch: Vec<_> = queue.drain(..size).collect();
                let messages: Vec<_> = batch
                    .iter()
                    .map(|(id, body, n)| sqs_message(id, body, *n))
                    .collect();
                let report = handler.process_until(&messages, invocation(timeout)).await;
                let retried: HashSet<&str> = report
                    .results
                    .iter()
                    .filter(|(_, r)| matches!(r, MessageResult::Retry { .. }))
                    .map(|(id, _)| id.as_str())
                    .collect();
                for (id, body, n) in batch.into_iter().rev() {
                    if retried.contains(id.as_str()) {
                        match n < MAX_RECEIVE_COUNT {
                            true => queue.push_front((id, body, n + 1)),
                            false => dead_lettered.push(id),
                        }
                    }
                }
            }
            assert!(
                dead_lettered.is_empty(),
                "{engine:?}, timeout {seconds} s, stream {seed}: dead-lettered {dead_lettered:?}"
            );
            let context = format!("{engine:?}, timeout {seconds} s, stream {seed}");
            servicing
                .assert_accounts_match(&ledger, &accounts, &context)
                .await;
            servicing.drop_table().await;
        }
    }
    record_figure(&format!(
        "timeout matrix {engine:?}: timeouts {TIMEOUTS_SECONDS:?} s x 3 streams, {batches} batches, every fact applied, none dead-lettered"
    ));
}

/// A request that hangs (here: 10 s, the SDK's whole operation timeout) in an invocation of a
/// 3 s function is cut when the answer is due: the batch answers before Lambda's deadline,
/// with a retry for what is left, and its redelivery reaches the ledger's state.
async fn when_a_request_hangs_in_a_three_second_invocation_should_answer_before_its_deadline(
    engine: Engine,
) {
    let timeout = Duration::from_secs(3);
    for hung in [0u64, 1, 3] {
        let (accounts, bodies, ledger) = case(500 + hung, "hang");
        let faults = FaultPlan::default();
        faults.at_request(hung, Fault::Slow(aws_setup::OPERATION_TIMEOUT));
        let servicing = &Servicing::with_stream(engine, false).await;
        let handler = servicing.faulty_handler(servicing.config(), &faults);
        let started = Instant::now();
        let report = handler
            .process_until(&messages(&bodies), invocation(timeout))
            .await;
        let took = started.elapsed();
        assert!(
            took < timeout,
            "{engine:?}, request {hung} hung: answered after {took:?}, past the 3 s deadline"
        );
        let mut queue = retried(&report, &bodies);
        assert!(
            !queue.is_empty(),
            "{engine:?}: the hung request left work undone"
        );
        deliver(
            servicing,
            &handler,
            &mut queue,
            &mut Rng(hung),
            Duration::ZERO,
        )
        .await;
        let context = format!("{engine:?}, request {hung} hung in a 3 s invocation");
        servicing
            .assert_accounts_match(&ledger, &accounts, &context)
            .await;
        servicing.drop_table().await;
    }
}

/// The deadline of the slow-request sweep, after the batch starts: far beyond what its requests
/// take here, far before the slow one ends.
const LAST_START: Duration = Duration::from_millis(600);
const SLOW: Duration = Duration::from_millis(2_500);
/// Between a request allowed just before the deadline and its arrival at the HTTP layer.
const DISPATCH: Duration = Duration::from_millis(500);

/// For every request N of a clean one-batch run (three accounts side by side, so their commits
/// share transactions), a run in which request N is slow past the deadline: no request may
/// start after the deadline — a commit group commit held for the slow account included — and
/// redelivering what was left ends in the ledger's state.
async fn when_any_request_is_slow_past_the_deadline_should_start_none_after_it(engine: Engine) {
    let requests = {
        let (_, bodies, _) = case(300, "count");
        let faults = FaultPlan::default();
        let servicing = &Servicing::with_stream(engine, false).await;
        let handler = servicing.faulty_handler(servicing.config(), &faults);
        handler.process(&messages(&bodies)).await;
        servicing.drop_table().await;
        faults.requests()
    };
    let runs = futures_util::stream::iter(0..requests)
        .map(|n| async move {
            let (accounts, bodies, ledger) = case(300, &format!("slow{n}"));
            let faults = FaultPlan::default();
            faults.at_request(n, Fault::Slow(SLOW));
            let servicing = &Servicing::with_stream(engine, false).await;
            let handler = servicing.faulty_handler(servicing.config(), &faults);
            let last_start = SystemTime::now() + LAST_START;
            let report = handler
                .process_until(&messages(&bodies), Deadline::requests_until(last_start))
                .await;
            let late: Vec<Duration> = faults
                .request_starts()
                .iter()
                .filter_map(|at| at.duration_since(last_start).ok())
                .filter(|past| *past > DISPATCH)
                .collect();
            assert!(
                late.is_empty(),
                "{engine:?}, request {n} slow: requests started {late:?} past the deadline"
            );
            let mut queue = retried(&report, &bodies);
            let retried = queue.len();
            deliver(
                servicing,
                &handler,
                &mut queue,
                &mut Rng(n + 1),
                Duration::ZERO,
            )
            .await;
            let context = format!("{engine:?}, request {n} slow past the deadline");
            servicing
                .assert_accounts_match(&ledger, &accounts, &context)
                .await;
            servicing.drop_table().await;
            retried
        })
        .buffer_unordered(8)
        .collect::<Vec<usize>>()
        .await;
    let stopped = runs.iter().filter(|retried| **retried > 0).count();
    record_figure(&format!(
        "deadline {engine:?}: {requests} runs, each with one request slow past the deadline; {stopped} left messages for redelivery, none started a request after it"
    ));
    assert!(
        stopped > 0,
        "{engine:?}: no slow request left anything undone"
    );
}

/// What a batch of `messages(bodies)` answered as retries, back in SQS's queue for their
/// second delivery.
fn retried(
    report: &account_state::BatchReport,
    bodies: &[String],
) -> VecDeque<(String, String, u32)> {
    report
        .results
        .iter()
        .filter(|(_, r)| matches!(r, MessageResult::Retry { .. }))
        .map(|(id, _)| {
            let i: usize = id[1..].parse().expect("m<i>");
            (id.clone(), bodies[i].clone(), 2)
        })
        .collect()
}

fn messages(bodies: &[String]) -> Vec<aws_lambda_events::event::sqs::SqsMessage> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, body)| sqs_message(&format!("m{i}"), body, 1))
        .collect()
}

async fn when_the_deadline_falls_anywhere_in_a_run_should_still_reach_the_ledger_state(
    engine: Engine,
) {
    // How long a batch takes on this engine and machine: the deadlines fall inside that span.
    let span = {
        let (_, bodies, _) = case(999, "span");
        let servicing = &Servicing::with_stream(engine, false).await;
        let handler = servicing.handler();
        let mut queue = queue_of(&bodies);
        let started = Instant::now();
        let batches = deliver(servicing, &handler, &mut queue, &mut Rng(5), Duration::ZERO).await;
        servicing.drop_table().await;
        started.elapsed() / u32::try_from(batches.total).expect("batches")
    };
    let mut totals = Batches::default();
    for seed in 0..STREAMS {
        let (accounts, bodies, ledger) = case(seed, "any");
        let servicing = &Servicing::with_stream(engine, false).await;
        let handler = servicing.handler();
        let mut queue = queue_of(&bodies);
        let mut rng = Rng(seed + 11);
        let batches = deliver(servicing, &handler, &mut queue, &mut rng, span).await;
        totals.total += batches.total;
        totals.stopped_midway += batches.stopped_midway;
        let context = format!("{engine:?} stream {seed}, deadlines within {span:?}");
        servicing
            .assert_accounts_match(&ledger, &accounts, &context)
            .await;
        servicing.drop_table().await;
    }
    record_figure(&format!(
        "deadline {engine:?}: {STREAMS} streams, {} batches, {} stopped between two requests (batch span {span:?})",
        totals.total, totals.stopped_midway
    ));
    assert!(
        totals.stopped_midway > 0,
        "{engine:?}: no deadline fell between two requests of a batch ({} batches, span {span:?})",
        totals.total
    );
}

#[derive(Debug, Default)]
struct Batches {
    total: u64,
    /// Batches that applied some facts and left others for the deadline.
    stopped_midway: u64,
}

fn queue_of(bodies: &[String]) -> VecDeque<(String, String, u32)> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, body)| (format!("m{i}"), body.clone(), 1))
        .collect()
}

/// Delivers the queue in random batch cuts, as SQS would: what a batch reports failed comes
/// back at the head with its receive count raised. With a `span`, two batches in three (drawn)
/// may start no request past a moment drawn inside it. After each batch, an account whose
/// messages were all acknowledged holds no parked fact that is ready.
async fn deliver(
    servicing: &Servicing,
    handler: &AccountStateHandler,
    queue: &mut VecDeque<(String, String, u32)>,
    rng: &mut Rng,
    span: Duration,
) -> Batches {
    let mut batches = Batches::default();
    while !queue.is_empty() {
        batches.total += 1;
        assert!(batches.total < 500, "the run does not settle: {queue:?}");
        let size = (1 + rng.below(10)).min(queue.len());
        let batch: Vec<_> = queue.drain(..size).collect();
        let messages: Vec<_> = batch
            .iter()
            .map(|(id, body, n)| sqs_message(id, body, *n))
            .collect();
        let span_micros = usize::try_from(span.as_micros()).expect("span");
        let deadline = if span_micros > 0 && rng.below(3) > 0 {
            let drawn = rng.below(span_micros + 1);
            let within = Duration::from_micros(u64::try_from(drawn).expect("micros"));
            Deadline::requests_until(SystemTime::now() + within)
        } else {
            Deadline::NONE
        };
        let report = handler.process_until(&messages, deadline).await;
        let retried: HashSet<&str> = report
            .results
            .iter()
            .filter(|(_, r)| matches!(r, MessageResult::Retry { .. }))
            .map(|(id, _)| id.as_str())
            .collect();
        if !retried.is_empty() && retried.len() < report.results.len() {
            batches.stopped_midway += 1;
        }
        servicing
            .assert_nothing_ready_once_acknowledged(&messages, &retried)
            .await;
        for (id, body, n) in batch.into_iter().rev() {
            if retried.contains(id.as_str()) {
                queue.push_front((id, body, n + 1));
            }
        }
    }
    batches
}
