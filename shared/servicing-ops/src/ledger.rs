//! The ledger's leg of the money reconciliation (`ledgerctl reconcile --money`, the daily
//! reconciler): provider settlements → servicing allocations → ledger postings.
//!
//! - every sub-ledger's stored balances are the sum of its entries (a balance is never an
//!   independent number), and every entry balances;
//! - every opened account's sub-ledger equals its servicing balances (`SubLedger::differences`):
//!   principal, interest and fees receivable, customer credit, suspense at zero;
//! - the trial balance (debits less credits over the sub-ledgers read) is zero per currency;
//! - every reversal's entry is the exact opposite of the payment's entry it names;
//! - the cash the ledger took in and gave back per source system, currency and business date
//!   equals servicing's applied payments and reversals for the same key (which the money
//!   reconciliation compares with the provider's settlement file), for the dates the money
//!   reconciliation totalled.
//!
//! Postings follow servicing by seconds (relay, bus, queue): an account touched within the
//! grace is listed as in flight, not as a problem, and so is a key one of whose accounts is
//! (the reads are no snapshot: an account written during them may be read half before, half
//! after).
//!
//! What it reads grows with the accounts the window touched and what changed of them, not with
//! the table's history nor an account's own (issue #33): the accounts servicing or the ledger
//! touched in the window, or whose cash falls on the dates the money reconciliation totalled
//! (`read_accounts`), each by its entries since its last check (`LEDGER_CHECK#`, written by
//! [`remember_checks`]) — whole only when those are not all listed. Each day checks what changed
//! that day; an account that did not change was checked when it did, and the daily reconciler
//! reads again from where the ledger last did not reconcile, so a problem found once is not left
//! behind by the moving window.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, TryStreamExt};
use servicing_domain::AccountId;
use servicing_domain::journal::{JournalEntry, LedgerAccount, SubLedger};
use servicing_domain::outbox::detail_types;
use servicing_store::items;
use servicing_store::journal::{
    EntryRecord, LedgerCheckRecord, SubLedgerRecord, entry_key, ledger_check_key, sub_ledger_key,
};
use servicing_store::schema;

use crate::Item;
use crate::money::{Key, MoneyReconciliation, Totals, minor};

/// What the ledger took in and gave back for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Posted {
    pub payments: u64,
    pub received_minor: i64,
    pub reversals: u64,
    pub returned_minor: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerReconciliation {
    /// The accounts read (`read_accounts`): every figure below is theirs.
    pub accounts: u64,
    /// Of them, those read whole (never checked, changed by hand, not all listed); the others
    /// were read since their last check.
    pub read_whole: u64,
    pub sub_ledgers: u64,
    pub entries: u64,
    /// Debits less credits over the sub-ledgers read, per currency: zero.
    pub trial_balance: BTreeMap<String, i128>,
    /// Per key: servicing's applied payments and reversals, and what the ledger posted.
    pub by_key: BTreeMap<Key, (Totals, Posted)>,
    /// Accounts touched within the grace (their differences are not problems yet).
    pub in_flight: Vec<String>,
    /// Differences not reported as problems because an account of theirs is in flight: they
    /// may settle within the grace, or may not — nothing is closed over them.
    pub deferred: Vec<String>,
    pub problems: Vec<String>,
    /// The balances whose sum was proved and is newer than the account's last check: what
    /// [`remember_checks`] writes, so the next check reads only what follows.
    pub proven: Vec<SubLedgerRecord>,
    /// Accounts whose balances are not the sum of their entries (a problem) though a check
    /// stands: [`remember_checks`] takes the check back to version 0, which proves nothing,
    /// so each next check reads the account whole until it holds again.
    pub disproven: Vec<String>,
}

