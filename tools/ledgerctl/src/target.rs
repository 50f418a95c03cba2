//! Where a command acts, said before it acts: the table (and queue) from `--table`/`--queue`,
//! else the outputs of `--stack`, else the environment (`source .local/env` exports them), and
//! the endpoint, region and account they belong to.

use anyhow::Context;
use aws_config::SdkConfig;

/// `--stack` / `--table`, global (before or after the command): every command that reads or
/// writes the servicing table.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The CloudFormation stack whose outputs name the table (and queue), e.g.
    /// `--stack loan-servicing-prod`. Default: $STACK_NAME.
    #[arg(long, value_name = "STACK", global = true)]
    stack: Option<String>,
    /// The servicing table, e.g. `--table loan-servicing-ServicingTable-1A2B3C4D`. Default: the
    /// stack's `ServicingTableName` output, else $TABLE_NAME.
    #[arg(long, value_name = "TABLE", global = true)]
    table: Option<String>,
}

impl Target {
    /// Whether the command line names a target (`--stack` or `--table`): what makes the
    /// commands for which the table is optional (`incident`) read it.
    pub fn named(&self) -> bool {
        self.stack.is_some() || self.table.is_some()
    }
}

/// `--queue`: the commands that send to the servicing queue.
#[derive(Debug, Clone, clap::Args)]
pub struct QueueArg {
    /// The FIFO servicing queue's URL, e.g. `--queue https://sqs.eu-west-1.amazonaws.com/111122223333/loan-servicing-ServicingQueue-X.fifo`.
    /// Default: the stack's `ServicingQueueUrl` output, else $SERVICING_QUEUE_URL.
    #[arg(long, value_name = "URL")]
    queue: Option<String>,
}

/// The go-ahead of a command that changes something. Against AWS (anything but a local engine
/// on this machine) it runs only with the target stack's name typed (`--confirm NAME`) or
/// `--yes`; `--dry-run` needs neither.
#[derive(Debug, Clone, clap::Args)]
pub struct Change {
    /// The target stack's name, typed to confirm the change, e.g. `--confirm loan-servicing-prod`.
    #[arg(long, value_name = "STACK")]
    confirm: Option<String>,
    /// Go ahead without typing the stack's name (a script that checked the target itself).
    #[arg(long)]
    yes: bool,
}

/// What a command acts on, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub sdk: SdkConfig,
    pub table: String,
    pub queue: Option<String>,
    /// Every output of the stack, when one was named.
    pub outputs: Vec<(String, String)>,
    stack: Option<String>,
    /// The table's account (from its ARN), the one the target line prints.
    account: String,
}

impl Resolved {
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk)
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk)
    }

    /// The queue, or why there is none.
    pub fn queue(&self) -> anyhow::Result<&str> {
        self.queue.as_deref().ok_or_else(|| {
            anyhow::anyhow!("no servicing queue: pass --queue URL or --stack NAME, or set SERVICING_QUEUE_URL (source .local/env)")
        })
    }

    pub fn output(&self, key: &str) -> Option<&str> {
        self.outputs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Who is about to change what: the caller's identity (STS), printed on stderr and
    /// returned to be stamped on what changes. Against AWS the change needs `--confirm <the
    /// target's stack>` or `--yes`, and every queue it sends to must be in the table's account
    /// and region — the ones the target line printed. A dry run and a local engine need no
    /// go-ahead.
    pub async fn authorize(&self, change: &Change, dry_run: bool) -> anyhow::Result<String> {
        let local = is_local();
        let caller = aws_sdk_sts::Client::new(&self.sdk)
            .get_caller_identity()
            .send()
            .await;
        let operator = match (caller, local) {
            (Ok(me), _) => me.arn().unwrap_or("?").to_owned(),
            (Err(_), true) => "local operator (no STS here)".to_owned(),
            (Err(e), false) => anyhow::bail!(
                "cannot tell who is making this change (sts:GetCallerIdentity): {}",
                aws_sdk_sts::error::DisplayErrorContext(&e)
            ),
        };
        eprintln!("operator: {operator}");
        if dry_run || local {
            return Ok(operator);
        }
        let region = self.region();
        if let Some(queue) = &self.queue {
            self.same_place(queue)?;
        }
        go_ahead(change, self.stack.as_deref()).map_err(|why| {
            anyhow::anyhow!(
                "this changes account {} in {region} (table {}): {why}; nothing changed",
                self.account,
                self.table
            )
        })?;
        Ok(operator)
    }
}

