//! `SqlBuilder`: one SQL statement over the lake.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::error::DataFusionError;
use deltalake::datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use deltalake::datafusion::execution::runtime_env::RuntimeEnvBuilder;
use deltalake::datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use deltalake::datafusion::sql::parser::Statement;
use deltalake::datafusion::sql::sqlparser::ast;

use super::AsOf;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::delta::table;
use crate::lake::journal::snapshot::{self, LakeSnapshot};
use crate::lake::layout::{TableKind, TableSpec};

/// Spill files one merge pass of a memory-limited sort reads at once. Left
/// unlimited, a sort's merge reserves a buffer for as many of its spill files
/// as the pool allows, and the other sorts of the same join (each side, each
/// partition) then fail to reserve theirs; with 16 a merge of 100M ids takes
/// more passes but never starves its siblings.
const SPILL_MERGE_FAN_IN: usize = 16;

/// Memory consumers a limited statement's "resources exhausted" error names.
const CONSUMERS_NAMED: NonZeroUsize = NonZeroUsize::new(5).unwrap();

/// A SQL statement to run over the lake, built with
/// [`Lake::sql`](crate::Lake::sql).
#[derive(Debug)]
#[must_use = "a query does nothing until it is executed"]
pub struct SqlBuilder<'a> {
    lake: &'a Lake,
    sql: String,
    as_of: Option<AsOf>,
    memory_limit: Option<usize>,
}

/// The result of a query.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// Result rows.
    pub batches: Vec<RecordBatch>,
    /// The version each table the statement read was read at.
    pub table_versions: BTreeMap<String, u64>,
    /// The last commit sequence wholly visible to the query.
    pub lake_version: Option<i64>,
}

impl QueryResult {
    /// Total number of result rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

impl Lake {
    /// A SQL statement over every table of the lake.
    pub fn sql(&self, sql: impl Into<String>) -> SqlBuilder<'_> {
        SqlBuilder::new(self, sql)
    }
}

impl<'a> SqlBuilder<'a> {
    fn new(lake: &'a Lake, sql: impl Into<String>) -> Self {
        SqlBuilder { lake, sql: sql.into(), as_of: None, memory_limit: None }
    }

    /// Read the lake as of a lake version, a time or explicit table versions
    /// (default: the latest consistent point).
    pub fn with_as_of(mut self, as_of: Option<AsOf>) -> Self {
        self.as_of = as_of;
        self
    }

    /// Run within about `bytes` of memory (`None`: no limit, the default):
    /// sorts and aggregations spill to files in the system's temporary
    /// folder (`TMPDIR`) past it, and joins
    /// are planned as sort-merge joins, which spill, instead of hash joins,
    /// which hold their whole build side. Slower than the default for small
    /// inputs; what keeps a join over a table of 100M ids off the OOM killer.
    /// A statement that cannot stay within the limit fails with DataFusion's
    /// "resources exhausted" error rather than growing; every sort and
    /// exchange of the plan needs a few batches, so a limit below about
    /// 16 MiB fails even small joins.
    pub fn with_memory_limit(mut self, bytes: Option<usize>) -> Self {
        self.memory_limit = bytes;
        self
    }

