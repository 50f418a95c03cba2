//! The X-Ray trace of the invocation being handled, from the runtime's invocation context:
//! `lambda_runtime` does not set `_X_AMZN_TRACE_ID` when it runs invocations concurrently, so
//! each function's entry point scopes its handler with [`with_trace`]; the variable is the
//! fallback for code run outside such a scope (one invocation at a time).

use std::future::Future;

tokio::task_local! {
    static TRACE_ID: Option<String>;
}

/// Runs `work` with `trace_id` as the invocation's trace (the context's `xray_trace_id`).
pub async fn with_trace<F: Future>(trace_id: Option<String>, work: F) -> F::Output {
    TRACE_ID
        .scope(trace_id.filter(|t| !t.is_empty()), work)
        .await
}

/// The trace of the invocation being handled, if any.
pub fn current_trace_id() -> Option<String> {
    TRACE_ID
        .try_with(Clone::clone)
        .ok()
        .flatten()
        .or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn when_invocations_run_concurrently_should_each_see_its_own_trace() {
        let a = with_trace(Some("Root=1-a".into()), async {
            tokio::task::yield_now().await;
            current_trace_id()
        });
        let b = with_trace(Some("Root=1-b".into()), async {
            tokio::task::yield_now().await;
            current_trace_id()
        });
        let (a, b) = tokio::join!(a, b);
        assert_eq!(
            (a.as_deref(), b.as_deref()),
            (Some("Root=1-a"), Some("Root=1-b"))
        );
    }
}
