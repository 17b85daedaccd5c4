//! `auto`: it measures the store and decides — reading like `off` on an
//! instant store, reading ahead (slice by slice where there is an offset index,
//! merging neighbouring ranges into one request) on a slow one — and
//! `EXPLAIN ANALYZE` shows what it measured and decided.

use std::time::Duration;

use crate::support::{Fixture, FixtureOptions, fixture, metric, parquet_file, sql_text};

async fn explain_analyze(fx: &Fixture, sql: &str) -> String {
    sql_text(&fx.ctx, &format!("EXPLAIN ANALYZE {sql}")).await
}

fn files() -> Vec<bytes::Bytes> {
    (0..4)
        .map(|i| parquet_file(i * 40_000, 40_000, 10_000))
        .collect()
}

const SQL: &str = "SELECT count(*), sum(payload), min(id) FROM t";

/// The test files in a store answering every request after `latency`.
async fn store(latency: Duration) -> Fixture {
    fixture(
        files(),
        FixtureOptions {
            latency,
            ..Default::default()
        },
    )
    .await
}

async fn answer(fx: &Fixture, policy: &str) -> String {
    fx.set("policy", policy).await;
    fx.run(SQL).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_instant_store_auto_reads_like_off() {
    let fx = store(Duration::ZERO).await;
    let expected = answer(&fx, "off").await;
    fx.set("policy", "auto").await;
    let text = explain_analyze(&fx, SQL).await;
    assert_eq!(metric(&text, "prefetch_auto_remote"), 0, "{text}");
    assert_eq!(metric(&text, "prefetch_bytes_fetched_ahead"), 0, "{text}");
    assert_eq!(metric(&text, "prefetch_files_page_granular"), 0, "{text}");
    assert!(metric(&text, "prefetch_auto_rtt_us") < 2_000, "{text}");
    assert_eq!(answer(&fx, "auto").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_store_auto_measures_it_and_reads_ahead() {
    let fx = store(Duration::from_millis(25)).await;
    let expected = answer(&fx, "off").await;
    fx.set("policy", "auto").await;
    let text = explain_analyze(&fx, SQL).await;
    assert_eq!(metric(&text, "prefetch_auto_remote"), 1, "{text}");
    let rtt = metric(&text, "prefetch_auto_rtt_us");
    assert!((20_000..200_000).contains(&rtt), "rtt {rtt} us:\n{text}");
    // The store's window of requests in flight (cut only if it throttles,
    // which `throttling.rs` tests).
    assert!(metric(&text, "prefetch_auto_request_window") >= 1, "{text}");
    assert!(metric(&text, "prefetch_bytes_fetched_ahead") > 0, "{text}");
    assert!(
        metric(&text, "prefetch_bytes_served_from_prefetch") > 0,
        "{text}"
    );
    // Row groups of ~200 KB pipeline whole in a 64 MiB window.
    assert_eq!(metric(&text, "prefetch_files_page_granular"), 0, "{text}");
    assert!(
        metric(&text, "prefetch_auto_decode_bytes_per_sec") > 0,
        "{text}"
    );
    // id and payload pages sit side by side: one request carries both.
    assert!(metric(&text, "prefetch_requests_merged") > 0, "{text}");
    assert!(text.contains("prefetch_auto_lead_bytes="), "{text}");
    assert_eq!(answer(&fx, "auto").await, expected);

    // In a 512 KiB window the same row groups are too large to pipeline
    // whole: the files (which have an offset index) are read in slices.
    fx.set("read_ahead_window", "512KiB").await;
    let text = explain_analyze(&fx, SQL).await;
    assert_eq!(metric(&text, "prefetch_files_page_granular"), 4, "{text}");
    assert!(metric(&text, "prefetch_slices") > 4, "{text}");
    assert_eq!(answer(&fx, "auto").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_store_most_bytes_come_from_read_ahead() {
    // Wall time is for benchmarks; the mechanism shows in what is waited for:
    // off waits for every request, auto has most of them in flight early.
    let fx = store(Duration::from_millis(25)).await;
    fx.set("policy", "off").await;
    let off = explain_analyze(&fx, SQL).await;
    fx.set("policy", "auto").await;
    let auto = explain_analyze(&fx, SQL).await;
    let served = metric(&auto, "prefetch_bytes_served_from_prefetch");
    let fetched = metric(&auto, "prefetch_bytes_fetched");
    // Most bytes the decoder read came from read-ahead.
    assert!(
        served * 2 > fetched,
        "served {served} of {fetched}:\n{auto}"
    );
    assert!(!off.contains("prefetch_auto_remote"), "{off}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_what_auto_measured_of_a_store() {
    // Footers are cached at registration, so the first auto scan of the
    // session has nothing timed and probes the store with one HEAD; the next
    // scans start from what the first measured and probe no more.
    let fx = store(Duration::from_millis(25)).await;
    fx.set("policy", "auto").await;
    fx.store.reset();
    let first = explain_analyze(&fx, SQL).await;
    assert_eq!(fx.store.head_requests(), 1, "{first}");
    fx.store.reset();
    let second = explain_analyze(&fx, SQL).await;
    assert_eq!(fx.store.head_requests(), 0, "{second}");
    assert_eq!(metric(&second, "prefetch_auto_remote"), 1, "{second}");
}
