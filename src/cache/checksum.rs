//! Checksums that bind a file to its own bytes and a shard to its run: the 64-bit FNV-1a hash,
//! a table's content checksum ([`table_checksum`]) and the checksum a JSON cache carries of
//! itself ([`verify_checksum`]). They catch edits, truncation and mix-ups, not tampering: the
//! arithmetic is public, so whoever edits a file can recompute them, and the readers keep their
//! own checks of what the rows mean. May touch the host table and the crate's errors; no file and
//! no device.

pub(super) use crate::checksum::{fnv1a64, FNV64_START};
use crate::error::{Error, Result};
use crate::table::{Precision, Table};
use serde::de::MapAccess;
use std::io::Read;
use std::path::Path;

/// The metadata key of a JSON cache's own checksum (rankings caches and shards carry one): the
/// last member of the file's leading `metadata` object, `"fnv1a64:<16 hex digits>"`, the FNV-1a
/// 64 of the file's bytes with those 16 digits read as `0`s.
pub const CHECKSUM_KEY: &str = "checksum";
/// The checksum's value before the digest is known (the digits then read as zeros).
pub(super) const CHECKSUM_PLACEHOLDER: &str = "fnv1a64:0000000000000000";
/// Where a JSON cache written here begins: its metadata comes first.
const JSON_HEAD: &[u8] = b"{\"metadata\":";
/// The longest metadata object [`verify_checksum`] looks through for the checksum.
const MAX_METADATA: usize = 16 << 20;

/// A digest as the files write it: `"fnv1a64:<16 lowercase hex digits>"`.
pub(super) fn digest_text(h: u64) -> String {
    format!("fnv1a64:{h:016x}")
}

/// The content checksum of a table as the engines store it at `precision`,
/// `"fnv1a64:<16 hex digits>"`: its shape (N, D), every stored value's bits (fp16: the values
/// rounded to half, so a table read from its fp16 cache has the checksum of its source) and its
/// row ids (or their absence). Tables with the same checksum give the engines the same rows under
/// the same keys — a table loaded from another file, centred, or with other ids has another.
/// Shards record it so a merge takes only the shards of one table.
pub fn table_checksum(table: &Table, precision: Precision) -> String {
    let stored;
    let table = match precision {
        Precision::Fp32 => table,
        p => {
            stored = table.as_stored(p);
            &stored
        }
    };
    let mut h = fnv1a64(FNV64_START, &(table.n() as u64).to_le_bytes());
    h = fnv1a64(h, &(table.d() as u64).to_le_bytes());
    let mut buf = Vec::with_capacity(1 << 16);
    for chunk in table.data().chunks(1 << 14) {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        h = fnv1a64(h, &buf);
    }
    match table.ids() {
        None => h = fnv1a64(h, b"no ids"),
        Some(ids) => {
            h = fnv1a64(h, b"ids");
            for id in ids {
                // Strings quoted, numbers as digits: "1" and 1 differ, as they do in a cache.
                h = fnv1a64(h, id.to_string().as_bytes());
                h = fnv1a64(h, b"\n");
            }
        }
    }
    digest_text(h)
}

