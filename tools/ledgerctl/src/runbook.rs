//! The runbook's steps as commands: collections actions, an API payment by its key, the
//! dead-letter queues, republishing the outbox. Each says what it acts on first (`target.rs`);
//! each that changes something has `--dry-run`.

use serde_json::{Value, json};
use servicing_ops::{actions, dlq, republish};
use servicing_store::ActionStatus;
use servicing_store::schema::{ActionItem, IdempotencyRecord, OutboxEvent};

use crate::iso;
use crate::ops::runtime;
use crate::target::{Change, QueueArg, Target};

#[derive(Debug, clap::Subcommand)]
pub enum ActionsCommand {
    /// Collections actions, oldest first, with filters.
    List {
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long, value_parser = crate::account)]
        account: Option<String>,
        /// Only in this status, e.g. `--status pending`. Settled statuses (sent, rejected,
        /// superseded) are history: they need `--all`.
        #[arg(long, value_enum, ignore_case = true)]
        status: Option<ActionStatusArg>,
        /// Every action ever recorded, settled ones included: reads the whole table (an audit;
        /// without it, only the unsettled actions are read, from the open index).
        #[arg(long)]
        all: bool,
    },
    /// One action in full (its id is the receiver's Idempotency-Key).
    Inspect {
        /// The action id, e.g. `collections_notification:acc_1001:DPD_30_59:evt_0f3a…` (as `list`
        /// prints it: account, bucket, the change's event id).
        #[arg(value_name = "ACTION_ID")]
        action_id: String,
    },
}

/// A collections action's status, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ActionStatusArg {
    Pending,
    Sending,
    Sent,
    Rejected,
    Superseded,
    Unknown,
}

