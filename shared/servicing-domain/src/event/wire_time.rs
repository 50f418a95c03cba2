//! The wire's dates and timestamps, read by RFC 3339's grammar (§5.6) exactly.
//!
//! chrono's parsers alone are more lenient than the grammar: `%Y-%m-%d` takes a one-digit month
//! or day and a signed or five-digit year, and `parse_from_rfc3339` takes a space for `T` and a
//! leap second in any minute. The published schemas (`format: date`, `date-time`) refuse those,
//! and what is accepted here is what the bus carries on: the two must agree.

use chrono::{DateTime, NaiveDate, Timelike, Utc};

/// The schema's rule (a `not` pattern beside `format: date-time`) for the times
/// [`parse_timestamp`] refuses at the edges of the four-digit years: on 0000-01-01 with an
/// offset ahead of UTC, on 9999-12-31 with one behind it.
pub const OUTSIDE_FOUR_DIGIT_YEARS: &str = concat!(
    r"^(0000-01-01[Tt].*\+|9999-12-31[Tt].*-)",
    r"([0-9]{2}:(0[1-9]|[1-5][0-9])|(0[1-9]|1[0-9]|2[0-3]):[0-9]{2})$"
);

/// A `full-date`: `YYYY-MM-DD`, two digits for month and day, that is a calendar date.
pub fn parse_date(text: &str) -> Option<NaiveDate> {
    let b = text.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| b[i].is_ascii_digit());
    shape
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
}

/// A `date-time`: a [`parse_date`] date, `T` (or `t`), `HH:MM:SS`, an optional fraction of at
/// least one digit, then `Z` (or `z`) or `±HH:MM`. A leap second (`:60`) only where one can be:
/// at 23:59 UTC. Nor a time on 0000-01-01 ahead of UTC or on 9999-12-31 behind it: in UTC it
/// may fall outside the four-digit years, which the bus could not carry (the schema's
/// [`OUTSIDE_FOUR_DIGIT_YEARS`] refuses the same).
pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    parse_date(text.get(..10)?)?;
    let time = text.get(10..)?.strip_prefix(['T', 't'])?;
    let clock = time.get(..8)?.as_bytes();
    let clock_shape = clock[2] == b':'
        && clock[5] == b':'
        && [0, 1, 3, 4, 6, 7]
            .iter()
            .all(|&i| clock[i].is_ascii_digit());
    if !clock_shape {
        return None;
    }
    let mut offset = time.get(8..)?;
    if let Some(fraction) = offset.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        offset = &fraction[digits..];
    }
    let numeric_offset = |o: &[u8]| {
        o.len() == 6
            && matches!(o[0], b'+' | b'-')
            && o[3] == b':'
            && [1, 2, 4, 5].iter().all(|&i| o[i].is_ascii_digit())
    };
    if !(matches!(offset, "Z" | "z") || numeric_offset(offset.as_bytes())) {
        return None;
    }
    let zero_offset = matches!(offset, "Z" | "z" | "+00:00" | "-00:00");
    let edge_of_the_years = match &text[..10] {
        "0000-01-01" => offset.starts_with('+'),
        "9999-12-31" => offset.starts_with('-'),
        _ => false,
    };
    if edge_of_the_years && !zero_offset {
        return None;
    }
    let parsed = DateTime::parse_from_rfc3339(text).ok()?.with_timezone(&Utc);
    // chrono keeps a leap second as a nanosecond count of a second or more, in any minute.
    let leap_second = parsed.nanosecond() >= 1_000_000_000;
    (!leap_second || (parsed.hour(), parsed.minute()) == (23, 59)).then_some(parsed)
}

#[cfg(test)]
mod tests {
    use chrono::Datelike;

    use super::*;

    /// What is accepted is carried on in UTC (`occurredAt`), so its year must be one the
    /// bus's `date-time` can write: four digits, unsigned.
    #[test]
    fn every_accepted_time_is_a_four_digit_year_in_utc() {
        for text in [
            "0000-01-01T00:30:00+01:00",
            "0000-01-01T23:59:59.5+00:01",
            "0000-01-01T00:30:00Z",
            "0000-01-01T00:30:00-01:00",
            "9999-12-31T23:30:00-01:00",
            "9999-12-31T23:30:00+01:00",
            "9999-12-31T23:59:60-00:00",
        ] {
            if let Some(utc) = parse_timestamp(text) {
                assert!((0..=9999).contains(&utc.year()), "{text} is {utc:?} in UTC");
                assert!(!utc.to_rfc3339().starts_with(['+', '-']), "{text}");
            }
        }
        assert!(parse_timestamp("0000-01-01T00:30:00Z").is_some());
        assert!(parse_timestamp("9999-12-31T23:30:00+01:00").is_some());
    }
}
