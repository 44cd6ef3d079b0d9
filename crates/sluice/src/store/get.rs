//! Reading artifacts by id (through the index) and listing by type and step.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use deltalake::arrow::array::{Array, BooleanArray};
use deltalake::arrow::compute::filter_record_batch;

use crate::artifact::arrow_convert::read_value;
use crate::artifact::{Artifact, ArtifactId};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::delta::scan::{self, Select};
use crate::lake::journal::snapshot::LakeSnapshot;
use crate::lake::layout::{self, TableSpec};
use crate::lake::read::lookup::Lookup;
use crate::store::rows;

/// The fewest hex digits of an id [`Lake::resolve`] takes as a prefix.
pub const MIN_ID_PREFIX: usize = 4;

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

impl Lake {
    /// Look up ids in the index.
    pub async fn locate(&self, ids: &[ArtifactId]) -> Result<BTreeMap<ArtifactId, IndexEntry>> {
        let point = self.read_point().await?;
        self.locate_at(&point, ids).await
    }

    /// [`Lake::locate`] at a given point of the lake.
    pub(crate) async fn locate_at(
        &self,
        point: &LakeSnapshot,
        ids: &[ArtifactId],
    ) -> Result<BTreeMap<ArtifactId, IndexEntry>> {
        let spec = layout::index_table();
        let Some(handle) = self.read_table(&spec, point).await? else { return Ok(BTreeMap::new()) };
        let id_files = self.id_files(&handle, &spec, None).await?;
        let mut out = BTreeMap::new();
        for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
            let Some(plan) = id_files.plan(chunk) else { continue };
            let batches = Lookup::new("artifact_id", chunk.iter().map(ArtifactId::to_hex))
                .columns(&["artifact_id", "artifact_type", layout::STEP_COLUMN])
                .read_planned_in(&handle, &spec, &plan, id_files.index())
                .await?;
            for batch in &batches {
                let ids = scan::text_column(batch, 0, &spec.name)?;
                let types = scan::text_column(batch, 1, &spec.name)?;
                for row in 0..batch.num_rows() {
                    let step = read_value(&spec.name, batch.column(2).as_ref(), row)?
                        .as_int()
                        .and_then(|s| i32::try_from(s).ok())
                        .ok_or_else(|| {
                            Error::corrupt(
                                &spec.name,
                                format!("artifact {}", ids.value(row)),
                                "`origin_step_number` is not a step number",
                            )
                        })?;
                    out.insert(
                        ids.value(row).parse()?,
                        IndexEntry {
                            artifact_type: types.value(row).to_owned(),
                            origin_step_number: step,
                        },
                    );
                }
            }
        }
        Ok(out)
    }

    /// Read artifacts by id, in bulk. Ids not in the lake are absent from the map.
    ///
    /// Index and content are read at one consistent point of the lake, so an
    /// id the index lists always has its content.
    pub async fn get_many(&self, ids: &[ArtifactId]) -> Result<BTreeMap<ArtifactId, Artifact>> {
        let clock = std::time::Instant::now();
        let point = self.read_point().await?;
        let point_us = clock.elapsed().as_micros() as u64;
        let located = self.locate_at(&point, ids).await?;
        let index_us = clock.elapsed().as_micros() as u64 - point_us;
        let found = self.get_located(&point, &located).await?;
        // The phases of a read by id, for `SLUICE_LOG=debug`: resolving the
        // lake point, the index look-up, the content tables' look-ups.
        tracing::debug!(
            ids = ids.len(),
            found = found.len(),
            point_us,
            index_us,
            content_us = clock.elapsed().as_micros() as u64 - point_us - index_us,
            "artifacts read by id"
        );
        Ok(found)
    }

    /// Read the content of artifacts already located in the index at `point`.
    pub(crate) async fn get_located(
        &self,
        point: &LakeSnapshot,
        located: &BTreeMap<ArtifactId, IndexEntry>,
    ) -> Result<BTreeMap<ArtifactId, Artifact>> {
        let mut by_type: BTreeMap<&str, Vec<(ArtifactId, i32)>> = BTreeMap::new();
        for (id, entry) in located {
            by_type
                .entry(entry.artifact_type.as_str())
                .or_default()
                .push((*id, entry.origin_step_number));
        }
        let mut out = BTreeMap::new();
        for (type_key, wanted) in by_type {
            let spec = TableSpec::content(self.registry().descriptor(type_key)?);
            let Some(handle) = self.read_table(&spec, point).await? else { continue };
            let id_files = self.id_files(&handle, &spec, None).await?;
            for chunk in wanted.chunks(scan::IN_LIST_CHUNK) {
                let chunk_ids: Vec<ArtifactId> = chunk.iter().map(|(id, _)| *id).collect();
                let Some(plan) = id_files.plan(&chunk_ids) else { continue };
                // The index names each artifact's step: only the files of
                // those step partitions can hold it.
                let steps = chunk.iter().map(|(_, step)| i64::from(*step));
                let batches = Lookup::new("artifact_id", chunk_ids.iter().map(ArtifactId::to_hex))
                    .in_partitions(layout::STEP_COLUMN, steps)
                    .read_planned_in(&handle, &spec, &plan, id_files.index())
                    .await?;
                for artifact in self.artifacts(&spec, type_key, &batches)? {
                    out.insert(artifact.id, artifact);
                }
            }
        }
        Ok(out)
    }

    /// Visit the artifacts among `ids` by scanning the partitions that hold
    /// them, one batch at a time, instead of looking each up by id.
    ///
    /// For a read of many artifacts of few steps — a whole stream, as
    /// `filter` reads — one pass over those step partitions costs less than
    /// tens of id look-ups, and memory holds one batch, not the artifacts
    /// read. Rows of the partitions not among `ids` are skipped before they
    /// are decoded. Ids not in the lake are not visited; the order of
    /// visits is the tables' order, not `ids`'.
    pub(crate) async fn for_each_in_partitions(
        &self,
        ids: &[ArtifactId],
        mut visit: impl FnMut(Artifact) -> Result<()>,
    ) -> Result<()> {
        let clock = std::time::Instant::now();
        let point = self.read_point().await?;
        let located = self.locate_at(&point, ids).await?;
        tracing::debug!(
            ids = ids.len(),
            found = located.len(),
            located_ms = clock.elapsed().as_millis() as u64,
            "artifacts located for a scan of their partitions"
        );
        let mut by_type: BTreeMap<&str, (HashSet<ArtifactId>, BTreeSet<i32>)> = BTreeMap::new();
        for (id, entry) in &located {
            let (wanted, steps) = by_type.entry(entry.artifact_type.as_str()).or_default();
            wanted.insert(*id);
            steps.insert(entry.origin_step_number);
        }
        for (type_key, (wanted, steps)) in by_type {
            let spec = TableSpec::content(self.registry().descriptor(type_key)?);
            let Some(handle) = self.read_table(&spec, &point).await? else { continue };
            let type_columns: Vec<String> = self
                .registry()
                .descriptor(type_key)?
                .columns
                .iter()
                .map(|c| c.name.clone())
                .collect();
            let partitions =
                scan::in_list(layout::STEP_COLUMN, steps.iter().map(|s| i64::from(*s)));
            Select::default()
                .filter(partitions)
                .for_each_batch(&handle, &spec.name, |batch| {
                    let column = batch.schema().index_of("artifact_id").map_err(|_| {
                        Error::SchemaConflict {
                            table: spec.name.clone(),
                            column: "artifact_id".into(),
                            message: "the column is missing".into(),
                        }
                    })?;
                    let ids = scan::text_column(batch, column, &spec.name)?;
                    let keep: BooleanArray = (0..ids.len())
                        .map(|row| {
                            Some(
                                ids.is_valid(row)
                                    && ids.value(row).parse().is_ok_and(|id| wanted.contains(&id)),
                            )
                        })
                        .collect();
                    let kept = filter_record_batch(batch, &keep)
                        .map_err(|e| Error::arrow("selecting rows by id", e))?;
                    for artifact in
                        rows::artifacts_from_batch(&spec.name, type_key, &type_columns, &kept)?
                    {
                        visit(artifact)?;
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(())
    }

    /// The artifact an id, or a unique prefix of one (at least
    /// [`MIN_ID_PREFIX`] hex digits, any case), names — as run ids take
    /// prefixes. A whole id is returned as given (whether the lake holds it
    /// is [`Lake::get`]'s to say); a prefix is looked up in the index at
    /// the lake's current point: none is [`Error::ArtifactNotFound`], more
    /// than one [`Error::AmbiguousArtifactId`] with the first few.
    pub async fn resolve(&self, text: &str) -> Result<ArtifactId> {
        if let Ok(id) = text.parse::<ArtifactId>() {
            return Ok(id);
        }
        let prefix = text.to_ascii_lowercase();
        if !(MIN_ID_PREFIX..=32).contains(&prefix.len())
            || !prefix.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(Error::InvalidArtifactId(text.to_owned()));
        }
        let spec = layout::index_table();
        let point = self.read_point().await?;
        let Some(handle) = self.read_table(&spec, &point).await? else {
            return Err(Error::ArtifactNotFound(text.to_owned()));
        };
        let mut ids = Select::columns(scan::columns(&["artifact_id"]))
            .filter(scan::starts_with("artifact_id", &prefix))
            .strings(&handle, &spec.name)
            .await?;
        ids.sort_unstable();
        ids.dedup();
        match ids.as_slice() {
            [] => Err(Error::ArtifactNotFound(text.to_owned())),
            [one] => one.parse(),
            many => Err(Error::AmbiguousArtifactId {
                prefix: text.to_owned(),
                count: many.len(),
                matches: many.iter().take(4).cloned().collect(),
            }),
        }
    }

    /// Copy the file a `file_ref` artifact references to `to` (from the
    /// lake's store when it is kept there), checking that its bytes are
    /// still the referenced ones.
    pub async fn copy_referenced_file(
        &self,
        artifact: &Artifact,
        to: &std::path::Path,
    ) -> Result<()> {
        if artifact.type_key != crate::artifact::FILE_REF {
            return Err(Error::InvalidInput(format!(
                "artifact {} is a {}, not a file_ref",
                artifact.id, artifact.type_key
            )));
        }
        let location = artifact.field("path").as_str().unwrap_or_default();
        let hash = artifact.field("content_hash").as_str().unwrap_or_default();
        let referrer = format!("artifact {}", artifact.id);
        crate::lake::kept_files::fetch(self.root(), location, hash, &referrer, to).await
    }

    /// Read one artifact by id.
    pub async fn get(&self, id: ArtifactId) -> Result<Artifact> {
        self.get_many(&[id]).await?.remove(&id).ok_or_else(|| Error::ArtifactNotFound(id.to_hex()))
    }

    /// List the artifacts of a type, optionally of one step, ordered by id.
    pub async fn list(&self, type_key: &str, filter: &ListFilter) -> Result<Vec<Artifact>> {
        let spec = TableSpec::content(self.registry().descriptor(type_key)?);
        let point = self.read_point().await?;
        let Some(handle) = self.read_table(&spec, &point).await? else { return Ok(Vec::new()) };
        let select =
            Select::default().filter_opt(filter.step.map(|s| scan::equals(layout::STEP_COLUMN, s)));
        let mut artifacts = self.read_content(&handle, &spec, type_key, select).await?;
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
        select: Select,
    ) -> Result<Vec<Artifact>> {
        let batches = select.collect(handle, &spec.name).await?;
        self.artifacts(spec, type_key, &batches)
    }

    /// Artifacts from rows of a content table.
    fn artifacts(
        &self,
        spec: &TableSpec,
        type_key: &str,
        batches: &[deltalake::arrow::record_batch::RecordBatch],
    ) -> Result<Vec<Artifact>> {
        let type_columns: Vec<String> =
            self.registry().descriptor(type_key)?.columns.iter().map(|c| c.name.clone()).collect();
        let mut out = Vec::new();
        for batch in batches {
            out.extend(rows::artifacts_from_batch(&spec.name, type_key, &type_columns, batch)?);
        }
        Ok(out)
    }
}
