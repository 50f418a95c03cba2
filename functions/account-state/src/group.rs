//! Group commit: the longest run of an account's facts that can share ONE transaction.
//!
//! Facts are judged in order, each on the state its predecessors leave; the loan item is then
//! written once for all of them. The next fact is always a parked fact whose awaited fact has
//! been applied (ready), received first, if there is one — so it is applied right after what it
//! waited for — and otherwise the account's next delivered event. A fact that waits for another
//! is parked on the loan item (its claim says `PARKED`). A group ends where DynamoDB would
//! refuse or the judgment could not hold: at the item limit, at a fact already in the group (its
//! claim would be written twice), and at an allocation the group already touches (a reversal of
//! a payment recorded in the same group).
//!
//! Here the vocabulary of a group and what the account run asks of the state already read;
//! planning a group (judging its facts, finding where it ends) is in `plan`, what its
//! transaction writes and what the commit answers per member in `commit`.

mod commit;
mod plan;
#[cfg(test)]
mod tests;

use servicing_domain::{
    AccountId, Applied, Deferral, Fingerprint, ParkedFact, Rejection, ServicingEvent, SourceRef,
};
use servicing_store::{LoanItem, Snapshot};

use crate::batch::Pending;
use crate::report::MessageResult;

/// A verdict on one fact.
#[derive(Debug)]
pub(crate) enum Judged {
    Apply(Box<Applied>),
    Stale,
    Reject(Rejection),
    /// Waits for another fact: kept on the loan item.
    Park(Deferral),
    /// Already applied although its claim is gone: nothing to write.
    Duplicate,
}

/// A parked fact taken up again, with its event decoded from the stored body (`None` when a
/// changed decoder no longer accepts it: it is rejected, its body quarantined).
#[derive(Debug)]
pub(crate) struct Released {
    pub fact: ParkedFact,
    pub event: Option<ServicingEvent>,
    pub account_id: AccountId,
}

#[derive(Debug)]
pub(crate) enum Subject {
    /// Index into the account's pending events.
    Pending(usize),
    Released(Box<Released>),
}

#[derive(Debug)]
pub(crate) struct Member {
    pub subject: Subject,
    pub judged: Judged,
    /// A pending event parked and released again within this group: its claim is written once,
    /// with the final verdict, and it is answered as parked (then counted as released).
    pub parked_first: bool,
}

/// A member's answer after the commit.
#[derive(Debug)]
pub(crate) enum Answer {
    /// For the pending event at this index.
    Message(usize, MessageResult),
    /// For a parked fact judged again.
    Released(SourceRef, MessageResult),
}

/// Why planning stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Nothing left: every pending event is in the group or settled, nothing parked is ready.
    Done,
    /// The next fact goes into the next group.
    Full,
    /// A released reversal refers to a payment that was not read: read it, then plan again.
    NeedTargets(Vec<SourceRef>),
}

#[derive(Debug)]
pub(crate) struct Group {
    pub members: Vec<Member>,
    /// The loan item as the group leaves it, when any member changes it.
    pub next: Option<LoanItem>,
    /// The version of the loan item the group was judged against (`None`: no item).
    pub expected: Option<u64>,
    /// The parked facts whose bodies were stored apart when the group was judged.
    pub apart_before: Vec<SourceRef>,
    pub stop: Stop,
}

impl Group {
    /// The group's only member, when it is a released parked fact.
    pub fn sole_released(&self) -> Option<&Released> {
        match self.members.as_slice() {
            [
                Member {
                    subject: Subject::Released(released),
                    ..
                },
            ] => Some(released),
            _ => None,
        }
    }
}

/// Whether an unsettled pending event is a fact `snapshot` holds parked.
pub(crate) fn holds_parked(
    pending: &[Pending<'_>],
    settled: &[Option<MessageResult>],
    snapshot: &Snapshot,
) -> bool {
    let Some(loan) = &snapshot.loan else {
        return false;
    };
    pending
        .iter()
        .zip(settled)
        .any(|(p, s)| s.is_none() && loan.parked.find(&p.event.source).is_some())
}

/// Settled without a request from the state already read: duplicates of facts the loan lists as
/// recently applied or holds parked, and collisions with a parked fact (same identity, other
/// payload; answered with the stored fingerprint).
pub(crate) fn known_facts(
    pending: &[Pending<'_>],
    settled: &[Option<MessageResult>],
    snapshot: &Snapshot,
    now: i64,
) -> Vec<(usize, Option<Fingerprint>)> {
    let Some(loan) = &snapshot.loan else {
        return Vec::new();
    };
    pending
        .iter()
        .enumerate()
        .filter(|(i, _)| settled[*i].is_none())
        .filter_map(|(i, p)| {
            if loan.recent.holds(&p.event.source, &p.fingerprint, now) {
                return Some((i, None));
            }
            let parked = loan.parked.find(&p.event.source)?;
            Some((
                i,
                (parked.fingerprint != p.fingerprint).then(|| parked.fingerprint.clone()),
            ))
        })
        .collect()
}
