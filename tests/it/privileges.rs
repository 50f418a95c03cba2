//! Least privilege by key prefix and action, held to what the code does: every request a
//! function makes to the servicing table is one its declaration in
//! `infra/policy/table-access.json` allows, and every declared (action, key prefix) is used by
//! the scenarios below — a grant nothing exercises is an over-grant. Policy rule E9132 holds the
//! template's roles to the same declaration, so template, declaration and code agree.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use account_state::MessageResult;
use integration_tests::Engine;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::generate::{fee, open, pay, reverse};
use integration_tests::servicing::{Servicing, process, push_out_of_recent_facts, sqs_message};
use serde_json::{Value, json};

use crate::payments_api::{ALICE, accepted_payment, get_payment, open_account, payment, post};

on_both_engines!(
    when_account_state_runs_should_touch_only_what_its_role_declares,
    when_the_payments_api_runs_should_touch_only_what_its_role_declares,
    when_the_reconciler_runs_should_touch_only_what_its_role_declares,
    when_collections_runs_should_touch_only_what_its_role_declares,
    when_ledger_postings_runs_should_touch_only_what_its_role_declares,
);

type Access = BTreeSet<(String, String)>;

/// The declared `(action, key patterns)` of a function (its logical id in the template).
fn declared(function: &str) -> BTreeMap<String, Vec<String>> {
    let text = include_str!("../../infra/policy/table-access.json");
    let all: Value = serde_json::from_str(text).expect("table-access.json");
    serde_json::from_value(all[function].clone()).expect("function's declaration")
}

/// IAM's `StringLike`: `*` any run of characters, `?` one.
fn like(pattern: &str, text: &str) -> bool {
    match (pattern.chars().next(), text.chars().next()) {
        (None, None) => true,
        (Some('*'), _) => {
            like(&pattern[1..], text)
                || (!text.is_empty()
                    && like(
                        pattern,
                        &text[text.chars().next().map_or(0, char::len_utf8)..],
                    ))
        }
        (Some('?'), Some(c)) => like(&pattern[1..], &text[c.len_utf8()..]),
        (Some(p), Some(c)) if p == c => like(&pattern[p.len_utf8()..], &text[c.len_utf8()..]),
        _ => false,
    }
}

/// The declared projections of a function: per `"<action> <key pattern>"`, the only
/// attributes its role may read there (`dynamodb:Attributes`, E9143).
fn projections(function: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = include_str!("../../infra/policy/table-access.json");
    let all: Value = serde_json::from_str(text).expect("table-access.json");
    serde_json::from_value(all["projections"][function].clone()).unwrap_or_default()
}

/// Every observed request declared; every declaration used; every read where the role may
/// read only some attributes asks for those alone (IAM would deny any other, the local
/// engines do not).
fn assert_declared(function: &str, engine: Engine, plan: &FaultPlan) {
    assert_accessed(function, engine, &plan.access());
    let declared = declared(function);
    for (grant, allowed) in projections(function) {
        let (action, pattern) = grant.split_once(' ').expect("\"<action> <key pattern>\"");
        assert!(
            declared
                .get(action)
                .is_some_and(|patterns| patterns.iter().any(|p| p == pattern)),
            "{function}: a projection for {grant}, which it is not declared to read"
        );
        let reads: Vec<_> = plan
            .reads()
            .into_iter()
            .filter(|(a, key, _)| a == action && like(pattern, key))
            .collect();
        assert!(
            !reads.is_empty(),
            "{engine:?} {function}: no read of {grant}"
        );
        for (_, key, asked) in reads {
            assert!(
                asked
                    .as_ref()
                    .is_some_and(|asked| asked.is_subset(&allowed)),
                "{engine:?} {function}: {action} of {key} asks for {asked:?}; its role may read only {allowed:?} there"
            );
        }
    }
}

