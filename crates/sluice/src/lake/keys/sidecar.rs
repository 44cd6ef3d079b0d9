//! One sidecar file per table version.
//!
//! A sluice write leaves, beside each table version, what lets later
//! look-ups skip its data files: a key filter per id column
//! ([`key_filter`](crate::lake::keys::key_filter)), the key set of its key column
//! ([`key_set`](crate::lake::keys::key_set)) and, for the executions table, its result
//! set ([`result_set`](crate::lake::read::result_set)). Written as one file each, they
//! were 11 of the ~25 files a one-execution step commit created (and 4 of a
//! put's 8), and creating a file is most of what a small commit costs the
//! kernel. So a commit writes them together, in one file per version,
//! `<table>/_sluice_keys/{version:020}.side`:
//!
//! ```text
//! parts, back to back    each in its own format, with its own checks
//! directory              per part: kind (u8) · column length (u8) ·
//!                        column (UTF-8) · offset (u64) · length (u64)
//! tail (30 bytes)        directory length (u32) · parts (u16) ·
//!                        format tag (8) · checksum of directory and the
//!                        tail before it (16)
//! ```
//!
//! A part is read where it lies (a key set's blocks one at a time), so a
//! bundle costs a reader one open more than the single file did, and only
//! the first time a process meets it (directories are cached per file).
//! The single files of the older layout (`{v}.keys`, `{v}.{column}.keys`,
//! `{v}.set`, `{v}.results`) are still read, and still written by repair
//! (which adds a missing set beside a version's bundle): readers take a
//! bundle's part first, then the single file. Trust is unchanged: a bundle
//! whose directory fails its checksum answers nothing, and each part is
//! checked as its own format requires, so a damaged bundle only costs
//! look-up speed.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};

/// Sidecar directory inside a table.
pub const KEYS_DIR: &str = "_sluice_keys";

/// What tells one sidecar file from another made later at the same path
/// (a lake can be deleted and made again): inode, size, modification time.
pub type FileId = (u64, u64, u128);

/// Format tag, in the tail.
const MAGIC: &[u8; 8] = b"SLSIDE01";
const CHECKSUM_LEN: usize = 16;
const TAIL: usize = 4 + 2 + 8 + CHECKSUM_LEN;
/// A directory entry's fixed bytes: kind, column length, offset, length.
const ENTRY_FIXED: usize = 1 + 1 + 8 + 8;

/// What a part of a bundle holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// The key filter of the table's key column (`None`) or of a lookup
    /// column.
    Filter(Option<&'a str>),
    /// The key set of the table's key column.
    KeySet,
    /// The result set of a version of the executions table.
    Results,
}

impl Part<'_> {
    fn kind(self) -> u8 {
        match self {
            Part::Filter(_) => 1,
            Part::KeySet => 2,
            Part::Results => 3,
        }
    }

    fn column(&self) -> &str {
        match self {
            Part::Filter(Some(column)) => column,
            _ => "",
        }
    }
}

/// A table's sidecar folder.
pub(in crate::lake) fn keys_dir(table_dir: &Path) -> PathBuf {
    table_dir.join(KEYS_DIR)
}

/// Write one file of `_sluice_keys` whole or not at all: into a temporary
/// name, then renamed, so a reader never sees a torn sidecar.
pub(in crate::lake) fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
}

/// What tells one sidecar file from another at the same path: inode
/// (where there are inodes), size and modification time.
pub(in crate::lake) fn file_id(meta: &std::fs::Metadata) -> FileId {
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let inode = 0;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    (inode, meta.len(), modified)
}

/// The file name of a version's bundle.
pub(in crate::lake) fn bundle_name(version: u64) -> String {
    format!("{version:020}.side")
}

/// The path of a version's bundle.
pub(in crate::lake) fn path(table_dir: &Path, version: u64) -> PathBuf {
    keys_dir(table_dir).join(bundle_name(version))
}

/// The version a bundle's file name stands for (`None`: not a bundle).
pub(in crate::lake) fn version_of(file_name: &str) -> Option<u64> {
    let version = file_name.strip_suffix(".side")?;
    (version.len() == 20).then(|| version.parse().ok()).flatten()
}

/// The parts of one table version, gathered to be written at once.
#[derive(Debug, Default)]
pub struct Bundle {
    parts: Vec<(u8, String, Vec<u8>)>,
}

