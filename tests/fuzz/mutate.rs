//! Seeds (small valid files from the project's writers) and the mutations that turn them into
//! inputs.

use super::*;

// ---------------------------------------------------------------------------------------------
// Seeds.

fn sample(n: usize, d: usize) -> Table {
    let data = (0..n * d)
        .map(|i| ((i as f32) * 0.37 - 3.1).sin() * 10f32.powi((i % 5) as i32 - 2))
        .collect();
    Table::new(data, n, d).expect("sample table")
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

pub(super) fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus")
}

/// The seeds of every target, written by the project's writers into `dir`.
pub(super) fn seeds(dir: &Path) -> Vec<Case> {
    std::fs::create_dir_all(dir).expect("seed dir");
    let read = |name: &str| std::fs::read(dir.join(name)).expect("read seed");
    let one = |target: Target, main: &str, bytes: Vec<u8>| Case {
        target,
        files: vec![(main.to_string(), bytes)],
        main: main.to_string(),
        dim: None,
        expect: false,
    };
    let mut out = Vec::new();

    // .npy: float32 and float16 from the writers, slices of the bundled arrays, versions 2 and 3,
    // a Python 2 header.
    let mut npys = Vec::new();
    save_npy_f32(&dir.join("a.npy"), &sample(3, 5)).unwrap();
    npys.push(read("a.npy"));
    save_npy_f16(&dir.join("b.npy"), &sample(4, 3)).unwrap();
    npys.push(read("b.npy"));
    save_npy_f32(&dir.join("c.npy"), &sample(1, 1)).unwrap();
    npys.push(read("c.npy"));
    for (name, rows) in [("fortunes-2k.npy", 2), ("fortunes-5k.npy", 1)] {
        let t = load_npy(&data_dir().join(name)).expect("bundled data");
        let t = t.head(rows).unwrap();
        let t = Table::new(t.data()[..rows * 24].to_vec(), rows, 24).unwrap();
        save_npy_f16(&dir.join("d.npy"), &t).unwrap();
        npys.push(read("d.npy"));
    }
    let v1 = npys[0].clone();
    let header_len = u16::from_le_bytes([v1[8], v1[9]]) as usize;
    for major in [2u8, 3] {
        let mut v = b"\x93NUMPY".to_vec();
        v.extend_from_slice(&[major, 0]);
        v.extend_from_slice(&(header_len as u32).to_le_bytes());
        v.extend_from_slice(&v1[10..]);
        npys.push(v);
    }
    let py2 = String::from_utf8_lossy(&v1[10..10 + header_len]).replace("(3, 5)", "(3L, 5L)");
    let mut v = v1[..8].to_vec();
    v.extend_from_slice(&(py2.len() as u16).to_le_bytes());
    v.extend_from_slice(py2.as_bytes());
    v.extend_from_slice(&v1[10 + header_len..]);
    npys.push(v);
    for b in &npys {
        out.push(one(Target::Npy, "x.npy", b.clone()));
    }

    // embeddings.json: with ids and poem_index (out of order), without ids, a bundled slice.
    let mut jsons = Vec::new();
    jsons.push(
        br#"{"metadata":{"model":"m","dim":4},"embeddings":[{"poem_index":2,"id":"c","embedding":[0.5,-1.25,3e-3,7]},{"poem_index":0,"id":"a","embedding":[1,2,3,4]},{"poem_index":1,"id":17,"embedding":[-0.0,1e10,-2.5e-7,0.1]}]}"#
            .to_vec(),
    );
    jsons.push(br#"{"embeddings":[{"embedding":[1.5,2]},{"embedding":[3,-4.75]}]}"#.to_vec());
    {
        let text = std::fs::read(data_dir().join("fortunes-300.embeddings.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let e = v["embeddings"].as_array_mut().unwrap();
        e.truncate(3);
        for entry in e.iter_mut() {
            entry["embedding"].as_array_mut().unwrap().truncate(12);
        }
        jsons.push(serde_json::to_vec_pretty(&v).unwrap());
    }
    for b in &jsons {
        out.push(one(Target::Json, "x.json", b.clone()));
    }

    // .f32: raw rows, read with a dimension.
    let raw: Vec<u8> = sample(3, 4)
        .data()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut f32s = one(Target::F32, "x.f32", raw.clone());
    f32s.dim = Some(4);
    out.push(f32s);

    // fp16 .bin with its sidecar.
    save_fp16_bin(&dir.join("x.bin"), &sample(3, 4), FP16_SPACE, FP16_CHECKSUM).unwrap();
    let bin = Case {
        target: Target::Fp16Bin,
        files: vec![
            ("x.bin".into(), read("x.bin")),
            ("x.bin.json".into(), read("x.bin.json")),
        ],
        main: "x.bin".into(),
        dim: None,
        expect: true,
    };
    out.push(bin.clone());

    // ids.
    save_ids(
        &dir.join("x.ids.json"),
        Some(&[1.into(), "two".into(), serde_json::json!(3.5)]),
        3,
        IDS_SOURCE,
    )
    .unwrap();
    out.push(one(Target::Ids, "x.ids.json", read("x.ids.json")));

    // load_table: the same contents under its four extensions.
    for b in npys.iter().take(2) {
        out.push(one(Target::Table, "x.npy", b.clone()));
    }
    out.push(one(Target::Table, "x.json", jsons[0].clone()));
    let mut t = one(Target::Table, "x.f32", raw);
    t.dim = Some(3);
    out.push(t);
    out.push(Case {
        target: Target::Table,
        ..bin
    });

    // Binary caches: full sequences and top_k rows.
    for (n, len) in [(5usize, 5usize), (4, 2)] {
        let p = dir.join("x.cache");
        let mut w = BinaryCacheWriter::create(&p, n, len).unwrap();
        for s in 0..n as u32 {
            let seq: Vec<u32> = (0..len as u32).map(|j| (s + j) % n as u32).collect();
            w.write_row(s, &seq).unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::BinCache, "x.cache", read("x.cache")));
    }

    // Shards of a --shard run, as merge_caches reads them: 5 starts in 2 contiguous shards, with
    // row indices and with ids.
    for ids in [None, Some(vec!["a", "b", "c", "d", "e", "f"])] {
        let ids: Option<Vec<serde_json::Value>> =
            ids.map(|v| v.into_iter().map(serde_json::Value::from).collect());
        let starts = [4u32, 0, 2, 5, 1];
        let mut files = Vec::new();
        for (i, part) in [(1usize, &starts[..3]), (2, &starts[3..])] {
            let name = format!("s{i}.json");
            let meta = serde_json::json!({
                "generated_at": "2026-01-01T00:00:00Z",
                "top_k": 2,
                "shard": format!("{i}/2"),
                "shard_layout": "contiguous",
                "shard_starts_total": 5,
                "shard_starts_fingerprint": "fnv1a32:00000000",
                "shard_table_checksum": "fnv1a64:0123456789abcdef",
            });
            let mut w = JsonCacheWriter::create(&dir.join(&name), &meta, ids.clone()).unwrap();
            for &st in part {
                w.write_sequence(st, &[st, (st + 1) % 6, (st + 3) % 6])
                    .unwrap();
            }
            w.finish().unwrap();
            files.push((name.clone(), read(&name)));
        }
        out.push(Case {
            target: Target::Merge,
            files,
            main: "s1.json".into(),
            dim: None,
            expect: false,
        });
    }

    // k-NN graphs: cosine without padding, L2 with.
    {
        let p = dir.join("x.knn");
        let mut w = KnnGraphWriter::create(&p, 5, 2, KnnMetric::Cosine).unwrap();
        for i in 0..5u32 {
            w.write_row(i, &[(i + 1) % 5, (i + 2) % 5], &[0.9, 0.5])
                .unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::Knn, "x.knn", read("x.knn")));
        let mut w = KnnGraphWriter::create(&p, 3, 3, KnnMetric::L2).unwrap();
        for i in 0..3u32 {
            w.write_row(
                i,
                &[(i + 1) % 3, (i + 2) % 3, KNN_PAD],
                &[1.0, 2.0, f32::INFINITY],
            )
            .unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::Knn, "x.knn", read("x.knn")));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Mutations.

const INTERESTING: [u64; 18] = [
    0,
    1,
    2,
    0x7F,
    0xFF,
    0xFFFF,
    0x1_0000,
    0x4000_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    0x1_0000_0000,
    1 << 61,
    1 << 62,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
];

const TOKENS: [&str; 16] = [
    "99999999999999999999999999999",
    "-1",
    "-0",
    "0",
    "1e309",
    "-1e309",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e-400",
    "4294967296",
    "18446744073709551616",
    "2147483648",
    "-9223372036854775809",
    "3.4e39",
    "65536",
];

const BYTES: [u8; 16] = [
    0, 0xFF, 0x7F, 0x80, b'(', b'[', b'{', b'"', b'\'', b',', b':', b'-', b'9', b'}', b')', 0x93,
];

/// Positions of the digit runs of `b` (start, end).
fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_digit() || b".eE+-".contains(&b[i])) {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// Starts of quoted keys (`'k':` or `"k":`) and the end of their pair (the next `,` or `}`).
fn key_pairs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, &q) in b.iter().enumerate() {
        if q != b'"' && q != b'\'' {
            continue;
        }
        let Some(len) = b[i + 1..].iter().position(|&c| c == q) else {
            continue;
        };
        let mut j = i + 1 + len + 1;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if b.get(j) != Some(&b':') {
            continue;
        }
        let end = b[j..]
            .iter()
            .position(|&c| c == b',' || c == b'}')
            .map_or(b.len(), |p| j + p);
        out.push((i, end));
    }
    out
}