fn assert_accessed(function: &str, engine: Engine, observed: &Access) {
    let declared = declared(function);
    let undeclared: Vec<&(String, String)> = observed
        .iter()
        .filter(|(action, key)| {
            !declared
                .get(action)
                .is_some_and(|patterns| patterns.iter().any(|p| like(p, key)))
        })
        .collect();
    assert!(
        undeclared.is_empty(),
        "{engine:?} {function}: requests its declaration does not allow: {undeclared:#?}"
    );
    let unused: Vec<(&String, &String)> = declared
        .iter()
        .flat_map(|(action, patterns)| patterns.iter().map(move |p| (action, p)))
        .filter(|(action, pattern)| {
            !observed
                .iter()
                .any(|(a, key)| a == *action && like(pattern, key))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "{engine:?} {function}: declared, never used (an over-grant): {unused:#?}\nobserved: {observed:#?}"
    );
}

/// Everything account-state does: opens, applies, parks (a body kept apart), releases, marks a
/// reversed payment, reads cold, confirms an old duplicate, quarantines a bad message and a
/// collision, applies a payment the API accepted.
async fn when_account_state_runs_should_touch_only_what_its_role_declares(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let plan = FaultPlan::default();
    let handler = servicing.faulty_handler(servicing.config(), &plan);
    let a = "acc_iam_state";
    let mut early = reverse(a, "rev-1", "pay-1", 4, 100);
    early["producerNote"] = json!("x".repeat(3_000));
    let results = process(&handler, &[("o", open(a)), ("r1", early)]).await;
    assert_eq!(results, [MessageResult::Applied, MessageResult::Parked]);
    process(&handler, &[("p1", pay(a, "pay-1", 3, 100))]).await;
    // Cold instances: the account read alone, then with a reversal's payment.
    let cold = || servicing.faulty_handler(servicing.config(), &plan);
    process(&cold(), &[("p2", pay(a, "pay-2", 3, 50))]).await;
    let results = process(&cold(), &[("r2", reverse(a, "rev-2", "pay-2", 5, 50))]).await;
    assert_eq!(results, [MessageResult::Applied]);
    // An opening older than the recent facts: confirmed against its claim.
    push_out_of_recent_facts(&handler, a).await;
    let results = process(&cold(), &[("o-again", open(a))]).await;
    assert_eq!(results, [MessageResult::Duplicate]);
    let bad = handler
        .process(&[sqs_message("bad", "{not json", 1)])
        .await
        .results;
    assert!(
        matches!(bad[0].1, MessageResult::Quarantined { .. }),
        "{bad:?}"
    );
    let results = process(&cold(), &[("p2-other", pay(a, "pay-2", 3, 51))]).await;
    assert_eq!(results, [MessageResult::Collision]);
    // A released fact DynamoDB refuses as a request: taken off the loan into quarantine, its
    // PARKED claim deleted (requests: the read, the payment, the release refused twice).
    let b = "acc_iam_refused";
    process(&handler, &[("ob", open(b))]).await;
    process(&handler, &[("rb", reverse(b, "rev-b", "pay-b", 4, 700))]).await;
    let refusing = cold();
    plan.at_request(2, Fault::Invalid);
    plan.at_request(3, Fault::Invalid);
    let results = process(
        &refusing,
        &[
            ("pb", pay(b, "pay-b", 3, 700)),
            ("fb", fee(b, "fee-b", 5, 40)),
        ],
    )
    .await;
    assert_eq!(results, [MessageResult::Applied, MessageResult::Applied]);
    assert!(
        servicing
            .quarantine()
            .await
            .iter()
            .any(|q| q.code == "store_rejected")
    );
    // A payment the API accepted, applied once its record proves it (the record's event).
    let c = "acc_iam_api_pay";
    open_account(&servicing, c).await;
    let event = accepted_payment(&servicing, "iam-state", c, 300, "inv-c").await;
    let results = cold()
        .process(&[sqs_message("api-pay", &event.to_string(), 1)])
        .await
        .results;
    assert_eq!(results[0].1, MessageResult::Applied, "{results:?}");
    assert_declared("AccountStateFunction", engine, &plan);
}

/// A POST, its replay, its status and the loan routes.
async fn when_the_payments_api_runs_should_touch_only_what_its_role_declares(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    open_account(&servicing, "acc_iam_api").await;
    let plan = FaultPlan::default();
    let api = payments_api::PaymentsApi::new(servicing.faulty_store("payments-api", &plan));
    let body = payment("acc_iam_api", 700, "inv-iam");
    let accepted = api.handle(post(Some(ALICE), Some("iam-1"), &body)).await;
    assert_eq!(accepted.status(), 202);
    assert_eq!(
        api.handle(post(Some(ALICE), Some("iam-1"), &body))
            .await
            .status(),
        202
    );
    let operation = crate::payments_api::body_json(&accepted)["operationId"]
        .as_str()
        .expect("operation id")
        .to_owned();
    assert_eq!(
        api.handle(get_payment(Some(ALICE), &operation))
            .await
            .status(),
        200
    );
    // Applied, and posted by the ledger: the allocations route reads the account's journal
    // and the payment's record.
    let detail = crate::payments_api::api_outbox(&servicing).await[0]
        .detail
        .clone();
    assert_eq!(
        process(&servicing.handler(), &[("api", detail)]).await,
        [MessageResult::Applied]
    );
    let envelopes = crate::ledger::published(&servicing).await;
    crate::ledger::post_all(
        &[crate::ledger::ledger_handler(&servicing)],
        &envelopes,
        &mut integration_tests::Rng(7),
        "iam",
    )
    .await;
    for (path, route) in [
        ("/v1/loans/acc_iam_api", "GET /v1/loans/{accountId}"),
        (
            "/v1/loans/acc_iam_api/allocations",
            "GET /v1/loans/{accountId}/allocations",
        ),
    ] {
        let request =
            integration_tests::api_gateway::event("GET", path, route, Some(ALICE), None, None);
        assert_eq!(api.handle(request).await.status(), 200, "{path}");
    }
    assert_declared("PaymentsApiFunction", engine, &plan);
}

/// A daily run that expires a parked fact (its body kept apart), confirms an applied API
/// payment and checks an unsettled action.
async fn when_the_reconciler_runs_should_touch_only_what_its_role_declares(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_iam_rec";
    let handler = servicing.handler();
    let mut orphan = reverse(a, "rev-orphan", "pay-never", 4, 100);
    orphan["producerNote"] = json!("x".repeat(3_000));
    process(&handler, &[("o", open(a)), ("r", orphan)]).await;
    // An accepted API payment, applied (the run confirms it), and an unsettled action.
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    let accepted = api
        .handle(post(
            Some(ALICE),
            Some("iam-rec"),
            &payment(a, 300, "inv-rec"),
        ))
        .await;
    assert_eq!(accepted.status(), 202);
    let detail = crate::payments_api::api_outbox(&servicing).await[0]
        .detail
        .clone();
    assert_eq!(
        process(&handler, &[("api", detail)]).await,
        [MessageResult::Applied]
    );
    let intent = servicing_store::ActionIntent {
        action_id: "collections_notification:iam-rec".into(),
        account_id: servicing_domain::AccountId::parse(a).expect("id"),
        event_id: "evt-iam-rec".into(),
        payload: json!({"notice": "dpd_30"}),
    };
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::items::action_item(&intent, servicing_ops::epoch_seconds())
                .expect("action"),
        ))
        .send()
        .await
        .expect("action recorded");
    // The ledger posted what servicing published: it reconciles, so the run closes a period.
    let ledger =
        ledger_postings::LedgerPostingsHandler::new(servicing.store(ledger_postings::CONSUMER));
    for (n, event) in servicing.outbox_records().await.iter().enumerate() {
        let body = json!({"source": event.source, "detail-type": event.detail_type, "detail": event.detail});
        ledger
            .process_batch(&[sqs_message(&format!("l{n}"), &body.to_string(), 1)])
            .await;
    }
    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = integration_tests::lambda::queue(&sqs, "iam-servicing", true).await;
    let config = ::reconciler::Config {
        table: servicing.table.clone(),
        window_hours: 1,
        park_retention: Duration::from_secs(60),
        claim_retention: Duration::from_secs(35 * 86_400),
        servicing_queue_url: queue_url,
        ledger_close_lag_days: 1,
    };
    let plan = FaultPlan::default();
    let store = servicing.faulty_store("account-state", &plan);
    let now = servicing_ops::epoch_seconds() + 3_600;
    servicing.keep_record_log().await;
    let run = ::reconciler::run_at(&config, &store, &sqs, now)
        .await
        .expect("run");
    assert_eq!(run["acceptedConfirmed"], 1, "{run:#}");
    assert!(run["ledgerClosedThrough"].is_string(), "{run:#}");
    assert!(
        servicing
            .quarantine()
            .await
            .iter()
            .any(|q| q.source_event_id.as_deref() == Some("rev-orphan"))
    );
    assert_declared("ReconcilerFunction", engine, &plan);
}

