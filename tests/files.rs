//! File loaders and writers: the bundled data, round trips, and every bad input that
//! concerns files. Each error test checks the variant and the words a user needs to see.

use diversity::error::Error;
use diversity::files::{
    load_embeddings_json, load_f32, load_npy, load_table, save_npy_f16, save_npy_f32,
};
use diversity::table::{Precision, Table};
use std::path::{Path, PathBuf};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

mod common;
use common::TempDir;

/// A small table with awkward values (negative, tiny, exactly representable and not).
fn sample(n: usize, d: usize) -> Table {
    let data = (0..n * d)
        .map(|i| ((i as f32) * 0.37 - 3.1).sin() * 10f32.powi((i % 5) as i32 - 2))
        .collect();
    Table::new(data, n, d).expect("sample table")
}

/// Unwrap an expected `Format` error, checking it names `path` and contains every word in `words`.
#[track_caller]
fn expect_format(r: diversity::error::Result<Table>, path: &Path, words: &[&str]) {
    if let Ok(t) = &r {
        panic!("expected an error, got a {} × {} table", t.n(), t.d());
    }
    let msg = common::format_message(r.map(|_| ()), path);
    for w in words {
        assert!(msg.contains(w), "message lacks {w:?}: {msg}");
    }
}

/// `text`, written to `name` in `dir`, is refused by the embeddings JSON reader with a message
/// naming the file and holding every word of `words`.
#[track_caller]
fn json_refused(dir: &TempDir, name: &str, text: &[u8], words: &[&str]) {
    let p = dir.file(name, text);
    expect_format(load_embeddings_json(&p), &p, words);
}

/// A `.npy` file of header `dict` and `body`, written to `name` in `dir`, is refused by the
/// `.npy` reader with a message naming the file and holding every word of `words`.
#[track_caller]
fn npy_refused(dir: &TempDir, name: &str, dict: &str, body: &[u8], words: &[&str]) {
    let p = dir.file(name, &npy_bytes(dict, body));
    expect_format(load_npy(&p), &p, words);
}

/// A minimal `.npy` v1 file with the given header dict and body.
fn npy_bytes(dict: &str, body: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(body);
    b
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn json_entry(i: usize, row: &[f32]) -> String {
    let vals: Vec<String> = row.iter().map(|v| v.to_string()).collect();
    format!(
        r#"{{"poem_index": {i}, "id": "p{i}", "embedding": [{}]}}"#,
        vals.join(", ")
    )
}

// ---------------------------------------------------------------- bundled data

#[test]
fn bundled_npy_is_2048_by_384_finite_fp16() {
    let t = load_npy(&data_dir().join("fortunes-2k.npy")).expect("bundled npy");
    assert_eq!((t.n(), t.d()), (2048, 384));
    assert!(t.data().iter().all(|v| v.is_finite()));
    assert!(t.ids().is_none());
    // Stored as halves: rounding to fp16 again changes nothing.
    assert_eq!(t.as_stored(Precision::Fp16).data(), t.data());
    // MiniLM embeddings are unit-normalised; fp16 rounding keeps norms within 1e-3.
    for (i, inv) in t.inverse_norms().iter().enumerate() {
        assert!((inv - 1.0).abs() < 1e-3, "row {i} has 1/norm {inv}");
    }
}

/// fp16 rows never trip the fp32 norm range (2^-40 … 2^40): a nonzero half is at least 2^-24,
/// subnormals included, so a nonzero row's norm is too. Checked on the bundled 5k table's own
/// halves (read from the file, whatever a loader does with subnormals), raw and centred.
#[test]
fn bundled_fp16_rows_with_subnormals_pass_the_norm_range() {
    let bytes = std::fs::read(data_dir().join("fortunes-5k.npy")).expect("bundled npy");
    let header = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let halves: Vec<u16> = bytes[header..]
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let (n, d) = (5120, 384);
    assert_eq!(halves.len(), n * d);
    let subnormal = |h: &u16| h & 0x7c00 == 0 && h & 0x03ff != 0;
    assert_eq!(halves.iter().filter(|h| subnormal(h)).count(), 3712);
    let values: Vec<f32> = halves
        .iter()
        .map(|&h| half::f16::from_bits(h).to_f32())
        .collect();
    let smallest = values
        .chunks_exact(d)
        .map(|r| r.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt())
        .filter(|&x| x > 0.0)
        .fold(f64::INFINITY, f64::min);
    assert!(smallest >= 2f64.powi(-24), "{smallest}");
    let t = Table::new(values, n, d).unwrap();
    for t in [t.clone(), t.centered()] {
        t.check_norms(Precision::Fp16).unwrap();
        t.check_norms(Precision::Fp32).unwrap();
    }
}

#[test]
fn bundled_json_matches_bundled_npy() {
    let json =
        load_table(&data_dir().join("fortunes-300.embeddings.json"), None).expect("bundled json");
    assert_eq!((json.n(), json.d()), (300, 384));
    let ids = json.ids().expect("bundled json keeps ids");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.as_str(), Some(format!("fortune-{i}").as_str()));
    }
    let npy = load_table(&data_dir().join("fortunes-2k.npy"), None).expect("bundled npy");
    let npy300 = npy.head(300).expect("head");
    // The json keeps float32; the npy is those values rounded to fp16, exactly.
    let json16 = json.as_stored(Precision::Fp16);
    for i in 0..300 {
        assert_eq!(json16.row(i), npy300.row(i), "row {i} differs");
    }
    // And the float32 values are not already halves (the json carries the full precision).
    assert_ne!(json.data(), json16.data());
}

