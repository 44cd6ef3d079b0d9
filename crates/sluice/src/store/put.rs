//! Writing finalized artifacts: content tables first, then the index.

use std::collections::{BTreeMap, BTreeSet};

use crate::artifact::{Artifact, ArtifactId};
use crate::error::Result;
use crate::lake::Lake;
use crate::lake::layout::{self, TableSpec};
use crate::lake::{key_filter, table};
use crate::query::scan;
use crate::store::rows;

/// What [`Lake::put`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutReport {
    /// Rows added per table (short name).
    pub rows_added: BTreeMap<String, usize>,
    /// Artifacts skipped because the lake already held their id.
    pub already_present: usize,
    /// Artifacts skipped because the same id appeared earlier in the call.
    pub duplicates_in_call: usize,
}

impl Lake {
    /// Write artifacts to their content tables, then to the index. Ids already
    /// in the lake and repeats within `artifacts` are skipped, so a put is
    /// idempotent. Each table is one Delta commit. Waits while a commit holds
    /// the lake's writer lock.
    pub async fn put(&self, artifacts: &[Artifact]) -> Result<PutReport> {
        // Serialize with commits: two writers checking the same ids at once
        // would both find them new.
        let _lock =
            crate::commit::CommitLock::wait(&crate::staging::default_root(self.root())).await?;
        let mut report = PutReport::default();
        let mut seen = BTreeSet::new();
        let mut by_type: BTreeMap<&str, Vec<&Artifact>> = BTreeMap::new();
        for artifact in artifacts {
            self.registry().get(&artifact.type_key)?;
            if seen.insert(artifact.id) {
                by_type.entry(artifact.type_key.as_str()).or_default().push(artifact);
            } else {
                report.duplicates_in_call += 1;
            }
        }
        let mut indexed: Vec<&Artifact> = Vec::new();
        // Registry order is the fixed commit order of content tables.
        let keys: Vec<String> = self.registry().descriptors().map(|d| d.key.clone()).collect();
        for key in keys {
            let Some(batch) = by_type.get(key.as_str()) else { continue };
            let spec = TableSpec::content(self.registry().descriptor(&key)?);
            let present = self.existing_ids(&spec, batch.iter().map(|a| a.id)).await?;
            let fresh: Vec<&Artifact> =
                batch.iter().copied().filter(|a| !present.contains(&a.id)).collect();
            report.already_present += batch.len() - fresh.len();
            let ids: Vec<ArtifactId> = fresh.iter().map(|a| a.id).collect();
            self.append_rows(
                &spec,
                |schema| Ok(vec![rows::content_batch(&spec.name, schema, &fresh)?]),
                &ids,
            )
            .await?;
            report.rows_added.insert(spec.name.clone(), fresh.len());
            indexed.extend(batch.iter().copied());
        }
        let index = layout::index_table();
        let present = self.existing_ids(&index, indexed.iter().map(|a| a.id)).await?;
        let fresh: Vec<&Artifact> =
            indexed.into_iter().filter(|a| !present.contains(&a.id)).collect();
        let ids: Vec<ArtifactId> = fresh.iter().map(|a| a.id).collect();
        self.append_rows(&index, |schema| Ok(vec![rows::index_batch(schema, &fresh)?]), &ids)
            .await?;
        report.rows_added.insert(index.name.clone(), fresh.len());
        Ok(report)
    }

    /// Append artifacts to their content tables and the index with no
    /// de-duplication check, one commit per table. Only for benchmarks and
    /// fixtures that build large lakes of artifacts known to be new: used
    /// with ids already in the lake it breaks the one-row-per-id invariant.
    #[doc(hidden)]
    pub async fn append_unchecked(&self, artifacts: &[Artifact]) -> Result<()> {
        let mut by_type: BTreeMap<&str, Vec<&Artifact>> = BTreeMap::new();
        for artifact in artifacts {
            by_type.entry(artifact.type_key.as_str()).or_default().push(artifact);
        }
        for (key, batch) in &by_type {
            let spec = TableSpec::content(self.registry().descriptor(key)?);
            let ids: Vec<ArtifactId> = batch.iter().map(|a| a.id).collect();
            self.append_rows(
                &spec,
                |schema| Ok(vec![rows::content_batch(&spec.name, schema, batch)?]),
                &ids,
            )
            .await?;
        }
        let all: Vec<&Artifact> = artifacts.iter().collect();
        let index = layout::index_table();
        let ids: Vec<ArtifactId> = all.iter().map(|a| a.id).collect();
        self.append_rows(&index, |schema| Ok(vec![rows::index_batch(schema, &all)?]), &ids).await
    }

    async fn append_rows(
        &self,
        spec: &TableSpec,
        make: impl FnOnce(
            &deltalake::arrow::datatypes::SchemaRef,
        ) -> Result<Vec<deltalake::arrow::record_batch::RecordBatch>>,
        ids: &[ArtifactId],
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        table::ensure(self.root(), spec).await?;
        let handle = table::open(self.root(), spec).await?;
        let schema = table::arrow_schema(&handle, spec)?;
        let batches = make(&schema)?;
        let written = table::append(handle, spec, batches).await?;
        table::record_keys(self.root(), spec, written.version().unwrap_or_default(), ids);
        Ok(())
    }

    /// Which of `ids` a table (with an `artifact_id` column) already holds.
    ///
    /// Reads ids only from files the table's key filters cannot rule out
    /// (see [`key_filter`](crate::lake::key_filter)), so its cost follows the
    /// number of commits and duplicates, not the size of the table.
    pub(crate) async fn existing_ids(
        &self,
        spec: &TableSpec,
        ids: impl Iterator<Item = ArtifactId>,
    ) -> Result<BTreeSet<ArtifactId>> {
        let ids: Vec<ArtifactId> = ids.collect();
        let mut present = BTreeSet::new();
        let dir = table::table_dir(self.root(), spec);
        if ids.is_empty() || !table::is_table(&dir) {
            return Ok(present);
        }
        let handle = table::open(self.root(), spec).await?;
        let active = table::active_files(&handle, spec)?;
        if active.is_empty() {
            return Ok(present);
        }
        let plan = key_filter::plan(&active, &key_filter::read_all(&dir), &ids);
        let mut hit_files: BTreeSet<String> = BTreeSet::new();
        let mut hit_ids: BTreeSet<ArtifactId> = BTreeSet::new();
        for (files, hits) in plan.candidates {
            hit_files.extend(files);
            hit_ids.extend(hits);
        }
        let lookups = [
            (plan.uncovered, ids.clone()),
            (hit_files.into_iter().collect::<Vec<_>>(), hit_ids.into_iter().collect::<Vec<_>>()),
        ];
        for (files, wanted) in lookups {
            if files.is_empty() || wanted.is_empty() {
                continue;
            }
            for chunk in wanted.chunks(scan::IN_LIST_CHUNK) {
                let filter = scan::in_list("artifact_id", chunk.iter().map(ArtifactId::to_hex));
                let found = scan::select_strings(
                    &handle,
                    &spec.name,
                    "artifact_id",
                    Some(&filter),
                    Some(&files),
                )
                .await?;
                for text in found {
                    present.insert(text.parse()?);
                }
            }
        }
        Ok(present)
    }
}