impl LedgerReconciliation {
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }

    /// Holds with nothing deferred: what a period may be closed over.
    pub fn settled(&self) -> bool {
        self.holds() && self.deferred.is_empty()
    }

    /// A difference: a problem, or — while one of its accounts is in flight — deferred.
    fn differs(&mut self, in_flight: bool, what: String) {
        if in_flight {
            self.deferred.push(what);
        } else {
            self.problems.push(what);
        }
    }

    pub fn lines(&self) -> Vec<String> {
        let balance: Vec<String> = self
            .trial_balance
            .iter()
            .map(|(currency, total)| format!("{total} {currency}"))
            .collect();
        let mut out = vec![format!(
            "ledger: {} accounts read ({} whole, {} since their last check), {} sub-ledgers, {} entries, trial balance {}",
            self.accounts,
            self.read_whole,
            self.accounts - self.read_whole,
            self.sub_ledgers,
            self.entries,
            if balance.is_empty() {
                "0 (nothing posted)".to_owned()
            } else {
                balance.join(", ")
            }
        )];
        for ((source, currency, date), (servicing, posted)) in &self.by_key {
            let net = posted.received_minor - posted.returned_minor;
            out.push(format!(
                "ledger {source} {currency} {date}: posted {} - {} = {}, servicing {} -> {}",
                minor(posted.received_minor),
                minor(posted.returned_minor),
                minor(net),
                minor(servicing.net_minor()),
                if (servicing.applied_minor, servicing.reversed_minor)
                    == (posted.received_minor, posted.returned_minor)
                {
                    "agrees"
                } else {
                    "DIFFERS"
                }
            ));
        }
        for account in &self.in_flight {
            out.push(format!("  in flight (touched within the grace): {account}"));
        }
        for difference in &self.deferred {
            out.push(format!("  deferred while in flight: {difference}"));
        }
        out.extend(self.problems.iter().map(|p| format!("LEDGER PROBLEM: {p}")));
        out.push(if !self.holds() {
            "ledger does NOT reconcile".into()
        } else if self.deferred.is_empty() {
            "ledger reconciles".into()
        } else {
            format!(
                "ledger holds, {} differences deferred while in flight: not settled",
                self.deferred.len()
            )
        });
        out
    }
}

/// What the ledger's leg read of its accounts.
#[derive(Debug, Default)]
struct Read {
    loans: Vec<Item>,
    sub_ledgers: Vec<Item>,
    entries: Vec<Item>,
    /// The accounts read since their last check, each with that check: the entries above its
    /// version are summed onto it. Every other account was read whole.
    since: BTreeMap<String, LedgerCheckRecord>,
    /// The version of every account's last check read (those read whole included).
    checked: BTreeMap<String, u64>,
}

