//! Where a command acts, said before it acts: the table (and queue) from `--table`/`--queue`,
//! else the outputs of `--stack`, else the environment (`source .local/env` exports them), and
//! the endpoint, region and account they belong to.

use anyhow::Context;
use aws_config::SdkConfig;

/// `--stack` / `--table`: every command that reads or writes the servicing table.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The CloudFormation stack whose outputs name the table (and queue), e.g.
    /// `--stack loan-servicing-prod`. Default: $STACK_NAME.
    #[arg(long, value_name = "STACK")]
    stack: Option<String>,
    /// The servicing table, e.g. `--table loan-servicing-ServicingTable-1A2B3C4D`. Default: the
    /// stack's `ServicingTableName` output, else $TABLE_NAME.
    #[arg(long, value_name = "TABLE")]
    table: Option<String>,
}

/// `--queue`: the commands that send to the servicing queue.
#[derive(Debug, Clone, clap::Args)]
pub struct QueueArg {
    /// The FIFO servicing queue's URL, e.g. `--queue https://sqs.eu-west-1.amazonaws.com/111122223333/loan-servicing-ServicingQueue-X.fifo`.
    /// Default: the stack's `ServicingQueueUrl` output, else $SERVICING_QUEUE_URL.
    #[arg(long, value_name = "URL")]
    queue: Option<String>,
}

/// What a command acts on, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub sdk: SdkConfig,
    pub table: String,
    pub queue: Option<String>,
    /// Every output of the stack, when one was named.
    pub outputs: Vec<(String, String)>,
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
            stack.map(|s| format!(" (stack {s})")).unwrap_or_default(),
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
