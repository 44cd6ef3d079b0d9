//! Medallion transforms: raw → aggregate → curated, in SQL, incremental and
//! exactly once.
//!
//! A transform is DataFusion SQL over one upstream table, declared in the
//! config. In its SQL the upstream's name (`trips` for `raw/trips`) means
//! *the rows the upstream gained since the transform last ran*, read from
//! the data files those upstream versions added ([`source`]), never the
//! whole table. An `aggregate` transform appends its result (partitioned as
//! declared); a `curated` transform MERGEs it into its table by primary key,
//! each column replaced by the source's value or combined as `on_match`
//! says (`target.trips + source.trips` keeps running totals exact).
//!
//! ```text
//!  downstream at version V holds watermark W (a Delta app transaction)
//!      │ upstream head U > W
//!      ▼
//!  rows added upstream in W+1..=U ─▶ SQL ─▶ append / merge
//!      ─▶ commit as exactly V+1 with watermark U   (put-if-absent, no retry)
//!             │ another process took V+1
//!             ▼
//!  start over: read the watermark again (it may already be U)
//! ```
//!
//! The result and the watermark are one Delta commit, made on top of the
//! very version the watermark was read from, so a crash anywhere and any
//! number of processes running the same transform never apply an upstream
//! version twice or skip one. Files written for a lost commit are deleted
//! (an append) or left as orphans for `vacuum --full` (a merge).

mod apply;
pub mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::arrow::datatypes::{Schema, SchemaRef};
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::datasource::MemTable;
use deltalake::datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::{AGGREGATE_DIR, CURATED_DIR, RAW_DIR, TableSpec};
use crate::registry::is_plain_name;

/// How many times a transform starts over after losing its commit.
const MAX_ATTEMPTS: usize = 50;

/// What a transform's table does with each result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Append every result (`<lake>/aggregate/<name>`).
    Aggregate,
    /// MERGE every result by primary key (`<lake>/curated/<name>`).
    Curated,
}

impl Layer {
    /// The lake folder of this layer's tables.
    pub fn dir(self) -> &'static str {
        match self {
            Layer::Aggregate => AGGREGATE_DIR,
            Layer::Curated => CURATED_DIR,
        }
    }
}

/// One `[[transform]]` of the config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transform {
    /// Its table's name.
    pub name: String,
    /// Append (`aggregate`) or merge (`curated`).
    pub layer: Layer,
    /// The upstream: `raw/<table>` (or just `<table>`) or
    /// `aggregate/<transform>`.
    pub from: String,
    /// DataFusion SQL over the upstream's new rows.
    pub sql: String,
    /// Partition columns of its table.
    #[serde(default)]
    pub partition_by: Vec<String>,
    /// The merge key (`curated`).
    #[serde(default)]
    pub primary_key: Vec<String>,
    /// Per column, the value a matched row takes: SQL over `target.` and
    /// `source.` columns (`curated`; default: the source's value).
    #[serde(default)]
    pub on_match: BTreeMap<String, String>,
}

impl Transform {
    /// The upstream's layer folder and table name.
    pub fn upstream(&self) -> (&str, &str) {
        match self.from.split_once('/') {
            Some((layer, name)) => (layer, name),
            None => (RAW_DIR, self.from.as_str()),
        }
    }

    /// The upstream table (named as its folder is).
    pub fn upstream_table(&self) -> TableSpec {
        let (layer, name) = self.upstream();
        TableSpec::ingestion(name, &format!("{layer}/{name}"))
    }

    /// Its table.
    pub fn table(&self) -> TableSpec {
        TableSpec::ingestion(&self.name, &format!("{}/{}", self.layer.dir(), self.name))
    }

    /// The application id its watermark is recorded under.
    fn app_id(&self) -> String {
        let (layer, name) = self.upstream();
        format!("sluice-transform:{layer}/{name}")
    }
}

