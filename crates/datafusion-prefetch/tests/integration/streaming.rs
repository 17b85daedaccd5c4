//! `streaming`: decoding starts when a slice's pages land, staged memory follows
//! the window rather than the row-group size, and files without an offset
//! index are read at row-group granularity.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use tokio::time::Instant;

use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::StreamExt;
use parquet::file::properties::EnabledStatistics;

use crate::support::{
    FixtureOptions, fixture, metadata, metric, parquet_file, parquet_file_with, settle, sql_text,
};

const PAYLOAD: usize = 1;

/// The data pages of `column` in every row group of `file` (offset index).
fn pages(file: &bytes::Bytes, column: usize) -> Vec<Range<u64>> {
    let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required)
        .parse_and_finish(file)
        .unwrap();
    metadata
        .offset_index()
        .unwrap()
        .iter()
        .flat_map(|row_group| row_group[column].page_locations().to_vec())
        .map(|p| p.offset as u64..(p.offset + i64::from(p.compressed_page_size)) as u64)
        .collect()
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// When the first batch of `SELECT payload FROM t` came out, and when each
/// request for the payload column finished.
async fn first_batch_and_payload_requests(policy: &str) -> (Instant, Vec<Option<Instant>>, usize) {
    // One row group of 400k rows: 20 pages of payload (3.2 MB). No
    // dictionary, so the first slice is as small as the others.
    let file = parquet_file_with(0, 400_000, 400_000, |props| {
        props.set_dictionary_enabled(false)
    });
    let payload = crate::support::chunk(&file, 0, PAYLOAD);
    let fx = fixture(
        vec![file],
        FixtureOptions {
            latency: Duration::from_millis(10),
            bandwidth: Some(16 << 20),
            ..Default::default()
        },
    )
    .await;
    fx.set("policy", policy).await;
    fx.set("read_ahead_window", "1MiB").await;
    let plan = fx.plan("SELECT payload FROM t").await;
    let mut stream = datafusion::physical_plan::execute_stream(plan, fx.ctx.task_ctx()).unwrap();
    let first = stream.next().await.unwrap().unwrap();
    let at = Instant::now();
    assert!(first.num_rows() > 0);
    while let Some(batch) = stream.next().await {
        batch.unwrap();
    }
    let records: Vec<_> = fx
        .store
        .records()
        .into_iter()
        .filter(|r| r.range.as_ref().is_some_and(|r| overlaps(r, &payload)))
        .collect();
    let finished = records.iter().map(|r| r.finished_at).collect();
    (at, finished, records.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_decodes_the_first_slice_before_its_row_group_has_landed() {
    let (first_batch, finished, requests) = first_batch_and_payload_requests("streaming").await;
    assert!(requests > 1, "one request for the whole chunk");
    assert!(
        finished.iter().any(|f| f.is_none_or(|f| f > first_batch)),
        "every payload request had finished before the first batch"
    );

    // The control: at row-group granularity the first batch waits for all of it.
    let (first_batch, finished, _) = first_batch_and_payload_requests("pipelined").await;
    assert!(
        finished.iter().all(|f| f.is_some_and(|f| f <= first_batch)),
        "pipelined produced a batch before its row group landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_smaller_than_a_row_group_holds_and_answers_match() {
    // Row groups of ~1.7 MB against a 1 MiB budget (no dictionaries: a
    // dictionary page must fit beside its slices, see the slice planner).
    let files: Vec<_> = (0..2)
        .map(|i| {
            parquet_file_with(i * 400_000, 400_000, 100_000, |props| {
                props.set_dictionary_enabled(false)
            })
        })
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            partitions: 2,
            ..Default::default()
        },
    )
    .await;
    let queries = [
        "SELECT sum(payload), count(*), max(tag), min(id) FROM t",
        "SELECT id, payload FROM t WHERE id % 50000 = 7 ORDER BY id",
        "SELECT tag, count(*) FROM t WHERE payload > 500000 GROUP BY tag ORDER BY tag",
        "SELECT id FROM t WHERE id BETWEEN 123456 AND 123470 ORDER BY id",
    ];
    for sql in queries {
        fx.set("policy", "off").await;
        let (expected, _) = fx.run(sql).await;
        fx.set("policy", "streaming").await;
        fx.set("read_ahead_window", "512KiB").await;
        fx.set("memory_budget", "1MiB").await;
        let (result, stats) = fx.run(sql).await;
        assert_eq!(result, expected, "{sql}");
        let stats = &stats[0];
        assert!(
            stats.peak_staged_bytes() <= 1024 * 1024,
            "peak {} over budget: {sql}",
            stats.peak_staged_bytes()
        );
        settle(stats).await;
        assert_eq!(stats.staged_bytes(), 0);
        assert_eq!(stats.live_tasks(), 0);
        assert_eq!(fx.pool.reserved(), 0);
    }
    // The first query read ahead, within the budget, at page granularity.
    let (_, stats) = fx.run(queries[0]).await;
    assert!(stats[0].bytes_served_from_prefetch() > 0);
    assert!(stats[0].peak_staged_bytes() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_page_is_fetched_once() {
    let files: Vec<_> = (0..3)
        .map(|i| parquet_file(i * 200_000, 200_000, 200_000))
        .collect();
    let fx = fixture(
        files.clone(),
        FixtureOptions {
            cold_footers: true,
            latency: Duration::from_millis(10),
            ..Default::default()
        },
    )
    .await;
    fx.set("policy", "streaming").await;
    fx.set("read_ahead_window", "4MiB").await;
    let (result, _) = fx.run("SELECT sum(payload) FROM t").await;
    let streaming_records = fx.store.records();
    fx.set("policy", "off").await;
    let (expected, _) = fx.run("SELECT sum(payload) FROM t").await;
    assert_eq!(result, expected);

    // Every payload page of every file was requested by exactly one GET.
    let mut per_page: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for ((path, _), bytes) in fx.files.iter().zip(&files) {
        for page in pages(bytes, PAYLOAD) {
            let size = bytes.len() as u64;
            let count = streaming_records
                .iter()
                .filter(|r| r.path == path.as_ref())
                // Footer reads take the file's tail, whatever it holds.
                .filter(|r| r.range.as_ref().is_some_and(|r| r.end != size))
                .filter(|r| r.range.as_ref().is_some_and(|r| overlaps(r, &page)))
                .count();
            per_page.insert((path.to_string(), page.start), count);
        }
    }
    assert!(
        per_page.values().all(|&n| n == 1),
        "pages not fetched exactly once: {:?}",
        per_page
            .iter()
            .filter(|(_, n)| **n != 1)
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_without_an_offset_index_are_read_at_row_group_granularity() {
    let with_index = parquet_file(0, 50_000, 25_000);
    let without_index = parquet_file_with(50_000, 50_000, 25_000, |props| {
        props
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true)
    });
    assert!(
        parquet::file::metadata::ParquetMetaDataReader::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional)
            .parse_and_finish(&without_index)
            .unwrap()
            .offset_index()
            .is_none()
    );
    assert!(metadata(&with_index).num_row_groups() == 2);
    let fx = fixture(vec![with_index, without_index], FixtureOptions::default()).await;
    fx.set("policy", "streaming").await;
    let batches = fx
        .ctx
        .sql("EXPLAIN ANALYZE SELECT sum(payload) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = pretty_format_batches(&batches).unwrap().to_string();
    for metric in [
        "prefetch_files_page_granular=1",
        "prefetch_files_row_group_granular=1",
        "prefetch_slices=",
        "prefetch_bytes_page_granular=",
        "prefetch_bytes_row_group_granular=",
    ] {
        assert!(text.contains(metric), "{metric} missing from\n{text}");
    }
}

/// A scan a sort was pushed into may read its row groups out of file order
/// (here reversed, for `ORDER BY id DESC`): `streaming` and `auto` keep its
/// files whole rather than slicing them, and answer as `off` does. What
/// tells them is the pushdown call itself, not the plan's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_a_sort_was_pushed_into_is_read_in_whole_row_groups() {
    let files: Vec<_> = (0..4)
        .map(|i| {
            parquet_file_with(i * 40_000, 40_000, 20_000, |props| {
                props
                    .set_dictionary_enabled(false)
                    .set_data_page_row_count_limit(1000)
                    .set_write_batch_size(1000)
            })
        })
        .collect();
    let fx = fixture(files, FixtureOptions::default()).await;
    let top = "SELECT id, payload FROM t ORDER BY id DESC LIMIT 5";
    fx.set("policy", "off").await;
    let expected = sql_text(&fx.ctx, top).await;
    for policy in ["streaming", "auto"] {
        fx.set("policy", policy).await;
        // Row groups too large to read ahead whole: files are sliced.
        fx.set("read_ahead_window", "128KiB").await;
        let full = sql_text(&fx.ctx, "EXPLAIN ANALYZE SELECT sum(payload) FROM t").await;
        assert_eq!(metric(&full, "prefetch_files_page_granular"), 4, "{full}");
        let sorted = sql_text(&fx.ctx, &format!("EXPLAIN ANALYZE {top}")).await;
        // The premise: DataFusion pushed the sort into the scan.
        assert!(sorted.contains("reverse_row_groups=true"), "{sorted}");
        assert_eq!(
            metric(&sorted, "prefetch_files_page_granular"),
            0,
            "{policy}: {sorted}"
        );
        assert_eq!(sql_text(&fx.ctx, top).await, expected, "{policy}");
    }
}
