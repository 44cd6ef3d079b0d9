//! Shared fixtures.

use serde_json::json;
use sluice::{Artifact, Draft, Lake};

/// A fresh lake in a temp dir (the dir lives as long as the guard).
pub async fn lake() -> (tempfile::TempDir, Lake) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lake, _) = Lake::init(dir.path()).await.expect("init lake");
    (dir, lake)
}

/// `n` distinct metrics at a step.
pub fn metrics(lake: &Lake, step: i32, n: usize) -> Vec<Artifact> {
    (0..n)
        .map(|i| {
            Draft::metric(json!({"step": step, "i": i, "score": i as f64 / 10.0}))
                .expect("metric")
                .with_step(step)
                .finalize(lake.registry())
                .expect("finalize")
        })
        .collect()
}

/// Read the JSON actions of every commit of a table.
pub fn log_actions(table_dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(table_dir.join("_delta_log"))
        .expect("log dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read log")
                .lines()
                .map(|l| serde_json::from_str(l).expect("json action"))
                .collect::<Vec<serde_json::Value>>()
        })
        .collect()
}

/// The sidecar bundles of a table folder (one per version a sluice write
/// made), by version.
pub fn bundles(table_dir: &std::path::Path) -> Vec<(u64, std::path::PathBuf)> {
    let keys = table_dir.join(sluice::lake::keys::key_filter::KEYS_DIR);
    let mut found: Vec<_> = std::fs::read_dir(&keys)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            Some((name.strip_suffix(".side")?.parse().ok()?, p))
        })
        .collect();
    found.sort();
    found
}

/// Flip one byte of one part of a version's bundle, `at` bytes into it
/// (`None`: its last byte, inside the checksum that ends every part).
pub fn damage_part(
    table_dir: &std::path::Path,
    version: u64,
    part: sluice::lake::keys::sidecar::Part<'_>,
    at: Option<u64>,
) {
    let span =
        sluice::lake::keys::sidecar::locate(table_dir, version, part).expect("the part exists");
    let mut bytes = std::fs::read(&span.path).unwrap();
    let at = span.base + at.unwrap_or(span.len - 1);
    bytes[at as usize] ^= 0x40;
    std::fs::write(&span.path, bytes).unwrap();
}

/// The metrics table's distinct artifact ids and rows, as CSV.
pub async fn distinct_and_rows(lake: &Lake) -> String {
    let n = lake
        .sql("SELECT count(DISTINCT artifact_id) AS d, count(*) AS n FROM metrics")
        .execute()
        .await
        .unwrap();
    sluice::query::format::render(&n.batches, sluice::query::OutputFormat::Csv).unwrap()
}

/// The unit object of a staged unit: its file, or the object in an older
/// sluice's folder.
fn unit_object(unit: &std::path::Path) -> std::path::PathBuf {
    if unit.is_dir() { unit.join(sluice::staging::bundle::UNIT_OBJECT) } else { unit.to_path_buf() }
}

/// The files inside the unit object staged at `unit`, in order.
pub fn unit_files(unit: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let path = unit_object(unit);
    let object = bytes::Bytes::from(std::fs::read(&path).unwrap());
    sluice::staging::bundle::unpack(&object)
        .unwrap()
        .into_iter()
        .map(|(name, bytes)| (name, bytes.to_vec()))
        .collect()
}

/// Rewrite the unit object staged at `unit` after `edit` changed its
/// files (a worker that staged something else).
pub fn edit_unit(unit: &std::path::Path, edit: impl FnOnce(&mut Vec<(String, Vec<u8>)>)) {
    let mut files = unit_files(unit);
    edit(&mut files);
    let path = unit_object(unit);
    std::fs::write(path, sluice::staging::bundle::pack(&files)).unwrap();
}

/// The bytes of the file named `name` in `files`.
pub fn file_mut<'a>(files: &'a mut [(String, Vec<u8>)], name: &str) -> &'a mut Vec<u8> {
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let Some((_, bytes)) = files.iter_mut().find(|(n, _)| n == name) else {
        panic!("no {name} in the unit: {names:?}")
    };
    bytes
}

/// The rows of a staged table file (Arrow IPC or Parquet, by its name).
pub fn staged_batches(
    name: &str,
    bytes: &[u8],
) -> Vec<deltalake::arrow::record_batch::RecordBatch> {
    sluice::staging::bundle::decode_file(name, bytes::Bytes::copy_from_slice(bytes)).unwrap()
}

/// Batches as an Arrow IPC stream, as a unit object holds small rows.
pub fn ipc_bytes(batches: &[deltalake::arrow::record_batch::RecordBatch]) -> Vec<u8> {
    let mut w =
        deltalake::arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &batches[0].schema())
            .unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.into_inner().unwrap()
}