impl Bundle {
    /// An empty bundle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a part: its bytes, encoded by its own module
    /// ([`KeyFilter::encode`](crate::lake::keys::key_filter::KeyFilter),
    /// [`key_set::encode`](crate::lake::keys::key_set::encode),
    /// [`result_set::encode`](crate::lake::read::result_set::encode)).
    pub fn part(&mut self, part: Part<'_>, bytes: Vec<u8>) -> &mut Self {
        self.parts.push((part.kind(), part.column().to_owned(), bytes));
        self
    }

    /// Whether no part was added.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The bundle's bytes; `None` when a column name is too long for the
    /// directory (255 bytes).
    pub(in crate::lake) fn encode(&self) -> Option<Vec<u8>> {
        let body: usize = self.parts.iter().map(|(_, _, b)| b.len()).sum();
        let mut out = Vec::with_capacity(body + self.parts.len() * 40 + TAIL);
        let mut at = Vec::with_capacity(self.parts.len());
        for (_, _, bytes) in &self.parts {
            at.push(out.len() as u64);
            out.extend_from_slice(bytes);
        }
        let directory_at = out.len();
        for ((kind, column, bytes), offset) in self.parts.iter().zip(at) {
            out.push(*kind);
            out.push(u8::try_from(column.len()).ok()?);
            out.extend_from_slice(column.as_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
        let directory_len = u32::try_from(out.len() - directory_at).ok()?;
        out.extend_from_slice(&directory_len.to_le_bytes());
        out.extend_from_slice(&u16::try_from(self.parts.len()).ok()?.to_le_bytes());
        out.extend_from_slice(MAGIC);
        let checksum = blake3::hash(&out[directory_at..]);
        out.extend_from_slice(&checksum.as_bytes()[..CHECKSUM_LEN]);
        Some(out)
    }

    /// Write the bundle of `version` (whole or not at all, by a rename).
    /// Nothing is written when it is empty.
    pub fn write(&self, table_dir: &Path, version: u64) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let Some(bytes) = self.encode() else {
            tracing::warn!(version, "a column name is too long for a sidecar; none written");
            return Ok(());
        };
        write_file(&keys_dir(table_dir), &bundle_name(version), &bytes)
    }
}

/// Where a part lies: in which file, from which byte, how many bytes, and
/// what tells that file from another made later at the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The file the part lies in (a bundle, or a single file).
    pub path: PathBuf,
    /// Where the part starts in it.
    pub base: u64,
    /// The part's length in bytes.
    pub len: u64,
    /// The file's identity (inode, size, modification time) when located.
    pub id: FileId,
}

impl Span {
    /// A whole single file, if it exists.
    pub(in crate::lake) fn whole(path: PathBuf) -> Option<Span> {
        let meta = std::fs::metadata(&path).ok()?;
        Some(Span { id: file_id(&meta), len: meta.len(), base: 0, path })
    }

    /// The part's bytes, read whole.
    pub fn read(&self) -> Option<Vec<u8>> {
        let file = File::open(&self.path).ok()?;
        let mut bytes = vec![0u8; usize::try_from(self.len).ok()?];
        file.read_exact_at(&mut bytes, self.base).ok()?;
        Some(bytes)
    }
}

/// A bundle's directory: (kind, column) → (offset, length).
type Directory = HashMap<(u8, String), (u64, u64)>;

/// Directories read by this process, by bundle path, with the file's
/// identity when read; unreadable ones as `None`, reported once.
type Directories = Mutex<HashMap<PathBuf, (FileId, Option<Arc<Directory>>)>>;

fn directories() -> &'static Directories {
    static CACHE: OnceLock<Directories> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The part of a version's bundle, if the bundle exists, its directory is
/// intact and it holds that part.
pub fn locate(table_dir: &Path, version: u64, part: Part<'_>) -> Option<Span> {
    locate_at(&path(table_dir, version), part)
}

/// The part of the bundle at `path`.
pub(in crate::lake) fn locate_at(path: &Path, part: Part<'_>) -> Option<Span> {
    let meta = std::fs::metadata(path).ok()?;
    let id = file_id(&meta);
    let directory = directory(path, id, meta.len(), None)?;
    let &(offset, len) = directory.get(&(part.kind(), part.column().to_owned()))?;
    Some(Span { path: path.to_owned(), base: offset, len, id })
}

/// The bytes of one part of the bundle at `path`, at most `max` of them,
/// read through one open file (tests read parts whole with it). `Ok(None)` when the bundle is unreadable or
/// holds no such part (as [`locate_at`]), `Err` when the part cannot be
/// read.
#[cfg(test)]
fn read_part_upto(
    path: &Path,
    part: Part<'_>,
    max: u64,
) -> std::result::Result<Option<Vec<u8>>, ()> {
    let Some((file, base, len)) = open_part(path, part) else { return Ok(None) };
    let mut bytes = vec![0u8; usize::try_from(len.min(max)).map_err(drop)?];
    file.read_exact_at(&mut bytes, base).map_err(drop)?;
    Ok(Some(bytes))
}