/// Check a config's transforms: names, layers, keys, and that every
/// upstream is a raw table or an earlier aggregate.
pub fn validate(transforms: &[Transform]) -> std::result::Result<(), String> {
    let mut seen: BTreeMap<&str, Layer> = BTreeMap::new();
    for t in transforms {
        let what = format!("transform `{}`", t.name);
        if !is_plain_name(&t.name) {
            return Err(format!("{what}: a name is lowercase letters, digits and `_`"));
        }
        if seen.insert(&t.name, t.layer).is_some() {
            return Err(format!("{what} is declared twice"));
        }
        let (layer, upstream) = t.upstream();
        if !is_plain_name(upstream) {
            return Err(format!("{what}: `from = \"{}\"` names no table", t.from));
        }
        match layer {
            RAW_DIR => {}
            AGGREGATE_DIR
                if seen.get(upstream) == Some(&Layer::Aggregate) && upstream != t.name => {}
            AGGREGATE_DIR => {
                return Err(format!(
                    "{what}: `from = \"{}\"` must name an aggregate transform declared above it",
                    t.from
                ));
            }
            _ => {
                return Err(format!(
                    "{what}: `from = \"{}\"`: the upstream is `raw/<table>` or \
                     `aggregate/<transform>` (curated tables are merged, so they cannot be \
                     followed incrementally)",
                    t.from
                ));
            }
        }
        let columns = t.partition_by.iter().chain(&t.primary_key).chain(t.on_match.keys());
        if let Some(bad) = columns.clone().find(|c| !is_plain_name(c)) {
            return Err(format!("{what}: `{bad}` is not a plain column name"));
        }
        match t.layer {
            Layer::Curated if t.primary_key.is_empty() => {
                return Err(format!("{what}: a curated table needs a `primary_key`"));
            }
            Layer::Aggregate if !t.primary_key.is_empty() || !t.on_match.is_empty() => {
                return Err(format!(
                    "{what}: `primary_key` and `on_match` belong to curated transforms (an \
                     aggregate appends)"
                ));
            }
            _ => {}
        }
        if let Some(key) = t.on_match.keys().find(|c| t.primary_key.contains(c)) {
            return Err(format!("{what}: `on_match` cannot change the key column `{key}`"));
        }
    }
    Ok(())
}

/// What one run of a transform did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TransformReport {
    /// The transform.
    pub name: String,
    /// Its upstream.
    pub from: String,
    /// The upstream version it had applied before (`None`: none).
    pub after: Option<u64>,
    /// The upstream version it has applied now.
    pub to: u64,
    /// Upstream data files read (only those added after `after`).
    pub files_read: usize,
    /// Upstream rows read.
    pub rows_read: usize,
    /// Rows its SQL produced.
    pub rows_out: usize,
    /// Rows inserted (a merge: new keys; an append: every row).
    pub inserted: usize,
    /// Rows updated (a merge).
    pub updated: usize,
    /// Its table's version holding the result (`None`: nothing to do).
    pub version: Option<u64>,
    /// Commits attempted (more than one when other processes raced it).
    pub attempts: usize,
}

/// Where a transform stands (`sluice ingest status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TransformStatus {
    /// `aggregate` or `curated`.
    pub layer: String,
    /// Its upstream.
    pub from: String,
    /// Its table's version (`None`: not created yet).
    pub version: Option<u64>,
    /// The upstream version it has applied.
    pub applied: Option<u64>,
    /// The upstream's version.
    pub upstream_version: Option<u64>,
}

/// Where `t` stands.
pub async fn status(lake: &LakeRoot, t: &Transform) -> Result<TransformStatus> {
    let (up, own) = (t.upstream_table(), t.table());
    let mut out = TransformStatus {
        layer: t.layer.dir().to_owned(),
        from: t.from.clone(),
        ..Default::default()
    };
    if table::exists(lake, &up).await? {
        out.upstream_version = table::open(lake, &up).await?.version();
    }
    if table::exists(lake, &own).await? {
        let handle = table::open(lake, &own).await?;
        out.version = handle.version();
        out.applied = watermark(&handle, t).await?;
    }
    Ok(out)
}

