//! Issue #33: the daily jobs and the operators' listings read what they report, never the
//! table's history. Each scenario writes history that is closed (applied facts, settled
//! actions, confirmed payments) beside a few open things, runs the job through a recording
//! client, and holds what it read to the open things alone: no `Scan`, and no item of the
//! history read.

use std::time::Duration;

use account_state::MessageResult;
use integration_tests::Engine;
use integration_tests::faults::FaultPlan;
use integration_tests::generate::{open, pay, reverse};
use integration_tests::servicing::{Servicing, process};

use crate::payments_api::{ALICE, api_outbox, open_account, payment, post};
use servicing_ops::actions::Listing;
use servicing_store::{ActionIntent, ActionStatus, Lease};

on_both_engines!(
    when_parked_facts_expire_should_read_only_the_accounts_holding_them,
    when_actions_are_checked_should_read_only_the_unsettled_ones,
    when_api_payments_are_checked_should_read_only_the_unconfirmed_ones,
    when_items_predate_the_open_index_should_backfill_them_once,
    when_a_window_is_reconciled_should_read_its_records_through_the_record_log,
    when_the_ledger_is_reconciled_should_read_only_the_accounts_the_window_touched,
    when_an_accounts_ledger_has_grown_long_should_check_only_what_changed_since_its_last_check,
    when_an_entry_is_changed_or_removed_by_hand_should_list_its_account_to_be_read_whole,
);

/// The requests of a recorded run, as `(action, key)`.
type Access = std::collections::BTreeSet<(String, String)>;

fn scans(access: &Access) -> Vec<&(String, String)> {
    access
        .iter()
        .filter(|(action, _)| action == "dynamodb:Scan")
        .collect()
}

/// No scan, and no key of the history (`marker`) read: what the job read did not grow with it.
fn no_scan_nor_history(access: &Access, marker: &str, engine: Engine) {
    assert!(scans(access).is_empty(), "{engine:?}: {:?}", scans(access));
    let history: Vec<&(String, String)> = access
        .iter()
        .filter(|(_, key)| key.contains(marker))
        .collect();
    assert!(history.is_empty(), "{engine:?}: history read: {history:?}");
}

/// Closed history: `accounts` opened accounts with a payment applied each.
async fn history(servicing: &Servicing, prefix: &str, accounts: usize) {
    let handler = servicing.handler();
    for i in 0..accounts {
        let a = format!("{prefix}_{i:03}");
        process(
            &handler,
            &[
                (&format!("{a}-o"), open(&a)),
                (&format!("{a}-p"), pay(&a, &format!("{a}-pay"), 2, 1_000)),
            ],
        )
        .await;
    }
}

async fn when_parked_facts_expire_should_read_only_the_accounts_holding_them(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    history(&servicing, "acc_hist", 30).await;
    // Two accounts hold parked facts: a reversal of a payment never seen, a payment before
    // its account's opening.
    let handler = servicing.handler();
    process(
        &handler,
        &[
            ("po", open("acc_parked_a")),
            ("pr", reverse("acc_parked_a", "rev-x", "pay-never", 3, 100)),
            ("pp", pay("acc_parked_b", "pay-early", 2, 500)),
        ],
    )
    .await;

    let plan = FaultPlan::default();
    let store = servicing.faulty_store("account-state", &plan);
    let now = servicing_ops::epoch_seconds() + 3_600;
    let expiry = servicing_ops::parked::expire(&store, now, Duration::from_secs(60))
        .await
        .expect("expiry");
    assert_eq!(
        (expiry.missing, expiry.problems.len()),
        (2, 0),
        "{engine:?}: both parked facts expired: {expiry:?}"
    );
    let access = plan.access();
    assert!(
        scans(&access).is_empty(),
        "{engine:?}: scanned: {access:#?}"
    );
    let loans_read: Vec<&str> = access
        .iter()
        .filter(|(action, key)| action == "dynamodb:Query" && key.starts_with("LOAN#"))
        .map(|(_, key)| key.as_str())
        .collect();
    assert_eq!(
        loans_read,
        ["LOAN#acc_parked_a", "LOAN#acc_parked_b"],
        "{engine:?}: only the accounts holding parked facts are read"
    );
    // Taken off: the index no longer lists them (the next run reads nothing).
    let plan = FaultPlan::default();
    let store = servicing.faulty_store("account-state", &plan);
    let again = servicing_ops::parked::expire(&store, now, Duration::from_secs(60))
        .await
        .expect("expiry");
    assert_eq!((again.missing, again.still_parked), (0, 0), "{engine:?}");
    assert!(
        plan.access()
            .iter()
            .all(|(_, key)| key.starts_with("index/OpenIndex:")),
        "{engine:?}: an expired account leaves the index: {:#?}",
        plan.access()
    );
}

