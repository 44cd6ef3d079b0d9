//! Canonical JSON: one byte string for every JSON value.
//!
//! Metric and config artifacts are identified by the hash of their content, so
//! two equal values must serialize to exactly the same bytes however they were
//! built. The canonical form is:
//!
//! 1. object keys sorted by their UTF-8 bytes, no duplicate keys;
//! 2. no whitespace;
//! 3. one number form: a number with an integral value that an `f64` holds
//!    exactly (|x| < 2^53) is written as an integer (`1.0` → `1`, `-0.0` → `0`);
//!    any other integer is written in full; any other float in the shortest form
//!    that reads back to the same `f64` (`0.1`, `1e300`);
//! 4. strings escaped as `serde_json` escapes them (only `"`, `\` and control
//!    characters; everything else stays literal UTF-8).

use serde_json::{Number, Value};

use crate::error::{Error, Result};

/// Largest integer that an `f64` represents exactly together with all smaller ones.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Serialize a value to its canonical JSON text.
pub fn to_string(value: &Value) -> Result<String> {
    let bytes = to_vec(value)?;
    // Every piece written is UTF-8 (literals, digits, serde_json's escapes).
    String::from_utf8(bytes).map_err(|e| Error::Internal(format!("canonical JSON: {e}")))
}

/// Serialize a value to its canonical JSON bytes.
pub fn to_vec(value: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_value(value, &mut out)?;
    Ok(out)
}

/// Parse JSON text and return its canonical form.
pub fn canonicalize(text: &str) -> Result<String> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::json("canonicalizing", e))?;
    to_string(&value)
}

fn write_value(value: &Value, out: &mut Vec<u8>) -> Result<()> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out)?;
                out.push(b':');
                write_value(item, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_number(n: &Number, out: &mut Vec<u8>) -> Result<()> {
    use std::io::Write;
    let written = if let Some(i) = n.as_i64() {
        write!(out, "{i}")
    } else if let Some(u) = n.as_u64() {
        write!(out, "{u}")
    } else if let Some(f) = n.as_f64() {
        if !f.is_finite() {
            return Err(Error::NonFiniteNumber { context: "canonical JSON".into(), value: f });
        }
        if f.fract() == 0.0 && f.abs() < MAX_SAFE_INTEGER {
            // Exact: |f| < 2^53, so the cast loses nothing. `-0.0` becomes `0`.
            write!(out, "{}", f as i64)
        } else {
            // serde_json writes the shortest round-tripping form.
            match Number::from_f64(f) {
                Some(n) => write!(out, "{n}"),
                None => write!(out, "{f}"),
            }
        }
    } else {
        Ok(())
    };
    written.map_err(|e| Error::Internal(format!("canonical JSON: {e}")))
}

fn write_string(s: &str, out: &mut Vec<u8>) -> Result<()> {
    // serde_json's string escaping is already minimal and deterministic (the
    // same bytes as `Value::String(s).to_string()`).
    serde_json::to_writer(out, s).map_err(|e| Error::json("canonical JSON", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_recursively_and_drops_whitespace() {
        let v = json!({"b": 1, "a": {"z": [1, 2, {"y": true, "x": null}], "c": "s"}});
        assert_eq!(
            to_string(&v).unwrap(),
            r#"{"a":{"c":"s","z":[1,2,{"x":null,"y":true}]},"b":1}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_serde_json_displays_them() {
        for text in [
            "",
            "plain",
            "quote \" and \\",
            "tab\tnew\nline\u{1}\u{1f}",
            "é ∑ 🦀",
            "\u{7f}\u{2028}",
        ] {
            let mut out = Vec::new();
            write_string(text, &mut out).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), Value::String(text.into()).to_string());
        }
    }

    #[test]
    fn one_number_form() {
        assert_eq!(canonicalize("1.0").unwrap(), "1");
        assert_eq!(canonicalize("-0.0").unwrap(), "0");
        assert_eq!(canonicalize("1e2").unwrap(), "100");
        assert_eq!(canonicalize("0.1").unwrap(), "0.1");
        assert_eq!(canonicalize("0.10").unwrap(), "0.1");
        assert_eq!(canonicalize("18446744073709551615").unwrap(), "18446744073709551615");
        assert_eq!(canonicalize("-9223372036854775808").unwrap(), "-9223372036854775808");
        assert_eq!(canonicalize("1e300").unwrap(), canonicalize("1.0e300").unwrap());
    }

    #[test]
    fn escapes_strings_minimally() {
        assert_eq!(canonicalize(r#""a\u00e9\n\"""#).unwrap(), "\"aé\\n\\\"\"");
    }

    #[test]
    fn rejects_malformed_json() {
        assert!(canonicalize("{\"a\":").is_err());
    }
}