/// The accounts the ledger's leg holds to servicing: those whose facts were claimed in the
/// money reconciliation's window, those behind the totals of the dates it totalled, and —
/// from the record log — those whose ledger was written since the window began or holds a
/// cash entry of those dates. An account none of these name was checked the day it last
/// changed.
///
/// Each account's loan, balances and last check are read by key, and the entries the log
/// lists for it. Where those entries are every one above the checked version up to the
/// balances' (`entries_since`), nothing else of the account is read: what a check reads grows
/// with what changed since the last, not with the account's life. Otherwise — never checked,
/// an entry changed by hand, the log behind — the account's ledger is read whole (one `Query`
/// of its partition).
async fn read_accounts(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    money: &MoneyReconciliation,
    now: i64,
    report: &mut LedgerReconciliation,
) -> anyhow::Result<Read> {
    let mut accounts = money.window_accounts.clone();
    // Its keys are all of the dates it totalled (it totals no other).
    for named in money.key_accounts.values() {
        accounts.extend(named.iter().cloned());
    }
    let mut listed =
        crate::record_log::ledger_listed(client, table, money.window, &money.dates).await?;
    accounts.extend(listed.accounts.iter().cloned());
    // The entries posted since the window's end, up to the read (a daily run's minutes), are
    // in the balances read: listed too, for the accounts above only. A day read behind (a
    // catch-up) looks at most `LISTED_AFTER_SECS` further: an account posted to later than
    // that is read whole.
    let after = (
        money.window.1,
        (now + 1).clamp(money.window.1, money.window.1 + LISTED_AFTER_SECS),
    );
    let later = crate::record_log::ledger_listed(client, table, after, &BTreeSet::new()).await?;
    for (account, entries) in later.entries {
        let listed = listed.entries.entry(account).or_default();
        for (entry_id, hour) in entries {
            let at = listed.entry(entry_id).or_insert(hour);
            *at = (*at).max(hour);
        }
    }
    listed.changed.extend(later.changed);
    let mut ids = Vec::new();
    for account in accounts {
        match AccountId::parse(&account) {
            Ok(id) => ids.push(id),
            Err(e) => report
                .problems
                .push(format!("account {account:?} cannot be read: {e}")),
        }
    }
    report.accounts = ids.len() as u64;

    let mut read = Read::default();
    let mut keys = Vec::new();
    for id in &ids {
        keys.push(items::key_item(items::loan_key(id)));
        keys.push(items::key_item(sub_ledger_key(id)));
        keys.push(items::key_item(ledger_check_key(id.as_str())));
    }
    let mut balances: BTreeMap<String, SubLedgerRecord> = BTreeMap::new();
    let mut checks: BTreeMap<String, LedgerCheckRecord> = BTreeMap::new();
    for item in crate::batch_get(client, table, keys).await? {
        let pk = crate::text(&item, items::PK).unwrap_or_default();
        if pk.starts_with("LOAN#") {
            read.loans.push(item);
        } else if pk.starts_with("LEDGER_CHECK#") {
            // A check that does not decode proves nothing: its account is read whole.
            if let Ok(check) = schema::from_item::<LedgerCheckRecord>(item) {
                checks.insert(check.account_id.clone(), check);
            }
        } else {
            if let Ok(record) = schema::from_item::<SubLedgerRecord>(item.clone()) {
                balances.insert(record.account_id.clone(), record);
            }
            read.sub_ledgers.push(item);
        }
    }

    let entry_keys = ids
        .iter()
        .flat_map(|id| {
            let listed = listed.entries.get(id.as_str()).into_iter().flatten();
            listed.map(|(entry_id, _)| items::key_item(entry_key(id, entry_id)))
        })
        .collect();
    let mut by_account: BTreeMap<String, Vec<Item>> = BTreeMap::new();
    for item in crate::batch_get(client, table, entry_keys).await? {
        let pk = crate::text(&item, items::PK).unwrap_or_default();
        let account = pk.strip_prefix("LEDGER#").unwrap_or(pk).to_owned();
        by_account.entry(account).or_default().push(item);
    }
    read.checked = checks
        .iter()
        .map(|(account, check)| (account.clone(), check.version))
        .collect();
    let mut whole = Vec::new();
    for id in &ids {
        let account = id.as_str();
        let listed_entries = by_account.remove(account).unwrap_or_default();
        let hours = listed.entries.get(account);
        let written_at = |item: &Item| {
            let entry_id = crate::text(item, "entryId").unwrap_or_default();
            hours
                .and_then(|h| h.get(entry_id))
                .copied()
                .unwrap_or(i64::MIN)
        };
        let check = checks.remove(account);
        match check.filter(|check| {
            !listed.changed.contains(account)
                && entries_since(check, balances.get(account), &listed_entries, written_at)
        }) {
            Some(check) => {
                read.since.insert(account.to_owned(), check);
                read.entries.extend(listed_entries);
            }
            None => whole.push(id),
        }
    }
    report.read_whole = whole.len() as u64;
    let partitions: Vec<Vec<Item>> = futures_util::stream::iter(whole.into_iter().map(|id| {
        let (pk, _) = sub_ledger_key(id);
        async move { crate::query_partition(client, table, &pk).await }
    }))
    .buffer_unordered(ACCOUNTS_AT_ONCE)
    .try_collect()
    .await?;
    read.entries.extend(
        partitions
            .into_iter()
            .flatten()
            .filter(|item| items::string(item, items::ITEM_TYPE) == Some(EntryRecord::ITEM_TYPE)),
    );
    // A reversal read since a check is held to its payment's entry, read by key if it was
    // posted before.
    let read_ids: BTreeSet<(String, String)> = read.entries.iter().filter_map(entry_of).collect();
    // Each once: a `BatchGetItem` refuses a key twice (two reversals of one payment).
    let payments: BTreeSet<(String, String)> = read
        .entries
        .iter()
        .filter_map(|item| schema::from_item::<EntryRecord>(item.clone()).ok())
        .filter(|record| read.since.contains_key(&record.account_id))
        .filter_map(|record| {
            let payment = record.posting().ok()?.entry.reverses?;
            let key = (record.account_id.clone(), payment);
            (!read_ids.contains(&key)).then_some(key)
        })
        .collect();
    let payments = payments
        .into_iter()
        .filter_map(|(account, payment)| {
            let id = AccountId::parse(&account).ok()?;
            Some(items::key_item(entry_key(&id, &payment)))
        })
        .collect();
    read.entries
        .extend(crate::batch_get(client, table, payments).await?);
    Ok(read)
}

