//! Key sets: which keys a table version added, answered exactly.
//!
//! A [`KeyFilter`](crate::lake::keys::key_filter::KeyFilter) rules absent keys out, but
//! when it answers "maybe" the files must be read to tell a present key
//! from a false positive. Re-running work sends ids that *are* present (a
//! retried step, a resumed pipeline): confirming them read the key column
//! of every file that held one. Uniform ids spread over a large table put
//! some in nearly every row group, so a commit of 10k executions into a
//! lake of 10M artifacts decoded most of the table's key column.
//!
//! So next to each version's key filter, a sluice write leaves that
//! version's keys sorted: a part of its bundle
//! (`<table>/_sluice_keys/{version:020}.side`, see [`sidecar`](crate::lake::keys::sidecar)),
//! or in the older layout (and when repair writes one) `{version:020}.set`:
//!
//! ```text
//! block 0 … block n-1   keys, 16 bytes each, ascending, 256 per block
//! index                 per block: its first key and an 8-byte checksum
//! tail (52 bytes)       files digest (16) · keys (u64) · keys per block (u32)
//!                       · format tag (8) · checksum of index and tail (16)
//! ```
//!
//! Opening one reads the index and tail (24 bytes per 256 keys; cached per
//! process). Confirming a key reads the one 4 KiB block the index points
//! to, so the cost of a commit follows the keys it confirms, not the size of
//! the table.
//!
//! The set is only believed when it is whole and intact: the tail's
//! checksum covers the index, each block is checked as it is read, and the
//! digest of the data files must match those of the version's key filter
//! (a set left by another table at the same path, or by another writer of
//! the same version, is ignored). A set that is missing, torn or does not
//! match answers nothing, and its files are read as before: slower, never
//! wrong. A key that the set holds is in those files, and the files are
//! live (the plan only uses filters whose files all are), so it is present
//! in the table; sluice never deletes rows inside a live file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::Result;
use crate::lake::keys::key_filter::{Key, LookupPlan};
use crate::lake::keys::sidecar::{self, FileId, Part, Span};

/// Format tag, at the end of the file.
const MAGIC: &[u8; 8] = b"SLKSET01";
/// Keys per block: 4 KiB, one page read per confirmed key.
const BLOCK_KEYS: usize = 256;
pub(in crate::lake) const KEY_LEN: usize = 16;
pub(in crate::lake) const BLOCK_SUM_LEN: usize = 8;
const INDEX_ENTRY: usize = KEY_LEN + BLOCK_SUM_LEN;
pub(in crate::lake) const CHECKSUM_LEN: usize = 16;
const TAIL: usize = 16 + 8 + 4 + 8 + CHECKSUM_LEN;
/// When more than this share of a set's blocks is wanted, all of them are
/// read at once instead of one run of blocks at a time.
const READ_ALL_ABOVE: f64 = 0.75;

/// The file name of a version's key set.
fn set_name(version: u64) -> String {
    format!("{version:020}.set")
}

fn set_path(table_dir: &Path, version: u64) -> PathBuf {
    sidecar::keys_dir(table_dir).join(set_name(version))
}

/// A digest of the data files a set describes (as the version's key filter
/// lists them), so a set is never believed for other files.
pub(in crate::lake) fn files_digest(files: &[String]) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    for file in files {
        hasher.update(&(file.len() as u64).to_le_bytes());
        hasher.update(file.as_bytes());
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    out
}

pub(in crate::lake) fn block_sum(block: &[u8]) -> [u8; BLOCK_SUM_LEN] {
    let mut out = [0u8; BLOCK_SUM_LEN];
    out.copy_from_slice(&blake3::hash(block).as_bytes()[..BLOCK_SUM_LEN]);
    out
}

/// The bytes of the key set of `keys` held by `files`.
pub fn encode(files: &[String], keys: &[Key]) -> Vec<u8> {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let blocks = sorted.len().div_ceil(BLOCK_KEYS);
    let mut out = Vec::with_capacity(sorted.len() * KEY_LEN + blocks * INDEX_ENTRY + TAIL);
    for key in &sorted {
        out.extend_from_slice(key.as_bytes());
    }
    let index_at = out.len();
    for (b, chunk) in sorted.chunks(BLOCK_KEYS).enumerate() {
        let start = b * BLOCK_KEYS * KEY_LEN;
        let sum = block_sum(&out[start..start + chunk.len() * KEY_LEN]);
        out.extend_from_slice(chunk[0].as_bytes());
        out.extend_from_slice(&sum);
    }
    seal(&mut out, index_at, files, sorted.len(), BLOCK_KEYS, MAGIC);
    out
}