#[test]
fn bundled_texts_line_up_with_rows() {
    let text = std::fs::read_to_string(data_dir().join("fortunes-2k.texts.jsonl")).expect("texts");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2048);
    for (i, line) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).expect("jsonl line");
        assert_eq!(v["index"].as_u64(), Some(i as u64));
        assert!(v["text"].is_string() && v["source"].is_string());
    }
}

// ---------------------------------------------------------------- round trips

#[test]
fn f32_round_trip() {
    let dir = TempDir::new("f32");
    let t = sample(7, 5);
    let p = dir.file("t.f32", &f32_bytes(t.data()));
    let back = load_f32(&p, 5).expect("load .f32");
    assert_eq!((back.n(), back.d()), (7, 5));
    assert_eq!(back.data(), t.data());
    let back = load_table(&p, Some(5)).expect("load_table .f32");
    assert_eq!(back.data(), t.data());
    // The same bytes read with another dimension that divides the size is a different table.
    assert_eq!(load_f32(&p, 7).expect("dim 7").n(), 5);
}

#[test]
fn npy_f32_round_trip() {
    let dir = TempDir::new("npy32");
    let t = sample(9, 3);
    let p = dir.0.join("t.npy");
    save_npy_f32(&p, &t).expect("save f32");
    let bytes = std::fs::read(&p).expect("read back");
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    assert_eq!(bytes.len(), 128 + 9 * 3 * 4, "header padded to 64 bytes");
    let back = load_table(&p, None).expect("load f32 npy");
    assert_eq!((back.n(), back.d()), (9, 3));
    assert_eq!(back.data(), t.data());
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(&dir.0).expect("ls").collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn npy_f16_round_trip() {
    let dir = TempDir::new("npy16");
    let t = sample(4, 33);
    let p = dir.0.join("t.npy");
    save_npy_f16(&p, &t).expect("save f16");
    assert_eq!(std::fs::read(&p).expect("read").len(), 128 + 4 * 33 * 2);
    let back = load_npy(&p).expect("load f16 npy");
    assert_eq!((back.n(), back.d()), (4, 33));
    assert_eq!(back.data(), t.as_stored(Precision::Fp16).data());
    // Saving the halves again gives the same file.
    let p2 = dir.0.join("t2.npy");
    save_npy_f16(&p2, &back).expect("save again");
    assert_eq!(std::fs::read(&p).ok(), std::fs::read(&p2).ok());
}

#[test]
fn npy_versions_2_and_3_and_python2_longs() {
    let dir = TempDir::new("npyver");
    let body = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n";
    for major in [2u8, 3] {
        let mut b = b"\x93NUMPY".to_vec();
        b.extend_from_slice(&[major, 0]);
        b.extend_from_slice(&(header.len() as u32).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(&body);
        let p = dir.file(&format!("v{major}.npy"), &b);
        let t = load_npy(&p).expect("v2/v3 npy");
        assert_eq!((t.n(), t.d()), (2, 3));
        assert_eq!(t.row(1), &[4.0, 5.0, 6.0]);
    }
}

#[test]
fn json_sorted_by_poem_index_and_ids_fall_back() {
    let dir = TempDir::new("jsonsort");
    // Out of order, ids only on some → ids fall back to poem_index where missing.
    let p = dir.file(
        "e.json",
        br#"{"metadata": {"model": "m"}, "embeddings": [
            {"poem_index": 2, "id": "c", "embedding": [2, 2.5]},
            {"poem_index": 0, "embedding": [0, 0.5]},
            {"poem_index": 1, "id": 17, "embedding": [1, 1.5]}]}"#,
    );
    let t = load_embeddings_json(&p).expect("json");
    assert_eq!(t.data(), &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    let ids = t.ids().expect("ids");
    assert_eq!(
        ids,
        &[
            serde_json::json!(0),
            serde_json::json!(17),
            serde_json::json!("c")
        ]
    );

    // Neither poem_index nor id anywhere: file order, no ids.
    let p = dir.file(
        "plain.json",
        br#"{"embeddings": [{"embedding": [3, 4]}, {"embedding": [1, 2]}]}"#,
    );
    let t = load_table(&p, None).expect("plain json");
    assert_eq!(t.data(), &[3.0, 4.0, 1.0, 2.0]);
    assert!(t.ids().is_none());

    // N = 1 and odd D are fine.
    let p = dir.file("one.json", json_entry_doc(&[&[1.0, 2.0, 3.0]]).as_bytes());
    let t = load_table(&p, None).expect("one row");
    assert_eq!((t.n(), t.d()), (1, 3));
}

fn json_entry_doc(rows: &[&[f32]]) -> String {
    let entries: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| json_entry(i, r))
        .collect();
    format!(
        r#"{{"metadata": {{}}, "embeddings": [{}]}}"#,
        entries.join(",\n")
    )
}

