//! The integrity classes through the Rust API and the example programs (the Lua API, the command
//! line, the shim and the C ABI: `tests/lua/integrity_spec.lua`): every reader applies its
//! writer's checks (the index files' row norms, the k-NN graph's padding values), a device
//! selector names one device or is refused, and every setting read from the environment parses
//! strictly. Each refusal is checked for its message and for the files it leaves as they were.

use diversity::cache::{KnnGraph, KnnGraphWriter, KnnMetric, KNN_HEADER, KNN_PAD};
use diversity::multi::open_devices;
use diversity::{
    Context, ContextOptions, IvfFlat, IvfOptions, IvfPq, IvfPqOptions, Metric, Precision,
};
use std::path::Path;
use std::process::Command;

mod common;
use common::{example, fnv, random_table, TempDir};

/// `bytes` (an index file whose lists' sizes start at byte `sizes_at`) with the first row of its
/// first non-empty list set to `d` copies of `v` and its checksum recomputed, as any writer of
/// the documented format could write it. `before` is what a list holds per row before its values
/// (8 bytes of id, and the codes of an IVF-PQ file).
fn edit_first_row(
    bytes: &[u8],
    nlist: usize,
    sizes_at: usize,
    d: usize,
    before: usize,
    v: f32,
) -> Vec<u8> {
    let size = |l: usize| {
        u64::from_le_bytes(
            bytes[sizes_at + 8 * l..sizes_at + 8 * l + 8]
                .try_into()
                .unwrap(),
        ) as usize
    };
    let mut o = sizes_at + 8 * nlist;
    for l in 0..nlist {
        let s = size(l);
        if s > 0 {
            let at = o + s * before;
            let mut out = bytes[..bytes.len() - 8].to_vec();
            for j in 0..d {
                out[at + 4 * j..at + 4 * j + 4].copy_from_slice(&v.to_le_bytes());
            }
            let h = fnv(&out);
            out.extend_from_slice(&h.to_le_bytes());
            return out;
        }
        o += s * (before + 4 * d);
    }
    panic!("no list holds a row");
}

