//! The shape production takes, as one driver for the warm-instances model test, the soak test
//! and the soak bench: several warm instances (each with its own cache), each delivery to a
//! random one, FIFO or standard order, batch sizes 1 to 10, injected duplicates, faults at random
//! request indices (throttling past the SDK's retries, a 5xx, a response lost after the
//! commit, a cancelling concurrent transaction), instances killed in the middle of a batch and
//! replaced by cold ones, operators' resends and collisions, the reconciler's expiry and the
//! daily business-day close between deliveries. What a batch answers as a retry — or a killed
//! batch in full — comes back first, as SQS does. Every final verdict is compared with the
//! in-memory ledger (the executable specification), and whenever nothing is owed a redelivery
//! every account's state: balances, allocations, events, nothing parked that is ready.

use std::collections::VecDeque;
use std::time::Duration;

use account_state::{AccountStateHandler, MessageResult};
use serde_json::Value;
use servicing_domain::{AccountId, Disposition, Ledger, ServicingEvent};

use crate::Rng;
use crate::faults::{Fault, FaultPlan};
use crate::generate::{business_stream, deliveries, early_delivery};
use crate::servicing::{Servicing, sqs_message};

/// The faults a delivery may take, at a random request of the instance it reaches.
pub const FAULTS: [Fault; 4] = [
    Fault::Throttle,
    Fault::ServerError,
    Fault::LoseResponse,
    Fault::TransactionConflict,
];

/// What one case runs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub seed: u64,
    pub accounts: usize,
    pub instances: usize,
    /// Batches hold 1 to this many messages.
    pub largest_batch: usize,
    /// FIFO keeps an account's messages together; a standard queue mixes accounts (both keep
    /// each account's order).
    pub fifo: bool,
    /// Copies injected after their originals, in percent of the distinct facts.
    pub duplicate_percent: usize,
    /// Deliveries that arm a fault on their instance, in percent.
    pub fault_percent: usize,
    /// Deliveries whose instance is killed in the middle of the batch, in percent.
    pub kill_percent: usize,
}

impl SoakConfig {
    /// The soak's mix for case `seed` (the short test and the bench run it): three accounts
    /// on three instances, batch sizes 1 and up to 10, FIFO and standard order, 30 %
    /// duplicates, a fault armed on a quarter of the deliveries, one in twenty killed.
    pub fn mix(seed: u64) -> Self {
        SoakConfig {
            seed,
            accounts: 3,
            instances: 3,
            largest_batch: if seed.is_multiple_of(2) { 1 } else { 10 },
            fifo: seed % 4 < 2,
            duplicate_percent: 30,
            fault_percent: 25,
            kill_percent: 5,
        }
    }
}

/// What the cases did, summed.
#[derive(Debug, Default)]
pub struct Tally {
    pub cases: usize,
    /// Distinct facts generated (copies and resends not counted).
    pub facts: usize,
    /// Batches delivered (first deliveries, redeliveries, resends, closes).
    pub deliveries: usize,
    /// Messages delivered again after a retry or a kill.
    pub redelivered: usize,
    pub duplicates_sent: usize,
    pub faults: [usize; FAULTS.len()],
    pub kills: usize,
    pub collisions: usize,
    pub reconciler_runs: usize,
    pub closes: usize,
    /// Verdicts or states that differ from the ledger's (must be none).
    pub differences: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.cases += other.cases;
        self.facts += other.facts;
        self.deliveries += other.deliveries;
        self.redelivered += other.redelivered;
        self.duplicates_sent += other.duplicates_sent;
        for (a, b) in self.faults.iter_mut().zip(other.faults) {
            *a += b;
        }
        self.kills += other.kills;
        self.collisions += other.collisions;
        self.reconciler_runs += other.reconciler_runs;
        self.closes += other.closes;
        self.differences.extend(other.differences);
    }

    /// One line: what ran, and how much differed.
    pub fn line(&self) -> String {
        let faults: Vec<String> = FAULTS
            .iter()
            .zip(self.faults)
            .map(|(kind, n)| format!("{kind:?} {n}"))
            .collect();
        format!(
            "{} cases, {} facts, {} deliveries ({} redeliveries, {} duplicates sent), faults: {}, {} instances killed, {} collisions sent, {} reconciler runs, {} closes; {} differences from the ledger",
            self.cases,
            self.facts,
            self.deliveries,
            self.redelivered,
            self.duplicates_sent,
            faults.join(", "),
            self.kills,
            self.collisions,
            self.reconciler_runs,
            self.closes,
            self.differences.len()
        )
    }
}

/// One message in the queue: its id, body, and whether an earlier delivery of it was answered
/// as a retry or cut by a kill (its commit may have happened: its verdict may then be a
/// duplicate of itself).
type Queued = (String, Value, bool);

