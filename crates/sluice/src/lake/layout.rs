//! The lake's table tree and the schema of every table.
//!
//! ```text
//! <lake>/
//! ├── sluice.toml                   optional: declared artifact types
//! ├── artifacts/
//! │   ├── index/                    artifact_id → type, step   (not partitioned)
//! │   ├── metrics/ configs/ data/ file_refs/ <custom>/      (partitioned by step)
//! ├── provenance/
//! │   ├── artifact_edges/           source → target derivations (not partitioned)
//! │   └── execution_edges/          inputs/outputs per execution (not partitioned)
//! ├── orchestration/
//! │   ├── executions/               execution log                (partitioned by step)
//! │   ├── steps/                    step state transitions       (not partitioned)
//! │   └── commits/                  commit journal: sequences and table versions
//! └── _staging/                     workers' sealed results, manifests, quarantine
//! ```
//!
//! A [`TableSpec`] is everything sluice needs to create, check and read a
//! table: its short (SQL) name, path, columns, partitioning and the columns
//! that carry file statistics for data skipping.

use crate::artifact::value::{ColumnSpec, ColumnType};
pub use crate::registry::{COMMON_COLUMNS, RESERVED_TABLE_NAMES};
use crate::registry::{TypeDescriptor, TypeRegistry};

/// The Delta application-transaction id of commit sequences: every table
/// commit of sequence `n` carries the app transaction (`sluice-commit`, n).
pub const TXN_APP_ID: &str = "sluice-commit";

/// The commit-metadata key holding a table commit's sequence number.
pub const SEQ_KEY: &str = "sluice_commit_seq";

/// The staging folder under the lake root: workers' sealed results, commit
/// manifests, quarantine and the writer lock.
pub const STAGING_DIR: &str = "_staging";

/// The default staging root of a lake.
pub fn staging_root(lake_root: &std::path::Path) -> std::path::PathBuf {
    lake_root.join(STAGING_DIR)
}

/// Where commit manifests live, under the staging root.
pub const MANIFEST_DIR: &str = ".commits";

/// The manifest of commit sequence `seq` under a staging root: written
/// before the sequence touches a table, removed when it is finished.
pub fn manifest_file(staging_root: &std::path::Path, seq: i64) -> std::path::PathBuf {
    staging_root.join(MANIFEST_DIR).join(format!("{seq:012}.json"))
}

/// The folder of commit manifests in a lake, relative to its root.
pub fn manifest_folder() -> String {
    format!("{STAGING_DIR}/{MANIFEST_DIR}")
}

/// The sequence a manifest's file name (see [`manifest_file`]) stands for.
pub fn manifest_seq(name: &str) -> Option<i64> {
    let seq = name.strip_suffix(".json")?;
    (seq.len() == 12 && seq.bytes().all(|b| b.is_ascii_digit())).then(|| seq.parse().ok())?
}

/// The partition column of partitioned tables.
pub const STEP_COLUMN: &str = "origin_step_number";

/// What a table holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    /// The content table of an artifact type (its key).
    Content(String),
    /// The artifact index.
    Index,
    /// Artifact derivation edges.
    ArtifactEdges,
    /// Execution input/output edges.
    ExecutionEdges,
    /// The execution log.
    Executions,
    /// Step state transitions.
    Steps,
    /// Results of the pipelines' checks.
    Checks,
    /// The commit journal.
    Commits,
    /// A table of ingestion (`raw/`, `aggregate/`, `curated/`, the ledger):
    /// declared by its YAML schema or transform, written by `sluice ingest`,
    /// kept by the same maintenance as the artifact tables.
    Ingestion,
}

/// The definition of one table of the lake.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Short name, used in SQL and messages.
    pub name: String,
    /// Path relative to the lake root.
    pub path: String,
    /// What the table holds.
    pub kind: TableKind,
    /// All columns, partition columns included.
    pub columns: Vec<ColumnSpec>,
    /// Partition columns (a subset of `columns`).
    pub partition_columns: Vec<String>,
    /// Columns that carry min/max statistics in the Delta log.
    pub stats_columns: Vec<String>,
}

