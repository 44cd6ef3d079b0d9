//! Key filters of a lake in an object store.
//!
//! On a store a version's sidecar bundle (see [`sidecar`](super::sidecar))
//! is one object, `<table>/_sluice_keys/{version:020}.side`, put whole: a
//! PUT is atomic, so there is no temporary name and no rename. It is read
//! whole with one GET, and its parts are ranges of bytes in memory.
//!
//! What a store changes is the price of reading many. Every object is a
//! request, tens of milliseconds away in a cloud region, and a process
//! meeting a table for the first time (every `sluice put`, every worker)
//! would read one bundle per version the table ever had: a put's requests
//! would grow with the lake. So the writer of a version also puts a
//! [`pack`](super::pack) when the newest one is [`PACK_EVERY`] versions
//! old: the key filters of every version up to its own whose files are
//! live, in one object. A reader lists `_sluice_keys/` from a little before
//! the head, reads the newest pack and the bundles after it: at most
//! `2 + PACK_EVERY` requests whatever the table's age (and one listing page
//! per 1,000 objects when no pack is near the head: a lake written before
//! packs, or by other writers). A process keeps what it read, and later
//! looks only at versions after the last it looked at.
//!
//! Trust is as on a filesystem. A bundle or pack that fails its checks
//! answers nothing; a version that nothing describes leaves its files
//! uncovered (they are read: slower, never wrong); a filter is used only
//! when every file it names is live, and data file names are unique, so a
//! filter of a lake deleted and made again at the same URL names no live
//! file. A pack that lacks a version (its bundle was put after the pack's
//! writer looked) is mended by the first reader that finds live files
//! uncovered: it lists the folder from a little before the newest pack and
//! reads the bundles it lacks, and the next pack holds them. A process
//! mends at most once every [`PACK_EVERY`] versions (files no bundle will
//! ever describe, written by other tools, would otherwise cost a listing
//! at every look-up).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::{Error, Result};
use crate::lake::io::location::StoreRoot;
use crate::lake::keys::key_filter::{self, KeyFilter};
use crate::lake::keys::pack;
use crate::lake::keys::sidecar::{self, Bundle, KEYS_DIR};
use crate::lake::layout::TableSpec;

/// Versions between packs: a reader meeting a table reads at most this
/// many bundles after the newest pack.
pub(in crate::lake) const PACK_EVERY: u64 = 8;

/// Objects read at once.
const READS_AT_ONCE: usize = 8;

/// The key filters of a table in a store, as far as this process knows
/// them (shared by every handle on the same table).
#[derive(Clone)]
pub(in crate::lake) struct StoreKeys {
    store: Arc<dyn ObjectStore>,
    /// `<lake>/<table>/_sluice_keys`.
    dir: Path,
    /// Where it is, as messages show it.
    shown: String,
    known: Arc<Mutex<Known>>,
}

/// What a process knows of one table's key filters.
#[derive(Default)]
struct Known {
    versions: BTreeMap<u64, Arc<Version>>,
    /// Every bundle up to this version that was there when looked for
    /// has been read (through a pack, or itself).
    looked_through: Option<u64>,
    /// The newest pack read or written.
    newest_pack: Option<u64>,
    /// The head at the last look for bundles packs may lack (see
    /// [`StoreKeys::mend`]).
    mended_at: Option<u64>,
}

/// One version's key filters, as read.
struct Version {
    /// The bundle (whole, or of its filters only when read from a pack).
    bytes: Bytes,
    /// Its filters by column (`""`: the key column), as ranges of `bytes`.
    filters: Vec<(String, Range<usize>)>,
    /// The data files they name.
    files: Vec<String>,
    /// Whether `bytes` holds filters only (read from a pack).
    filters_only: bool,
    decoded: Mutex<HashMap<String, Option<Arc<KeyFilter>>>>,
}

impl Version {
    /// A bundle read or written; `None` when unreadable or without filters.
    fn parse(bytes: Bytes, filters_only: bool) -> Option<Version> {
        let filters = sidecar::filters_in(&bytes)?;
        let (_, first) = filters.first()?;
        let files = key_filter::files_of(&bytes[first.clone()])?;
        Some(Version { bytes, filters, files, filters_only, decoded: Mutex::default() })
    }