// ---------------------------------------------------------------- bad input: any format

#[test]
fn missing_file_is_io_error_naming_the_path() {
    let dir = TempDir::new("missing");
    for name in ["nope.json", "nope.npy", "nope.f32"] {
        let p = dir.0.join(name);
        match load_table(&p, Some(4)) {
            Err(e @ Error::Io { .. }) => {
                assert!(e.to_string().contains(&p.display().to_string()), "{e}");
            }
            other => panic!("{name}: expected Error::Io, got {other:?}"),
        }
    }
    // A directory is not readable as a file.
    match load_npy(&dir.0) {
        Err(Error::Io { path, .. }) => assert_eq!(path, dir.0),
        other => panic!("expected Error::Io for a directory, got {other:?}"),
    }
}

#[test]
fn unknown_extension_lists_the_supported_ones() {
    let dir = TempDir::new("ext");
    let p = dir.file("t.csv", b"1,2,3\n");
    expect_format(
        load_table(&p, None),
        &p,
        &["'.csv'", ".npy", ".json", ".f32"],
    );
    let p = dir.file("noext", b"");
    expect_format(load_table(&p, None), &p, &["no extension"]);
    // Extensions are matched case-insensitively.
    let t = sample(2, 2);
    let p = dir.0.join("T.NPY");
    save_npy_f32(&p, &t).expect("save");
    assert_eq!(load_table(&p, None).expect("T.NPY").data(), t.data());
}

// ---------------------------------------------------------------- bad input: .f32