/// Append the tail of a set file whose index starts at `index_at`: the
/// digest of `files`, `len` entries in blocks of `per_block`, the format
/// tag and a checksum of index and tail.
pub(in crate::lake) fn seal(
    out: &mut Vec<u8>,
    index_at: usize,
    files: &[String],
    len: usize,
    per_block: usize,
    magic: &[u8; 8],
) {
    out.extend_from_slice(&files_digest(files));
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend_from_slice(&(per_block as u32).to_le_bytes());
    out.extend_from_slice(magic);
    let checksum = blake3::hash(&out[index_at..]);
    out.extend_from_slice(&checksum.as_bytes()[..CHECKSUM_LEN]);
}

/// Write the key set of a table version (atomically, by a rename). A
/// missing set only costs speed, so callers may log a failure and go on.
pub fn write(table_dir: &Path, version: u64, files: &[String], keys: &[Key]) -> Result<()> {
    sidecar::write_file(&sidecar::keys_dir(table_dir), &set_name(version), &encode(files, keys))
}

/// Whether a block (sorted keys of `KEY_LEN` bytes) holds `key`.
fn block_holds(block: &[u8], key: &[u8; KEY_LEN]) -> bool {
    let (mut lo, mut hi) = (0, block.len() / KEY_LEN);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match block[mid * KEY_LEN..(mid + 1) * KEY_LEN].cmp(key.as_slice()) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// An opened key set: its index in memory, its blocks on disk.
#[derive(Debug)]
pub struct KeySet {
    /// The file the set lies in, and where in it the set starts.
    path: PathBuf,
    base: u64,
    files: [u8; 16],
    len: usize,
    first_keys: Vec<Key>,
    sums: Vec<[u8; BLOCK_SUM_LEN]>,
}

/// Opened sets of this process, by path, with the identity of the file
/// they were read from (a lake can be made again at the same path).
/// Unreadable ones are kept as `None`, so they are reported once.
pub(in crate::lake) type Opened<T> = Mutex<HashMap<PathBuf, (FileId, Option<Arc<T>>)>>;

fn set_cache() -> &'static Opened<KeySet> {
    static CACHE: OnceLock<Opened<KeySet>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Open the set at `span` through `cache`: `parse` runs once per file (a
/// new file at the path, same name or not, is parsed again).
pub(in crate::lake) fn open_cached<T>(
    cache: &Opened<T>,
    span: &Span,
    what: &str,
    parse: impl FnOnce(&Span) -> Option<T>,
) -> Option<Arc<T>> {
    let cached = cache
        .lock()
        .ok()
        .and_then(|c| c.get(&span.path).filter(|(at, _)| *at == span.id).map(|e| e.1.clone()));
    if let Some(set) = cached {
        return set;
    }
    let parsed = parse(span).map(Arc::new);
    if parsed.is_none() {
        tracing::warn!(path = %span.path.display(), "ignoring an unreadable {what}");
    }
    if let Ok(mut c) = cache.lock() {
        c.insert(span.path.clone(), (span.id, parsed.clone()));
    }
    parsed
}

/// The checked index of a set file, as its tail describes it.
pub(in crate::lake) struct Sealed {
    /// The digest of the data files the set describes.
    pub files: [u8; 16],
    /// Its entries (keys or records).
    pub len: usize,
    /// Its blocks.
    pub blocks: usize,
    /// Where the index starts: the size of the blocks.
    pub index_at: usize,
    /// The index entries (`blocks` of `entry` bytes each).
    pub index: Vec<u8>,
}

/// Read the tail of the set at `span`, check its format tag and block
/// size, and read and check the index it covers (`entry` bytes per block).
/// Offsets in the answer are from the start of the set.
pub(in crate::lake) fn read_sealed(
    span: &Span,
    magic: &[u8; 8],
    per_block: usize,
    entry: usize,
) -> Option<Sealed> {
    let mut file = File::open(&span.path).ok()?;
    let size = usize::try_from(span.len).ok()?;
    let tail_at = size.checked_sub(TAIL)?;
    file.seek(SeekFrom::Start(span.base + tail_at as u64)).ok()?;
    let mut tail = [0u8; TAIL];
    file.read_exact(&mut tail).ok()?;
    let (digest, rest) = tail.split_at(16);
    let (count, rest) = rest.split_at(8);
    let (block_len, rest) = rest.split_at(4);
    let (tag, _) = rest.split_at(8);
    if tag != magic || u32::from_le_bytes(block_len.try_into().ok()?) as usize != per_block {
        return None;
    }
    let len = usize::try_from(u64::from_le_bytes(count.try_into().ok()?)).ok()?;
    let blocks = len.div_ceil(per_block);
    let index_at = tail_at.checked_sub(blocks.checked_mul(entry)?)?;
    let mut index = vec![0u8; size - index_at];
    file.seek(SeekFrom::Start(span.base + index_at as u64)).ok()?;
    file.read_exact(&mut index).ok()?;
    let (body, checksum) = index.split_at(index.len() - CHECKSUM_LEN);
    if blake3::hash(body).as_bytes()[..CHECKSUM_LEN] != *checksum {
        return None;
    }
    index.truncate(blocks * entry);
    let mut files = [0u8; 16];
    files.copy_from_slice(digest);
    Some(Sealed { files, len, blocks, index_at, index })
}

impl KeySet {
    /// The key set of a version, if it exists, is intact and describes
    /// exactly `files` (the data files of that version's key filter).
    /// The set is the part of the version's sidecar bundle or, when that
    /// is missing or not believed, the single file of the older layout
    /// (which repair writes).
    pub fn open(table_dir: &Path, version: u64, files: &[String]) -> Option<Arc<KeySet>> {
        let digest = files_digest(files);
        sidecar::spans(table_dir, version, Part::KeySet, set_path(table_dir, version)).find_map(
            |span| {
                open_cached(set_cache(), &span, "key set", KeySet::read_index)
                    .filter(|set| set.files == digest)
            },
        )
    }

    /// Read and check the index and tail of the set at `span`.
    fn read_index(span: &Span) -> Option<KeySet> {
        let sealed = read_sealed(span, MAGIC, BLOCK_KEYS, INDEX_ENTRY)?;
        if sealed.index_at != sealed.len.checked_mul(KEY_LEN)? {
            return None;
        }
        let mut first_keys = Vec::with_capacity(sealed.blocks);
        let mut sums = Vec::with_capacity(sealed.blocks);
        for entry in sealed.index.chunks_exact(INDEX_ENTRY) {
            first_keys.push(Key::from_bytes(entry[..KEY_LEN].try_into().ok()?));
            sums.push(entry[KEY_LEN..].try_into().ok()?);
        }
        Some(KeySet {
            path: span.path.clone(),
            base: span.base,
            files: sealed.files,
            len: sealed.len,
            first_keys,
            sums,
        })
    }

    /// Keys in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// For each of `keys`, whether the set holds it; `None` when a block it
    /// needed could not be read or failed its checksum (the caller then
    /// reads the files instead).
    pub fn contains_each(&self, keys: &[Key]) -> Option<Vec<bool>> {
        let mut out = vec![false; keys.len()];
        let wanted = blocks_wanted(&self.first_keys, keys);
        if wanted.is_empty() {
            return Some(out);
        }
        let file = File::open(&self.path).ok()?;
        let blocks = self.first_keys.len();
        let touched = 1 + wanted.windows(2).filter(|w| w[0].0 != w[1].0).count();
        let mut bytes = Vec::new();
        let mut held: Option<(usize, usize)> = None; // blocks in `bytes`
        if touched as f64 > READ_ALL_ABOVE * blocks as f64 {
            bytes.resize(self.len * KEY_LEN, 0);
            file.read_exact_at(&mut bytes, self.base).ok()?;
            held = Some((0, blocks));
        }
        let mut checked = vec![false; blocks];
        let mut at = 0;
        while at < wanted.len() {
            let first = wanted[at].0;
            if held.is_none_or(|(from, to)| first < from || first >= to) {
                // A run of consecutive wanted blocks, read at once.
                let mut last = first;
                for &(b, _) in &wanted[at..] {
                    if b > last + 1 {
                        break;
                    }
                    last = b;
                }
                let start = first * BLOCK_KEYS * KEY_LEN;
                let end = ((last + 1) * BLOCK_KEYS).min(self.len) * KEY_LEN;
                bytes.resize(end - start, 0);
                file.read_exact_at(&mut bytes, self.base + start as u64).ok()?;
                held = Some((first, last + 1));
            }
            let (from, _) = held?;
            let block_start = (first - from) * BLOCK_KEYS * KEY_LEN;
            let block_len = (BLOCK_KEYS.min(self.len - first * BLOCK_KEYS)) * KEY_LEN;
            let block = bytes.get(block_start..block_start + block_len)?;
            if !checked[first] {
                if block_sum(block) != self.sums[first] {
                    tracing::warn!(path = %self.path.display(), block = first, "a key set block fails its checksum");
                    return None;
                }
                checked[first] = true;
            }
            while at < wanted.len() && wanted[at].0 == first {
                let key = keys[wanted[at].1].as_bytes();
                out[wanted[at].1] = block_holds(block, key);
                at += 1;
            }
        }
        Some(out)
    }
}

/// The block that may hold each of `keys` in a set whose blocks start with
/// `first_keys`, as (block, index of the key), by block; keys below the
/// first block are absent and left out.
pub(in crate::lake) fn blocks_wanted(first_keys: &[Key], keys: &[Key]) -> Vec<(usize, usize)> {
    let mut wanted: Vec<(usize, usize)> = keys
        .iter()
        .enumerate()
        .filter_map(|(i, key)| {
            first_keys.partition_point(|first| first <= key).checked_sub(1).map(|b| (b, i))
        })
        .collect();
    wanted.sort_unstable();
    wanted
}

/// Keys of one version confirmed by one task of [`settle`]: a sorted run
/// of a version's candidate keys, so each task reads its own blocks.
const KEYS_PER_TASK: usize = 1024;

/// Answer from key sets what a lookup plan can: each candidate sidecar whose
/// set opens (intact, for the same files) leaves the plan, and the keys its
/// set holds are returned. What remains in the plan must still be read.
///
/// The keys of every version are confirmed in sorted runs on
/// [`IO_THREADS`](crate::host::IO_THREADS) threads: each confirmation reads
/// a block the page cache may not hold, and a device serves several such
/// reads at once far sooner than one after another (a commit confirming
/// 15,000 ids in a lake of 10M: ~15,000 blocks over 160 MB of sets).
pub fn settle<K: Clone + Sync>(
    table_dir: &Path,
    plan: &mut LookupPlan<K>,
    key_of: impl Fn(&K) -> Key,
) -> Vec<K> {
    /// A candidate whose set opens: its keys sorted, and the index of each
    /// among the candidate's keys; each task confirms one run of them.
    struct Sorted {
        set: Arc<KeySet>,
        keys: Vec<Key>,
        positions: Vec<usize>,
    }
    let mut sorted: Vec<Option<Sorted>> = Vec::new();
    let mut tasks: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for (candidate, candidates) in plan.candidates.iter().enumerate() {
        let Some(set) = KeySet::open(table_dir, candidates.version, &candidates.files) else {
            sorted.push(None);
            continue;
        };
        let mut keys: Vec<(Key, usize)> =
            candidates.keys.iter().enumerate().map(|(i, k)| (key_of(k), i)).collect();
        keys.sort_unstable();
        let n = keys.len();
        tasks.extend(
            (0..n).step_by(KEYS_PER_TASK).map(|at| (candidate, at..n.min(at + KEYS_PER_TASK))),
        );
        let (keys, positions) = keys.into_iter().unzip();
        sorted.push(Some(Sorted { set, keys, positions }));
    }
    let answers = crate::host::on_threads(&tasks, crate::host::IO_THREADS, |(candidate, run)| {
        let sorted = sorted[*candidate].as_ref()?;
        sorted.set.contains_each(&sorted.keys[run.clone()])
    });
    // Per candidate: the indices of its keys the set holds; `None` when its
    // set did not open or a block of it could not be read (the candidate
    // then stays in the plan).
    let mut held: Vec<Option<Vec<usize>>> =
        sorted.iter().map(|s| s.as_ref().map(|_| Vec::new())).collect();
    for ((candidate, run), answer) in tasks.into_iter().zip(answers) {
        let slot = &mut held[candidate];
        match (answer, slot.as_mut(), &sorted[candidate]) {
            (Some(answer), Some(indices), Some(sorted)) => indices.extend(
                sorted.positions[run].iter().zip(answer).filter(|(_, held)| *held).map(|(i, _)| *i),
            ),
            _ => *slot = None,
        }
    }
    let mut present = Vec::new();
    let mut held = held.into_iter();
    plan.candidates.retain(|candidates| match held.next().flatten() {
        Some(mut indices) => {
            indices.sort_unstable();
            present.extend(indices.into_iter().map(|i| candidates.keys[i].clone()));
            false
        }
        None => true,
    });
    present
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;
    use crate::lake::keys::key_filter::Candidates;

    fn key(i: u64) -> Key {
        Key::of_text(&i.to_string())
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_set_answers_exactly_for_keys_inside_below_and_above_its_range() {
        let dir = tempfile::tempdir().expect("temp dir");
        // 1000 keys: three whole blocks and a partial one.
        let held: Vec<Key> = (0..1000).map(key).collect();
        write(dir.path(), 7, &files(&["a.parquet"]), &held).expect("write");
        let set = KeySet::open(dir.path(), 7, &files(&["a.parquet"])).expect("opens");
        assert_eq!(set.len(), 1000);
        let mut sorted = held.clone();
        sorted.sort();
        let mut asked: Vec<Key> = (990..1010).map(key).collect();
        asked.push(sorted[0]);
        asked.push(sorted[999]);
        asked.push(Key::from_bytes([0; 16]));
        asked.push(Key::from_bytes([0xff; 16]));
        let answers = set.contains_each(&asked).expect("readable");
        let expected: Vec<bool> = asked.iter().map(|k| held.contains(k)).collect();
        assert_eq!(answers, expected);
        assert_eq!(answers.iter().filter(|h| **h).count(), 12);
        // Every key, through the path that reads all blocks at once.
        assert!(set.contains_each(&held).expect("readable").iter().all(|h| *h));
    }

    #[test]
    fn a_set_for_other_files_is_not_believed() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), 3, &files(&["a.parquet", "b.parquet"]), &[key(1)]).expect("write");
        assert!(KeySet::open(dir.path(), 3, &files(&["a.parquet"])).is_none());
        assert!(KeySet::open(dir.path(), 3, &files(&["b.parquet", "a.parquet"])).is_none());
        assert!(KeySet::open(dir.path(), 4, &files(&["a.parquet", "b.parquet"])).is_none());
        assert!(KeySet::open(dir.path(), 3, &files(&["a.parquet", "b.parquet"])).is_some());
    }

    #[test]
    fn a_damaged_block_makes_the_set_answer_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let held: Vec<Key> = (0..600).map(key).collect();
        write(dir.path(), 1, &files(&["f"]), &held).expect("write");
        let set = KeySet::open(dir.path(), 1, &files(&["f"])).expect("opens");
        // Flip one bit of the second block, in place (same inode, same size).
        let path = set_path(dir.path(), 1);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[BLOCK_KEYS * KEY_LEN + 5] ^= 1;
        std::fs::write(&path, &bytes).expect("write back");
        let mut sorted = held.clone();
        sorted.sort();
        // A key of the first block still answers; one of the second cannot.
        assert_eq!(set.contains_each(&[sorted[3]]), Some(vec![true]));
        assert_eq!(set.contains_each(&[sorted[BLOCK_KEYS + 3]]), None);
        assert_eq!(set.contains_each(&held), None);
    }

    #[test]
    fn torn_damaged_or_foreign_sets_do_not_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let held: Vec<Key> = (0..300).map(key).collect();
        let whole = encode(&files(&["f"]), &held);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("torn", whole[..whole.len() - 1].to_vec()),
            ("no blocks", whole[BLOCK_KEYS * KEY_LEN..].to_vec()),
            ("empty", Vec::new()),
            ("index bit flipped", {
                let mut b = whole.clone();
                let at = held.len() * KEY_LEN + 2;
                b[at] ^= 0x10;
                b
            }),
            ("another format", {
                let mut b = whole.clone();
                let at = b.len() - CHECKSUM_LEN - 1;
                b[at] = b'9';
                b
            }),
        ];
        for (version, (what, bytes)) in cases.into_iter().enumerate() {
            let path = set_path(dir.path(), version as u64);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(&path, bytes).expect("write");
            assert!(KeySet::open(dir.path(), version as u64, &files(&["f"])).is_none(), "{what}");
        }
    }

    #[test]
    fn settle_answers_what_sets_hold_and_leaves_the_rest_to_be_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) =
            ((0..100).map(key).collect::<Vec<_>>(), (100..200).map(key).collect::<Vec<_>>());
        write(dir.path(), 1, &files(&["a"]), &a).expect("write");
        // Version 2 has no set (written before sets, or lost): read its files.
        let mut plan = LookupPlan {
            uncovered: files(&["foreign"]),
            candidates: vec![
                Candidates { version: 1, files: files(&["a"]), keys: vec![a[5], key(5000)] },
                Candidates { version: 2, files: files(&["b"]), keys: vec![b[1]] },
            ],
        };
        let present = settle(dir.path(), &mut plan, |k| *k);
        assert_eq!(present, vec![a[5]]);
        assert_eq!(plan.candidates.len(), 1);
        assert_eq!(plan.candidates[0].version, 2);
        assert_eq!(plan.uncovered, files(&["foreign"]));
    }

    #[test]
    fn settle_splits_many_keys_into_runs_and_a_damaged_run_keeps_its_version_in_the_plan() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Two versions of 20,000 keys each; 5,000 asked of each (five runs
        // of keys per version), half held.
        let held = |v: u64| (0..20_000).map(|i| key(v * 1_000_000 + i)).collect::<Vec<_>>();
        let (one, two) = (held(1), held(2));
        write(dir.path(), 1, &files(&["a"]), &one).expect("write");
        write(dir.path(), 2, &files(&["b"]), &two).expect("write");
        let asked =
            |held: &[Key], v: u64| -> Vec<Key> {
                (0..5_000)
                    .map(|i| {
                        if i % 2 == 0 {
                            held[i * 3]
                        } else {
                            key(v * 1_000_000 + 500_000 + i as u64)
                        }
                    })
                    .collect()
            };
        let plan = |a: Vec<Key>, b: Vec<Key>| LookupPlan {
            uncovered: Vec::new(),
            candidates: vec![
                Candidates { version: 1, files: files(&["a"]), keys: a },
                Candidates { version: 2, files: files(&["b"]), keys: b },
            ],
        };
        let (ask_one, ask_two) = (asked(&one, 1), asked(&two, 2));
        let mut whole = plan(ask_one.clone(), ask_two.clone());
        let present = settle(dir.path(), &mut whole, |k| *k);
        let expected: Vec<Key> = ask_one
            .iter()
            .chain(&ask_two)
            .filter(|k| one.contains(k) || two.contains(k))
            .copied()
            .collect();
        assert_eq!(present, expected, "in plan order, each held key once");
        assert!(whole.candidates.is_empty());

        // A damaged block in version 2's set: version 1 is still settled,
        // version 2 stays in the plan with all of its keys, none reported.
        let path = set_path(dir.path(), 2);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[40 * BLOCK_KEYS * KEY_LEN + 7] ^= 1;
        std::fs::write(&path, &bytes).expect("write back");
        let mut damaged = plan(ask_one.clone(), ask_two.clone());
        let present = settle(dir.path(), &mut damaged, |k| *k);
        assert_eq!(present, expected[..2_500].to_vec());
        assert_eq!(damaged.candidates.len(), 1);
        assert_eq!(damaged.candidates[0].version, 2);
        assert_eq!(damaged.candidates[0].keys, ask_two);
    }

    proptest! {
        #[test]
        fn a_set_holds_exactly_its_keys(
            held in proptest::collection::vec(0u64..5000, 0..1500),
            asked in proptest::collection::vec(0u64..5000, 1..400),
        ) {
            let dir = tempfile::tempdir().expect("temp dir");
            let held: Vec<Key> = held.into_iter().map(key).collect();
            write(dir.path(), 9, &files(&["f"]), &held).expect("write");
            let set = KeySet::open(dir.path(), 9, &files(&["f"])).expect("opens");
            let distinct: HashSet<Key> = held.iter().copied().collect();
            prop_assert_eq!(set.len(), distinct.len());
            let asked: Vec<Key> = asked.into_iter().map(key).collect();
            let answers = set.contains_each(&asked).expect("readable");
            for (k, held) in asked.iter().zip(answers) {
                prop_assert_eq!(held, distinct.contains(k));
            }
        }
    }
}