impl ActionStatusArg {
    /// The store's status it names (its stored form and whether it is settled come from there).
    fn status(self) -> ActionStatus {
        match self {
            ActionStatusArg::Pending => ActionStatus::Pending,
            ActionStatusArg::Sending => ActionStatus::Sending,
            ActionStatusArg::Sent => ActionStatus::Sent,
            ActionStatusArg::Rejected => ActionStatus::Rejected,
            ActionStatusArg::Superseded => ActionStatus::Superseded,
            ActionStatusArg::Unknown => ActionStatus::Unknown,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct PaymentArgs {
    /// The caller as the API saw it (its IAM principal ARN), e.g.
    /// `--caller arn:aws:iam::111122223333:user/alice`.
    #[arg(long, value_name = "PRINCIPAL")]
    caller: String,
    /// The Idempotency-Key the caller sent, e.g. `--key order-7781`.
    #[arg(long, value_name = "KEY")]
    key: String,
}

/// Which dead-letter queue: a name of the stack's, or a URL.
#[derive(Debug, Clone, clap::Args)]
pub struct DlqArg {
    /// `servicing`, `collections`, `ledger`, `relay` (the relay's failure queue: batch metadata, not
    /// redrivable — use `outbox republish`), or a queue URL.
    #[arg(value_name = "DLQ", value_parser = dlq_name)]
    dlq: String,
}

/// The stack's dead-letter queues by name.
const DLQ_NAMES: [&str; 4] = ["servicing", "collections", "ledger", "relay"];

/// A DLQ name of [`DLQ_NAMES`] or a queue URL, checked as the command line is parsed: a typo
/// is refused before anything is resolved or read.
fn dlq_name(value: &str) -> Result<String, String> {
    if DLQ_NAMES.contains(&value) || value.starts_with("https://") || value.starts_with("http://") {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "name a DLQ as {} or give its URL",
            DLQ_NAMES.join(", ")
        ))
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum DlqCommand {
    /// Up to --max messages, bodies included, left in the queue.
    Peek {
        #[command(flatten)]
        dlq: DlqArg,
        /// How many to look at, e.g. `--max 50`.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
        max: u64,
    },
    /// Move up to --max messages back to the queue they came from (servicing: to each body's
    /// account group; every fact is deduplicated by its claim, every action by its id).
    Redrive {
        #[command(flatten)]
        dlq: DlqArg,
        /// Where to (default: the stack's servicing or collections queue for those DLQs).
        #[command(flatten)]
        queue: QueueArg,
        /// How many to move, e.g. `--max 500`.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        max: u64,
        /// Peek at what would move; move nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum OutboxCommand {
    /// Publish again the events of the records written in [--from, --to): facts applied and
    /// API payments accepted (those go to the servicing queue again: deduplicated there). A
    /// full read of the table (a scan), on purpose: a batch the relay gave up on may be missing
    /// from the record log too, so the log cannot say what it held.
    Republish {
        #[command(flatten)]
        queue: QueueArg,
        /// Written at or after (ISO 8601), e.g. `--from 2026-11-02T10:00:00Z`.
        #[arg(long, value_parser = crate::time)]
        from: chrono::DateTime<chrono::Utc>,
        /// Written before (ISO 8601), e.g. `--to 2026-11-02T11:00:00Z`.
        #[arg(long, value_parser = crate::time)]
        to: chrono::DateTime<chrono::Utc>,
        /// Only this account's, e.g. `--account acc_1001`.
        #[arg(long, value_parser = crate::account)]
        account: Option<String>,
        /// The event bus (default: the stack's `ServicingEventBusName`, else $EVENT_BUS_NAME).
        #[arg(long, value_name = "BUS")]
        event_bus: Option<String>,
        /// List the records whose events would be published; publish nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        change: Change,
    },
}

fn action_json(a: &ActionItem) -> Value {
    json!({"actionId": a.action_id, "accountId": a.account_id, "eventId": a.event_id,
        "status": a.status, "attempts": a.attempts, "createdAt": iso(a.created_at),
        "updatedAt": a.updated_at.map(|ms| iso(ms / 1000)),
        "lastHttpStatus": a.last_http_status, "lastDetail": a.last_detail,
        "payload": serde_json::from_str::<Value>(&a.payload).unwrap_or(Value::String(a.payload.clone()))})
}

pub fn actions(command: &ActionsCommand, json: bool, target: &Target) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        match command {
            ActionsCommand::List {
                account,
                status,
                all,
            } => {
                if let Some(settled) = status
                    .map(ActionStatusArg::status)
                    .filter(|s| s.settled() && !all)
                {
                    anyhow::bail!(
                        "{} actions are settled history: add --all (reads the whole table)",
                        settled.as_str()
                    );
                }
                let target = target.resolve(None).await?;
                let store = servicing_store::ServicingStore::new(
                    target.dynamodb(),
                    servicing_store::StoreConfig::new(&target.table, "collections"),
                );
                let listing = if *all {
                    actions::Listing::All
                } else {
                    actions::Listing::Open
                };
                let found = actions::list(
                    &store,
                    listing,
                    account.as_deref(),
                    status.map(|s| s.status().as_str()),
                )
                .await?;
                if json {
                    let all: Vec<Value> = found.iter().map(action_json).collect();
                    println!("{}", serde_json::to_string_pretty(&all)?);
                    return Ok(true);
                }
                for a in &found {
                    println!(
                        "{}\t{}\t{}\t{}\t{} attempts\tcreated {}\tlast {}",
                        a.action_id,
                        a.account_id,
                        a.event_id,
                        a.status,
                        a.attempts,
                        iso(a.created_at),
                        a.last_detail.as_deref().unwrap_or("-")
                    );
                }
                let read = match listing {
                    actions::Listing::Open => "unsettled, from the open index",
                    actions::Listing::All => "every action: a full read of the table",
                };
                println!("{} actions ({read})", found.len());
                Ok(true)
            }
            ActionsCommand::Inspect { action_id } => {
                let target = target.resolve(None).await?;
                match actions::inspect(&target.dynamodb(), &target.table, action_id).await? {
                    Some(a) => {
                        println!("{}", serde_json::to_string_pretty(&action_json(&a))?);
                        Ok(true)
                    }
                    None => {
                        eprintln!("no action {action_id} in {}", target.table);
                        Ok(false)
                    }
                }
            }
        }
    })
}

/// "What happened to the payment with key K" for one caller: the idempotency record (what the
/// API answered, until when it replays), the fact it sent and what account-state made of it.
pub fn payment(args: &PaymentArgs, json: bool, target: &Target) -> anyhow::Result<bool> {
    let principal = payments_api::Principal::new(args.caller.clone())
        .ok_or_else(|| anyhow::anyhow!("--caller is empty"))?;
    let key = payments_api::IdempotencyKey::parse(Some(args.key.as_bytes()))
        .map_err(|e| anyhow::anyhow!("--key: {e}"))?;
    runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let dynamodb = target.dynamodb();
        // Records are keyed by the caller's scope and the operation id (what GET
        // /v1/payments/{operationId} reads), derived from the key.
        let operation = payments_api::operation_id(&principal, &key);
        let (pk, sk) = servicing_store::items::idempotency_key(&principal.scope(), &operation);
        let item = dynamodb
            .get_item()
            .table_name(&target.table)
            .set_key(Some(servicing_store::items::key_item((pk, sk))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read the key's record: {}", aws_sdk_dynamodb::error::DisplayErrorContext(&e)))?
            .item;
        let Some(item) = item else {
            eprintln!("no payment with key {} for {}: never received, or refused before any record (see the API's decision records)", key.as_str(), principal.as_str());
            return Ok(false);
        };
        let record: IdempotencyRecord = servicing_store::schema::from_item(item)
            .map_err(|e| anyhow::anyhow!("the key's record does not decode: {e}"))?;
        let event = OutboxEvent::decode(record.outbox.as_deref())
            .unwrap_or_default()
            .into_iter()
            .next();
        let fact = event.as_ref().map(|e| servicing_domain::SourceRef {
            system: e.detail["sourceSystem"].as_str().unwrap_or_default().to_owned(),
            event_id: e.detail["sourceEventId"].as_str().unwrap_or_default().to_owned(),
        });
        let claim = match &fact {
            Some(f) => servicing_ops::account_state_claim(&dynamodb, &target.table, f).await?,
            None => None,
        };
        let status = match (&event, &claim) {
            (None, _) => "refused".to_owned(),
            (Some(_), None) => "accepted (not yet applied)".to_owned(),
            (Some(_), Some(c)) => c.verdict.to_lowercase(),
        };
        let allocation = claim.as_ref().and_then(|c| c.allocation().ok().flatten());
        let out = json!({
            "caller": principal.as_str(), "idempotencyKey": key.as_str(),
            "answered": record.response_status, "answeredAt": iso(record.created_at),
            "replaysUntil": record.replays_until().map(iso),
            "operationId": event.as_ref().and_then(|e| e.detail["eventId"].as_str()),
            "accountId": event.as_ref().and_then(|e| e.detail["accountId"].as_str()),
            "amountMinor": event.as_ref().and_then(|e| e.detail["amountMinor"].as_i64()),
            "fact": fact.as_ref().map(ToString::to_string),
            "status": status,
            "allocation": allocation.map(|a| json!({"allocation": a.allocation, "appliedOn": a.applied_on.to_string(),
                "reversedBy": a.reversed_by.map(|r| r.to_string())})),
        });
        if json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            for (k, v) in out.as_object().into_iter().flatten() {
                if !v.is_null() {
                    println!("{k:15} {}", v.as_str().map_or_else(|| v.to_string(), str::to_owned));
                }
            }
        }
        Ok(true)
    })
}