/// The SQL's result.
pub(crate) struct Output {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl Output {
    fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// Run every transform once, in order.
pub async fn run_all(lake: &LakeRoot, transforms: &[Transform]) -> Result<Vec<TransformReport>> {
    let mut reports = Vec::with_capacity(transforms.len());
    for t in transforms {
        reports.push(run(lake, t).await?);
    }
    Ok(reports)
}

/// Apply what the upstream gained since the transform last ran (see the
/// module doc).
pub async fn run(lake: &LakeRoot, t: &Transform) -> Result<TransformReport> {
    let (up, own) = (t.upstream_table(), t.table());
    let up_name = up.name.as_str();
    let mut report =
        TransformReport { name: t.name.clone(), from: t.from.clone(), ..Default::default() };
    for attempt in 1..=MAX_ATTEMPTS {
        report.attempts = attempt;
        if !table::exists(lake, &up).await? {
            return Ok(report); // nothing has landed upstream yet
        }
        let upstream = table::open(lake, &up).await?;
        let to = upstream.version().unwrap_or_default();
        let downstream = match table::exists(lake, &own).await? {
            true => Some(table::open(lake, &own).await?),
            false => None,
        };
        let after = match &downstream {
            Some(d) => watermark(d, t).await?,
            None => None,
        };
        (report.after, report.to) = (after, after.unwrap_or_default());
        if after.is_some_and(|a| a >= to) {
            return Ok(report);
        }
        let adds = source::added_files(&upstream, up_name, after, to).await?;
        let rows = source::read(&upstream, up_name, &adds).await?;
        (report.files_read, report.rows_read) = (rows.files, rows.rows);
        // Versions that added no rows (compaction) only move the watermark.
        let output = match rows.rows {
            0 => Output { schema: rows.schema, batches: Vec::new() },
            _ => evaluate(t, up_name, rows).await?,
        };
        report.rows_out = output.rows();
        let Some(downstream) = downstream else {
            if output.batches.is_empty() {
                return Ok(report);
            }
            create(lake, &own, t, &output.schema).await?;
            continue; // read the watermark of the table as it now is
        };
        let applied = match t.layer {
            Layer::Aggregate => apply::append(downstream, t, output, after, to).await?,
            Layer::Curated => apply::merge(downstream, t, output, after, to).await?,
        };
        if let Some(applied) = applied {
            report.to = to;
            report.inserted = applied.inserted;
            report.updated = applied.updated;
            report.version = Some(applied.version);
            tracing::info!(transform = %t.name, after = ?after, to, rows = report.rows_out, version = applied.version, "transform applied");
            return Ok(report);
        }
        tracing::debug!(transform = %t.name, "another process committed first; starting over");
    }
    Err(Error::Transform {
        name: t.name.clone(),
        message: format!("other writers took its table's next version {MAX_ATTEMPTS} times"),
    })
}

/// The upstream version the downstream table has applied.
async fn watermark(downstream: &DeltaTable, t: &Transform) -> Result<Option<u64>> {
    let state = downstream.snapshot().map_err(|e| Error::delta(&t.name, e))?;
    let version = state
        .transaction_version(downstream.log_store().as_ref(), t.app_id())
        .await
        .map_err(|e| Error::delta(&t.name, e))?;
    Ok(version.and_then(|v| u64::try_from(v).ok()))
}

/// Run the SQL over the new rows and check its columns.
async fn evaluate(t: &Transform, up_name: &str, rows: source::NewRows) -> Result<Output> {
    let ctx = SessionContext::new();
    let input = MemTable::try_new(rows.schema.clone(), vec![rows.batches])
        .map_err(|e| Error::query(up_name, e))?;
    ctx.register_table(up_name, Arc::new(input)).map_err(|e| Error::query(up_name, e))?;
    let frame = ctx.sql(&t.sql).await.map_err(|e| Error::query(&t.name, e))?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let batches = frame.collect().await.map_err(|e| Error::query(&t.name, e))?;
    let names: BTreeSet<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let bad = |message: String| Err(Error::Transform { name: t.name.clone(), message });
    if let Some(odd) = names.iter().find(|n| !is_plain_name(n)) {
        return bad(format!(
            "its SQL returns a column named `{odd}`; name every column with `AS name` \
             (lowercase letters, digits, `_`)"
        ));
    }
    let declared = t.partition_by.iter().chain(&t.primary_key).chain(t.on_match.keys());
    for column in declared {
        if !names.contains(column.as_str()) {
            return bad(format!(
                "`{column}` is declared in its config but its SQL returns only {names:?}"
            ));
        }
    }
    Ok(Output { schema, batches })
}

/// Create the transform's table from its SQL's columns (all nullable: the
/// SQL decides what it returns).
async fn create(lake: &LakeRoot, own: &TableSpec, t: &Transform, schema: &SchemaRef) -> Result<()> {
    let fields: Vec<_> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    table::open_or_create(lake, own, &Schema::new(fields), t.partition_by.clone()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<(), String> {
        #[derive(Deserialize)]
        struct File {
            transform: Vec<Transform>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        validate(&file.transform)
    }

    const AGG: &str = "[[transform]]\nname = \"agg\"\nlayer = \"aggregate\"\nfrom = \"raw/trips\"\nsql = \"SELECT 1 AS x\"\n";

    #[test]
    fn a_chain_of_aggregate_then_curated_is_valid() {
        let cur = "[[transform]]\nname = \"cur\"\nlayer = \"curated\"\nfrom = \"aggregate/agg\"\nsql = \"SELECT 1 AS x, 2 AS y\"\nprimary_key = [\"x\"]\non_match = { y = \"target.y + source.y\" }\n";
        assert_eq!(parse(&format!("{AGG}{cur}")), Ok(()));
        assert_eq!(parse(AGG.replace("raw/trips", "trips").as_str()), Ok(()));
    }

    #[test]
    fn bad_declarations_name_the_transform_and_the_reason() {
        let cases = [
            (format!("{AGG}{AGG}"), "declared twice"),
            (AGG.replace("raw/trips", "curated/x"), "curated tables are merged"),
            (AGG.replace("raw/trips", "aggregate/later"), "declared above it"),
            (AGG.replace("raw/trips", "raw/../x"), "names no table"),
            (AGG.replace("\"agg\"", "\"Agg\""), "lowercase"),
            (AGG.replace("\"aggregate\"", "\"curated\""), "needs a `primary_key`"),
            (format!("{AGG}primary_key = [\"x\"]\n"), "belong to curated"),
            (
                format!(
                    "{}primary_key = [\"x\"]\non_match = {{ x = \"1\" }}\n",
                    AGG.replace("\"aggregate\"", "\"curated\"")
                ),
                "cannot change the key",
            ),
        ];
        for (text, reason) in cases {
            let err = parse(&text).expect_err(&text);
            assert!(err.contains(reason), "{err} should say {reason}");
        }
    }
}
