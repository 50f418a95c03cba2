//! Settings of a function, read once at its cold start from a lookup: the environment in a
//! Lambda, a closure over a map in tests. A missing required value or a number outside its
//! range fails the start with an error that names the setting and its rule, instead of running
//! on a guess (no `days × 86400` overflow, no truncating cast).

use std::ops::RangeInclusive;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{name} must be {rule}, got {value:?}")]
    Invalid {
        name: &'static str,
        rule: String,
        value: String,
    },
}

/// A setting's value by name (`None`: unset).
type Lookup<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// Where settings come from.
pub struct Settings<'a> {
    get: Lookup<'a>,
}

impl std::fmt::Debug for Settings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Settings")
    }
}

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Settings<'a> {
    /// The process environment.
    pub fn from_env() -> Self {
        Self::new(environment)
    }

    pub fn new(get: impl Fn(&str) -> Option<String> + 'a) -> Self {
        Self { get: Box::new(get) }
    }

    /// A value that must be present and non-empty.
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        (self.get)(name)
            .filter(|v| !v.is_empty())
            .ok_or(ConfigError::Missing(name))
    }

    /// A value that may be absent (unset or empty: `None`).
    pub fn optional(&self, name: &'static str) -> Option<String> {
        (self.get)(name).filter(|v| !v.is_empty())
    }

    /// `true` or `false`, or `default` when unset or empty.
    pub fn flag(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.optional(name).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(ConfigError::Invalid {
                name,
                rule: "true or false".into(),
                value: other.to_owned(),
            }),
        }
    }

    /// A whole number in `range`, or `default` when unset.
    pub fn number(
        &self,
        name: &'static str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let Some(value) = (self.get)(name) else {
            return Ok(default);
        };
        value
            .parse::<u64>()
            .ok()
            .filter(|v| range.contains(v))
            .ok_or(ConfigError::Invalid {
                name,
                rule: format!("a whole number in {}..={}", range.start(), range.end()),
                value,
            })
    }

    /// A number of whole days in `range` (at most 3650, so never an overflow), as a duration.
    pub fn days(
        &self,
        name: &'static str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Result<Duration, ConfigError> {
        debug_assert!(*range.end() <= 3650, "days are bounded");
        Ok(Duration::from_secs(
            self.number(name, default, range)? * 86_400,
        ))
    }
}

/// A function's typed configuration, read from [`Settings`]: implement `from_settings`, get
/// `from_env` (the cold start) and `from_lookup` (tests) with it.
pub trait FromSettings: Sized {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError>;

    fn from_env() -> Result<Self, ConfigError> {
        Self::from_settings(&Settings::from_env())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_settings(&Settings::new(get))
    }
}

/// A value already checked against a range that fits the target type.
pub fn narrow<T: TryFrom<u64> + Default>(value: u64) -> T {
    T::try_from(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn when_a_required_value_is_missing_or_empty_should_name_it() {
        let settings = Settings::new(lookup(&[("EMPTY", "")]));
        assert_eq!(
            settings.required("ABSENT"),
            Err(ConfigError::Missing("ABSENT"))
        );
        assert_eq!(
            settings.required("EMPTY"),
            Err(ConfigError::Missing("EMPTY"))
        );
    }

    #[test]
    fn when_a_number_is_outside_its_range_or_malformed_should_say_the_rule() {
        let settings = Settings::new(lookup(&[("BIG", "366"), ("WORD", "five"), ("OK", "7")]));
        for name in ["BIG", "WORD"] {
            let err = settings.number(name, 1, 1..=365).expect_err(name);
            assert!(
                err.to_string()
                    .starts_with(&format!("{name} must be a whole number in 1..=365")),
                "{err}"
            );
        }
        assert_eq!(settings.number("OK", 1, 1..=365), Ok(7));
        assert_eq!(settings.number("UNSET", 25, 1..=9600), Ok(25));
        assert_eq!(
            settings.days("OK", 1, 1..=365),
            Ok(Duration::from_secs(7 * 86_400))
        );
    }
}
