//! Out-of-order facts are parked and applied in business order (contract: "Out-of-order facts
//! are parked, never retried into quarantine"), on both engines: an ordering property compared
//! with the in-memory ledger's in-order result, and the scenarios around parking.

use std::time::Duration;

use account_state::{AccountStateHandler, BatchCounts, MessageResult};
use futures_util::StreamExt;
use integration_tests::generate::{fee, open, ordering_case, pay, reverse};
use integration_tests::servicing::{Servicing, process, push_out_of_recent_facts, sqs_message};
use integration_tests::{Engine, Rng};
use serde_json::{Value, json};

use integration_tests::faults::{Fault, FaultPlan};

on_both_engines!(
    when_dependent_facts_arrive_early_in_any_batch_cut_should_reach_the_in_order_ledger_state,
    when_events_precede_their_opening_on_a_fifo_group_should_apply_them_after_it,
    when_a_payment_is_reversed_twice_in_one_batch_should_apply_one_and_reject_the_other,
    when_a_parked_fact_is_redelivered_should_be_a_duplicate_or_a_collision,
    when_a_fact_stays_parked_past_the_retention_should_be_quarantined_and_resendable,
    when_the_response_is_lost_after_parking_or_releasing_should_apply_each_fact_once,
    when_a_payment_is_redelivered_after_its_claim_expired_should_be_a_duplicate,
    when_a_reversal_is_resent_beyond_the_claim_retention_should_never_reverse_twice,
    when_an_account_holds_parked_facts_past_its_budget_should_still_apply_its_other_facts,
    when_an_account_holds_its_bound_of_parked_facts_should_quarantine_only_the_next_one,
);

/// Delivers `bodies` to `handler` in batches of ten and to `ledger` in the same order; every
/// verdict must be the ledger's.
async fn deliver_checked(
    handler: &AccountStateHandler,
    ledger: &mut servicing_domain::Ledger,
    bodies: &[Value],
    tag: &str,
) -> Vec<MessageResult> {
    let mut all = Vec::new();
    for (n, chunk) in bodies.chunks(10).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("{tag}{n}-{i}"), &b.to_string(), 1))
            .collect();
        let report = handler.process(&messages).await;
        for ((_, got), body) in report.results.into_iter().zip(chunk) {
            let want = ledger.ingest(body.to_string().as_bytes());
            let want = match want {
                servicing_domain::Disposition::Applied => MessageResult::Applied,
                servicing_domain::Disposition::Parked(_) => MessageResult::Parked,
                servicing_domain::Disposition::Quarantined { reason } => {
                    MessageResult::Quarantined {
                        code: reason.split(':').next().unwrap_or_default().to_owned(),
                    }
                }
                other => panic!("unexpected in this stream: {other:?}"),
            };
            assert_eq!(got, want, "{tag}: {body}");
            all.push(got);
        }
    }
    all
}

/// The approximate stored size of an item (names and values as JSON).
fn approx_bytes(
    item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
) -> usize {
    item.iter()
        .map(|(k, v)| k.len() + format!("{v:?}").len())
        .sum()
}

