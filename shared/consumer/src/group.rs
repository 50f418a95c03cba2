//! Group commit: the longest run of an account's events that can share ONE transaction.
//!
//! Events are judged in batch order, each on the state its predecessors leave; the loan item is
//! then written once for all of them. A group ends where DynamoDB would refuse or the judgment
//! could not hold: at the item limit, at a fact already in the group (its claim would be written
//! twice), at an allocation the group already touches (a reversal of a payment recorded in the
//! same group), and at a deferred event (settled on its own once everything before it is).

use std::collections::HashSet;

use servicing_domain::{
    AllocationWrite, Applied, Deferral, LoanAccount, Outcome, SourceRef, apply,
};
use servicing_store::{Effect, RecentFacts, Snapshot, UnitOfWork, Versioned};

use crate::{MessageResult, Pending};

/// A verdict that commits (deferrals never do).
#[derive(Debug)]
pub(crate) enum Judged {
    Apply(Box<Applied>),
    Stale,
    Reject(servicing_domain::Rejection),
}

#[derive(Debug)]
pub(crate) struct Member {
    /// Index into the account's pending events.
    pub index: usize,
    /// The loan version this event was judged against.
    pub expected_version: Option<u64>,
    pub judged: Judged,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub members: Vec<Member>,
    /// The first pending event after the group (`len` when the group reaches the end).
    pub end: usize,
    /// Why the event at `end` was deferred, when it was.
    pub deferred: Option<Deferral>,
}

