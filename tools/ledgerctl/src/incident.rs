//! `ledgerctl incident`: what a window's deliveries did, account by account, with their money
//! (`servicing_ops::incident`), as JSON (`docs/incident-report.schema.json`) or HTML.

use std::path::PathBuf;

use crate::target::Target;
use chrono::{DateTime, Utc};
use servicing_ops::incident::{self, Query};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Html,
}

#[derive(Debug, clap::Args)]
pub struct IncidentArgs {
    /// Start of the window (decided at or after), RFC 3339, e.g. `2026-11-02T10:00:00Z`.
    #[arg(long, value_parser = crate::time)]
    from: DateTime<Utc>,
    /// End of the window (decided before), RFC 3339, e.g. `2026-11-02T11:00:00Z`.
    #[arg(long, value_parser = crate::time)]
    to: DateTime<Utc>,
    /// Only this source's deliveries (`api` for every API caller), e.g. `prov-a`.
    #[arg(long)]
    source_system: Option<String>,
    /// Only this account, e.g. `acc-1001` (as the records name it: an undecodable body's
    /// account is its raw `accountId`, valid or not, so any text is taken).
    #[arg(long)]
    account: Option<String>,
    /// Decision records: files or directories, plain or gzip (the evidence bucket's objects, a
    /// log export); repeatable. Default: the main job's `.local/decision-records.jsonl`.
    #[arg(long, default_value = ".local/decision-records.jsonl")]
    records: Vec<PathBuf>,
    /// The deduplicating consumer whose deliveries are reported, e.g. `--consumer collections`.
    #[arg(long, default_value = "account-state", value_parser = clap::builder::PossibleValuesParser::new(["account-state", "collections", "ledger-postings"]))]
    consumer: String,
    /// Applied facts this long before --from are compared for suspected duplicates.
    #[arg(long, default_value_t = 24 * 60, value_parser = clap::value_parser!(i64).range(0..=60 * 24 * 400))]
    lookback_minutes: i64,
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
    /// Write the report here instead of stdout (a summary goes to stderr).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit 1 when a collision or suspected duplicate needs a person (for scripts and alarms).
    #[arg(long)]
    fail_on_findings: bool,
}

/// Exit 0 once the report is written; with `--fail-on-findings`, 1 when a collision or a
/// suspected duplicate needs a person.
pub fn run(args: &IncidentArgs, target: &Target) -> anyhow::Result<bool> {
    if args.to <= args.from {
        anyhow::bail!("--to must be after --from");
    }
    let collected = incident::records::read(&args.records)?;
    let query = Query {
        from: args.from,
        to: args.to,
        consumer: args.consumer.clone(),
        source_system: args.source_system.clone(),
        account_id: args.account.clone(),
        lookback: chrono::Duration::minutes(args.lookback_minutes),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the runtime: {e}"))?;
    let now = DateTime::<Utc>::from(std::time::SystemTime::now());
    let report = runtime.block_on(async {
        // With `--table` or `--stack`: each payment's split, the collisions' first payloads,
        // bucket changes and collections actions. Without, what the records say.
        if target.named() {
            let target = target.resolve(None).await?;
            let client = target.dynamodb();
            incident::reconstruct(&query, &collected, Some((&client, &target.table)), now).await
        } else {
            incident::reconstruct(&query, &collected, None, now).await
        }
    })?;
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&report.to_json())?,
        Format::Html => ledgerctl::incident_html::render(&report)?,
    };
    match &args.out {
        Some(path) => {
            std::fs::write(path, text + "\n")
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            for line in report.summary() {
                eprintln!("{line}");
            }
            eprintln!("report: {}", path.display());
        }
        None => println!("{text}"),
    }
    let findings = report.totals.counts.collisions + report.totals.suspected_duplicates;
    Ok(!(args.fail_on_findings && findings > 0))
}
