//! Guarded replays: sending a fact to the servicing queue again is harmless while its claim
//! lives until the queue has delivered it — it is then a duplicate. A fact is judged by its
//! claim, never by its `eventTime`: without a live claim nobody can tell "never applied" from
//! "applied, and its claim has expired since", and the second would apply twice.

use serde_json::Value;
use servicing_domain::{AccountId, Fingerprint, ServicingEvent, SourceRef};

use crate::{account_state_claim, epoch_seconds, failed};

/// SQS's bound on a `MessageDeduplicationId` (of `[!-~]`, printable ASCII without spaces).
pub const MAX_DEDUPLICATION_ID: usize = 128;

/// The group of a body without a usable `accountId` (the consumer quarantines it anyway).
pub const UNADDRESSED_GROUP: &str = "no-account";

/// Where a body goes on the FIFO servicing queue (contract, "Transport"): its account's group,
/// and a deduplication id derived from its identity — never from the clock or a counter, so
/// distinct facts never share one (SQS would drop the second for 5 minutes) and a fact sent
/// twice always does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressing {
    /// `MessageGroupId`: the body's `accountId`.
    pub group: String,
    /// `MessageDeduplicationId`: `sourceSystem:sourceEventId` when that is unambiguous (the
    /// system has no `:`) and fits SQS's 128 characters; else `#id:` + the SHA-256 of the
    /// identity (never a plain identity: `#` is not a system's character); `#body:` + the
    /// SHA-256 of the body when it has no identity.
    pub deduplication_id: String,
}

impl Addressing {
    pub fn of(body: &str) -> Self {
        let value = serde_json::from_str::<Value>(body).ok();
        let field = |name: &str| value.as_ref().and_then(|v| v[name].as_str());
        let group = field("accountId")
            .filter(|a| AccountId::parse(a).is_ok())
            .unwrap_or(UNADDRESSED_GROUP)
            .to_owned();
        let deduplication_id = match (field("sourceSystem"), field("sourceEventId")) {
            (Some(system), Some(event_id)) => identity_id(system, event_id),
            _ => format!(
                "#body:{}",
                Fingerprint::of_value(&Value::String(body.to_owned()))
            ),
        };
        Self {
            group,
            deduplication_id,
        }
    }
}

fn identity_id(system: &str, event_id: &str) -> String {
    let plain = format!("{system}:{event_id}");
    let unambiguous = !system.contains(':') && SourceRef::new(system, event_id).is_ok();
    if unambiguous && plain.len() <= MAX_DEDUPLICATION_ID {
        plain
    } else {
        format!(
            "#id:{}",
            Fingerprint::of_value(&serde_json::json!([system, event_id]))
        )
    }
}

/// SQS keeps a message at most 14 days: a sent fact may be delivered that late.
pub const QUEUE_RETENTION_SECS: i64 = 14 * 86_400;

/// Why a replay was refused, per fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub line: usize,
    pub reason: String,
}

/// What the claims say about sending `source` again now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWindow {
    /// Claimed, and the claim outlives any delivery of the message: a resend is a duplicate.
    Covered,
    /// Claimed, but the claim expires (at this epoch second) before the queue might deliver.
    ExpiresFirst(i64),
    /// No live claim.
    Unclaimed,
}

/// The claim of `source` against the queue's delivery horizon.
pub async fn claim_window(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    source: &SourceRef,
    now: i64,
) -> anyhow::Result<ClaimWindow> {
    let claim = account_state_claim(client, table, source).await?;
    Ok(match claim.map(|c| c.expires_at) {
        // An applied payment's record never expires.
        Some(None) => ClaimWindow::Covered,
        Some(Some(expires)) if expires > now + QUEUE_RETENTION_SECS => ClaimWindow::Covered,
        Some(Some(expires)) if expires > now => ClaimWindow::ExpiresFirst(expires),
        _ => ClaimWindow::Unclaimed,
    })
}

/// Checks every line; returns the refusals (empty: safe to send). A fact is safe when its claim
/// outlives the queue's retention; unclaimed or soon-expiring facts are refused (send them with
/// `--allow-beyond-retention` once you know they were never applied).
pub async fn check(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    lines: &[Vec<u8>],
) -> anyhow::Result<Vec<Refusal>> {
    let now = epoch_seconds();
    let mut refusals = Vec::new();
    for (i, body) in lines.iter().enumerate() {
        // Undecodable lines are harmless: they will be quarantined again.
        let Ok(event) = ServicingEvent::decode(body) else {
            continue;
        };
        let reason = match claim_window(client, table, &event.source, now).await? {
            ClaimWindow::Covered => continue,
            ClaimWindow::ExpiresFirst(at) => format!(
                "{}'s claim expires in {} days, before the queue may deliver it (up to 14): after that a resend would apply it again",
                event.source,
                (at - now) / 86_400
            ),
            ClaimWindow::Unclaimed => format!(
                "{} has no live claim: if it was applied before and its claim expired, replaying it would apply it again",
                event.source
            ),
        };
        refusals.push(Refusal {
            line: i + 1,
            reason,
        });
    }
    Ok(refusals)
}

