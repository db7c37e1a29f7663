//! Regression tests of the crash classes the fuzzer found, and the fuzzing of merges and of the
//! IVF index files (in this process: their loaders upload to a device).

use super::*;

// ---------------------------------------------------------------------------------------------
// Regression tests of the crash classes the fuzzer found.

/// A scratch directory for one regression test, removed at the end.
/// A version-1.0 `.npy` file with this header text and body.
fn npy_with_header(header: &str, body: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(body);
    v
}

/// The header parser recursed once a bracket: ~24,000 nested parentheses overflowed the stack
/// and aborted the process. Nesting is now bounded (32 levels) and the message stays short.
#[test]
fn npy_deeply_nested_header_is_refused() {
    let s = TempDir::new("fuzz-nest");
    let deep = 24_000;
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}{}, }}\n",
        "(".repeat(deep),
        ")".repeat(deep)
    );
    let p = s.file("deep.npy", &npy_with_header(&header, &[0; 4]));
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("nested more than 32 levels deep"), "{msg}");
    assert!(
        msg.len() < 1_000,
        "the message quotes the whole header: {msg}"
    );
    // Through load_table too, and with lists and dicts.
    for (open, close) in [("[", "]"), ("{", "}")] {
        let header = format!("{}{}\n", open.repeat(deep), close.repeat(deep));
        let p = s.file("deep2.npy", &npy_with_header(&header, &[]));
        let msg = common::format_message(load_table(&p, None), &p);
        assert!(msg.contains("nested more than 32 levels deep"), "{msg}");
    }
    // 31 levels inside the dict are still parsed (and refused for what they are).
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}1, 1{}, }}\n",
        "(".repeat(31),
        ")".repeat(31)
    );
    let p = s.file("ok-depth.npy", &npy_with_header(&header, &[0; 4]));
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("shape entries must be integers"), "{msg}");
}

/// A header dict with a key twice was read by its first occurrence; it is now refused (keys must
/// be strings, kept in a set: the first fix compared every pair, quadratic in the keys).
#[test]
fn npy_duplicate_header_key_is_refused() {
    let s = TempDir::new("fuzz-dupkey");
    let body = 1.5f32.to_le_bytes();
    for header in [
        "{'descr': '<f4', 'descr': '<f2', 'fortran_order': False, 'shape': (1, 1), }\n",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'shape': (2, 2), }\n",
        "{'descr': '<f4', 'fortran_order': False, \"fortran_order\": True, 'shape': (1, 1)}\n",
    ] {
        let p = s.file("dup.npy", &npy_with_header(header, &body));
        let msg = common::format_message(load_npy(&p), &p);
        assert!(msg.contains("duplicate key '"), "{msg}");
    }
    // Keys are strings, and a header of many keys is checked in linear time.
    let p = s.file(
        "intkey.npy",
        &npy_with_header("{1: 2, 'descr': '<f4'}\n", &body),
    );
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("a dict key that is not a string"), "{msg}");
    let mut many = String::from("{");
    for i in 0..200_000 {
        let _ = write!(many, "'k{i}': 0, ");
    }
    many.push_str("'k7': 1}\n");
    let mut v = b"\x93NUMPY\x02\x00".to_vec();
    v.extend_from_slice(&u32::try_from(many.len()).unwrap().to_le_bytes());
    v.extend_from_slice(many.as_bytes());
    let p = s.file("many.npy", &v);
    let t = Instant::now();
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("duplicate key 'k7'"), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let p = s.file(
        "fine.npy",
        &npy_with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }\n",
            &body,
        ),
    );
    assert_eq!(load_npy(&p).unwrap().data(), &[1.5]);
}

/// N·k·8 wrapped in u64 for N = 2^31, k = 2^30 (and N = k = 2^31): the 24-byte header alone
/// "matched" its size, `open` succeeded and `row` asked for a 4 GiB buffer.
#[test]
fn knn_graph_header_whose_size_wraps_is_refused() {
    let s = TempDir::new("fuzz-knnwrap");
    for (n, k) in [
        (1u32 << 31, 1u32 << 30),
        (1 << 30, 1 << 31),
        (1 << 31, 1 << 31),
    ] {
        let mut h = b"DKNN".to_vec();
        for v in [1u32, n, k, 1, 0] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        let p = s.file("wrap.knn", &h);
        let msg = common::format_message(KnnGraph::open(&p), &p);
        assert!(
            msg.contains(&format!("N = {n}, k = {k}")) && msg.contains("more than any file holds"),
            "{msg}"
        );
    }
}

