//! A lake: a root folder of Delta tables, its config and its artifact types.
//!
//! [`Lake::open`] reads `sluice.toml`, builds the [`TypeRegistry`] (built-ins,
//! linked Rust types, declared types) and reconciles every existing table with
//! the schema sluice expects: columns that a newer type definition added are
//! added to the table (nullable, so old rows read as null); a column whose
//! type conflicts is an error that names the table and column.
//! [`Lake::init`] additionally creates every missing table. Neither rewrites
//! data or recreates a table that exists.

pub mod append;
pub mod config;
pub mod delta;
pub mod io;
pub mod journal;
pub(crate) mod kept_files;
pub mod keys;
pub mod layout;
pub mod read;
pub mod spec_successes;
pub mod unique_success;
pub mod writer;

use std::path::Path;
use std::sync::Arc;

use deltalake::arrow::array::{Array, Int64Array};

use crate::error::{Error, Result};
use crate::registry::declared::DeclaredType;
use crate::registry::{TypeOrigin, TypeRegistry};
use config::LakeConfig;
use delta::{handles, table};
pub use io::location::LakeRoot;
use journal::{snapshot, tip as journal_tip};
use layout::TableSpec;
use read::id_files;
use snapshot::{LakePoint, LakeSnapshot};
use table::EnsureOutcome;

/// A pinned point of the lake and the tables opened at it.
#[derive(Debug, Default)]
pub(crate) struct PinnedReads {
    point: Option<LakeSnapshot>,
    tables: std::collections::HashMap<String, deltalake::DeltaTable>,
}

pub(crate) use io::lock::WriterLock;

/// The environment variable naming the default lake root.
pub const LAKE_ENV: &str = "SLUICE_LAKE";

/// An open lake.
#[derive(Debug, Clone)]
pub struct Lake {
    root: LakeRoot,
    config: LakeConfig,
    registry: Arc<TypeRegistry>,
    /// When set, reads by id reuse one resolved lake point and the table
    /// handles opened at it.
    snapshots: Option<Arc<tokio::sync::Mutex<PinnedReads>>>,
    /// Table handles kept between calls (see [`handles`]).
    handles: Arc<handles::Handles>,
    /// The journal as last parsed (see [`Lake::snapshot`]).
    journal: Arc<std::sync::Mutex<Option<Arc<journal::Journal>>>>,
    /// The committer's journal, kept between commits (see [`journal_tip`]).
    journal_tip: Arc<std::sync::Mutex<Option<journal_tip::JournalTip>>>,
    /// What look-ups by id plan with, per table version (see [`id_files`]).
    id_files: Arc<id_files::KeptIdFiles>,
}

/// What [`Lake::init`] or [`Lake::open`] did to each table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitReport {
    /// Tables created (short names).
    pub created: Vec<String>,
    /// Tables that gained columns: (table, columns).
    pub evolved: Vec<(String, Vec<String>)>,
    /// Tables that existed unchanged.
    pub unchanged: Vec<String>,
}

/// Size and shape of one table, as `sluice tables` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableInfo {
    /// Short name.
    pub name: String,
    /// Path relative to the lake root.
    pub path: String,
    /// Latest version.
    pub version: u64,
    /// Rows (from file statistics).
    pub rows: u64,
    /// Active data files.
    pub files: u64,
    /// Bytes of active data files.
    pub bytes: u64,
    /// Partition columns.
    pub partition_columns: Vec<String>,
}

impl Lake {
    /// Open an existing lake and reconcile its tables' schemas. Fails if the
    /// root does not exist.
    pub async fn open(root: impl Into<LakeRoot>) -> Result<Lake> {
        let lake = Self::load(root.into()).await?;
        let found = match &lake.root {
            LakeRoot::Local(path) => path.is_dir(),
            // A prefix holds a lake once it holds sluice's journal, or
            // ingestion's tables (a lake only `sluice ingest` wrote).
            LakeRoot::Store(_) => {
                table::exists(&lake.root, &layout::commits_table()).await?
                    || !delta::held::ingestion_tables(&lake.root).await?.is_empty()
            }
        };
        if !found {
            return Err(Error::NotInitialized { what: "lake".into(), path: lake.root.shown("") });
        }
        lake.reconcile(false).await?;
        Ok(lake)
    }

