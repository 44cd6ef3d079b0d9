//! Which live files of a table the key filters of one column cover.
//!
//! A [`Tip`](crate::lake::delta::tip::Tip) keeps one coverage for the table's key column
//! and one per lookup column (the executions' spec id, the edges' artifact
//! ids). Each follows the table version by version — every add is
//! uncovered until the sidecar of its version is read or learnt; a remove
//! uncovers the other files its filter covered, since the filter no longer
//! describes live files only — and answers "may the table hold any of
//! these keys in this column?" from memory: only when every live file is
//! covered can "no filter may hold them" mean "the table holds none".

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use deltalake::kernel::Action;

use crate::lake::keys::key_filter::{Key, KeyFilter};

/// Versions whose sidecar a coverage waits for before it stops looking
/// (their files stay uncovered: slower, never wrong).
const PENDING_SIDECARS: usize = 64;

/// Keys probed together by [`Coverage::holds_none`]: enough for the
/// processor to overlap their cache misses, few enough to stop soon.
const HOLDS_NONE_CHUNK: usize = 512;

/// The key filters of one column over a table's live files.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// Live data files, with the version of the key filter covering each
    /// (`None`: no filter covers it).
    pub(in crate::lake) live: HashMap<String, Option<u64>>,
    pub(in crate::lake) uncovered: usize,
    pub(in crate::lake) filters: BTreeMap<u64, Arc<KeyFilter>>,
    /// The one-word filters among them (commits of one or two keys, what a
    /// run of puts leaves), by version: a key is tested against all of them
    /// with one mask over contiguous words.
    pub(in crate::lake) one_word: HashMap<u64, u64>,
    /// The others, probed one by one.
    pub(in crate::lake) larger: BTreeMap<u64, Arc<KeyFilter>>,
    /// Versions that added files before their sidecar could be read.
    pub(in crate::lake) pending: BTreeSet<u64>,
}

impl Coverage {
    /// Every file live and uncovered; then `filters` (by version) cover
    /// what they can.
    pub(in crate::lake) fn new(
        live: impl IntoIterator<Item = String>,
        filters: BTreeMap<u64, Arc<KeyFilter>>,
    ) -> Coverage {
        let live: HashMap<String, Option<u64>> = live.into_iter().map(|f| (f, None)).collect();
        let mut coverage = Coverage { uncovered: live.len(), live, ..Coverage::default() };
        for (version, filter) in filters {
            coverage.cover(version, filter);
        }
        coverage
    }

    /// The live files.
    pub(in crate::lake) fn live_files(&self) -> impl Iterator<Item = &String> {
        self.live.keys()
    }

    /// Live data files no key filter covers.
    pub(in crate::lake) fn uncovered(&self) -> usize {
        self.uncovered
    }

    /// Whether the table certainly holds none of `keys` in this column:
    /// every live file is covered and no filter may hold any of them.
    pub(in crate::lake) fn holds_none(&self, keys: &[Key]) -> bool {
        if self.uncovered > 0 {
            return false;
        }
        let masks: Vec<u64> = keys.iter().map(KeyFilter::one_word_mask).collect();
        if self.one_word.values().any(|word| masks.iter().any(|mask| word & mask == *mask)) {
            return false;
        }
        // Keys a chunk at a time, every filter for each: the answer is
        // "maybe" as soon as one key passes a filter, which for a commit of
        // many present keys is in its first chunk (probing all of them
        // through every probe of a large filter cost as much as the
        // look-up that follows, which probes them again). Within a chunk
        // the probes still go probe by probe over the keys (see
        // [`KeyFilter::retain_candidates`]).
        let mut alive = Vec::with_capacity(HOLDS_NONE_CHUNK.min(keys.len()));
        keys.chunks(HOLDS_NONE_CHUNK).all(|chunk| {
            let hashes: Vec<(u64, u64)> = chunk.iter().map(Key::hashes).collect();
            self.larger.values().all(|filter| {
                alive.clear();
                alive.extend(0..chunk.len() as u32);
                filter.retain_candidates(&hashes, &mut alive);
                alive.is_empty()
            })
        })
    }

