//! `ledgerctl ledger migrate`: an account whose history the ledger's events cannot bring any
//! more (older than the bus's archive and the facts' records) gets an opening balance — the
//! difference between servicing's balances, at the loan version read, and what its sub-ledger
//! holds once every event servicing still holds for it is posted (`docs/ledger.md`).
//!
//! Why it cannot count a fact twice: the loan is read first (version V); then every event the
//! account's records published is posted through the ledger's own handler (a backfill: those
//! already posted post nothing); then the opening is posted in one transaction that also checks
//! the loan is still at V and the balances at the version read. A fact applied meanwhile, or a
//! posting that lands meanwhile, refuses the opening: run again. What the opening absorbs is
//! only what no record holds any more; such a fact's event arriving later (an archive replay)
//! is quarantined `before_opening` by the ledger, which asks servicing for the fact's record
//! on a migrated account. Only history older than the ledger is opened: an account whose
//! `LoanOpened` the ledger posted is not (a difference there is a defect to find).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate};
use ledger_postings::LedgerPostingsHandler;
use servicing_domain::AccountId;
use servicing_domain::account::LoanAccount;
use servicing_domain::fingerprint::Fingerprint;
use servicing_domain::journal::{
    Correction, JournalEntry, Posting, SubLedger, entry_of, missing_currency, opening_entry,
    opening_id, posting_date,
};
use servicing_domain::outbox::detail_types::LOAN_OPENED;
use servicing_ops::money::minor;
use servicing_store::journal::{EntryRecord, PostOutcome};
use servicing_store::{OutboxEvent, ServicingStore};

use crate::ledger_backfill::{Backfilled, backfill, published_events};

/// How one account's migration ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migrated {
    /// The opening balance was posted.
    Opened {
        entry: JournalEntry,
        posting_date: NaiveDate,
    },
    /// The ledger already agrees with servicing: nothing to open, nothing written.
    Agrees,
    /// Opened before (nothing written).
    Before { posting_date: NaiveDate, by: String },
    /// `--dry-run`: the entries the events still held would add, and the opening that would
    /// follow them (`None`: it would agree).
    WouldOpen {
        entries: u64,
        opening: Option<JournalEntry>,
    },
}

/// One account's migration: what was caught up first, and how it ended (an error names why
/// it was refused; nothing of the opening was written).
#[derive(Debug, Clone)]
pub struct AccountMigration {
    pub account: AccountId,
    pub caught_up: Backfilled,
    pub outcome: Result<Migrated, String>,
}

impl AccountMigration {
    pub fn line(&self) -> String {
        let account = &self.account;
        let caught_up = format!(
            "{} events held, {} posted now",
            self.caught_up.events, self.caught_up.posted
        );
        match &self.outcome {
            Ok(Migrated::Opened {
                entry,
                posting_date,
            }) => format!(
                "{account}: opened {} as of {}, posting date {posting_date} ({caught_up}): {}",
                entry.entry_id,
                entry.trigger.event_id,
                transfers(entry)
            ),
            Ok(Migrated::Agrees) => {
                format!("{account}: agrees with servicing, nothing to open ({caught_up})")
            }
            Ok(Migrated::Before { posting_date, by }) => format!(
                "{account}: opened before, posting date {posting_date}, by {by} (nothing written)"
            ),
            Ok(Migrated::WouldOpen {
                entries,
                opening: None,
            }) => format!(
                "{account}: would agree with servicing once {entries} entries of the {} events held are posted (dry run: nothing written)",
                self.caught_up.events
            ),
            Ok(Migrated::WouldOpen {
                entries,
                opening: Some(entry),
            }) => format!(
                "{account}: would post {entries} entries of the {} events held, then open {} as of {}: {} (dry run: nothing written)",
                self.caught_up.events,
                entry.entry_id,
                entry.trigger.event_id,
                transfers(entry)
            ),
            Err(why) => format!("{account}: NOT migrated ({caught_up}): {why}"),
        }
    }
}

fn transfers(entry: &JournalEntry) -> String {
    let legs: Vec<String> = entry
        .transfers
        .iter()
        .map(|t| {
            format!(
                "Dr {} / Cr {} {} {}",
                t.debit.code(),
                t.credit.code(),
                minor(t.amount_minor),
                entry.currency.as_str()
            )
        })
        .collect();
    legs.join("; ")
}

