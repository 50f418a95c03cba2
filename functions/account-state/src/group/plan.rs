//! Planning a group: the account's facts judged in order, each on the state its predecessors
//! leave, until one would not fit the transaction or the judgment could not hold. Separate
//! from the group's vocabulary and its commit: this is where a group's end is decided.

use std::collections::HashSet;

use servicing_domain::{
    AllocationWrite, Arrival, Outcome, Rejection, ServicingEvent, SourceRef, apply,
};
use servicing_store::{LoanItem, RecentFacts, Snapshot};

use super::{Group, Judged, Member, Released, Stop, Subject};
use crate::batch::Pending;
use crate::report::MessageResult;

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
        let apart_before = snapshot
            .loan
            .iter()
            .flat_map(|l| l.parked.apart())
            .map(|f| f.source.clone())
            .collect();
        let mut group = Group {
            members: Vec::new(),
            next: None,
            expected,
            apart_before,
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
                // A newly received fact that cannot be parked anywhere is quarantined itself
                // (a released one keeps the place it has).
                Outcome::Deferred(why) => match &subject {
                    Subject::Pending(i) => match plan.loan.parked.admits(pending[*i].body) {
                        Ok(()) => Judged::Park(why),
                        Err(rejection) => Judged::Reject(rejection),
                    },
                    Subject::Released(_) => Judged::Park(why),
                },
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
        // A body kept apart is written when its fact parks, deleted when it leaves.
        let body_item = match (&member.judged, &member.subject) {
            (Judged::Park(_), Subject::Pending(i)) => {
                usize::from(self.loan.parked.keeps_apart(pending[*i].body))
            }
            (Judged::Park(_), Subject::Released(_)) => 0,
            (_, Subject::Released(r)) => usize::from(r.fact.body_apart),
            (_, Subject::Pending(_)) => 0,
        };
        let cost = body_item
            + match (released, merge) {
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
                    self.loan.parked.on_applied_at(event, now);
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
