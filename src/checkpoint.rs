//! The cache job's checkpoint format (`<out>.partial/`), the mechanics behind the driver's
//! `--resume`: what run.txt says (the run's fingerprint and start time), the names of the batch
//! files, the checksums that bind each batch file to its run, batch and starts, the header of a
//! `.part` block, and the checks a resume makes before it trusts a file (the rows' meaning as
//! well as their checksums). The Lua driver decides when to write and
//! read; the bytes and the refusals are written here, once. May touch the file system (reading
//! a checkpoint directory, never writing it) and `crate::checksum` / [`crate::files`]'s
//! checksums; nothing else in the crate.
//!
//! A checkpoint directory holds `run.txt`, and per batch b (1-based) `batch-<b:05>.u32` (the
//! finished rows, uint32 little-endian, row-major) with `batch-<b:05>.u32.sum` (its checksum,
//! [`batch_checksum`]), or `batch-<b:05>.part` (the steps so far: blocks of
//! [`part_block_head`] + `rows × count` uint32, each block the next `count` entries of every
//! row).

use crate::checksum::{fnv1a64, FNV64_START};
use crate::error::{Error, Result};
use crate::files::{bytes_checksum, file_checksum, words_checksum};
use std::path::Path;

/// The file that says which run a checkpoint belongs to.
pub const RUN_FILE: &str = "run.txt";

/// The version line of run.txt. v7: batch data checksummed with [`words_checksum`]; v6: each
/// batch file's checksum also covers the run (its run.txt), the batch's index and its starts
/// ([`batch_binding`]), and run.txt holds generated_at; v5: the gram arithmetic that runs (the
/// `summation` of the cache's metadata) instead of the plain_sums and judge options; v4: the
/// input's content checksum, the whole starts list and checksummed checkpoint files (v3 had
/// the path and the starts' count, first and last only).
pub const VERSION: &str = "v7";

/// The finished-batch file of batch `b` (1-based): `batch-00001.u32`.
pub fn batch_file(b: usize) -> String {
    format!("batch-{b:05}.u32")
}

/// The in-progress file of batch `b` (1-based): `batch-00001.part`.
pub fn part_file(b: usize) -> String {
    format!("batch-{b:05}.part")
}

/// Whether `name` is a file the driver writes in a checkpoint directory (any run's).
pub fn is_checkpoint_file(name: &str) -> bool {
    if name == RUN_FILE || name == "generated_at.txt" {
        return true;
    }
    if let Some(rest) = name.strip_prefix("grow-") {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        return digits > 0 && &rest[digits..] == ".u32";
    }
    let Some(rest) = name.strip_prefix("batch-") else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && matches!(&rest[digits..], ".u32" | ".u32.sum" | ".u32.tmp" | ".part")
}

/// The driver's files in the checkpoint directory `ckdir` (names only, in byte order; none
/// when it does not exist).
pub fn checkpoint_files(ckdir: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(ckdir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| is_checkpoint_file(n))
        .collect();
    names.sort();
    names
}

/// A checksum of a starts list (FNV-1a, 32 bits, over "s1,s2,…"), `"fnv1a32:xxxxxxxx"`: shards
/// record the whole run's, so that merge refuses parts cut from different lists.
pub fn starts_fingerprint(starts: &[u64]) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |s: &[u8]| {
        for &b in s {
            h ^= b as u32;
            h = h.wrapping_mul(16_777_619);
        }
    };
    for (k, s) in starts.iter().enumerate() {
        if k > 0 {
            feed(b",");
        }
        feed(s.to_string().as_bytes());
    }
    format!("fnv1a32:{h:08x}")
}

/// What a run is, for run.txt: every input and option that changes the bytes of the output.
#[derive(Clone, Debug)]
pub struct RunFingerprint<'a> {
    /// The input file's path (`--embeddings`).
    pub input: &'a str,
    /// The input's content checksum ([`file_checksum`]); `None` writes "none".
    pub input_checksum: Option<String>,
    /// Whether the column mean is subtracted.
    pub center: bool,
    /// Storage on the device ("fp32", "fp16").
    pub precision: &'a str,
    /// The engine that runs ("scan", "gram").
    pub mode: &'a str,
    /// The gram arithmetic (the cache metadata's `summation`); `None` writes "none".
    pub summation: Option<&'a str>,
    /// Steps a sequence.
    pub steps: u64,
    /// Sequences a batch.
    pub batch: u64,
    /// The starts of this run, in order.
    pub starts: &'a [u64],
    /// The table's rows and dimension.
    pub n: u64,
    /// The table's dimension.
    pub dim: u64,
}

