//! The collections consumer against real DynamoDB engines (both must agree) and an in-process
//! HTTP receiver (wiremock) that records every call and answers from a plan.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use collections::{ActionOutcome, CONSUMER, CollectionsHandler, MessageResult, Notifier};
use integration_tests::Engine;
use integration_tests::faults::{Fault, FaultPlan};
use integration_tests::servicing::{Servicing, sqs_message};
use serde_json::{Value, json};
use servicing_domain::{AccountId, Bucket, Fingerprint, SourceRef};
use servicing_store::schema::LatestDelinquencyRecord;
use servicing_store::{ActionIntent, ActionStatus, CommitOutcome, Effect, Lease, UnitOfWork};

on_both_engines!(
    when_delinquency_is_delivered_5_times_should_notify_once,
    when_stopped_between_intent_and_call_should_execute_the_pending_intent_on_replay,
    when_the_receiver_fails_transiently_should_retry_with_the_same_action_id,
    when_the_receiver_rejects_definitively_should_record_it_and_not_retry,
    when_the_endpoint_is_moved_or_unauthorised_should_retry_not_drop_the_notification,
    when_a_twin_delivery_holds_the_lease_should_not_call_at_once_nor_overwrite_sent,
    when_the_envelope_is_bad_or_collides_should_quarantine,
    when_a_partial_payment_improves_60_89_to_30_59_should_notify_no_one,
    when_a_cured_account_relapses_should_notify_again,
    when_a_cure_is_handled_before_the_worsening_it_follows_should_not_notify,
    when_a_cure_lands_while_the_worsening_intent_is_pending_should_not_notify,
    when_a_later_change_is_recorded_between_the_read_and_the_commit_should_judge_again,
    when_a_receiver_that_cannot_deduplicate_got_the_call_but_the_answer_was_lost_should_not_call_again,
    when_a_receiver_that_cannot_deduplicate_says_it_has_nothing_should_call_once_more,
    when_a_holder_dies_while_calling_a_receiver_that_cannot_deduplicate_should_ask_before_calling,
    when_the_receivers_status_does_not_answer_should_not_call,
);

/// A receiver that does NOT deduplicate: every call it accepts is a notice to the customer.
/// `POST /notify` answers from `plan` (status, delay in ms; then 200 at once); a call answered
/// 2xx is a notice even when its answer arrives too late. `GET /status/<actionId>` answers
/// from `status_plan`, then 200 `{"received": <whether it holds a notice for the action>}`.
#[derive(Clone, Default)]
struct PlainReceiver {
    calls: Arc<Mutex<Vec<String>>>,
    notices: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
    plan: Arc<Mutex<VecDeque<(u16, u64)>>>,
    status_plan: Arc<Mutex<VecDeque<u16>>>,
}

impl wiremock::Respond for PlainReceiver {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        if request.method.as_str() == "GET" {
            let id = request
                .url
                .path()
                .trim_start_matches("/status/")
                .replace("%20", " ");
            self.asked.lock().expect("asked").push(id.clone());
            let has = self.notices.lock().expect("notices").contains(&id);
            return match self.status_plan.lock().expect("plan").pop_front() {
                Some(status) => wiremock::ResponseTemplate::new(status),
                None => wiremock::ResponseTemplate::new(200)
                    .set_body_json(serde_json::json!({"received": has})),
            };
        }
        let key = request
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.calls.lock().expect("calls").push(key.clone());
        let (status, delay) = self
            .plan
            .lock()
            .expect("plan")
            .pop_front()
            .unwrap_or((200, 0));
        if (200..300).contains(&status) {
            self.notices.lock().expect("notices").push(key);
        }
        wiremock::ResponseTemplate::new(status).set_delay(Duration::from_millis(delay))
    }
}

impl PlainReceiver {
    async fn start(&self) -> wiremock::MockServer {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(self.clone())
            .mount(&server)
            .await;
        server
    }

    fn count(list: &Arc<Mutex<Vec<String>>>) -> usize {
        list.lock().expect("list").len()
    }

    /// A handler calling it with a short call timeout (an answer later than 300 ms is lost).
    fn handler(servicing: &Servicing, server: &wiremock::MockServer) -> CollectionsHandler {
        let notifier = Notifier::new(
            &format!("{}/notify", server.uri()),
            Duration::from_millis(300),
        )
        .expect("notifier")
        .without_deduplication(&format!("{}/status", server.uri()))
        .expect("status url");
        CollectionsHandler::new(servicing.store(CONSUMER), notifier)
    }
}

/// Issue 32: after a timeout the notifier called again with the same key, trusting the
/// receiver to deduplicate; one that cannot sent the customer the notice twice.
async fn when_a_receiver_that_cannot_deduplicate_got_the_call_but_the_answer_was_lost_should_not_call_again(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = PlainReceiver::default();
    // It takes the notice, but its answer comes after the call's timeout.
    receiver.plan.lock().expect("plan").push_back((200, 1_500));
    let server = receiver.start().await;
    let handler = PlainReceiver::handler(&servicing, &server);
    let first = deliver(&handler, "m1", envelope).await;
    assert!(matches!(first, MessageResult::Retry { .. }), "{first:?}");
    let action_id = receiver.calls.lock().expect("calls")[0].clone();
    assert_eq!(
        action_status(&servicing, &action_id).await.0,
        "UNKNOWN",
        "{engine:?}: an answer lost is an unknown outcome, not a failure to repeat"
    );
    // The redelivery asks first; the receiver has it: settled, never called again.
    for round in 0..2 {
        let again = deliver(&handler, &format!("m1-{round}"), envelope).await;
        assert!(
            matches!(again, MessageResult::Duplicate { .. }),
            "{again:?}"
        );
    }
    assert_eq!(
        (
            PlainReceiver::count(&receiver.calls),
            PlainReceiver::count(&receiver.notices)
        ),
        (1, 1),
        "{engine:?}: one call, one notice"
    );
    assert_eq!(
        PlainReceiver::count(&receiver.asked),
        1,
        "{engine:?}: asked once"
    );
    assert_eq!(action_status(&servicing, &action_id).await.0, "SENT");
}

