//! The accounting sub-ledger (`ledger-postings`) on both engines: what servicing publishes,
//! delivered in any order, many times, to several warm instances, posts exactly one balanced
//! entry per event and a sub-ledger equal to servicing (and to the in-memory specification);
//! a consumer's claims never make another skip or repeat its work; a closed period is never
//! posted into; a ledger backfilled after the fact equals one that consumed live.

use std::collections::{BTreeMap, HashSet};

use integration_tests::servicing::{Servicing, sqs_message};
use integration_tests::{Engine, Rng, record_figure};
use ledger_postings::{CONSUMER, LedgerPostingsHandler, MessageResult};
use serde_json::{Value, json};
use servicing_domain::journal::{SubLedger, entry_of};
use servicing_domain::{AccountId, Ledger};
use servicing_ops::ledger::reconcile_ledger;
use servicing_ops::money::{Grace, reconcile_money};
use servicing_store::journal::PostOutcome;

on_both_engines!(
    when_servicing_events_reach_three_instances_in_any_order_and_many_times_should_post_each_once_and_equal_servicing,
    when_one_stream_reaches_all_three_consumers_should_leave_each_its_own_work,
    when_a_period_is_closed_should_post_later_events_of_it_to_the_first_open_day,
    when_an_event_id_comes_back_with_another_detail_or_a_broken_body_should_quarantine_it,
    when_half_is_consumed_live_and_the_rest_backfilled_should_equal_live_consumption,
    when_the_ledger_is_out_of_step_with_servicing_should_name_each_problem,
    when_a_reversal_entry_is_not_the_opposite_of_its_payments_should_name_it,
    when_a_bill_was_published_without_its_currency_should_post_it_in_the_accounts,
    when_an_operator_corrects_the_ledger_should_post_it_once_and_refuse_what_it_cannot_be,
    when_the_ledger_is_deployed_onto_older_history_should_open_each_account_once_at_servicings_version,
    when_allocations_are_listed_should_read_each_payment_the_ledger_posted_or_the_index_holds,
);

/// Generated streams per engine for the property.
const STREAMS: u64 = 4;

/// The EventBridge envelope of each event servicing published (as the ledger's queue brings it).
pub(crate) async fn published(servicing: &Servicing) -> Vec<String> {
    servicing
        .outbox_records()
        .await
        .iter()
        .map(|e| {
            json!({"source": e.source, "detail-type": e.detail_type, "detail": e.detail})
                .to_string()
        })
        .collect()
}

/// Applies `bodies` through account-state, redelivering what it asks to retry.
async fn serviced(servicing: &Servicing, bodies: &[String]) {
    let handler = servicing.handler();
    let mut queue: Vec<(String, String)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("s{i}"), b.clone()))
        .collect();
    for _ in 0..10 {
        let mut again = Vec::new();
        for chunk in queue.chunks(10) {
            let messages: Vec<_> = chunk.iter().map(|(id, b)| sqs_message(id, b, 1)).collect();
            for (id, result) in handler.process(&messages).await.results {
                if matches!(result, account_state::MessageResult::Retry { .. }) {
                    again.extend(chunk.iter().filter(|(m, _)| *m == id).cloned());
                }
            }
        }
        if again.is_empty() {
            return;
        }
        queue = again;
    }
    panic!("account-state kept retrying");
}

pub(crate) fn ledger_handler(servicing: &Servicing) -> LedgerPostingsHandler {
    LedgerPostingsHandler::new(servicing.store(CONSUMER))
}

/// Delivers `envelopes` in random batches of up to 10 to random `instances`, redelivering what
/// they ask to retry; the results of the last delivery of each message.
pub(crate) async fn post_all(
    instances: &[LedgerPostingsHandler],
    envelopes: &[String],
    rng: &mut Rng,
    run: &str,
) -> Vec<MessageResult> {
    let mut queue: Vec<(String, String)> = envelopes
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("{run}-{i}"), b.clone()))
        .collect();
    let mut settled = Vec::new();
    for _ in 0..20 {
        let mut again = Vec::new();
        while !queue.is_empty() {
            let size = (1 + rng.below(10)).min(queue.len());
            let batch: Vec<(String, String)> = queue.drain(..size).collect();
            let messages: Vec<_> = batch.iter().map(|(id, b)| sqs_message(id, b, 1)).collect();
            let instance = &instances[rng.below(instances.len())];
            for ((id, result), (_, body)) in instance
                .process_batch(&messages)
                .await
                .results
                .into_iter()
                .zip(&batch)
            {
                match result {
                    MessageResult::Retry { .. } => again.push((id, body.clone())),
                    other => settled.push(other),
                }
            }
        }
        if again.is_empty() {
            return settled;
        }
        queue = again;
    }
    panic!("the ledger kept retrying");
}

/// What the specification says each account's sub-ledger is: every event the in-memory
/// ledger published, posted once.
fn expected(ledger: &Ledger) -> BTreeMap<String, SubLedger> {
    let mut out: BTreeMap<String, SubLedger> = BTreeMap::new();
    let mut posted = HashSet::new();
    for event in ledger.outbox() {
        if let Some(entry) = entry_of(&event.detail()).expect("postable")
            && posted.insert(entry.entry_id.clone())
        {
            out.entry(entry.account_id.as_str().to_owned())
                .or_default()
                .post(&entry)
                .expect("posts");
        }
    }
    out
}

async fn stored(servicing: &Servicing, account: &str) -> SubLedger {
    servicing
        .store(CONSUMER)
        .sub_ledger(&AccountId::parse(account).expect("id"))
        .await
        .expect("read")
        .map(|r| r.sub_ledger())
        .unwrap_or_default()
}

/// The specification's allocations of `account`, in the order of the payments' identities (as
/// servicing lists them).
fn spec_allocations(spec: &Ledger, account: &str) -> Vec<servicing_domain::StoredAllocation> {
    let mut allocations: Vec<_> = spec
        .allocations()
        .filter(|a| a.account_id.as_str() == account)
        .cloned()
        .collect();
    allocations.sort_by(|a, b| a.payment.cmp(&b.payment));
    allocations
}