/// Issue 30: thirty-five reversals with valid ~11 KB bodies (an unknown field is tolerated)
/// parked on payments that had not arrived pushed the loan item towards DynamoDB's 400 KB, and
/// 22 of the account's next 25 payments were refused and quarantined `store_rejected`. Parked
/// bodies beyond the account's budget live in items of their own: every ordinary fact applies,
/// the loan item stays small, the reversals apply when their payments come (their bodies read
/// back), and no body item is left behind.
async fn when_an_account_holds_parked_facts_past_its_budget_should_still_apply_its_other_facts(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let mut ledger = servicing_domain::Ledger::new();
    let a = "acc_noisy";
    let padding = "x".repeat(11_000);
    let reversals: Vec<Value> = (0..35)
        .map(|n| {
            let mut r = reverse(a, &format!("rev-{n}"), &format!("pay-{n}"), 5, 100);
            r["producerNote"] = json!(padding);
            r
        })
        .collect();
    let ordinary: Vec<Value> = (0..25)
        .map(|n| pay(a, &format!("ord-{n}"), 6, 10 + n))
        .collect();
    let awaited: Vec<Value> = (0..35)
        .map(|n| pay(a, &format!("pay-{n}"), 4, 100))
        .collect();

    deliver_checked(&handler, &mut ledger, &[open(a)], "o").await;
    let parked = deliver_checked(&handler, &mut ledger, &reversals, "r").await;
    assert!(
        parked.iter().all(|r| *r == MessageResult::Parked),
        "{parked:?}"
    );
    let loans = servicing.items_of_type("LOAN").await;
    let loan_bytes = loans.iter().map(approx_bytes).max().unwrap_or_default();
    assert!(
        loan_bytes < 32_000,
        "{engine:?}: the loan item holds {loan_bytes} bytes with 35 large facts parked"
    );
    // The account's state, bodies apart included, is one request: what releases them reads
    // them in the batch's one read round.
    let reads = FaultPlan::default();
    let account = servicing_domain::AccountId::parse(a).expect("account id");
    let snapshot = servicing
        .faulty_store("account-state", &reads)
        .load(&account, &[])
        .await
        .expect("load");
    let loan = snapshot.loan.expect("loan item");
    assert_eq!(
        reads.requests(),
        1,
        "{engine:?}: one read of the noisy account"
    );
    assert!(loan.parked.apart().count() > 30);
    assert!(
        loan.parked.iter().all(|f| f.body.contains(&padding)),
        "{engine:?}: every parked body read back"
    );
    let applied = deliver_checked(&handler, &mut ledger, &ordinary, "p").await;
    assert!(
        applied.iter().all(|r| *r == MessageResult::Applied),
        "{engine:?}: ordinary payments of the noisy account: {applied:?}"
    );
    // The payments come: each releases its reversal, whose body is read back.
    deliver_checked(&handler, &mut ledger, &awaited, "a").await;
    servicing
        .assert_accounts_match(
            &ledger,
            &[a.to_owned()],
            &format!("{engine:?} noisy account"),
        )
        .await;
    assert!(
        servicing.items_of_type("PARKED_BODY").await.is_empty(),
        "{engine:?}: a body item outlived its parked fact"
    );
}

/// At its bound of parked facts, the account's next fact that would park is quarantined
/// (`parking_full`) — itself, not a neighbour — and its ordinary facts still apply; the bodies
/// of facts the reconciler expires leave with them (the quarantine keeps each whole).
async fn when_an_account_holds_its_bound_of_parked_facts_should_quarantine_only_the_next_one(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let mut ledger = servicing_domain::Ledger::new();
    let a = "acc_bound";
    let bound = servicing_domain::MAX_PARKED_FACTS;
    let reversals: Vec<Value> = (0..=bound)
        .map(|n| reverse(a, &format!("rev-{n}"), &format!("pay-{n}"), 5, 100))
        .collect();
    deliver_checked(&handler, &mut ledger, &[open(a)], "o").await;
    let got = deliver_checked(&handler, &mut ledger, &reversals, "r").await;
    assert_eq!(
        got[..bound]
            .iter()
            .filter(|r| **r == MessageResult::Parked)
            .count(),
        bound
    );
    assert_eq!(
        got[bound],
        MessageResult::Quarantined {
            code: servicing_domain::PARKING_FULL.into()
        }
    );
    let after = deliver_checked(&handler, &mut ledger, &[pay(a, "ord-1", 6, 500)], "p").await;
    assert_eq!(after, [MessageResult::Applied]);
    servicing
        .assert_accounts_match(
            &ledger,
            &[a.to_owned()],
            &format!("{engine:?} at the bound"),
        )
        .await;
    let apart = servicing.items_of_type("PARKED_BODY").await.len();
    assert!(
        apart > 0,
        "{engine:?}: bodies past the inline budget are kept apart"
    );
    // The reconciler expires them all: quarantined with their bodies, body items gone.
    let now = servicing_ops::epoch_seconds() + 8 * 86_400;
    let expiry = servicing_ops::parked::expire(
        &servicing.store("account-state"),
        now,
        Duration::from_secs(7 * 86_400),
    )
    .await
    .expect("expire");
    assert_eq!(expiry.missing, bound as u64, "{:?}", expiry.problems);
    assert!(servicing.items_of_type("PARKED_BODY").await.is_empty());
    let quarantined = servicing.quarantine().await;
    let bodies = quarantined
        .iter()
        .filter(|q| q.raw_body.contains("\"reversalOf\""))
        .count();
    assert_eq!(
        bodies,
        bound + 1,
        "{engine:?}: every body kept whole in the quarantine"
    );
}

