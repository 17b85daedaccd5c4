//! The byte counts a scan reports are measurements: its `bytes_fetched` and
//! `requests` are exactly the data GETs the store saw (footers and page
//! indexes aside), and every byte fetched was handed to a decoder
//! (`bytes_used`) or is waste (`bytes_wasted`), never both:
//! `bytes_fetched - bytes_wasted == bytes_used`.

use std::time::Duration;

use bytes::Bytes;
use datafusion_prefetch::PrefetchStats;

use crate::support::{FixtureOptions, fixture, metadata, parquet_file_with, settle};

/// Where `file`'s column chunks end: GETs below it read data, GETs from it
/// on read the page index or the footer.
fn data_end(file: &Bytes) -> u64 {
    metadata(file)
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .map(|c| {
            let (start, len) = c.byte_range();
            start + len
        })
        .max()
        .unwrap()
}

fn sum(stats: &[std::sync::Arc<PrefetchStats>], f: fn(&PrefetchStats) -> u64) -> u64 {
    stats.iter().map(|s| f(s)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_bytes_are_the_stores_data_gets_and_each_is_used_or_wasted() {
    // Six files of four row groups, pages of 500 rows (slices for streaming).
    let files: Vec<Bytes> = (0..6)
        .map(|i| {
            parquet_file_with(i * 20_000, 20_000, 5_000, |props| {
                props
                    .set_data_page_row_count_limit(500)
                    .set_write_batch_size(500)
            })
        })
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(10),
            partitions: 2,
            ..Default::default()
        },
    )
    .await;
    let data_ends: Vec<(String, u64)> = fx
        .files
        .iter()
        .map(|(path, bytes)| (path.to_string(), data_end(bytes)))
        .collect();
    let queries = [
        // Every chunk of two columns.
        "SELECT sum(payload), count(*), min(id) FROM t",
        // Row groups and files pruned by their statistics, some after they
        // were read ahead.
        "SELECT sum(payload) FROM t WHERE id >= 47000 AND id < 81000",
        // A filter the page index narrows.
        "SELECT id, payload FROM t WHERE id % 1000 = 3 ORDER BY id",
    ];
    for policy in ["batched", "pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        fx.set("read_ahead_window", "256KiB").await;
        let mut wasted_somewhere = false;
        for sql in queries {
            fx.store.reset();
            let (_, stats) = fx.run(sql).await;
            for s in &stats {
                settle(s).await;
            }
            let what = format!("{policy}: {sql}");
            let data_gets: Vec<_> = fx
                .store
                .records()
                .into_iter()
                .filter(|r| {
                    let end = data_ends.iter().find(|(p, _)| *p == r.path).unwrap().1;
                    r.range.as_ref().is_some_and(|range| range.start < end)
                })
                .collect();
            let store_bytes: u64 = data_gets
                .iter()
                .map(|r| r.range.as_ref().map_or(0, |r| r.end - r.start))
                .sum();
            let (fetched, wasted, used) = (
                sum(&stats, PrefetchStats::bytes_fetched),
                sum(&stats, PrefetchStats::bytes_wasted),
                sum(&stats, PrefetchStats::bytes_used),
            );
            assert_eq!(fetched, store_bytes, "{what}: fetched vs the store's GETs");
            assert_eq!(
                sum(&stats, PrefetchStats::requests),
                data_gets.len() as u64,
                "{what}: requests"
            );
            assert_eq!(fetched - wasted, used, "{what}");
            assert!(used > 0, "{what}");
            wasted_somewhere |= wasted > 0;
        }
        // The pruning query wastes read-ahead under every policy but batched
        // (which fetches nothing its decoder does not ask for in the same read).
        if policy != "batched" {
            assert!(wasted_somewhere, "{policy}: no waste where some is certain");
        }
    }
}

/// `auto` on a store it measured local reads as stock DataFusion does, past
/// the scheduler: those reads are counted as used all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_as_stock_under_auto_are_counted_as_used() {
    let files: Vec<Bytes> = (0..3)
        .map(|i| parquet_file_with(i * 20_000, 20_000, 5_000, |props| props))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            latency: Duration::ZERO,
            ..Default::default()
        },
    )
    .await;
    fx.set("policy", "auto").await;
    let (_, stats) = fx.run("SELECT sum(payload), count(*) FROM t").await;
    let (fetched, wasted, used) = (
        sum(&stats, PrefetchStats::bytes_fetched),
        sum(&stats, PrefetchStats::bytes_wasted),
        sum(&stats, PrefetchStats::bytes_used),
    );
    assert_eq!(
        sum(&stats, PrefetchStats::bytes_fetched_ahead),
        0,
        "as stock"
    );
    assert!(used > 0);
    assert_eq!(fetched - wasted, used);
}
