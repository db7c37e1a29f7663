//! Shards: partial caches of one run (`--shard i/n`), and [`merge_caches`] /
//! [`merge_rankings`] merging them back into the one-shot diversity / rankings cache. May touch the
//! checksums of `checksum.rs`, the JSON writer of `json_stream.rs`, the crate's errors and atomic
//! writes; no device.

use super::checksum::{
    check_checksum_bytes, deserialize_members, FromMembers, InString, MemberRead, RawMembers,
    CHECKSUM_KEY,
};
use super::json_stream::{JsonStream, PIECE_BYTES};
use crate::error::{Error, Result};
use crate::pending_file::{io_err, PendingFile};
use serde::de::MapAccess;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The metadata keys a shard — the partial cache of a `--shard i/n` run — carries on top of the
/// run's own, all removed by [`merge_caches`]: `"shard":"i/n"` (1-based), `"shard_layout"`
/// (`"contiguous"` or `"strided"`), `"shard_starts_total"` (starts in the whole run),
/// `"shard_starts_fingerprint"` (a checksum of the whole run's starts list),
/// [`SHARD_TABLE_KEY`] (the content checksum of the table the run computed from) and
/// `"checksum"` (the file's own, written by [`JsonCacheWriter`] for every shard).
///
/// [`JsonCacheWriter`]: super::JsonCacheWriter
pub const SHARD_KEYS: [&str; 6] = [
    "shard",
    "shard_layout",
    "shard_starts_total",
    "shard_starts_fingerprint",
    SHARD_TABLE_KEY,
    CHECKSUM_KEY,
];

/// The metadata keys a shard of a rankings run carries on top of the run's own, all removed by
/// [`merge_rankings`]: `"shard":"i/n"` (1-based), `"shard_layout"`, `"shard_items_total"`
/// (N, the items of the whole run: a shard ranks its slice of the items 0..N against all N) and
/// [`SHARD_TABLE_KEY`]. Its `"checksum"` is that of every rankings cache: the merge writes the
/// merged file's own.
pub const RANKINGS_SHARD_KEYS: [&str; 4] = [
    "shard",
    "shard_layout",
    "shard_items_total",
    SHARD_TABLE_KEY,
];

/// The metadata key of a shard's table checksum: the content checksum of the table its run
/// computed from ([`table_checksum`](super::table_checksum): the values as the engine saw
/// them, after centring, and the row ids). Every shard of a run carries the same; a merge
/// refuses a shard without one, or with another.
pub const SHARD_TABLE_KEY: &str = "shard_table_checksum";

/// What sets the two mergeable JSON caches apart.
struct Flavor {
    /// What the file is, in messages.
    what: &'static str,
    /// The output, in the JSON stream's messages.
    stream: &'static str,
    /// The member holding the rows.
    rows: &'static str,
    /// The metadata key of the whole run's row count.
    total: &'static str,
    /// The shard keys the merge drops.
    keys: &'static [&'static str],
    /// A row's own key is its first entry (a sequence starts at its start); otherwise it is
    /// absent (a ranking lists the other items).
    own_first: bool,
    /// The rows and the whole run's rows, in messages.
    noun: &'static str,
    total_noun: &'static str,
    /// The metadata key of N, the table's items.
    items: &'static str,
    /// Whether the merged file carries its own checksum (a rankings cache does).
    checksum: bool,
}

const DIVERSITY: Flavor = Flavor {
    what: "diversity cache",
    stream: "cache",
    rows: "sequences",
    total: "shard_starts_total",
    keys: &SHARD_KEYS,
    own_first: true,
    noun: "sequences",
    total_noun: "starts",
    items: "num_poems",
    checksum: false,
};

const RANKINGS: Flavor = Flavor {
    what: "rankings cache",
    stream: "rankings cache",
    rows: "rankings",
    total: "shard_items_total",
    keys: &RANKINGS_SHARD_KEYS,
    own_first: false,
    noun: "rankings",
    total_noun: "items",
    items: "total_poems",
    checksum: true,
};

/// How a run's starts list is split into shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardLayout {
    /// Shard i holds the i-th of n near-equal runs of consecutive positions (the first
    /// `total mod n` shards one longer).
    Contiguous,
    /// Shard i holds the positions p (0-based) with p mod n = i − 1.
    Strided,
}