impl RunFingerprint<'_> {
    /// The input's content checksum, read from the file.
    pub fn checksum_input(path: &str) -> Result<String> {
        file_checksum(Path::new(path))
    }

    /// The fingerprint as "key=value" lines, each ended by a newline.
    pub fn text(&self) -> String {
        let lines = [
            ("version", VERSION.to_string()),
            ("input", self.input.to_string()),
            (
                "input_checksum",
                self.input_checksum.clone().unwrap_or_else(|| "none".into()),
            ),
            ("center", self.center.to_string()),
            ("precision", self.precision.to_string()),
            ("mode", self.mode.to_string()),
            ("summation", self.summation.unwrap_or("none").to_string()),
            ("steps", self.steps.to_string()),
            ("batch", self.batch.to_string()),
            (
                "starts",
                format!("{}, {}", self.starts.len(), starts_fingerprint(self.starts)),
            ),
            ("table", format!("{} x {}", self.n, self.dim)),
        ];
        lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

/// The text of run.txt: the run's fingerprint `fp` and when it started (a last line
/// `generated_at=…`, kept by a resume: [`checkpoint_time`]).
pub fn run_text(fp: &str, generated_at: &str) -> String {
    format!("{fp}generated_at={generated_at}\n")
}

/// The `key=` matches of `text` the way the driver has always found them (a run of letters,
/// digits and `_` followed by `=`, scanning left to right), each with the rest of its line.
fn keys(text: &str) -> Vec<(&str, &str)> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        let mut j = i;
        while j < b.len() && word(b[j]) {
            j += 1;
        }
        if j > i && j < b.len() && b[j] == b'=' {
            let mut e = j + 1;
            while e < b.len() && b[e] != b'\n' {
                e += 1;
            }
            out.push((&text[i..j], &text[j + 1..e]));
            i = e;
        } else {
            i += 1;
        }
    }
    out
}