/// The whole money reconciliation, ledger included, with no grace: (holds, its lines).
async fn reconciled(servicing: &Servicing) -> (bool, Vec<String>) {
    servicing.keep_record_log().await;
    let now = servicing_ops::epoch_seconds();
    let grace = Grace {
        accepted_secs: 0,
        action_secs: 3600,
    };
    let money = reconcile_money(
        &servicing.client,
        &servicing.table,
        &[],
        (now - 25 * 3600, now + 1),
        now,
        grace,
    )
    .await
    .expect("money");
    let ledger = reconcile_ledger(&servicing.client, &servicing.table, &money, now, 0)
        .await
        .expect("ledger");
    let mut lines = money.lines();
    lines.extend(ledger.lines());
    (ledger.holds(), lines)
}

/// Every copy of each envelope (1 to 3), the copies spread anywhere.
fn scattered(rng: &mut Rng, envelopes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in envelopes {
        for _ in 0..1 + rng.below(3) {
            out.push(e.clone());
        }
    }
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i + 1));
    }
    out
}

async fn when_servicing_events_reach_three_instances_in_any_order_and_many_times_should_post_each_once_and_equal_servicing(
    engine: Engine,
) {
    let mut cases = 0;
    for seed in 0..STREAMS {
        let mut rng = Rng(seed * 6_151 + 11);
        let accounts: Vec<String> = (0..3).map(|a| format!("acc_lg{seed}_{a}")).collect();
        let (spec, bodies) =
            integration_tests::generate::ordering_case(&mut rng, &accounts, seed % 2 == 0);
        let servicing = Servicing::new(engine).await;
        serviced(&servicing, &bodies).await;
        let envelopes = published(&servicing).await;
        let instances: Vec<_> = (0..3).map(|_| ledger_handler(&servicing)).collect();
        let delivered = scattered(&mut rng, &envelopes);
        let results = post_all(&instances, &delivered, &mut rng, "l").await;

        let context = format!("{engine:?}, stream {seed}");
        let money_events = envelopes
            .iter()
            .filter(|e| {
                let v: Value = serde_json::from_str(e).expect("json");
                entry_of(&v["detail"]).expect("postable").is_some()
            })
            .count();
        let posted = results
            .iter()
            .filter(|r| matches!(r, MessageResult::Posted { .. }))
            .count();
        assert_eq!(
            posted, money_events,
            "{context}: one posting per money event"
        );
        assert!(
            results
                .iter()
                .all(|r| !matches!(r, MessageResult::Quarantined { .. })),
            "{context}: {results:?}"
        );
        let spec_ledgers = expected(&spec);
        let lister = servicing.store("payments-api");
        for account in &accounts {
            assert_eq!(
                stored(&servicing, account).await,
                spec_ledgers.get(account).cloned().unwrap_or_default(),
                "{context}: {account} against the specification"
            );
            // What GET …/allocations lists, through this ledger: the specification's.
            assert_eq!(
                lister
                    .allocations(&AccountId::parse(account).expect("id"))
                    .await
                    .expect("listed"),
                spec_allocations(&spec, account),
                "{context}: {account}'s allocations as listed"
            );
        }
        let (holds, lines) = reconciled(&servicing).await;
        assert!(holds, "{context}:\n{}", lines.join("\n"));
        cases += 1;
    }
    record_figure(&format!(
        "ledger: {cases} generated streams x 3 accounts, each event delivered 1-3 times to 3 instances, per engine ({engine:?})"
    ));
}

async fn when_one_stream_reaches_all_three_consumers_should_leave_each_its_own_work(
    engine: Engine,
) {
    use wiremock::{Mock, MockServer, ResponseTemplate, matchers::method};
    let servicing = Servicing::new(engine).await;
    // account-state: the delinquent sample, every fact twice.
    let bodies: Vec<String> = integration_tests::servicing::fixture("delinquent.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .flat_map(|l| [l.to_owned(), l.to_owned()])
        .collect();
    serviced(&servicing, &bodies).await;
    let envelopes = published(&servicing).await;
    // In business order: a cure seen before the worsening it follows supersedes its notice.
    let mut changes: Vec<&String> = envelopes
        .iter()
        .filter(|e| e.contains("\"DelinquencyChanged\""))
        .collect();
    changes.sort_by_key(|e| {
        let v: Value = serde_json::from_str(e).expect("json");
        v["detail"]["occurredAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    assert!(!changes.is_empty(), "the sample moves buckets");

    // The ledger first, each event three times, one broken copy quarantined among them.
    let ledger = ledger_handler(&servicing);
    let mut rng = Rng(5);
    let mut first = Vec::new();
    for e in &envelopes {
        first.extend([e.clone(), e.clone(), e.clone()]);
    }
    first.push(
        json!({"detail-type": "PaymentApplied", "detail": {"eventType": "PaymentApplied"}})
            .to_string(),
    );
    let results = post_all(&[ledger], &first, &mut rng, "first").await;
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, MessageResult::Quarantined { .. }))
            .count(),
        1
    );

    // Collections afterwards: the ledger's claims of the same events make it skip nothing.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let notifier = collections::Notifier::new(
        &format!("{}/notify", server.uri()),
        collections::CALL_TIMEOUT,
    )
    .expect("notifier");
    let collections =
        collections::CollectionsHandler::new(servicing.store(collections::CONSUMER), notifier);
    for (i, change) in changes.iter().enumerate() {
        for n in 0..2 {
            let message = sqs_message(&format!("c{i}-{n}"), change, 1);
            collections.process(&[message]).await;
        }
    }
    let calls = server.received_requests().await.expect("recorded");
    let keys: HashSet<String> = calls
        .iter()
        .filter_map(|r| r.headers.get("idempotency-key"))
        .map(|v| v.to_str().expect("ascii").to_owned())
        .collect();
    assert!(
        !calls.is_empty(),
        "{engine:?}: collections did its work after the ledger"
    );
    assert_eq!(calls.len(), keys.len(), "{engine:?}: one call per action");

    // A replay of everything to account-state and to the ledger repeats nothing.
    serviced(&servicing, &bodies).await;
    assert_eq!(published(&servicing).await.len(), envelopes.len());
    let again = post_all(&[ledger_handler(&servicing)], &envelopes, &mut rng, "again").await;
    assert!(
        again
            .iter()
            .all(|r| matches!(r, MessageResult::Duplicate | MessageResult::Ignored)),
        "{engine:?}: {again:?}"
    );
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}:\n{}", lines.join("\n"));
    // And collections' work was not repeated by the ledger's replay.
    assert_eq!(
        server.received_requests().await.expect("recorded").len(),
        calls.len()
    );
}

