//! The scheduled reconciler's daily run: take off the parked facts that will not apply,
//! reconcile the last window of account-state, then its money (accepted API payments applied,
//! collections actions settled), as metrics that alarm when non-zero.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
pub use servicing_settings::FromSettings;
use servicing_settings::{ConfigError, Settings};
use servicing_store::{APPLIER, ServicingStore, StoreConfig};

use servicing_ops::parked::ParkedView;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// The reconciled window, ending now (`WINDOW_HOURS`, default 25: daily runs overlap).
    pub window_hours: u64,
    /// How long a fact may stay parked (`PARK_RETENTION_DAYS`, 1..=365, default 7).
    pub park_retention: Duration,
    /// account-state's claim retention (`CLAIM_RETENTION_DAYS`, default 35): what the
    /// quarantine items it writes record for a later redrive.
    pub claim_retention: Duration,
    /// The FIFO servicing queue (`SERVICING_QUEUE_URL`, required): a parked fact left ready is
    /// sent back to its account there, and the consumer releases it.
    pub servicing_queue_url: String,
    /// Once the ledger reconciles, its periods are closed up to this many days ago
    /// (`LEDGER_CLOSE_LAG_DAYS`, 0..=31, default 1: yesterday); 0: only operators close.
    pub ledger_close_lag_days: u64,
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            window_hours: settings.number("WINDOW_HOURS", 25, 1..=24 * 400)?,
            park_retention: settings.days("PARK_RETENTION_DAYS", 7, 1..=365)?,
            claim_retention: settings.days("CLAIM_RETENTION_DAYS", 35, 1..=3650)?,
            servicing_queue_url: settings.required("SERVICING_QUEUE_URL")?,
            ledger_close_lag_days: settings.number("LEDGER_CLOSE_LAG_DAYS", 1, 0..=31)?,
        })
    }
}

impl Config {
    /// The store the run writes through: account-state's items (its parked facts and their
    /// quarantine).
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            claim_retention: self.claim_retention,
            ..StoreConfig::new(&self.table, APPLIER)
        }
    }
}

/// A run's figures, as EMF metrics (`ReconciliationProblems`, `ParkedExpired`,
/// `ReadyNotReleased`, `AcceptedNotApplied`, `ActionsPendingTooLong` and `SuspectedDuplicates`
/// alarm).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub reconciliation_problems: u64,
    pub reconciled_applied: u64,
    pub parked_expired: u64,
    pub still_parked: u64,
    pub ready_not_released: u64,
    /// API payments answered 202 and not applied after the grace (`money::Grace`).
    pub accepted_not_applied: u64,
    /// API payments this run saw applied and took out of the open index.
    pub accepted_confirmed: u64,
    /// Collections actions unsettled after their grace.
    pub actions_pending_too_long: u64,
    /// Applied payments sharing a content key under different identities, the second applied
    /// in the window (for a person).
    pub suspected_duplicates: u64,
    /// What the ledger's leg of the reconciliation found (`servicing_ops::ledger`).
    pub ledger_problems: u64,
}