/// One text-or-bytes mutation of `b` in place; its description.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, others: &[Vec<u8>]) -> String {
    let len = b.len();
    match rng.below(13) {
        0 if len > 0 => {
            let k = 1 + rng.below(8);
            for _ in 0..k {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            format!("flip {k} bits")
        }
        1 if len > 0 => {
            let i = rng.below(len);
            b[i] = *rng.pick(&BYTES);
            format!("byte {i} = {:#x}", b[i])
        }
        2 => {
            let i = rng.below(len + 1);
            let k = 1 + rng.below(16);
            let ins: Vec<u8> = (0..k).map(|_| rng.next() as u8).collect();
            b.splice(i..i, ins);
            format!("insert {k} bytes at {i}")
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let k = 1 + rng.below((len - i).min(32));
            b.drain(i..i + k);
            format!("delete {k} bytes at {i}")
        }
        4 => {
            let at = rng.below(len + 1);
            b.truncate(at);
            format!("truncate to {at}")
        }
        5 if len > 0 => {
            let width = *rng.pick(&[1usize, 2, 4, 8]);
            let at = if rng.chance(60) {
                rng.below(len.min(32))
            } else {
                rng.below(len)
            };
            let v = if rng.chance(80) {
                *rng.pick(&INTERESTING)
            } else {
                rng.next()
            };
            let bytes = v.to_le_bytes();
            for (j, &x) in bytes[..width].iter().enumerate() {
                if let Some(slot) = b.get_mut(at + j) {
                    *slot = x;
                }
            }
            format!("field at {at} ({width} bytes) = {v:#x}")
        }
        6 if len > 0 => {
            let i = rng.below(len);
            let k = 1 + rng.below((len - i).min(64));
            let times = 2 + rng.below(200);
            let chunk = b[i..i + k].to_vec();
            let rep: Vec<u8> = chunk.iter().copied().cycle().take(k * times).collect();
            b.splice(i..i + k, rep);
            format!("repeat {k} bytes at {i} × {times}")
        }
        7 if !others.is_empty() => {
            let o = rng.pick(others);
            let cut = rng.below(len + 1);
            let from = rng.below(o.len() + 1);
            b.truncate(cut);
            b.extend_from_slice(&o[from..]);
            format!("splice at {cut} with another seed from {from}")
        }
        8 => {
            let runs = digit_runs(b);
            let tok = *rng.pick(&TOKENS);
            if runs.is_empty() {
                let i = rng.below(len + 1);
                b.splice(i..i, tok.bytes());
                return format!("insert {tok} at {i}");
            }
            let (s, e) = *rng.pick(&runs);
            b.splice(s..e, tok.bytes());
            format!("number at {s} = {tok}")
        }
        9 => {
            let open = *rng.pick(b"([{");
            let close = match open {
                b'(' => b')',
                b'[' => b']',
                _ => b'}',
            };
            let depth = *rng.pick(&[8usize, 40, 200, 1_000, 30_000]);
            let i = rng.below(len + 1);
            let closed = rng.chance(50);
            let mut ins = vec![open; depth];
            if closed {
                ins.extend(std::iter::repeat_n(close, depth));
            }
            b.splice(i..i, ins);
            format!(
                "{depth} nested '{}'{} at {i}",
                open as char,
                if closed { " (closed)" } else { "" }
            )
        }
        10 => {
            let pairs = key_pairs(b);
            if pairs.is_empty() {
                return "no key to duplicate".into();
            }
            let (s, e) = *rng.pick(&pairs);
            let mut pair = b[s..e].to_vec();
            pair.extend_from_slice(b", ");
            b.splice(s..s, pair);
            format!("duplicate key at {s}")
        }
        11 => {
            let tok = *rng.pick(&["NaN", "Infinity", "-Infinity", "nan", "inf"]);
            let i = rng.below(len + 1);
            b.splice(i..i, tok.bytes());
            format!("insert {tok} at {i}")
        }
        _ => {
            let at = rng.below(len + 1);
            b.truncate(at);
            format!("truncate to {at}")
        }
    }
}