/// Recorded as collections records them (`PENDING`, in the open index), then settled or not
/// through the store's own lease and outcome writes.
async fn when_actions_are_checked_should_read_only_the_unsettled_ones(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let store = servicing.store("collections");
    let long_ago = servicing_ops::epoch_seconds() - 86_400;
    let ids: Vec<String> = (0..24)
        .map(|i| format!("collections_notification:act-{i:02}"))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let intent = ActionIntent {
            action_id: id.clone(),
            account_id: servicing_domain::AccountId::parse(&format!("acc_act_{i:02}")).expect("id"),
            event_id: format!("evt-{i}"),
            payload: serde_json::json!({"notice": i}),
        };
        servicing
            .client
            .put_item()
            .table_name(&servicing.table)
            .set_item(Some(
                servicing_store::items::action_item(&intent, long_ago).expect("item"),
            ))
            .send()
            .await
            .expect("action recorded");
    }
    let lease_until = (servicing_ops::epoch_seconds() + 60) * 1000;
    // 20 settled (sent, rejected), one retried (pending again), one leased (sending, lease
    // live), two never tried.
    for (i, id) in ids.iter().enumerate().take(22) {
        let lease = format!("lease-{i}");
        assert_eq!(
            store
                .lease_action(id, &lease, lease_until)
                .await
                .expect("lease"),
            Lease::Acquired {
                from: ActionStatus::Pending
            }
        );
        let outcome = match i {
            0..10 => Some(ActionStatus::Sent),
            10..20 => Some(ActionStatus::Rejected),
            20 => Some(ActionStatus::Pending),
            _ => None,
        };
        if let Some(status) = outcome {
            store
                .record_action(id, &lease, status, Some(200), "answer")
                .await
                .expect("outcome");
        }
    }
    let open: Vec<&String> = ids[20..].iter().collect();

    let plan = FaultPlan::default();
    let faulty = servicing.faulty_store("collections", &plan);
    let listed = servicing_ops::actions::list(&faulty, Listing::Open, None, None)
        .await
        .expect("listing");
    let listed: Vec<&String> = listed.iter().map(|a| &a.action_id).collect();
    assert_eq!(
        listed, open,
        "{engine:?}: the unsettled actions, oldest first"
    );
    let access = plan.access();
    assert!(
        scans(&access).is_empty(),
        "{engine:?}: scanned: {access:#?}"
    );
    let read: Vec<&str> = access
        .iter()
        .filter(|(_, key)| key.starts_with("ACTION#"))
        .map(|(_, key)| key.as_str())
        .collect();
    assert_eq!(
        read.len(),
        open.len(),
        "{engine:?}: only unsettled actions read: {read:#?}"
    );

    // The daily money check reports the stuck ones from the same reads: the leased one is
    // not stuck while its lease lives.
    let plan = FaultPlan::default();
    let client = plan.client(&servicing.client);
    let money = servicing_ops::money::reconcile_money(
        &client,
        &servicing.table,
        &[],
        (
            servicing_ops::epoch_seconds() - 25 * 3600,
            servicing_ops::epoch_seconds() + 1,
        ),
        servicing_ops::epoch_seconds(),
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    let stuck: Vec<&String> = money.stuck_actions.iter().map(|a| &a.action_id).collect();
    assert_eq!(stuck, [&ids[20], &ids[22], &ids[23]], "{engine:?}");
    let actions_read = plan
        .access()
        .iter()
        .filter(|(_, key)| key.starts_with("ACTION#"))
        .count();
    assert_eq!(
        actions_read,
        open.len(),
        "{engine:?}: settled actions are never read"
    );
}

