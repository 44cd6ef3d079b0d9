//! A staged unit as one object, for staging in an object store.
//!
//! On a filesystem a unit is a folder of Parquet files (one per table it
//! touches), sealed by its sentinel. In a store every object is a request
//! to write and one to read, and requests are what a store costs (tens of
//! milliseconds each in a region): a unit of five files would cost a
//! worker five PUTs and the committer five GETs. So in a store a unit's
//! files travel together in one object, [`UNIT_OBJECT`] in the unit's
//! folder: one PUT, made if absent, which both writes and seals the unit
//! (a PUT is atomic: the unit is whole or absent, and never "unsealed"),
//! and one GET to commit it.
//!
//! Layout: the files' bytes one after the other, then a JSON index of
//! their names and lengths, the index's length (u32, little-endian), and
//! the magic `SLUICEU1`. Each file inside is exactly the Parquet file a
//! folder would hold, so `unpack` gives back what a folder's reader reads.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The object holding a unit, in the unit's folder (in a store or on disk).
pub const UNIT_OBJECT: &str = "unit.sluice";

/// How a file inside a unit object holds its table's rows, from its
/// name's extension: `{table}.arrow` an Arrow IPC stream (small rows),
/// `{table}.parquet` a Parquet file (large rows, and every file of units
/// an older sluice staged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// An Arrow IPC stream.
    Ipc,
    /// A Parquet file.
    Parquet,
}

/// The table a staged file holds rows of, and how.
pub fn table_of(name: &str) -> Option<(&str, FileFormat)> {
    if let Some(table) = name.strip_suffix(".arrow") {
        return Some((table, FileFormat::Ipc));
    }
    name.strip_suffix(".parquet").map(|table| (table, FileFormat::Parquet))
}

/// The schema and batches of an Arrow IPC stream.
pub fn decode_ipc(
    bytes: Bytes,
) -> Result<
    (deltalake::arrow::datatypes::SchemaRef, Vec<deltalake::arrow::record_batch::RecordBatch>),
    deltalake::arrow::error::ArrowError,
> {
    let reader =
        deltalake::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}

/// The rows of a staged table file named `name` (by its extension: Arrow
/// IPC or Parquet), for tools that read units; the committer reads them
/// with its own checks and memory bound.
pub fn decode_file(
    name: &str,
    bytes: Bytes,
) -> crate::error::Result<Vec<deltalake::arrow::record_batch::RecordBatch>> {
    use crate::error::Error;
    match table_of(name).map(|(_, format)| format) {
        Some(FileFormat::Ipc) => Ok(decode_ipc(bytes).map_err(|e| Error::arrow(name, e))?.1),
        Some(FileFormat::Parquet) => {
            deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                .and_then(|builder| builder.build())
                .map_err(|e| Error::parquet(name, e))?
                .collect::<Result<_, _>>()
                .map_err(|e| Error::arrow(name, e))
        }
        None => Err(Error::InvalidInput(format!("{name}: not a staged table file"))),
    }
}

/// The last bytes of every unit object.
const MAGIC: &[u8; 8] = b"SLUICEU1";

/// One file of a unit object, as its index lists it.
#[derive(Serialize, Deserialize)]
struct Entry {
    name: String,
    len: u64,
}

/// One object holding `files` (name, bytes), in order.
pub fn pack(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let index: Vec<Entry> =
        files.iter().map(|(name, b)| Entry { name: name.clone(), len: b.len() as u64 }).collect();
    let index = serde_json::to_vec(&index).expect("names and lengths serialize");
    let size: usize = files.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(size + index.len() + 12);
    for (_, bytes) in files {
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(&index);
    out.extend_from_slice(&(index.len() as u32).to_le_bytes());
    out.extend_from_slice(MAGIC);
    out
}

/// The files of a unit object (slices of it, no copy), or why it is not
/// one.
pub fn unpack(object: &Bytes) -> Result<Vec<(String, Bytes)>, String> {
    let trailer = MAGIC.len() + 4;
    if object.len() < trailer || &object[object.len() - MAGIC.len()..] != MAGIC {
        return Err("not a staged unit object (its trailer is missing)".into());
    }
    let at = object.len() - trailer;
    let index_len = u32::from_le_bytes(object[at..at + 4].try_into().expect("4 bytes")) as usize;
    let Some(index_at) = at.checked_sub(index_len) else {
        return Err(format!("its index of {index_len} bytes is longer than the object"));
    };
    let index: Vec<Entry> = serde_json::from_slice(&object[index_at..at])
        .map_err(|e| format!("its index is unreadable: {e}"))?;
    let mut files = Vec::with_capacity(index.len());
    let mut offset = 0usize;
    for entry in index {
        let end = usize::try_from(entry.len)
            .ok()
            .and_then(|len| offset.checked_add(len))
            .filter(|&end| end <= index_at)
            .ok_or_else(|| format!("`{}` runs past the end of its files", entry.name))?;
        files.push((entry.name, object.slice(offset..end)));
        offset = end;
    }
    if offset != index_at {
        return Err(format!("{} bytes lie between its files and its index", index_at - offset));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, Vec<u8>)> {
        vec![
            ("metrics.parquet".into(), b"PAR1 metrics PAR1".to_vec()),
            ("index.parquet".into(), Vec::new()),
            ("executions.parquet".into(), b"PAR1 sentinel PAR1".to_vec()),
        ]
    }

    #[test]
    fn a_unit_object_gives_back_its_files_in_order() {
        let object = Bytes::from(pack(&files()));
        let unpacked = unpack(&object).unwrap();
        let expected: Vec<(String, Bytes)> =
            files().into_iter().map(|(n, b)| (n, Bytes::from(b))).collect();
        assert_eq!(unpacked, expected);
    }

    #[test]
    fn a_damaged_unit_object_is_refused_with_the_reason() {
        let object = pack(&files());
        let truncated = Bytes::copy_from_slice(&object[..object.len() - 3]);
        assert!(unpack(&truncated).unwrap_err().contains("trailer"));
        let mut lying = object.clone();
        let at = lying.len() - 12;
        lying[at..at + 4].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(unpack(&Bytes::from(lying)).unwrap_err().contains("longer than the object"));
        let mut shifted = b"xx".to_vec();
        shifted.extend_from_slice(&object);
        assert!(unpack(&Bytes::from(shifted)).unwrap_err().contains("bytes lie between"));
        assert!(unpack(&Bytes::from_static(b"SLUICEU1")).is_err());
    }
}
