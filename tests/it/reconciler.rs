//! The daily reconciler works account by account: one account's problem (an undecodable loan
//! item, a claim that is not `PARKED`, a failed request) is reported and counted while the run
//! goes on, any number of parked facts is expired, and a parked fact left ready is sent back to
//! its account, which releases it.

use std::time::Duration;

use account_state::{AccountStateHandler, MessageResult};
use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::Engine;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::generate::{fee, open, pay, reverse};
use integration_tests::lambda;
use integration_tests::servicing::{Servicing, sqs_message};
use serde_json::Value;
use servicing_store::open::{OPEN_SHARDS, OpenKind};

on_both_engines!(
    when_one_account_has_a_problem_should_expire_every_other_and_report_it,
    when_a_request_fails_for_one_account_should_go_on_with_the_others,
    when_a_parked_fact_stays_ready_should_send_it_back_to_be_released,
    when_a_fact_parked_long_ago_has_just_become_ready_should_not_count_it_as_left_ready,
    when_a_payment_is_suspected_twice_under_new_identities_should_not_hold,
    when_the_ledger_did_not_reconcile_on_an_earlier_day_should_keep_the_books_open_until_it_does,
    when_the_ledger_is_days_behind_and_a_run_has_little_time_should_catch_up_a_day_a_run,
    when_a_daily_run_had_no_time_to_catch_up_should_go_on_hourly_and_stop_where_a_day_does_not_settle,
);

