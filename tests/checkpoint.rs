//! The checkpoint format against `tests/lua/fixtures/checkpoint-v7/`, a checkpoint the Lua driver
//! wrote before the format moved into Rust (a --mode scan run of the bundled 300 fortunes,
//! --top-k 12, --batch 100, SOURCE_DATE_EPOCH=1700000000, lost after batches 1 and 2 and steps
//! 1..10 of batch 3): run.txt's text, every checksum and the .part headers come out byte for
//! byte, and a resume takes every file. No Vulkan device is needed.

use diversity::checkpoint::{
    batch_binding, batch_checksum, batch_file, check_run_file, checkpoint_files, checkpoint_time,
    part_block_head, part_file, read_batch, read_part_rows, run_text, RunFingerprint,
};
use std::path::Path;

const DIR: &str = "tests/lua/fixtures/checkpoint-v7";
const INPUT: &str = "data/fortunes-300.embeddings.json";

fn starts(b: u64) -> Vec<u64> {
    ((b - 1) * 100..b * 100).collect()
}

fn fixture_run_text() -> (String, String) {
    let all: Vec<u64> = (0..300).collect();
    let fp = RunFingerprint {
        input: INPUT,
        input_checksum: Some(RunFingerprint::checksum_input(INPUT).unwrap()),
        center: false,
        precision: "fp16",
        mode: "scan",
        summation: None,
        steps: 12,
        batch: 100,
        starts: &all,
        n: 300,
        dim: 384,
    }
    .text();
    let text = run_text(&fp, "2023-11-14T22:13:20Z");
    (fp, text)
}

#[test]
fn the_old_drivers_checkpoint_is_written_and_read_the_same() {
    let (fp, text) = fixture_run_text();
    let read = |name: &str| std::fs::read(Path::new(DIR).join(name)).unwrap();
    assert_eq!(text.as_bytes(), read("run.txt").as_slice(), "run.txt");
    assert_eq!(
        checkpoint_time(Path::new(DIR)).as_deref(),
        Some("2023-11-14T22:13:20Z")
    );
    check_run_file(DIR, &fp, &text).unwrap();
    assert_eq!(
        checkpoint_files(Path::new(DIR)),
        [
            "batch-00001.u32",
            "batch-00001.u32.sum",
            "batch-00002.u32",
            "batch-00002.u32.sum",
            "batch-00003.part",
            "run.txt"
        ]
    );
    for b in 1..=2 {
        let binding = batch_binding(&text, b, &starts(b));
        let bytes = read(&batch_file(b as usize));
        let sum = read(&format!("{}.sum", batch_file(b as usize)));
        assert_eq!(batch_checksum(&binding, &bytes).as_bytes(), sum.as_slice());
        let path = format!("{DIR}/{}", batch_file(b as usize));
        let got = read_batch(&path, &binding, &starts(b), 13, 300).unwrap();
        assert_eq!(got.as_deref(), Some(bytes.as_slice()));
    }
    // Batch 3: one block of the 10-step probe's 11 entries a row (the start and 10 steps), its
    // header recomputed from the rows.
    let binding = batch_binding(&text, 3, &starts(3));
    let part = read(&part_file(3));
    let path = format!("{DIR}/{}", part_file(3));
    let (prefix, have) = read_part_rows(&path, &binding, &starts(3), 300)
        .unwrap()
        .unwrap();
    assert_eq!(have, 11);
    assert_eq!(part.len(), 16 + prefix.len());
    assert_eq!(part_block_head(&binding, 0, 11, &part[16..]), part[..16]);
    // Another run's fingerprint is refused, naming what differs.
    let other = fp.replace("steps=12", "steps=13");
    let e = check_run_file(DIR, &other, &text).unwrap_err().to_string();
    assert!(e.contains("steps: 13 now, 12 in the checkpoint"), "{e}");
    // A batch read for another batch's place fails its checksum.
    let path = format!("{DIR}/{}", batch_file(1));
    let e = read_batch(
        &path,
        &batch_binding(&text, 2, &starts(2)),
        &starts(2),
        13,
        300,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("its checksum differs"), "{e}");
}
