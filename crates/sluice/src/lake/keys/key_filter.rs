//! Key filters: de-duplication against a large table without reading its keys.
//!
//! Content ids are uniformly random, so no file layout lets a lookup of many
//! new ids skip files by min/max statistics: every file's range covers almost
//! the whole id space. Instead, every sluice write to a content table or the
//! index leaves a small sidecar next to the table, holding a Bloom filter of
//! the ids that version added and the data files that hold them: a part of
//! the version's bundle, `<table>/_sluice_keys/{version:020}.side` (see
//! [`sidecar`](crate::lake::keys::sidecar)), or in the older layout a file of its own,
//! `{version:020}.keys`.
//!
//! To find which of K incoming ids a table already has:
//!
//! 1. list the table's active files;
//! 2. probe each id against each sidecar whose files are all still active
//!    (K × sidecars hash probes, in memory);
//! 3. read ids only from the files of sidecars that answered "maybe", looking
//!    only for the ids that hit, plus every active file no sidecar covers
//!    (written by another tool, compacted, or a write that died before its
//!    sidecar), looking for all ids.
//!
//! New ids almost never hit (false-positive rate about 2 in 10⁷), so the cost of a commit
//! follows the number of sidecars, not the number of rows. A missing or
//! unreadable sidecar only makes a lookup slower, never wrong: its files count
//! as uncovered. Delta readers and vacuum ignore `_`-prefixed directories.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::buffer::{MutableBuffer, ScalarBuffer};

use crate::artifact::ArtifactId;
use crate::lake::keys::sidecar::{self, Part, keys_dir};

pub use crate::lake::keys::sidecar::KEYS_DIR;

/// Format tags. A sidecar's tag says how its probes are placed: `SLKEYS05`
/// (written now) by a multiply-shift of each probe hash *mixed*;
/// `SLKEYS04` (read still) by a multiply-shift of the plain probe hash
/// `h1 + i·h2`, `SLKEYS03` (read still) by its 64-bit modulo. Unmixed, the
/// probes of a key form an arithmetic progression over the filter's bits,
/// which for a small filter (a commit of one key: 64 bits) folds onto a
/// few bits for about one key in a hundred: such a key looked "maybe
/// present" in about one small sidecar in 2,500, so a run of single-row
/// commits read files for nothing on most of its look-ups. Mixed probes
/// are independent: 1 in 10¹¹ for a one-key sidecar. Older tags
/// (`SLKEYS01`: 10 bits, 7 probes; `SLKEYS02`: no checksum) read as
/// unreadable: their files count as uncovered, slower but never wrong.
const MAGIC: &[u8; 8] = b"SLKEYS05";
const MAGIC_V4: &[u8; 8] = b"SLKEYS04";
const MAGIC_V3: &[u8; 8] = b"SLKEYS03";

/// Bytes of the BLAKE3 checksum that ends every sidecar.
const CHECKSUM_LEN: usize = 16;

/// Bits per key and probes: 32 and 22 give about 2 false positives in ten
/// million keys. A look-up probes every wanted key against every sidecar
/// (an execution-cache check: 100k specs × one sidecar per commit), so the
/// expected number of files opened for nothing is keys × sidecars × this
/// rate: at 10⁻⁵ (24 bits, 16 probes, `SLKEYS03`) a check of 100k specs
/// opened most files of the table; at this rate about one in fifty.
/// A key that is absent stops at its first unset bit (about half are set),
/// so probing costs two memory reads per key and sidecar, not 22.
const BITS_PER_KEY: usize = 32;
const PROBES: u32 = 22;
/// `SLKEYS03`'s probes.
const PROBES_V3: u32 = 16;

/// How a sidecar places its probes (by format tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    /// `SLKEYS03`: `(h1 + i·h2) mod m`, 16 probes.
    Modulo,
    /// `SLKEYS04`: the high 64 bits of `(h1 + i·h2) × m`, 22 probes.
    MultiplyShift,
    /// `SLKEYS05`: the high 64 bits of `mix(h1 + i·h2) × m`, 22 probes.
    Mixed,
}

impl Scheme {
    fn probes(self) -> u32 {
        match self {
            Scheme::Modulo => PROBES_V3,
            Scheme::MultiplyShift | Scheme::Mixed => PROBES,
        }
    }

    /// The bit of probe `i` of a key (see [`Key::hashes`]) in a filter of
    /// `words` words.
    fn position(self, words: usize, (h1, h2): (u64, u64), i: u32) -> usize {
        let h = h1.wrapping_add(u64::from(i).wrapping_mul(h2));
        let m = (words * 64) as u64;
        match self {
            Scheme::Modulo => (h % m) as usize,
            // Maps a uniform 64-bit hash onto 0..m without a division.
            Scheme::MultiplyShift => ((u128::from(h) * u128::from(m)) >> 64) as usize,
            Scheme::Mixed => ((u128::from(mix(h)) * u128::from(m)) >> 64) as usize,
        }
    }
}

/// A bijective 64-bit finalizer (SplitMix64's): every input bit affects
/// every output bit, so consecutive probe hashes land independently.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 16 bytes a key filter hashes: an artifact id as it is (ids are
/// already uniform hashes), any other key text (an execution run id) by its
/// BLAKE3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key([u8; 16]);

impl Key {
    /// The key of an arbitrary text value.
    pub fn of_text(text: &str) -> Key {
        let hash = blake3::hash(text.as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&hash.as_bytes()[..16]);
        Key(bytes)
    }

    /// The key's bytes (its order is the order of [`crate::lake::keys::key_set`]).
    pub(crate) fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The key of these bytes.
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Key {
        Key(bytes)
    }

    /// The two 64-bit hashes a filter's probes are made of (keys are
    /// uniform hashes: their halves, the second made odd).
    pub(crate) fn hashes(&self) -> (u64, u64) {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&self.0[..8]);
        b.copy_from_slice(&self.0[8..]);
        (u64::from_le_bytes(a), u64::from_le_bytes(b) | 1)
    }

    /// The key of a value of a look-up column: an artifact id as it is, any
    /// other text (an execution spec id) by its BLAKE3.
    pub fn of_value(value: &str) -> Key {
        value.parse::<ArtifactId>().map_or_else(|_| Key::of_text(value), Key::from)
    }
}