    /// Take the filter of a version whose sidecar was written from it.
    pub(in crate::lake) fn learn(&mut self, version: u64, filter: Arc<KeyFilter>) {
        self.pending.remove(&version);
        self.cover(version, filter);
    }

    /// Apply one version's adds and removes to the live files.
    pub(in crate::lake) fn apply(&mut self, version: u64, actions: &[Action]) {
        let mut added = false;
        for action in actions {
            match action {
                Action::Add(add) => {
                    added = true;
                    match self.live.insert(add.path.clone(), None) {
                        None => self.uncovered += 1,
                        // Added again while covered: now uncovered, and so
                        // are the other files of its filter.
                        Some(Some(by)) => {
                            self.uncovered += 1;
                            self.uncover(by);
                        }
                        Some(None) => {}
                    }
                }
                Action::Remove(remove) => match self.live.remove(&remove.path) {
                    Some(None) => self.uncovered -= 1,
                    Some(Some(by)) => self.uncover(by),
                    None => {}
                },
                _ => {}
            }
        }
        if added {
            self.pending.insert(version);
            while self.pending.len() > PENDING_SIDECARS {
                self.pending.pop_first();
            }
        }
    }

    /// Let `filter` (of `version`) cover its files, if all of them are live
    /// and uncovered.
    pub(in crate::lake) fn cover(&mut self, version: u64, filter: Arc<KeyFilter>) -> bool {
        let usable = !filter.files.is_empty()
            && filter.files.iter().all(|f| matches!(self.live.get(f), Some(None)));
        if !usable {
            return false;
        }
        // (A file named twice in a sidecar is covered once.)
        for file in &filter.files {
            if let Some(by @ None) = self.live.get_mut(file) {
                *by = Some(version);
                self.uncovered -= 1;
            }
        }
        match filter.one_word() {
            Some(word) => self.one_word.insert(version, word).map(drop),
            None => self.larger.insert(version, filter.clone()).map(drop),
        };
        self.filters.insert(version, filter);
        true
    }

    /// Drop the filter of `version` (one of its files went): its other live
    /// files are uncovered again.
    fn uncover(&mut self, version: u64) {
        let Some(filter) = self.filters.remove(&version) else { return };
        self.one_word.remove(&version);
        self.larger.remove(&version);
        for file in &filter.files {
            if let Some(by) = self.live.get_mut(file)
                && *by == Some(version)
            {
                *by = None;
                self.uncovered += 1;
            }
        }
    }