fn snapshot(dir: &TempDir) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = dir
        .entries()
        .into_iter()
        .map(|n| {
            let b = std::fs::read(dir.path(&n)).unwrap_or_default();
            (n, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn index_files_holding_rows_that_add_refuses_are_refused() {
    let ctx = common::ctx();
    let dir = TempDir::new("integrity-ivf");
    let t = random_table(200, 6, 5);
    for (metric, precision, v, why) in [
        (Metric::Cosine, Precision::Fp32, 1e-41f32, "has norm"),
        (
            Metric::Cosine,
            Precision::Fp32,
            (2f32).powi(-45),
            "has norm",
        ),
        (Metric::L2, Precision::Fp32, (2f32).powi(45), "has norm"),
        (
            Metric::InnerProduct,
            Precision::Fp16,
            1e5,
            "outside the float16 range",
        ),
    ] {
        let opts = IvfOptions {
            nlist: 4,
            metric,
            precision,
            kmeans: Default::default(),
        };
        let mut ix = IvfFlat::new(&ctx, 6, &opts).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        // The writer refuses such a row.
        let bad_row = diversity::Table::new(vec![v; 6], 1, 6).unwrap();
        let e = ix.add(&bad_row).unwrap_err().to_string();
        assert!(e.contains(why), "add: {e}");
        let good = dir.path("good.ivf");
        ix.save(&good).unwrap();
        let bytes = std::fs::read(&good).unwrap();
        let bad = dir.file(
            "bad.ivf",
            &edit_first_row(&bytes, 4, 40 + 4 * 6 * 4, 6, 8, v),
        );
        let before = snapshot(&dir);
        let e = match IvfFlat::load(&ctx, &bad) {
            Ok(_) => panic!("{metric:?} {precision:?} {v}: a row add() refuses loaded"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("bad.ivf") && e.contains("list ") && e.contains("row 0 ") && e.contains(why),
            "{e}"
        );
        assert!(
            e.contains("the file was edited or written by another program"),
            "{e}"
        );
        assert_eq!(before, snapshot(&dir));
        // An ordinary row in the same place loads.
        std::fs::write(&bad, edit_first_row(&bytes, 4, 40 + 4 * 6 * 4, 6, 8, 0.25)).unwrap();
        IvfFlat::load(&ctx, &bad).unwrap();
    }
    // IVF-PQ's kept rows.
    let t = random_table(300, 8, 6);
    let opts = IvfPqOptions {
        nlist: 2,
        m: 2,
        metric: Metric::L2,
        keep_vectors: true,
        kmeans: Default::default(),
    };
    let mut ix = IvfPq::new(&ctx, 8, &opts).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let good = dir.path("good.ivfpq");
    ix.save(&good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let sizes_at = 48 + 2 * 8 * 4 + 256 * 8 * 4;
    for v in [1e-41f32, (2f32).powi(45)] {
        let bad = dir.file(
            "bad.ivfpq",
            &edit_first_row(&bytes, 2, sizes_at, 8, 8 + 2, v),
        );
        let e = match IvfPq::load(&ctx, &bad) {
            Ok(_) => panic!("{v}: a kept row add() refuses loaded"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("bad.ivfpq") && e.contains("list ") && e.contains("has norm"),
            "{e}"
        );
    }
    std::fs::write(
        dir.path("bad.ivfpq"),
        edit_first_row(&bytes, 2, sizes_at, 8, 10, 0.5),
    )
    .unwrap();
    IvfPq::load(&ctx, &dir.path("bad.ivfpq")).unwrap();
    common::assert_clean(&ctx);
}

#[test]
fn a_graph_with_a_value_the_writer_never_stores_beside_padding_is_refused() {
    let dir = TempDir::new("integrity-graph");
    let path = dir.path("g.knn");
    let (n, k) = (4usize, 3usize);
    let mut w = KnnGraphWriter::create(&path, n, k, KnnMetric::Cosine).unwrap();
    for item in 0..n as u32 {
        let others: Vec<u32> = (0..n as u32).filter(|&j| j != item).collect();
        // Item 0 has two neighbours and a padding id.
        let ids = if item == 0 {
            vec![others[0], others[1], KNN_PAD]
        } else {
            others
        };
        w.write_row(item, &ids, &[0.9, 0.5, 0.1]).unwrap();
    }
    w.finish().unwrap();
    let mut g = KnnGraph::open(&path).unwrap();
    let (ids, values) = g.row(0).unwrap();
    assert_eq!(ids[2], KNN_PAD);
    assert_eq!(
        values[2],
        f32::NEG_INFINITY,
        "the writer stores -inf beside padding"
    );
    // The value beside the padding edited to a real-looking one.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = KNN_HEADER as usize + n * k * 4 + 2 * 4;
    bytes[at..at + 4].copy_from_slice(&0.05f32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let e = KnnGraph::open(&path)
        .unwrap()
        .row(0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("g.knn") && e.contains("beside the padding id at position 2"),
        "{e}"
    );
    assert_eq!(bytes, std::fs::read(&path).unwrap());
}

#[test]
fn a_device_selector_names_one_device_or_is_refused() {
    let list = Context::list_devices().unwrap();
    let count = list.len();
    let open = |sel: &str| {
        Context::new(&ContextOptions {
            device: Some(sel.into()),
            validation: false,
        })
    };
    for sel in [count.to_string(), (count + 7).to_string()] {
        let e = open(&sel)
            .err()
            .expect("an index past the last")
            .to_string();
        assert!(
            e.contains(&format!("index {sel} is out of range ({count} device")),
            "{e}"
        );
        assert!(
            e.contains(&format!("0: {} ({})", list[0].name, list[0].uuid)),
            "{e}"
        );
        let e = open_devices(&format!("0,{sel}"), false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&format!("index {sel} is out of range")), "{e}");
    }
    for sel in ["-1", "1.0", "1e0", "+0"] {
        let e = open(sel).err().expect(sel).to_string();
        assert!(
            e.contains("is a number but not a device index"),
            "{sel}: {e}"
        );
    }
    // A name all the devices share is refused once two devices have it (here one device twice
    // is still one device, so name the whole list only when it has several).
    let first = open("0").unwrap();
    assert_eq!(first.caps().name, list[0].name);
    let by_uuid = open(&list[0].uuid).unwrap();
    assert_eq!(by_uuid.caps().uuid, list[0].uuid);
    if count > 1 && list.iter().all(|d| d.name == list[0].name) {
        let e = open(&list[0].name).err().unwrap().to_string();
        assert!(e.contains(&format!("matches {count} devices")), "{e}");
    }
}

/// A run of an example: its environment, its extra arguments, what its error must say.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);

/// The example programs refuse a bad selector and a bad setting before writing anything.
#[test]
fn example_programs_refuse_bad_selectors_and_settings() {
    let dir = TempDir::new("integrity-examples");
    let count = Context::list_devices().unwrap().len().to_string();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/fortunes-300.embeddings.json");
    let out = dir.path("r.json");
    let cases: [Case; 4] = [
        (&[], &["--device", &count], "is out of range"),
        (
            &[],
            &["--device", "2.0"],
            "is a number but not a device index",
        ),
        (
            &[("DIVERSITY_HOST_MEMORY", "1x")],
            &[],
            "DIVERSITY_HOST_MEMORY=\"1x\"",
        ),
        (
            &[("DIVERSITY_IVF_SCAN", "48,2")],
            &[],
            "DIVERSITY_IVF_SCAN=\"48,2\": expected wg,rows",
        ),
    ];
    for (env, extra, want) in cases {
        let mut cmd = Command::new(example("rankings"));
        cmd.arg("--table")
            .arg(&data)
            .args(["--top-k", "3", "--out"])
            .arg(&out)
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{want}: exit 0");
        assert!(err.contains(want), "{want}: {err}");
        assert!(dir.entries().is_empty(), "{want}: left {:?}", dir.entries());
    }
}

/// Run in a child with each bad value (`common::rerun_with_env`): a context refuses it, naming
/// the variable, and so does a host table; a good value with a unit opens.
#[test]
fn settings_from_the_environment_parse_strictly() {
    const NAME: &str = "settings_from_the_environment_parse_strictly";
    const VAR: &str = "DIVERSITY_HOST_MEMORY";
    let Ok(value) = std::env::var(VAR) else {
        for v in [
            "1x",
            "abc",
            "-1",
            "1e9",
            "0x100000",
            "18446744073709551616",
            "2G",
        ] {
            common::rerun_with_env(NAME, VAR, v);
        }
        return;
    };
    let open = Context::new(&ContextOptions::default());
    let host = diversity::host::HostTable::new(&random_table(3, 2, 1), Precision::Fp32);
    if value == "2G" {
        open.expect("2G is a size");
        host.expect("2G is a size");
        assert_eq!(diversity::host::host_memory_budget(), 2 << 30);
    } else {
        for e in [
            open.err().unwrap().to_string(),
            host.err().unwrap().to_string(),
        ] {
            assert!(e.starts_with(&format!("{VAR}={value:?}: ")), "{e}");
        }
    }
}