/// The bundle at `path` opened, with where one part lies in it (offset,
/// length): for readers that read a large part in pieces. `None` when the
/// bundle, its directory or the part cannot be found (as [`locate_at`]).
pub(in crate::lake) fn open_part(path: &Path, part: Part<'_>) -> Option<(File, u64, u64)> {
    let file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let directory = directory(path, file_id(&meta), meta.len(), Some(&file))?;
    let &(base, len) = directory.get(&(part.kind(), part.column().to_owned()))?;
    Some((file, base, len))
}

/// Where a version's part may lie, in the order readers believe them: its
/// bundle's part, then `single`, its file of the older layout (each looked
/// for only when the one before did not serve).
pub(in crate::lake) fn spans<'a>(
    table_dir: &'a Path,
    version: u64,
    part: Part<'a>,
    single: PathBuf,
) -> impl Iterator<Item = Span> + 'a {
    std::iter::once_with(move || locate(table_dir, version, part))
        .chain(std::iter::once_with(move || Span::whole(single)))
        .flatten()
}

/// The directory of the bundle at `path`, from this process's cache or
/// read and checked (through `open`, the bundle already opened, if given).
fn directory(path: &Path, id: FileId, size: u64, open: Option<&File>) -> Option<Arc<Directory>> {
    let cached = directories()
        .lock()
        .ok()
        .and_then(|c| c.get(path).filter(|(at, _)| *at == id).map(|e| e.1.clone()));
    if let Some(directory) = cached {
        return directory;
    }
    let read = match open {
        Some(file) => read_directory(file, size),
        None => File::open(path).ok().and_then(|file| read_directory(&file, size)),
    }
    .map(Arc::new);
    if read.is_none() {
        tracing::warn!(path = %path.display(), "ignoring an unreadable sidecar");
    }
    if let Ok(mut c) = directories().lock() {
        c.insert(path.to_owned(), (id, read.clone()));
    }
    read
}

/// Read and check the tail and directory of a bundle of `size` bytes.
fn read_directory(file: &File, size: u64) -> Option<Directory> {
    directory_with(size, |at, buf| file.read_exact_at(buf, at).ok())
}

/// Check the tail and directory of a bundle of `size` bytes, reading its
/// ranges through `read` (offset, buffer to fill).
fn directory_with(size: u64, read: impl Fn(u64, &mut [u8]) -> Option<()>) -> Option<Directory> {
    let tail_at = size.checked_sub(TAIL as u64)?;
    let mut tail = [0u8; TAIL];
    read(tail_at, &mut tail)?;
    let directory_len = u32::from_le_bytes(tail[..4].try_into().ok()?) as u64;
    let parts = u16::from_le_bytes(tail[4..6].try_into().ok()?) as usize;
    if &tail[6..14] != MAGIC {
        return None;
    }
    let directory_at = tail_at.checked_sub(directory_len)?;
    let mut checked = vec![0u8; usize::try_from(directory_len).ok()? + TAIL - CHECKSUM_LEN];
    read(directory_at, &mut checked)?;
    if blake3::hash(&checked).as_bytes()[..CHECKSUM_LEN] != tail[TAIL - CHECKSUM_LEN..] {
        return None;
    }
    let mut entries = &checked[..checked.len() - (TAIL - CHECKSUM_LEN)];
    let mut out = Directory::with_capacity(parts);
    for _ in 0..parts {
        let kind = *entries.first()?;
        let column_len = *entries.get(1)? as usize;
        let column = std::str::from_utf8(entries.get(2..2 + column_len)?).ok()?.to_owned();
        let rest = entries.get(2 + column_len..ENTRY_FIXED + column_len)?;
        let offset = u64::from_le_bytes(rest[..8].try_into().ok()?);
        let len = u64::from_le_bytes(rest[8..].try_into().ok()?);
        if offset.checked_add(len)? > directory_at {
            return None;
        }
        out.insert((kind, column), (offset, len));
        entries = &entries[ENTRY_FIXED + column_len..];
    }
    entries.is_empty().then_some(out)
}

