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

use std::collections::HashSet;

use servicing_domain::{
    AccountId, AllocationWrite, Applied, Arrival, Deferral, EventKind, Fingerprint, Outcome,
    ParkedFact, Rejection, ServicingEvent, SourceRef, apply,
};
use servicing_store::{
    Effect, LoanItem, LoanWrite, QuarantineEntry, RecentFacts, Snapshot, Target, UnitOfWork,
};

use crate::{MessageResult, Pending};

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
    pub stop: Stop,
}

/// The working state while planning.
struct Plan {
    loan: LoanItem,
    changed: bool,
    items: usize,
    facts: HashSet<SourceRef>,
    allocations: HashSet<SourceRef>,
}

impl Group {
    /// Plans the next group: ready parked facts and the unsettled pending events
    /// (`settled[i]` is `None`), at most `max_units` facts and `max_items` transaction items
    /// (one fact always fits).
    pub fn plan(
        pending: &[Pending<'_>],
        settled: &[Option<MessageResult>],
        snapshot: &Snapshot,
        max_items: usize,
        max_units: usize,
        now: i64,
    ) -> Group {
        let account_id = pending
            .first()
            .map(|p| p.event.account_id.clone())
            .or_else(|| snapshot.loan.as_ref().map(|l| l.account_id.clone()));
        let expected = snapshot.loan.as_ref().map(|l| l.version);
        let mut group = Group {
            members: Vec::new(),
            next: None,
            expected,
            stop: Stop::Done,
        };
        let Some(account_id) = account_id else {
            return group;
        };
        let loan = snapshot.loan.clone().unwrap_or(LoanItem {
            account_id,
            account: None,
            version: 0,
            recent: RecentFacts::default(),
            parked: Default::default(),
        });
        let mut plan = Plan {
            loan,
            changed: false,
            items: 1, // the loan write or version check
            facts: HashSet::new(),
            allocations: HashSet::new(),
        };
        let mut next_pending = 0;
        loop {
            if group.members.len() >= max_units {
                group.stop = Stop::Full;
                break;
            }
            // A ready parked fact goes first: it is applied right after what it waited for.
            let ready = plan
                .loan
                .parked
                .iter()
                .find(|f| f.awaits.is_none())
                .cloned();
            let subject = match ready {
                Some(fact) => {
                    let decoded = ServicingEvent::decode(fact.body.as_bytes());
                    let released = Released {
                        fact,
                        event: decoded.as_ref().ok().cloned(),
                        account_id: plan.loan.account_id.clone(),
                    };
                    if let Err(e) = decoded {
                        // It decoded when it was parked; a decoder changed since rejects it.
                        let rejection = Rejection {
                            code: e.code(),
                            reason: e.to_string(),
                        };
                        let member = Member {
                            subject: Subject::Released(Box::new(released)),
                            judged: Judged::Reject(rejection),
                            parked_first: false,
                        };
                        if !plan.accept(&mut group, member, max_items, pending, now) {
                            break;
                        }
                        continue;
                    }
                    Subject::Released(Box::new(released))
                }
                None => {
                    while next_pending < pending.len() && settled[next_pending].is_some() {
                        next_pending += 1;
                    }
                    if next_pending == pending.len() {
                        break;
                    }
                    next_pending += 1;
                    Subject::Pending(next_pending - 1)
                }
            };
            let event = match &subject {
                Subject::Pending(i) => &pending[*i].event,
                Subject::Released(r) => match &r.event {
                    Some(event) => event,
                    None => unreachable!("an undecodable parked fact is rejected above"),
                },
            };
            // A payment this group writes — or any fact it applies, which a reversal may name —
            // is judged by the next group, on the committed state.
            if event
                .reversal_target()
                .is_some_and(|t| plan.allocations.contains(t) || plan.facts.contains(t))
            {
                group.stop = Stop::Full;
                break;
            }
            let target = match event.reversal_target() {
                None => None,
                Some(payment) => match snapshot.reversal_target(payment) {
                    Some(target) => target,
                    None => {
                        group.stop = Stop::NeedTargets(vec![payment.clone()]);
                        return group;
                    }
                },
            };
            let judged = match apply(plan.loan.account.as_ref(), event, target) {
                Outcome::Applied(applied) => Judged::Apply(applied),
                Outcome::Stale { .. } => Judged::Stale,
                Outcome::Rejected(rejection) => Judged::Reject(rejection),
                Outcome::Deferred(why) => Judged::Park(why),
                Outcome::AlreadyApplied => Judged::Duplicate,
            };
            let member = Member {
                subject,
                judged,
                parked_first: false,
            };
            if !plan.accept(&mut group, member, max_items, pending, now) {
                break;
            }
        }
        if plan.changed {
            let applied = group
                .members
                .iter()
                .filter_map(|m| match (&m.subject, &m.judged) {
                    (Subject::Pending(i), Judged::Apply(_)) => {
                        Some((&pending[*i].event.source, &pending[*i].fingerprint))
                    }
                    (Subject::Released(r), Judged::Apply(_)) => {
                        Some((&r.fact.source, &r.fact.fingerprint))
                    }
                    _ => None,
                });
            plan.loan.recent = plan.loan.recent.with(applied, now);
            group.next = Some(plan.loan);
        }
        group
    }

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

    /// The loan item's part in the group's transaction.
    pub fn loan_write<'a>(&'a self, account_id: &'a AccountId) -> LoanWrite<'a> {
        match &self.next {
            Some(item) => LoanWrite::Put {
                item,
                expected: self.expected,
            },
            None => LoanWrite::Check {
                account_id,
                expected: self.expected,
            },
        }
    }

    /// The units of work of the group, in order (a fact that was already applied has none).
    pub fn units<'a>(&'a self, pending: &'a [Pending<'a>]) -> Vec<UnitOfWork<'a>> {
        self.members
            .iter()
            .filter_map(|m| {
                let (source, event_type, account_id, fingerprint, released) = match &m.subject {
                    Subject::Pending(i) => {
                        let p = &pending[*i];
                        let kind = p.event.kind.wire_name();
                        (
                            &p.event.source,
                            kind,
                            &p.event.account_id,
                            &p.fingerprint,
                            false,
                        )
                    }
                    Subject::Released(r) => {
                        let kind = r
                            .event
                            .as_ref()
                            .map_or("UNDECODABLE", |e| e.kind.wire_name());
                        (
                            &r.fact.source,
                            kind,
                            &r.account_id,
                            &r.fact.fingerprint,
                            true,
                        )
                    }
                };
                let effect = m.effect(pending)?;
                Some(UnitOfWork {
                    source,
                    event_type,
                    account_id,
                    fingerprint,
                    released,
                    effect,
                })
            })
            .collect()
    }

    /// The members that have a unit of work, in the order of [`Group::units`].
    pub fn members_with_units<'a>(
        &'a self,
        pending: &'a [Pending<'a>],
    ) -> impl Iterator<Item = &'a Member> {
        self.members.iter().filter(|m| m.effect(pending).is_some())
    }

    /// After the commit: carries the committed loan item and allocations into `snapshot` and
    /// answers per member.
    pub fn committed(self, pending: &[Pending<'_>], snapshot: &mut Snapshot) -> Vec<Answer> {
        let mut results = Vec::with_capacity(self.members.len());
        for member in self.members {
            // A reversal read this fact as not applied: once applied as anything but a
            // payment, it is a target no reversal may take.
            let applied = match (&member.subject, &member.judged) {
                (Subject::Pending(i), Judged::Apply(_)) => Some(&pending[*i].event),
                (Subject::Released(r), Judged::Apply(_)) => r.event.as_ref(),
                _ => None,
            };
            if let Some(event) =
                applied.filter(|e| !matches!(e.kind, EventKind::PaymentSettled { .. }))
                && let Some(target) = snapshot.targets.get_mut(&event.source)
            {
                *target = Target::NotAPayment(event.kind.wire_name().to_owned());
            }
            let result = match member.judged {
                Judged::Apply(applied) => {
                    match applied.allocation {
                        Some(AllocationWrite::Record(stored)) => {
                            let payment = stored.payment.clone();
                            snapshot.targets.insert(payment, Target::Applied(stored));
                        }
                        Some(AllocationWrite::MarkReversed { payment, reversal }) => {
                            if let Some(Target::Applied(stored)) =
                                snapshot.targets.get_mut(&payment)
                            {
                                stored.reversed_by = Some(reversal);
                            }
                        }
                        None => {}
                    }
                    MessageResult::Applied
                }
                Judged::Stale => MessageResult::Stale,
                Judged::Reject(rejection) => {
                    tracing::warn!(code = rejection.code, "business rejection quarantined");
                    MessageResult::Quarantined {
                        code: rejection.code.to_owned(),
                    }
                }
                Judged::Park(why) => {
                    tracing::info!(code = why.code(), "parked until the awaited fact applies");
                    MessageResult::Parked
                }
                Judged::Duplicate => MessageResult::Duplicate,
            };
            match member.subject {
                Subject::Pending(i) if member.parked_first => {
                    results.push(Answer::Message(i, MessageResult::Parked));
                    results.push(Answer::Released(pending[i].event.source.clone(), result));
                }
                Subject::Pending(i) => results.push(Answer::Message(i, result)),
                Subject::Released(r) => results.push(Answer::Released(r.fact.source, result)),
            }
        }
        if let Some(next) = self.next {
            snapshot.loan = Some(next);
        }
        results
    }
}

