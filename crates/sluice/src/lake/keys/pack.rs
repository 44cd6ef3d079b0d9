//! Packs: the key filters of many versions of a table in one object.
//!
//! A lake in an object store pays a request for every object it reads, so a
//! process meeting a table for the first time cannot read one sidecar
//! bundle per version, as it does on a filesystem (see
//! [`in_store`](super::in_store) for when packs are written and read).
//! A pack holds, for each version it covers, a bundle of that version's
//! key filters only (key sets and result sets stay in the version's own
//! bundle), in one object `<table>/_sluice_keys/{version:020}.pack`:
//!
//! ```text
//! entries, back to back   version (u64) · length (u64) · bundle of the
//!                         version's key filters (its own format and checks)
//! tail (28 bytes)         entries (u32) · format tag (8) · checksum of
//!                         everything before it (16)
//! ```
//!
//! A pack is read whole, so one checksum over it all says it is intact; a
//! pack that fails it answers nothing (its versions count as uncovered
//! until read from their own bundles).

use bytes::Bytes;

/// Format tag, in the tail.
const MAGIC: &[u8; 8] = b"SLPACK01";
const CHECKSUM_LEN: usize = 16;
const TAIL: usize = 4 + 8 + CHECKSUM_LEN;

/// The object name of the pack written at `version`.
pub(in crate::lake) fn name(version: u64) -> String {
    format!("{version:020}.pack")
}

/// The version a pack's object name stands for (`None`: not a pack).
pub(in crate::lake) fn version_of(file_name: &str) -> Option<u64> {
    let version = file_name.strip_suffix(".pack")?;
    (version.len() == 20).then(|| version.parse().ok()).flatten()
}

/// A pack of `entries`: each a version and the bundle of its key filters.
pub(in crate::lake) fn encode<'a>(entries: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut count: u32 = 0;
    for (version, bundle) in entries {
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(bundle.len() as u64).to_le_bytes());
        out.extend_from_slice(bundle);
        count += 1;
    }
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(MAGIC);
    let checksum = blake3::hash(&out);
    out.extend_from_slice(&checksum.as_bytes()[..CHECKSUM_LEN]);
    out
}

/// The entries of a pack (each bundle a slice of `bytes`, not a copy);
/// `None` when the pack is torn, damaged or of another format.
pub(in crate::lake) fn decode(bytes: &Bytes) -> Option<Vec<(u64, Bytes)>> {
    let checked_len = bytes.len().checked_sub(CHECKSUM_LEN)?;
    let tail_at = bytes.len().checked_sub(TAIL)?;
    if blake3::hash(&bytes[..checked_len]).as_bytes()[..CHECKSUM_LEN] != bytes[checked_len..] {
        return None;
    }
    if &bytes[tail_at + 4..checked_len] != MAGIC {
        return None;
    }
    let count = u32::from_le_bytes(bytes[tail_at..tail_at + 4].try_into().ok()?);
    let mut entries = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut at = 0usize;
    for _ in 0..count {
        let header = bytes.get(at..at.checked_add(16)?)?;
        let version = u64::from_le_bytes(header[..8].try_into().ok()?);
        let len = usize::try_from(u64::from_le_bytes(header[8..].try_into().ok()?)).ok()?;
        let start = at + 16;
        let end = start.checked_add(len).filter(|end| *end <= tail_at)?;
        entries.push((version, bytes.slice(start..end)));
        at = end;
    }
    (at == tail_at).then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_gives_back_its_entries_in_order() {
        let entries: Vec<(u64, Vec<u8>)> =
            vec![(3, b"three".to_vec()), (9, Vec::new()), (12, vec![7; 1000])];
        let bytes = Bytes::from(encode(entries.iter().map(|(v, b)| (*v, b.as_slice()))));
        let back = decode(&bytes).expect("an intact pack decodes");
        let back: Vec<(u64, Vec<u8>)> = back.into_iter().map(|(v, b)| (v, b.to_vec())).collect();
        assert_eq!(back, entries);
        assert_eq!(decode(&Bytes::from(encode([]))), Some(Vec::new()));
        assert_eq!(version_of(&name(12)), Some(12));
        assert_eq!(version_of("00000000000000000012.side"), None);
        assert_eq!(version_of("12.pack"), None, "only the written spelling");
    }

    #[test]
    fn a_damaged_or_torn_pack_answers_nothing() {
        let bytes = encode([(1, b"one".as_slice()), (2, b"two".as_slice())]);
        for at in [0, 5, 18, bytes.len() - TAIL, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert_eq!(decode(&Bytes::from(damaged)), None, "byte {at} flipped");
        }
        for keep in [0, 10, bytes.len() - 1] {
            assert_eq!(decode(&Bytes::from(bytes[..keep].to_vec())), None, "torn at {keep}");
        }
    }
}