impl From<&ArtifactId> for Key {
    fn from(id: &ArtifactId) -> Key {
        Key(*id.as_bytes())
    }
}

impl From<ArtifactId> for Key {
    fn from(id: ArtifactId) -> Key {
        Key(*id.as_bytes())
    }
}

/// Key filters of a table, by the version that wrote each.
pub type ByVersion = BTreeMap<u64, Arc<KeyFilter>>;

/// A Bloom filter over the keys one table version added, with the files
/// that hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFilter {
    /// Table data files (relative paths, as in the Delta log).
    pub files: Vec<String>,
    /// The bits, 64 to a word (shared, not copied, when a filter is cloned).
    bits: ScalarBuffer<u64>,
    scheme: Scheme,
}

impl KeyFilter {
    /// A filter of `keys` for `files`.
    pub fn new<K: Into<Key> + Copy>(files: Vec<String>, keys: &[K]) -> Self {
        Self::build(files, keys, Scheme::Mixed)
    }

    fn build<K: Into<Key> + Copy>(files: Vec<String>, keys: &[K], scheme: Scheme) -> Self {
        let words = (keys.len() * BITS_PER_KEY).div_ceil(64).max(1);
        let mut bits = vec![0u64; words];
        for key in keys {
            let hashes = (*key).into().hashes();
            for i in 0..scheme.probes() {
                let bit = scheme.position(words, hashes, i);
                bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        KeyFilter { files, bits: bits.into(), scheme }
    }

    fn probes(&self) -> u32 {
        self.scheme.probes()
    }

    /// The bit of probe `i` of a key (see [`Key::hashes`]).
    fn position(&self, hashes: (u64, u64), i: u32) -> usize {
        self.scheme.position(self.bits.len(), hashes, i)
    }

    fn is_set(&self, bit: usize) -> bool {
        self.bits[bit / 64] & (1 << (bit % 64)) != 0
    }

    fn positions(&self, key: &Key) -> impl Iterator<Item = usize> + use<'_> {
        let hashes = key.hashes();
        (0..self.probes()).map(move |i| self.position(hashes, i))
    }

    /// Of `alive` (indices into `hashes`), keep those whose key may be in
    /// the filter. Probe by probe over all keys, without a branch per key:
    /// the loads of one probe are independent, so the processor overlaps
    /// their cache misses, where testing key by key waits for each (a check
    /// of 100k keys against 100 sidecars of 100k keys: 255 → 85 ms).
    pub fn retain_candidates(&self, hashes: &[(u64, u64)], alive: &mut Vec<u32>) {
        for i in 0..self.probes() {
            let mut kept = 0;
            for j in 0..alive.len() {
                let k = alive[j];
                let hit = self.is_set(self.position(hashes[k as usize], i));
                alive[kept] = k;
                kept += usize::from(hit);
            }
            alive.truncate(kept);
            if alive.is_empty() {
                return;
            }
        }
    }

    /// The filter's bits when it is one word placed by the current scheme
    /// (a commit of one or two keys): such filters are all probed at the
    /// same bits for a key (see [`KeyFilter::one_word_mask`]).
    pub(crate) fn one_word(&self) -> Option<u64> {
        match (self.scheme, self.bits.as_ref()) {
            (Scheme::Mixed, [word]) => Some(*word),
            _ => None,
        }
    }

    /// The bits a key sets in a one-word filter of the current scheme: such
    /// a filter may hold the key only if all of them are set.
    pub(crate) fn one_word_mask(key: &Key) -> u64 {
        let one = KeyFilter { files: Vec::new(), bits: vec![0].into(), scheme: Scheme::Mixed };
        one.positions(key).fold(0, |mask, bit| mask | 1 << bit)
    }

    /// Whether the key may be in the filter (false: certainly not).
    pub fn may_contain(&self, key: impl Into<Key>) -> bool {
        let key = key.into();
        self.positions(&key).all(|bit| self.is_set(bit))
    }

    /// The filter's bytes, as a sidecar holds them.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.bits.len() * 8 + CHECKSUM_LEN);
        out.extend_from_slice(match self.scheme {
            Scheme::Modulo => MAGIC_V3,
            Scheme::MultiplyShift => MAGIC_V4,
            Scheme::Mixed => MAGIC,
        });
        out.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for f in &self.files {
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
            out.extend_from_slice(f.as_bytes());
        }
        out.extend_from_slice(&(self.bits.len() as u32).to_le_bytes());
        for w in self.bits.iter() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let checksum = blake3::hash(&out);
        out.extend_from_slice(&checksum.as_bytes()[..CHECKSUM_LEN]);
        out
    }