pub(crate) fn money_event(
    account: &str,
    id: &str,
    event_type: &str,
    day: &str,
    extra: Value,
) -> String {
    let mut detail = json!({"eventId": id, "eventType": event_type, "accountId": account,
        "occurredAt": format!("{day}T12:00:00Z"), "currency": "EUR",
        "trigger": {"sourceSystem": "core", "sourceEventId": id}});
    for (k, v) in extra.as_object().expect("object") {
        detail[k] = v.clone();
    }
    json!({"source": "servicing.account-state", "detail-type": event_type, "detail": detail})
        .to_string()
}

async fn deliver(handler: &LedgerPostingsHandler, id: &str, body: &str) -> MessageResult {
    let report = handler.process_batch(&[sqs_message(id, body, 1)]).await;
    report.results[0].1.clone()
}

async fn when_a_period_is_closed_should_post_later_events_of_it_to_the_first_open_day(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = ledger_handler(&servicing);
    let store = servicing.store(CONSUMER);
    let account = "acc_period";
    let date = |d: &str| d.parse::<chrono::NaiveDate>().expect("date");
    let fee = money_event(
        account,
        "evt_fee",
        "FeeAssessed",
        "2026-09-10",
        json!({"amountMinor": 500}),
    );
    assert_eq!(
        deliver(&handler, "m1", &fee).await,
        MessageResult::Posted {
            posting_date: date("2026-09-10")
        }
    );
    assert!(
        store
            .close_ledger_period(date("2026-09-30"))
            .await
            .expect("close")
    );
    // A close never reopens: an earlier one changes nothing.
    assert!(
        !store
            .close_ledger_period(date("2026-09-20"))
            .await
            .expect("close")
    );
    assert_eq!(
        store.closed_through_any().await.expect("read"),
        Some(date("2026-09-30"))
    );

    // This handler read the periods before the close (its cache says open): the commit's check
    // refuses the closed day, it reads again and posts to the first open day.
    let interest = money_event(
        account,
        "evt_int",
        "InterestAccrued",
        "2026-09-15",
        json!({"amountMinor": 700}),
    );
    assert_eq!(
        deliver(&handler, "m2", &interest).await,
        MessageResult::Posted {
            posting_date: date("2026-10-01")
        },
        "{engine:?}: backdated, never into the closed period"
    );
    assert_eq!(
        deliver(&handler, "m3", &fee).await,
        MessageResult::Duplicate
    );
    let journal = store
        .journal(&AccountId::parse(account).expect("id"))
        .await
        .expect("journal");
    let by_id: BTreeMap<String, (chrono::NaiveDate, chrono::NaiveDate)> = journal
        .entries
        .iter()
        .map(|e| {
            let p = e.posting().expect("posting");
            (
                p.entry.entry_id.clone(),
                (p.posting_date, p.entry.effective_at.date_naive()),
            )
        })
        .collect();
    assert_eq!(
        by_id,
        BTreeMap::from([
            (
                "evt_fee".to_owned(),
                (date("2026-09-10"), date("2026-09-10"))
            ),
            (
                "evt_int".to_owned(),
                (date("2026-10-01"), date("2026-09-15"))
            ),
        ])
    );
    let balances = journal.balances.expect("balances");
    assert_eq!(balances.entries, 2);
    assert_eq!(balances.balances["1120:fees_receivable"], 500);
    assert_eq!(balances.balances["1110:interest_receivable"], 700);
}

async fn when_an_event_id_comes_back_with_another_detail_or_a_broken_body_should_quarantine_it(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = ledger_handler(&servicing);
    let account = "acc_collide";
    let fee = money_event(
        account,
        "evt_fee",
        "FeeAssessed",
        "2026-09-10",
        json!({"amountMinor": 500}),
    );
    let other = money_event(
        account,
        "evt_fee",
        "FeeAssessed",
        "2026-09-10",
        json!({"amountMinor": 900}),
    );
    assert!(matches!(
        deliver(&handler, "m1", &fee).await,
        MessageResult::Posted { .. }
    ));
    let before = stored(&servicing, account).await;
    match deliver(&handler, "m2", &other).await {
        MessageResult::Quarantined { code, reason } => {
            assert_eq!(code, ledger_postings::COLLISION);
            assert!(reason.contains("evt_fee"), "{reason}");
        }
        other => panic!("{engine:?}: {other:?}"),
    }
    let unbalanced = money_event(
        account,
        "evt_pay",
        "PaymentApplied",
        "2026-09-11",
        json!({"amountMinor": 1000, "payment": {"sourceSystem": "psp", "sourceEventId": "p1"},
            "allocation": {"fees": 0, "interest": 0, "principal": 900, "credit": 0}}),
    );
    match deliver(&handler, "m3", &unbalanced).await {
        MessageResult::Quarantined { code, reason } => {
            assert_eq!(code, ledger_postings::INVALID_EVENT);
            assert!(reason.contains("does not add up"), "{reason}");
        }
        other => panic!("{engine:?}: {other:?}"),
    }
    assert_eq!(
        stored(&servicing, account).await,
        before,
        "{engine:?}: nothing moved"
    );
    let held = servicing.quarantine().await;
    let ours: Vec<_> = held.iter().filter(|q| q.consumer == CONSUMER).collect();
    assert_eq!(ours.len(), 2, "{engine:?}: {held:?}");
    assert!(
        ours.iter().all(|q| !q.raw_body.is_empty()),
        "the raw body is kept"
    );

    // The store says the same without the handler: the entry's key is the claim.
    let journal = servicing
        .store(CONSUMER)
        .journal(&AccountId::parse(account).expect("id"))
        .await
        .expect("journal");
    let read = journal.balances.clone();
    let posting = journal.entries[0].posting().expect("posting");
    let mut next = read.as_ref().expect("balances").sub_ledger();
    next.post(&posting.entry).expect("posts");
    let outcome = servicing
        .store(CONSUMER)
        .post_entry(
            &posting,
            &servicing_domain::Fingerprint::from_stored(journal.entries[0].fingerprint.clone()),
            read.as_ref(),
            &next,
            None,
        )
        .await
        .expect("answer");
    assert_eq!(outcome, PostOutcome::Duplicate);
}