/// Migrates `accounts` (see the module), stamped with `operator` and `reason`; one scan of the
/// facts' records finds the events they still hold.
pub async fn migrate(
    handler: &LedgerPostingsHandler,
    store: &ServicingStore,
    accounts: &[AccountId],
    reason: &str,
    operator: &str,
    dry_run: bool,
) -> anyhow::Result<Vec<AccountMigration>> {
    if reason.trim().is_empty() {
        anyhow::bail!("a migration says why (--reason): nothing written");
    }
    // Servicing's state first: everything the opening takes from it is at this version.
    let mut loans = Vec::new();
    let mut done = Vec::new();
    let mut asked = HashSet::new();
    for account in accounts.iter().filter(|a| asked.insert(*a)) {
        let refused = |why: String| AccountMigration {
            account: account.clone(),
            caught_up: Backfilled::default(),
            outcome: Err(why),
        };
        let opened = store.loan_state(account).await?.and_then(|loan| {
            let version = loan.version;
            loan.account.map(|state| (state, version))
        });
        let Some((state, version)) = opened else {
            done.push(refused(
                "no opened loan in servicing: nothing to migrate".into(),
            ));
            continue;
        };
        let (_, posted) = store
            .sub_ledger_and_entry(account, &opening_id(account))
            .await?;
        if let Some(posted) = posted {
            done.push(AccountMigration {
                account: account.clone(),
                caught_up: Backfilled::default(),
                outcome: Ok(before(&posted)?),
            });
            continue;
        }
        loans.push((account.clone(), state, version));
    }
    if !loans.is_empty() {
        done.extend(open_all(handler, store, loans, reason, operator, dry_run).await?);
    }
    // In the order asked for.
    done.sort_by_key(|m| accounts.iter().position(|a| *a == m.account));
    Ok(done)
}

/// Catches up and opens (or, dry, computes) each account whose servicing state was read.
async fn open_all(
    handler: &LedgerPostingsHandler,
    store: &ServicingStore,
    loans: Vec<(AccountId, LoanAccount, u64)>,
    reason: &str,
    operator: &str,
    dry_run: bool,
) -> anyhow::Result<Vec<AccountMigration>> {
    let mut done = Vec::new();
    let names: Vec<String> = loans.iter().map(|(a, ..)| a.as_str().to_owned()).collect();
    let held = published_events(store.client(), store.table(), &names).await?;
    let by = Correction {
        reason: reason.to_owned(),
        by: operator.to_owned(),
    };
    for (account, state, version) in loans {
        let events: Vec<OutboxEvent> = held
            .iter()
            .filter(|e| e.detail["accountId"].as_str() == Some(account.as_str()))
            .cloned()
            .collect();
        let (caught_up, outcome) = match dry_run {
            true => (
                Backfilled {
                    events: events.len() as u64,
                    ..Backfilled::default()
                },
                would_open(store, &state, version, &events, &by).await?,
            ),
            false => open(handler, store, &state, version, &events, &by).await?,
        };
        done.push(AccountMigration {
            account,
            caught_up,
            outcome,
        });
    }
    Ok(done)
}

/// An opening posted before, as stored.
fn before(posted: &EntryRecord) -> anyhow::Result<Migrated> {
    let posting = posted.posting()?;
    Ok(Migrated::Before {
        posting_date: posting.posting_date,
        by: posting.entry.correction.map(|c| c.by).unwrap_or_default(),
    })
}

/// Whether the ledger posted the account's own opening event: then its history is the
/// ledger's, and a difference from servicing is a defect to find, not older history.
fn opened_by_its_event(entries: &[EntryRecord]) -> bool {
    entries.iter().any(|e| e.event_type == LOAN_OPENED)
}

const HISTORY_IS_THE_LEDGERS: &str = "the ledger posted its LoanOpened: its history is the ledger's, and what differs from servicing is a defect to find (ledgerctl reconcile --money), not older history";