/// `embeddings.json` reserved N × D floats from the first row's D before finding the second
/// row ragged: a 300 KB file of one 2,000-value row and 15,000 one-value rows reserved 120 MB.
#[test]
fn json_long_first_row_reserves_no_more_than_the_text() {
    let s = TempDir::new("fuzz-jsonreserve");
    let mut text = String::from("{\"embeddings\":[{\"embedding\":[");
    text.push_str(&vec!["1"; 2_000].join(","));
    text.push_str("]}");
    for _ in 0..15_000 {
        text.push_str(",{\"embedding\":[1]}");
    }
    text.push_str("]}");
    let p = s.file("long.json", text.as_bytes());
    let (r, peak) = measured(|| load_embeddings_json(&p));
    let msg = common::format_message(r, &p);
    assert!(msg.contains("ragged rows"), "{msg}");
    assert!(
        peak <= budget(text.len()),
        "{peak} bytes held at once for a {}-byte file",
        text.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Merges of edited shards: an edit that would change the merged file is refused.

/// Edits per shard kind of a plain `cargo test --release` run (a few seconds in all);
/// `DIVERSITY_FUZZ_ITERS` scales it (a fiftieth of the loaders' inputs per kind).
const MERGE_EDITS: u64 = 1_000;

/// The valid shards of one run of each kind, in `dir`: (kind, merge, shard paths).
type MergeFn = fn(&[PathBuf], &Path) -> diversity::error::Result<()>;

fn merge_shard_sets(dir: &Path) -> Vec<(&'static str, MergeFn, Vec<PathBuf>)> {
    let mut sets: Vec<(&'static str, MergeFn, Vec<PathBuf>)> = Vec::new();
    let layout = ShardLayout::Strided;
    let n = 6usize;
    // Diversity shards, with row indices and with ids: every start of a 6-item table, top_k 3.
    for ids in [None, Some(["a", "b\"", "c", "d", "e", "f"])] {
        let ids: Option<Vec<serde_json::Value>> =
            ids.map(|v| v.into_iter().map(serde_json::Value::from).collect());
        let tag = if ids.is_some() { "ids" } else { "plain" };
        let mut paths = Vec::new();
        for i in 1..=2 {
            let path = dir.join(format!("d-{tag}-{i}.json"));
            let meta = serde_json::json!({
                "num_poems": n, "top_k": 3, "generated_at": format!("2026-01-0{i}T00:00:00Z"),
                "shard": format!("{i}/2"), "shard_layout": layout.name(),
                "shard_starts_total": n, "shard_starts_fingerprint": "fnv1a32:00000000",
                "shard_table_checksum": "fnv1a64:0123456789abcdef",
            });
            let mut w = JsonCacheWriter::create(&path, &meta, ids.clone()).unwrap();
            for p in layout.positions(i, 2, n) {
                let st = p as u32;
                let seq = [st, (st + 1) % 6, (st + 3) % 6, (st + 5) % 6];
                w.write_sequence(st, &seq).unwrap();
            }
            w.finish().unwrap();
            paths.push(path);
        }
        sets.push(("diversity", |i, o| merge_caches(i, o).map(|_| ()), paths));
    }
    // Rankings shards: each item's 3 nearest others.
    let mut paths = Vec::new();
    for i in 1..=2 {
        let path = dir.join(format!("r-{i}.json"));
        let extra = serde_json::json!({
            "metric": "cosine", "shard": format!("{i}/2"), "shard_layout": "contiguous",
            "shard_items_total": n, "shard_table_checksum": "fnv1a64:0123456789abcdef",
        });
        let mut w =
            RankingsWriter::create(&path, n, Some(3), "cosine-knn-v1", &extra, None).unwrap();
        for p in ShardLayout::Contiguous.positions(i, 2, n) {
            let it = p as u32;
            w.write_ranking(it, &[(it + 1) % 6, (it + 2) % 6, (it + 4) % 6])
                .unwrap();
        }
        w.finish_partial().unwrap();
        paths.push(path);
    }
    sets.push(("rankings", |i, o| merge_rankings(i, o).map(|_| ()), paths));
    // Graph shards: k = 2, cosine.
    let mut paths = Vec::new();
    for i in 1..=2 {
        let path = dir.join(format!("g-{i}.knn"));
        let shard = (i, 2, ShardLayout::Contiguous);
        let mut w = KnnGraphShard::create(&path, n, 2, KnnMetric::Cosine, shard, "run").unwrap();
        let items: Vec<u32> = ShardLayout::Contiguous
            .positions(i, 2, n)
            .into_iter()
            .map(|p| p as u32)
            .collect();
        let ids: Vec<u32> = items
            .iter()
            .flat_map(|&t| [(t + 1) % 6, (t + 2) % 6])
            .collect();
        let values: Vec<f32> = items.iter().flat_map(|_| [0.75, 0.5]).collect();
        w.write_batch(&items, &ids, &values).unwrap();
        w.finish().unwrap();
        paths.push(path);
    }
    sets.push(("graph", |i, o| merge_graphs(i, o).map(|_| ()), paths));
    sets
}

/// One to three edits of `b`: a byte replaced, inserted or removed, favouring the characters
/// that make other valid JSON (digits, quotes, commas, brackets).
fn edit_shard(rng: &mut Rng, b: &mut Vec<u8>) -> String {
    const CHARS: &[u8] = b"0123456789\",:[]{}-.e ab";
    let mut log = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(b.len().max(1));
        let c = if rng.chance(80) {
            *rng.pick(CHARS)
        } else {
            rng.next() as u8
        };
        match rng.below(3) {
            0 if at < b.len() => {
                log.push(format!("byte {at} {:?} -> {:?}", b[at] as char, c as char));
                b[at] = c;
            }
            1 => {
                log.push(format!("insert {:?} at {at}", c as char));
                b.insert(at, c);
            }
            _ if at < b.len() && b.len() > 1 => {
                log.push(format!("delete {:?} at {at}", b[at] as char));
                b.remove(at);
            }
            _ => {}
        }
    }
    log.join(", ")
}

#[test]
fn fuzz_merge_edits_are_refused_or_change_nothing() {
    let edits = std::env::var("DIVERSITY_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(MERGE_EDITS, |n| (n / 50).max(1));
    let dir = TempDir::new("fuzz-merge");
    let sets = merge_shard_sets(dir.path("").as_path());
    let (mut refused, mut same) = (0u64, 0u64);
    for (s, (kind, merge, shards)) in sets.iter().enumerate() {
        let reference = dir.path(&format!("reference-{s}"));
        merge(shards, &reference).unwrap_or_else(|e| panic!("{kind}: the originals: {e}"));
        let reference = std::fs::read(&reference).unwrap();
        let originals: Vec<Vec<u8>> = shards.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mut rng = Rng::new(BASE_SEED ^ s as u64);
        for e in 0..edits {
            let which = rng.below(shards.len());
            let mut bytes = originals[which].clone();
            let how = edit_shard(&mut rng, &mut bytes);
            if bytes == originals[which] {
                continue;
            }
            let edited = dir.path(&format!("edited-{e}"));
            std::fs::write(&edited, &bytes).unwrap();
            let mut inputs = shards.clone();
            inputs[which] = edited.clone();
            let out = dir.path("out");
            std::fs::write(&out, b"old").unwrap();
            match merge(&inputs, &out) {
                Err(err) => {
                    assert_eq!(std::fs::read(&out).unwrap(), b"old", "{kind}: {how}: {err}");
                    refused += 1;
                }
                Ok(()) => {
                    let merged = std::fs::read(&out).unwrap();
                    assert!(
                        merged == reference,
                        "{kind} shard {which}, {how}: the edited shard was merged into other \
                         bytes:\n{}",
                        String::from_utf8_lossy(&merged)
                    );
                    same += 1;
                }
            }
            std::fs::remove_file(&edited).unwrap();
        }
    }
    eprintln!("merge edits: {refused} refused, {same} merged to the same bytes");
    assert!(refused > 0);
}

// ---------------------------------------------------------------------------------------------
// IVF index files: their loaders upload to a device, so they run here in this process (lavapipe
// in CI) rather than in the loaders' child.

/// Mutations of each IVF index file: bit flips, truncations, and a header, size or id word
/// (or any 4 bytes) overwritten with the checksum made right again. Each is refused naming the
/// file or loaded whole, every id once, saving to the very bytes read; never a panic. Returns
/// (refused, loaded).
fn fuzz_index_file<T>(
    name: &str,
    good: &[u8],
    iters: usize,
    load: impl Fn(&Path) -> diversity::Result<T>,
    whole: impl Fn(&T) -> (Vec<i64>, usize, Vec<u8>),
) -> (usize, usize) {
    let dir = TempDir::new(&format!("{name}-mutate"));
    let mut s = 0x5eed_u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mut refused, mut loaded) = (0, 0);
    for i in 0..iters {
        let mut b = good.to_vec();
        let n = b.len();
        match i % 4 {
            0 => b[next() as usize % n] ^= 1 << (next() % 8),
            1 => b.truncate(next() as usize % n),
            _ => {
                let o = if i % 4 == 2 {
                    16 + 8 * (next() as usize % 40)
                } else {
                    next() as usize % (n - 12)
                };
                let v = match next() % 3 {
                    0 => u64::MAX - next() % 4,
                    1 => next() % 1000,
                    _ => next(),
                };
                let w = if i % 4 == 2 { 8 } else { 4 };
                let o = o.min(n - 8 - w);
                b[o..o + w].copy_from_slice(&v.to_le_bytes()[..w]);
                let h = fnv(&b[..n - 8]);
                b[n - 8..].copy_from_slice(&h.to_le_bytes());
            }
        }
        let p = dir.file(&format!("m.{name}"), &b);
        let r = catch_unwind(AssertUnwindSafe(|| load(&p)));
        match r.unwrap_or_else(|_| panic!("{name} mutation {i} panicked")) {
            Ok(x) => {
                let (mut ids, ntotal, bytes) = whole(&x);
                ids.sort_unstable();
                let want: Vec<i64> = (0..ntotal as i64).collect();
                assert_eq!(ids, want, "{name} mutation {i}");
                assert_eq!(bytes, b, "{name} mutation {i}: not the bytes read");
                loaded += 1;
            }
            Err(Error::Format { path, .. }) => {
                assert_eq!(path, p, "{name} mutation {i}");
                refused += 1;
            }
            Err(e) => panic!("{name} mutation {i}: {e}"),
        }
    }
    (refused, loaded)
}

#[test]
fn fuzz_ivf_flat_files() {
    let ctx = common::ctx();
    let t = common::random_table(120, 3, 5);
    let opts = IvfOptions {
        nlist: 5,
        metric: Metric::L2,
        precision: Precision::Fp32,
        kmeans: KMeansOptions {
            iters: 6,
            ..KMeansOptions::default()
        },
    };
    let mut ix = IvfFlat::new(&ctx, 3, &opts).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let good = ix.to_bytes().unwrap();
    let (refused, loaded) = fuzz_index_file(
        "ivf",
        &good,
        400,
        |p| IvfFlat::load(&ctx, p),
        |x| {
            let ids = (0..x.nlist()).flat_map(|l| x.list_ids(l).to_vec());
            (ids.collect(), x.ntotal(), x.to_bytes().unwrap())
        },
    );
    // Both outcomes happen.
    assert!(
        refused >= 250 && loaded >= 20,
        "{refused} refused, {loaded} loaded"
    );
    common::assert_clean(&ctx);
}

#[test]
fn fuzz_ivfpq_files() {
    let ctx = common::ctx();
    let data = common::random_table(300, 8, 51);
    let opts = IvfPqOptions {
        nlist: 3,
        m: 2,
        metric: Metric::L2,
        keep_vectors: true,
        kmeans: KMeansOptions {
            iters: 4,
            ..KMeansOptions::default()
        },
    };
    let mut ix = IvfPq::new(&ctx, 8, &opts).unwrap();
    ix.train(&data).unwrap();
    ix.add(&data.head(40).unwrap()).unwrap();
    let good = ix.to_bytes().unwrap();
    let (refused, loaded) = fuzz_index_file(
        "ivfpq",
        &good,
        400,
        |p| IvfPq::load(&ctx, p),
        |x| {
            let ids = (0..x.nlist()).flat_map(|l| x.list_ids(l).to_vec());
            (ids.collect(), x.ntotal(), x.to_bytes().unwrap())
        },
    );
    assert!(
        refused >= 150 && loaded >= 10,
        "{refused} refused, {loaded} loaded"
    );
    common::assert_clean(&ctx);
}