impl Group {
    /// Plans the next group from the unsettled events (`settled[i]` is `None`), at most
    /// `max_units` events and `max_items` transaction items (one event always fits).
    pub fn plan(
        pending: &[Pending<'_>],
        settled: &[Option<MessageResult>],
        snapshot: &Snapshot,
        max_items: usize,
        max_units: usize,
    ) -> Group {
        let mut group = Group {
            members: Vec::new(),
            end: pending.len(),
            deferred: None,
        };
        let mut version = snapshot.account.as_ref().map(|v| v.version);
        let mut items = 1; // the loan write or version check
        let mut facts: HashSet<&SourceRef> = HashSet::new();
        let mut allocations: HashSet<SourceRef> = HashSet::new();
        for (index, p) in pending.iter().enumerate() {
            if settled[index].is_some() {
                continue;
            }
            if group.members.len() >= max_units || facts.contains(&p.event.source) {
                group.end = index;
                break;
            }
            let target = p
                .event
                .reversal_target()
                .and_then(|t| snapshot.allocations.get(t));
            let (judged, cost, touches) = match apply(group.state(snapshot), &p.event, target) {
                Outcome::Deferred(why) => {
                    group.end = index;
                    group.deferred = Some(why);
                    break;
                }
                Outcome::Applied(applied) => {
                    let touches = applied.allocation.as_ref().map(|write| match write {
                        AllocationWrite::Record(stored) => stored.payment.clone(),
                        AllocationWrite::MarkReversed { payment, .. } => payment.clone(),
                    });
                    let cost = 1 + usize::from(touches.is_some()) + applied.outbox.len();
                    (Judged::Apply(applied), cost, touches)
                }
                Outcome::Stale { .. } => (Judged::Stale, 1, None),
                Outcome::Rejected(rejection) => (Judged::Reject(rejection), 2, None),
            };
            let touched_twice = touches.as_ref().is_some_and(|t| allocations.contains(t));
            let full = !group.members.is_empty() && items + cost > max_items;
            if touched_twice || full {
                group.end = index;
                break;
            }
            items += cost;
            facts.insert(&p.event.source);
            allocations.extend(touches);
            let expected_version = version;
            if let Judged::Apply(_) = judged {
                version = Some(version.map_or(1, |v| v + 1));
            }
            group.members.push(Member {
                index,
                expected_version,
                judged,
            });
        }
        group
    }

    /// The loan as the group's members so far leave it.
    fn state<'s>(&'s self, snapshot: &'s Snapshot) -> Option<&'s LoanAccount> {
        self.members
            .iter()
            .rev()
            .find_map(|m| match &m.judged {
                Judged::Apply(applied) => Some(&applied.account),
                _ => None,
            })
            .or(snapshot.account.as_ref().map(|v| &v.account))
    }

    /// The units of work of the group, in order.
    pub fn units<'a>(&'a self, pending: &'a [Pending<'a>]) -> Vec<UnitOfWork<'a>> {
        self.members
            .iter()
            .map(|m| {
                let p = &pending[m.index];
                let effect = match &m.judged {
                    Judged::Apply(applied) => Effect::Apply(applied),
                    Judged::Stale => Effect::Stale,
                    Judged::Reject(rejection) => {
                        Effect::Reject(p.quarantine_entry(rejection.code, &rejection.reason))
                    }
                };
                UnitOfWork {
                    source: &p.event.source,
                    event_type: p.event.kind.wire_name(),
                    account_id: &p.event.account_id,
                    fingerprint: &p.fingerprint,
                    expected_version: m.expected_version,
                    effect,
                }
            })
            .collect()
    }

    /// The loan's recent facts once the group's applied facts are added (written with the loan).
    pub fn recent(&self, pending: &[Pending<'_>], snapshot: &Snapshot, now: i64) -> RecentFacts {
        let applied = self
            .members
            .iter()
            .filter(|m| matches!(m.judged, Judged::Apply(_)))
            .map(|m| {
                (
                    &pending[m.index].event.source,
                    &pending[m.index].fingerprint,
                )
            });
        match &snapshot.account {
            Some(state) => state.recent.with(applied, now),
            None => RecentFacts::default().with(applied, now),
        }
    }

    /// After the commit: carries the committed state (with `recent`, as written) into
    /// `snapshot` and answers per event.
    pub fn committed(
        self,
        snapshot: &mut Snapshot,
        recent: RecentFacts,
    ) -> Vec<(usize, MessageResult)> {
        let mut results = Vec::with_capacity(self.members.len());
        let mut last_state = None;
        for member in self.members {
            let result = match member.judged {
                Judged::Apply(applied) => {
                    let Applied {
                        account,
                        allocation,
                        ..
                    } = *applied;
                    match allocation {
                        Some(AllocationWrite::Record(stored)) => {
                            snapshot.allocations.insert(stored.payment.clone(), stored);
                        }
                        Some(AllocationWrite::MarkReversed { payment, reversal }) => {
                            if let Some(stored) = snapshot.allocations.get_mut(&payment) {
                                stored.reversed_by = Some(reversal);
                            }
                        }
                        None => {}
                    }
                    let version = member.expected_version.map_or(1, |v| v + 1);
                    last_state = Some((account, version));
                    MessageResult::Applied
                }
                Judged::Stale => MessageResult::Stale,
                Judged::Reject(rejection) => {
                    tracing::warn!(code = rejection.code, "business rejection quarantined");
                    MessageResult::Quarantined {
                        code: rejection.code.to_owned(),
                    }
                }
            };
            results.push((member.index, result));
        }
        if let Some((account, version)) = last_state {
            snapshot.account = Some(Versioned {
                account,
                version,
                recent,
            });
        }
        results
    }
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
        )
    }

    #[test]
    fn when_events_fit_should_chain_their_versions_in_one_group() {
        let group = plan(&[open(), pay("p1"), pay("p2")], MAX_TRANSACTION_ITEMS);
        let versions: Vec<_> = group.members.iter().map(|m| m.expected_version).collect();
        assert_eq!(versions, [None, Some(1), Some(2)]);
        assert_eq!(group.end, 3);
    }

    #[test]
    fn when_a_fact_repeats_should_end_the_group_before_the_repeat() {
        let group = plan(&[open(), pay("p1"), pay("p1")], MAX_TRANSACTION_ITEMS);
        assert_eq!(group.members.len(), 2);
        assert_eq!(group.end, 2);
    }

    #[test]
    fn when_the_item_budget_is_reached_should_end_the_group_but_always_take_one_event() {
        // open = claim + outbox; a payment = claim + allocation + outbox; plus the loan.
        let group = plan(&[open(), pay("p1"), pay("p2")], 6);
        assert_eq!(group.end, 2);
        let group = plan(&[open(), pay("p1")], 1);
        assert_eq!(group.members.len(), 1);
        assert_eq!(group.end, 1);
    }

    #[test]
    fn when_the_first_event_is_deferred_should_plan_nothing_and_say_why() {
        let group = plan(&[pay("p1"), open()], MAX_TRANSACTION_ITEMS);
        assert!(group.members.is_empty());
        assert_eq!(group.end, 0);
        assert_eq!(group.deferred, Some(Deferral::AccountNotOpened));
    }

    #[test]
    fn when_a_group_commits_should_list_its_applied_facts_only_as_recent() {
        let usd = body("PAYMENT_SETTLED", "usd", r#","amountMinor":100"#).replace("EUR", "USD");
        let bodies = [open(), usd, pay("p1")];
        let pending = pending(&bodies);
        let settled = vec![None; pending.len()];
        let mut snapshot = Snapshot::default();
        let group = Group::plan(&pending, &settled, &snapshot, MAX_TRANSACTION_ITEMS, 9);
        assert!(matches!(group.members[1].judged, Judged::Reject(_)));
        let recent = group.recent(&pending, &snapshot, 1_000);
        group.committed(&mut snapshot, recent);
        let listed = |p: &Pending<'_>| {
            snapshot
                .account
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
        );
        let members: Vec<_> = group.members.iter().map(|m| m.index).collect();
        assert_eq!(members, [0, 2]);
        assert_eq!(group.members[1].expected_version, Some(1));
    }
}