/// A `.npy` mutation that edits the header dict as text and writes a length field that fits it
/// (version 1 or 2 as the length needs, sometimes 3), so the literal parser sees the edit.
fn mutate_npy_header(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return None;
    }
    let (start, hl): (usize, usize) = match b[6] {
        1 => (10, u16::from_le_bytes([b[8], b[9]]) as usize),
        2 | 3 if b.len() >= 12 => (12, u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize),
        _ => return None,
    };
    let end = start.checked_add(hl).filter(|&e| e <= b.len())?;
    let mut header = b[start..end].to_vec();
    let body = b[end..].to_vec();
    let what = mutate_bytes(rng, &mut header, &[]);
    let major: u8 = if rng.chance(15) {
        3
    } else if header.len() > 0xFFFF || rng.chance(10) {
        2
    } else {
        1
    };
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&header);
    out.extend_from_slice(&body);
    *b = out;
    Some(format!("header text: {what} (v{major})"))
}

/// A k-NN graph mutation: header words replaced, sometimes the body cut to a whole number of
/// 8-byte pairs.
fn mutate_knn_header(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    if b.len() < KNN_HEADER as usize {
        return None;
    }
    let mut what = String::new();
    if rng.chance(50) {
        // N and k both huge: N·k·8 near or past u64.
        const HUGE: [u32; 5] = [1 << 28, 1 << 29, 1 << 30, 1 << 31, u32::MAX];
        let (n, k) = (*rng.pick(&HUGE), *rng.pick(&HUGE));
        b[8..12].copy_from_slice(&n.to_le_bytes());
        b[12..16].copy_from_slice(&k.to_le_bytes());
        let _ = write!(what, "N = {n:#x}, k = {k:#x}; ");
    }
    for _ in 0..rng.below(3) {
        let word = 1 + rng.below(5);
        let v = *rng.pick(&INTERESTING) as u32;
        b[word * 4..word * 4 + 4].copy_from_slice(&v.to_le_bytes());
        let _ = write!(what, "word {word} = {v:#x}; ");
    }
    if rng.chance(50) {
        let pairs = (b.len() - KNN_HEADER as usize) / 8;
        let keep = rng.below(pairs + 1);
        b.truncate(KNN_HEADER as usize + keep * 8);
        let _ = write!(what, "body cut to {keep} pairs");
    }
    Some(format!("knn header: {what}"))
}