/// The message attribute that says who sent a message no producer sent (`sent_by`: an
/// operator's ARN, or the component re-sending): account-state keeps it on its decision record.
/// A value account-state would not keep (not printable ASCII, longer than
/// `servicing_telemetry::SENT_BY_MAX`) is refused here, not sent and silently dropped.
pub fn sent_by(sent_by: &str) -> anyhow::Result<aws_sdk_sqs::types::MessageAttributeValue> {
    let kept = servicing_telemetry::sent_by(sent_by).ok_or_else(|| {
        anyhow::anyhow!(
            "sentBy {sent_by:?} is not printable ASCII of at most {} characters",
            servicing_telemetry::SENT_BY_MAX
        )
    })?;
    Ok(aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(kept)
        .build()?)
}

/// Sends the lines to the FIFO servicing queue, in order, 10 per request, each addressed by
/// [`Addressing`] (group = account, deduplication id = identity) and marked as sent by
/// `sent_by` (an operator's ARN, or the component re-sending).
pub async fn send(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    lines: &[Vec<u8>],
    sent_by: &str,
) -> anyhow::Result<usize> {
    let mut sent = 0;
    for chunk in lines.chunks(10) {
        let mut request = sqs.send_message_batch().queue_url(queue_url);
        for (i, body) in chunk.iter().enumerate() {
            let body = String::from_utf8_lossy(body).into_owned();
            let to = Addressing::of(&body);
            let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body)
                .message_group_id(to.group)
                .message_deduplication_id(to.deduplication_id)
                .message_attributes(servicing_telemetry::SENT_BY, self::sent_by(sent_by)?)
                .build()?;
            request = request.entries(entry);
        }
        let out = request.send().await.map_err(failed("cannot send"))?;
        if !out.failed().is_empty() {
            return Err(anyhow::anyhow!(
                "{} messages were refused: {:?}",
                out.failed().len(),
                out.failed()
            ));
        }
        sent += chunk.len();
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(system: &str, event_id: &str, account: &str) -> String {
        serde_json::json!({"sourceSystem": system, "sourceEventId": event_id, "eventType": "PAYMENT_SETTLED",
            "accountId": account, "eventTime": "2026-10-20T00:00:00Z", "amountMinor": 10, "currency": "EUR"})
        .to_string()
    }

    fn sqs_allows(id: &str) -> bool {
        (1..=MAX_DEDUPLICATION_ID).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
    }

    #[test]
    fn when_a_body_has_an_identity_should_be_deduplicated_and_grouped_by_it_alone() {
        let to = Addressing::of(&body("psp", "pay-1", "acc_1"));
        assert_eq!(
            to,
            Addressing {
                group: "acc_1".into(),
                deduplication_id: "psp:pay-1".into()
            }
        );
        // The same fact re-serialised, sent at another time: the same id (SQS may drop it);
        // another fact, even sent in the same second: another id.
        let reordered = r#"{"accountId":"acc_1","sourceEventId":"pay-1","sourceSystem":"psp","amountMinor":10}"#;
        assert_eq!(Addressing::of(reordered), to);
        assert_ne!(
            Addressing::of(&body("psp", "pay-2", "acc_1")).deduplication_id,
            to.deduplication_id
        );
    }

    #[test]
    fn when_an_identity_is_too_long_or_ambiguous_should_use_its_hash() {
        // 64 + 1 + 128 characters: over SQS's 128.
        let (system, event_id) = ("s".repeat(64), format!("{}!~", "e".repeat(126)));
        let long = Addressing::of(&body(&system, &event_id, "acc_1")).deduplication_id;
        assert!(
            long.starts_with("#id:sha256:") && sqs_allows(&long),
            "{long}"
        );
        assert_eq!(
            Addressing::of(&body(&system, &event_id, "acc_2")).deduplication_id,
            long,
            "a hash of the identity alone"
        );
        let other = Addressing::of(&body(&system, &format!("{}!!", "e".repeat(126)), "acc_1"));
        assert_ne!(other.deduplication_id, long);
        // `a:b` + `c` and `a` + `b:c` are two facts: a system with `:` is hashed.
        let (left, right) = (
            Addressing::of(&body("a:b", "c", "acc_1")).deduplication_id,
            Addressing::of(&body("a", "b:c", "acc_1")).deduplication_id,
        );
        assert_eq!(right, "a:b:c");
        assert!(left.starts_with("#id:") && left != right);
        // Characters SQS refuses (the event would be quarantined, but the send must succeed).
        let spaced = Addressing::of(&body("psp", "pay 1", "acc_1")).deduplication_id;
        assert!(
            spaced.starts_with("#id:") && sqs_allows(&spaced),
            "{spaced}"
        );
    }

    #[test]
    fn when_a_body_has_no_identity_or_account_should_still_be_addressable() {
        let to = Addressing::of("{not json");
        assert_eq!(to.group, UNADDRESSED_GROUP);
        assert!(
            to.deduplication_id.starts_with("#body:sha256:") && sqs_allows(&to.deduplication_id)
        );
        assert_eq!(Addressing::of("{not json"), to);
        assert_ne!(
            Addressing::of("{not json!").deduplication_id,
            to.deduplication_id
        );
        // An accountId SQS or the contract refuses goes to the unaddressed group.
        assert_eq!(
            Addressing::of(&body("psp", "p", "acc 1")).group,
            UNADDRESSED_GROUP
        );
    }
}