async fn when_half_is_consumed_live_and_the_rest_backfilled_should_equal_live_consumption(
    engine: Engine,
) {
    let mut rng = Rng(99);
    let accounts: Vec<String> = (0..3).map(|a| format!("acc_bf_{a}")).collect();
    let (spec, bodies) = integration_tests::generate::ordering_case(&mut rng, &accounts, true);
    // Two tables, the same servicing stream: one ledger consumes everything live, the other
    // half live and the rest by the backfill.
    let live = Servicing::new(engine).await;
    let late = Servicing::new(engine).await;
    serviced(&live, &bodies).await;
    serviced(&late, &bodies).await;
    let envelopes = published(&live).await;
    post_all(&[ledger_handler(&live)], &envelopes, &mut rng, "live").await;
    let half = &published(&late).await[..envelopes.len() / 2];
    post_all(&[ledger_handler(&late)], half, &mut rng, "half").await;

    let events = ledgerctl::ledger_backfill::published_events(&late.client, &late.table, &[])
        .await
        .expect("events");
    let done = ledgerctl::ledger_backfill::backfill(&ledger_handler(&late), &events, false).await;
    assert_eq!(
        (done.failed, done.quarantined),
        (0, 0),
        "{engine:?}: {}",
        done.line()
    );
    assert!(
        done.already_posted > 0 && done.posted > 0,
        "{engine:?}: {}",
        done.line()
    );

    let spec_ledgers = expected(&spec);
    for account in &accounts {
        let id = AccountId::parse(account).expect("id");
        let entries = |s: &Servicing| {
            let store = s.store(CONSUMER);
            let id = id.clone();
            async move {
                let journal = store.journal(&id).await.expect("journal");
                let mut out: Vec<_> = journal
                    .entries
                    .iter()
                    .map(|e| {
                        let p = e.posting().expect("posting");
                        (p.entry, p.posting_date)
                    })
                    .collect();
                out.sort_by(|a, b| a.0.entry_id.cmp(&b.0.entry_id));
                (journal.balances.map(|b| b.sub_ledger()), out)
            }
        };
        let (live_balances, live_entries) = entries(&live).await;
        let (late_balances, late_entries) = entries(&late).await;
        assert_eq!(
            late_entries, live_entries,
            "{engine:?}: {account}'s entries"
        );
        assert_eq!(
            late_balances, live_balances,
            "{engine:?}: {account}'s balances"
        );
        assert_eq!(
            late_balances.unwrap_or_default(),
            spec_ledgers.get(account).cloned().unwrap_or_default()
        );
    }
    let (holds, lines) = reconciled(&late).await;
    assert!(holds, "{engine:?}:\n{}", lines.join("\n"));
}

async fn when_the_ledger_is_out_of_step_with_servicing_should_name_each_problem(engine: Engine) {
    use integration_tests::generate::{fee, open, pay};
    let servicing = Servicing::new(engine).await;
    let a = "acc_out_of_step";
    let bodies: Vec<String> = [open(a), fee(a, "fee-1", 3, 700), pay(a, "pay-1", 4, 5_000)]
        .iter()
        .map(Value::to_string)
        .collect();
    serviced(&servicing, &bodies).await;
    let (payments, others): (Vec<String>, Vec<String>) = published(&servicing)
        .await
        .into_iter()
        .partition(|e| e.contains("\"PaymentApplied\""));
    let handler = ledger_handler(&servicing);
    let mut rng = Rng(3);
    post_all(std::slice::from_ref(&handler), &others, &mut rng, "o").await;

    // The payment not posted: its account and its cash by source, currency and date differ.
    let (holds, lines) = reconciled(&servicing).await;
    let text = lines.join("\n");
    assert!(!holds, "{engine:?}:\n{text}");
    assert!(
        text.contains(&format!("sub-ledger {a} differs from servicing")),
        "{text}"
    );
    assert!(text.contains("the ledger posted 0.00"), "{text}");
    assert!(text.contains("ledger does NOT reconcile"), "{text}");

    post_all(std::slice::from_ref(&handler), &payments, &mut rng, "p").await;
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}:\n{}", lines.join("\n"));
    assert!(lines.iter().any(|l| l == "ledger reconciles"));

    // A balance changed behind the entries' back: no longer their sum, nor servicing's.
    let (pk, sk) = servicing_store::journal::sub_ledger_key(&AccountId::parse(a).expect("id"));
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(sk))
        .update_expression("SET balances.#fees = balances.#fees + :one")
        .expression_attribute_names("#fees", "1120:fees_receivable")
        .expression_attribute_values(
            ":one",
            aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
        )
        .send()
        .await
        .expect("tampered");
    let (holds, lines) = reconciled(&servicing).await;
    let text = lines.join("\n");
    assert!(!holds, "{engine:?}:\n{text}");
    assert!(text.contains("are not the sum of its entries"), "{text}");
    assert!(text.contains("trial balance in EUR is 1, not 0"), "{text}");
}

