//! Unit tests of group planning and commit: which facts share a group, where it ends, what a
//! commit lists as recent.

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
