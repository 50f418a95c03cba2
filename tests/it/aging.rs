//! Business days close (contract: "Business days close, so a silent account still ages"): the
//! aging sample through the consumer on both engines, whatever duplicates are injected.

use account_state::MessageResult;
use futures_util::StreamExt;
use integration_tests::servicing::{Servicing, assert_state_matches, fixture, sqs_message};
use integration_tests::{Engine, Rng};
use serde_json::{Value, json};

on_both_engines!(
    when_the_aging_sample_is_delivered_with_duplicates_anywhere_should_reach_its_expected_state,
    when_the_day_closes_should_send_one_close_per_account_in_arrears_from_the_index_only,
);

/// Delivery orders per engine.
const CASES: u64 = 12;

async fn when_the_aging_sample_is_delivered_with_duplicates_anywhere_should_reach_its_expected_state(
    engine: Engine,
) {
    let expected: Value = serde_json::from_str(&fixture("aging.expected.json")).expect("json");
    let lines: Vec<String> = fixture("aging.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    let cases = (0..CASES).map(|seed| {
        let (expected, lines) = (&expected, &lines);
        async move {
            let servicing = Servicing::with_stream(engine, false).await;
            let mut rng = Rng(seed * 48_271 + 11);
            // Copies of random lines land anywhere after their original: the distinct
            // events keep their order (the sample's own order, a stale close included).
            let mut stream = lines.clone();
            let copies = if seed == 0 {
                0
            } else {
                1 + rng.below(lines.len())
            };
            for _ in 0..copies {
                let line = lines[rng.below(lines.len())].clone();
                let first = stream.iter().position(|l| *l == line).unwrap_or(0);
                let at = first + 1 + rng.below(stream.len() - first);
                stream.insert(at, line);
            }
            let handler = servicing.handler();
            let (mut applied, mut stale, mut duplicates) = (0, 0, 0);
            let mut next = 0;
            while next < stream.len() {
                let take = (1 + rng.below(4)).min(stream.len() - next);
                let messages: Vec<_> = stream[next..next + take]
                    .iter()
                    .enumerate()
                    .map(|(i, body)| sqs_message(&format!("m{}", next + i), body, 1))
                    .collect();
                next += take;
                for (_, result) in handler.process(&messages).await.results {
                    match result {
                        MessageResult::Applied => applied += 1,
                        MessageResult::Stale => stale += 1,
                        MessageResult::Duplicate => duplicates += 1,
                        other => panic!("{engine:?} case {seed}: {other:?}"),
                    }
                }
            }
            let context = format!("{engine:?} case {seed} ({copies} copies)");
            let counts = &expected["counts"];
            assert_eq!(
                (applied, stale, duplicates),
                (
                    counts["applied"].as_u64().unwrap_or_default(),
                    counts["stale"].as_u64().unwrap_or_default(),
                    counts["duplicates"].as_u64().unwrap_or_default() + copies as u64
                ),
                "{context}"
            );
            let account = expected["accountId"].as_str().expect("account");
            let report = servicing.account_report(account).await;
            assert_state_matches(&report, expected, &context);
            servicing.drop_table().await;
        }
    });
    futures_util::stream::iter(cases)
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
}

fn opening(account: &str) -> String {
    json!({"sourceSystem": "core-banking", "sourceEventId": format!("open-{account}"),
        "eventType": "LOAN_OPENED", "accountId": account, "eventTime": "2026-09-01T09:00:00Z",
        "principalMinor": 100_000, "currency": "EUR"})
    .to_string()
}

fn bill(account: &str, due: &str) -> String {
    json!({"sourceSystem": "core-banking", "sourceEventId": format!("due-{account}"),
        "eventType": "INSTALLMENT_DUE", "accountId": account, "eventTime": "2026-09-20T09:00:00Z",
        "installmentNo": 1, "dueDate": due, "principalMinor": 10_000, "interestMinor": 500})
    .to_string()
}