    /// Create the lake's root and every missing table; reconcile the rest.
    /// Idempotent.
    pub async fn init(root: impl Into<LakeRoot>) -> Result<(Lake, InitReport)> {
        let root = root.into();
        if let Some(path) = root.local() {
            std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
        }
        let lake = Self::load(root).await?;
        let report = lake.reconcile(true).await?;
        Ok((lake, report))
    }

    /// The artifact types a lake at `root` has (built-ins, linked Rust types
    /// and its `sluice.toml`), touching no table: what validating a pipeline
    /// needs, even before `init`.
    pub async fn types_at(root: impl Into<LakeRoot>) -> Result<TypeRegistry> {
        let lake = Self::load(root.into()).await?;
        Ok(Arc::unwrap_or_clone(lake.registry))
    }

    /// Read config and build the registry, touching no table.
    async fn load(root: LakeRoot) -> Result<Lake> {
        let root = match root {
            LakeRoot::Local(path) => {
                LakeRoot::Local(std::path::absolute(&path).map_err(|e| Error::io(&path, e))?)
            }
            store => store,
        };
        let config = LakeConfig::load(&root).await?;
        let mut registry = TypeRegistry::linked()?;
        for spec in &config.artifact_types {
            let declared = DeclaredType::try_new(spec)?;
            registry.register_with_origin(Arc::new(declared), TypeOrigin::Declared)?;
        }
        Ok(Lake {
            root,
            config,
            registry: Arc::new(registry),
            snapshots: None,
            handles: Arc::default(),
            journal: Arc::default(),
            journal_tip: Arc::default(),
            id_files: Arc::default(),
        })
    }

    /// Bring the tables to the schemas this build expects: every one, on
    /// `init` (`create`); on an open, only when the lake's mark says they
    /// were not brought to exactly these (see [`delta::reconciled`]).
    async fn reconcile(&self, create: bool) -> Result<InitReport> {
        let mut report = InitReport::default();
        let specs = self.table_specs();
        let fingerprint = delta::reconciled::fingerprint(&specs);
        if !create && delta::reconciled::matches(&self.root, &fingerprint).await {
            return Ok(report);
        }
        for spec in specs {
            if !create && !table::exists(&self.root, &spec).await? {
                continue;
            }
            let (outcome, opened) = table::ensure_opened(&self.root, &spec).await?;
            // The handle that checked the schema is kept: the lake's first
            // read of the table brings it up to date instead of opening it
            // again (a `sluice show` reads two tables right after opening).
            if let Some(opened) = opened {
                self.handles.keep(&spec, handles::Leased::opened(opened));
            }
            match outcome {
                EnsureOutcome::Created => report.created.push(spec.name),
                EnsureOutcome::Unchanged => report.unchanged.push(spec.name),
                EnsureOutcome::Evolved(columns) => {
                    tracing::info!(table = %spec.name, ?columns, "added columns to table");
                    report.evolved.push((spec.name, columns));
                }
            }
        }
        delta::reconciled::record(&self.root, &fingerprint).await;
        Ok(report)
    }

    /// A handle whose reads by id (`get`, `get_many`, `locate`, `list`)
    /// resolve the lake's consistent point once and reuse it, and the table
    /// handles opened at it, for the handle's life. For pipeline workers: the
    /// inputs of a unit were committed before the unit was dispatched, so the
    /// point the worker took first always holds them, and a worker then pays
    /// no Delta log replay per unit. Writes and SQL are not affected.
    pub fn with_snapshot_reads(mut self) -> Lake {
        self.snapshots = Some(Arc::default());
        self
    }