/// From review (issue 33): a ledger problem was reported by the run that found it only. The
/// next day's window no longer named the account, so that run said the ledger reconciles and
/// closed the books over it. A run now reads from where the ledger last did not reconcile.
async fn when_the_ledger_did_not_reconcile_on_an_earlier_day_should_keep_the_books_open_until_it_does(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_unposted";
    process(
        &servicing.handler(),
        &[open(a), fee(a, "fee-1", 3, 700), pay(a, "pay-1", 4, 5_000)],
    )
    .await;
    // The ledger posts all but the payment.
    let (payments, others): (Vec<String>, Vec<String>) = crate::ledger::published(&servicing)
        .await
        .into_iter()
        .partition(|e| e.contains("\"PaymentApplied\""));
    let ledger = [crate::ledger::ledger_handler(&servicing)];
    let mut rng = integration_tests::Rng(7);
    crate::ledger::post_all(&ledger, &others, &mut rng, "o").await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 3,
        park_retention: WEEK,
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: "unused: nothing is parked".into(),
        ledger_close_lag_days: 1,
    };
    let store = servicing.store("account-state");
    let run_at = |at: i64| {
        let (servicing, config, store, sqs) = (&servicing, &config, &store, &sqs);
        async move {
            servicing.keep_record_log().await;
            ::reconciler::run_at(config, store, sqs, at)
                .await
                .expect("run")
        }
    };
    // Within the grace the account is in flight: its differences are deferred, not problems,
    // and nothing is closed over them; the stack's first run starts the mark at its window.
    let started = servicing_ops::epoch_seconds();
    let in_flight = run_at(started + 60).await;
    assert_eq!(
        (
            &in_flight["holds"],
            &in_flight["ledgerSettled"],
            &in_flight["ledgerClosedThrough"]
        ),
        (&true.into(), &false.into(), &Value::Null),
        "{in_flight:#}"
    );
    assert!(
        in_flight["ledgerDeferred"].to_string().contains(a),
        "{in_flight:#}"
    );
    let first_from = in_flight["ledgerReadFrom"].clone();
    assert_eq!(first_from, started + 60 - 3 * 3600, "{in_flight:#}");

    // Past the grace: a problem, read from the mark.
    let found_at = started + 2 * 3600;
    let run_on = |day: i64| run_at(found_at + day * 86_400);
    let found = run_on(0).await;
    assert_eq!(
        (
            &found["holds"],
            &found["ledgerClosedThrough"],
            &found["ledgerReadFrom"]
        ),
        (&false.into(), &Value::Null, &first_from),
        "{found:#}"
    );

    // That run moved the mark through the hours before its window, which held, and no
    // further. A day later the window names nothing of the account: the problem is still there.
    let found_window = Value::from(found_at - 3 * 3600);
    let next_day = run_on(1).await;
    assert_eq!(
        (
            &next_day["holds"],
            &next_day["ledgerClosedThrough"],
            &next_day["ledgerReadFrom"]
        ),
        (&false.into(), &Value::Null, &found_window),
        "{next_day:#}"
    );
    // The day that holds the problem did not settle: the mark stays at its start, though the
    // days after it hold.
    assert_eq!(
        next_day["ledgerSettledThrough"], found_window,
        "{next_day:#}"
    );
    assert!(
        next_day["ledgerProblems"].to_string().contains(a),
        "{next_day:#}"
    );

    // Posted at last: the run that covers it settles and closes; the next reads from where it
    // settled (short of the grace: what was in flight then is read again).
    crate::ledger::post_all(&ledger, &payments, &mut rng, "p").await;
    let posted = run_on(2).await;
    assert_eq!(
        (
            &posted["holds"],
            &posted["ledgerSettled"],
            &posted["ledgerReadFrom"]
        ),
        (&true.into(), &true.into(), &found_window),
        "{posted:#}"
    );
    assert!(posted["ledgerClosedThrough"].is_string(), "{posted:#}");
    let after = run_on(3).await;
    assert_eq!(
        after["ledgerReadFrom"],
        found_at + 2 * 86_400 - 15 * 60,
        "{after:#}"
    );

    // A missed day (the schedule's delivery failed: no run, no mark): the next run reads
    // back to the last settled one.
    let after_miss = run_on(5).await;
    assert_eq!(
        after_miss["ledgerReadFrom"],
        found_at + 3 * 86_400 - 15 * 60,
        "{after_miss:#}"
    );

    // Not settled for longer than the reach (days without a run): the run reads a week back,
    // says so, and closes nothing, until an operator vouches for the days before.
    let day_20 = found_at + 20 * 86_400;
    let stuck = run_at(day_20).await;
    assert_eq!(
        (
            &stuck["holds"],
            &stuck["ledgerClosedThrough"],
            &stuck["ledgerReadFrom"]
        ),
        (
            &false.into(),
            &Value::Null,
            &(day_20 - servicing_ops::ledger::REACH_DAYS * 86_400).into()
        ),
        "{stuck:#}"
    );
    assert_eq!(
        (&stuck["ledgerProblems"], &stuck["ledgerDeferred"]),
        (&serde_json::json!([]), &serde_json::json!([])),
        "{stuck:#}"
    );
    assert!(
        stuck["problems"].to_string().contains("beyond the 7 days"),
        "{stuck:#}"
    );
    assert!(
        store
            .advance_ledger_settled(day_20 - 2 * 86_400, Some("operator"))
            .await
            .expect("vouched")
    );
    let vouched = run_at(day_20 + 1).await;
    assert_eq!(
        (
            &vouched["holds"],
            &vouched["ledgerSettled"],
            &vouched["ledgerReadFrom"]
        ),
        (&true.into(), &true.into(), &(day_20 - 2 * 86_400).into()),
        "{vouched:#}"
    );
    assert!(vouched["ledgerClosedThrough"].is_string(), "{vouched:#}");
}