/// `(account, entry id)` of an entry item.
fn entry_of(item: &Item) -> Option<(String, String)> {
    let account = crate::text(item, items::PK)?.strip_prefix("LEDGER#")?;
    let entry_id = crate::text(item, items::SK)?.strip_prefix("ENTRY#")?;
    Some((account.to_owned(), entry_id.to_owned()))
}

/// Whether `listed` (the entries the log lists for an account, each written at the hour
/// `written_at` says) holds every entry above `check`'s version up to its balances'
/// (`stored`), and nothing else new: each posting writes the next version into its entry, so
/// the versions above the check must be exactly `check + 1 ..= stored`. Anything else sends
/// the account to a whole read, where it is met and reported: an entry without its version
/// (posted before it was kept, or that does not decode), one above the balances (posted since
/// they were read, or put by hand), or one the check covers written in or after the hour of
/// the check (put or copied by hand after it; the check's own hour too, as the log keeps
/// hours, not instants).
fn entries_since(
    check: &LedgerCheckRecord,
    stored: Option<&SubLedgerRecord>,
    listed: &[Item],
    written_at: impl Fn(&Item) -> i64,
) -> bool {
    let Some(stored) = stored.filter(|s| s.version >= check.version) else {
        return false;
    };
    let checked_hour = check.checked_at.div_euclid(3_600) * 3_600;
    let mut versions = BTreeSet::new();
    for item in listed {
        let Ok(version) = items::number(item, "version") else {
            return false;
        };
        if version > stored.version
            || (version <= check.version && written_at(item) >= checked_hour)
        {
            return false;
        }
        if version > check.version {
            versions.insert(version);
        }
    }
    versions.len() as u64 == stored.version - check.version
}

/// How far back the daily reconciler reads the money and the ledger again, at most, while the
/// ledger has not settled (`LEDGER_RECONCILIATION`'s mark): a week of the daily volume bounds
/// its run, whatever the table's history; beyond it the run says so every day and closes
/// nothing until an operator closes by hand.
pub const REACH_DAYS: i64 = 7;

/// How long after a window's end the log is read for the entries its accounts took since
/// (`read_accounts`).
const LISTED_AFTER_SECS: i64 = 2 * 3_600;

/// Accounts' ledgers read at once.
const ACCOUNTS_AT_ONCE: usize = 16;

/// Which accounts the ledger's leg holds to servicing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accounts {
    /// Those the money reconciliation's window touched (`read_accounts`): what the daily run
    /// and `ledgerctl reconcile --money` read, whatever the table's history.
    Touched,
    /// Every account: every loan, sub-ledger and entry in one full read of the table (a
    /// scan). An audit's answer (`ledgerctl reconcile --money --every-account`), never the
    /// daily run's.
    Every,
}

/// Every loan, sub-ledger and entry of the table (one scan pass).
async fn read_every_account(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    report: &mut LedgerReconciliation,
) -> anyhow::Result<Read> {
    let types = ["LOAN", SubLedgerRecord::ITEM_TYPE, EntryRecord::ITEM_TYPE];
    let mut found = crate::scan_types(client, table, &types).await?;
    let mut take = |item_type: &str| found.remove(item_type).unwrap_or_default();
    let (loans, sub_ledgers, entries) = (
        take("LOAN"),
        take(SubLedgerRecord::ITEM_TYPE),
        take(EntryRecord::ITEM_TYPE),
    );
    // By key: an item that does not decode still names its account.
    let accounts: BTreeSet<&str> = loans
        .iter()
        .chain(&sub_ledgers)
        .chain(&entries)
        .filter_map(|item| crate::text(item, items::PK))
        .filter_map(|pk| {
            pk.strip_prefix("LOAN#")
                .or_else(|| pk.strip_prefix("LEDGER#"))
        })
        .collect();
    report.accounts = accounts.len() as u64;
    report.read_whole = report.accounts;
    Ok(Read {
        loans,
        sub_ledgers,
        entries,
        since: BTreeMap::new(),
        checked: BTreeMap::new(),
    })
}