impl RunCounts {
    pub fn metrics(&self) -> [(&'static str, u64); 10] {
        [
            ("ReconciliationProblems", self.reconciliation_problems),
            ("ReconciledApplied", self.reconciled_applied),
            ("ParkedExpired", self.parked_expired),
            ("StillParked", self.still_parked),
            ("ReadyNotReleased", self.ready_not_released),
            ("AcceptedNotApplied", self.accepted_not_applied),
            ("AcceptedConfirmed", self.accepted_confirmed),
            ("ActionsPendingTooLong", self.actions_pending_too_long),
            ("SuspectedDuplicates", self.suspected_duplicates),
            ("LedgerProblems", self.ledger_problems),
        ]
    }
}

/// Until when a run with `remaining` of its invocation's time may start another day of the
/// ledger's catch-up: a fifth of it (at least 2 s) is kept for what follows — the mark, the
/// close, confirming applied payments, the metrics — so a run ends within any timeout a user
/// configures, having moved the mark through the days it read.
pub fn work_deadline(remaining: Duration) -> Instant {
    let reserve = (remaining / 5).max(Duration::from_secs(2));
    Instant::now() + remaining.saturating_sub(reserve)
}

/// One run: expiry of parked facts (account by account: one account's problem is reported
/// and counted, the others go on), ready facts sent back to their accounts, then the window's
/// reconciliation; emits the [`RunCounts`] and answers what it found.
pub async fn run(
    config: &Config,
    store: &ServicingStore,
    sqs: &aws_sdk_sqs::Client,
) -> anyhow::Result<Value> {
    run_at(config, store, sqs, servicing_ops::epoch_seconds()).await
}

/// [`run`] as of `now` (epoch seconds), with all the time it needs.
pub async fn run_at(
    config: &Config,
    store: &ServicingStore,
    sqs: &aws_sdk_sqs::Client,
    now: i64,
) -> anyhow::Result<Value> {
    run_until(config, store, sqs, now, None).await
}

/// The ledger of what `money` touched, against servicing: accounts touched within the grace
/// are in flight. A failed read is the ledger's problem: the money checks still report.
async fn ledger_of(
    store: &ServicingStore,
    table: &str,
    money: &servicing_ops::money::MoneyReconciliation,
    now: i64,
) -> servicing_ops::ledger::LedgerReconciliation {
    let grace = servicing_ops::money::Grace::default().accepted_secs;
    match servicing_ops::ledger::reconcile_ledger(store.client(), table, money, now, grace).await {
        Ok(ledger) => {
            remember_checks(store, table, &ledger, now).await;
            ledger
        }
        Err(e) => servicing_ops::ledger::LedgerReconciliation {
            problems: vec![format!("the ledger could not be reconciled: {e:#}")],
            ..Default::default()
        },
    }
}

/// Remembers what `ledger` proved of each account, so its next check reads only what follows.
/// A check not written costs that account one whole read next time: a warning, not a problem.
async fn remember_checks(
    store: &ServicingStore,
    table: &str,
    ledger: &servicing_ops::ledger::LedgerReconciliation,
    now: i64,
) {
    if let Err(e) = servicing_ops::ledger::remember_checks(store.client(), table, ledger, now).await
    {
        tracing::warn!(error = %e, "the ledger's checks were not remembered");
    }
}

/// How a catch-up reads the days behind the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// The daily run's: every day it has time for, to report each day's problems; the mark
    /// moves through the days that settle unless `blocked` (beyond the reach).
    Report { blocked: bool },
    /// The hourly catch-up's: it stops at the first day that does not settle, which the mark
    /// cannot pass (the daily run reads it again and reports it).
    Advance,
}

/// What the days from the mark to the window held.
#[derive(Debug, Default)]
struct CatchUp {
    /// The end of the last day read (the window's start once caught up).
    read_through: i64,
    /// The mark after it: moved after each day that settles, so a run stopped later (killed,
    /// a failed read) keeps what it settled.
    mark: Option<i64>,
    /// Every day read settled.
    settled: bool,
    /// A read or a write failed (no difference found): the catch-up goes on next time.
    failed: bool,
    problems: Vec<String>,
    ledger_problems: Vec<String>,
    ledger_deferred: Vec<String>,
}