    /// The latest consistent point of the lake: one version per table, no
    /// commit sequence half visible (see [`snapshot`]). Every table's head
    /// is read in reverse commit order, then the manifests are listed, then
    /// the journal is read, as
    /// [`snapshot::resolve`] does, but through the handles this lake keeps,
    /// and the journal is parsed again only when its version moved.
    pub async fn snapshot(&self) -> Result<LakeSnapshot> {
        let heads = journal::heads(&self.root, &self.table_specs(), &self.handles).await?;
        let pins = snapshot::Pins::listed(&self.root).await?;
        let journal = self.journal().await?;
        Ok(snapshot::settle(heads, &journal, &pins, &LakePoint::Latest))
    }

    /// The journal at its latest version, parsed once per version.
    async fn journal(&self) -> Result<Arc<journal::Journal>> {
        let spec = layout::commits_table();
        if !self.handles.exists(&self.root, &spec).await? {
            return Ok(Arc::default());
        }
        let leased = self.handles.latest(&self.root, &spec).await?;
        let version = leased.table.version();
        let cached = self.journal.lock().ok().and_then(|j| j.clone());
        let journal = match cached.filter(|j| j.version == version) {
            Some(journal) => journal,
            None => {
                let journal = Arc::new(journal::read_table(&leased.table, &spec).await?);
                if let Ok(mut kept) = self.journal.lock() {
                    *kept = Some(journal.clone());
                }
                journal
            }
        };
        self.handles.keep(&spec, leased);
        Ok(journal)
    }

    /// The point reads by id use: the pinned one, or a fresh resolution.
    pub(crate) async fn read_point(&self) -> Result<LakeSnapshot> {
        let Some(cache) = &self.snapshots else { return self.snapshot().await };
        let mut cache = cache.lock().await;
        if let Some(point) = &cache.point {
            return Ok(point.clone());
        }
        let point = self.snapshot().await?;
        cache.point = Some(point.clone());
        Ok(point)
    }

    /// A table opened at the given point (cached when reads are pinned).
    /// `None` when the table did not exist at that point.
    pub(crate) async fn read_table(
        &self,
        spec: &TableSpec,
        point: &LakeSnapshot,
    ) -> Result<Option<deltalake::DeltaTable>> {
        let Some(version) = point.version_of(&spec.name) else { return Ok(None) };
        let Some(cache) = &self.snapshots else {
            return self.table_at(spec, version).await.map(Some);
        };
        let mut cache = cache.lock().await;
        if let Some(t) = cache.tables.get(&spec.name) {
            return Ok(Some(t.clone()));
        }
        let t = table::open_at(&self.root, spec, version).await?;
        cache.tables.insert(spec.name.clone(), t.clone());
        Ok(Some(t))
    }

    /// A table at `version`, through the handles this lake keeps (brought
    /// forward from a kept handle, kept again when it is the newest).
    pub(crate) async fn table_at(
        &self,
        spec: &TableSpec,
        version: u64,
    ) -> Result<deltalake::DeltaTable> {
        let leased = self.handles.at(&self.root, spec, version).await?;
        let table = leased.table.clone();
        self.handles.keep(spec, leased);
        Ok(table)
    }

    /// The kept handles of this lake's tables.
    pub(crate) fn handles(&self) -> &handles::Handles {
        &self.handles
    }

    /// The kept journal of the last commit (or the journal opened now), at
    /// the version it was left at. Give it back with
    /// [`Lake::keep_journal_tip`].
    pub(crate) async fn take_journal_tip(&self) -> Result<journal_tip::JournalTip> {
        let kept = self.journal_tip.lock().ok().and_then(|mut kept| kept.take());
        match kept {
            Some(journal) => Ok(journal),
            None => journal_tip::JournalTip::open(&self.root).await,
        }
    }

    /// Keep the journal for the next commit.
    /// Forget every kept view of the journal: it was set aside and made
    /// again at its path (`doctor --repair`).
    pub(crate) fn forget_journal(&self) {
        self.handles.forget(&layout::commits_table().name);
        if let Ok(mut kept) = self.journal_tip.lock() {
            kept.take();
        }
        if let Ok(mut kept) = self.journal.lock() {
            kept.take();
        }
    }