/// The reach a run reads again is up to a week of volume; the reconciler's timeout is whatever
/// a user configures (AWS's default is 3 s). A run out of time stopped nowhere useful: it read
/// the whole reach or was killed, the mark unmoved, every day again. Now a run reads the days
/// from the mark oldest first while it has time, at least one, and moves the mark through each
/// that settles: a run with no time left catches up one day, and the next goes on.
async fn when_the_ledger_is_days_behind_and_a_run_has_little_time_should_catch_up_a_day_a_run(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_behind";
    process(&servicing.handler(), &[open(a), fee(a, "fee-1", 3, 700)]).await;
    let ledger = [crate::ledger::ledger_handler(&servicing)];
    let events = crate::ledger::published(&servicing).await;
    crate::ledger::post_all(&ledger, &events, &mut integration_tests::Rng(3), "o").await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 3,
        park_retention: WEEK,
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: "unused: nothing is parked".into(),
        ledger_close_lag_days: 1,
    };
    let store = servicing.store("account-state");
    servicing.keep_record_log().await;
    // The stack's first run starts the mark at its window; then five days without a run.
    let started = servicing_ops::epoch_seconds() + 60 * 60;
    let first = ::reconciler::run_at(&config, &store, &sqs, started)
        .await
        .expect("run");
    assert_eq!(
        (&first["ledgerReadFrom"], &first["ledgerSettled"]),
        (&(started - 3 * 3600).into(), &true.into()),
        "{first:#}"
    );
    let later = started + 5 * 86_400;
    let window_start = later - 3 * 3600;
    // Settled through the first run, short of the grace.
    let mut from = started - 15 * 60;
    let mut runs = 0;
    loop {
        runs += 1;
        // No time left at all: the run still reads one day.
        let spent = std::time::Instant::now();
        let run = ::reconciler::run_until(&config, &store, &sqs, later, Some(spent))
            .await
            .expect("run");
        assert_eq!(run["ledgerReadFrom"], from, "run {runs}: {run:#}");
        if run["ledgerSettled"] == true {
            assert_eq!(run["holds"], true, "{run:#}");
            assert!(run["ledgerClosedThrough"].is_string(), "{run:#}");
            break;
        }
        let through = (from + 86_400).min(window_start);
        assert_eq!(
            (
                &run["holds"],
                &run["ledgerReadThrough"],
                &run["ledgerSettledThrough"]
            ),
            (&false.into(), &through.into(), &through.into()),
            "run {runs}: one day read and settled, {run:#}"
        );
        assert_eq!(run["ledgerCatchingUp"], true, "{run:#}");
        assert!(
            run["problems"].to_string().contains("being caught up"),
            "{run:#}"
        );
        from = through;
        assert!(runs < 10, "the mark does not move: {run:#}");
    }
    assert_eq!(runs, 5, "a day a run, then the window");
}

