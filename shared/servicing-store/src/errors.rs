//! What a DynamoDB answer means for the caller: one classifier of exception codes for every
//! path (transient: retry; refused: never retry; corrupt: an operator looks).

use aws_sdk_dynamodb::error::SdkError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Throttling, timeouts, 5xx, connection trouble: retry the message later.
    #[error("transient DynamoDB failure: {0}")]
    Transient(String),
    /// The request itself is wrong (validation, item too large, access denied): retrying the
    /// same message will not help.
    #[error("DynamoDB rejected the request: {0}")]
    Rejected(String),
    /// Stored data that does not decode: an operator must look.
    #[error("stored item is corrupt: {0}")]
    Corrupt(String),
    /// Never sent, and nothing wrong with it (the caller's deadline came first): retry later.
    #[error("not sent: {0}")]
    NotSent(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient(_) | StoreError::NotSent(_))
    }
}

/// A request the SDK could not build: it would never succeed, so it is not retried.
pub(crate) fn invalid_request(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Rejected(error.to_string())
}
/// Throttling, 5xx, timeouts and connection failures are transient; the rest is not.
pub fn classify<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match error {
        SdkError::ServiceError(e) => classify_service(e.into_err()),
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Transient(format!("{error:?}"))
        }
        other => StoreError::Rejected(format!("{other:?}")),
    }
}

/// The answer of an `UpdateItem` conditioned on the item's state: `true` written, `false` its
/// condition refused it (the item moved on: not an error); anything else classified.
pub(crate) fn conditional_update<R: std::fmt::Debug + Send + Sync + 'static>(
    result: Result<
        aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
        SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError, R>,
    >,
) -> Result<bool, StoreError> {
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    match result {
        Ok(_) => Ok(true),
        Err(e) => match e.into_service_error() {
            UpdateItemError::ConditionalCheckFailedException(_) => Ok(false),
            other => Err(classify_service(other)),
        },
    }
}

/// One classifier for every path: only an error that says *this request* can never succeed
/// is permanent (the caller quarantines it); everything else — throttling, 5xx, unknown codes,
/// no code at all, and misconfiguration such as a missing table or denied access, which must
/// not quarantine every message — is retried (and reaches the DLQ and its alarm if it lasts).
pub(crate) fn classify_service<E>(error: E) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error,
{
    let code = error.code().unwrap_or("Unknown").to_owned();
    let message = format!("{code}: {}", error.message().unwrap_or_default());
    if refuses_the_request(&code) {
        StoreError::Rejected(message)
    } else {
        StoreError::Transient(message)
    }
}

/// The reason code of each item of a cancelled transaction, in the request's order (`"None"`
/// for an item that did not cause the cancellation).
pub(crate) fn cancellation_codes(
    cancelled: &aws_sdk_dynamodb::types::error::TransactionCanceledException,
) -> Vec<&str> {
    cancelled
        .cancellation_reasons()
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect()
}

/// DynamoDB error codes (of an operation, or of a cancelled transaction's item) that mean the
/// request as such is wrong: sending it again cannot help.
pub(crate) fn refuses_the_request(code: &str) -> bool {
    matches!(
        code,
        "ValidationException"
            | "ValidationError"
            | "SerializationException"
            | "ItemCollectionSizeLimitExceededException"
            | "ItemCollectionSizeLimitExceeded"
    )
}

/// Cancellation reason codes that mean "try again later".
pub(crate) fn is_throttling(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded"
    )
}

#[cfg(test)]
mod classification_tests {
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;

    use super::*;

    fn with_code(code: Option<&str>) -> StoreError {
        let mut meta = ErrorMetadata::builder().message("m");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        classify_service(GetItemError::generic(meta.build()))
    }

    #[test]
    fn when_dynamodb_answers_an_error_should_quarantine_only_what_refuses_the_request() {
        for code in [
            Some("RequestLimitExceeded"),
            Some("ThrottlingException"),
            Some("ProvisionedThroughputExceededException"),
            Some("InternalServerError"),
            Some("ServiceUnavailable"),
            Some("SomeCodeAddedNextYear"),
            Some("AccessDeniedException"),
            Some("ResourceNotFoundException"),
            None,
        ] {
            assert!(with_code(code).is_transient(), "{code:?}");
        }
        for code in [
            "ValidationException",
            "ItemCollectionSizeLimitExceededException",
        ] {
            assert!(
                matches!(with_code(Some(code)), StoreError::Rejected(_)),
                "{code}"
            );
        }
    }
}