#[test]
fn f32_without_dim_says_dim_is_required() {
    let dir = TempDir::new("nodim");
    let p = dir.file("t.f32", &f32_bytes(&[1.0; 8]));
    match load_table(&p, None) {
        Err(e @ Error::Invalid(_)) => {
            let msg = e.to_string();
            assert!(
                msg.contains("--dim") && msg.contains(&p.display().to_string()),
                "{msg}"
            );
        }
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
    match load_f32(&p, 0) {
        Err(e @ Error::Invalid(_)) => assert!(e.to_string().contains("dimension 0"), "{e}"),
        other => panic!("expected Error::Invalid for dim 0, got {other:?}"),
    }
}

#[test]
fn f32_size_not_a_multiple_or_empty() {
    let dir = TempDir::new("f32bad");
    let p = dir.file("t.f32", &f32_bytes(&[1.0; 10]));
    expect_format(
        load_f32(&p, 4),
        &p,
        &["40 bytes", "not a multiple", "dim 4"],
    );
    let p = dir.file("odd.f32", &[0u8; 7]);
    expect_format(load_f32(&p, 1), &p, &["7 bytes", "not a multiple"]);
    let p = dir.file("empty.f32", b"");
    expect_format(load_f32(&p, 4), &p, &["empty", "N = 0"]);
}

#[test]
fn f32_nan_names_the_row() {
    let dir = TempDir::new("f32nan");
    let p = dir.file("t.f32", &f32_bytes(&[1.0, 2.0, 3.0, f32::NAN, 5.0, 6.0]));
    expect_format(load_f32(&p, 2), &p, &["row 1", "non-finite"]);
}

// ---------------------------------------------------------------- bad input: .npy

#[test]
fn npy_bad_magic() {
    let dir = TempDir::new("npymagic");
    let p = dir.file("t.npy", b"PK\x03\x04 this is a zip, not an npy");
    expect_format(load_npy(&p), &p, &["bad magic"]);
    let p = dir.file("short.npy", b"\x93NU");
    expect_format(load_npy(&p), &p, &["bad magic"]);
}

#[test]
fn npy_wrong_rank() {
    let dir = TempDir::new("npyrank");
    npy_refused(
        &dir,
        "3d.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }",
        &f32_bytes(&[0.0; 8]),
        &["(2, 2, 2)", "3-D", "2-D"],
    );
    npy_refused(
        &dir,
        "1d.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }",
        &f32_bytes(&[0.0; 8]),
        &["(8,)", "1-D"],
    );
}

#[test]
fn npy_unsupported_dtypes() {
    let dir = TempDir::new("npydtype");
    let cases = [
        ("'>f4'", "big-endian"),
        ("'>f2'", "big-endian"),
        ("'<f8'", "'<f8'"),
        ("'<i4'", "'<i4'"),
        ("[('a', '<f4')]", "structured"),
    ];
    for (i, (descr, word)) in cases.iter().enumerate() {
        let b = npy_bytes(
            &format!("{{'descr': {descr}, 'fortran_order': False, 'shape': (2, 2), }}"),
            &[0u8; 32],
        );
        let p = dir.file(&format!("d{i}.npy"), &b);
        expect_format(
            load_npy(&p),
            &p,
            &["unsupported dtype", word, "'<f4'", "'<f2'"],
        );
    }
}

#[test]
fn npy_fortran_order_truncated_trailing_and_empty() {
    let dir = TempDir::new("npymisc");
    npy_refused(
        &dir,
        "f.npy",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
        &f32_bytes(&[0.0; 6]),
        &["fortran_order", "C-order"],
    );

    npy_refused(
        &dir,
        "trunc.npy",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }",
        &[0u8; 11],
        &["truncated", "12 bytes", "has 11"],
    );

    npy_refused(
        &dir,
        "long.npy",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }",
        &[0u8; 13],
        &["13 bytes", "trailing"],
    );

    // Header length field pointing past the end of the file.
    let mut b = npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }",
        &[],
    );
    b[8] = 0xff;
    b[9] = 0x7f;
    let p = dir.file("hdr.npy", &b);
    expect_format(load_npy(&p), &p, &["truncated .npy header"]);

    npy_refused(
        &dir,
        "n0.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }",
        &[],
        &["N = 0"],
    );
    npy_refused(
        &dir,
        "d0.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }",
        &[],
        &["D = 0"],
    );

    npy_refused(
        &dir,
        "garbled.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3 }",
        &[],
        &["cannot parse .npy header"],
    );

    let mut b = npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }",
        &[0; 4],
    );
    b[6] = 9;
    let p = dir.file("v9.npy", &b);
    expect_format(load_npy(&p), &p, &["version 9.0"]);
}

