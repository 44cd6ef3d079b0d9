//! The artifact type registry.
//!
//! sluice knows nothing about the domain it stores. Every artifact type —
//! the four built-ins (`metric`, `config`, `data`, `file_ref`) and any number
//! of custom ones — is described by an [`ArtifactType`]: a key, a table under
//! `artifacts/`, typed columns, and how to derive its identity bytes. From that
//! description alone the lake creates the type's table, partitions it, writes,
//! reads and de-duplicates its rows.
//!
//! Types come from three places, merged into one [`TypeRegistry`] when a lake
//! is opened:
//!
//! 1. the built-ins;
//! 2. Rust types linked into the binary and registered with
//!    [`register_artifact_type!`](crate::register_artifact_type) (collected
//!    with the `inventory` crate, no call needed at startup);
//! 3. types declared in the lake's `sluice.toml` (see [`declared`]).
//!
//! Registration validates each type: one definition per key, a table path
//! `artifacts/<name>` that no other type or system table uses, column names
//! that do not shadow the common columns, no duplicate columns.

pub mod builtin;
pub mod declared;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::artifact::ArtifactType;
use crate::artifact::ArtifactTypes;
use crate::artifact::value::ColumnSpec;
use crate::error::{Error, Result};

/// The columns every content table starts with; a type may not declare them.
pub const COMMON_COLUMNS: [&str; 4] =
    ["artifact_id", "origin_step_number", "metadata", "external_path"];

/// Short names of the system tables, which content types may not use.
pub const RESERVED_TABLE_NAMES: [&str; 6] =
    ["index", "artifact_edges", "execution_edges", "executions", "steps", "commits"];

/// A static registration of a Rust artifact type, collected at link time.
pub struct TypeRegistration {
    make: fn() -> Arc<dyn ArtifactType>,
}

impl TypeRegistration {
    /// A registration from a constructor. Use
    /// [`register_artifact_type!`](crate::register_artifact_type) instead of
    /// calling this directly.
    pub const fn new(make: fn() -> Arc<dyn ArtifactType>) -> Self {
        TypeRegistration { make }
    }
}

inventory::collect!(TypeRegistration);

/// Register a Rust [`ArtifactType`] so that every lake opened by this binary
/// has it.
///
/// ```
/// use sluice::registry::ArtifactType;
/// use sluice::artifact::value::{ColumnSpec, ColumnType};
///
/// struct Embedding;
///
/// impl ArtifactType for Embedding {
///     fn key(&self) -> &str { "doc_embedding" }
///     fn table_path(&self) -> String { "artifacts/doc_embeddings".into() }
///     fn columns(&self) -> Vec<ColumnSpec> {
///         vec![
///             ColumnSpec::required("model", ColumnType::String),
///             ColumnSpec::required("vector", ColumnType::Binary),
///         ]
///     }
/// }
///
/// sluice::register_artifact_type!(Embedding);
///
/// let registry = sluice::registry::TypeRegistry::linked().unwrap();
/// assert!(registry.get("doc_embedding").is_ok());
/// ```
#[macro_export]
macro_rules! register_artifact_type {
    ($value:expr) => {
        $crate::inventory::submit! {
            $crate::registry::TypeRegistration::new(|| ::std::sync::Arc::new($value))
        }
    };
}

impl ArtifactTypes for TypeRegistry {
    fn artifact_type(&self, key: &str) -> Result<&Arc<dyn ArtifactType>> {
        self.get(key)
    }
}

/// The comparable description of a type, used to detect conflicting
/// registrations and to list types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeDescriptor {
    /// Type key.
    pub key: String,
    /// Table path relative to the lake root.
    pub table_path: String,
    /// The type's own columns.
    pub columns: Vec<ColumnSpec>,
    /// Partitioned by `origin_step_number`.
    pub partition_by_step: bool,
    /// Where the type came from.
    pub origin: TypeOrigin,
}

impl TypeDescriptor {
    /// The table's short (SQL) name: the last component of its path.
    pub fn table_name(&self) -> &str {
        self.table_path.rsplit('/').next().unwrap_or(&self.table_path)
    }

    fn same_definition(&self, other: &TypeDescriptor) -> bool {
        self.key == other.key
            && self.table_path == other.table_path
            && self.columns == other.columns
            && self.partition_by_step == other.partition_by_step
    }
}

/// Where a registered type was defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeOrigin {
    /// One of sluice's four built-in types.
    Builtin,
    /// A Rust type linked into the binary.
    Linked,
    /// A type declared in the lake's `sluice.toml`.
    Declared,
}