/// A reversal's entry is held to the payment's entry it names: the exact opposite, part for
/// part. One whose split was altered (a cent moved between two parts), or whose payment's entry
/// the ledger never posted, is named — not only the balances it moves.
async fn when_a_reversal_entry_is_not_the_opposite_of_its_payments_should_name_it(engine: Engine) {
    use integration_tests::generate::{fee, open, pay, reverse};
    let servicing = Servicing::new(engine).await;
    let a = "acc_reversed";
    let bodies: Vec<String> = [
        open(a),
        fee(a, "fee-1", 3, 700),
        pay(a, "pay-1", 4, 5_000),
        reverse(a, "rev-1", "pay-1", 5, 5_000),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    serviced(&servicing, &bodies).await;
    let handler = ledger_handler(&servicing);
    let (payments, others): (Vec<String>, Vec<String>) = published(&servicing)
        .await
        .into_iter()
        .partition(|e| e.contains("\"PaymentApplied\""));
    post_all(std::slice::from_ref(&handler), &others, &mut Rng(5), "o").await;

    // The payment's entry never posted (no grace here): the reversal names what is missing.
    let (holds, lines) = reconciled(&servicing).await;
    let text = lines.join("\n");
    assert!(!holds, "{engine:?}:\n{text}");
    assert!(text.contains("which the ledger never posted"), "{text}");

    post_all(std::slice::from_ref(&handler), &payments, &mut Rng(6), "p").await;
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}:\n{}", lines.join("\n"));

    // A cent moved from one part of the reversal's entry to another.
    let reversal_id = servicing_domain::outbox::DomainEvent::id_for(
        servicing_domain::outbox::detail_types::PAYMENT_REVERSED,
        &servicing_domain::SourceRef {
            system: "psp".into(),
            event_id: "rev-1".into(),
        },
    );
    let account = AccountId::parse(a).expect("id");
    let (pk, sk) = servicing_store::journal::entry_key(&account, &reversal_id);
    let key = |k: &str| aws_sdk_dynamodb::types::AttributeValue::S(k.to_owned());
    let item = servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .key("pk", key(&pk))
        .key("sk", key(&sk))
        .send()
        .await
        .expect("read")
        .item
        .expect("the reversal's entry");
    let mut posting: Value =
        serde_json::from_str(item["posting"].as_s().expect("posting")).expect("json");
    let transfers = posting["transfers"].as_array_mut().expect("transfers");
    assert!(transfers.len() >= 2, "{transfers:?}");
    let moved = |t: &mut Value, by: i64| {
        t["amountMinor"] = json!(t["amountMinor"].as_i64().expect("amount") + by);
    };
    moved(&mut transfers[0], -1);
    moved(&mut transfers[1], 1);
    servicing
        .client
        .update_item()
        .table_name(&servicing.table)
        .key("pk", key(&pk))
        .key("sk", key(&sk))
        .update_expression("SET posting = :p")
        .expression_attribute_values(":p", key(&posting.to_string()))
        .send()
        .await
        .expect("tampered");
    let (holds, lines) = reconciled(&servicing).await;
    let text = lines.join("\n");
    assert!(!holds, "{engine:?}:\n{text}");
    assert!(
        text.contains(&format!("reversal entry {reversal_id} does not undo")),
        "{text}"
    );

    // A second entry undoing the same payment: its cash would go back twice.
    let mut copy = item.clone();
    let mut second = posting.clone();
    second["entryId"] = json!("evt_second_reversal");
    copy.insert("sk".into(), key("ENTRY#evt_second_reversal"));
    copy.insert("posting".into(), key(&second.to_string()));
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(copy))
        .send()
        .await
        .expect("a second reversal entry");
    let (_, lines) = reconciled(&servicing).await;
    let text = lines.join("\n");
    assert!(
        text.contains("is reversed by 2 entries"),
        "{engine:?}:\n{text}"
    );
}

/// Review of #34: `InstallmentDue` carried no currency before the ledger existed; such a bill
/// (history, a republish, a rolling deploy) was quarantined for good. It takes its account's
/// currency, and waits (retried) while the account's opening is not posted. Every decision
/// record meets the schema.
async fn when_a_bill_was_published_without_its_currency_should_post_it_in_the_accounts(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = ledger_handler(&servicing);
    let a = "acc_old_bill";
    let mut bill: Value = serde_json::from_str(&money_event(a, "evt_bill", "InstallmentDue", "2026-09-05",
        json!({"installmentNo": 1, "dueDate": "2026-09-05", "principalMinor": 4000, "interestMinor": 500})))
    .expect("json");
    bill["detail"]
        .as_object_mut()
        .expect("detail")
        .remove("currency");
    let bill = bill.to_string();
    let opening = money_event(
        a,
        "evt_open",
        "LoanOpened",
        "2026-09-01",
        json!({"principalMinor": 50_000}),
    );
    let schema = integration_tests::schema::load("decision-record.schema.json");
    let mut records = Vec::new();
    for (id, body) in [
        ("b1", &bill),
        ("o1", &opening),
        ("b2", &bill),
        ("b3", &bill),
    ] {
        let report = handler.process_batch(&[sqs_message(id, body, 1)]).await;
        records.extend(report.decisions);
        let result = &report.results[0].1;
        match id {
            "b1" => assert!(
                matches!(result, MessageResult::Retry { .. }),
                "{engine:?}: {result:?}"
            ),
            "b3" => assert_eq!(result, &MessageResult::Duplicate),
            _ => assert!(
                matches!(result, MessageResult::Posted { .. }),
                "{engine:?} {id}: {result:?}"
            ),
        }
    }
    let ledger = stored(&servicing, a).await;
    assert_eq!(ledger.balances["1110:interest_receivable"], 500);
    assert_eq!(ledger.balances["4000:interest_income"], -500);
    // An operator's catch-up (`ledger backfill`, `ledger migrate`) of an account servicing
    // opened and the ledger never posted (its opening's record gone): the loan says the
    // currency.
    let b = "acc_old_bill_migrated";
    serviced(
        &servicing,
        &[integration_tests::generate::open(b).to_string()],
    )
    .await;
    let mut old_bill: Value = serde_json::from_str(&bill).expect("json");
    old_bill["detail"]["accountId"] = b.into();
    old_bill["detail"]["eventId"] = "evt_bill_migrated".into();
    let operators = LedgerPostingsHandler::for_operators(servicing.store(CONSUMER));
    let report = operators
        .process_batch(&[sqs_message("m1", &old_bill.to_string(), 1)])
        .await;
    assert!(
        matches!(report.results[0].1, MessageResult::Posted { .. }),
        "{engine:?}: {:?}",
        report.results
    );
    let migrated = stored(&servicing, b).await;
    assert_eq!(
        (
            migrated.currency.map(|c| c.as_str().to_owned()),
            migrated.balances["1110:interest_receivable"]
        ),
        (Some("EUR".to_owned()), 500)
    );
    for record in &records {
        let violations = integration_tests::schema::violations(&schema, &record.to_json());
        assert!(
            violations.is_empty(),
            "{violations:?}: {}",
            record.to_json()
        );
    }
}