    fn session(&self) -> Result<SessionContext> {
        let mut config = SessionConfig::new().with_information_schema(true);
        let Some(bytes) = self.memory_limit else {
            return Ok(SessionContext::new_with_config(config));
        };
        let options = config.options_mut();
        options.optimizer.prefer_hash_join = false;
        // Each sort keeps this much back for merging its spill files; four
        // sorts (two sides, two partitions) must fit in the limit.
        options.execution.sort_spill_reservation_bytes =
            options.execution.sort_spill_reservation_bytes.min(bytes / 16);
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(bytes),
                CONSUMERS_NAMED,
            )))
            .with_max_spill_merge_fan_in(SPILL_MERGE_FAN_IN)
            .build_arc()?;
        Ok(SessionContext::new_with_config_rt(config, runtime))
    }

    /// A DataFusion context with every table the statement names registered,
    /// and the versions they were loaded at. Use it to run the statement with
    /// your own DataFusion code (streaming, `EXPLAIN`, …).
    ///
    /// Every table is read at one consistent point of the lake (see
    /// [`crate::lake::journal::snapshot`]): the latest, or the `--as-of` point.
    pub async fn context(&self) -> Result<(SessionContext, BTreeMap<String, u64>)> {
        self.context_at().await.map(|(ctx, versions, _)| (ctx, versions))
    }

    async fn context_at(&self) -> Result<(SessionContext, BTreeMap<String, u64>, LakeSnapshot)> {
        let ctx = self.session()?;
        let state = ctx.state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(&self.sql, &dialect)?;
        let references = state.resolve_table_references(&statement)?;
        let all = self.lake.table_specs();
        let specs: BTreeMap<String, &TableSpec> = all.iter().map(|t| (t.name.clone(), t)).collect();
        // The latest point through the handles the lake keeps: heads found by
        // a `stat` or a few, the journal parsed once per version.
        let snapshot = match &self.as_of {
            None => self.lake.snapshot().await?,
            Some(as_of) => snapshot::resolve(self.lake.root(), &all, &as_of.point()).await?,
        };
        // A look at the catalog (`SHOW TABLES`, `information_schema.…`)
        // sees every table of the lake; a query, the tables it names.
        let shows_tables = matches!(&statement, Statement::Statement(s) if matches!(**s, ast::Statement::ShowTables { .. }));
        let catalog =
            shows_tables || references.iter().any(|r| r.schema() == Some("information_schema"));
        let mut names: Vec<String> = references.iter().map(|r| r.table().to_owned()).collect();
        if catalog {
            names.extend(self.lake.held_table_specs().await?.into_iter().map(|s| s.name));
        }
        let mut versions = BTreeMap::new();
        for name in &names {
            let name = name.as_str();
            if versions.contains_key(name) {
                continue;
            }
            let Some(spec) = specs.get(name) else {
                if let Some((handle, version)) = self.ingestion_table(name).await? {
                    handle
                        .update_datafusion_session(&ctx.state())
                        .map_err(|e| Error::delta(name, e))?;
                    versions.insert(name.to_owned(), version);
                    ctx.register_table(name, handle.table_provider().await?)?;
                }
                continue;
            };
            let version = self.version_of(spec, &snapshot)?;
            let handle = self.lake.table_at(spec, version).await?;
            handle.update_datafusion_session(&ctx.state()).map_err(|e| Error::delta(name, e))?;
            versions.insert(name.to_owned(), version);
            ctx.register_table(name, handle.table_provider().await?)?;
        }
        Ok((ctx, versions, snapshot))
    }

    /// An ingestion table (`raw/<name>`, `aggregate/<name>`, `curated/<name>`,
    /// or `ingest_ledger`), at its latest version or the one `--as-of name@V`
    /// names. Ingestion commits are not commit sequences, so lake versions and
    /// times do not pin them.
    async fn ingestion_table(&self, name: &str) -> Result<Option<(deltalake::DeltaTable, u64)>> {
        if !crate::registry::is_plain_name(name) {
            return Ok(None);
        }
        let Some(spec) = crate::lake::delta::held::ingestion_tables(self.lake.root())
            .await?
            .into_iter()
            .find(|spec| spec.name == name)
        else {
            return Ok(None);
        };
        if !table::exists(self.lake.root(), &spec).await? {
            return Ok(None);
        }
        let mut handle = table::open(self.lake.root(), &spec).await?;
        if let Some(AsOf::Tables(given)) = &self.as_of
            && let Some(version) = given.get(name)
        {
            table::load_version(&mut handle, name, *version).await?;
        }
        let version = handle.version().unwrap_or_default();
        Ok(Some((handle, version)))
    }

    /// The version of one table at the snapshot (the journal: its own
    /// version at that point).
    fn version_of(&self, spec: &TableSpec, snapshot: &LakeSnapshot) -> Result<u64> {
        let version = if spec.kind == TableKind::Commits {
            snapshot.journal_version
        } else {
            snapshot.version_of(&spec.name)
        };
        version.ok_or_else(|| Error::TimeTravel {
            table: spec.name.clone(),
            as_of: self.as_of.as_ref().map_or_else(|| "now".to_owned(), ToString::to_string),
            message: "the table did not exist at that point".into(),
        })
    }

    /// A statement naming a table the lake lacks: said as such, with the
    /// nearest names the lake has ([`Lake::table_spec`]).
    async fn no_such_table(&self, error: DataFusionError) -> Error {
        let DataFusionError::Plan(message) = error.find_root() else { return error.into() };
        let Some(quoted) =
            message.strip_prefix("table '").and_then(|m| m.strip_suffix("' not found"))
        else {
            return error.into();
        };
        let name = quoted.rsplit('.').next().unwrap_or(quoted);
        match self.lake.table_spec(name).await {
            Err(unknown) => unknown,
            Ok(_) => error.into(),
        }
    }

    /// Run the statement and collect its rows. A statement that would
    /// define or change a table (`CREATE TABLE`, `INSERT`, `COPY`) is
    /// refused: it would change only this query's session and vanish with
    /// it. An empty result is one batch of no rows, so it keeps its columns.
    pub async fn execute(self) -> Result<QueryResult> {
        let (ctx, table_versions, snapshot) = self.context_at().await?;
        let read_only = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false);
        let df = match ctx.sql_with_options(&self.sql, read_only).await {
            Ok(df) => df,
            Err(e) => return Err(self.no_such_table(e).await),
        };
        let schema = df.schema().inner().clone();
        let mut batches = df.collect().await?;
        if batches.is_empty() {
            batches.push(RecordBatch::new_empty(schema));
        }
        Ok(QueryResult { batches, table_versions, lake_version: snapshot.sequence })
    }
}