impl std::fmt::Display for TypeOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TypeOrigin::Builtin => "built-in",
            TypeOrigin::Linked => "rust",
            TypeOrigin::Declared => "sluice.toml",
        })
    }
}

#[derive(Clone)]
struct Entry {
    descriptor: TypeDescriptor,
    imp: Arc<dyn ArtifactType>,
}

/// All artifact types known to a lake, in registration order.
#[derive(Clone, Default)]
pub struct TypeRegistry {
    entries: Vec<Entry>,
    by_key: BTreeMap<String, usize>,
}

impl std::fmt::Debug for TypeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| &e.descriptor.key)).finish()
    }
}

impl TypeRegistry {
    /// A registry holding only the built-in types.
    pub fn builtin() -> Self {
        let mut registry = TypeRegistry::default();
        for imp in builtin::all() {
            // Built-ins are valid by construction; a failure here is a bug.
            if let Err(e) = registry.register_with_origin(imp, TypeOrigin::Builtin) {
                panic!("built-in artifact type failed validation: {e}");
            }
        }
        registry
    }

    /// The built-ins plus every Rust type registered with
    /// [`register_artifact_type!`](crate::register_artifact_type) in this binary.
    pub fn linked() -> Result<Self> {
        let mut registry = TypeRegistry::builtin();
        let mut linked: Vec<Arc<dyn ArtifactType>> =
            inventory::iter::<TypeRegistration>.into_iter().map(|r| (r.make)()).collect();
        // Link order is unspecified; register in key order so listings are stable.
        linked.sort_by(|a, b| a.key().cmp(b.key()));
        for imp in linked {
            registry.register_with_origin(imp, TypeOrigin::Linked)?;
        }
        Ok(registry)
    }

    /// Register a type. Registering an identical definition twice is a no-op;
    /// a different definition under a known key is an error.
    pub fn register(&mut self, imp: Arc<dyn ArtifactType>) -> Result<()> {
        self.register_with_origin(imp, TypeOrigin::Linked)
    }

    pub(crate) fn register_with_origin(
        &mut self,
        imp: Arc<dyn ArtifactType>,
        origin: TypeOrigin,
    ) -> Result<()> {
        let descriptor = TypeDescriptor {
            key: imp.key().to_owned(),
            table_path: imp.table_path(),
            columns: imp.columns(),
            partition_by_step: imp.partition_by_step(),
            origin,
        };
        validate(&descriptor)?;
        if let Some(&i) = self.by_key.get(&descriptor.key) {
            let existing = &self.entries[i].descriptor;
            if existing.same_definition(&descriptor) {
                return Ok(());
            }
            return Err(Error::registry(
                &descriptor.key,
                format!(
                    "the key is already registered ({}) with a different definition \
                     (table `{}`, {} columns); a key names exactly one type",
                    existing.origin,
                    existing.table_path,
                    existing.columns.len()
                ),
            ));
        }
        if let Some(other) = self.entries.iter().find(|e| {
            e.descriptor.table_path == descriptor.table_path
                || e.descriptor.table_name() == descriptor.table_name()
        }) {
            return Err(Error::registry(
                &descriptor.key,
                format!(
                    "table `{}` is already used by type `{}`",
                    descriptor.table_path, other.descriptor.key
                ),
            ));
        }
        self.by_key.insert(descriptor.key.clone(), self.entries.len());
        self.entries.push(Entry { descriptor, imp });
        Ok(())
    }

    fn unknown(&self, key: &str) -> Error {
        let known = self.entries.iter().map(|e| e.descriptor.key.clone()).collect();
        Error::UnknownType { key: key.to_owned(), known }
    }

    /// The implementation of a type.
    pub fn get(&self, key: &str) -> Result<&Arc<dyn ArtifactType>> {
        self.by_key.get(key).map(|&i| &self.entries[i].imp).ok_or_else(|| self.unknown(key))
    }

    /// The descriptor of a type.
    pub fn descriptor(&self, key: &str) -> Result<&TypeDescriptor> {
        self.by_key.get(key).map(|&i| &self.entries[i].descriptor).ok_or_else(|| self.unknown(key))
    }

    /// Every registered type's descriptor, in registration order.
    pub fn descriptors(&self) -> impl Iterator<Item = &TypeDescriptor> {
        self.entries.iter().map(|e| &e.descriptor)
    }