#[test]
fn npy_f16_infinity_names_the_row() {
    let dir = TempDir::new("npyinf");
    let halves: Vec<u8> = [0x3c00u16, 0x3c00, 0x3c00, 0x7c00]
        .iter()
        .flat_map(|h| h.to_le_bytes())
        .collect();
    npy_refused(
        &dir,
        "inf.npy",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }",
        &halves,
        &["row 1", "non-finite", "column 1"],
    );
}

#[test]
fn save_npy_f16_refuses_values_beyond_half_range() {
    let dir = TempDir::new("save16");
    let t = Table::new(vec![1.0, 2.0, 3.0, 70000.0], 2, 2).expect("table");
    let p = dir.0.join("big.npy");
    match save_npy_f16(&p, &t) {
        Err(e @ Error::Invalid(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("row 1") && msg.contains("float16"), "{msg}");
        }
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
    assert!(!p.exists(), "no file written");
    // Writing into a missing directory is an I/O error naming the file.
    let p = dir.0.join("no-such-dir").join("t.npy");
    match save_npy_f32(&p, &t) {
        Err(Error::Io { path, .. }) => assert_eq!(path, p),
        other => panic!("expected Error::Io, got {other:?}"),
    }
}

// ---------------------------------------------------------------- bad input: embeddings.json

#[test]
fn json_malformed_gives_line_and_column() {
    let dir = TempDir::new("jsonbad");
    json_refused(
        &dir,
        "e.json",
        b"{\"embeddings\": [\n  {\"embedding\": [1, 2,]}\n]}",
        &["malformed JSON", "line 2", "column"],
    );
    let p = dir.file("trunc.json", b"{\"embeddings\": [{\"embedding\": [1, 2");
    expect_format(load_table(&p, None), &p, &["malformed JSON", "EOF"]);
    // A number beyond float64 is refused by the parser itself.
    let p = dir.file("huge.json", br#"{"embeddings": [{"embedding": [1e999]}]}"#);
    expect_format(load_table(&p, None), &p, &["malformed JSON", "line 1"]);
}

#[test]
fn json_missing_embeddings() {
    let dir = TempDir::new("jsonnoemb");
    json_refused(
        &dir,
        "e.json",
        br#"{"metadata": {}, "embedding": []}"#,
        &["missing \"embeddings\""],
    );
    json_refused(
        &dir,
        "arr.json",
        br#"[[1, 2], [3, 4]]"#,
        &["not an object", "\"embeddings\""],
    );
    json_refused(
        &dir,
        "obj.json",
        br#"{"embeddings": {"0": [1, 2]}}"#,
        &["\"embeddings\" is an object, not an array"],
    );
}

#[test]
fn json_entry_missing_embedding() {
    let dir = TempDir::new("jsonnoe");
    json_refused(
        &dir,
        "e.json",
        br#"{"embeddings": [{"poem_index": 0, "embedding": [1, 2]},
                            {"poem_index": 1, "vector": [1, 2]}]}"#,
        &["embeddings[1]", "poem_index 1", "no \"embedding\""],
    );
}

#[test]
fn json_non_numeric_value() {
    let dir = TempDir::new("jsonnan");
    json_refused(
        &dir,
        "e.json",
        br#"{"embeddings": [{"embedding": [1, 2]}, {"embedding": [1, "NaN"]}]}"#,
        &["embeddings[1].embedding[1]", "not a number", "NaN"],
    );
    json_refused(
        &dir,
        "null.json",
        br#"{"embeddings": [{"embedding": [null, 2]}]}"#,
        &["embeddings[0].embedding[0]", "null"],
    );
}