async fn when_a_receiver_that_cannot_deduplicate_says_it_has_nothing_should_call_once_more(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = PlainReceiver::default();
    // A 502: it may or may not have done the work; here it did not.
    receiver.plan.lock().expect("plan").push_back((502, 0));
    let server = receiver.start().await;
    let handler = PlainReceiver::handler(&servicing, &server);
    assert!(matches!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Retry { .. }
    ));
    let action_id = receiver.calls.lock().expect("calls")[0].clone();
    assert_eq!(action_status(&servicing, &action_id).await.0, "UNKNOWN");
    let again = deliver(&handler, "m2", envelope).await;
    assert_eq!(
        again,
        MessageResult::Duplicate { action: SENT_NOW },
        "{engine:?}"
    );
    assert_eq!(
        (
            PlainReceiver::count(&receiver.asked),
            PlainReceiver::count(&receiver.calls),
            PlainReceiver::count(&receiver.notices)
        ),
        (1, 2, 1),
        "{engine:?}: asked, then called once more: one notice"
    );
    // What the status said is on the record, written before the call it led to.
    let action = action_item(&servicing, &action_id).await;
    assert_eq!(
        action.receiver_said.as_deref(),
        Some("not delivered"),
        "{engine:?}"
    );
    assert!(
        action.receiver_asked_at <= action.updated_at,
        "{engine:?}: {action:?}"
    );
    // A call turned away (503: not now) is simply retried: nothing to ask.
    let turned_away = PlainReceiver::default();
    turned_away.plan.lock().expect("plan").push_back((503, 0));
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let server = turned_away.start().await;
    let handler = PlainReceiver::handler(&servicing, &server);
    let envelope = entering_30(&envelopes);
    deliver(&handler, "m1", envelope).await;
    let action_id = turned_away.calls.lock().expect("calls")[0].clone();
    assert_eq!(action_status(&servicing, &action_id).await.0, "PENDING");
    deliver(&handler, "m2", envelope).await;
    assert_eq!(
        (
            PlainReceiver::count(&turned_away.asked),
            PlainReceiver::count(&turned_away.notices)
        ),
        (0, 1),
        "{engine:?}"
    );
}

/// A holder that dies while `SENDING` leaves no outcome at all: whoever takes the action over
/// once its lease has run out asks a receiver that cannot deduplicate first — the dead call
/// may have reached it — and calls only if it says it has nothing.
async fn when_a_holder_dies_while_calling_a_receiver_that_cannot_deduplicate_should_ask_before_calling(
    engine: Engine,
) {
    for reached in [true, false] {
        let servicing = Servicing::new(engine).await;
        let envelopes = delinquency_envelopes(&servicing).await;
        let envelope = entering_30(&envelopes);
        let receiver = PlainReceiver::default();
        // Turned away first (503: reached nobody): PENDING.
        receiver.plan.lock().expect("plan").push_back((503, 0));
        let server = receiver.start().await;
        let handler = PlainReceiver::handler(&servicing, &server);
        deliver(&handler, "m1", envelope).await;
        let action_id = receiver.calls.lock().expect("calls")[0].clone();
        assert_eq!(action_status(&servicing, &action_id).await.0, "PENDING");
        // A twin takes the lease, calls, and dies before it records anything.
        let store = servicing.store(CONSUMER);
        let expired = servicing_store::epoch_millis() - 1;
        assert_eq!(
            store
                .lease_action(&action_id, "dead-twin", expired)
                .await
                .expect("lease"),
            Lease::Acquired {
                from: ActionStatus::Pending
            }
        );
        if reached {
            receiver
                .notices
                .lock()
                .expect("notices")
                .push(action_id.clone());
        }
        assert_eq!(action_status(&servicing, &action_id).await.0, "SENDING");
        let taken_over = deliver(&handler, "m2", envelope).await;
        let settled = if reached { SENT_BEFORE } else { SENT_NOW };
        assert_eq!(
            taken_over,
            MessageResult::Duplicate { action: settled },
            "{engine:?} reached={reached}"
        );
        let action = action_item(&servicing, &action_id).await;
        assert_eq!(
            (
                PlainReceiver::count(&receiver.asked),
                PlainReceiver::count(&receiver.calls),
                PlainReceiver::count(&receiver.notices),
                action.status.as_str(),
                action.receiver_said.as_deref(),
            ),
            (
                1,
                if reached { 1 } else { 2 },
                1,
                "SENT",
                Some(if reached {
                    "delivered"
                } else {
                    "not delivered"
                })
            ),
            "{engine:?} reached={reached}: asked first, one notice"
        );
    }
}

async fn when_the_receivers_status_does_not_answer_should_not_call(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = PlainReceiver::default();
    receiver.plan.lock().expect("plan").push_back((504, 0));
    receiver
        .status_plan
        .lock()
        .expect("plan")
        .extend([500, 404]);
    let server = receiver.start().await;
    let handler = PlainReceiver::handler(&servicing, &server);
    // The call (504: unknown), two askings that say nothing (a server error, a bare 404: a
    // wrong path or a gateway's proves nothing), one that says "not received".
    for round in 0..4 {
        let result = deliver(&handler, &format!("m{round}"), envelope).await;
        if round < 3 {
            assert!(matches!(result, MessageResult::Retry { .. }), "{result:?}");
        } else {
            assert_eq!(
                result,
                MessageResult::Duplicate { action: SENT_NOW },
                "{engine:?}"
            );
        }
    }
    assert_eq!(
        (
            PlainReceiver::count(&receiver.calls),
            PlainReceiver::count(&receiver.asked),
            PlainReceiver::count(&receiver.notices)
        ),
        (2, 3, 1),
        "{engine:?}: no call while the status does not answer; then one"
    );
}

/// Records every call (its `Idempotency-Key` and body); answers from `plan`, then 200.
#[derive(Clone, Default)]
pub(crate) struct Receiver {
    pub calls: Arc<Mutex<Vec<(String, Value)>>>,
    pub plan: Arc<Mutex<VecDeque<u16>>>,
}

impl wiremock::Respond for Receiver {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let key = request
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        self.calls.lock().expect("calls").push((key, body));
        let status = self.plan.lock().expect("plan").pop_front().unwrap_or(200);
        wiremock::ResponseTemplate::new(status).set_body_raw(r#"{"ok":true}"#, "application/json")
    }
}

impl Receiver {
    /// Serves it on a loopback port (wiremock) until the server is dropped.
    pub async fn start(&self) -> wiremock::MockServer {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(self.clone())
            .mount(&server)
            .await;
        server
    }