impl ShardLayout {
    /// `"contiguous"` or `"strided"`, as in the metadata.
    pub fn name(self) -> &'static str {
        match self {
            ShardLayout::Contiguous => "contiguous",
            ShardLayout::Strided => "strided",
        }
    }

    /// The layout a metadata name means.
    pub fn from_name(name: &str) -> Option<ShardLayout> {
        match name {
            "contiguous" => Some(ShardLayout::Contiguous),
            "strided" => Some(ShardLayout::Strided),
            _ => None,
        }
    }

    /// The positions (0-based, in the whole run's starts list) of shard `index` (1-based) of
    /// `count` over `total` starts, in the order the shard computes and writes them.
    pub fn positions(self, index: usize, count: usize, total: usize) -> Vec<usize> {
        assert!(
            count >= 1 && (1..=count).contains(&index),
            "shard {index}/{count}"
        );
        match self {
            ShardLayout::Contiguous => {
                let (base, rem) = (total / count, total % count);
                let first = (index - 1) * base + (index - 1).min(rem);
                (first..first + shard_len(index, count, total)).collect()
            }
            ShardLayout::Strided => (index - 1..total).step_by(count).collect(),
        }
    }
}

/// How many of `total` starts shard `index` (1-based) of `count` holds — the same in both
/// layouts: `total / count`, plus one for the first `total mod count` shards.
pub fn shard_len(index: usize, count: usize, total: usize) -> usize {
    total / count + usize::from(index <= total % count)
}

/// What [`merge_caches`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    /// n, the number of shards merged.
    pub shards: usize,
    /// Their layout.
    pub layout: ShardLayout,
    /// Rows in the merged cache: sequences (the whole run's starts) or rankings (its items).
    pub sequences: usize,
}

/// A cache's members `metadata` and `sequences` or `rankings` (others skipped), read in one pass.
#[derive(Default)]
struct CacheEntries<'a> {
    metadata: Option<RawMembers<'a>>,
    sequences: Option<RawMembers<'a>>,
    rankings: Option<RawMembers<'a>>,
}

impl<'de> serde::Deserialize<'de> for CacheEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        deserialize_members(
            d,
            "a JSON object {\"metadata\":{…},\"sequences\" or \"rankings\":{…}}",
        )
    }
}

