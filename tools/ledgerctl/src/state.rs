//! `ledgerctl state`: one account as stored, in the contract's report shape.

use std::path::PathBuf;

use serde_json::Value;
use servicing_domain::AccountId;
use servicing_store::{ServicingStore, StoreConfig};

use crate::target::Target;

#[derive(Debug, clap::Args)]
pub struct StateArgs {
    /// The account, e.g. `acc_1001`.
    #[arg(value_parser = crate::account_id)]
    account: AccountId,
    /// An `*.expected.json` every state field must match, e.g. `--expect fixtures/samples/basic.expected.json`.
    #[arg(long, value_name = "FILE")]
    expect: Option<PathBuf>,
}

/// The state fields of `expected` (not `counts`, `note`) that differ in `report`.
fn differences(report: &Value, expected: &Value) -> Vec<String> {
    expected
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(field, _)| !matches!(field.as_str(), "counts" | "note"))
        .filter(|(field, want)| report.get(field.as_str()) != Some(want))
        .map(|(field, want)| {
            format!(
                "{field}: expected {want}, stored {}",
                report[field.as_str()]
            )
        })
        .collect()
}

pub fn run(args: &StateArgs, target: &Target) -> anyhow::Result<bool> {
    let account = &args.account;
    let (report, table) = crate::ops::runtime()?.block_on(async {
        let target = target.resolve(None).await?;
        let store = ServicingStore::new(
            target.dynamodb(),
            StoreConfig::new(&target.table, "ledgerctl"),
        );
        let report = servicing_ops::report::account_report(&store, account)
            .await
            .map_err(|e| anyhow::anyhow!("cannot read {account}: {e}"))?;
        Ok::<_, anyhow::Error>((report, target.table))
    })?;
    let report =
        report.ok_or_else(|| anyhow::anyhow!("account {account} does not exist in {table}"))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    let Some(path) = &args.expect else {
        return Ok(true);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let expected: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", path.display()))?;
    let diffs = differences(&report, &expected);
    for d in &diffs {
        eprintln!("{account}: {d}");
    }
    if diffs.is_empty() {
        println!("{account}: matches {}", path.display());
    }
    Ok(diffs.is_empty())
}
