//! Time travel: reading the lake as of a lake version, an instant, or
//! explicit table versions.

use std::fmt;
use std::str::FromStr;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::error::Error;
use crate::lake::journal::snapshot::LakePoint;

/// The point in history a query reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsOf {
    /// A lake version: the state commit sequence N left, every table read
    /// at that one point (`sluice history` lists them).
    Lake(i64),
    /// An instant: every table as it was then, at one consistent point.
    Time(DateTime<Utc>),
    /// Explicit table versions (`metrics@3,index@5`); tables not named are
    /// read at their latest.
    Tables(BTreeMap<String, u64>),
}

impl AsOf {
    /// One table at one version.
    pub fn table(name: impl Into<String>, version: u64) -> AsOf {
        AsOf::Tables(BTreeMap::from([(name.into(), version)]))
    }

    /// The lake point to resolve.
    pub fn point(&self) -> LakePoint {
        match self {
            AsOf::Lake(seq) => LakePoint::Sequence(*seq),
            AsOf::Time(t) => LakePoint::Time(*t),
            AsOf::Tables(versions) => LakePoint::Tables(versions.clone()),
        }
    }
}

impl FromStr for AsOf {
    type Err = Error;

    /// A point as `--as-of` takes it (errors name `--as-of`).
    fn from_str(s: &str) -> Result<Self, Error> {
        AsOf::parse_for(s, "--as-of")
    }
}

impl AsOf {
    /// A point as the option `flag` (`--as-of`, `--since`, `--to`) takes
    /// it; an error names that option.
    pub fn parse_for(s: &str, flag: &str) -> Result<Self, Error> {
        let bad = |why: String| {
            Error::InvalidInput(format!(
                "{flag} `{s}`: {why}. Expected a lake version (e.g. 3, see `sluice history`), an \
                 RFC 3339 time (e.g. 2026-11-29T08:00:00Z) or table versions (e.g. metrics@3,index@5)"
            ))
        };
        if let Ok(v) = s.parse::<i64>() {
            return Ok(AsOf::Lake(v));
        }
        if s.contains('@') {
            let mut versions = BTreeMap::new();
            for part in s.split(',') {
                let (table, version) = part
                    .trim()
                    .split_once('@')
                    .ok_or_else(|| bad(format!("`{part}` is not table@version")))?;
                let version = version
                    .parse()
                    .map_err(|_| bad(format!("`{version}` is not a table version")))?;
                versions.insert(table.to_owned(), version);
            }
            return Ok(AsOf::Tables(versions));
        }
        DateTime::parse_from_rfc3339(s)
            .map(|t| AsOf::Time(t.with_timezone(&Utc)))
            .map_err(|_| bad("it is neither a number, table@version nor an RFC 3339 time".into()))
    }
}

impl fmt::Display for AsOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsOf::Lake(v) => write!(f, "lake version {v}"),
            AsOf::Time(t) => write!(f, "{}", crate::times::text(*t)),
            AsOf::Tables(versions) => {
                let parts: Vec<String> = versions.iter().map(|(t, v)| format!("{t}@{v}")).collect();
                write!(f, "{}", parts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_times() {
        assert_eq!("3".parse::<AsOf>().unwrap(), AsOf::Lake(3));
        assert_eq!("metrics@3".parse::<AsOf>().unwrap(), AsOf::table("metrics", 3));
        assert!("metrics@x".parse::<AsOf>().is_err());
        assert!(matches!("2026-11-29T08:00:00+01:00".parse::<AsOf>().unwrap(), AsOf::Time(_)));
        let err = "yesterday".parse::<AsOf>().unwrap_err().to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