/// An `embeddings.json` mutation that keeps it JSON: the first row made long, or many rows
/// added, or both (a long first row among many short ones is the case of a reservation of
/// N × D values from the first row's D).
fn mutate_json_rows(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_slice(b).ok()?;
    let entries = v.get_mut("embeddings")?.as_array_mut()?;
    let mut what = String::new();
    let op = rng.below(3);
    if op != 1 {
        let len = *rng.pick(&[100usize, 1_000, 3_000]);
        let row = entries.first_mut()?.get_mut("embedding")?.as_array_mut()?;
        let src = row.clone();
        if src.is_empty() {
            return None;
        }
        *row = src.iter().cycle().take(len).cloned().collect();
        let _ = write!(what, "first row {len} values; ");
    }
    if op != 0 {
        let count = *rng.pick(&[100usize, 1_000, 3_000]);
        let last = entries.last()?.clone();
        let short = rng.chance(50);
        for i in 0..count {
            let mut e = if short {
                serde_json::json!({"embedding": [1]})
            } else {
                last.clone()
            };
            if let Some(o) = e.as_object_mut() {
                if o.contains_key("poem_index") {
                    o.insert("poem_index".into(), (1_000_000 + i).into());
                }
                if o.contains_key("id") {
                    o.insert("id".into(), format!("extra{i}").into());
                }
            }
            entries.push(e);
        }
        let _ = write!(
            what,
            "{count} more rows{}",
            if short { " (short)" } else { "" }
        );
    }
    *b = serde_json::to_vec(&v).ok()?;
    Some(format!("json rows: {what}"))
}