    /// Parse a sidecar; `None` for anything that is not a whole, intact
    /// sidecar of this format (a flipped bit fails the checksum).
    pub(in crate::lake) fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, checksum) = bytes.split_at_checked(bytes.len().checked_sub(CHECKSUM_LEN)?)?;
        if blake3::hash(body).as_bytes()[..CHECKSUM_LEN] != *checksum {
            return None;
        }
        let header = Header::parse(body)?;
        let words = body.get(header.bits_at..)?;
        if words.len() != header.words.checked_mul(8)? {
            return None;
        }
        // One pass over the words (a filter of 10M keys is 5M of them).
        let bits: Vec<u64> = words
            .chunks_exact(8)
            .map(|w| {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                u64::from_le_bytes(a)
            })
            .collect();
        Some(KeyFilter { files: header.files, bits: bits.into(), scheme: header.scheme })
    }

    /// Read and check the filter lying at `base..base + len` in `file`: its
    /// head, then its bits read straight into the words the filter keeps,
    /// the checksum computed over both. Reading a large filter whole and
    /// decoding a copy of it took a second buffer of its size, whose fresh
    /// pages cost as much as the read (40 MB at 10M keys: ~50 → ~30 ms).
    pub(in crate::lake) fn read_at(file: &File, base: u64, len: u64) -> Option<Self> {
        let mut head = vec![0u8; usize::try_from(len.min(HEAD_BYTES)).ok()?];
        file.read_exact_at(&mut head, base).ok()?;
        if len <= HEAD_BYTES {
            return Self::decode(&head);
        }
        let header = Header::parse(&head).filter(|_| cfg!(target_endian = "little"));
        let Some(header) = header else {
            // A head that does not reach the bits (tens of thousands of
            // file names), or words to be swapped: read whole.
            let mut bytes = vec![0u8; usize::try_from(len).ok()?];
            file.read_exact_at(&mut bytes, base).ok()?;
            return Self::decode(&bytes);
        };
        let bits_len = u64::try_from(header.words.checked_mul(8)?).ok()?;
        let bits_at = u64::try_from(header.bits_at).ok()?;
        if bits_at.checked_add(bits_len)?.checked_add(CHECKSUM_LEN as u64)? != len {
            return None;
        }
        let mut words = MutableBuffer::from(vec![0u64; header.words]);
        file.read_exact_at(words.as_slice_mut(), base + bits_at).ok()?;
        let mut checksum = [0u8; CHECKSUM_LEN];
        file.read_exact_at(&mut checksum, base + len - CHECKSUM_LEN as u64).ok()?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(&head[..header.bits_at]);
        hasher.update(words.as_slice());
        if hasher.finalize().as_bytes()[..CHECKSUM_LEN] != checksum {
            return None;
        }
        Some(KeyFilter {
            files: header.files,
            bits: ScalarBuffer::from(words),
            scheme: header.scheme,
        })
    }
}

/// What precedes a filter's bits: its format, its data files and the
/// number of its words, and where those start.
struct Header {
    scheme: Scheme,
    files: Vec<String>,
    words: usize,
    bits_at: usize,
}

impl Header {
    /// The header at the start of `bytes` (unchecked; `None` when `bytes`
    /// ends before it does, or it is not one, or the filter has no bits).
    fn parse(bytes: &[u8]) -> Option<Header> {
        let (scheme, rest) = scheme_of(bytes)?;
        let (files, mut rest) = file_list(rest)?;
        let words = u32_next(&mut rest)?;
        (words > 0).then_some(Header { scheme, files, words, bits_at: bytes.len() - rest.len() })
    }
}

/// The scheme a filter's format tag names, and the bytes after the tag.
fn scheme_of(bytes: &[u8]) -> Option<(Scheme, &[u8])> {
    [(MAGIC, Scheme::Mixed), (MAGIC_V4, Scheme::MultiplyShift), (MAGIC_V3, Scheme::Modulo)]
        .into_iter()
        .find_map(|(magic, scheme)| Some((scheme, bytes.strip_prefix(magic.as_slice())?)))
}

/// The little-endian `u32` `rest` starts with, as a length; `rest` moves on.
fn u32_next(rest: &mut &[u8]) -> Option<usize> {
    let (head, tail) = rest.split_at_checked(4)?;
    *rest = tail;
    Some(u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize)
}

/// A filter's list of data files (a count, then each name by its length),
/// and what follows it.
fn file_list(mut rest: &[u8]) -> Option<(Vec<String>, &[u8])> {
    let n = u32_next(&mut rest)?;
    let mut files = Vec::with_capacity(n.min(1 << 12));
    for _ in 0..n {
        let len = u32_next(&mut rest)?;
        let (name, tail) = rest.split_at_checked(len)?;
        files.push(String::from_utf8(name.to_vec()).ok()?);
        rest = tail;
    }
    Some((files, rest))
}

/// Bytes of a filter's head read to learn its data files before its bits:
/// first [`SHORT_HEAD`] (a commit's filter names one file), then up to
/// this (a compaction's names its ~100 files in a few KiB). After a
/// compaction a fresh process reads the head of every earlier commit's
/// filter (thousands), which read whole at up to 64 KiB were as many bytes
/// as the compaction's own filter.
const HEAD_BYTES: u64 = 64 << 10;
const SHORT_HEAD: u64 = 4 << 10;

/// The data files a filter names, from the head of its bytes, unchecked
/// (the checksum at its end covers it whole): only ever used to *skip* a
/// filter whose files are not all live, which is never wrong — a skipped
/// filter's files count as uncovered — while a filter that is read is
/// checked whole as before. `None` when the head does not hold the list.
fn files_in_head(bytes: &[u8]) -> Option<Vec<String>> {
    let (_, rest) = scheme_of(bytes)?;
    file_list(rest).map(|(files, _)| files)
}

/// The data files a sidecar's bytes describe (`None` if unreadable).
pub fn files_of(bytes: &[u8]) -> Option<Vec<String>> {
    KeyFilter::decode(bytes).map(|f| f.files)
}

/// The file name of a sidecar: `{version}.keys` for the table's key
/// column, `{version}.{column}.keys` for a lookup column.
fn sidecar_name(version: u64, column: Option<&str>) -> String {
    match column {
        None => format!("{version:020}.keys"),
        Some(column) => format!("{version:020}.{column}.keys"),
    }
}

/// Write the key filter of a table version in the older layout, a file of
/// its own (sluice writes a version's sidecars as one bundle now; lakes
/// written before hold these, and the readers' tests make them).
#[cfg(test)]
pub fn write(table_dir: &Path, version: u64, filter: &KeyFilter) -> crate::error::Result<()> {
    sidecar::write_file(&keys_dir(table_dir), &sidecar_name(version, None), &filter.encode())
}

/// Parsed sidecars of this process, by path (and, for a version's bundle,
/// the column whose filter it is), with the inode number they
/// had when parsed (a sidecar is written once, by a rename, but a lake can
/// be deleted and made again at the same path). The inode comes with the
/// directory listing, so a cached sidecar costs no `stat`. Should a new
/// sidecar reuse an old one's inode, the stale filter names files of the
/// old lake, and [`plan`] ignores a filter unless every file it names is
/// active: slower, never wrong. Unreadable ones are remembered as `None` so
/// they are reported once.
type SidecarCache = HashMap<(PathBuf, Option<String>), (u64, Option<Arc<KeyFilter>>)>;