/// Reconciles the ledger of `table` with servicing (`money`: the money reconciliation, its
/// totals by source, currency and date and the accounts behind each) at `now` (epoch s); an
/// account touched less than `grace_secs` ago is in flight, and so is a key one of its
/// accounts is.
pub async fn reconcile_ledger(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    money: &MoneyReconciliation,
    now: i64,
    grace_secs: i64,
) -> anyhow::Result<LedgerReconciliation> {
    reconcile_accounts(client, table, money, now, grace_secs, Accounts::Touched).await
}

/// [`reconcile_ledger`] over the `accounts` asked for.
pub async fn reconcile_accounts(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    money: &MoneyReconciliation,
    now: i64,
    grace_secs: i64,
    accounts: Accounts,
) -> anyhow::Result<LedgerReconciliation> {
    let servicing = &money.totals;
    let mut report = LedgerReconciliation::default();
    let Read {
        loans,
        sub_ledgers,
        entries,
        since,
        checked,
    } = match accounts {
        Accounts::Touched => read_accounts(client, table, money, now, &mut report).await?,
        Accounts::Every => read_every_account(client, table, &mut report).await?,
    };

    let mut stored: BTreeMap<String, SubLedgerRecord> = BTreeMap::new();
    for item in sub_ledgers {
        match schema::from_item::<SubLedgerRecord>(item) {
            Ok(r) => {
                stored.insert(r.account_id.clone(), r);
            }
            Err(e) => report
                .problems
                .push(format!("a sub-ledger does not decode: {e}")),
        }
    }
    // Each account's entries summed again — onto its last check, if it was read since — and
    // the cash they moved by key (with its accounts).
    let mut summed: BTreeMap<String, SubLedger> = since
        .iter()
        .map(|(account, check)| (account.clone(), check.sub_ledger()))
        .collect();
    // An entry read twice (listed, and as a reversal's payment) counts once.
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut posted: BTreeMap<Key, Posted> = BTreeMap::new();
    let mut key_accounts: BTreeMap<Key, BTreeSet<String>> = money.key_accounts.clone();
    // Touched within the grace (a sub-ledger, an entry or a loan written then): the reads are
    // no snapshot, so such an account's items may have been read on either side of a write.
    let mut in_flight: BTreeSet<String> = BTreeSet::new();
    // Payments' and reversals' entries by id: a reversal's is held to the payment's it names.
    let mut by_id: BTreeMap<String, JournalEntry> = BTreeMap::new();
    for item in entries {
        if let Some(key) = entry_of(&item)
            && !seen.insert(key)
        {
            continue;
        }
        let record = schema::from_item::<EntryRecord>(item).map_err(|e| e.to_string());
        let posting = record
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|r| r.posting().map_err(|e| e.to_string()));
        let (record, posting) = match (record, posting) {
            (Ok(r), Ok(p)) => (r, p),
            (Err(e), _) | (_, Err(e)) => {
                report
                    .problems
                    .push(format!("a journal entry does not decode: {e}"));
                continue;
            }
        };
        let entry = &posting.entry;
        let account = entry.account_id.as_str();
        report.entries += 1;
        if now - posting.processed_at.timestamp() < grace_secs {
            in_flight.insert(account.to_owned());
        }
        // What the balances read hold: the entries up to their version, above the check for
        // an account read since it. One above them posted within the grace is the next read's
        // (posted since they were read); an older one counts, and they differ.
        let posted_since = now - posting.processed_at.timestamp() < grace_secs;
        let in_balances = match (stored.get(account), since.get(account)) {
            (Some(balances), Some(check)) => record
                .version
                .is_some_and(|v| v > check.version && v <= balances.version),
            (Some(balances), None) => record
                .version
                .is_none_or(|v| v <= balances.version || !posted_since),
            (None, _) => true,
        };
        if in_balances && let Err(e) = summed.entry(account.to_owned()).or_default().post(entry) {
            report.problems.push(format!(
                "entry {} on {} cannot be summed: {e}",
                entry.entry_id, entry.account_id
            ));
        }
        let cash = |debit: bool| -> i64 {
            entry
                .transfers
                .iter()
                .filter(|t| {
                    matches!(
                        if debit { &t.debit } else { &t.credit },
                        LedgerAccount::CashClearing(_)
                    )
                })
                .map(|t| t.amount_minor)
                .sum()
        };
        // The cash's key, by the record log's rule (`JournalEntry::cash_date`).
        if let Some(date) = entry.cash_date() {
            let key = (
                entry.trigger.system.clone(),
                entry.currency.as_str().to_owned(),
                date,
            );
            key_accounts
                .entry(key.clone())
                .or_default()
                .insert(entry.account_id.as_str().to_owned());
            let p = posted.entry(key).or_default();
            if entry.event_type == detail_types::PAYMENT_APPLIED {
                p.payments += 1;
                p.received_minor += cash(true);
            } else {
                p.reversals += 1;
                p.returned_minor += cash(false);
            }
        }
        if entry.payment.is_some() {
            by_id.insert(entry.entry_id.clone(), posting.entry);
        }
    }

    let mut loans_opened = Vec::new();
    for item in loans {
        match items::loan_from_item(item) {
            Ok(loan) => {
                if loan
                    .recent
                    .newest_applied_at()
                    .is_some_and(|at| now - at < grace_secs)
                {
                    in_flight.insert(loan.account_id.as_str().to_owned());
                }
                loans_opened.push(loan);
            }
            Err(e) => report
                .problems
                .push(format!("a loan item does not decode: {e}")),
        }
    }
    for (account, record) in &stored {
        if now - record.posted_at < grace_secs {
            in_flight.insert(account.clone());
        }
    }

    let mut reversals_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for reversal in by_id.values().filter(|e| e.reverses.is_some()) {
        let payment = reversal.reverses.as_deref().unwrap_or_default();
        reversals_of
            .entry(payment)
            .or_default()
            .push(&reversal.entry_id);
        match by_id.get(payment) {
            Some(original) => report.problems.extend(reversal.fails_to_undo(original)),
            // Postings commute: the payment's may follow within the grace.
            None => report.differs(
                in_flight.contains(reversal.account_id.as_str()),
                format!(
                    "reversal entry {} on {} reverses {payment}, which the ledger never posted",
                    reversal.entry_id, reversal.account_id
                ),
            ),
        }
    }
    // A payment is reversed once (servicing refuses a second reversal): two entries undoing it
    // would give its cash back twice.
    for (payment, reversals) in reversals_of.iter().filter(|(_, r)| r.len() > 1) {
        report.problems.push(format!(
            "payment entry {payment} is reversed by {} entries: {}",
            reversals.len(),
            reversals.join(", ")
        ));
    }

    for (account, record) in &stored {
        report.sub_ledgers += 1;
        let sum = summed.get(account).cloned().unwrap_or_default();
        let onto = since
            .get(account)
            .map(|check| format!(" (onto its check of version {})", check.version))
            .unwrap_or_default();
        if sum != record.sub_ledger() {
            let in_flight = in_flight.contains(account);
            report.differs(in_flight, format!(
                "sub-ledger {account}: stored balances {:?} ({} entries) are not the sum of its entries {:?} ({} entries){onto}",
                record.balances, record.entries, sum.balances, sum.entries
            ));
            // What its check proved no longer stands as the start of the next check.
            if !in_flight && checked.get(account).is_some_and(|v| *v > 0) {
                report.disproven.push(account.clone());
            }
        } else if checked
            .get(account)
            .is_none_or(|version| *version < record.version)
        {
            report.proven.push(record.clone());
        }
        if let Some(currency) = record.currency {
            *report
                .trial_balance
                .entry(currency.as_str().to_owned())
                .or_default() += record.sub_ledger().trial_balance();
        }
    }
    for account in summed.keys().filter(|a| !stored.contains_key(*a)) {
        report.differs(
            in_flight.contains(account),
            format!("entries posted on {account}, which has no sub-ledger"),
        );
    }
    for (currency, total) in &report.trial_balance {
        if *total != 0 {
            report
                .problems
                .push(format!("the trial balance in {currency} is {total}, not 0"));
        }
    }

    let mut differences = Vec::new();
    for loan in &loans_opened {
        // An account not opened yet holds only parked facts: nothing to post.
        let Some(account) = &loan.account else {
            continue;
        };
        let id = loan.account_id.as_str().to_owned();
        let ledger = stored
            .get(&id)
            .map(SubLedgerRecord::sub_ledger)
            .unwrap_or_default();
        let found = ledger.differences(account);
        if !found.is_empty() {
            differences.push((id, found));
        }
    }
    for (id, found) in differences {
        report.differs(
            in_flight.contains(&id),
            format!(
                "sub-ledger {id} differs from servicing: {}",
                found.join("; ")
            ),
        );
    }

    // The business dates the money reconciliation totalled (each whole); others it did not read.
    let keys: BTreeSet<&Key> = servicing
        .keys()
        .chain(posted.keys())
        .filter(|(_, _, date)| money.dates.contains(date))
        .collect();
    for key in keys {
        let s = servicing.get(key).copied().unwrap_or_default();
        let p = posted.get(key).copied().unwrap_or_default();
        let settled = key_accounts
            .get(key)
            .is_none_or(|accounts| accounts.is_disjoint(&in_flight));
        if (s.applied_minor, s.reversed_minor) != (p.received_minor, p.returned_minor) {
            let (source, currency, date) = key;
            report.differs(!settled, format!(
                "{source} {currency} {date}: servicing applied {} less reversed {}, the ledger posted {} less {}",
                minor(s.applied_minor),
                minor(s.reversed_minor),
                minor(p.received_minor),
                minor(p.returned_minor)
            ));
        }
        report.by_key.insert(key.clone(), (s, p));
    }
    report.in_flight = in_flight.into_iter().collect();
    Ok(report)
}