impl TableSpec {
    fn system(
        name: &str,
        path: &str,
        kind: TableKind,
        columns: Vec<ColumnSpec>,
        partitioned: bool,
        stats: &[&str],
    ) -> Self {
        TableSpec {
            name: name.into(),
            path: path.into(),
            kind,
            columns,
            partition_columns: if partitioned { vec![STEP_COLUMN.into()] } else { vec![] },
            // Partition values live in the log, not in the files: no stats for them.
            stats_columns: stats
                .iter()
                .filter(|s| !(partitioned && **s == STEP_COLUMN))
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }

    /// The content table of an artifact type.
    pub fn content(descriptor: &TypeDescriptor) -> Self {
        let mut columns = common_columns();
        columns.extend(descriptor.columns.iter().cloned());
        TableSpec {
            name: descriptor.table_name().to_owned(),
            path: descriptor.table_path.clone(),
            kind: TableKind::Content(descriptor.key.clone()),
            columns,
            partition_columns: if descriptor.partition_by_step {
                vec![STEP_COLUMN.into()]
            } else {
                vec![]
            },
            stats_columns: if descriptor.partition_by_step {
                vec!["artifact_id".into()]
            } else {
                vec!["artifact_id".into(), STEP_COLUMN.into()]
            },
        }
    }

    /// Id columns (beyond the table's de-duplication key) whose key filters
    /// are kept for bounded look-ups: the edge tables' artifact columns, so a
    /// lineage walk reads only the edge files that can hold its frontier,
    /// and the executions' spec id, so an execution-cache check reads only
    /// the files that can hold the specs of its step.
    pub fn lookup_columns(&self) -> &'static [&'static str] {
        match self.kind {
            TableKind::ArtifactEdges => &["source_artifact_id", "target_artifact_id"],
            TableKind::ExecutionEdges => &["artifact_id"],
            TableKind::Executions => &["execution_spec_id"],
            _ => &[],
        }
    }

    /// Every id column the table is looked up by: its de-duplication key,
    /// its [`lookup_columns`](Self::lookup_columns), and the executions'
    /// spec id (the execution cache). Their Parquet files carry a bloom
    /// filter per column and row group (see [`super::delta::table::writer_properties_for`]),
    /// so a look-up decodes only the row groups that may hold its ids.
    pub fn indexed_columns(&self) -> &'static [&'static str] {
        match self.kind {
            TableKind::Content(_) | TableKind::Index => &["artifact_id"],
            TableKind::Executions => &["execution_run_id", "execution_spec_id"],
            TableKind::ArtifactEdges => {
                &["execution_run_id", "source_artifact_id", "target_artifact_id"]
            }
            TableKind::ExecutionEdges => &["execution_run_id", "artifact_id"],
            TableKind::Steps | TableKind::Checks | TableKind::Commits | TableKind::Ingestion => &[],
        }
    }

    /// An ingestion table found at `path` (relative to the lake root). Its
    /// columns are the table's own (Delta's schema); maintenance needs none.
    pub fn ingestion(name: &str, path: &str) -> Self {
        TableSpec {
            name: name.into(),
            path: path.into(),
            kind: TableKind::Ingestion,
            columns: Vec::new(),
            partition_columns: Vec::new(),
            stats_columns: Vec::new(),
        }
    }

    /// Whether the table is partitioned by step.
    pub fn is_partitioned(&self) -> bool {
        !self.partition_columns.is_empty()
    }
}

fn common_columns() -> Vec<ColumnSpec> {
    vec![
        ColumnSpec::required("artifact_id", ColumnType::String),
        ColumnSpec::required(STEP_COLUMN, ColumnType::Int32),
        ColumnSpec::required("metadata", ColumnType::Json),
        ColumnSpec::optional("external_path", ColumnType::String),
    ]
}

use ColumnType::{Bool, Float64, Int32, Int64, Json, String as Str, Timestamp};

/// The artifact index.
pub fn index_table() -> TableSpec {
    TableSpec::system(
        "index",
        "artifacts/index",
        TableKind::Index,
        vec![
            ColumnSpec::required("artifact_id", Str),
            ColumnSpec::required("artifact_type", Str),
            ColumnSpec::required(STEP_COLUMN, Int32),
            ColumnSpec::required("metadata", Json),
        ],
        false,
        &["artifact_id", "artifact_type", STEP_COLUMN],
    )
}