    pub fn keys(&self) -> Vec<String> {
        self.calls
            .lock()
            .expect("calls")
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Notifications as the customer experiences them: one per distinct key.
    pub fn distinct(&self) -> BTreeSet<String> {
        self.keys().into_iter().collect()
    }
}

/// The `DelinquencyChanged` events of the delinquent sample, as EventBridge delivers them to SQS.
pub(crate) async fn delinquency_envelopes(servicing: &Servicing) -> Vec<Value> {
    servicing.deliver_fixture("delinquent.jsonl").await;
    servicing
        .outbox("acc_7001")
        .await
        .into_iter()
        .filter(|d| d["eventType"] == "DelinquencyChanged")
        .map(|detail| {
            json!({"version": "0", "id": format!("eb-{}", detail["eventId"].as_str().unwrap_or_default()),
                   "detail-type": "DelinquencyChanged", "source": "servicing.account-state",
                   "account": "000000000000", "time": detail["occurredAt"], "region": "us-east-1",
                   "resources": [], "detail": detail})
        })
        .collect()
}

pub(crate) fn collections(
    servicing: &Servicing,
    receiver: &wiremock::MockServer,
    faults: Option<&FaultPlan>,
) -> CollectionsHandler {
    let store = match faults {
        Some(faults) => servicing.faulty_store(CONSUMER, faults),
        None => servicing.store(CONSUMER),
    };
    CollectionsHandler::new(
        store,
        Notifier::new(&receiver.uri(), Duration::from_secs(2)).expect("notifier"),
    )
}

async fn deliver(handler: &CollectionsHandler, id: &str, envelope: &Value) -> MessageResult {
    handler
        .process(&[sqs_message(id, &envelope.to_string(), 1)])
        .await
        .remove(0)
        .1
}

fn entering_30(envelopes: &[Value]) -> &Value {
    envelopes
        .iter()
        .find(|e| e["detail"]["toBucket"] == "DPD_30_59")
        .expect("DPD_30_59 event")
}

async fn action_status(servicing: &Servicing, action_id: &str) -> (String, String) {
    let action = action_item(servicing, action_id).await;
    (action.status, action.attempts.to_string())
}

async fn action_item(
    servicing: &Servicing,
    action_id: &str,
) -> servicing_store::schema::ActionItem {
    let item = servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .key("pk", AttributeValue::S(format!("ACTION#{action_id}")))
        .key("sk", AttributeValue::S("ACTION".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .expect("action recorded");
    servicing_store::schema::from_item(item).expect("an action record")
}

const SENT_NOW: Option<ActionOutcome> = Some(ActionOutcome {
    status: ActionStatus::Sent,
    executed_now: true,
});
const SENT_BEFORE: Option<ActionOutcome> = Some(ActionOutcome {
    status: ActionStatus::Sent,
    executed_now: false,
});
const SUPERSEDED: Option<ActionOutcome> = Some(ActionOutcome {
    status: ActionStatus::Superseded,
    executed_now: false,
});

async fn when_delinquency_is_delivered_5_times_should_notify_once(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    assert_eq!(envelopes.len(), 3, "into 1-29, into 30-59, cure");
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    for round in 0..5 {
        for (i, envelope) in envelopes.iter().enumerate() {
            let result = deliver(&handler, &format!("r{round}-e{i}"), envelope).await;
            let actionable = envelope["detail"]["toBucket"] == "DPD_30_59";
            let expected = match (round, actionable) {
                (0, true) => MessageResult::Handled { action: SENT_NOW },
                (0, false) => MessageResult::Handled { action: None },
                (_, true) => MessageResult::Duplicate {
                    action: SENT_BEFORE,
                },
                (_, false) => MessageResult::Duplicate { action: None },
            };
            assert_eq!(result, expected, "round {round}, event {i}");
        }
    }
    let event_id = entering_30(&envelopes)["detail"]["eventId"]
        .as_str()
        .expect("id")
        .to_owned();
    let action_id = format!("collections_notification:acc_7001:DPD_30_59:{event_id}");
    assert_eq!(
        receiver.keys(),
        vec![action_id.clone()],
        "exactly one call, keyed by the actionId"
    );
    let (_, body) = receiver.calls.lock().expect("calls")[0].clone();
    // The published contract of the body (docs/schemas/).
    let schema = integration_tests::schema::load("schemas/collections-notification.schema.json");
    let problems = integration_tests::schema::violations(&schema, &body);
    assert!(problems.is_empty(), "{problems:?}: {body:#}");
    assert_eq!(body["actionId"].as_str(), Some(action_id.as_str()));
    assert_eq!(
        (
            body["accountId"].as_str(),
            body["toBucket"].as_str(),
            body["dpd"].as_u64()
        ),
        (Some("acc_7001"), Some("DPD_30_59"), Some(35))
    );
    assert_eq!(
        action_status(&servicing, &action_id).await,
        ("SENT".into(), "1".into())
    );
}

async fn when_stopped_between_intent_and_call_should_execute_the_pending_intent_on_replay(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let faults = FaultPlan::default();
    let handler = collections(&servicing, &server, Some(&faults));

    // The commit of claim + intent happens, then the function "dies" before the call.
    faults.push(Fault::LoseResponse);
    assert!(matches!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Retry { .. }
    ));
    assert!(receiver.keys().is_empty(), "no call was made");
    let event_id = envelope["detail"]["eventId"].as_str().expect("id");
    let action_id = format!("collections_notification:acc_7001:DPD_30_59:{event_id}");
    assert_eq!(action_status(&servicing, &action_id).await.0, "PENDING");

    // Replays (another instance too): the first finds the intent pending and executes it.
    let other = collections(&servicing, &server, None);
    assert_eq!(
        deliver(&other, "m1", envelope).await,
        MessageResult::Duplicate { action: SENT_NOW }
    );
    for i in 0..3 {
        assert_eq!(
            deliver(&handler, &format!("m1-{i}"), envelope).await,
            MessageResult::Duplicate {
                action: SENT_BEFORE
            }
        );
    }
    assert_eq!(
        receiver.keys(),
        vec![action_id],
        "one notification, same actionId"
    );
}

async fn when_the_receiver_fails_transiently_should_retry_with_the_same_action_id(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = Receiver::default();
    receiver.plan.lock().expect("plan").extend([503, 429]);
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    assert!(
        matches!(deliver(&handler, "m1", envelope).await, MessageResult::Retry { reason } if reason.contains("HTTP 503"))
    );
    assert!(
        matches!(deliver(&handler, "m1", envelope).await, MessageResult::Retry { reason } if reason.contains("HTTP 429"))
    );
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Duplicate { action: SENT_NOW }
    );
    assert_eq!(receiver.keys().len(), 3, "three attempts");
    assert_eq!(
        receiver.distinct().len(),
        1,
        "one notification: every attempt carried the same actionId"
    );
    let action_id = receiver.keys()[0].clone();
    assert_eq!(
        action_status(&servicing, &action_id).await,
        ("SENT".into(), "3".into())
    );
}

async fn when_the_endpoint_is_moved_or_unauthorised_should_retry_not_drop_the_notification(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = Receiver::default();
    // Before: each of these was a final REJECTED — a customer notice dropped because the
    // endpoint moved or its credentials lapsed.
    receiver
        .plan
        .lock()
        .expect("plan")
        .extend([301, 401, 403, 404]);
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);
    for status in ["HTTP 301", "HTTP 401", "HTTP 403", "HTTP 404"] {
        assert!(
            matches!(deliver(&handler, "m1", envelope).await, MessageResult::Retry { reason } if reason.contains(status)),
            "{status}"
        );
    }
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Duplicate { action: SENT_NOW }
    );
    assert_eq!(
        receiver.distinct().len(),
        1,
        "one actionId for every attempt"
    );
    let action_id = receiver.keys()[0].clone();
    assert_eq!(
        action_status(&servicing, &action_id).await,
        ("SENT".into(), "5".into())
    );
}

