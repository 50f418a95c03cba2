//! Generated servicing streams: one account's facts in business order, deliveries that move
//! the facts that wait for another earlier, and queue orders with injected duplicates. The
//! ordering property, the fault sweep and the model-based test draw their cases from here.

use serde_json::{Value, json};
use servicing_domain::Ledger;

use crate::Rng;

pub fn fact(account: &str, id: &str, kind: &str, day: u32, extra: Value) -> Value {
    let mut v = json!({"sourceSystem": "psp", "sourceEventId": id, "eventType": kind,
        "accountId": account, "eventTime": format!("2026-09-{day:02}T10:00:00Z")});
    if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
    v
}

pub fn open(account: &str) -> Value {
    fact(
        account,
        &format!("open-{account}"),
        "LOAN_OPENED",
        1,
        json!({"principalMinor": 100_000, "currency": "EUR", "creditLimitMinor": 200_000}),
    )
}

pub fn pay(account: &str, id: &str, day: u32, amount: i64) -> Value {
    fact(
        account,
        id,
        "PAYMENT_SETTLED",
        day,
        json!({"amountMinor": amount, "currency": "EUR"}),
    )
}

pub fn reverse(account: &str, id: &str, of: &str, day: u32, amount: i64) -> Value {
    fact(
        account,
        id,
        "PAYMENT_REVERSED",
        day,
        json!({"amountMinor": amount, "currency": "EUR",
        "reversalOf": {"sourceSystem": "psp", "sourceEventId": of}}),
    )
}

pub fn fee(account: &str, id: &str, day: u32, amount: i64) -> Value {
    fact(
        account,
        id,
        "FEE_ASSESSED",
        day,
        json!({"amountMinor": amount, "currency": "EUR", "feeType": "LATE_FEE"}),
    )
}

/// One account's facts in business order; reversal blocks (one or two reversals of a payment,
/// sometimes a reversal of the reversal, which is refused) follow their payment directly. The
/// account is in euros or dollars; now and then a fee or interest comes in the other currency
/// (refused).
pub fn business_stream(rng: &mut Rng, account: &str) -> (Vec<Value>, Vec<(usize, usize)>) {
    let (mut facts, blocks) = business_stream_in_euros(rng, account);
    let (currency, other) = match rng.below(2) {
        0 => ("EUR", "USD"),
        _ => ("USD", "EUR"),
    };
    for fact in &mut facts {
        if fact.get("currency").is_some() {
            // Only fees and interest: a refused payment would leave its reversals parked.
            let charge =
                fact["eventType"] == "FEE_ASSESSED" || fact["eventType"] == "INTEREST_ACCRUED";
            let wrong = charge && rng.below(6) == 0;
            fact["currency"] = json!(if wrong { other } else { currency });
        }
    }
    (facts, blocks)
}

fn business_stream_in_euros(rng: &mut Rng, account: &str) -> (Vec<Value>, Vec<(usize, usize)>) {
    let mut facts = vec![open(account)];
    let mut blocks = Vec::new();
    let (mut day, mut installment, mut limit_seq) = (2, 0, 0);
    for n in 0..4 + rng.below(8) {
        day += 1;
        let id = |what: &str| format!("{what}-{account}-{n}");
        match rng.below(6) {
            0 => {
                installment += 1;
                facts.push(fact(account, &id("due"), "INSTALLMENT_DUE", day, json!({
                    "installmentNo": installment, "dueDate": format!("2026-09-{day:02}"),
                    "principalMinor": 2_000 + rng.below(3_000) as i64, "interestMinor": rng.below(900) as i64})));
            }
            1 => facts.push(fact(
                account,
                &id("int"),
                "INTEREST_ACCRUED",
                day,
                json!({"amountMinor": 100 + rng.below(900) as i64, "currency": "EUR"}),
            )),
            2 => facts.push(fee(account, &id("fee"), day, 500 + rng.below(2_000) as i64)),
            3 => {
                // A limit change, sometimes a stale replay of an older sequence.
                let sequence = if rng.below(3) == 0 && limit_seq > 0 {
                    limit_seq
                } else {
                    limit_seq + 1
                };
                limit_seq = limit_seq.max(sequence);
                facts.push(fact(account, &id("lim"), "CREDIT_LIMIT_SET", day, json!({
                    "creditLimitMinor": 100_000 + rng.below(100_000) as i64, "currency": "EUR", "sequence": sequence})));
            }
            _ => {
                let amount = 500 + rng.below(20_000) as i64;
                let payment = id("pay");
                facts.push(pay(account, &payment, day, amount));
                if rng.below(2) == 0 {
                    let start = facts.len();
                    // Later the same day: business time orders reports of one day.
                    let mut r = reverse(account, &id("rev"), &payment, day, amount);
                    r["eventTime"] = json!(format!("2026-09-{day:02}T11:00:00Z"));
                    facts.push(r);
                    if rng.below(3) == 0 {
                        // A chargeback of the same payment: a second, different reversal.
                        let mut c = reverse(account, &id("chb"), &payment, day, amount);
                        c["eventTime"] = json!(format!("2026-09-{day:02}T12:00:00Z"));
                        facts.push(c);
                    }
                    if rng.below(4) == 0 {
                        // A reversal of the reversal: not a payment, refused once it is known.
                        let mut rr = reverse(account, &id("rrv"), &id("rev"), day, amount);
                        rr["eventTime"] = json!(format!("2026-09-{day:02}T13:00:00Z"));
                        facts.push(rr);
                    }
                    blocks.push((start, facts.len()));
                }
            }
        }
    }
    (facts, blocks)
}