/// A fee servicing applied whose event the ledger never received (older than the archive, say):
/// the books do not reconcile until an operator posts the correcting entry, by
/// `ledgerctl ledger correct`'s code. The same command again posts nothing; the same id with
/// another amount, a transfer on cash clearing, an unknown account are refused and write
/// nothing; the entry keeps the reason and the operator for good.
async fn when_an_operator_corrects_the_ledger_should_post_it_once_and_refuse_what_it_cannot_be(
    engine: Engine,
) {
    use integration_tests::generate::{fee, open};
    use ledgerctl::ledger_correct::{Corrected, CorrectionOrder, correct};
    use servicing_domain::journal::LedgerAccount;
    let servicing = Servicing::new(engine).await;
    let a = "acc_corrected";
    let bodies: Vec<String> = [open(a), fee(a, "fee-1", 3, 700)]
        .iter()
        .map(Value::to_string)
        .collect();
    serviced(&servicing, &bodies).await;
    let opening: Vec<String> = published(&servicing)
        .await
        .into_iter()
        .filter(|e| !e.contains("\"FeeAssessed\""))
        .collect();
    let handler = ledger_handler(&servicing);
    post_all(std::slice::from_ref(&handler), &opening, &mut Rng(5), "o").await;
    let (holds, lines) = reconciled(&servicing).await;
    assert!(
        !holds,
        "{engine:?}: the fee is missing:\n{}",
        lines.join("\n")
    );

    let store = servicing.store(CONSUMER);
    let order = CorrectionOrder {
        account: AccountId::parse(a).expect("id"),
        id: "fee-1-before-the-archive".into(),
        debit: LedgerAccount::FeesReceivable,
        credit: LedgerAccount::FeeIncome,
        amount_minor: 700,
        reason: "fee-1 applied before the ledger was deployed".into(),
    };
    let by = "arn:aws:iam::000000000000:user/ops";
    let (dry, line) = correct(&handler, &store, &order, by, true)
        .await
        .expect("dry run");
    assert_eq!(dry, Corrected::WouldPost, "{line}");
    assert_eq!(
        stored(&servicing, a).await.entries,
        1,
        "a dry run writes nothing"
    );

    let (done, line) = correct(&handler, &store, &order, by, false)
        .await
        .expect("posted");
    assert!(matches!(done, Corrected::Posted { .. }), "{line}");
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}: corrected:\n{}", lines.join("\n"));
    let (again, _) = correct(&handler, &store, &order, "someone-else", false)
        .await
        .expect("again");
    assert_eq!(
        again,
        Corrected::Duplicate,
        "the same correction posts nothing"
    );
    // A dry run reads what the post would find: the id taken.
    let (dry, _) = correct(&handler, &store, &order, by, true)
        .await
        .expect("dry run");
    assert_eq!(dry, Corrected::Duplicate);
    let taken = CorrectionOrder {
        amount_minor: 701,
        ..order.clone()
    };
    let problem = correct(&handler, &store, &taken, by, true)
        .await
        .expect_err("a dry run of a collision");
    assert!(problem.to_string().contains("collision"), "{problem}");

    let before = stored(&servicing, a).await;
    let refused = [
        CorrectionOrder {
            amount_minor: 701,
            ..order.clone()
        },
        CorrectionOrder {
            id: "cash".into(),
            debit: LedgerAccount::CashClearing("psp".into()),
            ..order.clone()
        },
        CorrectionOrder {
            id: "nobody".into(),
            account: AccountId::parse("acc_nobody").expect("id"),
            ..order.clone()
        },
    ];
    for wrong in refused {
        let problem = correct(&handler, &store, &wrong, by, false)
            .await
            .expect_err("refused");
        assert!(problem.to_string().contains("nothing"), "{problem}");
    }
    assert_eq!(stored(&servicing, a).await, before, "nothing written");
    let journal = store
        .journal(&AccountId::parse(a).expect("id"))
        .await
        .expect("journal");
    let kept = journal
        .entries
        .iter()
        .map(|e| e.posting().expect("decodes"))
        .find(|p| p.entry.entry_id == "corr_fee-1-before-the-archive")
        .expect("the correction's entry");
    let why = kept.entry.correction.expect("its reason and operator");
    assert_eq!(
        (why.reason.as_str(), why.by.as_str()),
        (order.reason.as_str(), by)
    );
}