    /// The filter of `column` (`None`: the key column), decoded once.
    fn filter(&self, column: Option<&str>) -> Option<Arc<KeyFilter>> {
        let column = column.unwrap_or("");
        if let Some(done) = self.decoded.lock().ok().and_then(|d| d.get(column).cloned()) {
            return done;
        }
        let (_, range) = self.filters.iter().find(|(c, _)| c == column)?;
        let filter = KeyFilter::decode(&self.bytes[range.clone()]).map(Arc::new);
        if let Ok(mut decoded) = self.decoded.lock() {
            decoded.insert(column.to_owned(), filter.clone());
        }
        filter
    }

    /// The bundle a pack keeps of this version.
    fn packed(&self) -> Option<Bytes> {
        if self.filters_only {
            return Some(self.bytes.clone());
        }
        sidecar::filters_only(&self.bytes).map(Bytes::from)
    }

    fn all_live(&self, live: &HashSet<&str>) -> bool {
        !self.files.is_empty() && self.files.iter().all(|f| live.contains(f.as_str()))
    }
}

/// What a listing of `_sluice_keys/` found, by version.
#[derive(Default)]
struct Listing {
    bundles: Vec<u64>,
    packs: Vec<u64>,
}

impl std::fmt::Debug for StoreKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreKeys").field(&self.shown).finish()
    }
}

type ByTable = Mutex<HashMap<String, Arc<Mutex<Known>>>>;

fn by_table() -> &'static ByTable {
    static BY_TABLE: OnceLock<ByTable> = OnceLock::new();
    BY_TABLE.get_or_init(Default::default)
}

