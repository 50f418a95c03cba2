//! `ledgerctl state`: one account as stored, in the contract's report shape.

use std::process::ExitCode;

use serde_json::Value;
use servicing_domain::AccountId;
use servicing_store::{ServicingStore, StoreConfig};

#[derive(Debug)]
pub struct StateArgs {
    table: String,
    account: AccountId,
    expect: Option<String>,
}

pub fn parse(args: &[String]) -> Result<StateArgs, String> {
    let (mut table, mut account, mut expect) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--table" => table = it.next().cloned(),
            "--expect" => expect = it.next().cloned(),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            id => {
                account = Some(AccountId::parse(id).map_err(|e| format!("account id {id:?}: {e}"))?)
            }
        }
    }
    Ok(StateArgs {
        table: table.ok_or("--table is required")?,
        account: account.ok_or("the account id is required")?,
        expect,
    })
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

pub fn run(args: &StateArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(async {
        let sdk = aws_setup::load().await;
        let store = ServicingStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            StoreConfig::new(&args.table, "ledgerctl"),
        );
        servicing_ops::report::account_report(&store, &args.account).await
    });
    let report = match report {
        Ok(Some(report)) => report,
        Ok(None) => {
            eprintln!("account {} does not exist in {}", args.account, args.table);
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("cannot read {}: {e}", args.account);
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    let Some(path) = &args.expect else {
        return ExitCode::SUCCESS;
    };
    let expected: Value = match std::fs::read_to_string(path).map(|t| serde_json::from_str(&t)) {
        Ok(Ok(expected)) => expected,
        Ok(Err(e)) => {
            eprintln!("{path} is not JSON: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let diffs = differences(&report, &expected);
    if diffs.is_empty() {
        println!("{}: matches {path}", args.account);
        ExitCode::SUCCESS
    } else {
        for d in &diffs {
            eprintln!("{}: {d}", args.account);
        }
        ExitCode::FAILURE
    }
}