/// `ledgerctl ledger migrate`: a ledger deployed onto a stack whose early facts' records have
/// expired (an opening and a fee; the payments' records are kept for good) cannot be rebuilt
/// from events. The migration posts what the records still hold, then one opening balance at
/// the loan version it read; an account that already agrees gets none, one whose opening the
/// ledger posted is refused (its difference is a defect); a fact applied between the read and
/// the post refuses it; a second run writes nothing; the absorbed facts' events, replayed
/// later, are quarantined, not posted twice, and a new fact posts as ever.
async fn when_the_ledger_is_deployed_onto_older_history_should_open_each_account_once_at_servicings_version(
    engine: Engine,
) {
    use integration_tests::generate::{fee, open, pay};
    use ledgerctl::ledger_migrate::{Migrated, migrate};
    use servicing_domain::journal::{Correction, LedgerAccount, opening_entry, opening_id};
    let servicing = Servicing::new(engine).await;
    let (old, live, defect) = ("acc_mig_old", "acc_mig_live", "acc_mig_defect");
    // The old account's opening and fee applied with records that expire at once (their
    // events kept as the archive would replay them later)...
    let mut expiring = servicing.config();
    expiring.claim_retention = std::time::Duration::ZERO;
    let early: Vec<_> = [open(old), fee(old, "fee-1", 3, 700)]
        .iter()
        .enumerate()
        .map(|(i, f)| sqs_message(&format!("early-{i}"), &f.to_string(), 1))
        .collect();
    servicing
        .handler_with(expiring.clone())
        .process(&early)
        .await;
    let absorbed = published(&servicing).await;
    // ...its payments (the second one overpays: a customer credit) and the other accounts
    // with the usual retention...
    let bodies: Vec<String> = [
        pay(old, "pay-1", 4, 5_000),
        pay(old, "pay-2", 5, 100_000),
        open(live),
        open(defect),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    serviced(&servicing, &bodies).await;
    // ...and a fee of the defect account whose event the ledger never got, its record
    // expired: a defect, not older history.
    let lost = sqs_message("lost", &fee(defect, "fee-lost", 3, 50).to_string(), 1);
    servicing.handler_with(expiring).process(&[lost]).await;
    // `expiresAt` is in whole seconds and a record is alive through its second.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    // The ledger consumed the other accounts' events, but that fee.
    let handler = ledger_handler(&servicing);
    let live_events: Vec<String> = published(&servicing)
        .await
        .into_iter()
        .filter(|e| (e.contains(live) || e.contains(defect)) && !e.contains("fee-lost"))
        .collect();
    post_all(
        std::slice::from_ref(&handler),
        &live_events,
        &mut Rng(8),
        "l",
    )
    .await;
    let (holds, lines) = reconciled(&servicing).await;
    assert!(
        !holds,
        "{engine:?}: the old account's ledger is empty:\n{}",
        lines.join("\n")
    );

    let store = servicing.store(CONSUMER);
    let id = |a: &str| AccountId::parse(a).expect("id");
    let accounts = [id(old), id(live), id("acc_never_opened"), id(defect)];
    let (reason, by) = (
        "ledger deployed onto older history",
        "arn:aws:iam::000000000000:user/ops",
    );
    let dry = migrate(&handler, &store, &accounts, reason, by, true)
        .await
        .expect("dry run");
    let would = match &dry[0].outcome {
        Ok(Migrated::WouldOpen {
            entries: 2,
            opening: Some(entry),
        }) => entry.clone(),
        other => panic!("{engine:?}: {other:?}: {}", dry[0].line()),
    };
    assert_eq!(
        dry[0].caught_up.events, 2,
        "the payments' records hold their events"
    );
    // What the records no longer hold: the principal lent and the fee.
    let legs: Vec<(LedgerAccount, LedgerAccount, i64)> = would
        .transfers
        .iter()
        .map(|t| (t.debit.clone(), t.credit.clone(), t.amount_minor))
        .collect();
    assert_eq!(
        legs,
        [
            (
                LedgerAccount::PrincipalReceivable,
                LedgerAccount::OpeningBalances,
                100_000
            ),
            (
                LedgerAccount::FeesReceivable,
                LedgerAccount::OpeningBalances,
                700
            ),
        ]
    );
    assert!(
        matches!(
            dry[1].outcome,
            Ok(Migrated::WouldOpen {
                entries: 0,
                opening: None
            })
        ),
        "{}",
        dry[1].line()
    );
    assert!(dry[2].outcome.is_err(), "{}", dry[2].line());
    let refused = |m: &ledgerctl::ledger_migrate::AccountMigration| matches!(&m.outcome, Err(why) if why.contains("history is the ledger's"));
    assert!(refused(&dry[3]), "{}", dry[3].line());
    assert_eq!(
        stored(&servicing, old).await,
        SubLedger::default(),
        "a dry run writes nothing"
    );

    // A fact servicing applies between the migration's read and its post refuses the opening:
    // it would be counted twice (once in the opening, once by its own event).
    let read = store
        .loan_state(&id(old))
        .await
        .expect("loan")
        .expect("opened");
    let state = read.account.clone().expect("its state");
    serviced(&servicing, &[fee(old, "fee-2", 6, 300).to_string()]).await;
    let correction = Correction {
        reason: reason.into(),
        by: by.into(),
    };
    let stale = opening_entry(
        &state,
        read.version,
        &SubLedger::default(),
        correction,
        chrono::Utc::now(),
    )
    .expect("opens")
    .expect("differs");
    let mut next = SubLedger::default();
    next.post(&stale).expect("posts");
    let posting = servicing_domain::journal::Posting {
        processed_at: stale.effective_at,
        posting_date: stale.effective_at.date_naive(),
        entry: stale,
    };
    let fingerprint = servicing_domain::fingerprint::Fingerprint::of_value(&json!("stale"));
    let stale_post = store
        .post_entry(&posting, &fingerprint, None, &next, Some(read.version))
        .await
        .expect("answered");
    assert_eq!(stale_post, PostOutcome::Moved, "{engine:?}");
    assert_eq!(
        stored(&servicing, old).await,
        SubLedger::default(),
        "nothing written"
    );

    let done = migrate(&handler, &store, &accounts, reason, by, false)
        .await
        .expect("migrated");
    let opened = match &done[0].outcome {
        Ok(Migrated::Opened { entry, .. }) => entry.clone(),
        other => panic!("{engine:?}: {other:?}: {}", done[0].line()),
    };
    assert_eq!(
        (done[0].caught_up.posted, done[0].caught_up.failed),
        (3, 0),
        "the payments and fee-2 posted by their events: {}",
        done[0].line()
    );
    assert_eq!(
        opened.transfers, would.transfers,
        "fee-2 is its event's, not the opening's"
    );
    assert_eq!(opened.entry_id, opening_id(&id(old)));
    assert!(
        matches!(done[1].outcome, Ok(Migrated::Agrees)),
        "{}",
        done[1].line()
    );
    assert!(done[2].outcome.is_err(), "{}", done[2].line());
    assert!(refused(&done[3]), "{}", done[3].line());
    assert_eq!(
        stored(&servicing, defect)
            .await
            .balance(&LedgerAccount::OpeningBalances),
        0,
        "a defect is not opened"
    );
    // A defect is found and corrected by a person (here: the lost fee).
    let order = ledgerctl::ledger_correct::CorrectionOrder {
        account: id(defect),
        id: "fee-lost".into(),
        debit: LedgerAccount::FeesReceivable,
        credit: LedgerAccount::FeeIncome,
        amount_minor: 50,
        reason: "fee-lost never reached the ledger".into(),
    };
    let (corrected, line) = ledgerctl::ledger_correct::correct(&handler, &store, &order, by, false)
        .await
        .expect("corrected");
    assert!(
        matches!(
            corrected,
            ledgerctl::ledger_correct::Corrected::Posted { .. }
        ),
        "{line}"
    );
    assert_eq!(
        stored(&servicing, live)
            .await
            .balance(&LedgerAccount::OpeningBalances),
        0,
        "an account that agrees gets no opening"
    );
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}: migrated:\n{}", lines.join("\n"));

    let after = stored(&servicing, old).await;
    assert_eq!(after.balance(&LedgerAccount::OpeningBalances), -100_700);
    let again = migrate(
        &handler,
        &store,
        &accounts[..1],
        reason,
        "someone-else",
        false,
    )
    .await
    .expect("again");
    assert!(
        matches!(&again[0].outcome, Ok(Migrated::Before { by: first, .. }) if first == by),
        "{}",
        again[0].line()
    );
    assert_eq!(
        stored(&servicing, old).await,
        after,
        "a second run writes nothing"
    );

    // The archive replays the events the opening absorbed: quarantined, not posted again.
    let replayed: Vec<String> = absorbed.into_iter().filter(|e| e.contains(old)).collect();
    assert_eq!(replayed.len(), 2, "its opening and fee-1");
    for (i, body) in replayed.iter().enumerate() {
        let result = deliver(&handler, &format!("replay-{i}"), body).await;
        assert!(
            matches!(&result, MessageResult::Quarantined { code, .. } if *code == ledger_postings::BEFORE_OPENING),
            "{engine:?}: {result:?}"
        );
    }
    assert_eq!(stored(&servicing, old).await, after, "nothing posted twice");
    // A fact applied after the opening posts as ever (servicing holds its record).
    serviced(&servicing, &[fee(old, "fee-3", 7, 900).to_string()]).await;
    let fresh: Vec<String> = published(&servicing)
        .await
        .into_iter()
        .filter(|e| e.contains("fee-3"))
        .collect();
    post_all(std::slice::from_ref(&handler), &fresh, &mut Rng(9), "n").await;
    assert_eq!(
        stored(&servicing, old).await.entries,
        after.entries + 1,
        "fee-3 posted"
    );
    let (holds, lines) = reconciled(&servicing).await;
    assert!(holds, "{engine:?}: after the replay:\n{}", lines.join("\n"));
    let kept = store
        .journal(&id(old))
        .await
        .expect("journal")
        .entries
        .iter()
        .map(|e| e.posting().expect("decodes"))
        .find(|p| p.entry.entry_id == opening_id(&id(old)))
        .expect("the opening's entry");
    let why = kept.entry.correction.expect("its reason and operator");
    assert_eq!((why.reason.as_str(), why.by.as_str()), (reason, by));
}