/// From review (issue 33): a daily run with time for one day moved the mark a day, and a day
/// later the window had moved a day too: a gap longer than a day was never closed. A run out
/// of time now leaves `catchingUp` on the mark, and the hourly catch-up reads on from it, day
/// by day, up to the window, without the open index (what is open is not of any one day). It
/// stops at the first day that does not settle (the daily run reports it), ends at the window
/// or beyond the reach, and otherwise costs one read.
async fn when_a_daily_run_had_no_time_to_catch_up_should_go_on_hourly_and_stop_where_a_day_does_not_settle(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_hourly";
    process(
        &servicing.handler(),
        &[open(a), fee(a, "fee-1", 3, 700), pay(a, "pay-1", 4, 5_000)],
    )
    .await;
    // The ledger posts all but the payment: the day of these facts will not settle.
    let (payments, others): (Vec<String>, Vec<String>) = crate::ledger::published(&servicing)
        .await
        .into_iter()
        .partition(|e| e.contains("\"PaymentApplied\""));
    let ledger = [crate::ledger::ledger_handler(&servicing)];
    let mut rng = integration_tests::Rng(11);
    crate::ledger::post_all(&ledger, &others, &mut rng, "o").await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 3,
        park_retention: WEEK,
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: "unused: nothing is parked".into(),
        ledger_close_lag_days: 1,
    };
    let store = servicing.store("account-state");
    servicing.keep_record_log().await;
    let no_time = || Some(std::time::Instant::now());
    // The hourly catch-up through a client that records what it asks for.
    let hourly = |at: i64, deadline: Option<std::time::Instant>| {
        let (servicing, config) = (&servicing, &config);
        async move {
            let plan = FaultPlan::default();
            let store = servicing.faulty_store("account-state", &plan);
            let run = ::reconciler::catch_up_until(config, &store, at, deadline)
                .await
                .expect("catch-up");
            let open_reads: Vec<_> = plan
                .access()
                .into_iter()
                .filter(|(_, key)| key.contains("OpenIndex") || key.contains("OPEN#"))
                .collect();
            assert!(open_reads.is_empty(), "{open_reads:?}: {run:#}");
            (run, plan.requests())
        }
    };
    let facts_at = servicing_ops::epoch_seconds();
    // The stack's first run two and a half days before the facts (nothing to read), then
    // none until two days after them: the facts in the middle of the third day of five.
    let started = facts_at - 2 * 86_400 - 12 * 3600;
    let first = ::reconciler::run_at(&config, &store, &sqs, started)
        .await
        .expect("first run");
    assert_eq!(first["ledgerSettled"], true, "{first:#}");
    let later = facts_at + 2 * 86_400 + 4 * 3600;
    let daily = ::reconciler::run_until(&config, &store, &sqs, later, no_time())
        .await
        .expect("daily run");
    let day = |n: i64| started - 15 * 60 + n * 86_400;
    assert_eq!(
        (&daily["ledgerSettledThrough"], &daily["ledgerCatchingUp"]),
        (&day(1).into(), &true.into()),
        "a day read and settled, out of time: {daily:#}"
    );
    // An hour later, with no time either: the next day, the mark following.
    let (one, _) = hourly(later + 3600, no_time()).await;
    assert_eq!(
        (
            &one["ledgerReadFrom"],
            &one["ledgerSettledThrough"],
            &one["catchingUp"]
        ),
        (&day(1).into(), &day(2).into(), &true.into()),
        "{one:#}"
    );
    // With all the time it wants: it stops after the facts' day, which does not settle,
    // though the days after it would; the mark stays at its start, the catch-up is over.
    let (stopped, _) = hourly(later + 2 * 3600, None).await;
    assert!(day(2) <= facts_at && facts_at < day(3), "{stopped:#}");
    assert_eq!(
        (
            &stopped["ledgerReadThrough"],
            &stopped["ledgerSettledThrough"],
            &stopped["catchingUp"]
        ),
        (&day(3).into(), &day(2).into(), &false.into()),
        "{stopped:#}"
    );
    assert!(
        stopped["ledgerProblems"].to_string().contains(a),
        "{stopped:#}"
    );
    // Over: the next hour's is one read of the mark.
    let (idle, requests) = hourly(later + 3 * 3600, no_time()).await;
    assert_eq!(
        (&idle["catchingUp"], &idle["ledgerReadFrom"], requests),
        (&false.into(), &Value::Null, 1),
        "{idle:#}"
    );
    // The daily run reads from the mark and reports the day, and says nothing goes on.
    let reported = ::reconciler::run_at(&config, &store, &sqs, later + 6 * 3600)
        .await
        .expect("daily run");
    assert_eq!(
        (
            &reported["holds"],
            &reported["ledgerReadFrom"],
            &reported["ledgerCatchingUp"]
        ),
        (&false.into(), &day(2).into(), &false.into()),
        "{reported:#}"
    );
    assert!(
        reported["ledgerProblems"].to_string().contains(a),
        "{reported:#}"
    );
    // Posted at last: settled. Three days later, a run out of time again; the hourly one
    // with time reads through to its window, and the catch-up is over.
    crate::ledger::post_all(&ledger, &payments, &mut rng, "p").await;
    let settled_at = later + 7 * 3600;
    let settled = ::reconciler::run_at(&config, &store, &sqs, settled_at)
        .await
        .expect("daily run");
    assert_eq!(
        (&settled["holds"], &settled["ledgerSettled"]),
        (&true.into(), &true.into()),
        "{settled:#}"
    );
    let behind = settled_at + 3 * 86_400;
    let out_of_time = ::reconciler::run_until(&config, &store, &sqs, behind, no_time())
        .await
        .expect("daily run");
    assert_eq!(out_of_time["ledgerCatchingUp"], true, "{out_of_time:#}");
    let hour_later = behind + 3600;
    let (through, _) = hourly(hour_later, None).await;
    assert_eq!(
        (&through["ledgerReadThrough"], &through["catchingUp"]),
        (&(hour_later - 3 * 3600).into(), &false.into()),
        "{through:#}"
    );
    let next_daily = ::reconciler::run_at(&config, &store, &sqs, behind + 2 * 3600)
        .await
        .expect("daily run");
    assert_eq!(
        (
            &next_daily["ledgerSettled"],
            &next_daily["ledgerReadFrom"],
            &next_daily["ledgerCatchingUp"]
        ),
        (&true.into(), &(hour_later - 3 * 3600).into(), &false.into()),
        "{next_daily:#}"
    );
    // Left on beyond the reach (a person must vouch): taken off, nothing read.
    assert!(store.set_ledger_catching_up(true).await.expect("flag"));
    let beyond = behind + 30 * 86_400;
    let (blocked, requests) = hourly(beyond, None).await;
    assert_eq!(
        (&blocked["catchingUp"], &blocked["ledgerReadFrom"], requests),
        (&false.into(), &Value::Null, 2),
        "{blocked:#}"
    );
    let (after, requests) = hourly(beyond + 3600, None).await;
    assert_eq!(
        (&after["catchingUp"], requests),
        (&false.into(), 1),
        "{after:#}"
    );
}