/// One account's facts with its reversals delivered before their payments (they park on them)
/// and its opening held back behind up to all of them, so that whole items of parked facts are
/// expired and recreated.
pub fn waiting_stream(rng: &mut Rng, account: &str) -> Vec<Value> {
    let (facts, blocks) = business_stream(rng, account);
    let mut delivery = early_delivery(rng, &facts, &blocks);
    let opening = delivery
        .iter()
        .position(|f| f["eventType"] == "LOAN_OPENED")
        .map(|at| delivery.remove(at));
    let at = rng.below(delivery.len() + 1);
    delivery.splice(at..at, opening);
    delivery
}

/// The ledger's verdict in the consumer's terms (quarantine codes are the reason's first word).
pub fn expected(disposition: &Disposition) -> MessageResult {
    match disposition {
        Disposition::Applied => MessageResult::Applied,
        Disposition::Stale => MessageResult::Stale,
        Disposition::Duplicate => MessageResult::Duplicate,
        Disposition::Collision { .. } => MessageResult::Collision,
        Disposition::Parked(_) => MessageResult::Parked,
        Disposition::Quarantined { reason } => MessageResult::Quarantined {
            code: reason
                .split([':', ' '])
                .next()
                .unwrap_or_default()
                .to_owned(),
        },
    }
}

/// The reconciler's expiry as if `PARK_RETENTION` had passed since everything was parked.
pub async fn expire_everything(servicing: &Servicing) -> u64 {
    let week = Duration::from_secs(7 * 86_400);
    let now = servicing_ops::epoch_seconds() + week.as_secs() as i64 + 60;
    let expiry = servicing_ops::parked::expire(&servicing.store("account-state"), now, week)
        .await
        .expect("expire");
    expiry.missing + expiry.mismatched
}

/// Answers per message of a batch, back in delivery order (they come per account).
async fn process(handler: &AccountStateHandler, batch: &[Queued]) -> Vec<MessageResult> {
    let messages: Vec<_> = batch
        .iter()
        .map(|(id, b, _)| sqs_message(id, &b.to_string(), 1))
        .collect();
    let report = handler.process(&messages).await;
    batch
        .iter()
        .map(|(id, _, _)| {
            report
                .results
                .iter()
                .find(|(m, _)| m == id)
                .map(|(_, r)| r.clone())
                .expect("an answer per message")
        })
        .collect()
}

