//! Content-addressed artifact identity.
//!
//! An artifact id is the first 16 bytes of BLAKE3 over
//! `type_key ‖ 0x00 ‖ canonical content bytes`, written as 32 lowercase hex
//! characters. The type key domain-separates the hash: the same JSON stored as
//! a metric and as a config gets two ids. Metadata, names and step numbers are
//! not hashed, so the same content produced twice is the same artifact.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Number of hex characters in an artifact id.
pub const ID_HEX_LEN: usize = 32;

/// The content-derived identity of an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactId([u8; 16]);

impl ArtifactId {
    /// Compute the id of content of a type.
    pub fn compute(type_key: &str, canonical_content: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(type_key.as_bytes());
        hasher.update(&[0]);
        hasher.update(canonical_content);
        let digest = hasher.finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest.as_bytes()[..16]);
        ArtifactId(id)
    }

    /// The raw 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The 32-character lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for ArtifactId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bytes = s.as_bytes();
        if bytes.len() != ID_HEX_LEN {
            return Err(Error::InvalidArtifactId(s.to_owned()));
        }
        let mut id = [0u8; 16];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_digit(pair[0]).ok_or_else(|| Error::InvalidArtifactId(s.to_owned()))?;
            let lo = hex_digit(pair[1]).ok_or_else(|| Error::InvalidArtifactId(s.to_owned()))?;
            id[i] = (hi << 4) | lo;
        }
        Ok(ArtifactId(id))
    }
}

impl serde::Serialize for ArtifactId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ArtifactId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_32_lowercase_hex_and_round_trips() {
        let id = ArtifactId::compute("metric", b"{}");
        let text = id.to_hex();
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(text.parse::<ArtifactId>().unwrap(), id);
    }

    #[test]
    fn id_matches_blake3_prefix() {
        let id = ArtifactId::compute("config", b"[1]");
        let full = blake3::hash(b"config\0[1]");
        assert_eq!(id.to_hex(), full.to_hex()[..32]);
    }

    #[test]
    fn domain_separated() {
        assert_ne!(ArtifactId::compute("metric", b"{}"), ArtifactId::compute("config", b"{}"));
        // The separator keeps "ab"+"c" apart from "a"+"bc".
        assert_ne!(ArtifactId::compute("ab", b"c"), ArtifactId::compute("a", b"bc"));
    }

    #[test]
    fn rejects_bad_ids() {
        for bad in ["", "abc", &"A".repeat(32), &"g".repeat(32), &"0".repeat(33)] {
            assert!(bad.parse::<ArtifactId>().is_err(), "{bad}");
        }
    }
}
