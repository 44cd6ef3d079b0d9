//! Errors in words a user reads: DataFusion's errors without their Debug
//! spelling and repeated prefixes, and the names nearest a misspelt one.

use deltalake::datafusion::error::DataFusionError;
use deltalake::datafusion::sql::sqlparser::parser::ParserError;

/// A failed SQL statement, said once: the deepest DataFusion error of the
/// chain (the wrappers above it repeat it), a parse error as its message
/// rather than `ParserError("…")`, and no "Error during planning:"-style
/// prefixes.
pub(crate) fn sql(error: &DataFusionError) -> String {
    types_in_words(&sql_text(error))
}

fn sql_text(error: &DataFusionError) -> String {
    let root = error.find_root();
    match root {
        DataFusionError::SQL(parse, _) => match parse.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => {
                format!("SQL syntax: {m}")
            }
            ParserError::RecursionLimitExceeded => {
                "SQL syntax: the statement nests too deeply".into()
            }
        },
        DataFusionError::Plan(m)
            if m.starts_with("DDL not supported") || m.starts_with("DML not supported") =>
        {
            let what = statement(m.split_once(": ").map_or(m.as_str(), |(_, w)| w));
            format!(
                "SQL: {what} is refused: sluice's SQL reads the lake, and a table made or changed \
                 here would vanish with the query (the lake is written by put, pipelines and ingestion)"
            )
        }
        DataFusionError::Plan(m) | DataFusionError::Execution(m) => format!("SQL: {m}"),
        DataFusionError::SchemaError(..) => format!("SQL: {}", root.message()),
        DataFusionError::NotImplemented(m) => format!("SQL: not supported: {m}"),
        DataFusionError::ResourcesExhausted(m) => format!("SQL: out of memory: {m}"),
        DataFusionError::External(e) => e.to_string(),
        other => format!("SQL: {}", other.strip_backtrace()),
    }
}