impl<'de> FromMembers<'de> for CacheEntries<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> MemberRead<'de, A> {
        match key.as_str() {
            "metadata" => self.metadata = Some(map.next_value()?),
            "sequences" => self.sequences = Some(map.next_value()?),
            "rankings" => self.rankings = Some(map.next_value()?),
            _ => {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The refusal of a merge that lacks `absent` of its `count` shards: the `missing` ones (1-based
/// indices) named when there are at most 16, else only counted, then the `given` files with
/// their indices. `what` names the shards ("shard(s)", "graph shard(s)"); the merges of JSON
/// caches and of k-NN graph shards both refuse with it.
pub(super) fn shards_missing<'a>(
    out: &Path,
    what: &str,
    count: usize,
    absent: usize,
    missing: impl Iterator<Item = usize>,
    given: impl Iterator<Item = (&'a Path, usize)>,
) -> Error {
    let named = if absent <= 16 {
        missing
            .map(|i| format!("{i}/{count}"))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        format!("{absent} of {count}")
    };
    Error::Invalid(format!(
        "{}: cannot merge: {what} {named} missing (given: {})",
        out.display(),
        given
            .map(|(path, index)| format!("{} = {index}/{count}", path.display()))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The number of elements of `text`, JSON the parser has already checked; None when it is not an
/// array. Counts the commas at depth 1, outside strings, without parsing the elements again.
/// Whether a merge's rows hold row indices or ids (every row must hold the same kind).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RowKind {
    Indices,
    Ids,
}

/// Entries seen in the row being checked: a bitset over indices, a set of ids.
#[derive(Default)]
struct Marks {
    bits: Vec<u64>,
    ids: std::collections::HashSet<String>,
}

/// The keys of a merge's rows, when they name every item of the run: an entry of a row must then
/// be one of them (a number by its decimal text).
struct KeySet<'a> {
    text: std::collections::HashSet<&'a str>,
    /// The keys that are decimal numbers: a bitset when they are dense (row indices), else a set.
    bits: Vec<u64>,
    sparse: std::collections::HashSet<u64>,
}

impl<'a> KeySet<'a> {
    fn new(keys: impl Iterator<Item = &'a str>, count: usize) -> KeySet<'a> {
        let text: std::collections::HashSet<&str> = keys.collect();
        let nums: Vec<u64> = text
            .iter()
            .filter(|k| {
                !k.is_empty()
                    && k.bytes().all(|c| c.is_ascii_digit())
                    && (k.len() == 1 || !k.starts_with('0'))
            })
            .filter_map(|k| k.parse().ok())
            .collect();
        let max = nums.iter().copied().max().unwrap_or(0);
        let (mut bits, mut sparse) = (Vec::new(), std::collections::HashSet::new());
        if max / 64 <= 4 * count as u64 + 1024 {
            bits = vec![0u64; max as usize / 64 + 1];
            for x in nums {
                bits[x as usize / 64] |= 1 << (x % 64);
            }
        } else {
            sparse = nums.into_iter().collect();
        }
        KeySet { text, bits, sparse }
    }

    fn has_num(&self, x: u64) -> bool {
        match self.bits.get((x / 64) as usize) {
            Some(w) => w & (1 << (x % 64)) != 0,
            None => self.sparse.contains(&x),
        }
    }
}

/// Check the row text `raw` of `key` before it is copied into a merged cache: every entry a row
/// index (a non-negative integer) or every entry an id (a string), the same kind as every row
/// before (`kind`), no entry twice, the first entry the key itself (a sequence, `own_first`)
/// or the key nowhere in it (a ranking), and — when the keys name every item of the run
/// (`items`) — every entry one of them.
fn check_row(
    key: &str,
    raw: &str,
    own_first: bool,
    kind: &mut Option<RowKind>,
    marks: &mut Marks,
    items: Option<&KeySet>,
) -> std::result::Result<(), String> {
    let stray = |x: &dyn std::fmt::Display| {
        format!(
            "has entry {x}, which is no item of the run: no shard has a row for it (its row is \
             missing, or another shard's key was changed)"
        )
    };
    // An entry outside the run, reported once the row's kind is known to be the run's.
    let mut outside = None;
    let (this, first, own) = if let Ok(v) = serde_json::from_str::<Vec<u64>>(raw) {
        if let Some(x) = items.and_then(|k| v.iter().find(|&&x| !k.has_num(x))) {
            outside = Some(stray(x));
        }
        let first = v.first().map(|x| x.to_string());
        let own = key.parse::<u64>().is_ok_and(|k| v.contains(&k));
        let max = v.iter().copied().max().unwrap_or(0);
        if max > u32::MAX as u64 {
            return Err(format!("has entry {max}, not a row index (past 2^32)"));
        }
        let mut twice = None;
        if (max as usize) / 64 <= 16 * v.len() + 1024 {
            // A bitset no larger than a small multiple of the row, cleared after use.
            if marks.bits.len() * 64 <= max as usize {
                marks.bits.resize(max as usize / 64 + 1, 0);
            }
            for &x in &v {
                let (w, b) = (x as usize / 64, x % 64);
                if marks.bits[w] & (1 << b) != 0 {
                    twice = Some(x);
                    break;
                }
                marks.bits[w] |= 1 << b;
            }
            for &x in &v {
                marks.bits[x as usize / 64] = 0;
            }
        } else {
            // Sparse entries (a short row of large indices): sort a copy.
            let mut sorted = v.clone();
            sorted.sort_unstable();
            twice = sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
        }
        if let Some(x) = twice {
            return Err(format!("has entry {x} twice"));
        }
        (RowKind::Indices, first, own)
    } else if let Ok(v) = serde_json::from_str::<Vec<String>>(raw) {
        if let Some(x) = items.and_then(|k| v.iter().find(|x| !k.text.contains(x.as_str()))) {
            outside = Some(stray(&Value::String(x.clone())));
        }
        marks.ids.clear();
        if let Some(x) = v.iter().find(|x| !marks.ids.insert((*x).clone())) {
            return Err(format!("has entry {} twice", Value::String(x.clone())));
        }
        let own = v.iter().any(|x| x == key);
        (RowKind::Ids, v.first().cloned(), own)
    } else {
        return Err("has an entry that is neither a row index nor an id".into());
    };
    match *kind {
        None => *kind = Some(this),
        Some(k) if k != this => {
            return Err(format!(
                "holds {}, but the rows before it hold {}",
                if this == RowKind::Ids {
                    "ids"
                } else {
                    "row indices"
                },
                if k == RowKind::Ids {
                    "ids"
                } else {
                    "row indices"
                }
            ))
        }
        _ => {}
    }
    if let Some(why) = outside {
        return Err(why);
    }
    if !own_first {
        return match own {
            true => Err("lists its own item".into()),
            false if first.is_none() => Err("is empty".into()),
            false => Ok(()),
        };
    }
    match first {
        Some(f) if f == key => Ok(()),
        Some(f) => Err(format!(
            "does not start with its start (its first entry is {f})"
        )),
        None => Err("is empty".into()),
    }
}

fn array_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    let (mut depth, mut string) = (0usize, InString::default());
    let (mut commas, mut any) = (0usize, false);
    for &c in bytes {
        if string.took(c) {
            continue;
        }
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'[' | b'{' => {
                any |= depth == 1;
                depth += 1;
            }
            b']' | b'}' => depth -= 1,
            b',' if depth == 1 => commas += 1,
            _ => {
                any |= depth == 1;
                string.inside = c == b'"';
            }
        }
    }
    Some(if any { commas + 1 } else { 0 })
}

/// One input of [`merge_caches`], parsed: its metadata and rows as text borrowed from the file.
struct ShardPart<'a> {
    path: &'a Path,
    index: usize,
    count: usize,
    layout: ShardLayout,
    total: usize,
    metadata: Vec<(String, &'a serde_json::value::RawValue)>,
    rows: Vec<(String, &'a serde_json::value::RawValue)>,
}

impl<'a> ShardPart<'a> {
    fn parse(path: &'a Path, text: &'a str, flavor: &Flavor) -> Result<ShardPart<'a>> {
        let bad = |reason: String| Error::Format {
            path: path.to_path_buf(),
            reason,
        };
        let what = flavor.what;
        let top: CacheEntries =
            serde_json::from_str(text).map_err(|e| bad(format!("not a {what}: {e}")))?;
        let missing = |name: &str| bad(format!("not a {what}: it has no \"{name}\""));
        let metadata = top.metadata.ok_or_else(|| missing("metadata"))?;
        let rows = match flavor.own_first {
            true => top.sequences,
            false => top.rankings,
        };
        let rows = rows.ok_or_else(|| missing(flavor.rows))?;
        let field = |name: &str| -> Result<Value> {
            let raw = metadata
                .0
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    bad(format!(
                        "not a shard: its metadata has no \"{name}\" (only the partial caches \
                         of --shard runs can be merged)"
                    ))
                })?;
            serde_json::from_str(raw.get()).map_err(|e| bad(format!("metadata {name}: {e}")))
        };
        let shard = field("shard")?;
        let (index, count) = shard
            .as_str()
            .and_then(|s| s.split_once('/'))
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .filter(|&(i, n)| n >= 1 && (1..=n).contains(&i))
            .ok_or_else(|| {
                bad(format!(
                    "metadata shard is {shard}, not \"i/n\" with 1 <= i <= n"
                ))
            })?;
        let layout = field("shard_layout")?;
        let layout = layout
            .as_str()
            .and_then(ShardLayout::from_name)
            .ok_or_else(|| {
                bad(format!(
                    "metadata shard_layout is {layout}, not \"contiguous\" or \"strided\""
                ))
            })?;
        let total = field(flavor.total)?;
        let total = total
            .as_u64()
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(|| {
                bad(format!(
                    "metadata {} is {total}, not a non-negative integer",
                    flavor.total
                ))
            })?;
        // The shard's own checksum (every byte but its digits) and its table's: a shard that
        // cannot show both is not merged.
        let recompute = format!("recompute shard {index}/{count} with this version");
        let has = |name: &str| metadata.0.iter().any(|(k, _)| k == name);
        for key in [CHECKSUM_KEY, SHARD_TABLE_KEY] {
            if !has(key) {
                return Err(bad(format!(
                    "shard {index}/{count} has no \"{key}\" in its metadata: it was written \
                     before shards carried checksums of their table and of themselves, or by \
                     another program, and cannot be verified; {recompute}"
                )));
            }
        }
        check_checksum_bytes(text.as_bytes()).map_err(|why| {
            bad(format!(
                "shard {index}/{count} is refused: {why}; {recompute}"
            ))
        })?;
        Ok(ShardPart {
            path,
            index,
            count,
            layout,
            total,
            metadata: metadata.0,
            rows: rows.0,
        })
    }

    /// The metadata value of `key` as text, if present.
    fn meta(&self, key: &str) -> Option<&'a str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.get())
    }
}