    pub(crate) fn keep_journal_tip(&self, journal: journal_tip::JournalTip) {
        if let Ok(mut kept) = self.journal_tip.lock() {
            *kept = Some(journal);
        }
    }

    /// Where the lake lives (a folder is absolute).
    pub fn root(&self) -> &LakeRoot {
        &self.root
    }

    /// The lake's folder, or an error saying that `what` needs one (the
    /// lake is in an object store).
    pub fn filesystem(&self, what: &str) -> Result<&Path> {
        self.root.filesystem(what)
    }

    /// The lake's parsed `sluice.toml`.
    pub fn config(&self) -> &LakeConfig {
        &self.config
    }

    /// The lake's artifact types.
    pub fn registry(&self) -> &TypeRegistry {
        &self.registry
    }

    /// Every table of the lake, in commit order.
    pub fn table_specs(&self) -> Vec<TableSpec> {
        layout::all_tables(&self.registry)
    }

    /// Every table this lake holds on disk: its artifact and orchestration
    /// tables that exist (a lake that only ingests has none), then its
    /// ingestion tables and ledger.
    pub async fn held_table_specs(&self) -> Result<Vec<TableSpec>> {
        let mut held = self.existing_table_specs().await?;
        held.extend(delta::held::ingestion_tables(&self.root).await?);
        Ok(held)
    }

    /// The artifact and orchestration tables that exist, in commit order.
    pub(crate) async fn existing_table_specs(&self) -> Result<Vec<TableSpec>> {
        let mut existing = Vec::new();
        for spec in self.table_specs() {
            if table::exists(&self.root, &spec).await? {
                existing.push(spec);
            }
        }
        Ok(existing)
    }

    /// One table's spec by short name: a lake table or an ingestion table
    /// (`trips`, `trips_daily`, `ingest_ledger`); an unknown name is an
    /// error naming the nearest ones.
    pub async fn table_spec(&self, name: &str) -> Result<TableSpec> {
        if let Some(spec) = self.table_specs().into_iter().find(|t| t.name == name) {
            return Ok(spec);
        }
        let mut all: Vec<TableSpec> = self
            .table_specs()
            .into_iter()
            .chain(delta::held::ingestion_tables(&self.root).await?)
            .collect();
        if let Some(found) = all.iter().position(|t| t.name == name) {
            return Ok(all.swap_remove(found));
        }
        let near = crate::error::words::nearest(name, all.iter().map(|t| t.name.as_str()));
        Err(Error::InvalidInput(format!(
            "no table named `{name}`{}. Help: `sluice tables` lists them",
            crate::error::words::did_you_mean(&near)
        )))
    }

    /// Version, rows, files and bytes of every table the lake holds: its
    /// artifact and orchestration tables (a lake that only ingests has
    /// none), then its ingestion tables and ledger.
    pub async fn table_infos(&self) -> Result<Vec<TableInfo>> {
        let mut out = Vec::new();
        for spec in self.held_table_specs().await? {
            let handle = table::open(&self.root, &spec).await?;
            let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
            let adds = state.add_actions_table(true).map_err(|e| Error::delta(&spec.name, e))?;
            let sum = |column: &str| -> u64 {
                adds.column_by_name(column)
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
                    .map(|a| {
                        (0..a.len())
                            .filter(|&i| a.is_valid(i))
                            .map(|i| a.value(i).max(0) as u64)
                            .sum()
                    })
                    .unwrap_or(0)
            };
            out.push(TableInfo {
                version: handle.version().unwrap_or_default(),
                rows: sum("num_records"),
                files: adds.num_rows() as u64,
                bytes: sum("size_bytes"),
                partition_columns: spec.partition_columns.clone(),
                name: spec.name,
                path: spec.path,
            });
        }
        Ok(out)
    }
}