/// The key filters of a bundle held in memory (a store's bundles are read
/// whole), by column (`""`: the table's key column), each as the range of
/// `bytes` it lies in; `None` when the bundle is unreadable.
pub(in crate::lake) fn filters_in(bytes: &[u8]) -> Option<Vec<(String, std::ops::Range<usize>)>> {
    let directory = directory_with(bytes.len() as u64, |at, buf| {
        let at = usize::try_from(at).ok()?;
        buf.copy_from_slice(bytes.get(at..at.checked_add(buf.len())?)?);
        Some(())
    })?;
    let mut filters: Vec<(String, std::ops::Range<usize>)> = directory
        .into_iter()
        .filter(|((kind, _), _)| *kind == Part::Filter(None).kind())
        .map(|((_, column), (offset, len))| {
            let at = usize::try_from(offset).ok()?;
            Some((column, at..at + usize::try_from(len).ok()?))
        })
        .collect::<Option<_>>()?;
    filters.sort_by(|a, b| a.0.cmp(&b.0));
    Some(filters)
}

/// A bundle of only the key filters of the bundle `bytes` (what a pack
/// keeps of each version); `None` when it is unreadable or holds none.
pub(in crate::lake) fn filters_only(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut bundle = Bundle::new();
    for (column, range) in filters_in(bytes)? {
        let part = Part::Filter((!column.is_empty()).then_some(column.as_str()));
        bundle.part(part, bytes[range].to_vec());
    }
    if bundle.is_empty() { None } else { bundle.encode() }
}