/// API payments accepted, applied and confirmed by earlier runs are history: a check reads the
/// ones not yet confirmed, and the daily run confirms those it sees applied.
async fn when_api_payments_are_checked_should_read_only_the_unconfirmed_ones(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_api_hist";
    open_account(&servicing, a).await;
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    let handler = servicing.handler();
    let store = servicing.store("account-state");
    let check = |client: aws_sdk_dynamodb::Client| {
        let table = servicing.table.clone();
        async move {
            servicing_ops::money::reconcile_money(
                &client,
                &table,
                &[],
                (
                    servicing_ops::epoch_seconds() + 3_600 - 25 * 3600,
                    servicing_ops::epoch_seconds() + 3_600 + 1,
                ),
                servicing_ops::epoch_seconds() + 3_600,
                servicing_ops::money::Grace::default(),
            )
            .await
            .expect("money")
        }
    };
    // History: 12 payments accepted, applied, and confirmed by a daily run.
    for i in 0..12 {
        let body = payment(a, 100 + i, &format!("inv-{i}"));
        let accepted = api
            .handle(post(Some(ALICE), Some(&format!("k-{i}")), &body))
            .await;
        assert_eq!(accepted.status(), 202);
    }
    for (i, event) in api_outbox(&servicing).await.into_iter().enumerate() {
        let id = format!("api-{i}");
        assert_eq!(
            process(&handler, &[(&id, event.detail)]).await,
            [MessageResult::Applied]
        );
    }
    let money = check(servicing.client.clone()).await;
    assert_eq!(
        (money.accepted, money.confirmed.len()),
        (12, 12),
        "{engine:?}"
    );
    assert_eq!(
        servicing_ops::money::confirm_applied(&store, &money).await,
        (12, Vec::new())
    );
    // Today: one more applied, one accepted and never applied.
    for (key, amount) in [("today-applied", 70), ("today-lost", 80)] {
        let body = payment(a, amount, key);
        assert_eq!(
            api.handle(post(Some(ALICE), Some(key), &body))
                .await
                .status(),
            202
        );
    }
    let applied = api_outbox(&servicing)
        .await
        .into_iter()
        .find(|e| e.detail["amountMinor"] == 70)
        .expect("today's payment");
    assert_eq!(
        process(&handler, &[("api-today", applied.detail)]).await,
        [MessageResult::Applied]
    );

    let plan = FaultPlan::default();
    let money = check(plan.client(&servicing.client)).await;
    assert_eq!(
        (money.accepted, money.confirmed.len()),
        (2, 1),
        "{engine:?}"
    );
    let lost: Vec<i64> = money.not_applied.iter().map(|n| n.amount_minor).collect();
    assert_eq!(lost, [80], "{engine:?}: the one never applied is reported");
    let records_read = plan
        .access()
        .iter()
        .filter(|(_, key)| key.starts_with("IDEMPOTENCY#"))
        .count();
    assert_eq!(
        records_read, 2,
        "{engine:?}: confirmed payments are never read again"
    );
}

/// The review of issue #33's change: items written before the open index existed never carry
/// its keys, and the daily run (which reads only the index) would never see them. The one-off
/// backfill gives every still-open one its keys; a second run finds none.
async fn when_items_predate_the_open_index_should_backfill_them_once(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let a = "acc_before_index";
    open_account(&servicing, a).await;
    let handler = servicing.handler();
    process(
        &handler,
        &[("rev", reverse(a, "rev-old", "pay-never", 3, 100))],
    )
    .await;
    let api = payments_api::PaymentsApi::new(servicing.store("payments-api"));
    let accepted = api
        .handle(post(Some(ALICE), Some("old-key"), &payment(a, 900, "old")))
        .await;
    assert_eq!(accepted.status(), 202);
    let intent = ActionIntent {
        action_id: "collections_notification:before-index".into(),
        account_id: servicing_domain::AccountId::parse(a).expect("id"),
        event_id: "evt-before".into(),
        payload: serde_json::json!({}),
    };
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::items::action_item(&intent, servicing_ops::epoch_seconds())
                .expect("item"),
        ))
        .send()
        .await
        .expect("action");
    // As the code before the index wrote them: without its keys.
    {
        let store = servicing.store("account-state");
        let mut keys = Vec::new();
        for kind in servicing_store::open::OpenKind::ALL {
            for entry in store.open(kind).await.expect("index") {
                keys.push((entry.pk, entry.sk));
            }
        }
        assert_eq!(
            keys.len(),
            3,
            "{engine:?}: one loan, one action, one payment"
        );
        for (pk, sk) in &keys {
            servicing
                .client
                .update_item()
                .table_name(&servicing.table)
                .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.clone()))
                .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(sk.clone()))
                .update_expression("REMOVE openShard, openSince")
                .send()
                .await
                .expect("stripped");
        }
    }
    let store = servicing.store("account-state");
    let now = servicing_ops::epoch_seconds() + 3_600;
    let blind = servicing_ops::parked::expire(&store, now, Duration::from_secs(60))
        .await
        .expect("expiry");
    assert_eq!(
        blind.missing, 0,
        "{engine:?}: invisible before the backfill"
    );

    let dry = servicing_ops::backfill::open_index(&store, true)
        .await
        .expect("dry run");
    assert_eq!(
        (dry.found, dry.written),
        ([1, 1, 1], [0, 0, 0]),
        "{engine:?}"
    );
    let done = servicing_ops::backfill::open_index(&store, false)
        .await
        .expect("backfill");
    assert_eq!(
        (done.found, done.written),
        ([1, 1, 1], [1, 1, 1]),
        "{engine:?}"
    );
    let again = servicing_ops::backfill::open_index(&store, false)
        .await
        .expect("again");
    assert_eq!(
        again.found,
        [0, 0, 0],
        "{engine:?}: a second run finds nothing"
    );

    let listed = servicing_ops::actions::list(&store, Listing::Open, None, None)
        .await
        .expect("actions");
    assert_eq!(listed.len(), 1, "{engine:?}");
    let money = servicing_ops::money::reconcile_money(
        &servicing.client,
        &servicing.table,
        &[],
        (now - 25 * 3600, now + 1),
        now,
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    assert_eq!(
        (money.accepted, money.not_applied.len()),
        (1, 1),
        "{engine:?}"
    );
    let expiry = servicing_ops::parked::expire(&store, now, Duration::from_secs(60))
        .await
        .expect("expiry");
    assert_eq!(
        expiry.missing, 1,
        "{engine:?}: the parked reversal is seen and expired"
    );
    // Applied and confirmed by a daily run: a later backfill never reopens it.
    let event = api_outbox(&servicing).await.remove(0);
    assert_eq!(
        process(&handler, &[("api", event.detail)]).await,
        [MessageResult::Applied]
    );
    let money = servicing_ops::money::reconcile_money(
        &servicing.client,
        &servicing.table,
        &[],
        (now - 25 * 3600, now + 1),
        now,
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    assert_eq!(
        servicing_ops::money::confirm_applied(&store, &money).await,
        (1, Vec::new())
    );
    let after = servicing_ops::backfill::open_index(&store, false)
        .await
        .expect("backfill");
    assert_eq!(
        after.found,
        [0, 0, 0],
        "{engine:?}: a confirmed payment stays closed"
    );
}

/// Applied payments of past days: copies of `template` (an applied payment's record) under
/// new identities (`hist#pay-<n>`), claimed `days_ago` days ago, each paid that many days
/// before its template's business date. Put as they were then: the stream carries them.
async fn past_payments(
    servicing: &Servicing,
    template: &servicing_store::schema::ClaimRecord,
    n: usize,
    days_ago: i64,
) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let now = servicing_ops::epoch_seconds();
    for i in 0..n {
        let mut record = template.clone();
        let id = format!("pay-{i:04}");
        (record.pk, record.source_system, record.source_event_id) = (
            format!("CLAIM#account-state#hist#{id}"),
            "hist".into(),
            id.clone(),
        );
        record.claimed_at = now - days_ago * 86_400;
        let mut events = record.events().expect("events");
        for event in &mut events {
            let at = chrono::DateTime::parse_from_rfc3339(
                event.detail["occurredAt"].as_str().expect("occurredAt"),
            )
            .expect("a time")
                - chrono::Duration::days(days_ago);
            event.detail["occurredAt"] = at.to_rfc3339().into();
            event.detail["payment"]["sourceSystem"] = "hist".into();
            event.detail["payment"]["sourceEventId"] = id.clone().into();
        }
        record.outbox = Some(serde_json::to_string(&events).expect("events"));
        let mut item = servicing_store::schema::to_item(&record).expect("item");
        item.insert("sourceSystem".into(), AttributeValue::S("hist".into()));
        servicing
            .client
            .put_item()
            .table_name(&servicing.table)
            .set_item(Some(item))
            .send()
            .await
            .expect("a past payment");
    }
}