impl Member {
    /// What this fact commits next to its claim; `None` when it has nothing to commit: an
    /// already applied fact, or a parked fact parked again (its claim already says so: only
    /// the loan item changes).
    fn effect<'a>(&'a self, pending: &'a [Pending<'a>]) -> Option<Effect<'a>> {
        let released = matches!(self.subject, Subject::Released(_));
        Some(match &self.judged {
            Judged::Apply(applied) => Effect::Apply(applied),
            Judged::Stale => Effect::Stale,
            Judged::Reject(rejection) => {
                Effect::Reject(self.quarantine_entry(pending, rejection.code, &rejection.reason))
            }
            Judged::Park(_) if released => return None,
            Judged::Park(_) => Effect::Park,
            Judged::Duplicate => return None,
        })
    }

    /// What the quarantine keeps of this fact: raw body, identity, fingerprint, reason.
    fn quarantine_entry<'a>(
        &'a self,
        pending: &'a [Pending<'a>],
        code: &'a str,
        reason: &'a str,
    ) -> QuarantineEntry<'a> {
        match &self.subject {
            Subject::Pending(i) => pending[*i].quarantine_entry(code, reason),
            Subject::Released(r) => QuarantineEntry {
                source: Some(&r.fact.source),
                account_id: Some(&r.account_id),
                received_fingerprint: Some(&r.fact.fingerprint),
                ..QuarantineEntry::new(&r.fact.message_id, &r.fact.body, code, reason)
            },
        }
    }
}

