//! Result sets: which specs a version of the executions table ran
//! successfully, and by which run, answered without reading its files.
//!
//! The execution cache asks, for each unit spec of a step, for the latest
//! successful execution of that spec. The spec-id key filters narrow that
//! to the versions that may hold each spec, but the answer (run id, end,
//! success) is in the rows, and a step whose cached specs are spread over
//! every commit decoded a row group per spec in nearly every version: at
//! 100M artifacts (20M executions in ~120 versions), 3–4 s of a 100k-spec
//! check.
//!
//! So next to the key set of each version of the executions table, a sluice
//! write leaves, for every spec with a successful execution in that version,
//! its latest one: a part of the version's bundle (see
//! [`sidecar`](crate::lake::keys::sidecar)), or in the older layout (and when repair
//! writes one) `<table>/_sluice_keys/{version:020}.results`.
//!
//! ```text
//! blocks                 records ascending by spec key, 64 per block;
//!                        record: spec key (16) · end, µs (i64) ·
//!                        run id length (u16) · run id (UTF-8)
//! index                  per block: its first key · its offset (u64) ·
//!                        an 8-byte checksum
//! tail (52 bytes)        files digest (16) · records (u64) · records per
//!                        block (u32) · format tag (8) · checksum of index
//!                        and tail (16)
//! ```
//!
//! Looking a spec up reads the one block the index points to. A version
//! whose set answers leaves the read plan: a spec it does not hold has no
//! successful execution there (a failed one, or a false positive of the
//! filter). Trust is as for key sets: the set must be whole, each block
//! must match its checksum, and it must describe exactly the files of the
//! version's filter; otherwise it answers nothing and the files are read —
//! slower, never wrong.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use deltalake::arrow::array::{Array, BooleanArray, Int64Array};
use deltalake::arrow::datatypes::DataType;
use deltalake::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::lake::delta::scan;
use crate::lake::keys::key_filter::{Key, LookupPlan};
use crate::lake::keys::key_set::{
    self, BLOCK_SUM_LEN, KEY_LEN, Opened, block_sum, files_digest, open_cached,
};
use crate::lake::keys::sidecar::{self, Part, Span};

/// Format tag, at the end of the file.
const MAGIC: &[u8; 8] = b"SLRSET01";
/// Records per block: about 4 KiB with 32-character run ids.
const BLOCK_RECORDS: usize = 64;
/// A record's fixed part: spec key, end, run id length.
const RECORD_FIXED: usize = KEY_LEN + 8 + 2;
const INDEX_ENTRY: usize = KEY_LEN + 8 + BLOCK_SUM_LEN;

/// The columns of the executions table a result set is made from.
pub const COLUMNS: [&str; 4] =
    ["execution_spec_id", "execution_run_id", "timestamp_end", "success"];

/// The latest successful execution of one spec (in one version, or over
/// all of them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpecResult {
    /// When it ended (µs since the epoch; 0 when unknown).
    pub end: i64,
    /// Its run id.
    pub run_id: String,
}

/// Keep in `latest` the later of its result for `key` and `result` (the
/// larger run id on a tie, so the answer does not depend on the order rows
/// are read in).
pub fn keep_latest<K: Ord>(latest: &mut BTreeMap<K, SpecResult>, key: K, result: SpecResult) {
    match latest.entry(key) {
        Entry::Vacant(slot) => {
            slot.insert(result);
        }
        Entry::Occupied(mut slot) => {
            if result > *slot.get() {
                slot.insert(result);
            }
        }
    }
}

/// The file name of a version's result set.
fn set_name(version: u64) -> String {
    format!("{version:020}.results")
}

fn set_path(table_dir: &Path, version: u64) -> PathBuf {
    sidecar::keys_dir(table_dir).join(set_name(version))
}

