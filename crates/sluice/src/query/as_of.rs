//! Time travel: reading tables as of a version or an instant.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::error::Error;

/// The point in history a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// A Delta table version (each table read at that version).
    Version(u64),
    /// An instant: each table read at its latest version committed at or
    /// before it.
    Time(DateTime<Utc>),
}

impl FromStr for AsOf {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if let Ok(v) = s.parse::<u64>() {
            return Ok(AsOf::Version(v));
        }
        DateTime::parse_from_rfc3339(s).map(|t| AsOf::Time(t.with_timezone(&Utc))).map_err(|e| {
            Error::InvalidInput(format!(
                "--as-of `{s}`: expected a table version (e.g. 3) or an RFC 3339 time \
                 (e.g. 2026-11-29T08:00:00Z): {e}"
            ))
        })
    }
}

impl fmt::Display for AsOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsOf::Version(v) => write!(f, "version {v}"),
            AsOf::Time(t) => write!(f, "{}", t.to_rfc3339()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_times() {
        assert_eq!("3".parse::<AsOf>().unwrap(), AsOf::Version(3));
        assert!(matches!("2026-11-29T08:00:00+01:00".parse::<AsOf>().unwrap(), AsOf::Time(_)));
        let err = "yesterday".parse::<AsOf>().unwrap_err().to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