/// The keys whose values differ between two fingerprints, as "key: here now, there in the
/// checkpoint", joined by "; ", in the order `now` writes them.
pub fn fingerprint_diff(now: &str, saved: &str) -> String {
    let map = |t| {
        let mut m = std::collections::HashMap::new();
        for (k, v) in keys(t) {
            m.insert(k, v);
        }
        m
    };
    let (a, b) = (map(now), map(saved));
    let diff = keys(now)
        .iter()
        .filter(|(k, _)| a.get(k) != b.get(k))
        .map(|(k, _)| {
            let (now_v, saved_v) = (a.get(k).copied(), b.get(k).copied());
            let hint = match (*k, saved_v) {
                ("summation", Some(s)) => summation_hint(s),
                _ => String::new(),
            };
            format!(
                "{k}: {} now, {} in the checkpoint{hint}",
                now_v.unwrap_or("nil"),
                saved_v.unwrap_or("(missing: an older checkpoint format)")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if !diff.is_empty() {
        return diff;
    }
    // Every key has the same value, yet the texts differ: a key twice, lines reordered, text
    // that is no key=value line. Name the first line that differs.
    let (now_lines, saved_lines): (Vec<&str>, Vec<&str>) =
        (now.lines().collect(), saved.lines().collect());
    let at = (0..now_lines.len().max(saved_lines.len()))
        .find(|&i| now_lines.get(i) != saved_lines.get(i))
        .unwrap_or(0);
    let shown = |l: Option<&&str>| match l {
        Some(l) => format!("'{l}'"),
        None => "nothing".to_string(),
    };
    format!(
        "line {} of its run.txt reads {}, where this run writes {}",
        at + 1,
        shown(saved_lines.get(at)),
        shown(now_lines.get(at))
    )
}

/// How to resume a gram checkpoint whose `summation` (the arithmetic it was written with) is
/// `saved`: the flags that select that arithmetic again, as " (…)", or why none do.
fn summation_hint(saved: &str) -> String {
    let flags = match saved {
        "fixed; G dot64" => {
            "written with fixed-point keys, the default where the device has float64: resume \
             without --compensated-sums, --plain-sums, --judge and --no-judge, on a device of \
             the same kind"
        }
        "compensated; G dot2" => "resume with --compensated-sums --no-judge",
        "plain; G dot2" => "resume with --plain-sums --no-judge",
        s if s.starts_with("compensated; G dot2; judge2") => {
            "resume with --compensated-sums --judge"
        }
        s if s.starts_with("plain; G dot2; judge3") => "resume with --plain-sums --judge",
        s if !s.contains("G dot") || s.contains("judge;") || s.ends_with("judge") => {
            "written by an older version whose arithmetic this one does not run: remove the \
             checkpoint to start over"
        }
        _ => return String::new(),
    };
    format!(" ({flags})")
}

/// `text` without its `generated_at=…` lines (every "generated_at=" up to and with the next
/// newline).
fn without_generated_at(text: &str) -> String {
    const KEY: &str = "generated_at=";
    let (mut out, mut rest) = (String::new(), text);
    while let Some(i) = rest.find(KEY) {
        match rest[i + KEY.len()..].find('\n') {
            Some(nl) => {
                out.push_str(&rest[..i]);
                rest = &rest[i + KEY.len() + nl + 1..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// Check that the checkpoint in `ckdir` belongs to the run whose fingerprint is `fp` and whose
/// run.txt reads `run_text`: a fingerprint that differs is refused naming what differs, a
/// run.txt edited otherwise as such; batch files without a run.txt are refused, as nothing
/// says which run wrote them. The messages are the driver's `--resume` refusals (without its
/// "diversity: --resume: " prefix).
pub fn check_run_file(ckdir: &str, fp: &str, run_text: &str) -> Result<()> {
    let text = read(&Path::new(ckdir).join(RUN_FILE));
    let text = text.map(|t| String::from_utf8_lossy(&t).into_owned());
    let saved = text.as_deref().map(without_generated_at);
    if let Some(saved) = &saved {
        if saved != fp {
            return Err(Error::Invalid(format!(
                "the checkpoint in {ckdir} belongs to another run ({})",
                fingerprint_diff(fp, saved)
            )));
        }
    }
    if let Some(text) = &text {
        if text != run_text {
            return Err(Error::Invalid(format!(
                "{ckdir}/run.txt was changed after it was written (its generated_at line); \
                 remove {ckdir} to start over"
            )));
        }
    }
    if saved.is_none() {
        if let Some(name) = checkpoint_files(Path::new(ckdir))
            .into_iter()
            .find(|n| n.starts_with("batch"))
        {
            return Err(Error::Invalid(format!(
                "the checkpoint in {ckdir} has batch files ({name}) but no run.txt, so nothing \
                 says which run they belong to; remove {ckdir} to start over"
            )));
        }
    }
    Ok(())
}

/// When the run checkpointed in `ckdir` started (its run.txt's last line's generated_at, a UTC
/// time "YYYY-MM-DDTHH:MM:SSZ"), or `None` when there is none.
pub fn checkpoint_time(ckdir: &Path) -> Option<String> {
    let text = read(&ckdir.join(RUN_FILE))?;
    const KEY: &[u8] = b"\ngenerated_at=";
    let tail = text.len().checked_sub(KEY.len() + 20 + 1)?;
    let (head, time) = (&text[tail..tail + KEY.len()], &text[tail + KEY.len()..]);
    let shape = b"dddd-dd-ddTdd:dd:ddZ\n";
    let fits = head == KEY
        && time.iter().zip(shape).all(|(&c, &s)| match s {
            b'd' => c.is_ascii_digit(),
            _ => c == s,
        });
    fits.then(|| String::from_utf8_lossy(&time[..20]).into_owned())
}

/// The starts joined by commas ("0,5,9").
fn joined(starts: &[u64]) -> String {
    starts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What binds a checkpoint file to its run and its place: the run (the text of its run.txt),
/// the batch's index `b` and its starts, as one line that every checksum of the batch's files
/// covers. A file written by another run, or for another batch, fails its checksum.
pub fn batch_binding(run_text: &str, b: u64, starts: &[u64]) -> String {
    format!(
        "run={} batch={b} starts={},{}",
        bytes_checksum(run_text.as_bytes()),
        starts.len(),
        bytes_checksum(joined(starts).as_bytes())
    )
}

/// The checksum of a finished batch file (its `.sum` file's whole text): its `binding`
/// ([`batch_binding`]) and its bytes.
pub fn batch_checksum(binding: &str, bytes: &[u8]) -> String {
    bytes_checksum(format!("{binding}\n{}", words_checksum(bytes)).as_bytes())
}

/// The 16-byte header of a `.part` block holding entries `from .. from + count` of every row
/// (`bytes`, row-major, `count` entries a row): from, count and a checksum over `binding`, the
/// block's place and its bytes, as four little-endian u32.
pub fn part_block_head(binding: &str, from: u32, count: u32, bytes: &[u8]) -> [u8; 16] {
    let h = fnv1a64(
        FNV64_START,
        format!(
            "{binding} from={from} count={count} {}",
            words_checksum(bytes)
        )
        .as_bytes(),
    );
    let mut head = [0u8; 16];
    head[0..4].copy_from_slice(&from.to_le_bytes());
    head[4..8].copy_from_slice(&count.to_le_bytes());
    head[8..12].copy_from_slice(&(h as u32).to_le_bytes());
    head[12..16].copy_from_slice(&((h >> 32) as u32).to_le_bytes());
    head
}

/// Check rows the way the cache readers do: `bytes` holds `starts.len()` rows of `len` uint32
/// entries (row-major, little-endian); row i must start with its start, hold no entry twice
/// and none at or past `n`. `None`, or a description of the first bad row (rows 1-based).
pub fn check_rows(bytes: &[u8], starts: &[u64], len: usize, n: usize) -> Option<String> {
    if bytes.len() != starts.len() * len * 4 {
        return Some(format!(
            "{} bytes, not {} rows of {len} entries",
            bytes.len(),
            starts.len()
        ));
    }
    let word = |k: usize| u32::from_le_bytes(bytes[k * 4..k * 4 + 4].try_into().expect("4"));
    let mut seen = vec![0usize; n];
    for (r, &start) in starts.iter().enumerate() {
        let (i, base) = (r + 1, r * len);
        if len > 0 && word(base) as u64 != start {
            return Some(format!(
                "row {i} starts with {}, not its start {start}",
                word(base)
            ));
        }
        for k in base..base + len {
            let v = word(k) as usize;
            if v >= n {
                return Some(format!(
                    "row {i} (start {start}) holds {v}, not below N = {n}"
                ));
            }
            if seen[v] == i {
                return Some(format!("row {i} (start {start}) holds {v} twice"));
            }
            seen[v] = i;
        }
    }
    None
}

/// A checkpoint file a resume cannot take.
fn refused(path: &str, why: &str) -> Error {
    Error::Invalid(format!(
        "checkpoint {path} was changed after it was written, or written for another run or \
         batch ({why}); remove {path} to start over"
    ))
}

/// A finished batch from the checkpoint file `path` (the rows of `starts`, `len` entries each,
/// of a table of `n` rows), or `None` when there is none. Taken only when its checksum file
/// matches its bytes and `binding` (this run, this batch) and its rows pass [`check_rows`].
pub fn read_batch(
    path: &str,
    binding: &str,
    starts: &[u64],
    len: usize,
    n: usize,
) -> Result<Option<Vec<u8>>> {
    let Some(bytes) = read(Path::new(path)) else {
        return Ok(None);
    };
    let Some(sum) = read(Path::new(&format!("{path}.sum"))) else {
        return Err(refused(path, "its checksum file is missing"));
    };
    if sum != batch_checksum(binding, &bytes).as_bytes() {
        return Err(refused(path, "its checksum differs"));
    }
    if let Some(bad) = check_rows(&bytes, starts, len, n) {
        return Err(refused(path, &format!("its checksum matches, but {bad}")));
    }
    Ok(Some(bytes))
}

/// A batch's in-progress checkpoint read back: the rows' first `have` entries, row-major, and
/// `have`; `None` when there is none. Each block carries its checksum over `binding` and its
/// bytes: a torn last block (a crash mid-write) and anything after a gap are ignored; a whole
/// block that fails its checksum (edited, or written for another run or batch) is an error.
pub fn read_part(path: &str, rows: usize, binding: &str) -> Result<Option<(Vec<u8>, usize)>> {
    let Some(s) = read(Path::new(path)) else {
        return Ok(None);
    };
    let u32_at = |p: usize| u32::from_le_bytes(s[p..p + 4].try_into().expect("4"));
    let (mut blocks, mut pos, mut len) = (Vec::new(), 0usize, 0usize);
    while pos + 16 <= s.len() {
        let (from, count) = (u32_at(pos), u32_at(pos + 4));
        let size = rows * count as usize * 4;
        if from as usize != len || count == 0 || pos + 16 + size > s.len() {
            break;
        }
        let data = &s[pos + 16..pos + 16 + size];
        if part_block_head(binding, from, count, data)[8..] != s[pos + 8..pos + 16] {
            return Err(Error::Invalid(format!(
                "checkpoint {path} was changed after it was written, or was written for \
                 another run or batch (steps {}..{} fail their checksum); remove {path} to \
                 start over",
                from as u64 + 1,
                from as u64 + count as u64
            )));
        }
        blocks.push((pos + 16, count as usize));
        len += count as usize;
        pos += 16 + size;
    }
    if len == 0 {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(rows * len * 4);
    for r in 0..rows {
        for &(at, count) in &blocks {
            out.extend_from_slice(&s[at + r * count * 4..at + (r + 1) * count * 4]);
        }
    }
    Ok(Some((out, len)))
}

/// The steps so far of an unfinished batch ([`read_part`]) of the rows of `starts`, checked
/// by [`check_rows`] as well as by their checksums: the prefix and the entries a row it holds.
pub fn read_part_rows(
    path: &str,
    binding: &str,
    starts: &[u64],
    n: usize,
) -> Result<Option<(Vec<u8>, usize)>> {
    let Some((prefix, have)) = read_part(path, starts.len(), binding)? else {
        return Ok(None);
    };
    if let Some(bad) = check_rows(&prefix, starts, have, n) {
        return Err(refused(
            path,
            &format!("its first {have} entries a row: {bad}"),
        ));
    }
    Ok(Some((prefix, have)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_and_names() {
        // FNV-1a 32 of "" and of "a" (published vectors), and of a list.
        assert_eq!(starts_fingerprint(&[]), "fnv1a32:811c9dc5");
        assert_eq!(batch_file(3), "batch-00003.u32");
        assert_eq!(part_file(12), "batch-00012.part");
        assert!(is_checkpoint_file("batch-00003.u32.sum"));
        assert!(!is_checkpoint_file("batch-.u32"));
        assert!(!is_checkpoint_file("notes.txt"));
        let diff = fingerprint_diff("a=1\nb=2\n", "a=1\nb=3\n");
        assert_eq!(diff, "b: 2 now, 3 in the checkpoint");
        assert_eq!(
            fingerprint_diff("a=1\nc=2\n", "a=1\n"),
            "c: 2 now, (missing: an older checkpoint format) in the checkpoint"
        );
        // A gram checkpoint says which flags select its arithmetic again.
        assert_eq!(
            fingerprint_diff(
                "summation=compensated; G dot2; judge2 refresh 4096\n",
                "summation=compensated; G dot2\n"
            ),
            "summation: compensated; G dot2; judge2 refresh 4096 now, compensated; G dot2 in the \
             checkpoint (resume with --compensated-sums --no-judge)"
        );
        // Fixed-point keys, resumed with --compensated-sums: not --no-judge (refused again).
        let d = fingerprint_diff(
            "summation=compensated; G dot2; judge2\n",
            "summation=fixed; G dot64\n",
        );
        assert!(d.ends_with("(written with fixed-point keys, the default where the device has float64: resume without --compensated-sums, --plain-sums, --judge and --no-judge, on a device of the same kind)"), "{d}");
        assert!(!d.contains("resume with --no-judge"), "{d}");
        assert!(fingerprint_diff(
            "summation=fixed; G dot64\n",
            "summation=plain; G dot2; judge3\n"
        )
        .ends_with("(resume with --plain-sums --judge)"));
        assert!(
            fingerprint_diff("summation=fixed; G dot64\n", "summation=plain\n")
                .ends_with("remove the checkpoint to start over)")
        );
        // The same values, other text: a key twice is named, never "()".
        assert_eq!(
            fingerprint_diff("a=1\nb=2\n", "a=1\nb=2\nb=2\n"),
            "line 3 of its run.txt reads 'b=2', where this run writes nothing"
        );
        assert_eq!(
            fingerprint_diff("a=1\nb=2\n", "b=2\na=1\n"),
            "line 1 of its run.txt reads 'b=2', where this run writes 'a=1'"
        );
        assert_eq!(without_generated_at("a=1\ngenerated_at=x\n"), "a=1\n");
        assert_eq!(without_generated_at("generated_at=x"), "generated_at=x");
    }

    #[test]
    fn rows_are_checked() {
        let rows = |v: &[u32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        assert_eq!(check_rows(&rows(&[1, 0, 2, 0]), &[1, 2], 2, 3), None);
        assert_eq!(
            check_rows(&rows(&[1, 1]), &[1], 2, 3).as_deref(),
            Some("row 1 (start 1) holds 1 twice")
        );
        assert_eq!(
            check_rows(&rows(&[0, 1]), &[1], 2, 3).as_deref(),
            Some("row 1 starts with 0, not its start 1")
        );
        assert_eq!(
            check_rows(&rows(&[1, 3]), &[1], 2, 3).as_deref(),
            Some("row 1 (start 1) holds 3, not below N = 3")
        );
    }
}