#[test]
fn json_ragged_rows_name_the_row_and_lengths() {
    let dir = TempDir::new("jsonragged");
    let doc = json_entry_doc(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[7.0, 8.0]]);
    json_refused(
        &dir,
        "e.json",
        doc.as_bytes(),
        &[
            "ragged",
            "embeddings[2]",
            "poem_index 2",
            "has 2 values",
            "has 3",
        ],
    );
}

#[test]
fn json_no_rows_and_no_dims() {
    let dir = TempDir::new("jsonempty");
    json_refused(
        &dir,
        "n0.json",
        br#"{"metadata": {}, "embeddings": []}"#,
        &["empty", "N = 0"],
    );
    json_refused(&dir, "d0.json", br#"{"embeddings": [{"poem_index": 0, "embedding": []}, {"poem_index": 1, "embedding": []}]}"#, &["embeddings[0]", "D = 0"]);
}

#[test]
fn json_value_beyond_float32_names_the_row() {
    let dir = TempDir::new("jsonbig");
    json_refused(
        &dir,
        "e.json",
        br#"{"embeddings": [{"poem_index": 0, "embedding": [1, 2]},
                            {"poem_index": 1, "embedding": [3, 1e39]}]}"#,
        &["embeddings[1]", "poem_index 1", "embedding[1]", "float32"],
    );
    // Just inside the range is fine.
    let p = dir.file(
        "ok.json",
        br#"{"embeddings": [{"embedding": [3.4e38, -3.4e38, 1e-50]}]}"#,
    );
    let t = load_embeddings_json(&p).expect("in range");
    assert_eq!(t.data()[2], 0.0);
}

#[test]
fn json_inconsistent_indices_and_ids() {
    let dir = TempDir::new("jsonidx");
    json_refused(&dir, "dup.json", br#"{"embeddings": [{"poem_index": 3, "embedding": [1]}, {"poem_index": 3, "embedding": [2]}]}"#, &["duplicate poem_index 3"]);
    json_refused(
        &dir,
        "mixed.json",
        br#"{"embeddings": [{"poem_index": 0, "embedding": [1]}, {"embedding": [2]}]}"#,
        &["embeddings[1] has no poem_index"],
    );
    json_refused(
        &dir,
        "neg.json",
        br#"{"embeddings": [{"poem_index": -1, "embedding": [1]}]}"#,
        &["poem_index is -1"],
    );
    json_refused(
        &dir,
        "dupid.json",
        br#"{"embeddings": [{"id": "a", "embedding": [1]}, {"id": "a", "embedding": [2]}]}"#,
        &["duplicate id \"a\""],
    );
    json_refused(
        &dir,
        "someid.json",
        br#"{"embeddings": [{"id": "a", "embedding": [1]}, {"embedding": [2]}]}"#,
        &["embeddings[1] has neither id"],
    );
    json_refused(
        &dir,
        "objid.json",
        br#"{"embeddings": [{"id": {"x": 1}, "embedding": [1]}]}"#,
        &["id is an object"],
    );
}

#[test]
fn words_checksum_sees_every_byte_and_the_length() {
    use diversity::files::words_checksum;
    // Pinned: a checkpoint written by one build is read by the next.
    assert_eq!(
        words_checksum(b"diversity checkpoint"),
        "w64:c6c1c2222259f63c"
    );
    let base: Vec<u8> = (0..103u32).map(|i| (i * 37 % 251) as u8).collect();
    let h = words_checksum(&base);
    assert!(h.starts_with("w64:") && h.len() == 20, "{h}");
    // Every single-bit flip anywhere (the padded tail included) changes it …
    for i in 0..base.len() {
        for bit in 0..8 {
            let mut e = base.clone();
            e[i] ^= 1 << bit;
            assert_ne!(words_checksum(&e), h, "byte {i} bit {bit}");
        }
    }
    // … and so do trailing zeros (the length is part of it), and swapping two words.
    let mut z = base.clone();
    z.push(0);
    assert_ne!(words_checksum(&z), h);
    let mut sw = base.clone();
    sw[..8].copy_from_slice(&base[8..16]);
    sw[8..16].copy_from_slice(&base[..8]);
    assert_ne!(words_checksum(&sw), h);
}