/// Writes the checks `report` proved (`proven`, at `now`, epoch s), so each account's next
/// check reads only what follows: one `PutItem` per account whose balances are newer than its
/// last check, never back to an older version (a slower concurrent run keeps the newer). A
/// check `report` disproved is taken back to version 0 (it proves nothing: the account is read
/// whole until it holds). The daily reconciler's: `ledgerctl reconcile --money` writes
/// nothing. Returns how many were written.
pub async fn remember_checks(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    report: &LedgerReconciliation,
    now: i64,
) -> anyhow::Result<u64> {
    let proven = report
        .proven
        .iter()
        .map(|balances| (LedgerCheckRecord::of(balances, now), true));
    let disproven = report.disproven.iter().map(|account| {
        let nothing = SubLedgerRecord {
            pk: String::new(),
            sk: String::new(),
            item_type: String::new(),
            account_id: account.clone(),
            version: 0,
            currency: None,
            balances: BTreeMap::new(),
            entries: 0,
            posted_at: now,
        };
        (LedgerCheckRecord::of(&nothing, now), false)
    });
    let written: Vec<bool> = futures_util::stream::iter(proven.chain(disproven).map(
        |(check, forward_only)| async move {
            let put = client
                .put_item()
                .table_name(table)
                .set_item(Some(schema::to_item(&check)?));
            let put = match forward_only {
                true => put
                    .condition_expression("attribute_not_exists(pk) OR #version < :version")
                    .expression_attribute_names("#version", items::VERSION)
                    .expression_attribute_values(":version", items::n(check.version)),
                false => put,
            };
            match put.send().await {
                Ok(_) => Ok(true),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    Ok(false)
                }
                Err(e) => Err(anyhow::anyhow!(
                    "the check of {} could not be written: {}",
                    check.account_id,
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )),
            }
        },
    ))
    .buffer_unordered(ACCOUNTS_AT_ONCE)
    .try_collect()
    .await?;
    Ok(written.into_iter().filter(|w| *w).count() as u64)
}