async fn when_a_twin_delivery_holds_the_lease_should_not_call_at_once_nor_overwrite_sent(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = Receiver::default();
    receiver.plan.lock().expect("plan").push_back(503);
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);
    // The intent is recorded and the first call fails: PENDING.
    assert!(matches!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Retry { .. }
    ));
    let action_id = receiver.keys()[0].clone();
    // A twin delivery takes the lease and is calling right now.
    let store = servicing.store(CONSUMER);
    let until = servicing_store::epoch_millis() + 60_000;
    assert_eq!(
        store
            .lease_action(&action_id, "twin", until)
            .await
            .expect("lease"),
        Lease::Acquired {
            from: ActionStatus::Pending
        }
    );
    let busy = deliver(&handler, "m1", envelope).await;
    assert!(
        matches!(&busy, MessageResult::Retry { reason } if reason.contains("another delivery")),
        "{busy:?}"
    );
    assert_eq!(
        receiver.keys().len(),
        1,
        "no second call while the twin holds the lease"
    );
    // The twin's call fails and it releases the lease; another twin takes it and dies
    // mid-call: once its lease has run out, a delivery takes over, with the same actionId.
    store
        .record_action(
            &action_id,
            "twin",
            ActionStatus::Pending,
            Some(503),
            "failed",
        )
        .await
        .expect("record");
    let expired = servicing_store::epoch_millis() - 1;
    assert_eq!(
        store
            .lease_action(&action_id, "dead-twin", expired)
            .await
            .expect("lease"),
        Lease::Acquired {
            from: ActionStatus::Pending
        }
    );
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Duplicate { action: SENT_NOW }
    );
    assert_eq!(receiver.keys().len(), 2);
    assert_eq!(receiver.distinct().len(), 1, "one actionId");
    // The dead twin's late answer cannot overwrite the SENT.
    store
        .record_action(
            &action_id,
            "dead-twin",
            ActionStatus::Rejected,
            Some(422),
            "late",
        )
        .await
        .expect("ignored");
    assert_eq!(action_status(&servicing, &action_id).await.0, "SENT");
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Duplicate {
            action: Some(ActionOutcome {
                status: ActionStatus::Sent,
                executed_now: false,
            })
        }
    );
    assert_eq!(
        receiver.keys().len(),
        2,
        "a settled action is never called again"
    );
}

async fn when_the_receiver_rejects_definitively_should_record_it_and_not_retry(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let envelope = entering_30(&envelopes);
    let receiver = Receiver::default();
    receiver.plan.lock().expect("plan").push_back(422);
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    let rejected_now = Some(ActionOutcome {
        status: ActionStatus::Rejected,
        executed_now: true,
    });
    let rejected_before = Some(ActionOutcome {
        status: ActionStatus::Rejected,
        executed_now: false,
    });
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Handled {
            action: rejected_now
        }
    );
    assert_eq!(
        deliver(&handler, "m1", envelope).await,
        MessageResult::Duplicate {
            action: rejected_before
        }
    );
    assert_eq!(receiver.keys().len(), 1, "not retried");
    assert_eq!(
        action_status(&servicing, &receiver.keys()[0]).await.0,
        "REJECTED"
    );
}

async fn when_the_envelope_is_bad_or_collides_should_quarantine(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    let mut no_id = entering_30(&envelopes).clone();
    no_id["detail"]
        .as_object_mut()
        .expect("detail")
        .remove("eventId");
    let mut bad_bucket = entering_30(&envelopes).clone();
    bad_bucket["detail"]["toBucket"] = json!("DPD_31_60");
    let original = &envelopes[0];
    let mut collision = original.clone();
    collision["detail"]["dpd"] = json!(99);
    let fee = json!({"detail-type": "FeeAssessed", "detail": {"eventId": "evt_fee"}});

    assert!(matches!(
        handler.process(&[sqs_message("bad1", "not json", 1)]).await[0].1,
        MessageResult::Quarantined { .. }
    ));
    assert!(
        matches!(deliver(&handler, "bad2", &no_id).await, MessageResult::Quarantined { reason } if reason == "detail.eventId is missing")
    );
    assert!(
        matches!(deliver(&handler, "bad3", &bad_bucket).await, MessageResult::Quarantined { reason } if reason.contains("not a bucket"))
    );
    assert_eq!(
        deliver(&handler, "ok", original).await,
        MessageResult::Handled { action: None }
    );
    assert!(
        matches!(deliver(&handler, "col", &collision).await, MessageResult::Quarantined { reason } if reason.starts_with("collision"))
    );
    assert_eq!(deliver(&handler, "fee", &fee).await, MessageResult::Ignored);
    assert_eq!(servicing.quarantine().await.len(), 4);
    assert!(receiver.keys().is_empty());
}

/// A `DelinquencyChanged` of `account` (event id `evt_<account>_<n>`) as account-state writes
/// it and EventBridge delivers it to SQS; `spec` is `"<occurredAt> <from> -> <to> <dpd>"`.
fn change(account: &str, n: u32, spec: &str) -> Value {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let [occurred_at, from, "->", to, dpd] = parts[..] else {
        panic!("not a change: {spec}");
    };
    let event_id = format!("evt_{account}_{n}");
    let trigger = format!("src-{event_id}");
    let detail = json!({
        "eventId": event_id, "eventType": "DelinquencyChanged", "accountId": account,
        "occurredAt": occurred_at,
        "trigger": {"sourceSystem": "scheduler", "sourceEventId": trigger},
        "fromBucket": from, "toBucket": to, "dpd": dpd.parse::<u32>().expect("dpd"),
        "triggerSourceSystem": "scheduler", "triggerSourceEventId": trigger,
    });
    json!({"version": "0", "id": format!("eb-{event_id}"), "detail-type": "DelinquencyChanged",
           "source": "servicing.account-state", "account": "000000000000", "time": occurred_at,
           "region": "us-east-1", "resources": [], "detail": detail})
}