/// Check that `part`'s metadata is `first`'s, but for `shard`, `checksum` (each file's own) and
/// `generated_at` (shards run at different times; [`merge_caches`] keeps the latest): the same
/// table checksum, the same keys in the same order, the same values.
fn check_same_run(first: &ShardPart, part: &ShardPart) -> Result<()> {
    let (a, b) = (first.meta(SHARD_TABLE_KEY), part.meta(SHARD_TABLE_KEY));
    if a != b {
        return Err(Error::Format {
            path: part.path.to_path_buf(),
            reason: format!(
                "computed from another table than {}: {SHARD_TABLE_KEY} {} here, {} there",
                first.path.display(),
                b.unwrap_or("absent"),
                a.unwrap_or("absent")
            ),
        });
    }
    // Each shard's own checksum differs; it was verified when the shard was read.
    let skip = |k: &str| k == "shard" || k == "generated_at" || k == CHECKSUM_KEY;
    let a: Vec<_> = first.metadata.iter().filter(|(k, _)| !skip(k)).collect();
    let b: Vec<_> = part.metadata.iter().filter(|(k, _)| !skip(k)).collect();
    // Every difference, so one message says all that sets the runs apart.
    let mut diffs = Vec::new();
    for (ka, va) in &a {
        match part.meta(ka) {
            None => diffs.push(format!("{ka} = {} there, absent here", va.get())),
            Some(vb) if vb != va.get() => {
                diffs.push(format!("{ka} = {vb} here, {} there", va.get()))
            }
            _ => {}
        }
    }
    for (kb, vb) in &b {
        if first.meta(kb).is_none() {
            diffs.push(format!("{kb} = {} here, absent there", vb.get()));
        }
    }
    if diffs.is_empty() && a.iter().map(|(k, _)| k).ne(b.iter().map(|(k, _)| k)) {
        diffs.push("the keys are in another order".to_string());
    }
    if part.meta("generated_at").is_some() != first.meta("generated_at").is_some() {
        diffs.push("only one of them has generated_at".to_string());
    }
    if diffs.is_empty() {
        return Ok(());
    }
    Err(Error::Format {
        path: part.path.to_path_buf(),
        reason: format!(
            "not a shard of the same run as {} (\"there\"): metadata {}",
            first.path.display(),
            diffs.join("; ")
        ),
    })
}