fn sidecar_cache() -> &'static Mutex<SidecarCache> {
    static CACHE: OnceLock<Mutex<SidecarCache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Every readable sidecar of a table, by version. Sidecars are parsed once
/// per process (a worker looking up inputs unit after unit pays only a
/// directory listing).
pub fn read_all(table_dir: &Path) -> BTreeMap<u64, Arc<KeyFilter>> {
    read_sidecars(table_dir, None, None)
}

/// [`read_all`] without the filters some of whose files are not `live`:
/// those no look-up may use (it reads the files of a filter whose files
/// are not all live), and after a compaction they are nearly all of them
/// (a lake of 2,000 commits compacted: 2,007 of 2,008, 40 MB per table at
/// 10M keys). Each such filter's head is read once per process, to learn
/// its files; its bits are not.
pub fn read_live(table_dir: &Path, live: &HashSet<&str>) -> BTreeMap<u64, Arc<KeyFilter>> {
    read_sidecars(table_dir, None, Some(live))
}

/// Where [`retire_dead`] moves sidecars, inside `_sluice_keys`.
pub const RETIRED_DIR: &str = "retired";

/// Move out of the way (into `_sluice_keys/retired/`) every sidecar file of
/// the versions whose key filter names only files that are not `live`: a
/// compaction leaves one such version per earlier commit (thousands), and
/// every fresh process that opens the table read each one's head to learn
/// that it covers nothing live — as many files opened as the table had
/// commits. Nothing at the head needs them; a look-up at an older version
/// finds their files uncovered and reads their ids instead (slower, never
/// wrong), and vacuum removes them after the retention. A version whose
/// filter cannot be read, or names no file, is left. Returns how many
/// files were moved; a file that cannot be moved is left with a warning.
pub fn retire_dead(table_dir: &Path, live: &HashSet<&str>) -> usize {
    let dead: BTreeSet<u64> = sidecars_of(table_dir, None)
        .into_iter()
        .filter(|listed| {
            listed.head_files(None).is_some_and(|files| {
                !files.is_empty() && files.iter().all(|f| !live.contains(f.as_str()))
            })
        })
        .map(|listed| listed.version)
        .collect();
    if dead.is_empty() {
        return 0;
    }
    let keys = keys_dir(table_dir);
    let retired = keys.join(RETIRED_DIR);
    if let Err(e) = std::fs::create_dir_all(&retired) {
        tracing::warn!(path = %retired.display(), error = %e, "could not retire key filters");
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(&keys) else { return 0 };
    let mut moved = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let version = name.to_str().and_then(|n| n.get(..20)).and_then(|v| v.parse::<u64>().ok());
        if !version.is_some_and(|v| dead.contains(&v)) || !entry.path().is_file() {
            continue;
        }
        match std::fs::rename(entry.path(), retired.join(&name)) {
            Ok(()) => moved += 1,
            Err(e) => {
                tracing::warn!(path = %entry.path().display(), error = %e, "could not retire a sidecar")
            }
        }
    }
    moved
}

/// The data files each readable sidecar of a table's key column describes,
/// by version. Read one at a time and not cached: for whole-lake checks
/// that need the file lists, not the filters (at 100M keys the filters of
/// one table are hundreds of MB).
pub fn files_all(table_dir: &Path) -> BTreeMap<u64, Vec<String>> {
    sidecars_of(table_dir, None)
        .into_iter()
        .filter_map(|listed| Some((listed.version, listed.parse(None).ok()??.files)))
        .collect()
}

/// The filter of one version, of the table's key column (`None`) or of a
/// lookup column: the part of the version's sidecar bundle, else its single
/// file of the older layout; `None` when absent or unreadable (its files
/// then count as uncovered).
pub fn read_one(table_dir: &Path, version: u64, column: Option<&str>) -> Option<Arc<KeyFilter>> {
    let single = keys_dir(table_dir).join(sidecar_name(version, column));
    sidecar::spans(table_dir, version, Part::Filter(column), single)
        .find_map(|span| KeyFilter::read_at(&File::open(&span.path).ok()?, span.base, span.len))
        .map(Arc::new)
}

/// A file of `_sluice_keys` that may hold a filter of the column asked
/// for: its single file of the older layout, or a version's bundle.
struct Listed {
    version: u64,
    path: PathBuf,
    /// What tells this file from another later at the same path.
    stamp: Option<u64>,
    bundle: bool,
}

impl Listed {
    /// The data files the filter of `column` in this file names, from its
    /// head (see [`files_in_head`]).
    fn head_files(&self, column: Option<&str>) -> Option<Vec<String>> {
        let (file, base, len) = self.open(column)?;
        let head = |max: u64| {
            let mut head = vec![0u8; usize::try_from(len.min(max)).ok()?];
            file.read_exact_at(&mut head, base).ok()?;
            Some(head)
        };
        files_in_head(&head(SHORT_HEAD)?)
            .or_else(|| (len > SHORT_HEAD).then(|| files_in_head(&head(HEAD_BYTES)?)).flatten())
    }

    /// This file opened, with where the filter of `column` lies in it
    /// (offset, length); `None` when it is a bundle without that part, or
    /// the file cannot be opened.
    fn open(&self, column: Option<&str>) -> Option<(File, u64, u64)> {
        if self.bundle {
            return sidecar::open_part(&self.path, Part::Filter(column));
        }
        let file = File::open(&self.path).ok()?;
        let len = file.metadata().ok()?.len();
        Some((file, 0, len))
    }

