//! Which ingestion tables a lake holds, found by looking: their folders
//! (raw, aggregate, curated, and the ledger) are named by the user's
//! config, not by sluice's layout, so a lake is listed to find them — a
//! directory read on a filesystem, a delimited listing in a store.

use std::path::Path;

use crate::error::{Error, Result};
use crate::lake::io::location::{LakeRoot, StoreRoot};
use crate::lake::layout::{AGGREGATE_DIR, CURATED_DIR, INGEST_LEDGER_DIR, RAW_DIR, TableSpec};

/// The ingestion table folders under `root` (those with a `_delta_log`;
/// whether it holds a commit yet is `table::is_table`'s to say): raw (with
/// rejects), aggregate and curated tables by name, and the ledger as
/// `ingest_ledger`.
pub async fn ingestion_tables(root: &LakeRoot) -> Result<Vec<TableSpec>> {
    match root {
        LakeRoot::Local(path) => Ok(ingestion_tables_in(path)),
        LakeRoot::Store(store) => Box::pin(ingestion_tables_in_store(store)).await,
    }
}

/// The ingestion table `name` names — `trips`, looked for in raw,
/// aggregate and curated, in that order, or `curated/daily` — if the lake
/// holds it.
pub async fn ingestion_table(root: &LakeRoot, name: &str) -> Result<Option<TableSpec>> {
    let layers = [RAW_DIR, AGGREGATE_DIR, CURATED_DIR];
    let (layers, table): (Vec<&str>, &str) = match name.split_once('/') {
        Some((layer, table)) => (layers.into_iter().filter(|l| *l == layer).collect(), table),
        None => (layers.to_vec(), name),
    };
    if !crate::registry::is_plain_name(table) {
        return Ok(None);
    }
    for layer in layers {
        let spec = TableSpec::ingestion(table, &format!("{layer}/{table}"));
        if super::table::exists(root, &spec).await? {
            return Ok(Some(spec));
        }
    }
    Ok(None)
}

/// [`ingestion_tables`] of a lake in a store: its layers listed.
async fn ingestion_tables_in_store(store: &StoreRoot) -> Result<Vec<TableSpec>> {
    let folders = async |relative: &str| -> Result<Vec<String>> {
        let prefix = store.object(relative);
        let listed = store.store().list_with_delimiter(Some(&prefix)).await.map_err(|source| {
            Error::Store { what: format!("listing {store}{relative}"), source }
        })?;
        Ok(listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect())
    };
    let mut out = Vec::new();
    for layer in [RAW_DIR, AGGREGATE_DIR, CURATED_DIR] {
        let mut names = Vec::new();
        for name in folders(layer).await? {
            let relative = format!("{layer}/{name}");
            if crate::registry::is_plain_name(&name)
                && folders(&relative).await?.iter().any(|f| f == "_delta_log")
            {
                names.push(name);
            }
        }
        names.sort();
        out.extend(names.iter().map(|n| TableSpec::ingestion(n, &format!("{layer}/{n}"))));
    }
    if folders(INGEST_LEDGER_DIR).await?.iter().any(|f| f == "_delta_log") {
        out.push(TableSpec::ingestion("ingest_ledger", INGEST_LEDGER_DIR));
    }
    Ok(out)
}

/// [`ingestion_tables`] of a lake on a filesystem.
fn ingestion_tables_in(root: &Path) -> Vec<TableSpec> {
    let mut out = Vec::new();
    for layer in [RAW_DIR, AGGREGATE_DIR, CURATED_DIR] {
        let Ok(entries) = std::fs::read_dir(root.join(layer)) else { continue };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| crate::registry::is_plain_name(n))
            .filter(|n| root.join(layer).join(n).join("_delta_log").is_dir())
            .collect();
        names.sort();
        out.extend(names.iter().map(|n| TableSpec::ingestion(n, &format!("{layer}/{n}"))));
    }
    if root.join(INGEST_LEDGER_DIR).join("_delta_log").is_dir() {
        out.push(TableSpec::ingestion("ingest_ledger", INGEST_LEDGER_DIR));
    }
    out
}