/// Catches the account up on `events`, then posts its opening at servicing's `version`.
async fn open(
    handler: &LedgerPostingsHandler,
    store: &ServicingStore,
    servicing: &LoanAccount,
    version: u64,
    events: &[OutboxEvent],
    by: &Correction,
) -> anyhow::Result<(Backfilled, Result<Migrated, String>)> {
    let caught_up = backfill(handler, events, false).await;
    // The opening must not absorb an event that could still be posted.
    if caught_up.quarantined > 0 {
        return Ok((
            caught_up,
            Err(format!(
                "{} of its events were quarantined: repair them first (ledgerctl quarantine list --consumer ledger-postings)",
                caught_up.quarantined
            )),
        ));
    }
    if caught_up.failed > 0 {
        return Ok((
            caught_up,
            Err(format!(
                "{} of its events could not be posted now (a transient failure): run again",
                caught_up.failed
            )),
        ));
    }
    let journal = store.journal(&servicing.account_id).await?;
    let read = journal.balances;
    let ledger = read.as_ref().map(|r| r.sub_ledger()).unwrap_or_default();
    let now = DateTime::from_timestamp_millis(servicing_store::epoch_millis()).unwrap_or_default();
    let entry = match opening_entry(servicing, version, &ledger, by.clone(), now) {
        Ok(Some(_)) if opened_by_its_event(&journal.entries) => {
            return Ok((caught_up, Err(HISTORY_IS_THE_LEDGERS.into())));
        }
        Ok(Some(entry)) => entry,
        Ok(None) => return Ok((caught_up, Ok(Migrated::Agrees))),
        Err(e) => return Ok((caught_up, Err(e.0))),
    };
    let mut next = ledger;
    if let Err(e) = next.post(&entry) {
        return Ok((caught_up, Err(e.0)));
    }
    let posting = Posting {
        processed_at: now,
        posting_date: posting_date(now.date_naive(), store.closed_through_any().await?),
        entry,
    };
    // What the opening is, not who ran it or when.
    let fingerprint = Fingerprint::of_value(&serde_json::json!({
        "trigger": posting.entry.trigger,
        "transfers": posting.entry.transfers,
        "currency": posting.entry.currency.as_str(),
        "reason": by.reason,
    }));
    let outcome = match store
        .post_entry(&posting, &fingerprint, read.as_ref(), &next, Some(version))
        .await?
    {
        PostOutcome::Posted => Ok(Migrated::Opened {
            posting_date: posting.posting_date,
            entry: posting.entry,
        }),
        // Another run with the same reason, meanwhile: what it stored.
        PostOutcome::Duplicate => match store
            .sub_ledger_and_entry(&servicing.account_id, &posting.entry.entry_id)
            .await?
        {
            (_, Some(posted)) => Ok(before(&posted)?),
            (_, None) => Err("the opening was reported posted and cannot be read back".into()),
        },
        PostOutcome::Collision { .. } => Err(format!(
            "another opening of this account was posted meanwhile: {}",
            posting.entry.entry_id
        )),
        PostOutcome::Moved | PostOutcome::Contended => Err(
            "servicing applied a fact, the ledger posted, or a period closed while it was migrated: run again (nothing written of the opening)"
                .into(),
        ),
    };
    Ok((caught_up, outcome))
}

/// What `open` would post: the events the ledger has not posted, added in memory to what it
/// holds, and the opening that would bring that to servicing.
async fn would_open(
    store: &ServicingStore,
    servicing: &LoanAccount,
    version: u64,
    events: &[OutboxEvent],
    by: &Correction,
) -> anyhow::Result<Result<Migrated, String>> {
    let journal = store.journal(&servicing.account_id).await?;
    let posted: HashMap<&str, &str> = journal
        .entries
        .iter()
        .map(|e| (e.entry_id.as_str(), e.fingerprint.as_str()))
        .collect();
    let mut entries = 0;
    let mut loan_opened = opened_by_its_event(&journal.entries);
    let mut ledger: SubLedger = journal
        .balances
        .as_ref()
        .map(|r| r.sub_ledger())
        .unwrap_or_default();
    for event in events {
        let mut detail = event.detail.clone();
        if missing_currency(&detail) {
            detail["currency"] = servicing.currency.as_str().into();
        }
        let entry = match entry_of(&detail) {
            Ok(Some(entry)) => entry,
            Ok(None) => continue,
            Err(e) => {
                return Ok(Err(format!(
                    "event {} would be quarantined: {e}",
                    event.event_id()
                )));
            }
        };
        // As the handler tells a duplicate from a collision: the detail as published.
        match posted.get(entry.entry_id.as_str()) {
            Some(stored) if *stored == Fingerprint::of_value(&event.detail).as_str() => continue,
            Some(_) => {
                return Ok(Err(format!(
                    "event {} would be quarantined: a collision with the entry posted under its id",
                    entry.entry_id
                )));
            }
            None => {}
        }
        if let Err(e) = ledger.post(&entry) {
            return Ok(Err(format!(
                "event {} would be quarantined: {e}",
                entry.entry_id
            )));
        }
        entries += 1;
        loan_opened |= entry.event_type == LOAN_OPENED;
    }
    let now = DateTime::from_timestamp_millis(servicing_store::epoch_millis()).unwrap_or_default();
    Ok(
        match opening_entry(servicing, version, &ledger, by.clone(), now) {
            Ok(Some(_)) if loan_opened => Err(HISTORY_IS_THE_LEDGERS.into()),
            Ok(opening) => Ok(Migrated::WouldOpen { entries, opening }),
            Err(e) => Err(e.0),
        },
    )
}