/// Merge the partial caches of a `--shard i/n` run (every shard 1..n, in any order) into the
/// cache `out`, byte-identical to the cache a one-shot run with the same options writes.
///
/// Each input must be a diversity cache whose metadata carries [`SHARD_KEYS`]; they must be the
/// shards of one run: the same metadata but for `shard` (and `generated_at`: the merged cache
/// keeps the latest), the same n, every shard 1..n exactly once, each holding as many sequences
/// as its slice of `shard_starts_total` starts, no start twice, every row as long. Otherwise the
/// merge is refused ([`Error::Format`] naming the offending file, [`Error::Invalid`] for a
/// missing shard) and `out` is untouched. An `out` that is one of the inputs
/// ([`crate::files::same_file`]) is refused ([`Error::Invalid`]) before anything is created.
///
/// The output goes through a [`PendingFile`] (its location is checked before the inputs are
/// read; nothing is left on error) and the same JSON stream as [`JsonCacheWriter`]: the
/// metadata without the shard keys, then the rows in the one-shot run's order — the shards one
/// after another (contiguous) or interleaved by position (strided) — each row's text copied
/// through unchanged, so row ids come out as the shards wrote them. The inputs are read whole
/// (the rows are not decoded), so memory is about the inputs' total size.
///
/// [`JsonCacheWriter`]: super::JsonCacheWriter
pub fn merge_caches(inputs: &[PathBuf], out: &Path) -> Result<MergeReport> {
    merge_json(inputs, out, &DIVERSITY)
}

