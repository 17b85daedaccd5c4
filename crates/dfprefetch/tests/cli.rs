//! End-to-end tests of the `dfprefetch` binary.
//!
//! The Parquet fixtures are written by the binary itself (`COPY … TO`), so this
//! test links nothing but the standard library, `tempfile` and `serde_json`.

use std::path::Path;
use std::process::Output;

use tempfile::TempDir;

mod common;

use common::{text, write_dataset};

fn dfprefetch(args: &[&str]) -> Output {
    common::command(args).output().expect("run dfprefetch")
}

/// Two Parquet files in a fresh folder: ids 1..=5000 and 5001..=10000, and
/// `k = id % 7`.
fn dataset() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    dir
}

fn table_arg(dir: &Path) -> String {
    format!("t={}", dir.display())
}

#[test]
fn count_with_simulated_latency_prints_result_and_metrics() {
    let data = dataset();
    let out = dfprefetch(&[
        "--table",
        &table_arg(data.path()),
        "--simulate-latency",
        "5ms",
        "--metrics",
        "-c",
        "SET prefetch.policy = 'pipelined'",
        "-c",
        "SELECT count(*) AS n FROM t",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(stdout.contains("10000"), "stdout: {stdout}");

    let metrics: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("each metrics line is JSON"))
        .collect();
    let select = metrics
        .iter()
        .find(|m| m["sql"].as_str().unwrap().contains("count(*)"))
        .unwrap_or_else(|| panic!("no metrics line for the SELECT in: {stderr}"));
    assert_eq!(select["rows"], 1);
    assert_eq!(select["policy"], "pipelined");
    assert_eq!(select["simulated"], true);
    for key in [
        "wall_ms",
        "ttfb_ms",
        "requests",
        "bytes_fetched",
        "bytes_wasted",
        "peak_staged_bytes",
    ] {
        assert!(select[key].is_number(), "{key} in {select}");
    }
}

#[test]
fn invalid_setting_is_a_clear_error_and_stops_the_run() {
    let out = dfprefetch(&[
        "-c",
        "SET prefetch.policy = 'bogus'",
        "-c",
        "SELECT 'not reached' AS x",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success());
    assert!(stderr.starts_with("Error: "), "stderr: {stderr}");
    assert!(
        stderr.contains("invalid value 'bogus' for prefetch.policy")
            && stderr.contains("off, batched, pipelined"),
        "stderr: {stderr}"
    );
    assert!(!stdout.contains("not reached"), "stdout: {stdout}");
}

#[test]
fn sql_file_with_csv_and_json_output() {
    let data = dataset();
    let script = data.path().join("query.sql");
    std::fs::write(
        &script,
        "SET prefetch.policy = 'batched';\n\
         -- a comment, then a statement over two lines\n\
         SELECT k, count(*) AS n\n  FROM t GROUP BY k ORDER BY k;\n",
    )
    .unwrap();
    let table = table_arg(data.path());
    let script = script.display().to_string();

    let out = dfprefetch(&["--table", &table, "--format", "csv", "-f", &script]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let mut expected = vec!["k,n".to_string()];
    expected.extend((0..7).map(|k| {
        let n = (1..=10000).filter(|id| id % 7 == k).count();
        format!("{k},{n}")
    }));
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), expected);

    let out = dfprefetch(&[
        "--table",
        &table,
        "--format",
        "json",
        "-c",
        "SELECT min(id) AS lo, max(id) AS hi FROM t",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json, serde_json::json!([{"lo": 1, "hi": 10000}]));
}

#[test]
fn demo_compares_policies_and_results_match() {
    let out = dfprefetch(&["demo", "--rows", "20000", "--latency", "fixed:5"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("results match"), "stdout: {stdout}");
    for query in ["aggregate", "group_by", "filter", "top_k"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {query} ")))
            .unwrap_or_else(|| panic!("no row for {query} in: {stdout}"));
        assert!(row.trim_end().ends_with("yes |"), "{row}");
    }
    assert!(stdout.contains("total: off"), "stdout: {stdout}");
}

/// `--table` makes the table as `CREATE EXTERNAL TABLE … LOCATION` does in
/// the shell: hive partition folders become columns.
#[test]
fn table_flag_infers_hive_partitions_like_create_external_table() {
    let dir = tempfile::tempdir().unwrap();
    for (year, from, to) in [(2024, 1, 3000), (2025, 3001, 5000)] {
        let folder = dir.path().join(format!("year={year}"));
        std::fs::create_dir_all(&folder).unwrap();
        let copy = format!(
            "COPY (SELECT value AS id FROM generate_series({from}, {to})) TO '{}' STORED AS PARQUET",
            folder.join("part.parquet").display()
        );
        let out = dfprefetch(&["-c", &copy]);
        assert!(out.status.success(), "COPY failed: {}", text(&out.stderr));
    }
    let query = "SELECT year, count(*) AS n, max(id) AS hi FROM t GROUP BY year ORDER BY year";
    let expected = ["year,n,hi", "2024,3000,3000", "2025,2000,5000"];
    let flag = dfprefetch(&[
        "--table",
        &table_arg(dir.path()),
        "--format",
        "csv",
        "-c",
        query,
    ]);
    assert!(flag.status.success(), "stderr: {}", text(&flag.stderr));
    assert_eq!(text(&flag.stdout).lines().collect::<Vec<_>>(), expected);
    let ddl = format!(
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'",
        dir.path().display()
    );
    let shell = dfprefetch(&["--format", "csv", "-c", &ddl, "-c", query]);
    assert!(shell.status.success(), "stderr: {}", text(&shell.stderr));
    assert_eq!(text(&shell.stdout), text(&flag.stdout));
}