async fn when_the_day_closes_should_send_one_close_per_account_in_arrears_from_the_index_only(
    engine: Engine,
) {
    let servicing = Servicing::with_stream(engine, false).await;
    let handler = servicing.handler();
    // 10,000 accounts; 300 billed with an installment due 2026-10-01 and never paid; 50 more
    // billed for a due date after the closed day (not past due yet).
    let accounts: Vec<String> = (0..10_000).map(|i| format!("acc_aging_{i:05}")).collect();
    let mut bodies: Vec<String> = accounts.iter().map(|a| opening(a)).collect();
    bodies.extend(accounts[..300].iter().map(|a| bill(a, "2026-10-01")));
    bodies.extend(accounts[300..350].iter().map(|a| bill(a, "2026-11-15")));
    let chunks: Vec<Vec<String>> = bodies.chunks(10).map(<[String]>::to_vec).collect();
    futures_util::stream::iter(chunks.into_iter().enumerate().map(|(n, chunk)| {
        let handler = &handler;
        async move {
            let messages: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(i, b)| sqs_message(&format!("m{n}-{i}"), b, 1))
                .collect();
            let report = handler.process(&messages).await;
            assert_eq!(
                report.counts.applied,
                chunk.len() as u64,
                "{:?}",
                report.results
            );
        }
    }))
    .buffer_unordered(8)
    .collect::<Vec<()>>()
    .await;

    let sqs = aws_sdk_sqs::Client::new(&Engine::MiniStack.sdk_config().await);
    let (queue_url, _) = integration_tests::lambda::queue(&sqs, "servicing", true).await;
    let store = servicing.store("aging");
    let date = "2026-10-31".parse().expect("date");
    let dry = ::aging::close_day(&store, &sqs, &queue_url, date, true, "test")
        .await
        .expect("dry run");
    assert_eq!((dry.accounts.len(), dry.sent), (300, 0));
    servicing.requests.reset();
    let close = ::aging::close_day(&store, &sqs, &queue_url, date, false, "test")
        .await
        .expect("close");
    assert_eq!((close.accounts.len(), close.sent), (300, 300));
    let requests = servicing.requests.snapshot();
    assert_eq!(
        requests.keys().collect::<Vec<_>>(),
        ["Query"],
        "the index only, never a scan: {requests:?}"
    );
    assert_eq!(
        servicing.requests.get("Query"),
        u64::from(servicing_store::arrears::ARREARS_SHARDS),
        "one page per shard"
    );
    // The closes, delivered (twice: a second run for the same day sends the same identities).
    let received = drain(&sqs, &queue_url).await;
    assert_eq!(received.len(), 300);
    let counts = deliver_all(&handler, &received).await;
    assert_eq!(counts.applied, 300, "{counts:?}");
    let again = deliver_all(&handler, &received).await;
    assert_eq!((again.applied, again.duplicate), (0, 300));
    let report = servicing.account_report(&accounts[0]).await;
    assert_eq!(
        (report["dpd"].as_u64(), report["delinquencyBucket"].as_str()),
        (Some(30), Some("DPD_30_59"))
    );
    let untouched = servicing.account_report(&accounts[300]).await;
    assert_eq!(untouched["dpd"].as_u64(), Some(0));
}

async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        if got.messages().is_empty() {
            return bodies;
        }
        for m in got.messages() {
            bodies.push(m.body().unwrap_or_default().to_owned());
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }
}

async fn deliver_all(
    handler: &account_state::AccountStateHandler,
    bodies: &[String],
) -> account_state::BatchCounts {
    let mut counts = account_state::BatchCounts::default();
    for (n, chunk) in bodies.chunks(10).enumerate() {
        let messages: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| sqs_message(&format!("c{n}-{i}"), b, 1))
            .collect();
        let c = handler.process(&messages).await.counts;
        counts.applied += c.applied;
        counts.duplicate += c.duplicate;
        counts.stale += c.stale;
    }
    counts
}