/// Issue 32: a suspected duplicate (same account, amount, currency and time under another
/// identity) was counted but the daily run still said it holds: it needs a person.
async fn when_a_payment_is_suspected_twice_under_new_identities_should_not_hold(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    let a = "acc_twice";
    process(&handler, &[open(a), pay(a, "pay-first", 3, 900)]).await;
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 1,
        park_retention: WEEK,
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: "unused: nothing is parked".into(),
        ledger_close_lag_days: 1,
    };
    let store = servicing.store("account-state");
    let now = servicing_ops::epoch_seconds() + 1;
    servicing.keep_record_log().await;
    let run = ::reconciler::run_at(&config, &store, &sqs, now)
        .await
        .expect("run");
    assert_eq!(
        (run["holds"].clone(), run["suspectedDuplicates"].clone()),
        (true.into(), 0.into()),
        "{run:#}"
    );
    // The same payment again under a new id: applied (the identity is new), and suspected.
    assert_eq!(
        process(&handler, &[pay(a, "pay-again", 3, 900)]).await,
        [MessageResult::Applied]
    );
    servicing.keep_record_log().await;
    let run = ::reconciler::run_at(&config, &store, &sqs, now + 1)
        .await
        .expect("run");
    assert_eq!(
        (run["holds"].clone(), run["suspectedDuplicates"].clone()),
        (false.into(), 1.into()),
        "{run:#}"
    );
}

/// Issue 30: the 5-minute grace for a ready fact counted from when it was parked, so a fact
/// parked an hour ago and made ready a moment ago was reported `ReadyNotReleased` (and sent
/// back) while its release was still under way. The grace counts from when it became ready.
async fn when_a_fact_parked_long_ago_has_just_become_ready_should_not_count_it_as_left_ready(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let store = servicing.store("account-state");
    let now = servicing_ops::epoch_seconds();
    let account = servicing_domain::AccountId::parse("acc_ready_late").expect("id");
    let ready = |id: &str, ready_at: i64| servicing_domain::ParkedFact {
        seq: 1,
        source: servicing_domain::SourceRef::new("psp", id).expect("source"),
        fingerprint: servicing_domain::Fingerprint::from_stored(format!("sha256:{id}")),
        awaits: None,
        parked_at: now - 3_600,
        message_id: format!("m-{id}"),
        body: fee("acc_ready_late", id, 4, 100).to_string(),
        body_apart: false,
        ready_at: Some(ready_at),
    };
    let mut parked = servicing_domain::ParkedFacts::default();
    for (n, fact) in [ready("just", now - 10), ready("long", now - 600)]
        .into_iter()
        .enumerate()
    {
        let arrival = servicing_domain::Arrival {
            source: &fact.source,
            fingerprint: &fact.fingerprint,
            message_id: &fact.message_id,
            body: &fact.body,
            now: fact.parked_at,
        };
        parked.park(arrival, servicing_domain::Deferral::AccountNotOpened);
        let last = parked.iter_mut().last().expect("parked");
        *last = servicing_domain::ParkedFact {
            seq: n as u64 + 1,
            ..fact
        };
    }
    let loan = servicing_store::LoanItem {
        account_id: account.clone(),
        account: None,
        version: 1,
        recent: Default::default(),
        parked,
    };
    let write = servicing_store::LoanWrite::Put {
        item: &loan,
        expected: None,
        apart_before: &[],
    };
    let outcome = store.commit_all(&[], Some(write)).await.expect("written");
    assert_eq!(outcome, [servicing_store::CommitOutcome::Committed]);
    let expiry = servicing_ops::parked::expire(&store, now, WEEK)
        .await
        .expect("expire");
    let left: Vec<String> = expiry
        .ready
        .iter()
        .map(|v| v.fact.source.event_id.clone())
        .collect();
    assert_eq!(
        left,
        ["long"],
        "{engine:?}: only the one ready for ten minutes"
    );
}

