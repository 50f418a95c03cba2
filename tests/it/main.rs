//! Integration tests against the local engines (one test binary, one module per concern).

/// Generates one `#[tokio::test]` per engine for each scenario `async fn(Engine)` of a module:
/// DynamoDB behaviour must be the same on DynamoDB Local (the reference) and MiniStack.
macro_rules! on_both_engines {
    ($($scenario:ident),* $(,)?) => {
        mod dynamodb_local {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $scenario() { super::$scenario(integration_tests::Engine::DynamoDbLocal).await; })*
        }
        mod ministack {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $scenario() { super::$scenario(integration_tests::Engine::MiniStack).await; })*
        }
    };
}

mod account_state;
mod aging;
mod bounded_reads;
mod capacity;
mod collections;
mod deadline;
mod engines;
mod evidence;
mod fault_sweep;
mod golden;
mod incident;
mod lambda_path;
mod ledger;
mod money;
mod operations;
mod parking;
mod payments_api;
mod payments_status;
mod privileges;
mod reconciler;
mod relay;
mod retention;
mod runbook;
mod sample_events;
mod soak;
mod warm_instances;