impl Resolved {
    fn region(&self) -> String {
        self.sdk
            .region()
            .map_or("(no region)".to_owned(), ToString::to_string)
    }

    /// Refuses a queue outside the table's account and region (against AWS; a local engine's
    /// queues are all on this machine).
    pub fn same_place(&self, queue: &str) -> anyhow::Result<()> {
        if is_local() {
            return Ok(());
        }
        check_same_place(queue, &self.account, &self.region())
    }
}

/// Whether `change` confirms a change of the target `stack` (against AWS).
fn go_ahead(change: &Change, stack: Option<&str>) -> Result<(), String> {
    match (&change.confirm, change.yes) {
        (Some(typed), _) if Some(typed.as_str()) == stack => Ok(()),
        (Some(typed), _) => Err(format!(
            "--confirm {typed} is not the target's stack ({})",
            stack.unwrap_or("none: the table was named directly; name its --stack")
        )),
        (None, true) => Ok(()),
        (None, false) => Err(format!(
            "confirm with --confirm {} or --yes",
            stack.unwrap_or("<stack name> (with --stack)")
        )),
    }
}

/// A local engine on this machine (MiniStack, DynamoDB Local): no go-ahead to ask for.
fn is_local() -> bool {
    env("AWS_ENDPOINT_URL").is_some_and(|url| is_local_url(&url))
}

fn is_local_url(url: &str) -> bool {
    let authority = url
        .split("://")
        .nth(1)
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or_default();
    // The host exactly (no userinfo, no look-alike name), without its port.
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    };
    !authority.contains('@') && matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// A queue URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`, or the legacy
/// `https://<region>.queue.amazonaws.com/…`) in `account` and `region`: a queue from the
/// environment must not send another account's facts.
pub(crate) fn check_same_place(queue: &str, account: &str, region: &str) -> anyhow::Result<()> {
    let rest = queue.split("://").nth(1).unwrap_or(queue);
    let mut parts = rest.split('/');
    let host = parts.next().unwrap_or_default();
    let queue_account = parts.next().unwrap_or_default();
    if queue_account != account || !host.split('.').any(|label| label == region) {
        anyhow::bail!(
            "queue {queue} is not in the table's account {account} and region {region}: resolve both from one --stack; nothing changed"
        );
    }
    Ok(())
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Target {
    /// Resolves the table (and the queue when `queue` is given), checks the table exists, and
    /// prints on stderr what the command is about to act on.
    pub async fn resolve(&self, queue: Option<&QueueArg>) -> anyhow::Result<Resolved> {
        let sdk = aws_setup::load().await;
        let stack = self.stack.clone().or_else(|| env("STACK_NAME"));
        let mut outputs = Vec::new();
        if let Some(stack) = &stack {
            let described = aws_sdk_cloudformation::Client::new(&sdk)
                .describe_stacks()
                .stack_name(stack)
                .send()
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read the outputs of stack {stack} at {}: {}",
                        endpoint(),
                        aws_sdk_cloudformation::error::DisplayErrorContext(&e)
                    )
                })?;
            outputs = described
                .stacks()
                .first()
                .map(|s| {
                    s.outputs()
                        .iter()
                        .filter_map(|o| {
                            Some((o.output_key()?.to_owned(), o.output_value()?.to_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default();
        }
        let from_outputs = |key: &str| {
            outputs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v): &(String, String)| v.clone())
        };
        let table = self
            .table
            .clone()
            .or_else(|| from_outputs("ServicingTableName"))
            .or_else(|| env("TABLE_NAME"))
            .ok_or_else(|| anyhow::anyhow!("no table: pass --table TABLE or --stack NAME, or set TABLE_NAME (source .local/env)"))?;
        let queue = queue.and_then(|q| {
            q.queue
                .clone()
                .or_else(|| from_outputs("ServicingQueueUrl"))
                .or_else(|| env("SERVICING_QUEUE_URL"))
        });
        let described = aws_sdk_dynamodb::Client::new(&sdk)
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "table {table} at {}: {}",
                    endpoint(),
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                )
            })
            .context(
                "check --table/--stack and the credentials (source .local/env for the local stack)",
            )?;
        let account = described
            .table()
            .and_then(|t| t.table_arn())
            .and_then(|arn| arn.split(':').nth(4))
            .unwrap_or("?")
            .to_owned();
        eprintln!(
            "target: {}, region {}, account {account}, table {table}{}{}",
            endpoint(),
            sdk.region()
                .map_or("(none)".to_owned(), ToString::to_string),
            stack
                .as_ref()
                .map(|s| format!(" (stack {s})"))
                .unwrap_or_default(),
            queue
                .as_ref()
                .map(|q| format!(", queue {q}"))
                .unwrap_or_default(),
        );
        Ok(Resolved {
            sdk,
            table,
            queue,
            outputs,
            stack,
            account,
        })
    }
}