/// Today's facts: three accounts opened and paid.
async fn the_day(handler: &account_state::AccountStateHandler) {
    for i in 0..3 {
        let a = format!("acc_day_{i}");
        process(
            handler,
            &[
                (&format!("{a}-o"), open(&a)),
                (&format!("{a}-p"), pay(&a, &format!("{a}-pay"), 20, 1_000)),
            ],
        )
        .await;
    }
}

/// The window's reconciliation and the money's read the window's records through the record
/// log (the relay keeps it from the stream; records written before it, the one-off backfill
/// lists), and the business dates their money moved on: no scan, and no record of the past
/// days read, however many there are.
async fn when_a_window_is_reconciled_should_read_its_records_through_the_record_log(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    the_day(&servicing.handler()).await;
    let template = servicing
        .claims()
        .await
        .into_iter()
        .find(|c| c.event_type == "PAYMENT_SETTLED")
        .expect("an applied payment");
    past_payments(&servicing, &template, 40, 3).await;
    let now = servicing_ops::epoch_seconds();
    let window = (now - 3_600, now + 1);

    // Written before the log (no relay ran): a window lists none of them until the one-off
    // backfill lists every record; a dry run only counts.
    let unlisted = servicing_ops::reconcile::reconcile(
        &servicing.client,
        &servicing.table,
        "account-state",
        window,
        None,
    )
    .await
    .expect("reconcile");
    assert_eq!(unlisted.applied, 0, "{engine:?}");
    let store = servicing.store("ledgerctl");
    let counted = servicing_ops::backfill::record_log(&store, true)
        .await
        .expect("dry run");
    assert_eq!((counted.records, counted.items), (46, 0), "{engine:?}");
    let listed = servicing_ops::backfill::record_log(&store, false)
        .await
        .expect("backfill");
    assert_eq!((listed.records, listed.undecodable), (46, 0), "{engine:?}");

    let plan = FaultPlan::default();
    let client = plan.client(&servicing.client);
    let report = servicing_ops::reconcile::reconcile(
        &client,
        &servicing.table,
        "account-state",
        window,
        None,
    )
    .await
    .expect("reconcile");
    assert_eq!(
        (report.applied, report.holds()),
        (6, true),
        "{engine:?}: {:?}",
        report.lines()
    );
    let money = servicing_ops::money::reconcile_money(
        &client,
        &servicing.table,
        &[],
        window,
        now,
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    assert_eq!(
        money
            .dates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["2026-09-20"],
        "{engine:?}: the dates the window's money moved on"
    );
    let paid: u64 = money.totals.values().map(|t| t.payments).sum();
    assert_eq!(paid, 3, "{engine:?}: {:?}", money.lines());
    no_scan_nor_history(&plan.access(), "#hist#", engine);
}

/// Copies `account`'s ledger partition (its entries and balances) to `acc_hist_<n>`, as if
/// posted `days_ago` days ago: each entry's processing and effective times moved back.
async fn past_ledgers(servicing: &Servicing, account: &str, n: usize, days_ago: i64) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let id = servicing_domain::AccountId::parse(account).expect("id");
    let (pk, _) = servicing_store::journal::sub_ledger_key(&id);
    let partition = servicing
        .client
        .query()
        .table_name(&servicing.table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk))
        .send()
        .await
        .expect("the ledger partition")
        .items
        .unwrap_or_default();
    let back = |at: &str| {
        (chrono::DateTime::parse_from_rfc3339(at).expect("a time")
            - chrono::Duration::days(days_ago))
        .to_rfc3339()
    };
    for i in 0..n {
        let hist = format!("acc_hist_{i:03}");
        for original in &partition {
            let mut item = original.clone();
            item.insert("pk".into(), AttributeValue::S(format!("LEDGER#{hist}")));
            item.insert("accountId".into(), AttributeValue::S(hist.clone()));
            if let Some(AttributeValue::S(posting)) = item.get("posting") {
                let mut posting: serde_json::Value =
                    serde_json::from_str(posting).expect("a posting");
                posting["accountId"] = hist.clone().into();
                for time in ["processedAt", "effectiveAt"] {
                    posting[time] = back(posting[time].as_str().expect("a time")).into();
                }
                item.insert("posting".into(), AttributeValue::S(posting.to_string()));
            }
            if let Some(AttributeValue::N(at)) = item.get("postedAt") {
                let at: i64 = at.parse().expect("postedAt");
                item.insert(
                    "postedAt".into(),
                    AttributeValue::N((at - days_ago * 86_400).to_string()),
                );
            }
            servicing
                .client
                .put_item()
                .table_name(&servicing.table)
                .set_item(Some(item))
                .send()
                .await
                .expect("a past ledger item");
        }
    }
}

