//! The wire's dates and timestamps, read by RFC 3339's grammar (§5.6) exactly.
//!
//! chrono's parsers alone are more lenient than the grammar: `%Y-%m-%d` takes a one-digit month
//! or day and a signed or five-digit year, and `parse_from_rfc3339` takes a space for `T` and a
//! leap second in any minute. The published schemas (`format: date`, `date-time`) refuse those,
//! and what is accepted here is what the bus carries on: the two must agree.

use chrono::{DateTime, NaiveDate, Timelike, Utc};

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
/// at 23:59 UTC.
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
    let parsed = DateTime::parse_from_rfc3339(text).ok()?.with_timezone(&Utc);
    // chrono keeps a leap second as a nanosecond count of a second or more, in any minute.
    let leap_second = parsed.nanosecond() >= 1_000_000_000;
    (!leap_second || (parsed.hour(), parsed.minute()) == (23, 59)).then_some(parsed)
}