/// The days from `from` to `until` (the window's start), oldest first, one at a time while
/// there is time before `deadline` — at least one, so a reach longer than one run's time still
/// moves on — moving the mark through every day that settles, in order.
async fn catch_up(
    store: &ServicingStore,
    table: &str,
    (from, until): (i64, i64),
    mark: Option<i64>,
    now: i64,
    deadline: Option<Instant>,
    reading: Reading,
) -> CatchUp {
    let grace = servicing_ops::money::Grace::default();
    let mut out = CatchUp {
        mark,
        settled: true,
        ..Default::default()
    };
    let (mut start, mut took) = (from, Duration::ZERO);
    while start < until {
        if start > from && deadline.is_some_and(|d| Instant::now() + took >= d) {
            break;
        }
        if !out.settled && reading == Reading::Advance {
            break;
        }
        let began = Instant::now();
        let end = (start + 86_400).min(until);
        let day = match servicing_ops::money::reconcile_dated_money(
            store.client(),
            table,
            (start, end),
            now,
            grace,
        )
        .await
        {
            Ok(day) => day,
            Err(e) => {
                out.problems.push(format!(
                    "cannot read the money from {} to {}: {e:#}",
                    servicing_ops::iso(start),
                    servicing_ops::iso(end)
                ));
                (out.settled, out.failed) = (false, true);
                break;
            }
        };
        let grace_secs = grace.accepted_secs;
        let day_ledger = match servicing_ops::ledger::reconcile_ledger(
            store.client(),
            table,
            &day,
            now,
            grace_secs,
        )
        .await
        {
            Ok(ledger) => {
                remember_checks(store, table, &ledger, now).await;
                ledger
            }
            Err(e) => {
                out.problems.push(format!(
                    "the ledger from {} to {} could not be reconciled: {e:#}",
                    servicing_ops::iso(start),
                    servicing_ops::iso(end)
                ));
                (out.settled, out.failed) = (false, true);
                break;
            }
        };
        out.problems.extend(day.unreadable);
        out.ledger_problems
            .extend(day_ledger.problems.iter().cloned());
        out.ledger_deferred
            .extend(day_ledger.deferred.iter().cloned());
        out.settled &= day_ledger.settled();
        if out.settled && reading != (Reading::Report { blocked: true }) {
            match store.advance_ledger_settled(end, None).await {
                Ok(_) => out.mark = Some(end),
                Err(e) => {
                    out.problems.push(format!(
                        "cannot record the ledger settled through {}: {e}",
                        servicing_ops::iso(end)
                    ));
                    (out.settled, out.failed) = (false, true);
                }
            }
        }
        (start, took) = (end, began.elapsed());
    }
    out.read_through = start;
    out
}

/// The hourly catch-up (the schedule's `{"catchUp": true}`). When a daily run ran out of time
/// catching the ledger up, every day it read settled (`catchingUp` on the mark), this reads on
/// from the mark, day by day while it has time, up to the window the next daily run reads
/// itself, and moves the mark through each day that settles. The first day that does not, a
/// mark beyond the reach, or reaching the window end the catch-up: the first two are for a
/// person, and the daily run reports them. Otherwise it is one read of the mark. It emits no
/// metric (what it finds is the daily run's to report); a failed read or write fails the
/// invocation (the function's errors alarm) and leaves the catch-up on, for the next hour.
pub async fn catch_up_until(
    config: &Config,
    store: &ServicingStore,
    now: i64,
    deadline: Option<Instant>,
) -> anyhow::Result<Value> {
    let mark = store.ledger_mark().await?;
    let window_start = now - config.window_hours as i64 * 3600;
    let reach = now - servicing_ops::ledger::REACH_DAYS * 86_400;
    let from = match mark.settled_through {
        Some(through) if mark.catching_up && (reach..window_start).contains(&through) => through,
        _ => {
            if mark.catching_up {
                store.set_ledger_catching_up(false).await?;
            }
            return Ok(json!({
                "catchingUp": false,
                "ledgerSettledThrough": mark.settled_through,
            }));
        }
    };
    let read = catch_up(
        store,
        &config.table,
        (from, window_start),
        Some(from),
        now,
        deadline,
        Reading::Advance,
    )
    .await;
    // A failure is not a difference: the flag stays, the next hour reads the day again, and
    // the invocation fails (the reconciler's errors alarm).
    if read.failed {
        anyhow::bail!(
            "the ledger's catch-up stopped at {}: {}",
            servicing_ops::iso(read.read_through),
            read.problems.join("; ")
        );
    }
    let catching_up = read.settled && read.read_through < window_start;
    if !catching_up {
        store.set_ledger_catching_up(false).await?;
    }
    tracing::info!(
        read_from = from,
        read_through = read.read_through,
        settled_through = read.mark,
        catching_up,
        "the ledger's catch-up"
    );
    for problem in read.problems.iter().chain(&read.ledger_problems) {
        tracing::warn!(
            problem,
            "the ledger's catch-up stopped; the daily run reports it"
        );
    }
    Ok(json!({
        "catchingUp": catching_up,
        "ledgerReadFrom": from,
        "ledgerReadThrough": read.read_through,
        "ledgerSettledThrough": read.mark,
        "ledgerProblems": read.ledger_problems,
        "ledgerDeferred": read.ledger_deferred,
        "problems": read.problems,
    }))
}