const WEEK: Duration = Duration::from_secs(7 * 86_400);

async fn process(handler: &AccountStateHandler, bodies: &[Value]) -> Vec<MessageResult> {
    let messages: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| sqs_message(&format!("m{i}-{}", b["sourceEventId"]), &b.to_string(), 1))
        .collect();
    let report = handler.process(&messages).await;
    report.results.into_iter().map(|(_, r)| r).collect()
}

fn later() -> i64 {
    servicing_ops::epoch_seconds() + WEEK.as_secs() as i64 + 60
}

async fn when_one_account_has_a_problem_should_expire_every_other_and_report_it(engine: Engine) {
    let servicing = Servicing::with_stream(engine, false).await;
    let handler = servicing.handler();
    // An account's bound of fees parked before an opening that never comes: more than one
    // transaction's worth (33 facts) in several rounds.
    let many = "acc_many_parked";
    let bound = servicing_domain::MAX_PARKED_FACTS;
    for chunk in (0..bound).collect::<Vec<_>>().chunks(10) {
        let bodies: Vec<Value> = chunk
            .iter()
            .map(|i| fee(many, &format!("fee-{i}"), 3, 1))
            .collect();
        assert!(
            process(&handler, &bodies)
                .await
                .iter()
                .all(|r| *r == MessageResult::Parked)
        );
    }
    // A parked fact whose claim says something else (an inconsistency for an operator).
    let odd = "acc_odd_claim";
    process(&handler, &[fee(odd, "fee-odd", 3, 1)]).await;
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .key(
            "pk",
            AttributeValue::S("CLAIM#account-state#psp#fee-odd".into()),
        )
        .key("sk", AttributeValue::S("CLAIM".into()))
        .update_expression("SET verdict = :applied")
        .expression_attribute_values(":applied", AttributeValue::S("APPLIED".into()))
        .send()
        .await
        .expect("claim changed");
    // A loan item nobody can decode (listed by the open index as holding parked facts).
    let [(shard_name, shard), (since_name, since)] = OpenKind::Parked.attributes("acc_garbled", 0);
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .item("pk", AttributeValue::S("LOAN#acc_garbled".into()))
        .item("sk", AttributeValue::S("STATE".into()))
        .item("itemType", AttributeValue::S("LOAN".into()))
        .item("accountId", AttributeValue::S("acc_garbled".into()))
        .item("version", AttributeValue::S("not a number".into()))
        .item("parkedFacts", AttributeValue::L(Vec::new()))
        .item(shard_name, shard)
        .item(since_name, since)
        .send()
        .await
        .expect("garbled item");
    // And an ordinary one.
    let plain = "acc_plain_parked";
    process(&handler, &[fee(plain, "fee-plain", 3, 1)]).await;

    let store = servicing.store("account-state");
    let expiry = servicing_ops::parked::expire(&store, later(), WEEK)
        .await
        .expect("the run goes on whatever one account holds");
    assert_eq!(expiry.missing, bound as u64 + 1, "{:?}", expiry.problems);
    assert_eq!(expiry.problems.len(), 2, "{:?}", expiry.problems);
    assert!(
        expiry
            .problems
            .iter()
            .any(|p| p.contains("LOAN#acc_garbled")),
        "{:?}",
        expiry.problems
    );
    assert!(
        expiry
            .problems
            .iter()
            .any(|p| p.contains("psp:fee-odd") && p.contains("not PARKED")),
        "{:?}",
        expiry.problems
    );
    let left: Vec<String> = servicing_ops::parked::list(&store)
        .await
        .err()
        .map(|e| vec![e.to_string()])
        .unwrap_or_default();
    assert!(
        left[0].contains("acc_garbled"),
        "listing names the item: {left:?}"
    );
    let quarantined = servicing.quarantine().await;
    assert_eq!(quarantined.len(), bound + 1);
}

