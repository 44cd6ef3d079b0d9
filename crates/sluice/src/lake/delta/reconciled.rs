//! Which table schemas a lake's tables were last brought to.
//!
//! Opening a lake checks every table's schema against the one this build
//! (and the lake's declared types) expects, and adds missing columns: the
//! committer and readers rely on it. Checking means opening every table —
//! replaying each one's log — and on an object store that is most of what
//! a `sluice get` cost (about 60 of its requests). Schemas change only when
//! sluice adds columns or the user declares types, so `init` and the open
//! that reconciles write a mark, `_sluice_schemas`: a fingerprint of the
//! expected schemas. An open whose fingerprint matches the mark skips the
//! check.
//!
//! A missing or unreadable mark only costs the check. A mark must never
//! outlive the schemas it vouches for: a restore can take a table back to a
//! version before a column was added (a Delta restore restores the table's
//! metadata), so a restore removes the mark before it commits anything, and
//! the next open reconciles. Writers that create tables check them
//! themselves ([`table::ensure`](super::table::ensure)).

use crate::error::Result;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::TableSpec;

/// The mark's name, in the lake's root (ignored by Delta readers, as every
/// `_`-prefixed name is).
pub const MARK: &str = "_sluice_schemas";

/// The fingerprint of the schemas of `specs`: names, paths, columns,
/// partitioning and statistics columns, and this build's version.
pub(crate) fn fingerprint(specs: &[TableSpec]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
    for spec in specs {
        let described = format!(
            "{}|{}|{:?}|{:?}|{:?}\n",
            spec.name, spec.path, spec.columns, spec.partition_columns, spec.stats_columns
        );
        hasher.update(described.as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

/// Whether the lake's tables were brought to the schemas of `fingerprint`.
pub(crate) async fn matches(root: &LakeRoot, fingerprint: &str) -> bool {
    match root.read_file(MARK).await {
        Ok(Some(bytes)) => bytes.as_ref() == fingerprint.as_bytes(),
        Ok(None) => false,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the schema mark; checking every table");
            false
        }
    }
}

/// Record that the lake's tables were brought to `fingerprint`'s schemas.
/// A mark that cannot be written only costs the next open its check.
pub(crate) async fn record(root: &LakeRoot, fingerprint: &str) {
    if let Err(e) = root.write_file(MARK, fingerprint.as_bytes().to_vec()).await {
        tracing::debug!(error = %e, "could not write the schema mark");
    }
}

/// Remove the mark: a table's schema is about to change other than by
/// adding columns (a restore).
pub(crate) async fn forget(root: &LakeRoot) -> Result<()> {
    root.remove_file(MARK).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::layout;

    #[tokio::test]
    async fn a_mark_vouches_only_for_the_schemas_it_was_written_for() {
        let dir = tempfile::tempdir().unwrap();
        let root = LakeRoot::from(dir.path());
        let specs = vec![layout::index_table(), layout::commits_table()];
        let print = fingerprint(&specs);
        assert!(!matches(&root, &print).await, "no mark yet");
        record(&root, &print).await;
        assert!(matches(&root, &print).await);
        let mut evolved = specs.clone();
        evolved[0].stats_columns.push("another".into());
        assert!(!matches(&root, &fingerprint(&evolved)).await, "another schema");
        forget(&root).await.unwrap();
        assert!(!matches(&root, &print).await, "forgotten");
        forget(&root).await.expect("forgetting twice is fine");
    }
}
