//! What the `dfprefetch` end-to-end tests share: the binary and the data it
//! writes for them.

use std::path::Path;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_dfprefetch");

/// `dfprefetch` with `args`, without the caller's `RUST_LOG`.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("RUST_LOG");
    command
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The data files of [`write_dataset`].
pub const DATASET_FILES: [&str; 2] = ["a.parquet", "b.parquet"];

/// Two Parquet files in `dir`, written by the binary itself (`COPY … TO`):
/// ids 1..=5000 and 5001..=10000, and `k = id % 7`.
pub fn write_dataset(dir: &Path) {
    let copy = |from: u32, to: u32, file: &str| {
        format!(
            "COPY (SELECT value AS id, value % 7 AS k FROM generate_series({from}, {to})) \
             TO '{}' STORED AS PARQUET",
            dir.join(file).display()
        )
    };
    let [a, b] = DATASET_FILES;
    let out: Output = command(&["-c", &copy(1, 5000, a), "-c", &copy(5001, 10000, b)])
        .output()
        .expect("run dfprefetch");
    assert!(out.status.success(), "COPY failed: {}", text(&out.stderr));
}
