//! History: the lake's versions (commit sequences) and a table's versions.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::journal::{self, Phase};
use crate::lake::{Lake, delta::table};

/// One lake version: the state a completed commit sequence left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LakeVersion {
    /// The lake version (the sequence number): `--as-of` takes it.
    pub version: i64,
    /// When it completed (RFC 3339).
    pub time: String,
    /// Run directories committed.
    pub runs: i64,
    /// Rows added per table.
    pub rows_added: BTreeMap<String, u64>,
    /// Each table's version at that point.
    pub table_versions: BTreeMap<String, u64>,
    /// What else the version was: `restore to lake version K`.
    pub note: Option<String>,
}

/// One version of one table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableVersion {
    /// The Delta version.
    pub version: u64,
    /// When (RFC 3339).
    pub time: Option<String>,
    /// The operation (WRITE, OPTIMIZE, VACUUM START, …).
    pub operation: Option<String>,
    /// The commit sequence that made it, when one did.
    pub sequence: Option<i64>,
    /// The operation's parameters and metrics.
    pub details: serde_json::Value,
}

/// Lake versions, newest first (at most `limit`).
pub async fn lake_history(lake: &Lake, limit: Option<usize>) -> Result<Vec<LakeVersion>> {
    let journal = journal::read(lake.root(), None).await?;
    let mut out: Vec<LakeVersion> = journal
        .entries()
        .iter()
        .filter(|e| e.phase() == Phase::Completed)
        .map(|e| LakeVersion {
            version: e.seq,
            time: crate::times::from_micros(e.timestamp),
            runs: e.run_count,
            rows_added: e.rows_added.clone(),
            table_versions: e.table_versions.clone(),
            note: e.is_restore().then(|| e.reason.clone()).flatten(),
        })
        .collect();
    out.sort_by_key(|v| std::cmp::Reverse(v.version));
    out.truncate(limit.unwrap_or(usize::MAX));
    Ok(out)
}

/// One table's Delta history, newest first (at most `limit`).
pub async fn table_history(
    lake: &Lake,
    name: &str,
    limit: Option<usize>,
) -> Result<Vec<TableVersion>> {
    let spec = lake.table_spec(name).await?;
    let handle = table::open(lake.root(), &spec).await?;
    let head = handle.version().unwrap_or_default();
    let infos: Vec<deltalake::kernel::CommitInfo> =
        handle.history(limit).try_collect().await.map_err(|e| Error::delta(name, e))?;
    Ok(infos
        .into_iter()
        .enumerate()
        .map(|(i, info)| {
            let sequence = info.info.get(journal::SEQ_KEY).and_then(serde_json::Value::as_i64);
            TableVersion {
                version: head.saturating_sub(i as u64),
                time: info.timestamp.and_then(crate::times::from_millis),
                operation: info.operation.clone(),
                sequence,
                details: serde_json::json!({
                    "parameters": info.operation_parameters,
                    "metrics": info.info.get("operationMetrics"),
                }),
            }
        })
        .collect())
}
