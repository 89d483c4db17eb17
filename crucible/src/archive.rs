//! The pack archive (`geode.pack-archive.v1`): a pack folder as one byte string, the plaintext
//! of a sealed pack.
//!
//! Layout (all integers little-endian):
//! ```text
//! "GEODEPK1"                      8 bytes magic
//! entry count                      u64
//! per entry, paths strictly ascending (byte order):
//!   path length u32, path (UTF-8, relative, '/'-separated)
//!   mode u32 (Unix permission bits as the harness read them)
//!   data length u64, data
//! ```
//! Length prefixes make the encoding unambiguous, sorting makes it unique, and decoding refuses
//! trailing bytes, so one pack has exactly one archive. Paths that could escape the extraction
//! folder (absolute, `..`, `.`, empty components, backslashes, NUL) are refused both ways.

use serde::{Deserialize, Serialize};

use crate::error::ArchiveError;

const MAGIC: &[u8; 8] = b"GEODEPK1";

/// One file of a pack.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveEntry {
    /// Relative path inside the pack, '/'-separated.
    pub path: String,
    /// Unix mode bits.
    pub mode: u32,
    /// The file's contents.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for ArchiveEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveEntry")
            .field("path", &self.path)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Checks that `path` is a safe, portable relative path.
pub fn check_path(path: &str) -> Result<(), ArchiveError> {
    let bad = |why| ArchiveError::UnsafePath {
        path: path.to_owned(),
        why,
    };
    if path.is_empty() {
        return Err(bad("empty"));
    }
    if path.starts_with('/') {
        return Err(bad("absolute"));
    }
    if path.contains('\\') || path.contains('\0') {
        return Err(bad("backslash or NUL"));
    }
    for part in path.split('/') {
        match part {
            "" => return Err(bad("empty component")),
            "." | ".." => return Err(bad("dot component")),
            _ => {}
        }
    }
    Ok(())
}

/// Encodes entries (in any order; they are sorted by path). Refuses unsafe or duplicate paths.
pub fn encode_archive(entries: &[ArchiveEntry]) -> Result<Vec<u8>, ArchiveError> {
    let mut sorted: Vec<&ArchiveEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let total: usize = sorted
        .iter()
        .map(|e| 16 + e.path.len() + e.bytes.len())
        .sum();
    let mut out = Vec::with_capacity(16 + total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(sorted.len() as u64).to_le_bytes());
    for (i, e) in sorted.iter().enumerate() {
        check_path(&e.path)?;
        if i > 0 && sorted[i - 1].path == e.path {
            return Err(ArchiveError::Unsorted {
                path: e.path.clone(),
            });
        }
        out.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
        out.extend_from_slice(e.path.as_bytes());
        out.extend_from_slice(&e.mode.to_le_bytes());
        out.extend_from_slice(&(e.bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&e.bytes);
    }
    Ok(out)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ArchiveError> {
        if self.rest.len() < n {
            return Err(ArchiveError::Truncated { what });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ArchiveError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn len(&mut self, wide: bool, what: &'static str) -> Result<usize, ArchiveError> {
        let v = if wide {
            u64::from_le_bytes(self.array(what)?)
        } else {
            u64::from(u32::from_le_bytes(self.array(what)?))
        };
        // A length beyond the remaining bytes is truncation, whatever the platform's usize.
        usize::try_from(v).map_err(|_| ArchiveError::Truncated { what })
    }
}

/// Decodes an archive, refusing anything but the unique encoding of a safe pack.
pub fn decode_archive(bytes: &[u8]) -> Result<Vec<ArchiveEntry>, ArchiveError> {
    let mut r = Reader { rest: bytes };
    if r.take(8, "magic").map_err(|_| ArchiveError::BadMagic)? != MAGIC {
        return Err(ArchiveError::BadMagic);
    }
    let count = u64::from_le_bytes(r.array("entry count")?);
    let mut entries: Vec<ArchiveEntry> = Vec::new();
    for _ in 0..count {
        let plen = r.len(false, "path length")?;
        let path = std::str::from_utf8(r.take(plen, "path")?)
            .map_err(|_| ArchiveError::PathNotUtf8)?
            .to_owned();
        check_path(&path)?;
        if let Some(prev) = entries.last()
            && prev.path.as_bytes() >= path.as_bytes()
        {
            return Err(ArchiveError::Unsorted { path });
        }
        let mode = u32::from_le_bytes(r.array("mode")?);
        let dlen = r.len(true, "data length")?;
        let data = r.take(dlen, "data")?.to_vec();
        entries.push(ArchiveEntry {
            path,
            mode,
            bytes: data,
        });
    }
    if !r.rest.is_empty() {
        return Err(ArchiveError::TrailingBytes(r.rest.len()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, bytes: &[u8]) -> ArchiveEntry {
        ArchiveEntry {
            path: path.into(),
            mode: 0o644,
            bytes: bytes.to_vec(),
        }
    }

    #[test]
    fn round_trip_sorted_and_unique() {
        let entries = vec![e("b/task.toml", b"x"), e("a/instruction.md", b"hello")];
        let bytes = encode_archive(&entries).unwrap();
        let back = decode_archive(&bytes).unwrap();
        assert_eq!(back[0].path, "a/instruction.md");
        assert_eq!(back[1].bytes, b"x");
        // Order of input does not matter.
        let rev: Vec<_> = entries.into_iter().rev().collect();
        assert_eq!(encode_archive(&rev).unwrap(), bytes);
    }

    #[test]
    fn refuses_unsafe_paths_duplicates_and_trailing_bytes() {
        for p in ["/etc/passwd", "../x", "a//b", "a/./b", "a\\b", ""] {
            assert!(encode_archive(&[e(p, b"")]).is_err(), "{p}");
        }
        assert!(encode_archive(&[e("a", b""), e("a", b"")]).is_err());
        let mut bytes = encode_archive(&[e("a", b"1")]).unwrap();
        bytes.push(0);
        assert_eq!(decode_archive(&bytes), Err(ArchiveError::TrailingBytes(1)));
        assert_eq!(decode_archive(b"nope"), Err(ArchiveError::BadMagic));
        let bytes = encode_archive(&[e("a", b"12345")]).unwrap();
        assert!(matches!(
            decode_archive(&bytes[..bytes.len() - 1]),
            Err(ArchiveError::Truncated { .. })
        ));
    }
}
