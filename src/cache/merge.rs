//! Shards: partial caches of one run (`--shard i/n`), and [`merge_caches`] /
//! [`merge_rankings`] merging them back into the one-shot diversity / rankings cache.

use super::json_stream::{JsonStream, PIECE_BYTES};
use super::pending::{io_err, PendingFile};
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The metadata keys a shard — the partial cache of a `--shard i/n` run — carries on top of the
/// run's own, all removed by [`merge_caches`]: `"shard":"i/n"` (1-based), `"shard_layout"`
/// (`"contiguous"` or `"strided"`), `"shard_starts_total"` (starts in the whole run) and
/// `"shard_starts_fingerprint"` (a checksum of the whole run's starts list).
pub const SHARD_KEYS: [&str; 4] = [
    "shard",
    "shard_layout",
    "shard_starts_total",
    "shard_starts_fingerprint",
];

/// The metadata keys a shard of a rankings run carries on top of the run's own, all removed by
/// [`merge_rankings`]: `"shard":"i/n"` (1-based), `"shard_layout"` and `"shard_items_total"`
/// (N, the items of the whole run: a shard ranks its slice of the items 0..N against all N).
pub const RANKINGS_SHARD_KEYS: [&str; 3] = ["shard", "shard_layout", "shard_items_total"];

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

/// A JSON object's members in file order, each value's text as it is in the file.
struct RawEntries<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for RawEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawEntries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    out.push((key, map.next_value()?));
                }
                Ok(RawEntries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A cache's members `metadata` and `sequences` or `rankings` (others skipped), read in one pass.
struct CacheEntries<'a> {
    metadata: Option<RawEntries<'a>>,
    sequences: Option<RawEntries<'a>>,
    rankings: Option<RawEntries<'a>>,
}

impl<'de> serde::Deserialize<'de> for CacheEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CacheEntries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object {\"metadata\":{…},\"sequences\" or \"rankings\":{…}}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = CacheEntries {
                    metadata: None,
                    sequences: None,
                    rankings: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" => out.metadata = Some(map.next_value()?),
                        "sequences" => out.sequences = Some(map.next_value()?),
                        "rankings" => out.rankings = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
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

/// Check the row text `raw` of `key` before it is copied into a merged cache: every entry a row
/// index (a non-negative integer) or every entry an id (a string), the same kind as every row
/// before (`kind`), no entry twice, and the first entry the key itself (a sequence, `own_first`)
/// or the key nowhere in it (a ranking).
fn check_row(
    key: &str,
    raw: &str,
    own_first: bool,
    kind: &mut Option<RowKind>,
    marks: &mut Marks,
) -> std::result::Result<(), String> {
    let (this, first, own) = if let Ok(v) = serde_json::from_str::<Vec<u64>>(raw) {
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
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut commas, mut any) = (0usize, false);
    for &c in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
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
                in_string = c == b'"';
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

/// Check that `part`'s metadata is `first`'s, but for `shard` and `generated_at` (shards run at
/// different times; [`merge_caches`] keeps the latest): the same keys in the same order, the
/// same values.
fn check_same_run(first: &ShardPart, part: &ShardPart) -> Result<()> {
    let skip = |k: &str| k == "shard" || k == "generated_at";
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
    for p in &parts {
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
        let absent = count - parts.len();
        let named = if absent <= 16 {
            (1..=count)
                .filter(|i| !seen.contains_key(i))
                .map(|i| format!("{i}/{count}"))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!("{absent} of {count}")
        };
        return Err(Error::Invalid(format!(
            "{}: cannot merge: shard(s) {named} missing (given: {})",
            out.display(),
            parts
                .iter()
                .map(|p| format!("{} = {}/{count}", p.path.display(), p.index))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    parts.sort_by_key(|p| p.index);
    let (layout, total) = (parts[0].layout, parts[0].total);
    // Not more than the rows present: `total` comes from the files (checked shard by shard
    // below against the rows each holds).
    let held: usize = parts.iter().map(|p| p.rows.len()).sum();
    let mut keys: HashMap<&str, &Path> = HashMap::with_capacity(total.min(held));
    let mut row_len = None;
    // Rows are copied through as text, so each is checked first (check_row): the kind of its
    // entries, its start, no entry twice.
    let (mut kind, mut marks) = (None, Marks::default());
    for p in &parts {
        let want = shard_len(p.index, count, total);
        let bad = |reason: String| Error::Format {
            path: p.path.to_path_buf(),
            reason,
        };
        if p.rows.len() != want {
            return Err(bad(format!(
                "shard {}/{count} holds {} {}, but the {} shard {} of {count} of a run of \
                 {total} {} holds {want}",
                p.index,
                p.rows.len(),
                flavor.noun,
                layout.name(),
                p.index,
                flavor.total_noun
            )));
        }
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
            check_row(key, raw.get(), flavor.own_first, &mut kind, &mut marks)
                .map_err(|why| bad(format!("the {} of {shown} {why}", row_noun(flavor))))?;
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
    // The run's metadata: the shard keys dropped, the latest generated_at.
    let generated_at = parts.iter().filter_map(|p| p.meta("generated_at")).max();
    let mut meta = Vec::from(&b"{"[..]);
    for (k, v) in parts[0]
        .metadata
        .iter()
        .filter(|(k, _)| !flavor.keys.contains(&k.as_str()))
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
    let mut stream = JsonStream::create(out, flavor.stream, &meta, flavor.rows, None)?;
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
    // A piece of output at a time, never more than the inputs hold.
    let input_bytes: usize = texts.iter().map(|t| t.len()).sum();
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
    Ok(MergeReport {
        shards: count,
        layout,
        sequences: total,
    })
}

/// One row, in messages: "sequence" or "ranking".
fn row_noun(flavor: &Flavor) -> &'static str {
    match flavor.own_first {
        true => "sequence",
        false => "ranking",
    }
}