/// The queue URL of a DLQ name, and the queue it feeds back.
fn dlq_urls(
    target: &crate::target::Resolved,
    name: &str,
) -> anyhow::Result<(String, Option<String>)> {
    let output = |key: &str| {
        target
            .output(key)
            .map(str::to_owned)
            .or_else(|| std::env::var(key).ok())
    };
    let (dlq, back) = match name {
        "servicing" => ("ServicingDeadLetterQueueUrl", Some("ServicingQueueUrl")),
        "collections" => ("CollectionsDeadLetterQueueUrl", Some("CollectionsQueueUrl")),
        "ledger" => ("LedgerDeadLetterQueueUrl", Some("LedgerQueueUrl")),
        "relay" => ("RelayFailureQueueUrl", None),
        url if url.starts_with("http") => return Ok((url.to_owned(), None)),
        other => {
            anyhow::bail!(
                "{other:?}: name a DLQ as servicing, collections, ledger, relay, or give its URL"
            )
        }
    };
    let url = output(dlq).ok_or_else(|| {
        anyhow::anyhow!("no {dlq}: pass --stack NAME or source .local/env (or give the URL)")
    })?;
    Ok((url, back.and_then(output)))
}

pub fn dlq(command: &DlqCommand, json: bool, target: &Target) -> anyhow::Result<bool> {
    runtime()?.block_on(async {
        match command {
            DlqCommand::Peek { dlq: name, max } => {
                let target = target.resolve(None).await?;
                let (url, _) = dlq_urls(&target, &name.dlq)?;
                let letters = dlq::peek(&target.sqs(), &url, *max as usize).await?;
                if json {
                    let all: Vec<Value> = letters
                        .iter()
                        .map(|l| json!({"messageId": l.message_id, "receiveCount": l.receive_count,
                            "sentAt": iso(l.sent_at_ms / 1000), "group": l.group, "body": l.body}))
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&all)?);
                } else {
                    for l in &letters {
                        println!("{}\tsent {}{}\treceived {}x\tgroup {}\t{}", l.message_id, iso(l.sent_at_ms / 1000),
                            l.sent_by.as_deref().map(|who| format!(" by {who}")).unwrap_or_default(),
                            l.receive_count, l.group.as_deref().unwrap_or("-"), l.body);
                    }
                    println!("{} messages looked at in {url}", letters.len());
                }
                Ok(true)
            }
            DlqCommand::Redrive { dlq: name, queue, max, dry_run, change } => {
                let target = target.resolve(Some(queue)).await?;
                let operator = target.authorize(change, *dry_run).await?;
                let (url, back) = dlq_urls(&target, &name.dlq)?;
                let to = match (&target.queue, back) {
                    // --queue (or a --stack/env queue) only when it was asked for explicitly.
                    (Some(q), _) if name.dlq.starts_with("http") => q.clone(),
                    (_, Some(back)) => back,
                    (Some(q), None) => q.clone(),
                    (None, None) => anyhow::bail!("{}: not redrivable here (the relay's failures: `ledgerctl outbox republish`); give --queue for a URL", name.dlq),
                };
                target.same_place(&url)?;
                target.same_place(&to)?;
                if *dry_run {
                    let letters = dlq::peek(&target.sqs(), &url, *max as usize).await?;
                    println!("would move {} messages from {url} to {to} (dry run: nothing moved)", letters.len());
                    return Ok(true);
                }
                let done = dlq::redrive(&target.sqs(), &url, &to, *max as usize, &operator).await?;
                for (id, why) in &done.refused {
                    eprintln!("refused {id}: {why} (left in {url})");
                }
                println!("moved {} messages from {url} to {to} (by {operator})", done.moved.len());
                Ok(done.refused.is_empty())
            }
        }
    })
}