/// Cases of the ordering property per engine.
const CASES: u64 = 120;

/// Delivers `bodies` in random batch cuts to one handler; before some batches the next commit
/// loses its response (it commits, the handler cannot know): the failed messages come back at
/// once, as SQS brings back a FIFO group (and, here, a standard queue's too).
async fn deliver_all(
    handler: &AccountStateHandler,
    faults: &FaultPlan,
    rng: &mut Rng,
    bodies: &[String],
    run: &str,
) -> BatchCounts {
    let mut counts = BatchCounts::default();
    let mut queue: std::collections::VecDeque<(String, String, u32)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("{run}-m{i}"), b.clone(), 1))
        .collect();
    while !queue.is_empty() {
        let size = (1 + rng.below(10)).min(queue.len());
        let batch: Vec<_> = queue.drain(..size).collect();
        if rng.below(5) == 0 && faults.pending() == 0 {
            faults.push(Fault::LoseResponse);
        }
        let messages: Vec<_> = batch
            .iter()
            .map(|(id, b, n)| sqs_message(id, b, *n))
            .collect();
        let report = handler.process(&messages).await;
        // Results come per account, not in batch order: by message id.
        let by_id: std::collections::HashMap<&str, &MessageResult> = report
            .results
            .iter()
            .map(|(id, r)| (id.as_str(), r))
            .collect();
        let mut retried = Vec::new();
        for (id, body, n) in &batch {
            if std::env::var("PARKING_SEED").is_ok() {
                let v: Value = serde_json::from_str(body).expect("json");
                eprintln!(
                    "{} {} {:?}",
                    v["accountId"],
                    v["sourceEventId"],
                    by_id[id.as_str()]
                );
            }
            if matches!(by_id[id.as_str()], MessageResult::Retry { .. }) {
                retried.push((id.clone(), body.clone(), n + 1));
            }
        }
        let c = report.counts;
        counts.applied += c.applied;
        counts.stale += c.stale;
        counts.duplicate += c.duplicate;
        counts.collision += c.collision;
        counts.quarantined += c.quarantined;
        counts.parked += c.parked;
        counts.released += c.released;
        counts.retried += c.retried;
        for r in retried.into_iter().rev() {
            queue.push_front(r);
        }
    }
    counts
}

async fn when_dependent_facts_arrive_early_in_any_batch_cut_should_reach_the_in_order_ledger_state(
    engine: Engine,
) {
    let only: Option<u64> = std::env::var("PARKING_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let seeds: Vec<u64> = match only {
        Some(seed) => vec![seed],
        None => (0..CASES).collect(),
    };
    let cases = seeds.into_iter().map(|seed| {
        async move {
            // A table per case, as the checks below scan it; no stream (DynamoDB Local's stream
            // emulation adds tens of milliseconds to every write, nothing here reads it).
            let servicing = &Servicing::with_stream(engine, false).await;
            let mut rng = Rng(seed * 2_654_435_761 + 17);
            let fifo = seed % 2 == 0;
            let accounts: Vec<String> = (0..3).map(|a| format!("acc_p{seed}_{a}")).collect();
            let (ledger, bodies) = ordering_case(&mut rng, &accounts, fifo);
            let faults = FaultPlan::default();
            let handler = servicing.faulty_handler(servicing.config(), &faults);
            let counts =
                deliver_all(&handler, &faults, &mut rng, &bodies, &format!("c{seed}")).await;
            let context = format!(
                "{engine:?} seed {seed} ({} delivery)",
                if fifo { "FIFO" } else { "standard" }
            );

            let want = ledger.counts();
            if counts.retried == 0 {
                assert_eq!(
                    (
                        counts.applied,
                        counts.stale,
                        counts.quarantined,
                        counts.collision
                    ),
                    (want.applied, want.stale, want.quarantined, want.collisions),
                    "{context}: counts {counts:?} vs ledger {want:?}"
                );
                assert_eq!(
                    counts.parked, counts.released,
                    "{context}: nothing stays parked"
                );
            }
            // With lost responses some facts were applied by a commit nobody heard of (their
            // redeliveries count as duplicates): the claims tell what was judged, once each.
            servicing
                .assert_claims_match(&ledger, &bodies, &context)
                .await;
            servicing
                .assert_accounts_match(&ledger, &accounts, &context)
                .await;
            servicing.drop_table().await;
        }
    });
    futures_util::stream::iter(cases)
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
}