/// [`run_at`], catching the ledger up only while there is time before `deadline` (the
/// invocation's, less what the rest of the run needs: [`work_deadline`]).
pub async fn run_until(
    config: &Config,
    store: &ServicingStore,
    sqs: &aws_sdk_sqs::Client,
    now: i64,
    deadline: Option<Instant>,
) -> anyhow::Result<Value> {
    let expiry = servicing_ops::parked::expire(store, now, config.park_retention).await?;
    if expiry.missing + expiry.mismatched > 0 {
        tracing::warn!(
            alert = "parked_expired",
            missing = expiry.missing,
            mismatched = expiry.mismatched,
            "parked facts quarantined"
        );
    }
    let mut problems: Vec<String> = expiry.problems.clone();
    // A ready fact is released by the account's next delivery: its own body again is one (a
    // duplicate of the parked fact, whose state read releases it). Addressed by identity, so
    // two runs in the deduplication window send it once.
    for ready in &expiry.ready {
        tracing::error!(
            alert = "ready_not_released",
            account = %ready.account,
            source = %ready.fact.source,
            "a parked fact stayed ready; sent back to its account"
        );
        let body = ready.fact.body.as_bytes().to_vec();
        if let Err(e) =
            servicing_ops::replay::send(sqs, &config.servicing_queue_url, &[body], "reconciler")
                .await
        {
            problems.push(format!(
                "{}: cannot send the ready fact {} back: {e:#}",
                ready.account, ready.fact.source
            ));
        }
    }
    let window_secs = config.window_hours as i64 * 3600;
    let window = (now - window_secs, now + 1);
    // The money and the ledger are read from where a run last saw the ledger settled, when
    // that is before the window: a problem found once, a run that failed or never ran, is read
    // again until a run that covers it settles — at most `ledger::REACH_DAYS` back, so the run
    // stays bounded by a week's volume, whatever the table's history.
    let reach = now - servicing_ops::ledger::REACH_DAYS * 86_400;
    let mut ledger_blocked = false;
    let settled_through = store.ledger_mark().await;
    let from = match settled_through.as_ref().map(|m| m.settled_through) {
        // The stack's first run: the mark starts at its window (nothing before is known).
        Ok(None) => {
            if let Err(e) = store.advance_ledger_settled(window.0, None).await {
                ledger_blocked = true;
                problems.push(format!("cannot start the ledger's mark: {e}"));
            }
            window.0
        }
        Ok(Some(through)) if through >= reach => through.min(window.0),
        Ok(Some(through)) => {
            ledger_blocked = true;
            let vouch_from = chrono::DateTime::from_timestamp(reach, 0)
                .map(|t| t.date_naive().to_string())
                .unwrap_or_default();
            problems.push(format!(
                "the ledger has not settled since {}, beyond the {} days a run reads again: reconcile those days by hand (ledgerctl reconcile --money --hours N), then vouch for them (ledgerctl ledger close --through <day> --vouch, a day from {vouch_from} on); no period is closed until then",
                servicing_ops::iso(through),
                servicing_ops::ledger::REACH_DAYS
            ));
            reach.min(window.0)
        }
        Err(e) => {
            ledger_blocked = true;
            problems.push(format!("cannot read where the ledger last settled: {e}"));
            window.0
        }
    };
    let report =
        servicing_ops::reconcile::reconcile(store.client(), &config.table, APPLIER, window, None)
            .await?;
    for line in report.lines() {
        tracing::info!(line, "reconciliation");
    }
    problems.extend(report.problems.iter().cloned());
    let grace = servicing_ops::money::Grace::default();
    // The money over the window: accepted API payments applied, actions settled (ready facts
    // were handled above), and the ledger of what it touched.
    let money = servicing_ops::money::reconcile_money(
        store.client(),
        &config.table,
        &[],
        window,
        now,
        grace,
    )
    .await?;
    problems.extend(money.unreadable.iter().cloned());
    let ledger = ledger_of(store, &config.table, &money, now).await;
    let mark = match &settled_through {
        Ok(m) => Some(m.settled_through.unwrap_or(window.0)),
        Err(_) => None,
    };
    // Behind: the catch-up is on before the days are read, so a run its timeout kills leaves
    // it to the hourly one; it is taken off below if this run catches up or meets a problem.
    let mut flagged = settled_through.as_ref().is_ok_and(|m| m.catching_up);
    if settled_through.is_ok() && from < window.0 && !ledger_blocked && !flagged {
        match store.set_ledger_catching_up(true).await {
            Ok(_) => flagged = true,
            Err(e) => problems.push(format!(
                "cannot record that the ledger's catch-up goes on: {e}"
            )),
        }
    }
    let catch_up = catch_up(
        store,
        &config.table,
        (from, window.0),
        mark,
        now,
        deadline,
        Reading::Report {
            blocked: ledger_blocked,
        },
    )
    .await;
    problems.extend(catch_up.problems.iter().cloned());
    let mut ledger_problems = ledger.problems.clone();
    ledger_problems.extend(catch_up.ledger_problems.iter().cloned());
    let mut ledger_deferred = ledger.deferred.clone();
    ledger_deferred.extend(catch_up.ledger_deferred.iter().cloned());
    let (all_settled, start, mut mark) = (catch_up.settled, catch_up.read_through, catch_up.mark);
    let caught_up = start >= window.0;
    // Out of time with every day read settled (or only a read failing): the hourly catch-up
    // goes on. A day that does not settle, a blocked mark, are for a person: this run reports
    // them, and the catch-up is off.
    let catching_up = !caught_up && (all_settled || catch_up.failed) && !ledger_blocked;
    if !caught_up && !ledger_blocked {
        let next = if catching_up {
            "the hourly catch-up goes on from there"
        } else {
            "a day that does not settle holds it there"
        };
        problems.push(format!(
            "the ledger is being caught up: read from {} through {} in this run's time, settled through {}; {next}",
            servicing_ops::iso(from),
            servicing_ops::iso(start),
            mark.map_or_else(|| "nothing yet".to_owned(), servicing_ops::iso)
        ));
    }
    if flagged
        && !catching_up
        && let Err(e) = store.set_ledger_catching_up(false).await
    {
        problems.push(format!(
            "cannot record that the ledger's catch-up is over: {e}"
        ));
    }
    // An account's difference is met in every day it was touched, an unreadable open item in
    // every day's read: named once.
    for list in [&mut ledger_problems, &mut ledger_deferred, &mut problems] {
        let mut seen = std::collections::HashSet::new();
        list.retain(|p| seen.insert(p.clone()));
    }
    for problem in &ledger_problems {
        tracing::error!(
            alert = "ledger_mismatch",
            problem,
            "the ledger does not reconcile"
        );
    }
    // Settled: it holds from the mark to now, with nothing deferred while in flight; only then
    // does the mark move to now (short of the grace: what was in flight is read again) and a
    // period close.
    let settled = caught_up && all_settled && ledger.settled() && !ledger_blocked;
    let now_settled = now - grace.accepted_secs;
    if settled {
        match store.advance_ledger_settled(now_settled, None).await {
            Ok(_) => mark = Some(now_settled),
            Err(e) => problems.push(format!(
                "cannot record the ledger settled through {}: {e}",
                servicing_ops::iso(now_settled)
            )),
        }
    }
    // The daily close: only books that reconcile are closed; a later event dated in a closed
    // day is posted to the first open one (docs/ledger.md).
    let through = chrono::DateTime::from_timestamp(now, 0)
        .map(|t| t.date_naive())
        .and_then(|d| d.checked_sub_days(chrono::Days::new(config.ledger_close_lag_days)));
    let ledger_closed = match through {
        Some(through) if config.ledger_close_lag_days > 0 && settled => {
            match store.close_ledger_period(through).await {
                Ok(true) => Some(through.to_string()),
                Ok(false) => None,
                Err(e) => {
                    problems.push(format!("cannot close the ledger through {through}: {e}"));
                    None
                }
            }
        }
        _ => None,
    };
    // Applied API payments leave the open index: tomorrow's run reads only what is still open.
    let (confirmed, unconfirmed) = servicing_ops::money::confirm_applied(store, &money).await;
    problems.extend(unconfirmed);
    let not_applied: Vec<&servicing_ops::money::NotApplied> =
        money.not_applied.iter().filter(|n| !n.in_flight).collect();
    for n in &not_applied {
        tracing::error!(
            alert = "accepted_not_applied",
            operation = %n.operation_id,
            account = %n.account_id,
            state = %n.state,
            "an API payment answered 202 is not applied"
        );
    }
    for a in &money.stuck_actions {
        tracing::error!(
            alert = "actions_pending_too_long",
            action = %a.action_id,
            account = %a.account_id,
            status = %a.status,
            attempts = a.attempts,
            "a collections action is not settled"
        );
    }
    let counts = RunCounts {
        reconciliation_problems: problems.len() as u64,
        reconciled_applied: report.applied,
        parked_expired: expiry.missing + expiry.mismatched,
        still_parked: expiry.still_parked,
        ready_not_released: expiry.ready.len() as u64,
        accepted_not_applied: not_applied.len() as u64,
        accepted_confirmed: confirmed,
        actions_pending_too_long: money.stuck_actions.len() as u64,
        // New in the window: a pair stays in the table for good, the metric says when it came.
        suspected_duplicates: money.suspected_since(now - window_secs) as u64,
        ledger_problems: ledger_problems.len() as u64,
    };
    servicing_telemetry::emit("reconciler", &counts.metrics());
    Ok(json!({
        // A suspected duplicate new in the window needs a person: the run does not hold.
        "holds": report.holds() && problems.is_empty() && not_applied.is_empty() && money.stuck_actions.is_empty() && counts.suspected_duplicates == 0 && ledger_problems.is_empty(),
        "ledgerProblems": ledger_problems,
        // Differences of accounts in flight: not problems yet, but nothing is closed over them.
        "ledgerDeferred": ledger_deferred,
        // Where the money and the ledger were read from (before the window: where a run last
        // saw the ledger settled), and whether this run moved that mark.
        "ledgerReadFrom": from,
        // Where this run's read of the ledger ended: now, or — catching up, out of time — the
        // end of the last day it read.
        "ledgerReadThrough": if caught_up { window.1 } else { start },
        "ledgerSettled": settled,
        // Out of time catching up, every day read settled: the hourly catch-up goes on.
        "ledgerCatchingUp": catching_up,
        // Where the mark is after this run: the next reads from there.
        "ledgerSettledThrough": mark,
        "ledgerClosedThrough": ledger_closed,
        "acceptedNotApplied": not_applied.iter().map(|n| format!("{} ({}) on {}: {}", n.operation_id, n.fact, n.account_id, n.state)).collect::<Vec<_>>(),
        "actionsPendingTooLong": money.stuck_actions.iter().map(|a| format!("{} on {}: {} after {} attempts", a.action_id, a.account_id, a.status, a.attempts)).collect::<Vec<_>>(),
        "acceptedConfirmed": confirmed,
        "suspectedDuplicates": counts.suspected_duplicates,
        "problems": problems,
        "parkedExpired": {"missing": expiry.missing, "mismatched": expiry.mismatched},
        "stillParked": expiry.still_parked,
        "readyNotReleased": expiry.ready.iter().map(ParkedView::line).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_users_configure_any_timeout_should_keep_time_for_the_end_of_the_run() {
        // AWS's default, a short one, the template's, Lambda's maximum; and none left.
        for (timeout, catch_up_for) in [(3, 1), (30, 24), (300, 240), (900, 720), (1, 0)] {
            let before = Instant::now();
            let deadline = work_deadline(Duration::from_secs(timeout));
            let budget = deadline.saturating_duration_since(before);
            let expected = Duration::from_secs(catch_up_for);
            let off = budget.abs_diff(expected);
            assert!(off < Duration::from_millis(100), "{timeout} s: {budget:?}");
        }
    }

    #[test]
    fn when_the_window_or_retention_is_out_of_range_should_refuse_to_start() {
        for (name, value) in [("WINDOW_HOURS", "0"), ("PARK_RETENTION_DAYS", "366")] {
            let err = Config::from_lookup(|k| match k {
                "TABLE_NAME" => Some("t".into()),
                "SERVICING_QUEUE_URL" => Some("q".into()),
                k if k == name => Some(value.into()),
                _ => None,
            })
            .expect_err(name);
            assert!(
                err.to_string().starts_with(&format!("{name} must be")),
                "{err}"
            );
        }
        let config = Config::from_lookup(|k| match k {
            "TABLE_NAME" | "SERVICING_QUEUE_URL" => Some("t".into()),
            _ => None,
        })
        .expect("ok");
        assert_eq!(
            (config.window_hours, config.park_retention),
            (25, Duration::from_secs(7 * 86_400))
        );
    }
}