/// Merge the partial rankings caches of a sharded rankings run (every shard 1..n, in any
/// order) into the rankings cache `out`, byte-identical to the one-shot run's: as
/// [`merge_caches`], with [`RANKINGS_SHARD_KEYS`] instead of [`SHARD_KEYS`], the rows under
/// `"rankings"`, each a list of other items (never its own), the items in the one-shot order
/// 0..N. [`MergeReport::sequences`] is then the number of rankings.
pub fn merge_rankings(inputs: &[PathBuf], out: &Path) -> Result<MergeReport> {
    merge_json(inputs, out, &RANKINGS)
}

/// What every merge checks before it reads a shard: there are `what` (e.g. "shards") to merge,
/// the output is none of them (refused before anything is created), and its location takes a
/// file (a temporary file created and removed).
pub(crate) fn check_merge_output(inputs: &[PathBuf], out: &Path, what: &str) -> Result<()> {
    if inputs.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no {what} to merge",
            out.display()
        )));
    }
    if let Some(p) = inputs.iter().find(|p| crate::files::same_file(p, out)) {
        return Err(Error::Invalid(format!(
            "the output {} is also an input ({}): refusing to overwrite it",
            out.display(),
            p.display()
        )));
    }
    drop(PendingFile::create(out)?);
    Ok(())
}