/// The money of the last hour and the ledger against it, now (grace 0): `(now, the ledger)`.
async fn ledger_of_the_hour(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> (i64, servicing_ops::ledger::LedgerReconciliation) {
    let now = servicing_ops::epoch_seconds();
    let money = servicing_ops::money::reconcile_money(
        client,
        table,
        &[],
        (now - 3_600, now + 1),
        now,
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    let ledger = servicing_ops::ledger::reconcile_ledger(client, table, &money, now, 0)
        .await
        .expect("ledger");
    (now, ledger)
}

/// The ledger's leg reads the accounts the window touched — servicing's facts, the ledger's
/// own writes, the cash of the dates totalled — each account's ledger whole: no scan, and no
/// other account's ledger, however many there are. An account only the ledger touched (its
/// balances changed by hand) is read and named.
async fn when_the_ledger_is_reconciled_should_read_only_the_accounts_the_window_touched(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    the_day(&servicing.handler()).await;
    let ledger = crate::ledger::ledger_handler(&servicing);
    let envelopes = crate::ledger::published(&servicing).await;
    crate::ledger::post_all(
        std::slice::from_ref(&ledger),
        &envelopes,
        &mut integration_tests::Rng(7),
        "day",
    )
    .await;
    past_ledgers(&servicing, "acc_day_0", 20, 3).await;
    let store = servicing.store("ledgerctl");
    let listed = servicing_ops::backfill::record_log(&store, false)
        .await
        .expect("backfill");
    assert_eq!(listed.undecodable, 0, "{engine:?}");

    let reconciled = |client: aws_sdk_dynamodb::Client| {
        let table = servicing.table.clone();
        async move { ledger_of_the_hour(&client, &table).await.1 }
    };
    let plan = FaultPlan::default();
    let report = reconciled(plan.client(&servicing.client)).await;
    assert!(report.holds(), "{engine:?}: {:?}", report.lines());
    assert_eq!(
        (report.accounts, report.sub_ledgers),
        (3, 3),
        "{engine:?}: {:?}",
        report.lines()
    );
    no_scan_nor_history(&plan.access(), "acc_hist", engine);

    // A past account's balances changed by hand now: the relay lists the write under this
    // hour, and the ledger's leg reads that account and names it.
    let hist = servicing_domain::AccountId::parse("acc_hist_007").expect("id");
    let mut balances = store
        .sub_ledger(&hist)
        .await
        .expect("read")
        .expect("balances");
    *balances.balances.values_mut().next().expect("a balance") += 1;
    balances.posted_at = servicing_ops::epoch_seconds();
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::schema::to_item(&balances).expect("item"),
        ))
        .send()
        .await
        .expect("tampered");
    let mut log = servicing_store::record_log::RecordLog::default();
    log.add_sub_ledger(&balances);
    store
        .write_record_log(&log, "tampered")
        .await
        .expect("listed");
    let report = reconciled(servicing.client.clone()).await;
    let text = report.lines().join("\n");
    assert!(!report.holds(), "{engine:?}:\n{text}");
    assert!(
        text.contains("sub-ledger acc_hist_007: stored balances"),
        "{engine:?}:\n{text}"
    );
    assert_eq!(report.accounts, 4, "{engine:?}:\n{text}");

    // What the log does not list (here: balances written without their listing) waits for the
    // account's next change; an audit reads every account, by a scan it names, and finds it.
    let unlisted = servicing_domain::AccountId::parse("acc_hist_011").expect("id");
    let mut balances = store
        .sub_ledger(&unlisted)
        .await
        .expect("read")
        .expect("balances");
    *balances.balances.values_mut().next().expect("a balance") += 1;
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::schema::to_item(&balances).expect("item"),
        ))
        .send()
        .await
        .expect("tampered");
    let touched = reconciled(servicing.client.clone())
        .await
        .lines()
        .join("\n");
    assert!(!touched.contains("acc_hist_011"), "{engine:?}:\n{touched}");
    let now = servicing_ops::epoch_seconds();
    let money = servicing_ops::money::reconcile_money(
        &servicing.client,
        &servicing.table,
        &[],
        (now - 3_600, now + 1),
        now,
        servicing_ops::money::Grace::default(),
    )
    .await
    .expect("money");
    let audit = servicing_ops::ledger::reconcile_accounts(
        &servicing.client,
        &servicing.table,
        &money,
        now,
        0,
        servicing_ops::ledger::Accounts::Every,
    )
    .await
    .expect("audit");
    let text = audit.lines().join("\n");
    let problems = audit.problems.join("\n");
    assert!(
        !audit.holds()
            && problems.contains("sub-ledger acc_hist_011: stored balances")
            && problems.contains("sub-ledger acc_hist_007: stored balances"),
        "{engine:?}:\n{text}"
    );
    assert_eq!(audit.accounts, 23, "{engine:?}:\n{text}");
}

