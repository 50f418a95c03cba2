//! What `ledgerctl` renders that tests read too (the binary is `main.rs`).

pub mod incident_html;
pub mod ledger_backfill;
pub mod ledger_correct;
pub mod ledger_migrate;
