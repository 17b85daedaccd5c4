//! How deep the pipeline runs: requests in flight before the first one lands.

use std::time::Duration;

use crate::support::{FixtureOptions, fixture, parquet_file};

/// Data requests issued before the first one completed.
async fn requests_before_first_landed(policy: &str, depth: usize) -> usize {
    let files: Vec<_> = (0..12)
        .map(|i| parquet_file(i * 20_000, 20_000, 20_000))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .await;
    fx.set("policy", policy).await;
    fx.set("file_open_depth", &depth.to_string()).await;
    fx.run("SELECT sum(payload) FROM t").await;
    let records = fx.store.records();
    let first_landed = records
        .iter()
        .filter_map(|r| r.finished_at)
        .min()
        .expect("requests completed");
    records
        .iter()
        .filter(|r| r.started_at < first_landed)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_keeps_the_current_and_file_open_depth_files_in_flight() {
    assert_eq!(requests_before_first_landed("off", 8).await, 1);
    assert_eq!(requests_before_first_landed("pipelined", 0).await, 1);
    assert_eq!(requests_before_first_landed("pipelined", 3).await, 4);
    assert_eq!(requests_before_first_landed("pipelined", 8).await, 9);
}