/// Runs one case on its own table (dropped at the end).
pub async fn run_case(servicing: &Servicing, config: &SoakConfig) -> Tally {
    let mut rng = Rng(config.seed * 7_777_777 + 3);
    let mut tally = Tally {
        cases: 1,
        ..Tally::default()
    };
    let accounts: Vec<String> = (0..config.accounts)
        .map(|a| format!("acc_k{}_{a}", config.seed))
        .collect();
    let streams: Vec<Vec<Value>> = accounts
        .iter()
        .map(|account| waiting_stream(&mut rng, account))
        .collect();
    tally.facts = streams.iter().map(Vec::len).sum();
    let ordered = deliveries(&mut rng, streams, config.fifo);
    let mut queue: VecDeque<Queued> = VecDeque::new();
    let mut message = 0usize;
    let mut seen = std::collections::HashSet::new();
    for line in ordered {
        let body: Value = serde_json::from_str(&line).expect("json");
        let identity = (body["sourceSystem"].clone(), body["sourceEventId"].clone());
        if !seen.insert(identity.to_owned()) {
            tally.duplicates_sent += 1;
        }
        message += 1;
        queue.push_back((format!("m{message}"), body, false));
    }
    // More copies, up to the configured share, each after its original.
    let wanted = tally.facts * config.duplicate_percent / 100;
    while tally.duplicates_sent < wanted && !queue.is_empty() {
        let at = rng.below(queue.len());
        let copy = queue[at].1.clone();
        let to = at + 1 + rng.below(queue.len() - at);
        message += 1;
        queue.insert(to, (format!("m{message}"), copy, false));
        tally.duplicates_sent += 1;
    }
    let plans: Vec<FaultPlan> = (0..config.instances)
        .map(|_| FaultPlan::default())
        .collect();
    let mut instances: Vec<AccountStateHandler> = plans
        .iter()
        .map(|plan| servicing.faulty_handler(servicing.config(), plan))
        .collect();
    let mut ledger = Ledger::new();
    let mut delivered: Vec<Value> = Vec::new();
    // Owed a redelivery: answered as a retry (or cut by a kill), not yet delivered again.
    let mut owed = 0usize;
    let mut step = 0usize;
    while !queue.is_empty() || step < 8 {
        step += 1;
        if step > 4_000 {
            tally
                .differences
                .push(format!("case {} does not settle: {queue:?}", config.seed));
            break;
        }
        let context = format!("case {} step {step}", config.seed);
        match rng.below(10) {
            // The reconciler: everything parked so far has waited past the retention.
            0 if owed == 0 => {
                let expired = expire_everything(servicing).await;
                let want = ledger.expire_parked(i64::MAX) as u64;
                if expired != want {
                    tally.differences.push(format!(
                        "{context}: the reconciler expired {expired}, the ledger {want}"
                    ));
                }
                tally.reconciler_runs += 1;
            }
            // The daily close of a business date up to two months after the facts: the
            // accounts it finds are the ledger's accounts past due then; their closes go to the
            // head of the queue.
            1 if owed == 0 => {
                let date = chrono::NaiveDate::from_ymd_opt(2026, 9, 15).expect("date")
                    + chrono::Days::new(rng.below(60) as u64);
                let store = servicing.store("aging");
                let mut found: Vec<String> = store
                    .accounts_in_arrears(date)
                    .await
                    .expect("arrears")
                    .iter()
                    .map(|a| a.as_str().to_owned())
                    .collect();
                let mut want: Vec<String> = ledger
                    .accounts()
                    .filter(|a| a.past_due_at(date))
                    .map(|a| a.account_id.as_str().to_owned())
                    .collect();
                found.sort();
                want.sort();
                if found != want {
                    tally.differences.push(format!(
                        "{context}: in arrears on {date}: found {found:?}, ledger {want:?}"
                    ));
                }
                for account in found.iter().rev() {
                    let id = AccountId::parse(account).expect("id");
                    let close = ServicingEvent::business_day_closed(&id, date).canonical_json();
                    message += 1;
                    queue.push_front((format!("m{message}"), close, false));
                }
                tally.closes += found.len();
            }
            // An operator resends something already delivered (a replay, a resend after
            // expiry) or a producer sends another payload under a known identity.
            2 if owed == 0 && !delivered.is_empty() => {
                let mut body = delivered[rng.below(delivered.len())].clone();
                if rng.below(3) == 0 && body.get("amountMinor").is_some() {
                    body["amountMinor"] = (body["amountMinor"].as_i64().unwrap_or(0) + 1).into();
                    tally.collisions += 1;
                }
                message += 1;
                queue.push_front((format!("m{message}"), body, false));
            }
            _ if !queue.is_empty() => {
                let take = (1 + rng.below(config.largest_batch)).min(queue.len());
                let batch: Vec<Queued> = queue.drain(..take).collect();
                let to = rng.below(config.instances);
                if rng.below(100) < config.fault_percent {
                    let kind = rng.below(FAULTS.len());
                    plans[to].at_request(rng.below(4) as u64, FAULTS[kind]);
                    tally.faults[kind] += 1;
                }
                tally.deliveries += 1;
                let owed_before = batch.iter().filter(|(_, _, retried)| *retried).count();
                owed -= owed_before;
                tally.redelivered += owed_before;
                let got = if rng.below(100) < config.kill_percent {
                    // Killed in the middle of the batch: no answer at all, SQS brings every
                    // message back; the instance that replaces it starts cold.
                    let cut = Duration::from_micros(rng.below(20_000) as u64);
                    tokio::time::timeout(cut, process(&instances[to], &batch))
                        .await
                        .ok()
                } else {
                    Some(process(&instances[to], &batch).await)
                };
                let Some(got) = got else {
                    tally.kills += 1;
                    instances[to] = servicing.faulty_handler(servicing.config(), &plans[to]);
                    owed += batch.len();
                    for (id, body, _) in batch.into_iter().rev() {
                        queue.push_front((id, body, true));
                    }
                    continue;
                };
                settle(
                    &mut ledger,
                    &mut tally,
                    &mut queue,
                    &mut owed,
                    &mut delivered,
                    batch,
                    got,
                    &context,
                );
            }
            _ => {}
        }
        if owed == 0 && (queue.is_empty() || step.is_multiple_of(4)) {
            let found = servicing.account_differences(&ledger, &accounts).await;
            tally
                .differences
                .extend(found.into_iter().map(|d| format!("{context}: {d}")));
            if !tally.differences.is_empty() {
                break;
            }
        }
    }
    servicing.drop_table().await;
    tally
}

/// A batch's answers against the ledger: final verdicts ingested in order, retries queued
/// first again.
#[allow(clippy::too_many_arguments)]
fn settle(
    ledger: &mut Ledger,
    tally: &mut Tally,
    queue: &mut VecDeque<Queued>,
    owed: &mut usize,
    delivered: &mut Vec<Value>,
    batch: Vec<Queued>,
    got: Vec<MessageResult>,
    context: &str,
) {
    let mut again = Vec::new();
    for ((id, body, retried), got) in batch.into_iter().zip(got) {
        if matches!(got, MessageResult::Retry { .. }) {
            *owed += 1;
            again.push((id, body, true));
            continue;
        }
        let want = expected(&ledger.ingest(body.to_string().as_bytes()));
        // A retried delivery whose commit did happen (its response lost) finds its own
        // claim: a duplicate of itself.
        let itself = retried && got == MessageResult::Duplicate;
        if got != want && !itself {
            tally.differences.push(format!(
                "{context}: {id}: got {got:?}, ledger {want:?}: {body}"
            ));
        }
        delivered.push(body);
    }
    // Redelivered first, in their order, as SQS brings back a group.
    for queued in again.into_iter().rev() {
        queue.push_front(queued);
    }
}