/// Artifact derivation edges.
pub fn artifact_edges_table() -> TableSpec {
    TableSpec::system(
        "artifact_edges",
        "provenance/artifact_edges",
        TableKind::ArtifactEdges,
        vec![
            ColumnSpec::required("execution_run_id", Str),
            ColumnSpec::required("source_artifact_id", Str),
            ColumnSpec::required("target_artifact_id", Str),
            ColumnSpec::required("source_artifact_type", Str),
            ColumnSpec::required("target_artifact_type", Str),
            ColumnSpec::required("source_role", Str),
            ColumnSpec::required("target_role", Str),
            ColumnSpec::optional("group_id", Str),
            ColumnSpec::required("step_boundary", Bool),
        ],
        false,
        &["execution_run_id", "source_artifact_id", "target_artifact_id"],
    )
}

/// Execution input/output edges.
pub fn execution_edges_table() -> TableSpec {
    TableSpec::system(
        "execution_edges",
        "provenance/execution_edges",
        TableKind::ExecutionEdges,
        vec![
            ColumnSpec::required("execution_run_id", Str),
            ColumnSpec::required("direction", Str),
            ColumnSpec::required("role", Str),
            ColumnSpec::required("artifact_id", Str),
        ],
        false,
        &["execution_run_id", "direction", "artifact_id"],
    )
}

/// The execution log.
pub fn executions_table() -> TableSpec {
    TableSpec::system(
        "executions",
        "orchestration/executions",
        TableKind::Executions,
        vec![
            ColumnSpec::required("execution_run_id", Str),
            ColumnSpec::required("execution_spec_id", Str),
            ColumnSpec::required("step_run_id", Str),
            ColumnSpec::required(STEP_COLUMN, Int32),
            ColumnSpec::required("operation_name", Str),
            ColumnSpec::required("params", Json),
            ColumnSpec::required("timestamp_start", Timestamp),
            ColumnSpec::optional("timestamp_end", Timestamp),
            ColumnSpec::optional("worker_id", Str),
            ColumnSpec::optional("compute_backend", Str),
            ColumnSpec::required("success", Bool),
            ColumnSpec::optional("error", Str),
            ColumnSpec::optional("tool_output", Str),
            ColumnSpec::required("metadata", Json),
        ],
        true,
        &["execution_run_id", "execution_spec_id", "step_run_id", STEP_COLUMN, "success"],
    )
}

/// Step state transitions.
pub fn steps_table() -> TableSpec {
    TableSpec::system(
        "steps",
        "orchestration/steps",
        TableKind::Steps,
        vec![
            ColumnSpec::required("step_run_id", Str),
            ColumnSpec::required("step_spec_id", Str),
            ColumnSpec::required("pipeline_run_id", Str),
            ColumnSpec::required("step_number", Int32),
            ColumnSpec::required("step_name", Str),
            ColumnSpec::required("status", Str),
            ColumnSpec::required("operation_name", Str),
            ColumnSpec::required("params", Json),
            ColumnSpec::optional("total_count", Int64),
            ColumnSpec::optional("succeeded_count", Int64),
            ColumnSpec::optional("failed_count", Int64),
            ColumnSpec::required("timestamp", Timestamp),
            ColumnSpec::optional("duration_seconds", Float64),
            ColumnSpec::optional("error", Str),
            ColumnSpec::required("metadata", Json),
        ],
        false,
        &["step_run_id", "step_spec_id", "pipeline_run_id", "step_number", "status", "timestamp"],
    )
}