/// Call `f(spec id, result)` for each successful execution in `batch`, a
/// batch of the executions table holding at least [`COLUMNS`].
pub fn for_each_success(
    batch: &RecordBatch,
    table: &str,
    mut f: impl FnMut(&str, SpecResult),
) -> Result<()> {
    let index = |name: &str| {
        batch.schema().index_of(name).map_err(|e| Error::arrow(format!("`{table}`.{name}"), e))
    };
    let specs = scan::text_column(batch, index(COLUMNS[0])?, table)?;
    let runs = scan::text_column(batch, index(COLUMNS[1])?, table)?;
    let ends = deltalake::arrow::compute::cast(batch.column(index(COLUMNS[2])?), &DataType::Int64)
        .map_err(|e| Error::arrow(table, e))?;
    let ends = ends
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| Error::Internal(format!("`{table}.timestamp_end` did not cast")))?;
    let success = batch
        .column(index(COLUMNS[3])?)
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| Error::Internal(format!("`{table}.success` is not boolean")))?;
    for row in 0..batch.num_rows() {
        if !(success.is_valid(row) && success.value(row) && specs.is_valid(row)) {
            continue;
        }
        let end = if ends.is_valid(row) { ends.value(row) } else { 0 };
        f(specs.value(row), SpecResult { end, run_id: runs.value(row).to_owned() });
    }
    Ok(())
}

/// Fold the successful executions of `batch` into `latest`, by spec key.
pub fn add_batch(
    latest: &mut BTreeMap<Key, SpecResult>,
    batch: &RecordBatch,
    table: &str,
) -> Result<()> {
    for_each_success(batch, table, |spec, result| {
        keep_latest(latest, Key::of_value(spec), result);
    })
}

/// Per spec key, the latest successful execution in `batches`.
pub fn results_of(batches: &[RecordBatch], table: &str) -> Result<BTreeMap<Key, SpecResult>> {
    let mut latest = BTreeMap::new();
    for batch in batches {
        add_batch(&mut latest, batch, table)?;
    }
    Ok(latest)
}

/// The bytes of the result set of `results` held by `files`; `None` when a
/// run id is too long for a record (the version is then read from its
/// files).
pub fn encode(files: &[String], results: &BTreeMap<Key, SpecResult>) -> Option<Vec<u8>> {
    let records: Vec<(&Key, &SpecResult)> = results.iter().collect();
    let mut out = Vec::new();
    let mut blocks: Vec<(Key, usize, usize)> = Vec::new();
    for chunk in records.chunks(BLOCK_RECORDS) {
        let start = out.len();
        for (key, result) in chunk {
            let len = u16::try_from(result.run_id.len()).ok()?;
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&result.end.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(result.run_id.as_bytes());
        }
        blocks.push((*chunk[0].0, start, out.len()));
    }
    let index_at = out.len();
    for (first, start, end) in blocks {
        let sum = block_sum(&out[start..end]);
        out.extend_from_slice(first.as_bytes());
        out.extend_from_slice(&(start as u64).to_le_bytes());
        out.extend_from_slice(&sum);
    }
    key_set::seal(&mut out, index_at, files, records.len(), BLOCK_RECORDS, MAGIC);
    Some(out)
}

/// Write the result set of a version of the executions table whose data
/// files are `files` (atomically, by a rename). A missing set only costs
/// speed, so callers may log a failure and go on.
pub fn write(
    table_dir: &Path,
    version: u64,
    files: &[String],
    results: &BTreeMap<Key, SpecResult>,
) -> Result<()> {
    let Some(bytes) = encode(files, results) else {
        tracing::debug!(version, "a run id is too long for a result set; none written");
        return Ok(());
    };
    sidecar::write_file(&sidecar::keys_dir(table_dir), &set_name(version), &bytes)
}

/// An opened result set: its index in memory, its blocks on disk.
#[derive(Debug)]
pub struct ResultSet {
    /// The file the set lies in, and where in it the set starts.
    path: PathBuf,
    base: u64,
    files: [u8; 16],
    len: usize,
    first_keys: Vec<Key>,
    /// Byte range of each block.
    ranges: Vec<(usize, usize)>,
    sums: Vec<[u8; BLOCK_SUM_LEN]>,
}

fn set_cache() -> &'static Opened<ResultSet> {
    static CACHE: OnceLock<Opened<ResultSet>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

impl ResultSet {
    /// The result set of a version, if it exists, is intact and describes
    /// exactly `files` (the data files of that version's key filter).
    /// The set is the part of the version's sidecar bundle or, when that
    /// is missing or not believed, the single file of the older layout
    /// (which repair writes).
    pub fn open(table_dir: &Path, version: u64, files: &[String]) -> Option<Arc<ResultSet>> {
        let digest = files_digest(files);
        sidecar::spans(table_dir, version, Part::Results, set_path(table_dir, version)).find_map(
            |span| {
                open_cached(set_cache(), &span, "result set", ResultSet::read_index)
                    .filter(|set| set.files == digest)
            },
        )
    }

