use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: QuarantineCommand,
}

fn redrive_retention(args: &[&str]) -> Option<i64> {
    let base = [
        "ledgerctl",
        "redrive",
        "--queue",
        "q",
        "account-state/2026-11-02/1/m",
    ];
    let cli = Cli::try_parse_from(base.iter().chain(args)).expect("parses");
    match cli.command {
        QuarantineCommand::Redrive { retention_days, .. } => retention_days,
        other => panic!("not a redrive: {other:?}"),
    }
}

#[test]
fn when_redrive_is_given_no_retention_should_not_assume_one() {
    assert_eq!(
        redrive_retention(&[]),
        None,
        "the item's recorded retention decides"
    );
    assert_eq!(redrive_retention(&["--retention-days", "60"]), Some(60));
}