fn merge_json(inputs: &[PathBuf], out: &Path, flavor: &Flavor) -> Result<MergeReport> {
    check_merge_output(inputs, out, "shards")?;
    let texts = inputs
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(io_err(p))?;
            String::from_utf8(bytes).map_err(|_| Error::Format {
                path: p.to_path_buf(),
                reason: format!("not a {}: it is not UTF-8 text", flavor.what),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut parts = inputs
        .iter()
        .zip(&texts)
        .map(|(p, t)| ShardPart::parse(p, t, flavor))
        .collect::<Result<Vec<_>>>()?;
    let count = check_shard_set(&parts, out)?;
    parts.sort_by_key(|p| p.index);
    let (layout, total) = (parts[0].layout, parts[0].total);
    check_shard_sizes(&parts, flavor, count)?;
    let n_items = check_items_total(&parts[0], flavor, total)?;
    let keys = check_keys(&parts, flavor, n_items)?;
    // When the run's keys are all N items, every entry must be one of them.
    let items = (n_items == Some(total)).then(|| KeySet::new(keys.keys().copied(), total));
    check_rows(&parts, flavor, items.as_ref())?;
    let meta = merged_metadata(&parts, flavor)?;
    let input_bytes: usize = texts.iter().map(|t| t.len()).sum();
    write_merged(out, flavor, &meta, (&parts, count), input_bytes)?;
    Ok(MergeReport {
        shards: count,
        layout,
        sequences: total,
    })
}

/// The shards given are one run's, each once, all of them: returns their count.
fn check_shard_set(parts: &[ShardPart], out: &Path) -> Result<usize> {
    let count = parts[0].count;
    if let Some(p) = parts.iter().find(|p| p.count != count) {
        return Err(Error::Format {
            path: p.path.to_path_buf(),
            reason: format!(
                "shard {}/{} of a split into {}, but {} is shard {}/{count}",
                p.index,
                p.count,
                p.count,
                parts[0].path.display(),
                parts[0].index
            ),
        });
    }
    // Sizes from the files are never allocated from before they are checked against what the
    // files hold ("1/100000000000000" once aborted the merge allocating 1.6e15 bytes).
    let mut seen: HashMap<usize, &Path> = HashMap::with_capacity(parts.len());
    for p in parts {
        if let Some(other) = seen.insert(p.index, p.path) {
            return Err(Error::Format {
                path: p.path.to_path_buf(),
                reason: format!(
                    "shard {}/{count} is given twice (also {})",
                    p.index,
                    other.display()
                ),
            });
        }
    }
    for p in &parts[1..] {
        check_same_run(&parts[0], p)?;
    }
    if count > parts.len() {
        return Err(shards_missing(
            out,
            "shard(s)",
            count,
            count - parts.len(),
            (1..=count).filter(|i| !seen.contains_key(i)),
            parts.iter().map(|p| (p.path, p.index)),
        ));
    }
    Ok(count)
}

/// Each shard (sorted by index) holds its slice of the run's `total` rows: `total` comes from
/// the files, so it is never allocated from before this.
fn check_shard_sizes(parts: &[ShardPart], flavor: &Flavor, count: usize) -> Result<()> {
    let (layout, total) = (parts[0].layout, parts[0].total);
    for p in parts {
        let want = shard_len(p.index, count, total);
        if p.rows.len() != want {
            return Err(Error::Format {
                path: p.path.to_path_buf(),
                reason: format!(
                    "shard {}/{count} holds {} {}, but the {} shard {} of {count} of a run of \
                     {total} {} holds {want}",
                    p.index,
                    p.rows.len(),
                    flavor.noun,
                    layout.name(),
                    p.index,
                    flavor.total_noun
                ),
            });
        }
    }
    Ok(())
}

/// Every row's key once over all shards, and every row an array of one length, the one the
/// run's metadata implies (`n_items`, N). Returns the keys, with the file of each.
fn check_keys<'a>(
    parts: &'a [ShardPart],
    flavor: &Flavor,
    n_items: Option<usize>,
) -> Result<HashMap<&'a str, &'a Path>> {
    let total = parts[0].total;
    let mut keys: HashMap<&str, &Path> = HashMap::with_capacity(total);
    let mut row_len = None;
    for p in parts {
        let bad = |reason: String| Error::Format {
            path: p.path.to_path_buf(),
            reason,
        };
        for (key, raw) in &p.rows {
            // Keys as JSON strings in messages, as they are in the files.
            let shown = Value::String(key.clone());
            if let Some(other) = keys.insert(key, p.path) {
                return Err(bad(format!(
                    "{} {shown} is also in {}{}",
                    if flavor.own_first { "start" } else { "item" },
                    other.display(),
                    if other == p.path {
                        " (twice in this file)"
                    } else {
                        ""
                    }
                )));
            }
            let len = array_len(raw.get()).ok_or_else(|| {
                bad(format!(
                    "the {} of {shown} is not an array",
                    row_noun(flavor)
                ))
            })?;
            match row_len {
                None => row_len = Some((len, p.path, shown)),
                Some((l, path, ref k)) if l != len => {
                    return Err(bad(format!(
                        "the {} of {shown} has {len} entries, but that of {k} in {} has {l}",
                        row_noun(flavor),
                        path.display()
                    )))
                }
                _ => {}
            }
        }
    }
    if let Some((len, path, ref k)) = row_len {
        check_row_len(&parts[0], flavor, n_items, len).map_err(|why| Error::Format {
            path: path.to_path_buf(),
            reason: format!("the {} of {k} has {len} entries, {why}", row_noun(flavor)),
        })?;
    }
    Ok(keys)
}

/// Rows are copied through as text, so each is checked first (check_row): the kind of its
/// entries, its start, no entry twice, no entry outside the run (`items`, where known).
fn check_rows(parts: &[ShardPart], flavor: &Flavor, items: Option<&KeySet>) -> Result<()> {
    let (mut kind, mut marks) = (None, Marks::default());
    for p in parts {
        for (key, raw) in &p.rows {
            check_row(
                key,
                raw.get(),
                flavor.own_first,
                &mut kind,
                &mut marks,
                items,
            )
            .map_err(|why| Error::Format {
                path: p.path.to_path_buf(),
                reason: format!(
                    "the {} of {} {why}",
                    row_noun(flavor),
                    Value::String(key.clone())
                ),
            })?;
        }
    }
    Ok(())
}

/// The run's metadata: the first shard's, the shard keys dropped, the latest generated_at.
fn merged_metadata(parts: &[ShardPart], flavor: &Flavor) -> Result<Vec<u8>> {
    let generated_at = parts.iter().filter_map(|p| p.meta("generated_at")).max();
    let mut meta = Vec::from(&b"{"[..]);
    for (k, v) in parts[0]
        .metadata
        .iter()
        .filter(|(k, _)| !flavor.keys.contains(&k.as_str()) && k != CHECKSUM_KEY)
    {
        if meta.len() > 1 {
            meta.push(b',');
        }
        serde_json::to_writer(&mut meta, k).map_err(|e| Error::Invalid(e.to_string()))?;
        meta.push(b':');
        let v = if k == "generated_at" {
            generated_at.unwrap_or(v.get())
        } else {
            v.get()
        };
        meta.extend_from_slice(v.as_bytes());
    }
    meta.push(b'}');
    Ok(meta)
}

/// The merged cache: the rows of the `count` parts (sorted by index) in the one-shot run's order,
/// copied through as text a piece at a time (never more than the `input_bytes` hold).
fn write_merged(
    out: &Path,
    flavor: &Flavor,
    meta: &[u8],
    (parts, count): (&[ShardPart], usize),
    input_bytes: usize,
) -> Result<()> {
    let (layout, total) = (parts[0].layout, parts[0].total);
    let mut stream =
        JsonStream::create(out, flavor.stream, meta, flavor.rows, None, flavor.checksum)?;
    // The one-shot run's order: the shards one after another, or position p from shard
    // p mod n (its row p div n).
    let order: Box<dyn Iterator<Item = (usize, usize)>> = match layout {
        ShardLayout::Contiguous => Box::new(
            parts
                .iter()
                .enumerate()
                .flat_map(|(s, p)| (0..p.rows.len()).map(move |i| (s, i))),
        ),
        ShardLayout::Strided => Box::new((0..total).map(|pos| (pos % count, pos / count))),
    };
    let mut buf = Vec::with_capacity(PIECE_BYTES.min(input_bytes) + (1 << 16));
    for (s, i) in order {
        let (key, raw) = &parts[s].rows[i];
        buf.push(b',');
        serde_json::to_writer(&mut buf, key).map_err(|e| Error::Invalid(e.to_string()))?;
        buf.push(b':');
        buf.extend_from_slice(raw.get().as_bytes());
        if buf.len() >= PIECE_BYTES {
            stream.write_formatted(&mut buf)?;
        }
    }
    stream.write_formatted(&mut buf)?;
    stream.finish()?;
    Ok(())
}

/// N, the run's items, from the metadata (`num_poems` / `total_poems`), checked against the
/// `total` rows of the whole run: a rankings run ranks every item (N = total, required); a
/// diversity run has at most N starts (checked when the metadata names N).
fn check_items_total(first: &ShardPart, flavor: &Flavor, total: usize) -> Result<Option<usize>> {
    let bad = |reason: String| Error::Format {
        path: first.path.to_path_buf(),
        reason,
    };
    let key = flavor.items;
    let n = match first.meta(key) {
        None if flavor.own_first => return Ok(None),
        None => {
            return Err(bad(format!(
                "not a rankings shard: its metadata has no {key}"
            )))
        }
        Some(raw) => serde_json::from_str::<u64>(raw)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad(format!("metadata {key} is {raw}, not a count of items")))?,
    };
    match flavor.own_first {
        true if total > n => Err(bad(format!(
            "metadata {key} is {n}, but the run has {total} starts (at most one per item)"
        ))),
        false if total != n => Err(bad(format!(
            "metadata {key} is {n}, but {} is {total}: a rankings run ranks every item",
            flavor.total
        ))),
        _ => Ok(Some(n)),
    }
}

