use aws_sdk_dynamodb::types::Put;

use super::*;

fn put(pk: &str) -> TransactWriteItem {
    let item = items::key_item((pk.to_owned(), "X".to_owned()));
    let put = Put::builder()
        .table_name("t")
        .set_item(Some(item))
        .build()
        .expect("put");
    TransactWriteItem::builder().put(put).build()
}

fn submission(pks: &[&str]) -> Submission {
    let items: Vec<TransactWriteItem> = pks.iter().map(|pk| put(pk)).collect();
    let keys = items.iter().filter_map(item_key).collect();
    Submission {
        size: items.len(),
        items,
        keys,
        last_start: None,
        reply: oneshot::channel().0,
    }
}

fn sizes(flight: &[Submission]) -> Vec<usize> {
    flight.iter().map(|s| s.items.len()).collect()
}

#[test]
fn when_submissions_fit_should_leave_in_one_flight_in_order() {
    let mut waiting: VecDeque<Submission> = [
        submission(&["a1", "a2"]),
        submission(&["b1"]),
        submission(&["c1", "c2", "c3"]),
    ]
    .into();
    let flight = next_flight(&mut waiting, MAX_TRANSACTION_ITEMS);
    assert_eq!(sizes(&flight), [2, 1, 3]);
    assert!(waiting.is_empty());
}

#[test]
fn when_the_item_limit_is_reached_should_keep_the_rest_for_the_next_flight() {
    let mut waiting: VecDeque<Submission> = [
        submission(&["a1", "a2"]),
        submission(&["b1", "b2"]),
        submission(&["c1"]),
    ]
    .into();
    let flight = next_flight(&mut waiting, 3);
    // b does not fit beside a; c still does.
    assert_eq!(sizes(&flight), [2, 1]);
    assert_eq!(sizes(&next_flight(&mut waiting, 3)), [2]);
    // A submission larger than the limit still leaves, alone.
    let mut big: VecDeque<Submission> = [submission(&["d1", "d2", "d3", "d4"])].into();
    assert_eq!(sizes(&next_flight(&mut big, 3)), [4]);
}

#[test]
fn when_two_submissions_touch_one_item_should_never_share_a_flight() {
    let mut waiting: VecDeque<Submission> = [
        submission(&["claim-x", "a"]),
        submission(&["claim-x", "b"]),
        submission(&["c"]),
    ]
    .into();
    assert_eq!(
        sizes(&next_flight(&mut waiting, MAX_TRANSACTION_ITEMS)),
        [2, 1]
    );
    let second = next_flight(&mut waiting, MAX_TRANSACTION_ITEMS);
    assert_eq!(second[0].keys[1].0, "b");
}
