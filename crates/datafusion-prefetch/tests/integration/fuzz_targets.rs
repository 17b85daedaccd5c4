//! The `cargo fuzz` targets of `fuzz/` (bodies in `datafusion_prefetch::fuzzing`),
//! run on stable over a bounded, seeded sample of inputs and the checked-in
//! corpus, so CI exercises them on every change. `PREFETCH_FUZZ_CASES` sets how
//! many generated inputs each target gets (default 10,000); a long run is
//! `cargo fuzz` (docs/reliability.md).

use std::path::PathBuf;

use bytes::Bytes;
use datafusion_prefetch::fuzzing;
use datafusion_prefetch_testdata::SplitMix64;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::support::parquet_file_with;

fn cases() -> u64 {
    std::env::var("PREFETCH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// The checked-in corpus of a target (`fuzz/corpus/<target>/`), if any.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect();
    files.sort();
    files
}

/// Run `body` on `input`, saying which input broke it.
fn run(target: &str, what: &str, input: &[u8], body: fn(&[u8])) {
    let outcome = std::panic::catch_unwind(|| body(input));
    if let Err(panic) = outcome {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "fuzz target {target} failed on {what} ({} bytes: {input:02x?}): {message}",
            input.len()
        );
    }
}

#[test]
fn the_scan_core_fuzz_target_holds_on_seeded_inputs() {
    for (path, data) in corpus("scan_core") {
        run(
            "scan_core",
            &path.display().to_string(),
            &data,
            fuzzing::scan_core,
        );
    }
    let mut rng = SplitMix64::new(0x5eed_0001);
    for case in 0..cases() {
        let len = rng.below(4096) as usize;
        let data = rng.bytes(len);
        run(
            "scan_core",
            &format!("case {case}"),
            &data,
            fuzzing::scan_core,
        );
    }
}

/// Real Parquet files the `footer` target mutates: several row groups and
/// pages, with and without dictionaries, page statistics and an offset index.
fn footer_seeds() -> Vec<Bytes> {
    vec![
        parquet_file_with(0, 3_000, 1_000, |p| {
            p.set_data_page_row_count_limit(250)
                .set_write_batch_size(250)
                .set_statistics_enabled(EnabledStatistics::Page)
        }),
        parquet_file_with(0, 2_000, 700, |p| {
            p.set_dictionary_enabled(false)
                .set_data_page_row_count_limit(300)
                .set_write_batch_size(300)
        }),
        parquet_file_with(0, 500, 500, |p| {
            p.set_statistics_enabled(EnabledStatistics::None)
        }),
        Bytes::from({
            let mut out = vec![];
            let props = WriterProperties::builder().build();
            let schema = crate::support::schema();
            let writer =
                parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
            writer.close().unwrap();
            out
        }),
    ]
}

/// A `footer` input: `params` parameter bytes, then `file`.
fn footer_input(params: &[u8], file: &[u8]) -> Vec<u8> {
    let mut input = vec![params.len() as u8];
    input.extend_from_slice(params);
    input.extend_from_slice(file);
    input
}

#[test]
fn the_footer_fuzz_target_holds_on_mutated_files() {
    for (path, data) in corpus("footer") {
        run(
            "footer",
            &path.display().to_string(),
            &data,
            fuzzing::footer,
        );
    }
    let seeds = footer_seeds();
    let mut rng = SplitMix64::new(0x5eed_0002);
    for case in 0..cases() {
        let seed = &seeds[rng.below(seeds.len() as u64) as usize];
        let mut file = seed.to_vec();
        // Mostly the footer and page index (the file's tail), sometimes anywhere.
        for _ in 0..1 + rng.below(4) {
            let len = file.len() as u64;
            let at = match rng.below(3) {
                0 => rng.below(len),
                _ => len - 1 - rng.below(len.min(600)),
            } as usize;
            match rng.below(4) {
                0 => file[at] ^= 1 << rng.below(8),
                1 => file[at] = rng.next_u64() as u8,
                2 => file[at] = [0, 0x7f, 0x80, 0xff][rng.below(4) as usize],
                _ => {
                    // Cut or repeat a run of bytes before the footer length,
                    // keeping the file's last 8 bytes (length and magic).
                    let end = len as usize - 8;
                    let at = at.min(end);
                    let run = rng.below(16) as usize;
                    if rng.below(2) == 0 {
                        file.drain(at..(at + run).min(end));
                    } else {
                        let copy = file[at..(at + run).min(end)].to_vec();
                        file.splice(at..at, copy);
                    }
                }
            }
        }
        let params_len = rng.below(96) as usize;
        let params = rng.bytes(params_len);
        let input = footer_input(&params, &file);
        run("footer", &format!("case {case}"), &input, fuzzing::footer);
    }
}

/// Writes the seed corpus of both targets into `fuzz/corpus/` (run once when
/// the seeds change: `cargo test ... write_fuzz_seed_corpus -- --ignored`).
#[test]
#[ignore = "writes files; run by hand to refresh fuzz/corpus"]
fn write_fuzz_seed_corpus() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let footer = root.join("footer");
    std::fs::create_dir_all(&footer).unwrap();
    let mut rng = SplitMix64::new(0x5eed_0003);
    for (i, seed) in footer_seeds().iter().enumerate() {
        let params = rng.bytes(64);
        std::fs::write(
            footer.join(format!("seed-{i}")),
            footer_input(&params, seed),
        )
        .unwrap();
    }
    let scan_core = root.join("scan_core");
    std::fs::create_dir_all(&scan_core).unwrap();
    for i in 0..4 {
        std::fs::write(scan_core.join(format!("seed-{i}")), rng.bytes(512)).unwrap();
    }
}