/// `GET /v1/loans/{id}/allocations` lists an account's payments through its ledger (no index
/// write per payment) and, for records of the earlier release, through `AllocationsIndex`;
/// each allocation is read from its payment's record. Over generated streams (payments,
/// reversals, overpayments): an account whose events the ledger posted lists exactly what the
/// specification stored; one whose records carry the old index key lists them too; one neither
/// posted nor indexed lists nothing yet — what servicing stored (`servicing.allocations`, its
/// records) does not depend on either.
async fn when_allocations_are_listed_should_read_each_payment_the_ledger_posted_or_the_index_holds(
    engine: Engine,
) {
    use aws_sdk_dynamodb::types::AttributeValue;
    for seed in 0..2u64 {
        let mut rng = Rng(seed * 7_919 + 5);
        let accounts: Vec<String> = (0..3).map(|a| format!("acc_al{seed}_{a}")).collect();
        let (spec, bodies) = integration_tests::generate::ordering_case(&mut rng, &accounts, true);
        let servicing = Servicing::new(engine).await;
        serviced(&servicing, &bodies).await;
        let (posted, indexed, neither) = (&accounts[0], &accounts[1], &accounts[2]);
        // A payment of nothing (the contract allows 0): applied, but the ledger posts nothing.
        let mut nothing =
            integration_tests::generate::pay(posted, &format!("pay-nothing-{seed}"), 30, 0);
        nothing["currency"] = servicing.account_report(posted).await["currency"].clone();
        let applied =
            integration_tests::servicing::process(&servicing.handler(), &[("nothing", nothing)])
                .await;
        assert_eq!(applied, [account_state::MessageResult::Applied]);
        let of = |account: &str| spec_allocations(&spec, account);
        let context = format!("{engine:?}, stream {seed}");
        assert!(
            !of(posted).is_empty() && !of(indexed).is_empty(),
            "{context}: the streams pay"
        );
        // The ledger posts the first account's events only.
        let envelopes: Vec<String> = published(&servicing)
            .await
            .into_iter()
            .filter(|e| e.contains(&format!("\"accountId\":\"{posted}\"")))
            .collect();
        post_all(&[ledger_handler(&servicing)], &envelopes, &mut rng, "al").await;
        // The second account's payment records as the earlier release wrote them.
        for a in of(indexed) {
            let (pk, sk) = servicing_store::items::claim_key("account-state", &a.payment);
            servicing
                .client
                .update_item()
                .table_name(&servicing.table)
                .key("pk", AttributeValue::S(pk))
                .key("sk", AttributeValue::S(sk))
                .update_expression("SET allocatedTo = :a")
                .expression_attribute_values(":a", AttributeValue::S(indexed.clone()))
                .send()
                .await
                .expect("index key");
        }
        let store = servicing.store("payments-api");
        let stored = servicing.allocations(posted).await;
        assert_eq!(
            stored.len(),
            of(posted).len() + 1,
            "{context}: the payment of nothing is stored too"
        );
        for (account, expected) in [
            (posted, stored),
            (indexed, of(indexed)),
            (neither, Vec::new()),
        ] {
            let id = AccountId::parse(account).expect("id");
            let listed = store.allocations(&id).await.expect("listed");
            assert_eq!(listed, expected, "{context}: {account}");
        }
        for account in [indexed, neither] {
            assert_eq!(
                servicing.allocations(account).await,
                of(account),
                "{context}: {account} as stored"
            );
        }
        // And through the API's route.
        let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
        let response = api
            .handle(integration_tests::api_gateway::event(
                "GET",
                &format!("/v1/loans/{posted}/allocations"),
                "GET /v1/loans/{accountId}/allocations",
                Some("arn:aws:iam::123456789012:user/alice"),
                None,
                None,
            ))
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = match response.body() {
            lambda_http::Body::Text(text) => serde_json::from_str(text).expect("json"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            body["allocations"].as_array().map(Vec::len),
            Some(of(posted).len() + 1),
            "{context}: {body}"
        );
    }
}