    /// Read and check the index and tail of the set at `span`.
    fn read_index(span: &Span) -> Option<ResultSet> {
        let sealed = key_set::read_sealed(span, MAGIC, BLOCK_RECORDS, INDEX_ENTRY)?;
        let mut first_keys = Vec::with_capacity(sealed.blocks);
        let mut starts = Vec::with_capacity(sealed.blocks);
        let mut sums = Vec::with_capacity(sealed.blocks);
        for entry in sealed.index.chunks_exact(INDEX_ENTRY) {
            first_keys.push(Key::from_bytes(entry[..KEY_LEN].try_into().ok()?));
            let start = u64::from_le_bytes(entry[KEY_LEN..KEY_LEN + 8].try_into().ok()?);
            starts.push(usize::try_from(start).ok()?);
            sums.push(entry[KEY_LEN + 8..].try_into().ok()?);
        }
        // Blocks tile the data region in order, each at least one record.
        let mut ranges = Vec::with_capacity(sealed.blocks);
        for (b, &start) in starts.iter().enumerate() {
            let end = starts.get(b + 1).copied().unwrap_or(sealed.index_at);
            if (b == 0 && start != 0) || end < start + RECORD_FIXED {
                return None;
            }
            ranges.push((start, end));
        }
        if sealed.blocks == 0 && sealed.index_at != 0 {
            return None;
        }
        Some(ResultSet {
            path: span.path.clone(),
            base: span.base,
            files: sealed.files,
            len: sealed.len,
            first_keys,
            ranges,
            sums,
        })
    }

    /// Specs in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no spec.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records of block `b`, from its bytes (borrowed: a look-up
    /// copies only the run ids it returns); `None` if they do not parse
    /// into the number of records the block must hold.
    fn parse_block<'a>(&self, b: usize, bytes: &'a [u8]) -> Option<Vec<Record<'a>>> {
        let expected = BLOCK_RECORDS.min(self.len - b * BLOCK_RECORDS);
        let mut out = Vec::with_capacity(expected);
        let mut at = 0;
        while at < bytes.len() {
            let fixed = bytes.get(at..at + RECORD_FIXED)?;
            let key: &[u8; KEY_LEN] = fixed[..KEY_LEN].try_into().ok()?;
            let end = i64::from_le_bytes(fixed[KEY_LEN..KEY_LEN + 8].try_into().ok()?);
            let len = u16::from_le_bytes(fixed[KEY_LEN + 8..].try_into().ok()?) as usize;
            at += RECORD_FIXED;
            let run = std::str::from_utf8(bytes.get(at..at + len)?).ok()?;
            at += len;
            out.push((key, end, run));
        }
        (out.len() == expected).then_some(out)
    }

    /// For each of `keys`, the result the set holds for it (`None`: no
    /// successful execution of that spec in this version); `None` overall
    /// when a block it needed could not be read or failed its checksum.
    /// Runs of consecutive wanted blocks are read at once (a look-up that
    /// touches most blocks reads the set in one go).
    pub fn get_each(&self, keys: &[Key]) -> Option<Vec<Option<SpecResult>>> {
        let mut out = vec![None; keys.len()];
        let wanted = key_set::blocks_wanted(&self.first_keys, keys);
        if wanted.is_empty() {
            return Some(out);
        }
        let mut file = File::open(&self.path).ok()?;
        let mut bytes = Vec::new();
        let mut at = 0;
        while at < wanted.len() {
            let first = wanted[at].0;
            let mut last = first;
            for &(b, _) in &wanted[at..] {
                if b > last + 1 {
                    break;
                }
                last = b;
            }
            let from = self.ranges[first].0;
            bytes.resize(self.ranges[last].1 - from, 0);
            file.seek(SeekFrom::Start(self.base + from as u64)).ok()?;
            file.read_exact(&mut bytes).ok()?;
            for b in first..=last {
                if at >= wanted.len() || wanted[at].0 != b {
                    continue;
                }
                let (start, end) = self.ranges[b];
                let block = &bytes[start - from..end - from];
                if block_sum(block) != self.sums[b] {
                    tracing::warn!(path = %self.path.display(), block = b, "a result set block fails its checksum");
                    return None;
                }
                let records = self.parse_block(b, block)?;
                while at < wanted.len() && wanted[at].0 == b {
                    let key = keys[wanted[at].1].as_bytes();
                    out[wanted[at].1] = records
                        .binary_search_by(|(k, _, _)| (*k).cmp(key))
                        .ok()
                        .map(|i| SpecResult { end: records[i].1, run_id: records[i].2.to_owned() });
                    at += 1;
                }
            }
        }
        Some(out)
    }
}