async fn when_a_request_fails_for_one_account_should_go_on_with_the_others(engine: Engine) {
    let servicing = Servicing::with_stream(engine, false).await;
    let handler = servicing.handler();
    for a in 0..3 {
        let account = format!("acc_fail_{a}");
        process(&handler, &[fee(&account, &format!("fee-{a}"), 3, 1)]).await;
    }
    let faults = FaultPlan::default();
    // Requests 0-15 query the open index's 16 shards; then per account its read and its
    // expiry transaction: request 16 is the first account's read.
    faults.at_request(u64::from(OPEN_SHARDS), Fault::Throttle);
    let store = servicing.faulty_store("account-state", &faults);
    let expiry = servicing_ops::parked::expire(&store, later(), WEEK)
        .await
        .expect("the run goes on");
    assert_eq!(faults.pending(), 0);
    assert_eq!(
        (expiry.missing, expiry.problems.len()),
        (2, 1),
        "{:?}",
        expiry.problems
    );
    // The next run takes the one left.
    let again = servicing_ops::parked::expire(&servicing.store("account-state"), later(), WEEK)
        .await
        .expect("run");
    assert_eq!((again.missing, again.problems.len()), (1, 0));
}

async fn when_a_parked_fact_stays_ready_should_send_it_back_to_be_released(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let faults = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &faults);
    let a = "acc_left_ready";
    let reversal = reverse(a, "rev-1", "pay-1", 4, 800);
    process(&handler, &[open(a)]).await;
    assert_eq!(
        process(&handler, std::slice::from_ref(&reversal)).await,
        [MessageResult::Parked]
    );
    // The payment commits (request 0, the warm state saves the read); the released reversal's
    // commit (1) is throttled, and the retry the batch asks for never comes (the message went
    // to the dead-letter queue, say): the reversal is left ready.
    faults.at_request(1, Fault::Throttle);
    let results = process(&handler, &[pay(a, "pay-1", 3, 800)]).await;
    assert!(
        matches!(results[0], MessageResult::Retry { .. }),
        "{results:?}"
    );
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = lambda::queue(&sqs, "servicing", true).await;
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 1,
        park_retention: WEEK,
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: queue_url.clone(),
        ledger_close_lag_days: 1,
    };
    let store = servicing.store("account-state");
    // Within the grace the consumer may still be releasing it: nothing is sent.
    let now = servicing_ops::epoch_seconds();
    servicing.keep_record_log().await;
    let quiet = ::reconciler::run_at(&config, &store, &sqs, now)
        .await
        .expect("run");
    assert_eq!(quiet["readyNotReleased"].as_array().map(Vec::len), Some(0));
    servicing.keep_record_log().await;
    let report = ::reconciler::run_at(&config, &store, &sqs, now + 600)
        .await
        .expect("run");
    assert_eq!(
        report["readyNotReleased"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(2)
        .send()
        .await
        .expect("receive");
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: Value = serde_json::from_str(messages[0].body().unwrap_or_default()).expect("json");
    assert_eq!(body, reversal, "its own body, sent back");
    // Delivered: a duplicate of the parked fact, whose state read releases it.
    let delivered = servicing
        .handler()
        .process(&[sqs_message("back", &body.to_string(), 1)])
        .await;
    assert_eq!(delivered.results[0].1, MessageResult::Duplicate);
    assert_eq!(delivered.counts.released, 1);
    let (loan, _) = servicing.loan(a).await.expect("loan");
    assert_eq!(
        loan.principal_outstanding_minor, 100_000,
        "paid, then reversed"
    );
}