async fn when_events_precede_their_opening_on_a_fifo_group_should_apply_them_after_it(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let a = "acc_fee_first";
    // On a FIFO queue the opening is behind the fee in the same group: retrying the fee could
    // never help. Parked, it is applied right after the opening, in the same transaction.
    let results = process(
        &handler,
        &[("f", fee(a, "fee-1", 3, 2_500)), ("o", open(a))],
    )
    .await;
    assert_eq!(results, [MessageResult::Parked, MessageResult::Applied]);
    let (loan, version) = servicing.loan(a).await.expect("loan");
    assert_eq!(loan.fees_outstanding_minor, 2_500);
    assert_eq!(version, 3, "parked, opened, released");
    // Across batches too: parked in one, applied with the opening in the next.
    let b = "acc_fee_first_later";
    let results = process(&handler, &[("f2", fee(b, "fee-2", 3, 700))]).await;
    assert_eq!(results, [MessageResult::Parked]);
    let listed = servicing_ops::parked::list(&servicing.store("account-state"))
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0]
            .line()
            .contains("waits for the LOAN_OPENED of account acc_fee_first_later"),
        "{}",
        listed[0].line()
    );
    // Until it opens, the account does not exist for anyone else.
    assert!(
        servicing_ops::report::account_report(
            &servicing.store("test-reader"),
            &servicing_domain::AccountId::parse(b).expect("id")
        )
        .await
        .expect("read")
        .is_none()
    );
    let results = process(&handler, &[("o2", open(b))]).await;
    assert_eq!(results, [MessageResult::Applied]);
    assert_eq!(
        servicing
            .loan(b)
            .await
            .expect("loan")
            .0
            .fees_outstanding_minor,
        700
    );
    assert!(
        servicing_ops::parked::list(&servicing.store("account-state"))
            .await
            .expect("list")
            .is_empty()
    );
}

async fn when_a_payment_is_reversed_twice_in_one_batch_should_apply_one_and_reject_the_other(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let a = "acc_chargeback";
    process(
        &handler,
        &[("o", open(a)), ("p", pay(a, "pay-1", 3, 4_000))],
    )
    .await;
    // Two reversals of one payment, not adjacent: the batch reads the payment once (a set).
    let results = process(
        &handler,
        &[
            ("r1", reverse(a, "rev-1", "pay-1", 4, 4_000)),
            ("f", fee(a, "fee-1", 4, 100)),
            ("r2", reverse(a, "chb-1", "pay-1", 5, 4_000)),
            ("p2", pay(a, "pay-2", 6, 50)),
        ],
    )
    .await;
    assert_eq!(results[0], MessageResult::Applied);
    assert_eq!(results[1], MessageResult::Applied);
    assert_eq!(
        results[2],
        MessageResult::Quarantined {
            code: "already_reversed".into()
        }
    );
    assert_eq!(results[3], MessageResult::Applied);
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        (
            loan.principal_outstanding_minor,
            loan.fees_outstanding_minor
        ),
        (100_000, 50)
    );
    // Both reversals overtaking the payment: the first received applies right after it.
    let b = "acc_chargeback_early";
    process(&handler, &[("ob", open(b))]).await;
    let results = process(
        &handler,
        &[
            ("r1b", reverse(b, "rev-b", "pay-b", 4, 4_000)),
            ("r2b", reverse(b, "chb-b", "pay-b", 5, 4_000)),
            ("pb", pay(b, "pay-b", 3, 4_000)),
        ],
    )
    .await;
    assert_eq!(
        results,
        [
            MessageResult::Parked,
            MessageResult::Parked,
            MessageResult::Applied
        ]
    );
    let allocations = servicing.allocations(b).await;
    assert_eq!(
        allocations[0]
            .reversed_by
            .as_ref()
            .map(|r| r.event_id.as_str()),
        Some("rev-b")
    );
    let quarantined: Vec<_> = servicing
        .quarantine()
        .await
        .into_iter()
        .filter(|q| q.account_id.as_deref() == Some(b))
        .collect();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].code, "already_reversed");
    assert!(quarantined[0].raw_body.contains("chb-b"));
}