/// The endpoint in words: a local engine's URL, or AWS itself.
fn endpoint() -> String {
    match env("AWS_ENDPOINT_URL") {
        Some(url) => format!("endpoint {url}"),
        None => "AWS (the region's endpoints)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Change, check_same_place, go_ahead, is_local_url};

    #[test]
    fn when_the_endpoint_only_looks_local_should_ask_for_the_go_ahead() {
        for local in [
            "http://127.0.0.1:4566",
            "http://localhost:8766/",
            "http://[::1]:4566",
        ] {
            assert!(is_local_url(local), "{local}");
        }
        for remote in [
            "https://localhost.example.com",
            "http://127.0.0.1.nip.io:4566",
            "http://localhost@prod.example.com",
            "https://vpce-1.sqs.eu-west-1.vpce.amazonaws.com",
        ] {
            assert!(!is_local_url(remote), "{remote}");
        }
    }

    fn change(confirm: Option<&str>, yes: bool) -> Change {
        Change {
            confirm: confirm.map(str::to_owned),
            yes,
        }
    }

    #[test]
    fn when_a_change_targets_aws_should_need_the_typed_stack_name_or_yes() {
        let prod = Some("loan-servicing-prod");
        assert!(go_ahead(&change(None, false), prod).is_err(), "no go-ahead");
        assert!(go_ahead(&change(Some("loan-servicing-prod"), false), prod).is_ok());
        let wrong = go_ahead(&change(Some("loan-servicing-test"), false), prod);
        assert!(wrong.is_err_and(|why| why.contains("not the target's stack")));
        assert!(go_ahead(&change(None, true), prod).is_ok());
        // A table named directly has no stack to type: only --yes.
        assert!(go_ahead(&change(Some("anything"), false), None).is_err());
        assert!(go_ahead(&change(None, true), None).is_ok());
    }

    #[test]
    fn when_the_queue_is_in_another_account_or_region_should_refuse_the_change() {
        let queue = "https://sqs.eu-west-1.amazonaws.com/111122223333/svc-ServicingQueue-X.fifo";
        assert!(check_same_place(queue, "111122223333", "eu-west-1").is_ok());
        assert!(check_same_place(queue, "444455556666", "eu-west-1").is_err());
        assert!(check_same_place(queue, "111122223333", "us-east-1").is_err());
        let legacy = "https://eu-west-1.queue.amazonaws.com/111122223333/svc-Queue";
        assert!(check_same_place(legacy, "111122223333", "eu-west-1").is_ok());
    }
}