    /// The filter of `column` this file holds: `Ok(None)` when it is a
    /// bundle without that part (or whose directory is unreadable, which
    /// the bundle reports itself), `Err` when the filter is unreadable.
    fn parse(&self, column: Option<&str>) -> std::result::Result<Option<KeyFilter>, ()> {
        match self.open(column) {
            Some((file, base, len)) => KeyFilter::read_at(&file, base, len).map(Some).ok_or(()),
            None if self.bundle => Ok(None),
            None => Err(()),
        }
    }
}

/// The files of a table's `_sluice_keys` that may hold a filter of its key
/// column (`None`) or of one lookup column, with their versions.
fn sidecars_of(table_dir: &Path, column: Option<&str>) -> Vec<Listed> {
    let suffix = match column {
        None => ".keys".to_owned(),
        Some(c) => format!(".{c}.keys"),
    };
    let Ok(entries) = std::fs::read_dir(keys_dir(table_dir)) else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let (version, bundle) = match name.strip_suffix(&suffix).map(str::parse::<u64>) {
                Some(Ok(version)) => (version, false),
                _ => (sidecar::version_of(&name)?, true),
            };
            Some(Listed { version, path: entry.path(), stamp: identity(&entry), bundle })
        })
        .collect()
}

/// Every readable sidecar of one lookup column of a table, by version.
pub fn read_column(table_dir: &Path, column: &str) -> BTreeMap<u64, Arc<KeyFilter>> {
    read_sidecars(table_dir, Some(column), None)
}

/// The files of filters found not all live, by sidecar and identity: a
/// later look-up skips them without reading their heads again, unless
/// their files are live again (a restore).
type DeadCache = HashMap<(PathBuf, Option<String>), (u64, Vec<String>)>;

fn dead_cache() -> &'static Mutex<DeadCache> {
    static CACHE: OnceLock<Mutex<DeadCache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn read_sidecars(
    table_dir: &Path,
    column: Option<&str>,
    live: Option<&HashSet<&str>>,
) -> BTreeMap<u64, Arc<KeyFilter>> {
    let all_live =
        |files: &[String]| live.is_none_or(|l| files.iter().all(|f| l.contains(f.as_str())));
    let mut out = BTreeMap::new();
    let mut unparsed = Vec::new();
    for listed in sidecars_of(table_dir, column) {
        let Some(stamp) = listed.stamp else { continue };
        let key = (listed.path.clone(), listed.bundle.then(|| column.unwrap_or("").to_owned()));
        let cached = sidecar_cache()
            .lock()
            .ok()
            .and_then(|c| c.get(&key).filter(|(at, _)| *at == stamp).map(|e| e.1.clone()));
        match cached {
            Some(Some(filter)) => {
                out.insert(listed.version, filter);
            }
            Some(None) => {}
            None => {
                let dead = live.is_some()
                    && dead_cache().lock().ok().is_some_and(|c| {
                        c.get(&key).is_some_and(|(at, files)| *at == stamp && !all_live(files))
                    });
                if !dead {
                    unparsed.push((listed, key, stamp));
                }
            }
        }
    }
    // A process's first look at a large table parses hundreds of MB of
    // filters (checksum and copy): on every core. With `live`, a filter
    // whose head names a file that is not live is left unparsed.
    let parsed = crate::host::on_cores(&unparsed, |(listed, _, _)| {
        if live.is_some()
            && let Some(files) = listed.head_files(column)
            && !all_live(&files)
        {
            return Err(Some(files));
        }
        listed.parse(column).map_err(|()| None)
    });
    let mut cache = sidecar_cache().lock().ok();
    for ((listed, key, stamp), filter) in unparsed.into_iter().zip(parsed) {
        let filter = match filter {
            Ok(filter) => filter.map(Arc::new),
            Err(Some(files)) => {
                if let Ok(mut dead) = dead_cache().lock() {
                    dead.insert(key, (stamp, files));
                }
                continue;
            }
            Err(None) => {
                tracing::warn!(path = %listed.path.display(), "ignoring an unreadable key filter");
                None
            }
        };
        if let Some(filter) = &filter {
            out.insert(listed.version, filter.clone());
        }
        if let Some(cache) = cache.as_mut() {
            cache.insert(key, (stamp, filter));
        }
    }
    out
}

/// What tells one sidecar file from another at the same path: its inode
/// number, from the directory listing.
#[cfg(unix)]
fn identity(entry: &std::fs::DirEntry) -> Option<u64> {
    Some(std::os::unix::fs::DirEntryExt::ino(entry))
}

/// What tells one sidecar file from another at the same path (no inode
/// numbers here: a hash of size and modification time).
#[cfg(not(unix))]
fn identity(entry: &std::fs::DirEntry) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = entry.metadata().ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (meta.len(), meta.modified().ok()).hash(&mut h);
    Some(h.finish())
}

/// The data files a Delta version added, from its actions.
pub fn added_files(actions: &[deltalake::kernel::Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            deltalake::kernel::Action::Add(add) => Some(add.path.clone()),
            _ => None,
        })
        .collect()
}

/// Plan of a lookup: which files to read for which keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupPlan<K> {
    /// Files no sidecar covers: read them for every key.
    pub uncovered: Vec<String>,
    /// Sidecars that may hold some keys: their files, and the keys that hit.
    pub candidates: Vec<Candidates<K>>,
}

/// The keys one sidecar may hold, and the files to read for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates<K> {
    /// The table version the sidecar describes.
    pub version: u64,
    /// Its data files.
    pub files: Vec<String>,
    /// The keys its filter may hold.
    pub keys: Vec<K>,
}

/// Probes (keys × live sidecars) above which a plan probes its sidecars on
/// every core: 100k specs against 120 versions is 12M probes (~300 ms on
/// one core); a step commit of one run is a handful.
const PROBES_ON_CORES: usize = 200_000;

/// Decide which files must be read to look up `keys`.
pub fn plan<K: Clone + Send + Sync>(
    active: &[String],
    filters: &BTreeMap<u64, Arc<KeyFilter>>,
    keys: &[K],
    key_of: impl Fn(&K) -> Key,
) -> LookupPlan<K> {
    Planner::new(active, filters).plan(keys, key_of)
}

