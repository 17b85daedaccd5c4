//! `prefetch-bench --suite peers` end to end at a tiny scale: the S3 server,
//! the uploads, the latency proxy, one DataFusion process per run, and the
//! cross-engine check — and the same over HTTP (rclone, which starts in
//! well under a second). The Python engines are pointed at a Python that
//! does not exist, so the run also shows that a missing engine is skipped,
//! saying why (their own runs need `benches/peers/setup.sh`, not CI), and
//! that an engine with no client for the store is reported as impossible.

use std::path::Path;
use std::process::{Command, Output};

fn peers(data: &Path, store: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_prefetch-bench"))
        .args(["--suite", "peers", "--scale", "0.001", "--iterations", "1"])
        .args(["--queries", "tpch_q6,hits_q7", "--latency", "fixed:2"])
        .args(["--partitions", "2", "--python", "/nonexistent/python"])
        .args(["--store", store])
        .arg("--data-dir")
        .arg(data)
        .arg("--json")
        .arg(data.join(format!("{store}.json")))
        .output()
        .unwrap()
}

#[test]
fn the_peers_suite_runs_datafusion_over_the_proxy_and_skips_missing_engines() {
    let data = tempfile::tempdir().unwrap();
    let out = peers(data.path(), "s3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "| tpch_q6 | datafusion off |",
        "| tpch_q6 | datafusion auto |",
        "| hits_q7 | datafusion off |",
        "| hits_q7 | datafusion auto |",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no row {line}:\n{stdout}\n{stderr}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // query, engine, wall, ratio, requests, MiB, RSS, matches
        assert_eq!(cells[8], "yes", "{row}");
        let requests: u64 = cells[5].parse().unwrap();
        assert!(requests >= 2, "the proxy counted no LIST and GET: {row}");
        let rss: f64 = cells[7].parse().unwrap();
        assert!(rss > 1.0, "no peak RSS: {row}");
    }
    assert!(
        stdout.contains("- polars: no Python at /nonexistent/python"),
        "{stdout}"
    );
    // The uploads stay in <data-dir>/peers_s3, for the next run.
    assert!(data.path().join("peers_s3/peers").is_dir());

    // Over HTTP: the same rows; DataFusion lists each table with one
    // PROPFIND, which the proxy counts as a LIST; PyArrow is impossible.
    let out = peers(data.path(), "http");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("### peers — http (rclone 1.75.2 serve webdav)"),
        "{stdout}"
    );
    for line in [
        "| tpch_q6 | datafusion auto |",
        "| hits_q7 | datafusion off |",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no row {line}:\n{stdout}\n{stderr}"));
        assert!(row.ends_with("| yes |"), "{row}");
    }
    assert!(
        stdout.contains(
            "Not possible on the http wire:\n\n- pyarrow: PyArrow has no HTTP filesystem"
        ),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.path().join("http.json")).unwrap()).unwrap();
    assert_eq!(json["store"], "http");
    assert_eq!(json["impossible"][0][0], "pyarrow");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{json}");
    for run in runs {
        assert_eq!(run["list_requests"], 1, "one PROPFIND per table: {run}");
        assert!(run["requests"].as_u64().unwrap() >= 3, "{run}");
    }
    assert!(data.path().join("peers_http/peers").is_dir());
}