/// Check the rows' length `len` against the run's `top_k` (when the metadata gives it as a
/// number, or null for all): a sequence holds its start and `top_k` steps; a ranking
/// `min(top_k, N − 1)` other items (N − 1 for null).
fn check_row_len(
    first: &ShardPart,
    flavor: &Flavor,
    n: Option<usize>,
    len: usize,
) -> std::result::Result<(), String> {
    let top_k: Option<Option<u64>> = first
        .meta("top_k")
        .and_then(|raw| serde_json::from_str::<Option<u64>>(raw).ok());
    let want = match (flavor.own_first, top_k, n) {
        (true, Some(Some(k)), _) => k.checked_add(1),
        (false, Some(Some(k)), Some(n)) => Some(k.min(n.saturating_sub(1) as u64)),
        (false, Some(None), Some(n)) => Some(n.saturating_sub(1) as u64),
        _ => return Ok(()),
    };
    match want {
        Some(w) if w == len as u64 => Ok(()),
        _ => Err(format!(
            "but the run's top_k ({}) and N ({}) make rows of {}",
            first.meta("top_k").unwrap_or("?"),
            n.map_or_else(|| "?".to_string(), |n| n.to_string()),
            want.map_or_else(|| "more".to_string(), |w| w.to_string())
        )),
    }
}

/// One row, in messages: "sequence" or "ranking".
fn row_noun(flavor: &Flavor) -> &'static str {
    match flavor.own_first {
        true => "sequence",
        false => "ranking",
    }
}