/// `account`'s entries as processed `days_ago` earlier (in place, before the log lists them):
/// a ledger with a past.
async fn processed_earlier(servicing: &Servicing, account: &str, days_ago: i64) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let partition = servicing
        .client
        .query()
        .table_name(&servicing.table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(format!("LEDGER#{account}")))
        .send()
        .await
        .expect("the ledger partition")
        .items
        .unwrap_or_default();
    for mut item in partition {
        let Some(AttributeValue::S(posting)) = item.get("posting") else {
            continue;
        };
        let mut posting: serde_json::Value = serde_json::from_str(posting).expect("a posting");
        let at =
            chrono::DateTime::parse_from_rfc3339(posting["processedAt"].as_str().expect("a time"))
                .expect("a time")
                - chrono::Duration::days(days_ago);
        posting["processedAt"] = at.to_rfc3339().into();
        item.insert("posting".into(), AttributeValue::S(posting.to_string()));
        servicing
            .client
            .put_item()
            .table_name(&servicing.table)
            .set_item(Some(item))
            .send()
            .await
            .expect("an entry of the past");
    }
}

/// An account's check reads what changed since its last check, never its whole ledger: the
/// first check reads each account whole and remembers what it proved (`LEDGER_CHECK#`); the
/// next reads, of an account with a long past that took one more entry, that entry and its
/// balances by key — no `Query` of any ledger partition. Balances changed by hand are found so;
/// an entry changed by hand, or an account whose check is gone, is read whole again, and what
/// is wrong is found.
async fn when_an_accounts_ledger_has_grown_long_should_check_only_what_changed_since_its_last_check(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let handler = servicing.handler();
    the_day(&handler).await;
    let past: Vec<(String, serde_json::Value)> = (0..30)
        .map(|i| {
            let id = format!("acc_day_0-fee{i:02}");
            let fee = integration_tests::generate::fee("acc_day_0", &id, 21, 10 + i);
            (id, fee)
        })
        .collect();
    let past: Vec<(&str, serde_json::Value)> =
        past.iter().map(|(i, f)| (i.as_str(), f.clone())).collect();
    process(&handler, &past).await;
    let ledger = crate::ledger::ledger_handler(&servicing);
    let post = |run: &'static str| {
        let (servicing, ledger) = (&servicing, &ledger);
        async move {
            let envelopes = crate::ledger::published(servicing).await;
            crate::ledger::post_all(
                std::slice::from_ref(ledger),
                &envelopes,
                &mut integration_tests::Rng(7),
                run,
            )
            .await;
        }
    };
    post("past").await;
    for account in ["acc_day_0", "acc_day_1", "acc_day_2"] {
        processed_earlier(&servicing, account, 3).await;
    }
    let store = servicing.store("ledgerctl");
    let list = || async {
        servicing_ops::backfill::record_log(&store, false)
            .await
            .expect("listed")
    };
    list().await;

    let check = |client: aws_sdk_dynamodb::Client| {
        let table = servicing.table.clone();
        async move {
            let (now, report) = ledger_of_the_hour(&client, &table).await;
            let remembered = servicing_ops::ledger::remember_checks(&client, &table, &report, now)
                .await
                .expect("checks remembered");
            (report, remembered)
        }
    };
    let partition_reads = |plan: &FaultPlan| -> Vec<(String, String)> {
        plan.access()
            .into_iter()
            .filter(|(action, key)| action == "dynamodb:Query" && key.starts_with("LEDGER#"))
            .collect()
    };

    // Never checked: each account read whole, and what it proved remembered.
    let plan = FaultPlan::default();
    let (first, remembered) = check(plan.client(&servicing.client)).await;
    assert!(first.holds(), "{engine:?}: {:?}", first.lines());
    assert_eq!(
        (first.accounts, first.read_whole, remembered),
        (3, 3, 3),
        "{engine:?}: {:?}",
        first.lines()
    );
    assert_eq!(partition_reads(&plan).len(), 3, "{engine:?}");

    // Checked: the past is not read again, by key or by partition — only the payments whose
    // cash falls on the date the money reconciliation totals.
    let plan = FaultPlan::default();
    let (second, remembered) = check(plan.client(&servicing.client)).await;
    assert!(second.holds(), "{engine:?}: {:?}", second.lines());
    assert_eq!(
        (second.read_whole, remembered),
        (0, 0),
        "{engine:?}: {:?}",
        second.lines()
    );
    assert_eq!(
        (first.entries, second.entries),
        (36, 3),
        "{engine:?}: {:?}",
        second.lines()
    );
    assert!(
        partition_reads(&plan).is_empty(),
        "{engine:?}: {:?}",
        partition_reads(&plan)
    );

    // Two more entries on the long account, a fee and a reversal of its payment (held to the
    // payment's entry): they are what is read of it.
    let more = integration_tests::generate::fee("acc_day_0", "acc_day_0-fee-more", 22, 7);
    let back = reverse("acc_day_0", "acc_day_0-rev", "acc_day_0-pay", 22, 1_000);
    process(
        &handler,
        &[("acc_day_0-fee-more", more), ("acc_day_0-rev", back)],
    )
    .await;
    post("more").await;
    list().await;
    let plan = FaultPlan::default();
    let (third, remembered) = check(plan.client(&servicing.client)).await;
    assert!(third.holds(), "{engine:?}: {:?}", third.lines());
    assert_eq!(
        (third.read_whole, remembered),
        (0, 1),
        "{engine:?}: {:?}",
        third.lines()
    );
    assert_eq!(
        third.entries,
        second.entries + 2,
        "{engine:?}: {:?}",
        third.lines()
    );
    assert!(
        partition_reads(&plan).is_empty(),
        "{engine:?}: {:?}",
        partition_reads(&plan)
    );

    // Balances changed by hand: not the check plus the entries since.
    let day_1 = servicing_domain::AccountId::parse("acc_day_1").expect("id");
    let mut balances = store
        .sub_ledger(&day_1)
        .await
        .expect("read")
        .expect("balances");
    *balances.balances.values_mut().next().expect("a balance") += 1;
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::schema::to_item(&balances).expect("item"),
        ))
        .send()
        .await
        .expect("tampered");
    let (tampered, _) = check(servicing.client.clone()).await;
    let text = tampered.lines().join("\n");
    assert!(
        !tampered.holds()
            && tampered.problems.iter().any(|p| {
                p.starts_with("sub-ledger acc_day_1: stored balances")
                    && p.contains("onto its check")
            }),
        "{engine:?}:\n{text}"
    );

    // An entry of the past changed by hand (the relay lists its account to be read whole):
    // the sum of every entry finds it.
    let day_0 = servicing_domain::AccountId::parse("acc_day_0").expect("id");
    let journal = store.journal(&day_0).await.expect("journal");
    let mut entry = journal
        .entries
        .iter()
        .find(|e| e.event_type == "FeeAssessed")
        .expect("a past entry")
        .clone();
    let mut posting: serde_json::Value = serde_json::from_str(&entry.posting).expect("a posting");
    for transfer in posting["transfers"].as_array_mut().expect("transfers") {
        transfer["amountMinor"] = (transfer["amountMinor"].as_i64().expect("an amount") + 1).into();
    }
    entry.posting = posting.to_string();
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(
            servicing_store::schema::to_item(&entry).expect("item"),
        ))
        .send()
        .await
        .expect("rewritten");
    let mut log = servicing_store::record_log::RecordLog::default();
    log.add_ledger_key(
        "LEDGER#acc_day_0",
        "JOURNAL_ENTRY",
        servicing_ops::epoch_seconds(),
    );
    store
        .write_record_log(&log, "rewritten")
        .await
        .expect("listed");
    let (rewritten, _) = check(servicing.client.clone()).await;
    let text = rewritten.lines().join("\n");
    assert!(
        rewritten.read_whole >= 1
            && rewritten.problems.iter().any(|p| {
                p.starts_with("sub-ledger acc_day_0: stored balances")
                    && !p.contains("onto its check")
            }),
        "{engine:?}:\n{text}"
    );
    // Its check no longer stands: back to version 0, which proves nothing, so the account is
    // read whole until it holds, whatever the log lists next.
    let (pk, sk) = servicing_store::journal::ledger_check_key("acc_day_0");
    let stands = servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .set_key(Some(servicing_store::items::key_item((pk, sk))))
        .consistent_read(true)
        .send()
        .await
        .expect("read")
        .item
        .expect("the check");
    assert_eq!(
        servicing_store::items::number(&stands, "version").ok(),
        Some(0),
        "{engine:?}"
    );

    // A check gone (expired, deleted): that account is read whole, and holds.
    let (pk, sk) = servicing_store::journal::ledger_check_key("acc_day_2");
    servicing
        .client
        .delete_item()
        .table_name(&servicing.table)
        .set_key(Some(servicing_store::items::key_item((pk, sk))))
        .send()
        .await
        .expect("deleted");
    let plan = FaultPlan::default();
    let (gone, _) = check(plan.client(&servicing.client)).await;
    assert!(
        partition_reads(&plan)
            .contains(&("dynamodb:Query".to_owned(), "LEDGER#acc_day_2".to_owned())),
        "{engine:?}: {:?}",
        partition_reads(&plan)
    );
    assert!(
        !gone.problems.iter().any(|p| p.contains("acc_day_2")),
        "{engine:?}: {:?}",
        gone.lines()
    );
}