/// The first filter of the bundle at `path`, by column (`None` when it is
/// unreadable or holds none). Every filter of a version names the same
/// files: what vacuum asks of a bundle to tell whether it is stale.
pub fn first_filter(path: &Path) -> Option<Span> {
    let meta = std::fs::metadata(path).ok()?;
    let id = file_id(&meta);
    let directory = directory(path, id, meta.len(), None)?;
    let (_, &(base, len)) = directory
        .iter()
        .filter(|((kind, _), _)| *kind == Part::Filter(None).kind())
        .min_by(|a, b| a.0.cmp(b.0))?;
    Some(Span { path: path.to_owned(), base, len, id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::keys::key_filter::{self, Key, KeyFilter};
    use crate::lake::keys::key_set;

    fn keys(range: std::ops::Range<u64>) -> Vec<Key> {
        range.map(|i| Key::of_text(&i.to_string())).collect()
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn written(dir: &Path, version: u64) -> Vec<Key> {
        let keys = keys(0..1000);
        let lookup = keys[..10].to_vec();
        let mut bundle = Bundle::new();
        bundle
            .part(Part::Filter(None), KeyFilter::new(files(&["a", "b"]), &keys).encode())
            .part(Part::KeySet, key_set::encode(&files(&["a", "b"]), &keys))
            .part(
                Part::Filter(Some("artifact_id")),
                KeyFilter::new(files(&["a", "b"]), &lookup).encode(),
            );
        bundle.write(dir, version).expect("written");
        keys
    }

    #[test]
    fn a_bundle_holds_each_part_where_its_directory_says() {
        let dir = tempfile::tempdir().unwrap();
        let keys = written(dir.path(), 7);
        let names: Vec<String> = std::fs::read_dir(keys_dir(dir.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["00000000000000000007.side".to_owned()], "one file, no leftovers");
        assert_eq!(version_of(&names[0]), Some(7));

        let filter = locate(dir.path(), 7, Part::Filter(None)).and_then(|s| s.read()).unwrap();
        let filter = KeyFilter::decode(&filter).expect("the key filter part decodes");
        assert!(keys.iter().all(|k| filter.may_contain(*k)));
        let lookup = locate(dir.path(), 7, Part::Filter(Some("artifact_id")))
            .and_then(|s| s.read())
            .and_then(|b| KeyFilter::decode(&b))
            .expect("the lookup column's filter decodes");
        assert!(keys[..10].iter().all(|k| lookup.may_contain(*k)));
        assert!(locate(dir.path(), 7, Part::Results).is_none(), "no result set was added");
        assert!(locate(dir.path(), 7, Part::Filter(Some("other"))).is_none());
        assert!(locate(dir.path(), 8, Part::KeySet).is_none(), "no bundle for version 8");
        // Read through one open file: the same bytes, the same absences.
        let at = path(dir.path(), 7);
        for part in [Part::Filter(None), Part::Filter(Some("artifact_id")), Part::KeySet] {
            let located = locate_at(&at, part).and_then(|s| s.read());
            assert_eq!(read_part_upto(&at, part, u64::MAX), Ok(located.clone()));
            assert!(located.is_some());
        }
        assert_eq!(read_part_upto(&at, Part::Results, u64::MAX), Ok(None));
        assert_eq!(read_part_upto(&path(dir.path(), 8), Part::KeySet, u64::MAX), Ok(None));

        let set = super::super::key_set::KeySet::open(dir.path(), 7, &files(&["a", "b"]))
            .expect("the key set part opens");
        let probe = [keys[3], keys[999], Key::of_text("absent")];
        assert_eq!(set.contains_each(&probe), Some(vec![true, true, false]));
        let named = first_filter(&path(dir.path(), 7)).and_then(|s| s.read());
        assert_eq!(named.and_then(|b| key_filter::files_of(&b)), Some(files(&["a", "b"])));
    }

    #[test]
    fn bundles_and_single_files_of_the_older_layout_are_read_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let old = KeyFilter::new(files(&["old"]), &keys(0..5));
        key_filter::write(dir.path(), 1, &old).unwrap();
        super::super::key_set::write(dir.path(), 1, &files(&["old"]), &keys(0..5)).unwrap();
        written(dir.path(), 2);
        let all = key_filter::read_all(dir.path());
        assert_eq!(all.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(all[&1].files, files(&["old"]));
        assert_eq!(all[&2].files, files(&["a", "b"]));
        assert_eq!(key_filter::files_all(dir.path()).len(), 2);
        let by_column = key_filter::read_column(dir.path(), "artifact_id");
        assert_eq!(by_column.keys().copied().collect::<Vec<_>>(), vec![2]);
        assert!(key_filter::read_column(dir.path(), "other").is_empty());
        assert!(key_filter::read_one(dir.path(), 1, None).is_some());
        assert!(key_filter::read_one(dir.path(), 2, Some("artifact_id")).is_some());
        let set = super::super::key_set::KeySet::open(dir.path(), 1, &files(&["old"]));
        assert_eq!(set.and_then(|s| s.contains_each(&keys(4..6))), Some(vec![true, false]));

        // A bundle whose key set fails is read around through a single set
        // file beside it (what repair writes).
        damage(dir.path(), 2, Part::KeySet);
        assert!(super::super::key_set::KeySet::open(dir.path(), 2, &files(&["a", "b"])).is_none());
        super::super::key_set::write(dir.path(), 2, &files(&["a", "b"]), &keys(0..1000)).unwrap();
        let set = super::super::key_set::KeySet::open(dir.path(), 2, &files(&["a", "b"]));
        assert_eq!(set.and_then(|s| s.contains_each(&keys(999..1001))), Some(vec![true, false]));
    }

    /// Flip the last byte of a part (inside the checksum every part ends with).
    fn damage(dir: &Path, version: u64, part: Part<'_>) {
        let span = locate(dir, version, part).unwrap();
        let mut bytes = std::fs::read(&span.path).unwrap();
        bytes[(span.base + span.len - 1) as usize] ^= 1;
        std::fs::write(&span.path, bytes).unwrap();
    }

    #[test]
    fn a_damaged_or_torn_bundle_answers_nothing() {
        for damage in ["directory", "tail", "torn", "empty"] {
            let dir = tempfile::tempdir().unwrap();
            written(dir.path(), 3);
            let path = path(dir.path(), 3);
            let mut bytes = std::fs::read(&path).unwrap();
            let len = bytes.len();
            match damage {
                "directory" => bytes[len - TAIL - 5] ^= 1,
                "tail" => bytes[len - TAIL + 8] ^= 1,
                "torn" => bytes.truncate(len - 7),
                _ => bytes.clear(),
            }
            std::fs::write(&path, bytes).unwrap();
            assert!(locate(dir.path(), 3, Part::Filter(None)).is_none(), "{damage}");
            assert!(locate(dir.path(), 3, Part::KeySet).is_none(), "{damage}");
            assert!(first_filter(&path).is_none(), "{damage}");
            assert_eq!(read_part_upto(&path, Part::Filter(None), u64::MAX), Ok(None), "{damage}");
        }
    }

    #[test]
    fn a_damaged_part_is_refused_by_its_own_checks() {
        let dir = tempfile::tempdir().unwrap();
        let keys = written(dir.path(), 2);
        let span = locate(dir.path(), 2, Part::KeySet).unwrap();
        let path = path(dir.path(), 2);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[span.base as usize + 20] ^= 1; // inside the set's first block
        std::fs::write(&path, bytes).unwrap();
        let set = super::super::key_set::KeySet::open(dir.path(), 2, &files(&["a", "b"]))
            .expect("the set's index is intact");
        assert_eq!(set.contains_each(&keys), None, "its damaged block is not believed");
        assert!(
            locate(dir.path(), 2, Part::Filter(None))
                .and_then(|s| s.read())
                .and_then(|b| KeyFilter::decode(&b))
                .is_some(),
            "the other parts still answer"
        );
    }
}