async fn when_a_parked_fact_is_redelivered_should_be_a_duplicate_or_a_collision(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_parked_twice";
    let first = process(&servicing.handler(), &[("p", pay(a, "pay-1", 3, 900))]).await;
    assert_eq!(first, [MessageResult::Parked]);
    // The same payload again (re-serialised, on a cold and on a warm instance): a duplicate.
    let mut copy = pay(a, "pay-1", 3, 900);
    copy["eventId"] = json!("transport-2");
    let handler = servicing.handler();
    assert_eq!(
        process(&handler, &[("p2", copy.clone())]).await,
        [MessageResult::Duplicate]
    );
    assert_eq!(
        process(&handler, &[("p3", copy)]).await,
        [MessageResult::Duplicate]
    );
    // Another payload under its identity: a collision; the parked fact stands.
    let other = process(&handler, &[("p4", pay(a, "pay-1", 3, 901))]).await;
    assert_eq!(other, [MessageResult::Collision]);
    let fresh = process(&servicing.handler(), &[("p5", pay(a, "pay-1", 3, 902))]).await;
    assert_eq!(fresh, [MessageResult::Collision]);
    assert_eq!(
        process(&handler, &[("o", open(a))]).await,
        [MessageResult::Applied]
    );
    assert_eq!(
        servicing
            .loan(a)
            .await
            .expect("loan")
            .0
            .principal_outstanding_minor,
        99_100
    );
}

async fn when_a_fact_stays_parked_past_the_retention_should_be_quarantined_and_resendable(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let (a, other) = ("acc_waits", "acc_owner");
    process(
        &handler,
        &[
            ("oa", open(a)),
            ("oo", open(other)),
            ("po", pay(other, "pay-o", 3, 500)),
        ],
    )
    .await;
    let results = process(
        &handler,
        &[
            ("r", reverse(a, "rev-missing", "pay-never", 4, 500)),
            ("f", fee("acc_never_opened", "fee-n", 4, 100)),
        ],
    )
    .await;
    assert_eq!(results, [MessageResult::Parked, MessageResult::Parked]);
    // Parked on acc_waits, the payment then applies on another account: rejected by the sweep.
    let rx = process(
        &handler,
        &[("rx", reverse(a, "rev-other", "pay-x", 4, 500))],
    )
    .await;
    assert_eq!(rx, [MessageResult::Parked]);
    process(&handler, &[("px", pay(other, "pay-x", 5, 500))]).await;

    let store = servicing.store("account-state");
    let now = servicing_ops::epoch_seconds();
    let week = Duration::from_secs(7 * 86_400);
    let kept = servicing_ops::parked::expire(&store, now, week)
        .await
        .expect("expire");
    assert_eq!(
        (kept.missing, kept.mismatched, kept.still_parked),
        (0, 1, 2)
    );
    let expiry = servicing_ops::parked::expire(&store, now + 8 * 86_400, week)
        .await
        .expect("expire");
    assert_eq!(
        (expiry.missing, expiry.mismatched, expiry.still_parked),
        (2, 0, 0)
    );
    let quarantine = servicing.quarantine().await;
    let code_of = |id: &str| {
        quarantine
            .iter()
            .find(|q| q.source_event_id.as_deref() == Some(id))
            .map(|q| q.code.clone())
    };
    assert_eq!(
        code_of("rev-other").as_deref(),
        Some("reversal_account_mismatch")
    );
    assert_eq!(
        code_of("rev-missing").as_deref(),
        Some("awaited_fact_missing")
    );
    assert_eq!(code_of("fee-n").as_deref(), Some("awaited_fact_missing"));
    let reason = quarantine
        .iter()
        .find(|q| q.source_event_id.as_deref() == Some("rev-missing"))
        .map(|q| q.reason.as_str())
        .unwrap_or_default();
    assert!(reason.contains("payment psp:pay-never"), "{reason}");
    // The item that only held the parked fee stays, empty, as a tombstone of its version: a
    // new item at version 1 could be overwritten by an instance that cached the old one.
    let shell = store
        .load(
            &servicing_domain::AccountId::parse("acc_never_opened").expect("id"),
            &[],
        )
        .await
        .expect("load")
        .loan
        .expect("the tombstone");
    assert!(
        shell.account.is_none() && shell.parked.is_empty(),
        "{shell:?}"
    );
    assert_eq!(shell.version, 2, "parked, then expired");
    // Their claims are released: a resend after the payment arrived applies.
    let results = process(
        &servicing.handler(),
        &[
            ("pn", pay(a, "pay-never", 6, 500)),
            ("r2", reverse(a, "rev-missing", "pay-never", 4, 500)),
        ],
    )
    .await;
    assert_eq!(results, [MessageResult::Applied, MessageResult::Applied]);
}