/// A record as it lies in a block: spec key, end, run id.
type Record<'a> = (&'a [u8; KEY_LEN], i64, &'a str);

/// Answer from result sets what a lookup plan of spec ids can: each
/// candidate version whose set opens (intact, for the same files) leaves
/// the plan, and the results its set holds for the candidate's keys are
/// returned. What remains in the plan must still be read. Versions are
/// looked at on every core.
pub fn settle<K: Clone + Send + Sync>(
    table_dir: &Path,
    plan: &mut LookupPlan<K>,
    key_of: impl Fn(&K) -> Key + Sync,
) -> Vec<(K, SpecResult)> {
    let answers = crate::host::on_cores(&plan.candidates, |candidates| {
        let set = ResultSet::open(table_dir, candidates.version, &candidates.files)?;
        let keys: Vec<Key> = candidates.keys.iter().map(&key_of).collect();
        set.get_each(&keys)
    });
    let mut found = Vec::new();
    let mut answered = answers.into_iter();
    plan.candidates.retain(|candidates| {
        let Some(Some(results)) = answered.next() else { return true };
        found.extend(
            candidates.keys.iter().zip(results).filter_map(|(k, r)| r.map(|r| (k.clone(), r))),
        );
        false
    });
    found
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::lake::keys::key_filter::Candidates;
    use crate::lake::keys::key_set::CHECKSUM_LEN;

    fn spec(i: u64) -> String {
        format!("spec-{i}")
    }

    fn result(i: u64) -> SpecResult {
        // Run ids of varying length, as users may name them.
        SpecResult {
            end: i as i64 * 10,
            run_id: format!("run-{i}-{}", "x".repeat((i % 40) as usize)),
        }
    }

    fn results(range: std::ops::Range<u64>) -> BTreeMap<Key, SpecResult> {
        range.map(|i| (Key::of_value(&spec(i)), result(i))).collect()
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_set_answers_each_spec_it_holds_and_none_other() {
        let dir = tempfile::tempdir().expect("temp dir");
        // 300 specs: four whole blocks and a partial one.
        write(dir.path(), 4, &files(&["a"]), &results(0..300)).expect("write");
        let set = ResultSet::open(dir.path(), 4, &files(&["a"])).expect("opens");
        assert_eq!(set.len(), 300);
        let asked: Vec<Key> = (290..310).map(|i| Key::of_value(&spec(i))).collect();
        let answers = set.get_each(&asked).expect("readable");
        for (i, answer) in (290..310).zip(answers) {
            assert_eq!(answer, (i < 300).then(|| result(i)), "spec {i}");
        }
        let every: Vec<Key> = (0..300).map(|i| Key::of_value(&spec(i))).collect();
        let all = set.get_each(&every).expect("readable");
        assert!(all.iter().zip(0..).all(|(r, i)| r.as_ref() == Some(&result(i))));
        // A version with no successful execution answers "none" for all.
        write(dir.path(), 5, &files(&["b"]), &BTreeMap::new()).expect("write empty");
        let empty = ResultSet::open(dir.path(), 5, &files(&["b"])).expect("opens");
        assert!(empty.is_empty());
        assert_eq!(empty.get_each(&every[..3]), Some(vec![None, None, None]));
    }

    #[test]
    fn a_set_for_other_files_or_another_version_is_not_believed() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), 3, &files(&["a", "b"]), &results(0..5)).expect("write");
        assert!(ResultSet::open(dir.path(), 3, &files(&["a"])).is_none());
        assert!(ResultSet::open(dir.path(), 4, &files(&["a", "b"])).is_none());
        assert!(ResultSet::open(dir.path(), 3, &files(&["a", "b"])).is_some());
    }

    #[test]
    fn damaged_torn_or_foreign_sets_answer_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), 1, &files(&["f"]), &results(0..200)).expect("write");
        let set = ResultSet::open(dir.path(), 1, &files(&["f"])).expect("opens");
        let whole = std::fs::read(set_path(dir.path(), 1)).expect("read");
        // A bit of the second block flipped in place: keys there answer
        // nothing, keys of the first still do.
        let mut flipped = whole.clone();
        flipped[set.ranges[1].0 + 20] ^= 1;
        std::fs::write(set_path(dir.path(), 1), &flipped).expect("write back");
        let in_block = |b: usize| {
            (0..200)
                .map(|i| Key::of_value(&spec(i)))
                .find(|k| set.first_keys.partition_point(|f| f <= k) == b + 1)
                .expect("a key of the block")
        };
        assert!(set.get_each(&[in_block(0)]).expect("first block reads")[0].is_some());
        assert_eq!(set.get_each(&[in_block(1)]), None);
        let index_at = set.ranges.last().expect("blocks").1;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("torn", whole[..whole.len() - 1].to_vec()),
            ("empty", Vec::new()),
            ("index bit flipped", {
                let mut b = whole.clone();
                b[index_at + 3] ^= 0x10;
                b
            }),
            ("another format", {
                let mut b = whole.clone();
                let at = b.len() - CHECKSUM_LEN - 1;
                b[at] = b'9';
                b
            }),
        ];
        for (version, (what, bytes)) in (10u64..).zip(cases) {
            std::fs::write(set_path(dir.path(), version), bytes).expect("write");
            assert!(ResultSet::open(dir.path(), version, &files(&["f"])).is_none(), "{what}");
        }
    }

    #[test]
    fn a_run_id_too_long_for_a_record_writes_no_set() {
        let dir = tempfile::tempdir().expect("temp dir");
        let long = SpecResult { end: 1, run_id: "r".repeat(70_000) };
        let results = BTreeMap::from([(Key::of_value("s"), long)]);
        write(dir.path(), 1, &files(&["f"]), &results).expect("write");
        assert!(ResultSet::open(dir.path(), 1, &files(&["f"])).is_none());
    }

    #[test]
    fn settle_answers_what_sets_hold_and_leaves_the_rest_to_be_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), 1, &files(&["a"]), &results(0..10)).expect("write");
        let mut plan = LookupPlan {
            uncovered: files(&["foreign"]),
            candidates: vec![
                Candidates { version: 1, files: files(&["a"]), keys: vec![spec(3), spec(50)] },
                Candidates { version: 2, files: files(&["b"]), keys: vec![spec(4)] },
            ],
        };
        let found = settle(dir.path(), &mut plan, |s| Key::of_value(s));
        assert_eq!(found, vec![(spec(3), result(3))]);
        assert_eq!(plan.candidates.len(), 1);
        assert_eq!(plan.candidates[0].version, 2);
        assert_eq!(plan.uncovered, files(&["foreign"]));
    }

    proptest! {
        #[test]
        fn a_set_answers_exactly_what_was_written(
            held in proptest::collection::btree_map(0u64..3000, (0i64..1000, 1usize..80), 0..600),
            asked in proptest::collection::vec(0u64..3000, 1..300),
        ) {
            let dir = tempfile::tempdir().expect("temp dir");
            let written: BTreeMap<Key, SpecResult> = held
                .iter()
                .map(|(i, (end, len))| {
                    (Key::of_value(&spec(*i)), SpecResult { end: *end, run_id: "r".repeat(*len) })
                })
                .collect();
            write(dir.path(), 9, &files(&["f"]), &written).expect("write");
            let set = ResultSet::open(dir.path(), 9, &files(&["f"])).expect("opens");
            prop_assert_eq!(set.len(), written.len());
            let keys: Vec<Key> = asked.iter().map(|i| Key::of_value(&spec(*i))).collect();
            let answers = set.get_each(&keys).expect("readable");
            for (key, answer) in keys.iter().zip(answers) {
                prop_assert_eq!(answer.as_ref(), written.get(key));
            }
        }
    }
}
