use serde_json::json;

use super::*;
use crate::change::{DelinquencyChanged, later_than};

pub(crate) fn change(
    from: &str,
    to: &str,
    occurred_at: &str,
    event_id: &str,
) -> DelinquencyChanged {
    let envelope = json!({"detail-type": "DelinquencyChanged", "detail": {
        "eventId": event_id, "accountId": "acc_1", "occurredAt": occurred_at,
        "fromBucket": from, "toBucket": to, "dpd": 30}});
    DelinquencyChanged::parse(&envelope)
        .expect("valid")
        .expect("a DelinquencyChanged")
}

#[test]
fn when_the_bucket_moves_should_notify_only_a_worsening_into_30_days_or_more() {
    let notifies = |from, to| change(from, to, "2026-10-01T00:00:00Z", "e").calls_for_notice();
    for (from, to) in [
        ("DPD_1_29", "DPD_30_59"),
        ("CURRENT", "DPD_30_59"),
        ("DPD_30_59", "DPD_60_89"),
        ("DPD_60_89", "DPD_90_PLUS"),
        ("CURRENT", "DPD_90_PLUS"),
    ] {
        assert!(notifies(from, to), "{from} -> {to}");
    }
    for (from, to) in [
        ("CURRENT", "DPD_1_29"),
        ("DPD_60_89", "DPD_30_59"),
        ("DPD_90_PLUS", "DPD_60_89"),
        ("DPD_30_59", "DPD_1_29"),
        ("DPD_30_59", "CURRENT"),
        ("DPD_90_PLUS", "CURRENT"),
    ] {
        assert!(!notifies(from, to), "{from} -> {to}");
    }
}

#[test]
fn when_changes_are_ordered_should_go_by_occurred_at_then_event_id() {
    let worse = change("DPD_1_29", "DPD_30_59", "2026-10-31T23:59:59Z", "evt_b");
    let cure = change("DPD_30_59", "CURRENT", "2026-11-03T10:00:00Z", "evt_a");
    assert!(worse.order() < cure.order(), "occurredAt first");
    // Sub-second and offset forms compare by instant, not by text.
    let fraction = change("DPD_1_29", "DPD_30_59", "2026-10-31T23:59:59.5Z", "evt_a");
    let offset = change(
        "DPD_1_29",
        "DPD_30_59",
        "2026-11-01T00:59:59+01:00",
        "evt_c",
    );
    assert!(worse.order() < fraction.order());
    assert!(
        offset.order() > worse.order(),
        "same instant: the event id breaks the tie"
    );
    let recorded = cure.record();
    assert_eq!(
        later_than(Some(recorded.clone()), &worse.order()),
        Some(recorded)
    );
    assert_eq!(
        later_than(Some(worse.record()), &worse.order()),
        None,
        "itself is not later"
    );
    assert_eq!(later_than(Some(worse.record()), &cure.order()), None);
}

#[test]
fn when_a_detail_lacks_its_from_bucket_or_time_should_refuse_it() {
    let mut envelope = json!({"detail-type": "DelinquencyChanged", "detail": {
        "eventId": "e", "accountId": "acc_1", "occurredAt": "yesterday",
        "fromBucket": "DPD_1_29", "toBucket": "DPD_30_59"}});
    let err = DelinquencyChanged::parse(&envelope).expect_err("bad time");
    assert!(err.contains("occurredAt"), "{err}");
    envelope["detail"]["occurredAt"] = json!("2026-10-01T00:00:00Z");
    envelope["detail"]
        .as_object_mut()
        .expect("detail")
        .remove("fromBucket");
    let err = DelinquencyChanged::parse(&envelope).expect_err("no from");
    assert!(err.contains("fromBucket"), "{err}");
}

#[test]
fn when_a_batch_is_counted_should_count_only_the_calls_it_made_as_actions() {
    let sent_now = ActionOutcome {
        status: ActionStatus::Sent,
        executed_now: true,
    };
    let settled_before = ActionOutcome {
        executed_now: false,
        ..sent_now
    };
    let mut counts = BatchCounts::default();
    for result in [
        MessageResult::Handled {
            action: Some(sent_now),
        },
        MessageResult::Duplicate {
            action: Some(settled_before),
        },
        MessageResult::Duplicate {
            action: Some(sent_now),
        },
        MessageResult::Ignored,
        MessageResult::Retry {
            reason: "receiver down".into(),
        },
    ] {
        counts.count(&result);
    }
    let metric = |name: &str| {
        counts
            .metrics()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    };
    assert_eq!(metric("Applied"), Some(1));
    assert_eq!(metric("Duplicate"), Some(2));
    assert_eq!(
        metric("ActionsExecuted"),
        Some(2),
        "a twin's late call counts too"
    );
    assert_eq!((metric("Ignored"), metric("Retried")), (Some(1), Some(1)));
}

#[test]
fn when_a_detail_is_of_an_unknown_schema_major_should_refuse_it_and_read_one_without_as_1() {
    let mut envelope = json!({"detail-type": "DelinquencyChanged", "detail": {
        "schemaVersion": 2, "eventId": "e", "accountId": "acc_1",
        "occurredAt": "2026-10-01T00:00:00Z", "fromBucket": "DPD_1_29", "toBucket": "DPD_30_59"}});
    let err = DelinquencyChanged::parse(&envelope).expect_err("version 2");
    assert!(err.contains("schemaVersion 2 is not supported"), "{err}");
    envelope["detail"]["schemaVersion"] = json!(1);
    assert!(matches!(DelinquencyChanged::parse(&envelope), Ok(Some(_))));
    envelope["detail"]
        .as_object_mut()
        .expect("detail")
        .remove("schemaVersion");
    assert!(matches!(DelinquencyChanged::parse(&envelope), Ok(Some(_))));
}