async fn when_the_response_is_lost_after_parking_or_releasing_should_apply_each_fact_once(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let a = "acc_crash_park";
    let reversal = ("r", reverse(a, "rev-1", "pay-1", 4, 800));
    process(&handler, &[("o", open(a))]).await;
    // The parking commits, its answer is lost: redelivered, it is a duplicate of the parked fact.
    faults.push(Fault::LoseResponse);
    let lost = process(&handler, std::slice::from_ref(&reversal)).await;
    assert!(matches!(lost[0], MessageResult::Retry { .. }), "{lost:?}");
    assert_eq!(
        process(&handler, std::slice::from_ref(&reversal)).await,
        [MessageResult::Duplicate]
    );
    // The payment and the release commit together, the answer is lost: once each.
    faults.push(Fault::LoseResponse);
    let lost = process(&handler, &[("p", pay(a, "pay-1", 3, 800))]).await;
    assert!(matches!(lost[0], MessageResult::Retry { .. }), "{lost:?}");
    let again = process(&handler, &[("p", pay(a, "pay-1", 3, 800)), reversal]).await;
    assert_eq!(again, [MessageResult::Duplicate, MessageResult::Duplicate]);
    let (loan, version) = servicing.loan(a).await.expect("loan");
    assert_eq!(loan.principal_outstanding_minor, 100_000);
    assert_eq!(version, 4, "opened, parked, paid, released");
    assert_eq!(
        servicing.outbox(a).await.len(),
        3,
        "opened, payment applied, payment reversed"
    );
}

async fn when_a_reversal_is_resent_beyond_the_claim_retention_should_never_reverse_twice(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let mut config = servicing.config();
    config.claim_retention = Duration::from_secs(1);
    let handler = servicing.handler_with(config);
    let a = "acc_expired_reversal";
    let reversal = reverse(a, "rev-old", "pay-old", 4, 100);
    process(
        &handler,
        &[
            ("o", open(a)),
            ("p", pay(a, "pay-old", 3, 100)),
            ("p2", pay(a, "pay-other", 3, 100)),
            ("r", reversal.clone()),
        ],
    )
    .await;
    push_out_of_recent_facts(&handler, a).await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let (before, _) = servicing.loan(a).await.expect("loan");
    // The same identity naming another payment: a collision, never a second reversal (an
    // applied reversal's claim is kept for good, like a payment's).
    let handler = servicing.handler();
    let elsewhere = reverse(a, "rev-old", "pay-other", 4, 100);
    let results = process(&handler, &[("r-elsewhere", elsewhere)]).await;
    assert_eq!(results, [MessageResult::Collision]);
    // Its own payload is a duplicate...
    let results = process(&handler, &[("r-again", reversal)]).await;
    assert_eq!(results, [MessageResult::Duplicate]);
    // ...another payload under its identity is a collision, never acknowledged as applied.
    let other = reverse(a, "rev-old", "pay-old", 5, 100);
    let results = process(&handler, &[("r-other", other)]).await;
    assert_eq!(results, [MessageResult::Collision]);
    let (after, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(after, before, "nothing applied twice");
    let quarantined = servicing.quarantine().await;
    assert!(
        quarantined
            .iter()
            .any(|q| q.source_event_id.as_deref() == Some("rev-old") && q.code == "collision"),
        "{quarantined:?}"
    );
}

async fn when_a_payment_is_redelivered_after_its_claim_expired_should_be_a_duplicate(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let mut config = servicing.config();
    config.claim_retention = Duration::from_secs(1);
    let handler = servicing.handler_with(config);
    let a = "acc_expired_claim";
    process(
        &handler,
        &[("o", open(a)), ("p", pay(a, "pay-old", 3, 100))],
    )
    .await;
    push_out_of_recent_facts(&handler, a).await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    // The claim has expired; the allocation says the payment was applied: a duplicate at once,
    // not a retry loop into the DLQ.
    let results = process(
        &servicing.handler(),
        &[("p-again", pay(a, "pay-old", 3, 100))],
    )
    .await;
    assert_eq!(results, [MessageResult::Duplicate]);
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(loan.principal_outstanding_minor, 99_900, "applied once");
}