/// What every plan over one table version shares: the filters that still
/// describe active files only, and the active files none of them covers.
#[derive(Debug, Clone, Default)]
pub struct Planner {
    live: Vec<(u64, Arc<KeyFilter>)>,
    uncovered: Vec<String>,
}

impl Planner {
    /// The planner of a version with `active` files and sidecar `filters`.
    pub fn new(active: &[String], filters: &BTreeMap<u64, Arc<KeyFilter>>) -> Self {
        let active_set: BTreeSet<&str> = active.iter().map(String::as_str).collect();
        // A sidecar counts only while every file it describes is active.
        let live: Vec<(u64, Arc<KeyFilter>)> = filters
            .iter()
            .filter(|(_, f)| {
                !f.files.is_empty() && f.files.iter().all(|file| active_set.contains(file.as_str()))
            })
            .map(|(v, f)| (*v, f.clone()))
            .collect();
        let covered: BTreeSet<&str> =
            live.iter().flat_map(|(_, f)| f.files.iter().map(String::as_str)).collect();
        let uncovered = active.iter().filter(|f| !covered.contains(f.as_str())).cloned().collect();
        Planner { live, uncovered }
    }

    /// Active files no filter covers.
    pub fn uncovered(&self) -> &[String] {
        &self.uncovered
    }