/// Generated input `iter`: a seed of a random target through 1–4 mutations.
pub(super) fn generate(iter: u64, seeds: &[Case]) -> (Case, String) {
    let mut rng = Rng::new(input_seed(iter));
    let target = *rng.pick(&TARGETS);
    let pool: Vec<&Case> = seeds.iter().filter(|c| c.target == target).collect();
    let mut case = (*rng.pick(&pool)).clone();
    let others: Vec<Vec<u8>> = pool.iter().map(|c| c.files[0].1.clone()).collect();
    let mut log = Vec::new();
    if target == Target::Table {
        // The extension decides the format: sometimes the wrong one.
        if rng.chance(25) {
            let ext = *rng.pick(&["npy", "json", "f32", "bin", "NPY", "txt", ""]);
            let name = if ext.is_empty() {
                "x".to_string()
            } else {
                format!("x.{ext}")
            };
            case.files[0].0 = name.clone();
            case.main = name;
            log.push(format!("renamed to {}", case.main));
        }
    }
    if matches!(target, Target::F32 | Target::Table) && rng.chance(30) {
        case.dim = *rng.pick(&[
            None,
            Some(0),
            Some(1),
            Some(3),
            Some(5),
            Some(usize::MAX / 2),
            Some(usize::MAX),
        ]);
        log.push(format!("dim {:?}", case.dim));
    }
    if target == Target::Fp16Bin && rng.chance(30) {
        case.expect = !case.expect;
        log.push(format!("expect {}", case.expect));
    }
    for _ in 0..1 + rng.below(4) {
        let fi = rng.below(case.files.len());
        let is_npy = case.files[fi].0.ends_with(".npy");
        let b = &mut case.files[fi].1;
        let special = match target {
            _ if is_npy && rng.chance(50) => mutate_npy_header(&mut rng, b),
            Target::Knn if rng.chance(30) => mutate_knn_header(&mut rng, b),
            Target::Json if rng.chance(10) => mutate_json_rows(&mut rng, b),
            _ => None,
        };
        let what = match special {
            Some(w) => w,
            None => mutate_bytes(&mut rng, b, &others),
        };
        log.push(format!("{}: {what}", case.files[fi].0));
    }
    (case, log.join("; "))
}