    /// Number of registered types.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no type is registered (never true for a registry built by sluice).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A plain name: lowercase ASCII letters, digits and `_`, not starting with
/// a digit. Safe as a folder name and as an unquoted SQL identifier; used for
/// type keys, table and column names, and ingestion tables.
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

fn is_identifier(s: &str) -> bool {
    s.len() <= 64 && is_plain_name(s)
}

fn validate(d: &TypeDescriptor) -> Result<()> {
    let fail = |msg: String| Err(Error::registry(&d.key, msg));
    if !is_identifier(&d.key) {
        return fail(
            "a type key must be 1–64 characters of lowercase letters, digits and `_`, \
             not starting with a digit"
                .into(),
        );
    }
    let Some(name) = d.table_path.strip_prefix("artifacts/") else {
        return fail(format!(
            "table path `{}` is outside `artifacts/`; content tables live at `artifacts/<name>`",
            d.table_path
        ));
    };
    if !is_identifier(name) {
        return fail(format!(
            "table path `{}` must be `artifacts/<name>` with a name of lowercase letters, digits and `_`",
            d.table_path
        ));
    }
    if RESERVED_TABLE_NAMES.contains(&name) {
        return fail(format!("table name `{name}` is reserved for a system table"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for column in &d.columns {
        if COMMON_COLUMNS.contains(&column.name.as_str()) {
            return fail(format!(
                "column `{}` clashes with a common column every content table has ({})",
                column.name,
                COMMON_COLUMNS.join(", ")
            ));
        }
        if !is_identifier(&column.name) {
            return fail(format!(
                "column name `{}` must be lowercase letters, digits and `_`",
                column.name
            ));
        }
        if !seen.insert(column.name.as_str()) {
            return fail(format!("column `{}` is declared twice", column.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::value::{ColumnSpec, ColumnType};

    struct Probe {
        key: &'static str,
        table: &'static str,
        columns: Vec<ColumnSpec>,
    }

    impl ArtifactType for Probe {
        fn key(&self) -> &str {
            self.key
        }
        fn table_path(&self) -> String {
            self.table.into()
        }
        fn columns(&self) -> Vec<ColumnSpec> {
            self.columns.clone()
        }
    }

    fn probe(
        key: &'static str,
        table: &'static str,
        columns: Vec<ColumnSpec>,
    ) -> Arc<dyn ArtifactType> {
        Arc::new(Probe { key, table, columns })
    }

    #[test]
    fn builtins_are_registered() {
        let r = TypeRegistry::builtin();
        let keys: Vec<_> = r.descriptors().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["metric", "config", "data", "file_ref"]);
        assert_eq!(r.descriptor("file_ref").unwrap().table_name(), "file_refs");
    }

    #[test]
    fn identical_reregistration_is_a_noop_but_conflicts_fail() {
        let mut r = TypeRegistry::builtin();
        let cols = vec![ColumnSpec::required("x", ColumnType::Int64)];
        r.register(probe("thing", "artifacts/things", cols.clone())).unwrap();
        r.register(probe("thing", "artifacts/things", cols)).unwrap();
        assert_eq!(r.len(), 5);
        let err = r
            .register(probe(
                "thing",
                "artifacts/things",
                vec![ColumnSpec::required("y", ColumnType::Int64)],
            ))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`thing`") && err.contains("different definition"), "{err}");
        let err =
            r.register(probe("metric", "artifacts/metrics2", vec![])).unwrap_err().to_string();
        assert!(err.contains("different definition"), "{err}");
    }

    #[test]
    fn registration_errors_are_clear() {
        let mut r = TypeRegistry::builtin();
        let cases = [
            (probe("t1", "provenance/t1", vec![]), "outside `artifacts/`"),
            (probe("t2", "artifacts/../x", vec![]), "must be `artifacts/<name>`"),
            (probe("t3", "artifacts/index", vec![]), "reserved"),
            (probe("t4", "artifacts/metrics", vec![]), "already used by type `metric`"),
            (
                probe(
                    "t5",
                    "artifacts/t5",
                    vec![ColumnSpec::required("artifact_id", ColumnType::String)],
                ),
                "clashes with a common column",
            ),
            (
                probe(
                    "t6",
                    "artifacts/t6",
                    vec![
                        ColumnSpec::required("a", ColumnType::String),
                        ColumnSpec::required("a", ColumnType::Int32),
                    ],
                ),
                "declared twice",
            ),
            (probe("Bad-Key", "artifacts/bad", vec![]), "type key"),
        ];
        for (imp, expected) in cases {
            let err = r.register(imp).unwrap_err().to_string();
            assert!(err.contains(expected), "expected `{expected}` in: {err}");
        }
        assert_eq!(r.len(), 4);
    }
}