/// Results of checks: one row per check evaluated, per step run.
pub fn checks_table() -> TableSpec {
    TableSpec::system(
        "checks",
        "orchestration/checks",
        TableKind::Checks,
        vec![
            ColumnSpec::required("check_run_id", Str),
            ColumnSpec::required("pipeline_run_id", Str),
            ColumnSpec::required("step_run_id", Str),
            ColumnSpec::required("step_number", Int32),
            ColumnSpec::required("step_name", Str),
            ColumnSpec::required("check_name", Str),
            ColumnSpec::required("severity", Str),
            ColumnSpec::required("passed", Bool),
            ColumnSpec::optional("observed", Json),
            ColumnSpec::required("rows_examined", Int64),
            ColumnSpec::optional("error", Str),
            ColumnSpec::required("timestamp", Timestamp),
            ColumnSpec::required("metadata", Json),
        ],
        false,
        &["check_run_id", "pipeline_run_id", "step_run_id", "check_name", "passed"],
    )
}

/// Folder of ingestion tables (`<lake>/raw/<table>`), beside `artifacts/`.
pub const RAW_DIR: &str = "raw";

/// Folder of aggregate tables made by ingestion transforms
/// (`<lake>/aggregate/<name>`).
pub const AGGREGATE_DIR: &str = "aggregate";

/// Folder of curated tables made by ingestion transforms
/// (`<lake>/curated/<name>`).
pub const CURATED_DIR: &str = "curated";

/// Folder of the ingestion ledger (`<lake>/ingest/ledger`).
pub const INGEST_LEDGER_DIR: &str = "ingest/ledger";

/// The commit journal: one row when a commit sequence starts, one when it
/// completes (or is abandoned), with the table versions around it. See
/// [`journal`](super::journal).
pub fn commits_table() -> TableSpec {
    TableSpec::system(
        "commits",
        "orchestration/commits",
        TableKind::Commits,
        vec![
            ColumnSpec::required("commit_seq", Int64),
            ColumnSpec::required("phase", Str),
            ColumnSpec::required("run_count", Int64),
            ColumnSpec::required("table_versions", Json),
            ColumnSpec::required("rows_added", Json),
            ColumnSpec::required("timestamp", Timestamp),
            ColumnSpec::optional("token", Str),
            ColumnSpec::optional("owner", Str),
            ColumnSpec::optional("position", Int64),
            ColumnSpec::optional("table_commits", Json),
            ColumnSpec::optional("reason", Str),
            ColumnSpec::optional("restore_to", Json),
        ],
        false,
        &["commit_seq", "phase", "position"],
    )
}

/// Every table of a lake with these types, in commit order: content tables
/// (in registration order), index, artifact edges, execution edges,
/// executions; then steps and the commit journal, which are written outside
/// the commit sequence.
pub fn all_tables(registry: &TypeRegistry) -> Vec<TableSpec> {
    let mut tables: Vec<TableSpec> = registry.descriptors().map(TableSpec::content).collect();
    tables.push(index_table());
    tables.push(artifact_edges_table());
    tables.push(execution_edges_table());
    tables.push(executions_table());
    tables.push(steps_table());
    tables.push(checks_table());
    tables.push(commits_table());
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_give_their_sequence() {
        let name = manifest_file(std::path::Path::new("s"), 42);
        assert_eq!(manifest_seq(name.file_name().unwrap().to_str().unwrap()), Some(42));
        for other in ["42.json", "00000000004x.json", "000000000042.json.tmp", "README"] {
            assert_eq!(manifest_seq(other), None, "{other}");
        }
    }

    #[test]
    fn builtin_tree_matches_the_documented_layout() {
        let tables = all_tables(&TypeRegistry::builtin());
        let paths: Vec<_> = tables.iter().map(|t| t.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "artifacts/metrics",
                "artifacts/configs",
                "artifacts/data",
                "artifacts/file_refs",
                "artifacts/index",
                "provenance/artifact_edges",
                "provenance/execution_edges",
                "orchestration/executions",
                "orchestration/steps",
                "orchestration/checks",
                "orchestration/commits",
            ]
        );
        let partitioned: Vec<_> =
            tables.iter().filter(|t| t.is_partitioned()).map(|t| t.name.as_str()).collect();
        assert_eq!(partitioned, ["metrics", "configs", "data", "file_refs", "executions"]);
        for t in &tables {
            for s in &t.stats_columns {
                assert!(t.columns.iter().any(|c| &c.name == s), "{}: stats column {s}", t.name);
            }
        }
    }
}
