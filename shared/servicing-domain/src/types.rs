//! Value types of the contract. Each constructor enforces the contract's rule, so a value that
//! exists is valid (parse, don't validate).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Largest amount accepted on the wire: 10^15 minor units. Sums of such amounts stay far from
/// `i64::MAX`, but every balance operation is still checked.
pub const MAX_AMOUNT_MINOR: i64 = 1_000_000_000_000_000;

/// The rule a wire amount must follow (what a refused amount is told).
pub const AMOUNT_RULE: &str = "must be an integer of minor units in 0..=10^15";

/// Why a value was refused: which rule it broke. The field name is added by the decoder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleViolation(pub String);

fn violation(rule: impl Into<String>) -> RuleViolation {
    RuleViolation(rule.into())
}

fn check_len(value: &str, max: usize) -> Result<(), RuleViolation> {
    if value.is_empty() || value.len() > max {
        return Err(violation(format!("must be 1..{max} characters long")));
    }
    Ok(())
}

/// Identity of a business fact: `(sourceSystem, sourceEventId)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    pub system: String,
    pub event_id: String,
}

impl SourceRef {
    /// Longest `sourceSystem`, in bytes (ASCII: characters).
    pub const MAX_SYSTEM_LEN: usize = 64;
    /// Longest `sourceEventId`, in bytes (ASCII: characters).
    pub const MAX_EVENT_ID_LEN: usize = 128;

    pub fn parse_system(system: &str) -> Result<String, RuleViolation> {
        check_len(system, Self::MAX_SYSTEM_LEN)?;
        if !system
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        {
            return Err(violation("must match [A-Za-z0-9._:-]"));
        }
        Ok(system.to_owned())
    }

    pub fn parse_event_id(event_id: &str) -> Result<String, RuleViolation> {
        check_len(event_id, Self::MAX_EVENT_ID_LEN)?;
        if !event_id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(violation("must be printable ASCII without spaces"));
        }
        Ok(event_id.to_owned())
    }

    pub fn new(system: &str, event_id: &str) -> Result<Self, RuleViolation> {
        Ok(Self {
            system: Self::parse_system(system)?,
            event_id: Self::parse_event_id(event_id)?,
        })
    }
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.system, self.event_id)
    }
}

/// A loan account id: 1..64 of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AccountId(String);

impl AccountId {
    /// Longest account id, in bytes (ASCII: characters).
    pub const MAX_LEN: usize = 64;

    pub fn parse(value: &str) -> Result<Self, RuleViolation> {
        check_len(value, Self::MAX_LEN)?;
        if !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        {
            return Err(violation("must match [A-Za-z0-9_-]"));
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AccountId {
    type Error = RuleViolation;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<AccountId> for String {
    fn from(value: AccountId) -> Self {
        value.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An ISO 4217 alphabetic code of a currency (not a precious metal, testing or "no currency"
/// code such as `XAU`, `XTS`, `XXX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Currency([u8; 3]);

impl Currency {
    pub fn parse(value: &str) -> Result<Self, RuleViolation> {
        let bytes = match value.as_bytes() {
            [a, b, c] if [a, b, c].iter().all(|x| x.is_ascii_uppercase()) => [*a, *b, *c],
            _ => {
                return Err(violation(
                    "must be an ISO 4217 code of three upper-case letters",
                ));
            }
        };
        match iso_currency::Currency::from_code(value) {
            Some(code) if !code.is_special() => Ok(Self(bytes)),
            _ => Err(violation(
                "must be an ISO 4217 currency code (three letters are not enough: e.g. EUR, USD)",
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII upper-case letters are ever stored.
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl TryFrom<String> for Currency {
    type Error = RuleViolation;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Currency> for String {
    fn from(value: Currency) -> Self {
        value.as_str().to_owned()
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A wire amount: integer minor units in `0..=10^15`. Direction is carried by the event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Amount(i64);

impl Amount {
    pub const ZERO: Amount = Amount(0);

    pub fn new(minor: i64) -> Result<Self, RuleViolation> {
        if !(0..=MAX_AMOUNT_MINOR).contains(&minor) {
            return Err(violation(AMOUNT_RULE));
        }
        Ok(Self(minor))
    }

    pub fn minor(self) -> i64 {
        self.0
    }
}

/// An amount of one currency. Arithmetic is checked: overflow and mixed currencies are errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Money {
    pub amount: Amount,
    pub currency: Currency,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("currency {got} differs from {expected}")]
    CurrencyMismatch { expected: Currency, got: Currency },
    #[error("amount arithmetic overflowed")]
    Overflow,
    #[error("amount would become negative")]
    Negative,
}

impl Money {
    pub fn new(amount: Amount, currency: Currency) -> Self {
        Self { amount, currency }
    }

    pub fn minor(&self) -> i64 {
        self.amount.minor()
    }

    /// The minor units of `self`, provided it is in `currency`.
    pub fn minor_in(&self, currency: Currency) -> Result<i64, MoneyError> {
        if self.currency != currency {
            return Err(MoneyError::CurrencyMismatch {
                expected: currency,
                got: self.currency,
            });
        }
        Ok(self.minor())
    }
}

/// Checked balance arithmetic for non-negative balances held in minor units.
pub fn add_minor(balance: i64, delta: i64) -> Result<i64, MoneyError> {
    balance.checked_add(delta).ok_or(MoneyError::Overflow)
}

pub fn sub_minor(balance: i64, delta: i64) -> Result<i64, MoneyError> {
    let result = balance.checked_sub(delta).ok_or(MoneyError::Overflow)?;
    if result < 0 {
        return Err(MoneyError::Negative);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_source_system_has_a_space_should_reject() {
        assert!(SourceRef::new("core banking", "x").is_err());
        assert!(SourceRef::new("core-banking.v2:eu_1", "pmt 1").is_err());
        assert!(SourceRef::new("core-banking.v2:eu_1", "pmt_1/2#3").is_ok());
    }

    #[test]
    fn when_lengths_are_at_the_limits_should_accept_and_one_more_should_reject() {
        assert!(AccountId::parse(&"a".repeat(64)).is_ok());
        assert!(AccountId::parse(&"a".repeat(65)).is_err());
        assert!(AccountId::parse("").is_err());
        assert!(SourceRef::new(&"s".repeat(64), &"e".repeat(128)).is_ok());
        assert!(SourceRef::new(&"s".repeat(65), "e").is_err());
        assert!(SourceRef::new("s", &"e".repeat(129)).is_err());
    }

    #[test]
    fn when_currency_is_not_three_upper_case_letters_should_reject() {
        for bad in ["eur", "EURO", "E1R", "", "€UR"] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Currency::parse("EUR").map(|c| c.to_string()),
            Ok("EUR".into())
        );
    }

    #[test]
    fn when_amount_is_out_of_range_should_reject() {
        assert!(Amount::new(-1).is_err());
        assert!(Amount::new(MAX_AMOUNT_MINOR + 1).is_err());
        assert!(Amount::new(MAX_AMOUNT_MINOR).is_ok());
    }

    #[test]
    fn when_balance_arithmetic_misbehaves_should_error() {
        assert_eq!(add_minor(i64::MAX, 1), Err(MoneyError::Overflow));
        assert_eq!(sub_minor(5, 6), Err(MoneyError::Negative));
        let eur = Currency::parse("EUR").expect("EUR");
        let usd = Currency::parse("USD").expect("USD");
        let m = Money::new(Amount::new(5).expect("5"), usd);
        assert!(matches!(
            m.minor_in(eur),
            Err(MoneyError::CurrencyMismatch { .. })
        ));
    }
}