pub fn outbox(command: &OutboxCommand, target: &Target) -> anyhow::Result<bool> {
    let OutboxCommand::Republish {
        queue,
        from,
        to,
        account,
        event_bus,
        dry_run,
        change,
    } = command;
    if to <= from {
        anyhow::bail!("--to must be after --from");
    }
    runtime()?.block_on(async {
        let target = target.resolve(Some(queue)).await?;
        let operator = target.authorize(change, *dry_run).await?;
        let carriers = republish::carriers(
            &target.dynamodb(),
            &target.table,
            (from.timestamp(), to.timestamp()),
            account.as_deref(),
        )
        .await?;
        if *dry_run {
            for c in &carriers {
                println!("{}\t{}\twritten {}", c.pk, c.account_id.as_deref().unwrap_or("-"), iso(c.written_at));
            }
            println!("would republish the events of {} records (dry run: nothing published)", carriers.len());
            return Ok(true);
        }
        let bus = event_bus
            .clone()
            .or_else(|| target.output("ServicingEventBusName").map(str::to_owned))
            .or_else(|| std::env::var("EVENT_BUS_NAME").ok())
            .ok_or_else(|| anyhow::anyhow!("no event bus: --event-bus NAME, --stack NAME or EVENT_BUS_NAME"))?;
        let records: Vec<aws_lambda_events::event::dynamodb::EventRecord> = carriers
            .iter()
            .map(|c| serde_json::from_value(c.stream_record.clone()))
            .collect::<Result<_, _>>()?;
        let store = servicing_store::ServicingStore::new(
            target.dynamodb(),
            servicing_store::StoreConfig::new(&target.table, outbox_relay::CONSUMER),
        );
        let relay = outbox_relay::OutboxRelay::new(
            aws_sdk_eventbridge::Client::new(&target.sdk),
            store,
            bus.clone(),
        )
        .with_servicing_queue(target.sqs(), target.queue()?.to_owned());
        let (mut published, mut quarantined, mut failed) = (0, 0, 0);
        // As the relay reads a stream batch; it stops at the first record it cannot publish
        // (that one and the rest are `failed`: run again, republishing is harmless).
        for chunk in records.chunks(100) {
            let report = relay.relay(chunk).await;
            published += report.published;
            quarantined += report.quarantined;
            failed += report.failed;
        }
        println!(
            "republished the events of {published} of {} records to {bus} (API payments to the servicing queue); {quarantined} quarantined (ledgerctl quarantine list --consumer outbox-relay); {failed} not confirmed{} (by {operator})",
            carriers.len(),
            if failed > 0 { " (run again)" } else { "" }
        );
        Ok(failed == 0 && quarantined == 0)
    })
}