fn action_id_of(envelope: &Value) -> String {
    let detail = &envelope["detail"];
    format!(
        "collections_notification:{}:{}:{}",
        detail["accountId"].as_str().expect("account"),
        detail["toBucket"].as_str().expect("bucket"),
        detail["eventId"].as_str().expect("id")
    )
}

async fn action_recorded(servicing: &Servicing, action_id: &str) -> bool {
    servicing
        .client
        .get_item()
        .table_name(&servicing.table)
        .key("pk", AttributeValue::S(format!("ACTION#{action_id}")))
        .key("sk", AttributeValue::S("ACTION".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .is_some()
}

/// Delivers each envelope `times` times in a row (each time a new SQS message).
async fn deliver_all(
    handler: &CollectionsHandler,
    envelopes: &[&Value],
    times: usize,
) -> Vec<MessageResult> {
    let mut results = Vec::new();
    for (i, envelope) in envelopes.iter().enumerate() {
        for n in 0..times {
            results.push(deliver(handler, &format!("m{i}-{n}"), envelope).await);
        }
    }
    results
}

fn all_acknowledged(results: &[MessageResult]) -> bool {
    results.iter().all(|r| {
        matches!(
            r,
            MessageResult::Handled { .. } | MessageResult::Duplicate { .. }
        )
    })
}

async fn when_a_partial_payment_improves_60_89_to_30_59_should_notify_no_one(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    // Alone: an account in 60-89 pays part of its arrears.
    let improvement = change(
        "acc_8101",
        4,
        "2026-12-05T10:00:00Z DPD_60_89 -> DPD_30_59 45",
    );
    let results = deliver_all(&handler, &[&improvement], 3).await;
    assert_eq!(results[0], MessageResult::Handled { action: None });
    assert_eq!(
        results[1..],
        vec![MessageResult::Duplicate { action: None }; 2]
    );
    assert!(receiver.keys().is_empty(), "an improvement notifies no one");
    assert!(!action_recorded(&servicing, &action_id_of(&improvement)).await);

    // In an episode: into 30-59 and into 60-89 notify, the improvement back to 30-59 does not.
    let steps = [
        change("acc_8102", 1, "2026-10-02T23:59:59Z CURRENT -> DPD_1_29 1"),
        change(
            "acc_8102",
            2,
            "2026-10-31T23:59:59Z DPD_1_29 -> DPD_30_59 30",
        ),
        change(
            "acc_8102",
            3,
            "2026-11-30T23:59:59Z DPD_30_59 -> DPD_60_89 60",
        ),
        change(
            "acc_8102",
            4,
            "2026-12-05T10:00:00Z DPD_60_89 -> DPD_30_59 45",
        ),
    ];
    let results = deliver_all(&handler, &steps.iter().collect::<Vec<_>>(), 2).await;
    assert!(all_acknowledged(&results), "{results:?}");
    assert_eq!(
        receiver.keys(),
        vec![action_id_of(&steps[1]), action_id_of(&steps[2])],
        "one notice per worsening into 30+ (duplicates notify once), none for the improvement"
    );
    assert!(!action_recorded(&servicing, &action_id_of(&steps[3])).await);
}

async fn when_a_cured_account_relapses_should_notify_again(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);

    // CURRENT -> 1-29 -> 30-59 -> CURRENT (the cure ends the episode) -> 30-59 (the payment that
    // cured it is reversed): a new episode, a new notice.
    let steps = [
        change("acc_8201", 1, "2026-10-02T23:59:59Z CURRENT -> DPD_1_29 1"),
        change(
            "acc_8201",
            2,
            "2026-10-31T23:59:59Z DPD_1_29 -> DPD_30_59 30",
        ),
        change("acc_8201", 3, "2026-11-03T10:00:00Z DPD_30_59 -> CURRENT 0"),
        change(
            "acc_8201",
            4,
            "2026-11-06T09:00:00Z CURRENT -> DPD_30_59 36",
        ),
    ];
    let results = deliver_all(&handler, &steps.iter().collect::<Vec<_>>(), 3).await;
    assert!(all_acknowledged(&results), "{results:?}");
    assert_eq!(
        receiver.keys(),
        vec![action_id_of(&steps[1]), action_id_of(&steps[3])],
        "notified twice: once per episode, each once"
    );
    for step in [&steps[1], &steps[3]] {
        assert_eq!(
            action_status(&servicing, &action_id_of(step)).await,
            ("SENT".into(), "1".into())
        );
    }
}

async fn when_a_cure_is_handled_before_the_worsening_it_follows_should_not_notify(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let handler = collections(&servicing, &server, None);
    let worse = |account| change(account, 2, "2026-10-31T23:59:59Z DPD_1_29 -> DPD_30_59 30");
    let cure = |account| change(account, 3, "2026-11-03T10:00:00Z DPD_30_59 -> CURRENT 0");

    // In order: the worsening notifies, the cure after it does not.
    let (in_order_worse, in_order_cure) = (worse("acc_8301"), cure("acc_8301"));
    let results = deliver_all(
        &handler,
        &[&in_order_worse, &in_order_cure, &in_order_worse],
        2,
    )
    .await;
    assert_eq!(results[0], MessageResult::Handled { action: SENT_NOW });
    assert!(all_acknowledged(&results), "{results:?}");
    assert_eq!(receiver.keys(), vec![action_id_of(&in_order_worse)]);

    // The standard queue hands the cure over first: the late worsening sends nothing, on its
    // first delivery or any other; its action is recorded as superseded.
    let (late_worse, early_cure) = (worse("acc_8302"), cure("acc_8302"));
    let results = deliver_all(
        &handler,
        &[&early_cure, &late_worse, &early_cure, &late_worse],
        2,
    )
    .await;
    assert_eq!(
        results,
        [
            MessageResult::Handled { action: None },
            MessageResult::Duplicate { action: None },
            MessageResult::Handled { action: SUPERSEDED },
            MessageResult::Duplicate { action: SUPERSEDED },
            MessageResult::Duplicate { action: None },
            MessageResult::Duplicate { action: None },
            MessageResult::Duplicate { action: SUPERSEDED },
            MessageResult::Duplicate { action: SUPERSEDED },
        ]
    );
    assert_eq!(
        receiver.keys(),
        vec![action_id_of(&in_order_worse)],
        "no notice for acc_8302"
    );
    assert_eq!(
        action_status(&servicing, &action_id_of(&late_worse)).await,
        ("SUPERSEDED".into(), "0".into())
    );

    // A relapse after the cure is later than both: a new episode, it notifies (once).
    let relapse = change(
        "acc_8302",
        4,
        "2026-11-20T09:00:00Z CURRENT -> DPD_30_59 50",
    );
    let results = deliver_all(&handler, &[&relapse, &late_worse, &relapse], 2).await;
    assert!(all_acknowledged(&results), "{results:?}");
    assert_eq!(
        receiver.keys(),
        vec![action_id_of(&in_order_worse), action_id_of(&relapse)]
    );
}

async fn when_a_cure_lands_while_the_worsening_intent_is_pending_should_not_notify(engine: Engine) {
    let servicing = Servicing::new(engine).await;
    let receiver = Receiver::default();
    let server = receiver.start().await;
    let faults = FaultPlan::default();
    let handler = collections(&servicing, &server, Some(&faults));
    let worse = change(
        "acc_8401",
        2,
        "2026-10-31T23:59:59Z DPD_1_29 -> DPD_30_59 30",
    );
    let cure = change("acc_8401", 3, "2026-11-03T10:00:00Z DPD_30_59 -> CURRENT 0");

    // The worsening's claim and intent commit, then the function dies before the call.
    faults.push(Fault::LoseResponse);
    assert!(matches!(
        deliver(&handler, "w1", &worse).await,
        MessageResult::Retry { .. }
    ));
    let id = action_id_of(&worse);
    assert_eq!(action_status(&servicing, &id).await.0, "PENDING");

    // The cure is handled before the worsening comes back: at call time the pending intent no
    // longer stands, on this replay and every later one.
    assert_eq!(
        deliver(&handler, "c1", &cure).await,
        MessageResult::Handled { action: None }
    );
    let results = deliver_all(&handler, &[&worse], 3).await;
    assert_eq!(
        results,
        vec![MessageResult::Duplicate { action: SUPERSEDED }; 3]
    );
    assert!(
        receiver.keys().is_empty(),
        "the customer is current: no notice"
    );
    assert_eq!(
        action_status(&servicing, &id).await,
        ("SUPERSEDED".into(), "0".into())
    );
}

async fn when_a_later_change_is_recorded_between_the_read_and_the_commit_should_judge_again(
    engine: Engine,
) {
    let servicing = Servicing::new(engine).await;
    let store = servicing.store(CONSUMER);
    let account = AccountId::parse("acc_8501").expect("account");
    let record =
        |id: &str, at, from, to| LatestDelinquencyRecord::new(CONSUMER, &account, id, at, from, to);
    let worse = record("evt_w", 1_000, Bucket::Dpd1To29, Bucket::Dpd30To59);
    let cure = record("evt_c", 2_000, Bucket::Dpd30To59, Bucket::Current);
    let intent = ActionIntent {
        action_id: "collections_notification:acc_8501:DPD_30_59:evt_w".into(),
        account_id: account.clone(),
        event_id: "evt_w".into(),
        payload: json!({}),
    };
    let commit = async |change: &LatestDelinquencyRecord,
                        intent: Option<&ActionIntent>,
                        later: Option<&LatestDelinquencyRecord>| {
        let source = SourceRef {
            system: "outbox".into(),
            event_id: change.event_id.clone(),
        };
        let fingerprint = Fingerprint::of_value(&json!({"eventId": change.event_id}));
        let unit = UnitOfWork {
            source: &source,
            event_type: "DelinquencyChanged",
            account_id: &account,
            fingerprint: &fingerprint,
            released: false,
            effect: Effect::Intent(intent),
        };
        store
            .commit_change(&unit, change, later)
            .await
            .expect("answered")
    };

    // Both read "no change yet"; the cure commits first.
    assert_eq!(commit(&cure, None, None).await, CommitOutcome::Committed);
    // The worsening, judged on its stale read, is refused as a whole: no claim, no intent.
    assert_eq!(
        commit(&worse, Some(&intent), None).await,
        CommitOutcome::VersionConflict
    );
    assert!(!action_recorded(&servicing, &intent.action_id).await);
    assert_eq!(
        store
            .latest_change(&account)
            .await
            .expect("read")
            .map(|l| l.event_id),
        Some("evt_c".into())
    );
    // Judged again on the stored cure: claimed, its intent recorded as superseded, never pending.
    assert_eq!(
        commit(&worse, Some(&intent), Some(&cure)).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        action_status(&servicing, &intent.action_id).await,
        ("SUPERSEDED".into(), "0".into())
    );
    assert_eq!(
        commit(&worse, Some(&intent), Some(&cure)).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(commit(&cure, None, None).await, CommitOutcome::Duplicate);
    let latest = store
        .latest_change(&account)
        .await
        .expect("read")
        .expect("recorded");
    assert_eq!(
        (
            latest.event_id.as_str(),
            latest.occurred_at,
            latest.to_bucket.as_str()
        ),
        ("evt_c", 2_000, "CURRENT")
    );
}

/// A receiver that takes only authenticated calls: `check` says whether a request's
/// credentials are good; a call without good ones is answered 401 and is no notice.
#[derive(Clone)]
struct GuardedReceiver {
    check: Arc<dyn Fn(&wiremock::Request) -> bool + Send + Sync>,
    answers: Arc<Mutex<Vec<u16>>>,
}

impl wiremock::Respond for GuardedReceiver {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let status = if (self.check)(request) { 200 } else { 401 };
        self.answers.lock().expect("answers").push(status);
        wiremock::ResponseTemplate::new(status).set_body_json(serde_json::json!({"received": true}))
    }
}

impl GuardedReceiver {
    async fn start(&self) -> wiremock::MockServer {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(self.clone())
            .mount(&server)
            .await;
        server
    }

    fn answers(&self) -> Vec<u16> {
        self.answers.lock().expect("answers").clone()
    }
}

fn header<'a>(request: &'a wiremock::Request, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Issue 32: the notifier sent no credentials at all. A bearer token from Secrets Manager,
/// rotated there: the warm notifier's cached token is refused once, read again, accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_receiver_wants_a_bearer_token_should_send_the_secrets_current_value() {
    let config = Engine::MiniStack.sdk_config().await;
    let secrets = aws_sdk_secretsmanager::Client::new(&config);
    let name = format!("receiver-token-{}", std::process::id());
    let arn = secrets
        .create_secret()
        .name(&name)
        .secret_string("token-one")
        .send()
        .await
        .expect("secret")
        .arn()
        .expect("arn")
        .to_owned();
    let accepted = Arc::new(Mutex::new("token-one".to_owned()));
    let wanted = accepted.clone();
    let receiver = GuardedReceiver {
        check: Arc::new(move |r| {
            header(r, "authorization") == format!("Bearer {}", wanted.lock().expect("token"))
        }),
        answers: Arc::default(),
    };
    let server = receiver.start().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let token = collections::auth::SecretToken::new(secrets.clone(), &arn);
    let notifier = Notifier::new(&server.uri(), Duration::from_secs(2))
        .expect("notifier")
        .with_auth(collections::auth::Auth::Bearer(Arc::new(token)));
    let handler = CollectionsHandler::new(servicing.store(CONSUMER), notifier.clone());
    let first = deliver(&handler, "m1", entering_30(&envelopes)).await;
    assert!(
        matches!(first, MessageResult::Handled { action: SENT_NOW }),
        "{first:?}"
    );
    assert_eq!(receiver.answers(), [200]);
    // Rotated: the receiver now takes only the new value; the warm notifier still holds the
    // old one: refused (401: no notice, retried), read again, accepted.
    secrets
        .put_secret_value()
        .secret_id(&arn)
        .secret_string("token-two")
        .send()
        .await
        .expect("rotated");
    *accepted.lock().expect("token") = "token-two".into();
    let payload = json!({"notice": "after rotation"});
    assert!(matches!(
        notifier
            .send("collections_notification:rotated", &payload)
            .await,
        collections::Delivery::Failed {
            status: Some(401),
            maybe_delivered: false,
            ..
        }
    ));
    assert!(matches!(
        notifier
            .send("collections_notification:rotated", &payload)
            .await,
        collections::Delivery::Accepted { status: 200 }
    ));
    assert_eq!(receiver.answers(), [200, 401, 200]);
}