impl Plan {
    /// Adds `member` to the group if it fits, updating the working loan item; `false` (and the
    /// group marked full) when it must wait for the next group.
    fn accept(
        &mut self,
        group: &mut Group,
        member: Member,
        max_items: usize,
        pending: &[Pending<'_>],
        now: i64,
    ) -> bool {
        let (source, fingerprint) = match &member.subject {
            Subject::Pending(i) => (&pending[*i].event.source, &pending[*i].fingerprint),
            Subject::Released(r) => (&r.fact.source, &r.fact.fingerprint),
        };
        let released = matches!(member.subject, Subject::Released(_));
        // Parked by this very group: it stays that member, whose claim is written once.
        let merge = group.members.iter().position(|m| match m.subject {
            Subject::Pending(i) => released && &pending[i].event.source == source,
            Subject::Released(_) => false,
        });
        let touches = match &member.judged {
            Judged::Apply(applied) => applied.allocation.as_ref().map(|write| match write {
                AllocationWrite::Record(stored) => stored.payment.clone(),
                AllocationWrite::MarkReversed { payment, .. } => payment.clone(),
            }),
            _ => None,
        };
        // What the store will write for it (nothing for a duplicate, nor for a released fact
        // that stays parked: its PARKED claim stays).
        let with_claim = member.effect(pending).map_or(0, |effect| effect.items());
        let cost = match (released, merge) {
            (true, Some(_)) => with_claim.saturating_sub(1), // its claim is counted already
            _ => with_claim,
        };
        let repeated = merge.is_none() && self.facts.contains(source);
        let touched_twice = touches
            .as_ref()
            .is_some_and(|t| self.allocations.contains(t));
        let full = !group.members.is_empty() && self.items + cost > max_items;
        if repeated || touched_twice || full {
            group.stop = Stop::Full;
            return false;
        }
        self.items += cost;
        self.facts.insert(source.clone());
        self.allocations.extend(touches);
        let parked = if let Subject::Released(r) = &member.subject {
            self.loan.parked.remove(&r.fact.source)
        } else {
            None
        };
        match (&member.judged, &member.subject) {
            (Judged::Apply(applied), subject) => {
                self.loan.account = Some(applied.account.clone());
                let event = match subject {
                    Subject::Pending(i) => Some(&pending[*i].event),
                    Subject::Released(r) => r.event.as_ref(),
                };
                if let Some(event) = event {
                    self.loan.parked.on_applied(event);
                }
                self.bump();
            }
            (Judged::Park(why), Subject::Pending(i)) => {
                let p = &pending[*i];
                let arrival = Arrival {
                    source: &p.event.source,
                    fingerprint,
                    message_id: p.message_id,
                    body: p.body,
                    now,
                };
                self.loan.parked.park(arrival, why.clone());
                self.bump();
            }
            (Judged::Park(why), Subject::Released(_)) => {
                if let Some(fact) = parked {
                    self.loan.parked.park_again(fact, why.clone());
                }
                self.bump();
            }
            // Released and settled: it leaves the parked facts.
            (_, Subject::Released(_)) => self.bump(),
            (_, Subject::Pending(_)) => {}
        }
        match merge {
            Some(at) => {
                group.members[at].judged = member.judged;
                group.members[at].parked_first = true;
            }
            None => group.members.push(member),
        }
        true
    }

    /// One more change of the loan item (its version counts them).
    fn bump(&mut self) {
        self.changed = true;
        self.loan.version += 1;
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

#[cfg(test)]
mod tests {
    use servicing_domain::{Fingerprint, ServicingEvent};
    use servicing_store::MAX_TRANSACTION_ITEMS;

    use super::*;

    fn pending(bodies: &[String]) -> Vec<Pending<'_>> {
        bodies
            .iter()
            .map(|body| {
                let event = ServicingEvent::decode(body.as_bytes()).expect("valid event");
                Pending {
                    message_id: "m",
                    body,
                    receive_count: 1,
                    fingerprint: Fingerprint::of(&event),
                    event,
                }
            })
            .collect()
    }

    fn body(kind: &str, id: &str, extra: &str) -> String {
        format!(
            r#"{{"sourceSystem":"psp","sourceEventId":"{id}","eventType":"{kind}","accountId":"acc_1","eventTime":"2026-09-10T10:00:00Z","currency":"EUR"{extra}}}"#
        )
    }

    fn open() -> String {
        body("LOAN_OPENED", "open", r#","principalMinor":100000"#)
    }

    fn pay(id: &str) -> String {
        body("PAYMENT_SETTLED", id, r#","amountMinor":100"#)
    }

    fn plan(bodies: &[String], max_items: usize) -> Group {
        let pending = pending(bodies);
        let settled = vec![None; pending.len()];
        Group::plan(
            &pending,
            &settled,
            &Snapshot::default(),
            max_items,
            usize::MAX,
            1_000,
        )
    }

    fn indices(group: &Group) -> Vec<String> {
        group
            .members
            .iter()
            .map(|m| match &m.subject {
                Subject::Pending(i) => format!("p{i}"),
                Subject::Released(r) => format!("r:{}", r.fact.source.event_id),
            })
            .collect()
    }

    #[test]
    fn when_events_fit_should_write_the_loan_once_with_one_version_per_change() {
        let group = plan(&[open(), pay("p1"), pay("p2")], MAX_TRANSACTION_ITEMS);
        assert_eq!(indices(&group), ["p0", "p1", "p2"]);
        assert_eq!(group.expected, None);
        assert_eq!(group.next.as_ref().map(|l| l.version), Some(3));
        assert_eq!(group.stop, Stop::Done);
    }

    #[test]
    fn when_a_fact_repeats_should_end_the_group_before_the_repeat() {
        let group = plan(&[open(), pay("p1"), pay("p1")], MAX_TRANSACTION_ITEMS);
        assert_eq!(group.members.len(), 2);
        assert_eq!(group.stop, Stop::Full);
    }

    #[test]
    fn when_the_item_budget_is_reached_should_end_the_group_but_always_take_one_event() {
        // One record per fact (its claim carries its events and allocation), plus the loan.
        let group = plan(&[open(), pay("p1"), pay("p2")], 3);
        assert_eq!(group.members.len(), 2);
        let group = plan(&[open(), pay("p1")], 1);
        assert_eq!(group.members.len(), 1);
    }

    #[test]
    fn when_events_precede_the_opening_should_park_them_and_release_them_right_after_it() {
        let bodies = [pay("p1"), pay("p2"), open(), pay("p3")];
        let group = plan(&bodies, MAX_TRANSACTION_ITEMS);
        // Released within the group, they stay its members: one claim each, final verdict.
        assert_eq!(indices(&group), ["p0", "p1", "p2", "p3"]);
        assert!(
            group.members[..2]
                .iter()
                .all(|m| m.parked_first && matches!(m.judged, Judged::Apply(_)))
        );
        let loan = group.next.as_ref().expect("loan written");
        assert!(loan.parked.is_empty(), "{:?}", loan.parked);
        // park, park, open, release, release, pay: six changes of the loan item.
        assert_eq!(loan.version, 6);
    }

    #[test]
    fn when_a_group_commits_should_list_its_applied_facts_only_as_recent() {
        let usd = body("PAYMENT_SETTLED", "usd", r#","amountMinor":100"#).replace("EUR", "USD");
        let bodies = [open(), usd, pay("p1")];
        let pending = pending(&bodies);
        let settled = vec![None; pending.len()];
        let mut snapshot = Snapshot::default();
        let group = Group::plan(
            &pending,
            &settled,
            &snapshot,
            MAX_TRANSACTION_ITEMS,
            9,
            1_000,
        );
        assert!(matches!(group.members[1].judged, Judged::Reject(_)));
        group.committed(&pending, &mut snapshot);
        let listed = |p: &Pending<'_>| {
            snapshot
                .loan
                .as_ref()
                .is_some_and(|s| s.recent.holds(&p.event.source, &p.fingerprint, 1_000))
        };
        // A rejection's claim may be released by an operator to judge it again: never listed.
        assert_eq!(
            pending.iter().map(listed).collect::<Vec<_>>(),
            [true, false, true]
        );
    }

    #[test]
    fn when_events_are_settled_should_plan_the_others_without_them() {
        let bodies = [open(), pay("p1"), pay("p2")];
        let pending = pending(&bodies);
        let settled = vec![None, Some(MessageResult::Duplicate), None];
        let group = Group::plan(
            &pending,
            &settled,
            &Snapshot::default(),
            MAX_TRANSACTION_ITEMS,
            usize::MAX,
            1_000,
        );
        assert_eq!(indices(&group), ["p0", "p2"]);
    }

    #[test]
    fn when_a_released_reversal_refers_to_an_unread_payment_should_ask_for_it() {
        let reversal = body(
            "PAYMENT_REVERSED",
            "r1",
            r#","amountMinor":100,"reversalOf":{"sourceSystem":"psp","sourceEventId":"p9"}"#,
        );
        let group = plan(&[reversal, open()], MAX_TRANSACTION_ITEMS);
        assert_eq!(
            group.stop,
            Stop::NeedTargets(vec![SourceRef {
                system: "psp".into(),
                event_id: "p9".into()
            }])
        );
    }
}
