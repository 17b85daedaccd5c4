//! `prefetch-bench --suite peers` end to end at a tiny scale: the S3 server,
//! the uploads, the latency proxy, one DataFusion process per run, and the
//! cross-engine check. The Python engines are pointed at a Python that does
//! not exist, so the run also shows that a missing engine is skipped, saying
//! why (their own runs need `benches/peers/setup.sh`, not CI).

use std::process::Command;

#[test]
fn the_peers_suite_runs_datafusion_over_the_proxy_and_skips_missing_engines() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_prefetch-bench"))
        .args(["--suite", "peers", "--scale", "0.001", "--iterations", "1"])
        .args(["--queries", "tpch_q6,hits_q7", "--latency", "fixed:2"])
        .args(["--partitions", "2", "--python", "/nonexistent/python"])
        .arg("--data-dir")
        .arg(data.path())
        .output()
        .unwrap();
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
}