/// The engine's own stream, as the relay takes it: an entry put is listed by its key, an entry
/// changed or removed afterwards (no code does either) lists its account to be read whole.
async fn when_an_entry_is_changed_or_removed_by_hand_should_list_its_account_to_be_read_whole(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    the_day(&servicing.handler()).await;
    let ledger = crate::ledger::ledger_handler(&servicing);
    let envelopes = crate::ledger::published(&servicing).await;
    crate::ledger::post_all(
        std::slice::from_ref(&ledger),
        &envelopes,
        &mut integration_tests::Rng(7),
        "day",
    )
    .await;
    let store = servicing.store("ledgerctl");
    let entry_of = |account: &'static str| {
        let store = &store;
        async move {
            let id = servicing_domain::AccountId::parse(account).expect("id");
            store.journal(&id).await.expect("journal").entries[0].clone()
        }
    };
    let changed = entry_of("acc_day_0").await;
    let mut item = servicing_store::schema::to_item(&changed).expect("item");
    item.insert(
        "fingerprint".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("changed by hand".into()),
    );
    servicing
        .client
        .put_item()
        .table_name(&servicing.table)
        .set_item(Some(item))
        .send()
        .await
        .expect("changed");
    let removed = entry_of("acc_day_1").await;
    servicing
        .client
        .delete_item()
        .table_name(&servicing.table)
        .set_key(Some(servicing_store::items::key_item((
            removed.pk.clone(),
            removed.sk.clone(),
        ))))
        .send()
        .await
        .expect("removed");
    let kept = entry_of("acc_day_2").await;

    let log = servicing.stream_record_log().await;
    let listed: std::collections::BTreeSet<String> = log
        .items("batch")
        .iter()
        .filter(|item| {
            servicing_ops::text(item, "pk").is_some_and(|pk| pk.starts_with("LOG#LEDGER#HOUR#"))
        })
        .flat_map(|item| {
            servicing_store::record_log::facts_of(item)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    for expected in [
        "acc_day_0!".to_owned(),
        "acc_day_1!".to_owned(),
        format!("acc_day_2/{}", kept.entry_id),
    ] {
        assert!(
            listed.contains(&expected),
            "{engine:?}: {expected} not in {listed:?}"
        );
    }
    assert!(!listed.contains("acc_day_2!"), "{engine:?}: {listed:?}");
}