    /// Read the sidecars that had not appeared yet (`read` gives a
    /// version's sidecar of this column, if it is there now).
    pub(in crate::lake) fn retry_pending(&mut self, read: impl Fn(u64) -> Option<Arc<KeyFilter>>) {
        let pending: Vec<u64> = self.pending.iter().copied().collect();
        for version in pending {
            if let Some(filter) = read(version) {
                self.pending.remove(&version);
                self.cover(version, filter);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(files: &[&str]) -> Arc<KeyFilter> {
        let keys = [Key::of_text("x")];
        Arc::new(KeyFilter::new(files.iter().map(|f| f.to_string()).collect(), &keys))
    }

    fn add(path: &str) -> Action {
        Action::Add(deltalake::kernel::Add { path: path.into(), ..Default::default() })
    }

    fn remove(path: &str) -> Action {
        Action::Remove(deltalake::kernel::Remove {
            path: path.into(),
            data_change: true,
            ..Default::default()
        })
    }

    #[test]
    fn coverage_follows_adds_removes_and_filters() {
        let mut c = Coverage::default();
        assert_eq!(c.uncovered(), 0);
        c.apply(5, &[add("a"), add("b")]);
        assert_eq!(c.uncovered(), 2, "no sidecar yet");
        assert!(!c.holds_none(&[Key::of_text("y")]), "uncovered files: maybe");
        c.learn(5, filter(&["a", "b"]));
        assert_eq!(c.uncovered(), 0);
        assert!(c.holds_none(&[Key::of_text("y")]));
        assert!(!c.holds_none(&[Key::of_text("x")]), "the filter may hold x");
        // Compaction: a removed, c added; b is left without a usable filter.
        c.apply(6, &[remove("a"), add("c")]);
        assert_eq!(c.uncovered(), 2, "b and c");
        assert!(!c.cover(6, filter(&["a", "c"])), "a filter naming a dead file is unusable");
        assert!(c.cover(7, filter(&["b", "c"])));
        assert_eq!(c.uncovered(), 0);
        c.apply(8, &[remove("b"), remove("c")]);
        assert_eq!(c.uncovered(), 0);
        assert!(c.live.is_empty() && c.filters.is_empty());
        assert!(c.one_word.is_empty() && c.larger.is_empty());
    }

    #[test]
    fn one_word_and_larger_filters_both_answer() {
        let mut c = Coverage::default();
        let many: Vec<Key> = (0..10).map(|i| Key::of_text(&format!("k{i}"))).collect();
        c.apply(1, &[add("small")]);
        c.learn(1, filter(&["small"]));
        c.apply(2, &[add("large")]);
        c.learn(2, Arc::new(KeyFilter::new(vec!["large".into()], &many)));
        assert_eq!((c.one_word.len(), c.larger.len()), (1, 1));
        assert!(!c.holds_none(&[Key::of_text("x")]), "in the one-word filter");
        assert!(!c.holds_none(&[Key::of_text("nope"), many[3]]), "in the larger one");
        assert!(c.holds_none(&[Key::of_text("nope"), Key::of_text("neither")]));
        // Keys beyond the first chunk are asked too.
        let mut absent: Vec<Key> =
            (0..3 * HOLDS_NONE_CHUNK).map(|i| Key::of_text(&format!("absent {i}"))).collect();
        assert!(c.holds_none(&absent));
        absent.push(many[9]);
        assert!(!c.holds_none(&absent), "the last key, in the last chunk");
    }

    #[test]
    fn opening_covers_what_the_filters_describe() {
        let live = ["a", "b", "c"].map(String::from);
        let filters = BTreeMap::from([(1, filter(&["a", "b"])), (2, filter(&["gone", "c"]))]);
        let c = Coverage::new(live, filters);
        assert_eq!(c.uncovered(), 1, "c: its filter names a file that is not live");
        assert_consistent(&c);
    }

    /// What the bookkeeping must always say, recomputed from scratch.
    fn assert_consistent(c: &Coverage) {
        let uncovered = c.live.values().filter(|by| by.is_none()).count();
        assert_eq!(c.uncovered, uncovered, "uncovered count");
        for (version, filter) in &c.filters {
            for file in &filter.files {
                assert_eq!(c.live.get(file), Some(&Some(*version)), "{file} of {version}");
            }
        }
        for by in c.live.values().flatten() {
            assert!(c.filters.contains_key(by), "a file covered by a dropped filter {by}");
        }
        assert_eq!(c.one_word.len() + c.larger.len(), c.filters.len());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        #[test]
        fn coverage_stays_consistent_under_any_adds_removes_and_filters(
            ops in proptest::collection::vec((0u8..3, 0usize..6, 0usize..6), 1..60)
        ) {
            let mut c = Coverage::default();
            let name = |i: usize| format!("f{i}");
            for (step, (op, a, b)) in ops.into_iter().enumerate() {
                let version = 100 + step as u64;
                match op {
                    0 => c.apply(version, &[add(&name(a)), add(&name(b))]),
                    1 => c.apply(version, &[remove(&name(a))]),
                    _ => {
                        let files: Vec<String> = vec![name(a), name(b)];
                        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
                        c.cover(version, filter(&refs));
                    }
                }
                assert_consistent(&c);
            }
        }
    }

    #[test]
    fn a_file_added_again_while_covered_is_uncovered() {
        let mut c = Coverage::default();
        c.apply(1, &[add("a"), add("b")]);
        c.learn(1, filter(&["a", "b"]));
        c.apply(2, &[add("a")]);
        assert_eq!(c.uncovered(), 2);
        assert_consistent(&c);
    }

    #[test]
    fn a_sidecar_that_appears_late_is_picked_up() {
        let mut c = Coverage::default();
        c.apply(3, &[add("late.parquet")]);
        c.retry_pending(|_| None);
        assert_eq!(c.uncovered(), 1);
        c.retry_pending(|v| (v == 3).then(|| filter(&["late.parquet"])));
        assert_eq!(c.uncovered(), 0);
        assert!(c.pending.is_empty());
    }
}