/// Where a JSON cache's own checksum digits are: the byte offset of the 16 hex digits and the
/// value the file holds there, or why there is none. `head` is the start of the file (at least
/// the whole metadata object).
fn locate_checksum(head: &[u8]) -> std::result::Result<(usize, String), String> {
    if !head.starts_with(JSON_HEAD) {
        return Err("it does not start with {\"metadata\":".into());
    }
    let start = JSON_HEAD.len();
    let end = object_end(&head[start..])
        .ok_or("its metadata object is not closed (the file is truncated or not a cache)")?;
    let text = std::str::from_utf8(&head[start..start + end])
        .map_err(|_| "its metadata is not UTF-8 text".to_string())?;
    let members: Vec<(String, &serde_json::value::RawValue)> =
        serde_json::from_str::<RawMembers>(text)
            .map_err(|e| format!("its metadata is not a JSON object: {e}"))?
            .0;
    let mut found = members.iter().filter(|(k, _)| k == CHECKSUM_KEY);
    let raw = match (found.next(), found.next()) {
        (Some((_, raw)), None) => raw.get(),
        (None, _) => return Err(format!("its metadata has no \"{CHECKSUM_KEY}\"")),
        (Some(_), Some(_)) => return Err(format!("its metadata has \"{CHECKSUM_KEY}\" twice")),
    };
    let value: String = serde_json::from_str(raw)
        .map_err(|_| format!("its metadata {CHECKSUM_KEY} is {raw}, not a string"))?;
    let ok = raw.len() == CHECKSUM_PLACEHOLDER.len() + 2
        && value.len() == CHECKSUM_PLACEHOLDER.len()
        && value.starts_with("fnv1a64:")
        && value[8..]
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    if !ok {
        return Err(format!(
            "its metadata {CHECKSUM_KEY} is {raw}, not \"fnv1a64:<16 lowercase hex digits>\""
        ));
    }
    // The digits' place in the file: the raw value is a slice of `text`, which is one of `head`.
    let at = start + (raw.as_ptr() as usize - text.as_ptr() as usize) + 1 + 8;
    Ok((at, value))
}

/// The length of the JSON object that opens `bytes` (through its closing brace), or None when
/// it does not open with one or does not close within `bytes`. Strings are skipped whole.
fn object_end(bytes: &[u8]) -> Option<usize> {
    let first = bytes.iter().position(|c| !c.is_ascii_whitespace())?;
    if bytes[first] != b'{' {
        return None;
    }
    let (mut depth, mut string) = (0usize, InString::default());
    for (i, &c) in bytes.iter().enumerate().skip(first) {
        if string.took(c) {
            continue;
        }
        match c {
            b'"' => string.inside = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Where a byte walk over JSON text stands with strings: inside one, and just after a backslash
/// in it. The bracket counters (`object_end` here, the merge's `array_len`) skip strings with it.
#[derive(Default)]
pub(super) struct InString {
    /// Within a string: set by the caller at its opening quote, cleared at its closing one.
    pub(super) inside: bool,
    escaped: bool,
}

impl InString {
    /// Whether byte `c` is within a string (its closing quote included), taken in if so; a
    /// byte outside a string is left to the caller.
    pub(super) fn took(&mut self, c: u8) -> bool {
        if !self.inside {
            return false;
        }
        if self.escaped {
            self.escaped = false;
        } else if c == b'\\' {
            self.escaped = true;
        } else if c == b'"' {
            self.inside = false;
        }
        true
    }
}

/// A JSON object's members in file order, each value's text as it is.
#[derive(Default)]
pub(super) struct RawMembers<'a>(pub(super) Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for RawMembers<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        deserialize_members(d, "a JSON object")
    }
}

impl<'de> FromMembers<'de> for RawMembers<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> MemberRead<'de, A> {
        self.0.push((key, map.next_value()?));
        Ok(())
    }
}

/// A value read from a JSON object one member at a time, in file order, from the empty value
/// ([`Default`]): [`RawMembers`] and the merge's cache entries.
pub(super) trait FromMembers<'de>: Default {
    /// Reads the value of the member `key` from `map` (or skips it).
    fn member<A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> MemberRead<'de, A>;
}

/// What reading one member gives: nothing, or the parser's error.
pub(super) type MemberRead<'de, A> = std::result::Result<(), <A as MapAccess<'de>>::Error>;

/// Deserializes a [`FromMembers`] value from a JSON object; anything else is refused as not
/// being what `expecting` says.
pub(super) fn deserialize_members<'de, T, D>(
    d: D,
    expecting: &'static str,
) -> std::result::Result<T, D::Error>
where
    T: FromMembers<'de>,
    D: serde::Deserializer<'de>,
{
    struct V<T>(&'static str, std::marker::PhantomData<T>);
    impl<'de, T: FromMembers<'de>> serde::de::Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<T, A::Error> {
            let mut out = T::default();
            while let Some(key) = map.next_key::<String>()? {
                out.member(key, &mut map)?;
            }
            Ok(out)
        }
    }
    d.deserialize_map(V(expecting, std::marker::PhantomData))
}