    /// Which files must be read to look up `keys`.
    pub fn plan<K: Clone + Send + Sync>(
        &self,
        keys: &[K],
        key_of: impl Fn(&K) -> Key,
    ) -> LookupPlan<K> {
        let hashes: Vec<(u64, u64)> = keys.iter().map(|k| key_of(k).hashes()).collect();
        let probe = |(version, filter): &(u64, Arc<KeyFilter>)| {
            let mut alive: Vec<u32> = (0..keys.len() as u32).collect();
            filter.retain_candidates(&hashes, &mut alive);
            let hits: Vec<K> = alive.iter().map(|&i| keys[i as usize].clone()).collect();
            (!hits.is_empty()).then(|| Candidates {
                version: *version,
                files: filter.files.clone(),
                keys: hits,
            })
        };
        let candidates: Vec<Option<Candidates<K>>> =
            if keys.len().saturating_mul(self.live.len()) >= PROBES_ON_CORES {
                crate::host::on_cores(&self.live, probe)
            } else {
                self.live.iter().map(probe).collect()
            };
        LookupPlan {
            uncovered: self.uncovered.clone(),
            candidates: candidates.into_iter().flatten().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> ArtifactId {
        ArtifactId::compute("t", &i.to_le_bytes())
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let ids: Vec<_> = (0..5000).map(id).collect();
        let f = KeyFilter::new(vec!["a.parquet".into()], &ids);
        assert!(ids.iter().all(|i| f.may_contain(i)));
        let false_positives = (5000..55000).filter(|i| f.may_contain(id(*i))).count();
        assert!(false_positives < 10, "{false_positives} of 50000 (expected ~1)");
        assert_eq!(KeyFilter::decode(&f.encode()), Some(f));
    }

    #[test]
    fn false_positives_are_rare_enough_for_a_hundred_thousand_keys() {
        let ids: Vec<_> = (0..100_000).map(id).collect();
        let f = KeyFilter::new(vec!["a.parquet".into()], &ids);
        let false_positives = (100_000..1_100_000).filter(|i| f.may_contain(id(*i))).count();
        // About 0.2 expected in a million absent keys.
        assert!(false_positives <= 5, "{false_positives} of 1000000");
    }

    #[test]
    fn sidecars_of_the_previous_formats_still_answer() {
        let ids: Vec<_> = (0..2000).map(id).collect();
        let new = KeyFilter::new(vec!["a.parquet".into()], &ids);
        assert!(new.encode().starts_with(MAGIC));
        for (scheme, magic) in [(Scheme::Modulo, MAGIC_V3), (Scheme::MultiplyShift, MAGIC_V4)] {
            let old = KeyFilter::build(vec!["a.parquet".into()], &ids, scheme);
            let bytes = old.encode();
            assert!(bytes.starts_with(magic));
            let read = KeyFilter::decode(&bytes).unwrap();
            assert_eq!(read, old);
            assert!(ids.iter().all(|i| read.may_contain(i)));
            assert_ne!(new.bits, old.bits, "the schemes place probes differently");
        }
    }

    #[test]
    fn a_one_word_mask_answers_as_the_probes_do() {
        for i in 0..500 {
            let f = KeyFilter::new(vec!["f".into()], &[id(i), id(i + 7)]);
            let word = f.one_word().expect("two keys fit one word");
            for k in [id(i), id(i + 7), id(i + 1), id(i + 1000)] {
                let mask = KeyFilter::one_word_mask(&Key::from(k));
                assert_eq!(word & mask == mask, f.may_contain(k));
            }
        }
        let large = KeyFilter::new(vec!["f".into()], &(0..10).map(id).collect::<Vec<_>>());
        assert_eq!(large.one_word(), None);
    }

    #[test]
    fn one_key_sidecars_almost_never_answer_maybe_for_another_key() {
        // A run of single-row commits leaves one 64-bit sidecar per commit;
        // every look-up probes all of them. 2,000 sidecars × 2,000 absent
        // keys: about 10⁻⁷ false positives expected with mixed probes; the
        // unmixed `SLKEYS04` placement gave about one per 2,500 probes.
        let count = |scheme: Scheme| {
            let filters: Vec<KeyFilter> =
                (0..2000).map(|i| KeyFilter::build(vec!["f".into()], &[id(i)], scheme)).collect();
            let absent: Vec<Key> = (2000..4000).map(|i| Key::from(id(i))).collect();
            filters.iter().map(|f| absent.iter().filter(|k| f.may_contain(**k)).count()).sum()
        };
        let mixed: usize = count(Scheme::Mixed);
        assert!(mixed <= 1, "{mixed} false positives in 4,000,000 probes");
        let unmixed: usize = count(Scheme::MultiplyShift);
        assert!(unmixed > 100, "the old placement's weakness: {unmixed}");
    }

    #[test]
    fn cached_sidecars_are_reread_when_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let first = KeyFilter::new(vec!["a".into()], &[id(1)]);
        write(dir.path(), 4, &first).unwrap();
        assert_eq!(*read_all(dir.path())[&4], first);
        assert_eq!(*read_all(dir.path())[&4], first, "served from the cache");
        // The lake is made again at the same path: a new sidecar, same version.
        let second =
            KeyFilter::new(vec!["b".into(), "c".into()], &(10..400).map(id).collect::<Vec<_>>());
        write(dir.path(), 4, &second).unwrap();
        assert_eq!(*read_all(dir.path())[&4], second);
    }

    #[test]
    fn read_live_leaves_out_filters_naming_a_file_that_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let one = KeyFilter::new(names(&["a"]), &[id(1)]);
        let two = KeyFilter::new(names(&["b", "c"]), &(10..400).map(id).collect::<Vec<_>>());
        // Version 1 in the single-file layout, version 2 in a bundle.
        write(dir.path(), 1, &one).unwrap();
        let mut bundle = sidecar::Bundle::new();
        bundle.part(Part::Filter(None), two.encode());
        bundle.write(dir.path(), 2).unwrap();
        // A filter torn after its file list: its head names live files,
        // so it is read whole, and its checksum refuses it.
        let mut torn = KeyFilter::new(names(&["d"]), &[id(5)]).encode();
        torn.truncate(torn.len() - 3);
        std::fs::write(keys_dir(dir.path()).join(sidecar_name(3, None)), torn).unwrap();

        let live = |n: &[&'static str]| n.iter().copied().collect::<HashSet<&str>>();
        let read = read_live(dir.path(), &live(&["a", "c", "d"]));
        assert_eq!(read.keys().copied().collect::<Vec<_>>(), vec![1], "b is gone: 2 left out");
        assert_eq!(*read[&1], one);
        // Again (from the caches), then with b live again (a restore).
        assert_eq!(read_live(dir.path(), &live(&["a", "c", "d"])).len(), 1);
        let read = read_live(dir.path(), &live(&["a", "b", "c", "d"]));
        assert_eq!(read.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(*read[&2], two);
        assert_eq!(read_all(dir.path()).len(), 2);
        // Heads: what the list says, or nothing for what is not a filter.
        assert_eq!(files_in_head(&two.encode()[..40]), Some(names(&["b", "c"])));
        assert_eq!(files_in_head(&two.encode()[..20]), None, "the list is cut off");
        assert_eq!(files_in_head(b"SLKEYS99\x01\0\0\0\x01\0\0\0a"), None);
        // A list longer than the short head (a compaction's) is read from
        // the longer one.
        let long: Vec<String> = (0..200).map(|i| format!("p=1/part-{i:04}-{:032}", 0)).collect();
        let four = KeyFilter::new(long.clone(), &(500..600).map(id).collect::<Vec<_>>());
        let mut bundle = sidecar::Bundle::new();
        bundle.part(Part::Filter(None), four.encode());
        bundle.write(dir.path(), 4).unwrap();
        let listed = sidecars_of(dir.path(), None).into_iter().find(|l| l.version == 4).unwrap();
        assert!(four.encode().len() as u64 > SHORT_HEAD + 2000);
        assert_eq!(listed.head_files(None), Some(long));
        assert!(!read_live(dir.path(), &live(&["a", "c", "d"])).contains_key(&4));
    }

    #[test]
    fn plan_reads_only_what_may_hold_the_ids() {
        let old: Vec<_> = (0..100).map(id).collect();
        let mut filters = BTreeMap::new();
        filters.insert(1, Arc::new(KeyFilter::new(vec!["f1".into()], &old[..50])));
        filters.insert(2, Arc::new(KeyFilter::new(vec!["f2".into()], &old[50..])));
        filters.insert(3, Arc::new(KeyFilter::new(vec!["gone".into()], &old[..10]))); // compacted away
        let active = vec!["f1".to_owned(), "f2".to_owned(), "foreign".to_owned()];
        let wanted = vec![old[3], id(1000)];
        let p = plan(&active, &filters, &wanted, |id| Key::from(id));
        assert_eq!(p.uncovered, vec!["foreign".to_owned()]);
        // The filter holding old[3] answers "maybe"; a sidecar whose file was
        // compacted away is never used (its ids may be anywhere now).
        assert!(
            p.candidates.iter().any(|c| c.version == 1
                && c.files == ["f1".to_owned()]
                && c.keys.contains(&old[3]))
        );
        assert!(p.candidates.iter().all(|c| c.files != ["gone".to_owned()]));
        assert!(p.candidates.len() <= 2);
    }

    #[test]
    fn a_plan_probed_on_every_core_is_the_plan_probed_on_one() {
        // 40 sidecars of 500 ids each; 6000 wanted ids (240k probes: above
        // the bound), of which every tenth is held somewhere.
        let held: Vec<_> = (0..20_000).map(id).collect();
        let mut filters = BTreeMap::new();
        for (v, chunk) in held.chunks(500).enumerate() {
            let files = vec![format!("f{v}")];
            filters.insert(v as u64, Arc::new(KeyFilter::new(files, chunk)));
        }
        let active: Vec<String> = (0..40).map(|v| format!("f{v}")).collect();
        let wanted: Vec<_> =
            (0..6000u32).map(|i| id(if i % 10 == 0 { i } else { 100_000 + i })).collect();
        assert!(wanted.len() * filters.len() >= PROBES_ON_CORES);
        let parallel = plan(&active, &filters, &wanted, |id| Key::from(id));
        // The same plan, sidecar by sidecar, below the bound.
        let mut serial = Vec::new();
        for (version, filter) in &filters {
            let one = BTreeMap::from([(*version, filter.clone())]);
            serial.extend(plan(&active, &one, &wanted, |id| Key::from(id)).candidates);
        }
        assert_eq!(parallel.candidates, serial);
        assert!(parallel.uncovered.is_empty());
        let found: usize = parallel.candidates.iter().map(|c| c.keys.len()).sum();
        assert!((600..610).contains(&found), "{found} candidates for 600 held ids");
    }

    /// Only versions whose filter names files and none of them live are
    /// retired, with every sidecar file of the version; a filter with a
    /// live file, or one that cannot be read, stays where look-ups find it.
    #[test]
    fn retiring_moves_the_sidecars_of_versions_that_cover_nothing_live() {
        let dir = tempfile::tempdir().unwrap();
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let bundle = |version: u64, files: &[&str]| {
            let mut bundle = sidecar::Bundle::new();
            bundle.part(
                Part::Filter(None),
                KeyFilter::new(names(files), &[id(version as u32)]).encode(),
            );
            bundle.write(dir.path(), version).unwrap();
        };
        bundle(1, &["a"]);
        bundle(2, &["b", "c"]);
        // Version 3 in the older layout: its filter, a lookup column's and
        // its key set, all files of their own.
        write(dir.path(), 3, &KeyFilter::new(names(&["d"]), &[id(3)])).unwrap();
        let keys = keys_dir(dir.path());
        std::fs::write(keys.join(sidecar_name(3, Some("name"))), b"x").unwrap();
        std::fs::write(keys.join(format!("{:020}.set", 3)), b"x").unwrap();
        std::fs::write(keys.join(format!("{:020}.side", 4)), b"not a bundle").unwrap();
        let live: HashSet<&str> = ["c"].into_iter().collect();
        assert_eq!(retire_dead(dir.path(), &live), 4, "1's bundle and 3's three files");
        let mut left: Vec<String> = std::fs::read_dir(&keys)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let expected = [format!("{:020}.side", 2), format!("{:020}.side", 4), RETIRED_DIR.into()];
        assert_eq!(left, expected);
        assert_eq!(std::fs::read_dir(keys.join(RETIRED_DIR)).unwrap().count(), 4);
        assert_eq!(read_all(dir.path()).keys().copied().collect::<Vec<_>>(), vec![2]);
        // Again: nothing more to move.
        assert_eq!(retire_dead(dir.path(), &live), 0);
    }

    /// A filter read in place from a file — past its head, with a file list
    /// longer than the head, and within one head — is the filter decoded
    /// from its bytes; damage to its header, its bits or its checksum, or a
    /// span of the wrong length, reads as unreadable.
    #[test]
    fn a_filter_read_in_place_is_the_filter_decoded_and_as_strict() {
        let ids: Vec<_> = (0..20_000).map(id).collect();
        let many: Vec<String> =
            (0..3000).map(|i| format!("p=x/part-{i:05}-{:024}.parquet", 0)).collect();
        let cases = [
            ("past its head", KeyFilter::new(vec!["a.parquet".into()], &ids)),
            ("a long file list", KeyFilter::new(many, &ids)),
            ("within its head", KeyFilter::new(vec!["a.parquet".into()], &ids[..100])),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (case, filter) in cases {
            let bytes = filter.encode();
            let len = bytes.len() as u64;
            let path = dir.path().join("bundle");
            let write = |bytes: &[u8]| {
                let mut framed = b"before".to_vec();
                framed.extend_from_slice(bytes);
                framed.extend_from_slice(b"after");
                std::fs::write(&path, framed).unwrap();
                File::open(&path).unwrap()
            };
            let read = KeyFilter::read_at(&write(&bytes), 6, len);
            assert_eq!(read.as_ref(), Some(&filter), "{case}");
            assert!(ids[..100].iter().all(|i| read.as_ref().unwrap().may_contain(i)), "{case}");
            let file = write(&bytes);
            assert!(KeyFilter::read_at(&file, 6, len - 1).is_none(), "{case}: short span");
            assert!(KeyFilter::read_at(&file, 6, len + 1).is_none(), "{case}: long span");
            // A flipped bit in the header, the first and last words, the
            // checksum.
            let header_end = bytes.len() - CHECKSUM_LEN - filter.bits.len() * 8;
            for at in
                [0, 9, header_end - 1, header_end, bytes.len() - CHECKSUM_LEN - 1, bytes.len() - 1]
            {
                let mut bad = bytes.clone();
                bad[at] ^= 0x10;
                assert!(KeyFilter::read_at(&write(&bad), 6, len).is_none(), "{case}: flip at {at}");
            }
        }
    }

    #[test]
    fn a_flipped_bit_makes_a_sidecar_unreadable() {
        let ids: Vec<_> = (0..100).map(id).collect();
        let good = KeyFilter::new(vec!["f.parquet".into()], &ids).encode();
        assert!(KeyFilter::decode(&good).is_some());
        // Every single-bit flip anywhere (header, file names, bits, checksum)
        // is caught: a damaged filter could answer "certainly not" for a key
        // the table holds, which would duplicate it.
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                assert!(KeyFilter::decode(&bad).is_none(), "flip at byte {byte} bit {bit}");
            }
        }
        assert!(KeyFilter::decode(&good[..good.len() - 1]).is_none(), "truncated");
    }

    #[test]
    fn text_keys_are_stable_and_distinct() {
        assert_eq!(Key::of_text("run-1"), Key::of_text("run-1"));
        assert_ne!(Key::of_text("run-1"), Key::of_text("run-2"));
        let f = KeyFilter::new(vec!["e".into()], &[Key::of_text("run-1")]);
        assert!(f.may_contain(Key::of_text("run-1")));
    }

    #[test]
    fn garbage_sidecars_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(KEYS_DIR)).unwrap();
        std::fs::write(dir.path().join(KEYS_DIR).join("00000000000000000001.keys"), b"junk")
            .unwrap();
        write(dir.path(), 2, &KeyFilter::new(vec!["x".into()], &[id(1)])).unwrap();
        let all = read_all(dir.path());
        assert_eq!(all.keys().copied().collect::<Vec<_>>(), vec![2]);
    }
}
