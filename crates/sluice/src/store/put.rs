//! Writing finalized artifacts: content tables first, then the index.

use std::collections::{BTreeMap, BTreeSet};

use crate::artifact::{Artifact, ArtifactId};
use crate::error::Result;
use crate::lake::append::{self, Append, Dedup};
use crate::lake::delta::tip::Tip;
use crate::lake::layout::{self, TableSpec};
use crate::lake::writer::WriteKind;
use crate::lake::{Lake, delta::table};

use crate::store::rows;

/// The commit metadata key that names the put a content or index commit
/// belongs to: `recover` finishes a put whose content commits carry a token
/// no index commit does (see [`unfinished`](crate::maintenance::unfinished)).
pub(crate) const PUT_TOKEN_KEY: &str = "sluice_put";

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
    /// idempotent. Each table is one Delta commit, made on top of exactly the
    /// version its de-duplication read (see [`append`]), so concurrent writers
    /// never add one id twice. Waits while another writer holds the lake's
    /// writer lock (a courtesy: correctness does not depend on it).
    ///
    /// A put passes through the writer protocol ([`crate::lake::writer`]): an unfinished
    /// restore is settled first, and a restore claimed while the put wrote
    /// (by a writer sharing no lock with it) is settled and the put made
    /// again, so an acknowledged put is never half undone by a restore.
    pub async fn put(&self, artifacts: &[Artifact]) -> Result<PutReport> {
        let mut writer = self.writer(WriteKind::Put).begin().await?;
        loop {
            let report = self.put_once(artifacts).await?;
            if writer.wrote_whole(self, "index").await? {
                return Ok(report);
            }
        }
    }

    async fn put_once(&self, artifacts: &[Artifact]) -> Result<PutReport> {
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
        let token = serde_json::Value::String(uuid::Uuid::new_v4().simple().to_string());
        let mut indexed: Vec<&Artifact> = Vec::new();
        let mut content_present: Vec<(TableSpec, BTreeSet<String>)> = Vec::new();
        // Registry order is the fixed commit order of content tables.
        let keys: Vec<String> = self.registry().descriptors().map(|d| d.key.clone()).collect();
        for key in keys {
            let Some(batch) = by_type.get(key.as_str()) else { continue };
            let spec = TableSpec::content(self.registry().descriptor(&key)?);
            let mut tip = self.put_tip(&spec).await?;
            let schema = table::arrow_schema(tip.table(), &spec)?;
            let rows = rows::content_batch(&spec.name, &schema, batch)?;
            let appended = Append::new(self.root(), &spec, vec![rows])
                .with_metadata(PUT_TOKEN_KEY, token.clone())
                .execute_on_tip(&mut tip)
                .await?;
            self.handles().keep_tip(&spec, tip);
            report.already_present += appended.rows_skipped as usize;
            report.rows_added.insert(spec.name.clone(), appended.rows_added as usize);
            content_present.push((spec, appended.present_keys));
            indexed.extend(batch.iter().copied());
        }
        let index = layout::index_table();
        let mut tip = self.put_tip(&index).await?;
        let rows = rows::index_batch(&table::arrow_schema(tip.table(), &index)?, &indexed)?;
        let (rows, indexed) = if content_present.iter().all(|(_, ids)| ids.is_empty()) {
            (vec![rows], None)
        } else {
            tip.advance(self.root(), &index).await?;
            let (rows, indexed) =
                repoint_to_content(self, &tip, &index, vec![rows], &content_present).await?;
            (rows, Some((tip.head(), indexed)))
        };
        let mut append = Append::new(self.root(), &index, rows).with_metadata(PUT_TOKEN_KEY, token);
        if let Some((at, indexed)) = indexed {
            append = append.with_present_at(at, indexed);
        }
        let appended = append.execute_on_tip(&mut tip).await?;
        self.handles().keep_tip(&index, tip);
        report.rows_added.insert(index.name.clone(), appended.rows_added as usize);
        Ok(report)
    }

    /// Wait for what puts and commits left running in the background: the
    /// checkpoints Delta writes every 100 versions or more (see [`Tip`]).
    /// A process that puts or commits and exits calls this last; skipping
    /// it only leaves the checkpoint to a later commit (a process that
    /// always skips it leaves the log to grow without one).
    pub async fn settle(&self) {
        self.handles().settle().await;
    }

    /// The tip of a table a put (or a step row) writes to: the kept one,
    /// or the table checked against its spec (and created) first, then
    /// opened. Give it back with `handles().keep_tip`.
    pub(crate) async fn put_tip(&self, spec: &TableSpec) -> Result<Tip> {
        if !self.handles().exists(self.root(), spec).await? {
            table::ensure(self.root(), spec).await?;
        }
        self.handles().take_tip(self.root(), spec).await
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
        let version = written.version().unwrap_or_default();
        table::record_keys(self.root(), &written, spec, version, ids).await;
        Ok(())
    }

    /// Which of `ids` a table (with an `artifact_id` column) already holds.
    ///
    /// Reads ids only from files the table's key filters cannot rule out
    /// (see [`key_filter`](crate::lake::keys::key_filter)), so its cost follows the
    /// number of commits and duplicates, not the size of the table.
    pub(crate) async fn existing_ids(
        &self,
        spec: &TableSpec,
        ids: impl Iterator<Item = ArtifactId>,
    ) -> Result<BTreeSet<ArtifactId>> {
        let wanted: BTreeSet<String> = ids.map(|id| id.to_hex()).collect();
        if wanted.is_empty() || !table::exists(self.root(), spec).await? {
            return Ok(BTreeSet::new());
        }
        let handle = table::open(self.root(), spec).await?;
        let present =
            append::present_keys(self.root(), &handle, spec, Dedup::ArtifactId, &wanted).await?;
        present.iter().map(|id| id.parse()).collect()
    }
}

/// An index row must point at the step where its artifact's content is. When
/// the content of an artifact was already in the lake (skipped as present)
/// but the index lacks it — a put or commit died between the two — the new
/// index row takes the step of the content that exists, not the step given
/// now. Also returns which of those ids the index holds (at the head of
/// `index_tip`): the append of the index rows need not look them up again
/// ([`Append::with_present_at`]).
pub(crate) async fn repoint_to_content(
    lake: &Lake,
    index_tip: &crate::lake::delta::tip::Tip,
    index: &TableSpec,
    rows: Vec<deltalake::arrow::record_batch::RecordBatch>,
    content_present: &[(TableSpec, BTreeSet<String>)],
) -> Result<(Vec<deltalake::arrow::record_batch::RecordBatch>, BTreeSet<String>)> {
    let candidates: BTreeSet<String> =
        content_present.iter().flat_map(|(_, ids)| ids.iter().cloned()).collect();
    if candidates.is_empty() {
        return Ok((rows, BTreeSet::new()));
    }
    let indexed =
        append::present_keys_on_tip(lake.root(), index_tip, index, Dedup::ArtifactId, &candidates)
            .await?;
    let mut steps = BTreeMap::new();
    for (spec, ids) in content_present {
        let orphans: BTreeSet<String> = ids.difference(&indexed).cloned().collect();
        steps.extend(append::content_steps(lake.root(), spec, &orphans).await?);
    }
    Ok((append::repoint_steps(rows, &steps, &index.name)?, indexed))
}