impl StoreKeys {
    /// The key filters of the table of `spec` in the lake at `root`.
    pub(in crate::lake) fn of(root: &StoreRoot, spec: &TableSpec) -> StoreKeys {
        let dir = root.object(&format!("{}/{KEYS_DIR}", spec.path));
        let shown = format!("{root}{}/{KEYS_DIR}", spec.path.trim_matches('/'));
        let known = match by_table().lock() {
            Ok(mut tables) => tables.entry(shown.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        };
        StoreKeys { store: root.store().clone(), dir, shown, known }
    }

    /// Put the bundle of `version` (nothing when it is empty), and keep it.
    pub(in crate::lake) async fn put(&self, version: u64, bundle: &Bundle) -> Result<()> {
        if bundle.is_empty() {
            return Ok(());
        }
        let Some(bytes) = bundle.encode() else {
            tracing::warn!(version, "a column name is too long for a sidecar; none written");
            return Ok(());
        };
        let bytes = Bytes::from(bytes);
        let location = self.dir.clone().join(sidecar::bundle_name(version));
        self.store.put(&location, bytes.clone().into()).await.map_err(|source| Error::Store {
            what: format!("writing the key filters of version {version} to {}", self.shown),
            source,
        })?;
        if let Some(parsed) = Version::parse(bytes, false)
            && let Ok(mut known) = self.known.lock()
        {
            known.versions.insert(version, Arc::new(parsed));
        }
        Ok(())
    }

    /// Record the bundle of `version`, just committed: put it, then a pack
    /// if one is due (see [`StoreKeys::pack_if_due`]; `live` gives the
    /// files live at `version`, asked for only then).
    pub(in crate::lake) async fn record(
        &self,
        version: u64,
        bundle: &Bundle,
        live: impl FnOnce() -> Result<Vec<String>>,
    ) -> Result<()> {
        self.put(version, bundle).await?;
        let live = live()?;
        self.pack_if_due(version, &live.iter().map(String::as_str).collect()).await;
        Ok(())
    }

    /// The filters of `column` (`None`: the key column) over `live`, the
    /// files live at version `head`, by version: what a look-up at the
    /// head plans from. Reading only costs speed, so what cannot be read
    /// is logged and left out (its files count as uncovered).
    pub(in crate::lake) async fn filters(
        &self,
        head: u64,
        live: &HashSet<&str>,
        column: Option<&str>,
    ) -> BTreeMap<u64, Arc<KeyFilter>> {
        self.look(head).await;
        if self.lacks_some(head, live) {
            self.mend(head).await;
        }
        self.held(head, Some(live), column)
    }

    /// The filters of `column` this process has read, of versions up to
    /// `head` (only those whose files are all `live`, when given): no
    /// request is made (see [`StoreKeys::look`]).
    pub(in crate::lake) fn held(
        &self,
        head: u64,
        live: Option<&HashSet<&str>>,
        column: Option<&str>,
    ) -> BTreeMap<u64, Arc<KeyFilter>> {
        let Ok(known) = self.known.lock() else { return BTreeMap::new() };
        known
            .versions
            .range(..=head)
            .filter(|(_, v)| live.is_none_or(|live| v.all_live(live)))
            .filter_map(|(version, v)| Some((*version, v.filter(column)?)))
            .collect()
    }

    /// The filter of `column` of `version`, if this process has read it
    /// (see [`StoreKeys::look`]).
    pub(in crate::lake) fn held_filter(
        &self,
        version: u64,
        column: Option<&str>,
    ) -> Option<Arc<KeyFilter>> {
        let version = self.known.lock().ok()?.versions.get(&version)?.clone();
        version.filter(column)
    }

    /// Read what this process lacks of the versions up to `head`: on a
    /// first look, the newest pack and the bundles after it; later, the
    /// bundles of the versions since the last look.
    pub(in crate::lake) async fn look(&self, head: u64) {
        let (from, fresh) = match self.known.lock() {
            Ok(known) => (known.looked_through, known.looked_through.is_none()),
            Err(_) => return,
        };
        if from.is_some_and(|k| k >= head) {
            return;
        }
        if from == head.checked_sub(1) && !fresh {
            self.read_bundles(&[head]).await;
            self.looked_at(head, false);
            return;
        }
        let after = from.map_or(0, |k| k + 1);
        // A first look lists from a little before the head; when no pack
        // is there, the whole folder.
        let window = match from {
            Some(_) => after,
            None => head.saturating_sub(2 * PACK_EVERY),
        };
        let mut listing = self.list(Some(window)).await;
        let mut all = window == 0;
        let pack_in =
            |l: &Listing| l.packs.iter().copied().filter(|p| *p <= head && *p >= after).max();
        if fresh && !all && pack_in(&listing).is_none() {
            listing = self.list(None).await;
            all = true;
        }
        // A later look reads a pack only when it replaces many bundles.
        let pack = pack_in(&listing).filter(|_| fresh || head - after >= PACK_EVERY);
        if let Some(version) = pack {
            self.read_pack(version).await;
        }
        let since = pack.map_or(after, |p| p + 1).max(after);
        let wanted: Vec<u64> =
            listing.bundles.iter().copied().filter(|v| (since..=head).contains(v)).collect();
        self.read_bundles(&wanted).await;
        // Bundles a pack left out were not read: only a listing read
        // bundle by bundle counts as a mend.
        self.looked_at(head, all && pack.is_none());
    }

    fn looked_at(&self, head: u64, mended: bool) {
        if let Ok(mut known) = self.known.lock() {
            known.looked_through = Some(known.looked_through.map_or(head, |k| k.max(head)));
            if mended {
                known.mended_at = Some(known.mended_at.map_or(head, |m| m.max(head)));
            }
        }
    }

    /// Whether some of `live` no version read names, and no mend was made
    /// in the last [`PACK_EVERY`] versions.
    fn lacks_some(&self, head: u64, live: &HashSet<&str>) -> bool {
        let Ok(known) = self.known.lock() else { return false };
        if known.mended_at.is_some_and(|m| head < m + PACK_EVERY) {
            return false;
        }
        let named: HashSet<&str> = known
            .versions
            .range(..=head)
            .flat_map(|(_, v)| v.files.iter().map(String::as_str))
            .collect();
        live.iter().any(|f| !named.contains(f))
    }

    /// List the folder from a little before the newest pack or the last
    /// mend, whichever is older (the whole of it when neither is known), and
    /// read the bundles up to `head` this process lacks. A bundle is missed
    /// only when its version's writer was still putting it (seconds), so
    /// the versions just before are where to look; older versions left out
    /// of a pack named files that were no longer live.
    async fn mend(&self, head: u64) {
        let from = match self.known.lock() {
            Ok(known) => [known.newest_pack, known.mended_at]
                .into_iter()
                .flatten()
                .map(|v| v.saturating_sub(2 * PACK_EVERY))
                .min(),
            Err(_) => return,
        };
        let listing = self.list(from).await;
        let lacking: Vec<u64> = match self.known.lock() {
            Ok(known) => listing
                .bundles
                .iter()
                .copied()
                .filter(|v| *v <= head && !known.versions.contains_key(v))
                .collect(),
            Err(_) => return,
        };
        if !lacking.is_empty() {
            tracing::debug!(keys = %self.shown, versions = lacking.len(), "reading key filters no pack held");
        }
        self.read_bundles(&lacking).await;
        self.looked_at(head, true);
    }

    /// Put a pack at `version` (just committed, its bundle put) when the
    /// newest is [`PACK_EVERY`] versions old or there is none: the filters
    /// of every version up to it whose files are all `live` (the files
    /// live at `version`). A pack only saves readers requests, so a
    /// failure is logged.
    pub(in crate::lake) async fn pack_if_due(&self, version: u64, live: &HashSet<&str>) {
        if version < PACK_EVERY {
            return;
        }
        self.look(version).await;
        if self.lacks_some(version, live) {
            self.mend(version).await;
        }
        let entries: Vec<(u64, Bytes)> = {
            let Ok(known) = self.known.lock() else { return };
            if known.newest_pack.is_some_and(|p| version < p + PACK_EVERY) {
                return;
            }
            known
                .versions
                .range(..=version)
                .filter(|(_, v)| v.all_live(live))
                .filter_map(|(at, v)| Some((*at, v.packed()?)))
                .collect()
        };
        let bytes = pack::encode(entries.iter().map(|(v, b)| (*v, b.as_ref())));
        let location = self.dir.clone().join(pack::name(version));
        match self.store.put(&location, bytes.into()).await {
            Ok(_) => {
                if let Ok(mut known) = self.known.lock() {
                    known.newest_pack = Some(known.newest_pack.map_or(version, |p| p.max(version)));
                }
                tracing::debug!(keys = %self.shown, version, versions = entries.len(), "key filters packed");
            }
            Err(e) => {
                tracing::warn!(keys = %self.shown, version, error = %e, "could not pack key filters")
            }
        }
    }

    /// The bundles and packs in the folder, from version `from` on (all
    /// of them for `None`).
    async fn list(&self, from: Option<u64>) -> Listing {
        let prefix = Some(&self.dir);
        let listed = match from {
            Some(from) if from > 0 => {
                let offset = self.dir.clone().join(format!("{from:020}"));
                self.store.list_with_offset(prefix, &offset)
            }
            _ => self.store.list(prefix),
        };
        let mut listing = Listing::default();
        match listed.try_collect::<Vec<_>>().await {
            Ok(objects) => {
                for object in objects {
                    let Some(name) = object.location.filename() else { continue };
                    if let Some(v) = sidecar::version_of(name) {
                        listing.bundles.push(v);
                    } else if let Some(v) = pack::version_of(name) {
                        listing.packs.push(v);
                    }
                }
            }
            Err(e) => tracing::warn!(keys = %self.shown, error = %e, "could not list key filters"),
        }
        listing
    }

    /// Read the pack of `version` and keep the versions it holds.
    async fn read_pack(&self, version: u64) {
        let Some(bytes) = self.read(&self.dir.clone().join(pack::name(version))).await else {
            return;
        };
        let Some(entries) = pack::decode(&bytes) else {
            tracing::warn!(keys = %self.shown, version, "ignoring an unreadable pack of key filters");
            return;
        };
        let parsed: Vec<(u64, Option<Version>)> =
            entries.into_iter().map(|(v, b)| (v, Version::parse(b, true))).collect();
        if let Ok(mut known) = self.known.lock() {
            for (at, v) in parsed {
                if let Some(v) = v {
                    known.versions.entry(at).or_insert_with(|| Arc::new(v));
                }
            }
            known.newest_pack = Some(known.newest_pack.map_or(version, |p| p.max(version)));
        }
    }

    /// Read the bundles of `versions` (several at once) and keep them.
    async fn read_bundles(&self, versions: &[u64]) {
        let versions: Vec<u64> = match self.known.lock() {
            Ok(known) => {
                versions.iter().copied().filter(|v| !known.versions.contains_key(v)).collect()
            }
            Err(_) => return,
        };
        let read: Vec<(u64, Option<Bytes>)> = futures::stream::iter(versions.iter().copied())
            .map(|v| async move {
                (v, self.read(&self.dir.clone().join(sidecar::bundle_name(v))).await)
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let Ok(mut known) = self.known.lock() else { return };
        for (version, bytes) in read {
            let Some(bytes) = bytes else { continue };
            match Version::parse(bytes, false) {
                Some(parsed) => {
                    known.versions.insert(version, Arc::new(parsed));
                }
                None => {
                    tracing::warn!(keys = %self.shown, version, "ignoring an unreadable sidecar")
                }
            }
        }
    }

    /// An object's bytes; `None` when absent, or unreadable (logged).
    async fn read(&self, location: &Path) -> Option<Bytes> {
        let read = match self.store.get(location).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        match read {
            Ok(bytes) => Some(bytes),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => {
                tracing::warn!(object = %location, error = %e, "could not read key filters");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::io::requests::counted_at;
    use crate::lake::keys::key_filter::Key;
    use crate::lake::keys::sidecar::Part;
    use crate::lake::layout;

    /// A lake root in an in-memory store, counted like a real one.
    fn memory_lake(name: &str) -> (Arc<StoreRoot>, url::Url) {
        let url = url::Url::parse(&format!("memory://keys-{name}/lake/")).unwrap();
        (StoreRoot::in_memory(url.clone()), url)
    }

    fn bundle(file: &str, key: &str) -> Bundle {
        let filter = KeyFilter::new(vec![file.to_owned()], &[Key::of_text(key)]);
        let lookup = KeyFilter::new(vec![file.to_owned()], &[Key::of_text(&format!("{key}-l"))]);
        let mut bundle = Bundle::new();
        bundle
            .part(Part::Filter(None), filter.encode())
            .part(Part::Filter(Some("artifact_id")), lookup.encode());
        bundle
    }

    /// A table in a new in-memory lake whose versions 1 to [`PACK_EVERY`]
    /// (but `missing`) put a bundle for their file `f{version}`.
    async fn written(name: &str, missing: Option<u64>) -> (Arc<StoreRoot>, StoreKeys) {
        let (root, _) = memory_lake(name);
        let writer = StoreKeys::of(&root, &layout::index_table());
        for version in (1..=PACK_EVERY).filter(|v| Some(*v) != missing) {
            writer.put(version, &bundle(&format!("f{version}"), "k")).await.unwrap();
        }
        (root, writer)
    }

    /// The files of versions 1 to [`PACK_EVERY`], but `dead`'s.
    fn files_but(dead: Option<u64>) -> Vec<String> {
        (1..=PACK_EVERY).filter(|v| Some(*v) != dead).map(|v| format!("f{v}")).collect()
    }

    /// A fresh process's view of the same table (nothing known yet).
    fn forget(keys: &StoreKeys) -> StoreKeys {
        StoreKeys { known: Arc::default(), ..keys.clone() }
    }

    #[tokio::test]
    async fn a_fresh_reader_reads_a_pack_and_the_bundles_after_it_whatever_the_tables_age() {
        let (root, url) = memory_lake("age");
        let spec = layout::index_table();
        let writer = StoreKeys::of(&root, &spec);
        let files: Vec<String> = (1..=60).map(|v| format!("part-{v}.parquet")).collect();
        let mut costs = Vec::new();
        for version in 1..=60u64 {
            writer
                .put(version, &bundle(&files[version as usize - 1], &version.to_string()))
                .await
                .unwrap();
            let live: HashSet<&str> =
                files[..version as usize].iter().map(String::as_str).collect();
            writer.pack_if_due(version, &live).await;
            let reader = forget(&writer);
            let before = counted_at(&url);
            let filters = reader.filters(version, &live, None).await;
            costs.push(counted_at(&url).since(&before));
            assert_eq!(filters.len(), version as usize, "every version's filter at {version}");
            assert!(filters[&version].may_contain(Key::of_text(&version.to_string())));
            let lookup = reader.filters(version, &live, Some("artifact_id")).await;
            assert!(lookup[&1].may_contain(Key::of_text("1-l")));
        }
        for (at, cost) in costs.iter().enumerate().skip(PACK_EVERY as usize) {
            assert!(
                cost.list == 1 && cost.get <= 1 + PACK_EVERY,
                "a reader at version {} made {cost}",
                at + 1
            );
        }
    }

    #[tokio::test]
    async fn filters_of_files_no_longer_live_are_left_out_and_packs_hold_only_live_ones() {
        let (_root, writer) = written("live", None).await;
        // Version 3's file was compacted away before the pack.
        let live = files_but(Some(3));
        let live: HashSet<&str> = live.iter().map(String::as_str).collect();
        writer.pack_if_due(PACK_EVERY, &live).await;
        let reader = forget(&writer);
        let filters = reader.filters(PACK_EVERY, &live, None).await;
        assert_eq!(filters.len() as u64, PACK_EVERY - 1);
        assert!(!filters.contains_key(&3));
    }

    #[tokio::test]
    async fn a_bundle_a_pack_missed_is_read_by_the_first_reader_that_finds_its_files_uncovered() {
        let (_root, writer) = written("mend", Some(2)).await;
        let live = files_but(None);
        let live: HashSet<&str> = live.iter().map(String::as_str).collect();
        writer.pack_if_due(PACK_EVERY, &live).await;
        // Version 2's writer was slow: its bundle comes after the pack.
        forget(&writer).put(2, &bundle("f2", "k")).await.unwrap();
        let reader = forget(&writer);
        let filters = reader.filters(PACK_EVERY, &live, None).await;
        assert_eq!(filters.len() as u64, PACK_EVERY, "version 2 read from its own bundle");
    }

    #[tokio::test]
    async fn a_long_lived_reader_mends_again_only_after_the_table_moved_on() {
        use crate::lake::io::requests::counted_at;
        let (root, writer) = written("again", None).await;
        let url = url::Url::parse("memory://keys-again/lake/").unwrap();
        let all: Vec<String> = (1..=2 * PACK_EVERY + 2).map(|v| format!("f{v}")).collect();
        let live = |head: u64| -> HashSet<&str> {
            all[..head as usize].iter().map(String::as_str).collect()
        };
        writer.pack_if_due(PACK_EVERY, &live(PACK_EVERY)).await;
        let reader = forget(&writer);
        assert_eq!(reader.filters(PACK_EVERY, &live(PACK_EVERY), None).await.len(), 8);
        // Version 9's bundle is late: the reader passes it, finds f9
        // uncovered, looks for it (a mend) and does not find it yet.
        let put = |v: u64| {
            let writer = writer.clone();
            async move { writer.put(v, &bundle(&format!("f{v}"), "k")).await.unwrap() }
        };
        put(10).await;
        let filters = reader.filters(10, &live(10), None).await;
        assert!(!filters.contains_key(&9) && filters.contains_key(&10));
        put(9).await;
        put(11).await;
        // One version on: no listing again for the file still uncovered.
        let before = counted_at(&url);
        let filters = reader.filters(11, &live(11), None).await;
        assert!(!filters.contains_key(&9));
        assert_eq!(counted_at(&url).since(&before).list, 0, "no mend at every look-up");
        // Eight versions after the last mend, the next one finds it.
        for v in 12..=2 * PACK_EVERY + 2 {
            put(v).await;
        }
        let head = 2 * PACK_EVERY + 2;
        let filters = reader.filters(head, &live(head), None).await;
        assert_eq!(filters.len() as u64, head, "version 9 read at the next mend");
        drop(root);
    }

    #[tokio::test]
    async fn a_damaged_pack_or_bundle_costs_speed_not_answers() {
        let (root, writer) = written("damaged", None).await;
        let live = files_but(None);
        let live: HashSet<&str> = live.iter().map(String::as_str).collect();
        writer.pack_if_due(PACK_EVERY, &live).await;
        let store = root.store();
        let pack_at = writer.dir.clone().join(pack::name(PACK_EVERY));
        let mut bytes = store.get(&pack_at).await.unwrap().bytes().await.unwrap().to_vec();
        bytes[3] ^= 1;
        store.put(&pack_at, bytes.into()).await.unwrap();
        let side_at = writer.dir.clone().join(sidecar::bundle_name(5));
        store.put(&side_at, b"not a bundle".to_vec().into()).await.unwrap();
        let filters = forget(&writer).filters(PACK_EVERY, &live, None).await;
        let versions: Vec<u64> = filters.keys().copied().collect();
        let expected: Vec<u64> = (1..=PACK_EVERY).filter(|v| *v != 5).collect();
        assert_eq!(versions, expected, "the damaged pack is read around, the bad bundle left out");
    }
}