/// An HMAC signature under a Secrets Manager secret: the receiver recomputes it over the time,
/// method, path and body it received (its own HMAC, not the notifier's code) with the secret
/// it holds, and refuses a stale time. Rotated: refused once, read again, accepted. A signing
/// secret too short to be a key is refused before any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_receiver_wants_signed_calls_should_sign_time_method_path_and_body() {
    let config = Engine::MiniStack.sdk_config().await;
    let secrets = aws_sdk_secretsmanager::Client::new(&config);
    let first_key = "k".repeat(32);
    let create = |name: String, value: String| {
        let secrets = secrets.clone();
        async move {
            secrets
                .create_secret()
                .name(name)
                .secret_string(value)
                .send()
                .await
                .expect("secret")
                .arn()
                .expect("arn")
                .to_owned()
        }
    };
    let arn = create(
        format!("receiver-signing-{}", std::process::id()),
        first_key.clone(),
    )
    .await;
    let accepted = Arc::new(Mutex::new(first_key));
    let holds = accepted.clone();
    let signed = Arc::new(Mutex::new(Vec::<wiremock::Request>::new()));
    let seen = signed.clone();
    let receiver = GuardedReceiver {
        check: Arc::new(move |r| {
            seen.lock().expect("seen").push(r.clone());
            hmac_matches(r, holds.lock().expect("key").as_bytes())
        }),
        answers: Arc::default(),
    };
    let server = receiver.start().await;
    let servicing = Servicing::new(Engine::MiniStack).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let secret = |arn: &str| {
        collections::auth::Auth::Hmac(Arc::new(collections::auth::SecretToken::new(
            secrets.clone(),
            arn,
        )))
    };
    let notifier = Notifier::new(&format!("{}/notify", server.uri()), Duration::from_secs(2))
        .expect("notifier")
        .without_deduplication(&format!("{}/status", server.uri()))
        .expect("status")
        .with_auth(secret(&arn));
    let handler = CollectionsHandler::new(servicing.store(CONSUMER), notifier.clone());
    let first = deliver(&handler, "m1", entering_30(&envelopes)).await;
    assert!(
        matches!(first, MessageResult::Handled { action: SENT_NOW }),
        "{first:?}"
    );
    // The status question is signed too, over its path as sent (percent-encoded).
    assert_eq!(
        notifier.status("collections_notification:x y/z").await,
        collections::Status::Delivered,
    );
    assert_eq!(receiver.answers(), [200, 200]);
    let requests = signed.lock().expect("seen").clone();
    let targets: Vec<(String, String)> = requests
        .iter()
        .map(|r| (r.method.to_string(), r.url.path().to_owned()))
        .collect();
    assert_eq!(
        targets,
        [
            ("POST".to_owned(), "/notify".to_owned()),
            (
                "GET".to_owned(),
                "/status/collections_notification:x%20y%2Fz".to_owned()
            )
        ]
    );
    // What the signature binds: a captured notice replayed under another key, with its body
    // changed, or with another time, is refused.
    let key = accepted.lock().expect("key").clone();
    let notice = &requests[0];
    assert!(hmac_matches(notice, key.as_bytes()));
    let mut other_key = notice.clone();
    other_key.headers.insert(
        "idempotency-key",
        http::HeaderValue::from_static("collections_notification:other"),
    );
    let mut other_body = notice.clone();
    other_body.body.push(b' ');
    let mut other_time = notice.clone();
    let header_value = header(notice, "servicing-signature").to_owned();
    let (t, v1) = header_value.split_once(',').expect("t=…,v1=…");
    let earlier: i64 = t.trim_start_matches("t=").parse::<i64>().expect("t") - 1;
    other_time.headers.insert(
        "servicing-signature",
        http::HeaderValue::from_str(&format!("t={earlier},{v1}")).expect("header"),
    );
    for forged in [other_key, other_body, other_time] {
        assert!(!hmac_matches(&forged, key.as_bytes()));
    }
    // Rotated: the receiver holds only the new key; the warm notifier signs with the old one
    // once (401: no notice, retried), reads the secret again, and is accepted.
    let second_key = "s".repeat(40);
    secrets
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(&second_key)
        .send()
        .await
        .expect("rotated");
    *accepted.lock().expect("key") = second_key;
    let payload = json!({"notice": "after rotation"});
    for want in [Some(401), None] {
        let got = notifier
            .send("collections_notification:rotated", &payload)
            .await;
        match want {
            Some(status) => assert!(
                matches!(got, collections::Delivery::Failed { status: Some(s), maybe_delivered: false, .. } if s == status),
                "{got:?}"
            ),
            None => assert!(
                matches!(got, collections::Delivery::Accepted { status: 200 }),
                "{got:?}"
            ),
        }
    }
    assert_eq!(receiver.answers(), [200, 200, 401, 200]);
    // A key of 16 bytes: no call is made.
    let short = create(
        format!("receiver-short-{}", std::process::id()),
        "x".repeat(16),
    )
    .await;
    let weak = Notifier::new(&format!("{}/notify", server.uri()), Duration::from_secs(2))
        .expect("notifier")
        .with_auth(secret(&short));
    let refused = weak.send("collections_notification:weak", &payload).await;
    assert!(
        matches!(
            &refused,
            collections::Delivery::Failed { status: None, maybe_delivered: false, reason } if reason.contains("at least 32")
        ),
        "{refused:?}"
    );
    assert_eq!(receiver.answers().len(), 4, "nothing reached the receiver");
}

