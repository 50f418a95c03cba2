//! Integration tests against the local engines (one test binary, one module per concern).

mod account_state;
mod collections;
mod engines;
mod lambda_path;
mod operations;
mod payments_api;
mod relay;
