//! Every code a quarantine record can carry: one closed set, so an operator's filter
//! (`ledgerctl quarantine list --code`) is checked against it, `docs/runbook.md` lists exactly
//! it, and a record built with any other code fails every test that builds one
//! (`QuarantineEntry` is checked where its item is made, in debug builds).

/// A quarantine code: who writes it, what it means and what an operator does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineCode {
    pub code: &'static str,
    pub written_by: &'static str,
    pub means: &'static str,
}

const fn code(code: &'static str, written_by: &'static str, means: &'static str) -> QuarantineCode {
    QuarantineCode {
        code,
        written_by,
        means,
    }
}

/// The closed set, in the order `docs/runbook.md` lists it.
pub const QUARANTINE_CODES: &[QuarantineCode] = &[
    code(
        "not_json",
        "account-state",
        "the body is not JSON: the producer resends a corrected body",
    ),
    code(
        "not_an_object",
        "account-state",
        "the body is JSON but not an object: the producer resends a corrected body",
    ),
    code(
        "duplicate_key",
        "account-state",
        "a JSON object with the same key twice (readers disagree on which counts): the producer resends",
    ),
    code(
        "invalid_field",
        "account-state",
        "a field is missing or breaks the contract (reason names it): the producer resends",
    ),
    code(
        "event_time_in_future",
        "account-state",
        "eventTime too far ahead of the consumer's clock; not claimed, so a corrected resend applies",
    ),
    code(
        "api_payment_not_accepted",
        "account-state",
        "a fact under the API's reserved `api:` prefix that no accepted payment proves: a security review, never a redrive",
    ),
    code(
        "collision",
        "account-state, collections, ledger-postings",
        "an identity seen before with another payload: the first stands; never redriven",
    ),
    code(
        "currency_mismatch",
        "account-state",
        "an amount in another currency than the account's",
    ),
    code(
        "amount_overflow",
        "account-state",
        "applying it would overflow a balance",
    ),
    code(
        "negative_balance",
        "account-state",
        "applying it would make a balance negative",
    ),
    code(
        "account_exists",
        "account-state",
        "a LOAN_OPENED for an account already opened",
    ),
    code(
        "installment_exists",
        "account-state",
        "an INSTALLMENT_DUE whose number the account already holds",
    ),
    code(
        "due_before_opening",
        "account-state",
        "an installment due before its account opened",
    ),
    code(
        "already_reversed",
        "account-state",
        "a second, different reversal of a payment already reversed",
    ),
    code(
        "reversal_amount_mismatch",
        "account-state",
        "a reversal whose amount is not its payment's",
    ),
    code(
        "reversal_account_mismatch",
        "account-state, reconciler",
        "a reversal of a payment applied on another account",
    ),
    code(
        "reversal_target_not_a_payment",
        "account-state",
        "a reversal naming a fact that is not a payment",
    ),
    code(
        "parking_full",
        "account-state",
        "the account's parked facts are at their bound: this fact is quarantined, not a neighbour; redrive once the awaited fact applies",
    ),
    code(
        "parked_body_too_large",
        "account-state",
        "a body too large to park: redrive once the awaited fact applies",
    ),
    code(
        "awaited_fact_missing",
        "reconciler",
        "parked past the park retention: what it waited for never applied; its claim is released, so a resend applies",
    ),
    code(
        "store_rejected",
        "account-state",
        "DynamoDB refused this fact's request as such (e.g. an item too large): nothing claimed (a released parked fact's claim is released)",
    ),
    code(
        "invalid_event",
        "collections, ledger-postings",
        "an event on the bus that does not decode as its detail-type, or of a schemaVersion major this build does not know",
    ),
    code(
        "unpostable",
        "ledger-postings",
        "a money event the ledger cannot post: its sub-ledger is in another currency, or a balance would overflow",
    ),
    code(
        "before_opening",
        "ledger-postings",
        "an event of a fact older than the account's opening balance (ledger migrate), which holds it already: nothing to post",
    ),
    code(
        "unpublishable",
        "outbox-relay",
        "a record's event this record may not publish, or one EventBridge can never take",
    ),
    code(
        "sqs_refused",
        "outbox-relay",
        "the servicing queue refused an accepted API payment as the sender's fault",
    ),
];

/// Codes no current version writes, on records earlier ones kept (quarantine records never
/// expire): a listing still filters on them.
pub const RETIRED_QUARANTINE_CODES: &[QuarantineCode] = &[
    code(
        "account_not_opened",
        "account-state, before parking",
        "an event for an account not opened after its retries; now parked, then awaited_fact_missing",
    ),
    code(
        "reversal_target_missing",
        "account-state, before parking",
        "a reversal whose payment had not applied after its retries; now parked, then awaited_fact_missing",
    ),
];

/// Whether `code` is one of [`QUARANTINE_CODES`].
pub fn is_quarantine_code(code: &str) -> bool {
    QUARANTINE_CODES.iter().any(|c| c.code == code)
}

/// The codes alone.
pub fn quarantine_code_names() -> Vec<&'static str> {
    QUARANTINE_CODES.iter().map(|c| c.code).collect()
}

/// Every code a stored record may carry, current then retired (a listing's closed set).
pub fn listable_code_names() -> Vec<&'static str> {
    QUARANTINE_CODES
        .iter()
        .chain(RETIRED_QUARANTINE_CODES)
        .map(|c| c.code)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_codes_are_listed_should_be_unique_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for c in QUARANTINE_CODES.iter().chain(RETIRED_QUARANTINE_CODES) {
            assert!(seen.insert(c.code), "{} twice", c.code);
            assert!(
                c.code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                c.code
            );
        }
    }

    /// `docs/runbook.md`'s tables of quarantine codes are exactly these sets, in this order.
    #[test]
    fn when_the_runbook_lists_quarantine_codes_should_list_exactly_these() {
        let runbook = include_str!("../../../docs/runbook.md");
        let codes = |heading: &str| -> Vec<&str> {
            runbook
                .split(heading)
                .nth(1)
                .unwrap_or_else(|| panic!("docs/runbook.md has a `{heading}` section"))
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with("#"))
                .filter_map(|l| l.strip_prefix("| `"))
                .filter_map(|l| l.split('`').next())
                .collect()
        };
        assert_eq!(codes("## Quarantine codes"), quarantine_code_names());
        let retired: Vec<&str> = RETIRED_QUARANTINE_CODES.iter().map(|c| c.code).collect();
        assert_eq!(codes("### Retired quarantine codes"), retired);
    }
}