/// A delinquency change that notifies, and a bad envelope.
async fn when_collections_runs_should_touch_only_what_its_role_declares(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let receiver = crate::collections::Receiver::default();
    let server = receiver.start().await;
    let envelopes = crate::collections::delinquency_envelopes(&servicing).await;
    let plan = FaultPlan::default();
    let handler = crate::collections::collections(&servicing, &server, Some(&plan));
    // Each change in its own batch, twice (SQS redelivers), then a bad envelope.
    for round in 0..2 {
        for (n, envelope) in envelopes.iter().enumerate() {
            let id = format!("r{round}-d{n}");
            handler
                .process(&[sqs_message(&id, &envelope.to_string(), 1)])
                .await;
        }
    }
    assert_eq!(receiver.keys().len(), 1, "one notice");
    handler.process(&[sqs_message("bad", "{not json", 1)]).await;
    assert_declared("CollectionsFunction", engine, &plan);
}

/// Postings (the balances and the closed periods read, the entry and balances put with the
/// period's check), a duplicate, a collision quarantined.
async fn when_ledger_postings_runs_should_touch_only_what_its_role_declares(engine: Engine) {
    use ledger_postings::{CONSUMER, LedgerPostingsHandler, MessageResult};
    let servicing = Servicing::new(engine).await;
    let plan = FaultPlan::default();
    let handler = LedgerPostingsHandler::new(servicing.faulty_store(CONSUMER, &plan));
    let a = "acc_iam_ledger";
    let fee = crate::ledger::money_event(
        a,
        "evt_iam_fee",
        "FeeAssessed",
        "2026-09-10",
        json!({"amountMinor": 500}),
    );
    let other = crate::ledger::money_event(
        a,
        "evt_iam_fee",
        "FeeAssessed",
        "2026-09-10",
        json!({"amountMinor": 600}),
    );
    let mut results = Vec::new();
    for (id, body) in [("f1", &fee), ("f2", &fee), ("f3", &other)] {
        results.extend(
            handler
                .process_batch(&[sqs_message(id, body, 1)])
                .await
                .results,
        );
    }
    let results: Vec<MessageResult> = results.into_iter().map(|(_, r)| r).collect();
    assert!(
        matches!(results[0], MessageResult::Posted { .. }),
        "{results:?}"
    );
    assert_eq!(results[1], MessageResult::Duplicate);
    assert!(
        matches!(results[2], MessageResult::Quarantined { .. }),
        "{results:?}"
    );
    // An account opened from servicing (`ledger migrate`): an event of a fact whose record is
    // gone is asked of servicing, by the fact's record key.
    let b = "acc_iam_migrated";
    let mut expiring = servicing.config();
    expiring.claim_retention = Duration::ZERO;
    servicing
        .handler_with(expiring)
        .process(&[sqs_message("o", &open(b).to_string(), 1)])
        .await;
    let opened: Vec<String> = crate::ledger::published(&servicing)
        .await
        .into_iter()
        .filter(|e| e.contains(b))
        .collect();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let migrated = ledgerctl::ledger_migrate::migrate(
        &crate::ledger::ledger_handler(&servicing),
        &servicing.store(CONSUMER),
        &[servicing_domain::AccountId::parse(b).expect("id")],
        "older history",
        "ops",
        false,
    )
    .await
    .expect("migrated");
    assert!(migrated[0].outcome.is_ok(), "{}", migrated[0].line());
    for body in &opened {
        let result = handler
            .process_batch(&[sqs_message("replayed", body, 1)])
            .await;
        assert!(
            matches!(&result.results[0].1, MessageResult::Quarantined { code, .. } if *code == ledger_postings::BEFORE_OPENING),
            "{:?}",
            result.results
        );
    }
    assert_declared("LedgerPostingsFunction", engine, &plan);
}