/// Check the checksum a JSON cache carries of itself, the file's bytes in memory: `Ok` when
/// its metadata's [`CHECKSUM_KEY`] is the FNV-1a 64 of `bytes` with the digits read as zeros;
/// otherwise what is wrong, for a message naming the file.
pub(super) fn check_checksum_bytes(bytes: &[u8]) -> std::result::Result<(), String> {
    let (at, want) = locate_checksum(&bytes[..bytes.len().min(JSON_HEAD.len() + MAX_METADATA)])?;
    let mut h = fnv1a64(FNV64_START, &bytes[..at]);
    h = fnv1a64(h, &[b'0'; 16]);
    h = fnv1a64(h, &bytes[at + 16..]);
    compare(h, &want)
}

fn compare(h: u64, want: &str) -> std::result::Result<(), String> {
    let got = digest_text(h);
    if got == want {
        return Ok(());
    }
    Err(format!(
        "its contents do not match its checksum ({want} written, {got} now): the file was \
         edited, truncated or damaged after it was written"
    ))
}

/// Verify the checksum the JSON cache at `path` carries of itself (a rankings cache, a shard),
/// reading the file once in blocks (memory: the metadata and a block). A file without one —
/// written before caches carried checksums, or by another program — or whose bytes do not
/// match it is an [`Error::Format`] naming the file and the cause.
pub fn verify_checksum(path: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |reason: String| Error::Format {
        path: path.to_path_buf(),
        reason,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    // The head: enough to hold the metadata (read until it closes, within MAX_METADATA).
    let mut head = Vec::new();
    let mut block = vec![0u8; 1 << 20];
    let (at, want) = loop {
        let k = read_some(&mut f, &mut block).map_err(io)?;
        head.extend_from_slice(&block[..k]);
        let open = head.len() < JSON_HEAD.len()
            || (head.starts_with(JSON_HEAD) && object_end(&head[JSON_HEAD.len()..]).is_none());
        if open && k > 0 && head.len() < JSON_HEAD.len() + MAX_METADATA {
            continue;
        }
        break locate_checksum(&head)
            .map_err(|why| bad(format!("no checksum can be verified: {why}")))?;
    };
    if head.len() < at + 16 {
        return Err(bad("truncated in its checksum".into()));
    }
    let mut h = fnv1a64(FNV64_START, &head[..at]);
    h = fnv1a64(h, &[b'0'; 16]);
    h = fnv1a64(h, &head[at + 16..]);
    loop {
        let k = read_some(&mut f, &mut block).map_err(io)?;
        if k == 0 {
            break;
        }
        h = fnv1a64(h, &block[..k]);
    }
    compare(h, &want).map_err(bad)
}

/// One read, retried on interruption.
fn read_some(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match f.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_checksum_and_checks_the_bytes() {
        let body = br#"{"metadata":{"a":"x\"}","checksum":"fnv1a64:0000000000000000"},"rows":{}}"#;
        let (at, _) = locate_checksum(body).unwrap();
        let h = fnv1a64(FNV64_START, body);
        let mut file = body.to_vec();
        file[at..at + 16].copy_from_slice(format!("{h:016x}").as_bytes());
        assert_eq!(check_checksum_bytes(&file), Ok(()));
        // An edit inside the metadata (the head that names the checksum stays intact).
        let x = file.iter().position(|&c| c == b'x').unwrap();
        file[x] = b'y';
        assert!(check_checksum_bytes(&file)
            .unwrap_err()
            .contains("do not match"));
        let none = br#"{"metadata":{"a":1},"rows":{}}"#;
        assert!(check_checksum_bytes(none)
            .unwrap_err()
            .contains("no \"checksum\""));
        assert_eq!(object_end(b" {\"a\":[{}],\"b\":\"}\"} tail"), Some(19));
        assert_eq!(object_end(b"{\"a\":1"), None);
    }
}
