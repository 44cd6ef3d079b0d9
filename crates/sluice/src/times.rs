//! How sluice writes a time for people and tools: RFC 3339 in UTC with
//! milliseconds and a `Z` (`2026-12-05T06:45:50.698Z`) — in `status`,
//! `runs`, `history`, `ingest status` and their JSON alike. Milliseconds,
//! because a time copied from `history` into `--as-of` must not fall
//! before the commit it was read from.

use chrono::{DateTime, SecondsFormat, Utc};

/// A time as sluice writes it.
pub fn text(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Microseconds since the epoch (the lake's timestamp columns) as
/// [`text`]; empty when out of range.
pub fn from_micros(us: i64) -> String {
    DateTime::from_timestamp_micros(us).map(text).unwrap_or_default()
}

/// Milliseconds since the epoch (Delta's commit times) as [`text`].
pub fn from_millis(ms: i64) -> Option<String> {
    DateTime::from_timestamp_millis(ms).map(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(from_micros(1_764_917_150_698_940), "2025-12-05T06:45:50.698Z");
        assert_eq!(from_millis(0).as_deref(), Some("1970-01-01T00:00:00.000Z"));
        let parsed = DateTime::parse_from_rfc3339(&from_micros(1_764_917_150_698_940)).unwrap();
        assert_eq!(parsed.timestamp_millis(), 1_764_917_150_698);
    }
}