/// Whether `request` carries `Servicing-Signature: t=<secs>,v1=<hex>` made with `key` over
/// `<t>\n<METHOD>\n<request-target>\n<Idempotency-Key>\n<body>` as received, `t` within 5
/// minutes of now.
fn hmac_matches(request: &wiremock::Request, key: &[u8]) -> bool {
    use hmac::{KeyInit, Mac};
    let value = header(request, "servicing-signature");
    let mut t = None;
    let mut v1 = None;
    for part in value.split(',') {
        match part.split_once('=') {
            Some(("t", secs)) => t = secs.parse::<i64>().ok(),
            Some(("v1", hex)) => v1 = hex::decode(hex).ok(),
            _ => return false,
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    if (chrono::Utc::now().timestamp() - t).abs() > 300 {
        return false;
    }
    let path = match request.url.query() {
        Some(query) => format!("{}?{query}", request.url.path()),
        None => request.url.path().to_owned(),
    };
    let mut mac = <hmac::Hmac<hmac_sha2::Sha256> as KeyInit>::new_from_slice(key).expect("key");
    let idempotency_key = header(request, "idempotency-key");
    mac.update(format!("{t}\n{}\n{path}\n{idempotency_key}\n", request.method).as_bytes());
    mac.update(&request.body);
    mac.verify_slice(&v1).is_ok()
}

/// SigV4 with the function's credentials: the receiver recomputes the signature over what it
/// received (method, URL, the signed headers, the body) and accepts only a match.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_receiver_is_behind_iam_should_sign_every_call_with_sigv4() {
    let credentials =
        aws_credential_types::Credentials::new("AKIDEXAMPLE", "secret-key", None, None, "test");
    let verify = credentials.clone();
    let receiver = GuardedReceiver {
        check: Arc::new(move |r| signature_matches(r, &verify)),
        answers: Arc::default(),
    };
    let server = receiver.start().await;
    let servicing = Servicing::new(Engine::DynamoDbLocal).await;
    let envelopes = delinquency_envelopes(&servicing).await;
    let notifier = Notifier::new(&format!("{}/notify", server.uri()), Duration::from_secs(2))
        .expect("notifier")
        .without_deduplication(&format!("{}/status", server.uri()))
        .expect("status")
        .with_auth(collections::auth::Auth::SigV4 {
            credentials: aws_credential_types::provider::SharedCredentialsProvider::new(
                credentials,
            ),
            region: "eu-west-1".into(),
            service: "execute-api".into(),
        });
    let handler = CollectionsHandler::new(servicing.store(CONSUMER), notifier.clone());
    let first = deliver(&handler, "m1", entering_30(&envelopes)).await;
    assert!(
        matches!(first, MessageResult::Handled { action: SENT_NOW }),
        "{first:?}"
    );
    // The status question is signed too.
    assert_eq!(
        notifier.status("collections_notification:x").await,
        collections::Status::Delivered
    );
    assert_eq!(receiver.answers(), [200, 200]);
    // A forged signature is refused: the check is real.
    let forged =
        aws_credential_types::Credentials::new("AKIDEXAMPLE", "another-key", None, None, "test");
    let imposter = Notifier::new(&format!("{}/notify", server.uri()), Duration::from_secs(2))
        .expect("notifier")
        .with_auth(collections::auth::Auth::SigV4 {
            credentials: aws_credential_types::provider::SharedCredentialsProvider::new(forged),
            region: "eu-west-1".into(),
            service: "execute-api".into(),
        });
    assert!(matches!(
        imposter
            .send("collections_notification:y", &json!({}))
            .await,
        collections::Delivery::Failed {
            status: Some(401),
            ..
        }
    ));
}

/// Whether `request` carries the SigV4 signature `credentials` make over what it received.
fn signature_matches(
    request: &wiremock::Request,
    credentials: &aws_credential_types::Credentials,
) -> bool {
    let authorization = header(request, "authorization");
    let Some(signed) = authorization
        .split(", ")
        .find_map(|part| part.strip_prefix("SignedHeaders="))
    else {
        return false;
    };
    let Ok(at) =
        chrono::NaiveDateTime::parse_from_str(header(request, "x-amz-date"), "%Y%m%dT%H%M%SZ")
    else {
        return false;
    };
    let headers: Vec<(&str, &str)> = signed
        .split(';')
        // What the signer adds itself (from the URI and the signing time).
        .filter(|name| !matches!(*name, "host" | "x-amz-date"))
        .map(|name| (name, header(request, name)))
        .collect();
    let identity = credentials.clone().into();
    let Ok(params) = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("eu-west-1")
        .name("execute-api")
        .time(at.and_utc().into())
        .settings(aws_sigv4::http_request::SigningSettings::default())
        .build()
    else {
        return false;
    };
    let params = params.into();
    // The URL as the client addressed it (its Host header: the mock's own URL drops the port).
    let url = format!("http://{}{}", header(request, "host"), request.url.path());
    let Ok(signable) = aws_sigv4::http_request::SignableRequest::new(
        request.method.as_str(),
        url,
        headers.into_iter(),
        aws_sigv4::http_request::SignableBody::Bytes(&request.body),
    ) else {
        return false;
    };
    let Ok(output) = aws_sigv4::http_request::sign(signable, &params) else {
        return false;
    };
    let (instructions, _) = output.into_parts();
    let mut expected = http::Request::new(());
    instructions.apply_to_request_http1x(&mut expected);
    let expected = expected
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    expected == authorization
}