/// Arrow's type names in a message (`Utf8`, `Decimal128(10, 2)`,
/// `Timestamp(ns)`) as sluice's schemas spell types (`string`,
/// `decimal(10,2)`, `timestamp`), so an error speaks the user's words.
pub(crate) fn types_in_words(text: &str) -> String {
    let simple = |word: &str| -> Option<&'static str> {
        Some(match word {
            // Types sluice's schemas name as they do; the others keep a
            // name of their own, so two types never read the same.
            "Utf8" => "string",
            "LargeUtf8" => "large string",
            "Utf8View" => "string view",
            "Int8" => "int8",
            "Int16" => "int16",
            "Int32" => "int32",
            "Int64" => "int64",
            "UInt8" => "uint8",
            "UInt16" => "uint16",
            "UInt32" => "uint32",
            "UInt64" => "uint64",
            "Float16" => "float16",
            "Float32" => "float32",
            "Float64" => "float64",
            "Boolean" => "bool",
            "Date32" => "date",
            "Date64" => "date64",
            "Binary" => "binary",
            "LargeBinary" => "large binary",
            "BinaryView" => "binary view",
            _ => return None,
        })
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric()) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len());
        let word = &rest[..end];
        let after = &rest[end..];
        let args = after.strip_prefix('(').and_then(|a| a.find(')').map(|close| &a[..close]));
        match (word, args) {
            ("Decimal128" | "Decimal256", Some(args)) => {
                out.push_str(&format!("decimal({})", args.replace(' ', "")));
                rest = &after[args.len() + 2..];
            }
            ("Timestamp", Some(args)) => {
                let zoned = args.contains(',') && !args.contains("None");
                out.push_str(if zoned { "timestamp" } else { "timestamp without time zone" });
                rest = &after[args.len() + 2..];
            }
            _ => {
                out.push_str(simple(word).unwrap_or(word));
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A DataFusion plan name (`CreateMemoryTable`, `Insert Into`) as the SQL
/// a user wrote (`CREATE TABLE`, `INSERT INTO`).
fn statement(plan: &str) -> String {
    let words = match plan {
        "CreateMemoryTable" | "CreateExternalTable" => "CREATE TABLE".to_owned(),
        "CreateCatalogSchema" => "CREATE SCHEMA".to_owned(),
        other => {
            let mut out = String::new();
            for c in other.chars() {
                if c.is_uppercase() && !out.is_empty() && !out.ends_with(' ') {
                    out.push(' ');
                }
                out.push(c);
            }
            out.to_uppercase()
        }
    };
    format!("`{words}`")
}

/// Up to three of `known` nearest to `name` (a typo, a singular for a
/// plural, a different case), nearest first.
pub(crate) fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let lower = name.to_lowercase();
    let mut scored: Vec<(usize, &str)> = known
        .into_iter()
        .filter_map(|k| {
            let other = k.to_lowercase();
            let distance = strsim::levenshtein(&lower, &other);
            let close = distance <= (lower.len().max(3) / 3).max(1)
                || (lower.len() >= 3 && (other.starts_with(&lower) || lower.starts_with(&other)));
            close.then_some((distance, k))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k).collect()
}

/// ` (did you mean `a` or `b`?)`, or nothing.
pub(crate) fn did_you_mean(candidates: &[&str]) -> String {
    match candidates {
        [] => String::new(),
        [one] => format!(" (did you mean `{one}`?)"),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(|c| format!("`{c}`")).collect();
            format!(" (did you mean {} or `{last}`?)", rest.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_is_said_once_in_words() {
        let e = DataFusionError::SQL(
            Box::new(ParserError::ParserError("Expected: an SQL statement, found: SELEC".into())),
            None,
        );
        let wrapped = DataFusionError::Context("planning".into(), Box::new(e));
        assert_eq!(sql(&wrapped), "SQL syntax: Expected: an SQL statement, found: SELEC");
        let plan = DataFusionError::Plan("table 'x' not found".into());
        assert_eq!(sql(&plan), "SQL: table 'x' not found");
        let ddl = DataFusionError::Plan("DDL not supported: CreateMemoryTable".into());
        assert!(sql(&ddl).starts_with("SQL: `CREATE TABLE` is refused"), "{}", sql(&ddl));
        let dml = DataFusionError::Plan("DML not supported: Insert Into".into());
        assert!(sql(&dml).starts_with("SQL: `INSERT INTO` is refused"), "{}", sql(&dml));
        let view = DataFusionError::Plan("DDL not supported: CreateView".into());
        assert!(sql(&view).starts_with("SQL: `CREATE VIEW` is refused"), "{}", sql(&view));
    }

    #[test]
    fn arrow_type_names_are_said_as_schemas_spell_them() {
        assert_eq!(
            types_in_words("Cannot coerce arithmetic expression Utf8 + Int64 to valid types"),
            "Cannot coerce arithmetic expression string + int64 to valid types"
        );
        assert_eq!(
            types_in_words("Decimal128(10, 2) + Timestamp(ns) vs Timestamp(µs, \"UTC\")"),
            "decimal(10,2) + timestamp without time zone vs timestamp"
        );
        // Words that only contain a type name stay as they are.
        assert_eq!(types_in_words("Utf8able Int64x (Utf8)"), "Utf8able Int64x (string)");
        let e = DataFusionError::Plan("Cannot cast Utf8 to Boolean".into());
        assert_eq!(sql(&e), "SQL: Cannot cast string to bool");
        // Two types never read the same.
        assert_eq!(
            types_in_words("Cannot cast Utf8View to Utf8, LargeUtf8 or UInt32"),
            "Cannot cast string view to string, large string or uint32"
        );
    }

    #[test]
    fn the_nearest_names_are_suggested() {
        let known = ["metrics", "configs", "index", "executions", "data"];
        assert_eq!(nearest("metric", known), ["metrics"]);
        assert_eq!(nearest("Configs", known), ["configs"]);
        assert_eq!(nearest("excutions", known), ["executions"]);
        assert!(nearest("zzzzzz", known).is_empty());
        assert_eq!(did_you_mean(&["a", "b", "c"]), " (did you mean `a`, `b` or `c`?)");
        assert_eq!(did_you_mean(&[]), "");
    }
}
