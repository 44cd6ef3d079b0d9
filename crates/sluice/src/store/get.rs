//! Reading artifacts by id (through the index) and listing by type and step.

use std::collections::BTreeMap;

use crate::artifact::{Artifact, ArtifactId};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::layout::{self, TableSpec};
use crate::lake::{key_filter, table};
use crate::query::scan;
use crate::store::arrow_convert::read_value;
use crate::store::rows;

/// Which artifacts [`Lake::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only artifacts produced by this step.
    pub step: Option<i32>,
    /// At most this many.
    pub limit: Option<usize>,
}

/// Where the index says an artifact lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Type key.
    pub artifact_type: String,
    /// Producing step.
    pub origin_step_number: i32,
}

/// Which data files of one table may hold given ids, by its key filters
/// (files no filter covers included). A lookup by id then reads the files of
/// the commits that added those ids instead of every file: ids are random,
/// so file statistics cannot prune. Active files and sidecars are read once
/// per lookup, not per chunk of ids.
struct IdFiles {
    active: Vec<String>,
    filters: BTreeMap<u64, std::sync::Arc<key_filter::KeyFilter>>,
}

impl IdFiles {
    fn new(lake: &Lake, handle: &deltalake::DeltaTable, spec: &TableSpec) -> Result<Self> {
        Ok(IdFiles {
            active: table::active_files(handle, spec)?,
            filters: key_filter::read_all(&table::table_dir(lake.root(), spec)),
        })
    }

    /// The files to read for `ids`; `None` when no file can hold them.
    fn files(&self, ids: &[ArtifactId]) -> Option<Vec<String>> {
        let plan = key_filter::plan(&self.active, &self.filters, ids);
        let mut files: std::collections::BTreeSet<String> = plan.uncovered.into_iter().collect();
        for (candidates, _) in plan.candidates {
            files.extend(candidates);
        }
        (!files.is_empty()).then(|| files.into_iter().collect())
    }
}

impl Lake {
    /// Look up ids in the index.
    pub async fn locate(&self, ids: &[ArtifactId]) -> Result<BTreeMap<ArtifactId, IndexEntry>> {
        let spec = layout::index_table();
        let handle = self.read_table(&spec).await?;
        let id_files = IdFiles::new(self, &handle, &spec)?;
        let mut out = BTreeMap::new();
        for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
            let Some(files) = id_files.files(chunk) else { continue };
            let filter = scan::in_list("artifact_id", chunk.iter().map(ArtifactId::to_hex));
            let batches = scan::select_in_files(
                &handle,
                &spec.name,
                &["artifact_id", "artifact_type", "origin_step_number"],
                Some(&filter),
                Some(&files),
            )
            .await?;
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    let id: ArtifactId = read_value(batch.column(0).as_ref(), row)
                        .as_str()
                        .unwrap_or_default()
                        .parse()?;
                    let artifact_type = read_value(batch.column(1).as_ref(), row)
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let step =
                        read_value(batch.column(2).as_ref(), row).as_int().unwrap_or_default();
                    out.insert(
                        id,
                        IndexEntry {
                            artifact_type,
                            origin_step_number: i32::try_from(step).unwrap_or_default(),
                        },
                    );
                }
            }
        }
        Ok(out)
    }

    /// Read artifacts by id, in bulk. Ids not in the lake are absent from the map.
    pub async fn get_many(&self, ids: &[ArtifactId]) -> Result<BTreeMap<ArtifactId, Artifact>> {
        let located = self.locate(ids).await?;
        let mut by_type: BTreeMap<&str, Vec<(ArtifactId, i32)>> = BTreeMap::new();
        for (id, entry) in &located {
            by_type
                .entry(entry.artifact_type.as_str())
                .or_default()
                .push((*id, entry.origin_step_number));
        }
        let mut out = BTreeMap::new();
        for (type_key, wanted) in by_type {
            let spec = TableSpec::content(self.registry().descriptor(type_key)?);
            let handle = self.read_table(&spec).await?;
            let id_files = IdFiles::new(self, &handle, &spec)?;
            for chunk in wanted.chunks(scan::IN_LIST_CHUNK) {
                let chunk_ids: Vec<ArtifactId> = chunk.iter().map(|(id, _)| *id).collect();
                let Some(files) = id_files.files(&chunk_ids) else { continue };
                let mut steps: Vec<i32> = chunk.iter().map(|(_, s)| *s).collect();
                steps.sort_unstable();
                steps.dedup();
                // The step filter prunes partitions; the id filter picks rows.
                let filter = format!(
                    "{} AND {}",
                    scan::in_list_int("origin_step_number", steps.iter().copied()),
                    scan::in_list("artifact_id", chunk.iter().map(|(id, _)| id.to_hex())),
                );
                for artifact in
                    self.read_content(&handle, &spec, type_key, Some(&filter), Some(&files)).await?
                {
                    out.insert(artifact.id, artifact);
                }
            }
        }
        Ok(out)
    }

    /// Read one artifact by id.
    pub async fn get(&self, id: ArtifactId) -> Result<Artifact> {
        self.get_many(&[id]).await?.remove(&id).ok_or_else(|| Error::ArtifactNotFound(id.to_hex()))
    }

    /// List the artifacts of a type, optionally of one step, ordered by id.
    pub async fn list(&self, type_key: &str, filter: &ListFilter) -> Result<Vec<Artifact>> {
        let spec = TableSpec::content(self.registry().descriptor(type_key)?);
        let handle = self.read_table(&spec).await?;
        let predicate = filter.step.map(|s| format!("origin_step_number = {s}"));
        let mut artifacts =
            self.read_content(&handle, &spec, type_key, predicate.as_deref(), None).await?;
        artifacts.sort_by_key(|a| a.id);
        if let Some(limit) = filter.limit {
            artifacts.truncate(limit);
        }
        Ok(artifacts)
    }

    async fn read_content(
        &self,
        handle: &deltalake::DeltaTable,
        spec: &TableSpec,
        type_key: &str,
        filter: Option<&str>,
        files: Option<&[String]>,
    ) -> Result<Vec<Artifact>> {
        let type_columns: Vec<String> =
            self.registry().descriptor(type_key)?.columns.iter().map(|c| c.name.clone()).collect();
        let batches = scan::select_in_files(handle, &spec.name, &[], filter, files).await?;
        let mut out = Vec::new();
        for batch in &batches {
            out.extend(rows::artifacts_from_batch(&spec.name, type_key, &type_columns, batch)?);
        }
        Ok(out)
    }
}