/// The account's delivery: its opening delayed behind some of its facts, and each reversal
/// block moved earlier (keeping its own order) — the facts that wait for another arrive early,
/// everything else keeps its relative order.
pub fn early_delivery(rng: &mut Rng, facts: &[Value], blocks: &[(usize, usize)]) -> Vec<Value> {
    let mut order: Vec<usize> = (0..facts.len()).collect();
    let delay = rng.below(4).min(facts.len() - 1);
    order.remove(0);
    order.insert(delay, 0);
    for &(start, end) in blocks {
        let at = order.iter().position(|&i| i == start).unwrap_or(0);
        let block: Vec<usize> = order.drain(at..at + (end - start)).collect();
        let to = at.saturating_sub(rng.below(6));
        for (k, i) in block.into_iter().enumerate() {
            order.insert(to + k, i);
        }
    }
    order.into_iter().map(|i| facts[i].clone()).collect()
}

/// Every account's facts in the order the queue hands them out: FIFO keeps an account's
/// messages together (`MessageGroupId = accountId`), a standard queue mixes accounts; both keep
/// each account's order. Random duplicates (some re-serialised) follow their original.
pub fn deliveries(rng: &mut Rng, per_account: Vec<Vec<Value>>, fifo: bool) -> Vec<String> {
    let mut queues: Vec<std::collections::VecDeque<Value>> =
        per_account.into_iter().map(Into::into).collect();
    let mut out: Vec<String> = Vec::new();
    while queues.iter().any(|q| !q.is_empty()) {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        let pick = live[rng.below(live.len())];
        let take = if fifo { 1 + rng.below(6) } else { 1 };
        for _ in 0..take {
            if let Some(v) = queues[pick].pop_front() {
                out.push(v.to_string());
            }
        }
    }
    for c in 0..rng.below(out.len() / 3 + 1) {
        let line = rng.below(out.len());
        let at = line + 1 + rng.below(out.len() - line);
        let mut copy: Value = serde_json::from_str(&out[line]).expect("json");
        if rng.below(2) == 0 {
            copy["eventId"] = json!(format!("transport-{c}"));
        }
        out.insert(at, copy.to_string());
    }
    out
}

/// The ordering property's case: each account's business stream (ingested in business order
/// by the returned ledger, the expected result), its early delivery, and the queue's bodies
/// (FIFO or standard order, duplicates injected).
pub fn ordering_case(rng: &mut Rng, accounts: &[String], fifo: bool) -> (Ledger, Vec<String>) {
    let mut ledger = Ledger::new();
    let mut early = Vec::new();
    for account in accounts {
        let (facts, blocks) = business_stream(rng, account);
        for f in &facts {
            ledger.ingest(f.to_string().as_bytes());
        }
        early.push(early_delivery(rng, &facts, &blocks));
    }
    let bodies = deliveries(rng, early, fifo);
    (ledger, bodies)
}
