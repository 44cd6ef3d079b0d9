//! Writing finalized artifacts: content tables first, then the index.

use std::collections::{BTreeMap, BTreeSet};

use crate::artifact::{Artifact, ArtifactId};
use crate::error::Result;
use crate::lake::Lake;
use crate::lake::layout::{self, TableSpec};
use crate::lake::table;
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
    /// idempotent. Each table is one Delta commit.
    pub async fn put(&self, artifacts: &[Artifact]) -> Result<PutReport> {
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
            self.append_rows(
                &spec,
                |schema| Ok(vec![rows::content_batch(&spec.name, schema, &fresh)?]),
                fresh.len(),
            )
            .await?;
            report.rows_added.insert(spec.name.clone(), fresh.len());
            indexed.extend(batch.iter().copied());
        }
        let index = layout::index_table();
        let present = self.existing_ids(&index, indexed.iter().map(|a| a.id)).await?;
        let fresh: Vec<&Artifact> =
            indexed.into_iter().filter(|a| !present.contains(&a.id)).collect();
        self.append_rows(
            &index,
            |schema| Ok(vec![rows::index_batch(schema, &fresh)?]),
            fresh.len(),
        )
        .await?;
        report.rows_added.insert(index.name.clone(), fresh.len());
        Ok(report)
    }

    async fn append_rows(
        &self,
        spec: &TableSpec,
        make: impl FnOnce(
            &deltalake::arrow::datatypes::SchemaRef,
        ) -> Result<Vec<deltalake::arrow::record_batch::RecordBatch>>,
        rows: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        table::ensure(self.root(), spec).await?;
        let handle = table::open(self.root(), spec).await?;
        let schema = table::arrow_schema(&handle, spec)?;
        let batches = make(&schema)?;
        table::append(handle, spec, batches).await?;
        Ok(())
    }

    /// Which of `ids` a table (with an `artifact_id` column) already holds.
    pub(crate) async fn existing_ids(
        &self,
        spec: &TableSpec,
        ids: impl Iterator<Item = ArtifactId>,
    ) -> Result<BTreeSet<ArtifactId>> {
        let ids: Vec<ArtifactId> = ids.collect();
        let mut present = BTreeSet::new();
        if ids.is_empty() || !table::is_table(&table::table_dir(self.root(), spec)) {
            return Ok(present);
        }
        let handle = table::open(self.root(), spec).await?;
        for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
            let filter = scan::in_list("artifact_id", chunk.iter().map(ArtifactId::to_hex));
            let batches =
                scan::select(&handle, &spec.name, &["artifact_id"], Some(&filter)).await?;
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    let value =
                        crate::store::arrow_convert::read_value(batch.column(0).as_ref(), row);
                    if let Some(text) = value.as_str() {
                        present.insert(text.parse()?);
                    }
                }
            }
        }
        Ok(present)
    }
}
