//! Condition expressions shared by the writers.

use std::collections::HashMap;

use crate::items::{self, n};

pub(crate) type Names = Option<HashMap<String, String>>;
pub(crate) type Values = Option<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>;
/// A condition expression with its attribute names and values.
pub(crate) type Condition = (&'static str, Names, Values);

/// Only where no item is yet (allocations, action intents).
pub(crate) const CREATE_ONLY: Condition = ("attribute_not_exists(pk)", None, None);

/// The loan item is still at `expected` (`None`: it does not exist yet) — the condition of
/// every verdict, whether it writes the loan or only checks it.
pub(crate) fn version_condition(expected: Option<u64>) -> Condition {
    match expected {
        None => CREATE_ONLY,
        Some(version) => (
            "#version = :expected",
            Some(HashMap::from([(
                "#version".to_owned(),
                items::VERSION.to_owned(),
            )])),
            Some(HashMap::from([(":expected".to_owned(), n(version))])),
        ),
    }
}
