//! The mechanism, shown by request pattern rather than by time: what was asked
//! of the store, and when, relative to the scan's output.

use std::ops::Range;
use std::time::Duration;

use futures::StreamExt;

use datafusion_prefetch::prefetch_stats;

use crate::support::{FixtureOptions, chunk, fixture, parquet_file, settle};

const PAYLOAD: usize = 1;
const TAG: usize = 2;

fn covers(range: &Option<Range<u64>>, wanted: &Range<u64>) -> bool {
    range
        .as_ref()
        .is_some_and(|r| r.start <= wanted.start && wanted.end <= r.end)
}

/// Under `policy`, which requests had been issued when the first batch came out?
async fn requests_at_first_batch(
    files: Vec<bytes::Bytes>,
    policy: &str,
    options: FixtureOptions,
) -> (
    crate::support::Fixture,
    Vec<datafusion_prefetch_simstore::RequestRecord>,
) {
    let fx = fixture(files, options).await;
    fx.set("policy", policy).await;
    let plan = fx.plan("SELECT payload FROM t").await;
    let mut stream = datafusion::physical_plan::execute_stream(plan, fx.ctx.task_ctx()).unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    let records = fx.store.records();
    drop(stream);
    (fx, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_the_next_row_group_before_the_first_batch_is_returned() {
    let file = parquet_file(0, 40_000, 10_000);
    let next = chunk(&file, 1, PAYLOAD);
    let options = || FixtureOptions {
        latency: Duration::from_millis(20),
        ..Default::default()
    };

    let (_, records) = requests_at_first_batch(vec![file.clone()], "pipelined", options()).await;
    assert!(
        records.iter().any(|r| covers(&r.range, &next)),
        "row group 1 ({next:?}) not requested by the first batch: {records:#?}"
    );

    // The control: stock DataFusion asks for row group 1 only after row group 0.
    let (_, records) = requests_at_first_batch(vec![file], "off", options()).await;
    assert!(!records.iter().any(|r| covers(&r.range, &next)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_file_read_ahead_fetches_the_next_footer_and_first_data_before_a_file_ends() {
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 20_000))
        .collect();
    let options = || FixtureOptions {
        latency: Duration::from_millis(20),
        cold_footers: true,
        ..Default::default()
    };
    let (fx, records) = requests_at_first_batch(files.clone(), "pipelined", options()).await;
    let file1 = &fx.files[1];
    let size = file1.1.len() as u64;
    let of_file1: Vec<_> = records
        .iter()
        .filter(|r| r.path == file1.0.as_ref())
        .collect();
    assert!(
        of_file1
            .iter()
            .any(|r| r.range.as_ref().is_some_and(|r| r.end == size)),
        "file 1's footer was not read ahead: {of_file1:#?}"
    );
    let first_data = chunk(&files[1], 0, PAYLOAD);
    assert!(
        of_file1.iter().any(|r| covers(&r.range, &first_data)),
        "file 1's first row group was not read ahead: {of_file1:#?}"
    );

    let (fx, records) = requests_at_first_batch(files, "off", options()).await;
    assert!(!records.iter().any(|r| r.path == fx.files[1].0.as_ref()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_range_is_fetched_once_and_the_budget_holds() {
    let files: Vec<_> = (0..6)
        .map(|i| parquet_file(i * 30_000, 30_000, 5_000))
        .collect();
    for policy in ["batched", "pipelined", "streaming"] {
        let fx = fixture(
            files.clone(),
            FixtureOptions {
                partitions: 3,
                cold_footers: true,
                ..Default::default()
            },
        )
        .await;
        fx.set("policy", policy).await;
        fx.set("read_ahead_window", "256KiB").await;
        fx.set("memory_budget", "512KiB").await;
        let (expected, _) = {
            fx.set("policy", "off").await;
            let out = fx
                .run("SELECT sum(payload), count(*), max(tag) FROM t")
                .await;
            fx.set("policy", policy).await;
            out
        };
        fx.store.reset();
        let (result, stats) = fx
            .run("SELECT sum(payload), count(*), max(tag) FROM t")
            .await;
        assert_eq!(result, expected, "{policy}");
        let stats = &stats[0];
        assert!(stats.bytes_fetched_ahead() > 0, "{policy} never read ahead");
        assert!(
            stats.bytes_served_from_prefetch() > 0,
            "{policy} never served"
        );
        assert!(
            stats.peak_staged_bytes() <= 512 * 1024,
            "{policy}: peak {} over budget",
            stats.peak_staged_bytes()
        );
        // Every projected column chunk was fetched by exactly one request.
        for ((path, _), bytes) in fx.files.iter().zip(&files) {
            let requests = fx.store.get_requests_for(path);
            let row_groups = crate::support::metadata(bytes).num_row_groups();
            for row_group in 0..row_groups {
                for column in [PAYLOAD, TAG] {
                    let wanted = chunk(bytes, row_group, column);
                    let fetching = requests
                        .iter()
                        .filter(|r| {
                            r.range
                                .as_ref()
                                .is_some_and(|r| r.start < wanted.end && wanted.start < r.end)
                        })
                        .count();
                    assert_eq!(
                        fetching,
                        1,
                        "{policy}: {path} row group {row_group} column {column} ({wanted:?}): {:?}",
                        requests.iter().map(|r| r.range.clone()).collect::<Vec<_>>()
                    );
                }
            }
        }
        settle(stats).await;
        assert_eq!(stats.staged_bytes(), 0);
        assert_eq!(stats.live_tasks(), 0);
        assert_eq!(fx.pool.reserved(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_and_early_drop_leave_nothing_staged_or_running() {
    let files: Vec<_> = (0..8)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            partitions: 2,
            latency: Duration::from_millis(10),
            ..Default::default()
        },
    )
    .await;
    for policy in ["batched", "pipelined", "streaming"] {
        fx.set("policy", policy).await;

        let (result, stats) = fx.run("SELECT id FROM t LIMIT 3").await;
        assert_eq!(result.lines().count(), 7, "{result}");
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy} after LIMIT");
        assert_eq!(stats[0].live_tasks(), 0, "{policy} after LIMIT");
        assert_eq!(fx.pool.reserved(), 0, "{policy} after LIMIT");

        let plan = fx.plan("SELECT payload FROM t").await;
        let stats = prefetch_stats(&plan);
        let mut stream =
            datafusion::physical_plan::execute_stream(plan, fx.ctx.task_ctx()).unwrap();
        stream.next().await.unwrap().unwrap();
        assert!(
            stats[0].bytes_fetched_ahead() > 0,
            "{policy} read nothing ahead"
        );
        drop(stream);
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy} after drop");
        assert_eq!(stats[0].live_tasks(), 0, "{policy} after drop");
        assert_eq!(fx.pool.reserved(), 0, "{policy} after drop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tight_memory_pool_shrinks_read_ahead_but_queries_complete() {
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            memory_limit: Some(2 * 1024 * 1024),
            ..Default::default()
        },
    )
    .await;
    // No sort: a sort alone reserves more than this pool holds.
    let sql = "SELECT count(*), sum(payload), max(tag) FROM t";
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(sql).await;
    for policy in ["batched", "pipelined", "streaming"] {
        fx.set("policy", policy).await;
        // A budget far above what the pool can grant alongside the query.
        fx.set("memory_budget", "1GiB").await;
        fx.set("read_ahead_window", "1GiB").await;
        let (result, stats) = fx.run(sql).await;
        assert_eq!(result, expected, "{policy}");
        assert!(stats[0].peak_staged_bytes() <= 2 * 1024 * 1024, "{policy}");
        settle(&stats[0]).await;
        assert_eq!(fx.pool.reserved(), 0);
    }
}

/// Row groups and whole files whose statistics rule out the filter are not
/// fetched ahead: the footer read ahead predicts the opener's pruning, so no
/// GET touches a pruned row group's chunks, under any policy, and the answer
/// is `off`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_groups_pruned_by_statistics_are_never_fetched() {
    // Six files of ids 20,000 apart, row groups of 5,000 ids.
    let files: Vec<_> = (0..6)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
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
    let (low, high) = (47_000u64, 81_000u64);
    let sql = format!("SELECT sum(payload), count(*) FROM t WHERE id >= {low} AND id < {high}");
    // Every chunk of a row group with no id in [low, high).
    let mut pruned: Vec<(String, Range<u64>)> = vec![];
    for (i, (path, file)) in fx.files.iter().enumerate() {
        for rg in 0..4u64 {
            let first = i as u64 * 20_000 + rg * 5_000;
            if first + 5_000 <= low || first >= high {
                for column in 0..3 {
                    pruned.push((path.to_string(), chunk(file, rg as usize, column)));
                }
            }
        }
    }
    assert_eq!(pruned.len(), 16 * 3, "16 of 24 row groups pruned");
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(&sql).await;
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        fx.store.reset();
        let (answer, stats) = fx.run(&sql).await;
        for s in &stats {
            settle(s).await;
        }
        assert_eq!(answer, expected, "{policy}");
        let touched: Vec<_> = fx
            .store
            .records()
            .into_iter()
            .filter(|r| {
                pruned.iter().any(|(path, chunk)| {
                    r.path == *path
                        && r.range
                            .as_ref()
                            .is_some_and(|g| g.start < chunk.end && chunk.start < g.end)
                })
            })
            .collect();
        assert!(touched.is_empty(), "{policy}: {touched:#?}");
        let wasted: u64 = stats.iter().map(|s| s.bytes_wasted()).sum();
        assert_eq!(wasted, 0, "{policy}");
    }
}

/// Two scans of one table at once (a union of two aggregates over `t`, as
/// DataFusion's decorrelated plans of TPC-H q2 and q11 read `partsupp`
/// twice) send one request for each range both read: the second waits for
/// the first's. When one reads a column more, it asks only for that column.
/// What each scan was handed, and the answers, stay as `off`'s.
#[tokio::test]
async fn two_scans_reading_the_same_bytes_at_once_send_one_request() {
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(20),
            partitions: 2,
            ..Default::default()
        },
    )
    .await;
    // A hedge is a GET the store counts whole and the scan does not fetch
    // (its body is dropped unread): under load a 20 ms request may wait
    // past auto's 50 ms, and the byte counts below would differ by it.
    fx.set("hedge_after", "off").await;
    let once = "SELECT sum(payload) AS s FROM t";
    let wider = "SELECT sum(payload) + min(id) AS s FROM t";
    for (first, second) in [(once, once), (once, wider), (wider, once)] {
        let both = format!("{first} UNION ALL {second}");
        fx.set("policy", "off").await;
        let (expected, _) = fx.run(&both).await;
        for policy in ["pipelined", "streaming", "auto"] {
            let case = format!("{policy}: {both}");
            fx.set("policy", policy).await;
            fx.store.reset();
            let (_, stats) = fx.run(wider).await;
            for s in &stats {
                settle(s).await;
            }
            let single_scan = fx.store.bytes_requested();
            fx.store.reset();
            let (answer, stats) = fx.run(&both).await;
            for s in &stats {
                settle(s).await;
            }
            assert_eq!(answer, expected, "{case}");
            assert_eq!(stats.len(), 2, "{case}: two scans");
            let shared: u64 = stats.iter().map(|s| s.bytes_shared()).sum();
            let fetched: u64 = stats.iter().map(|s| s.bytes_fetched()).sum();
            let requested: u64 = stats.iter().map(|s| s.requests()).sum();
            assert!(shared > 0, "{case}: nothing shared");
            // Every shared byte is a byte the store was not asked for, and
            // the requests counted are the store's GETs.
            assert_eq!(fetched - shared, fx.store.bytes_requested(), "{case}");
            assert_eq!(requested, fx.store.get_requests(), "{case}");
            // The two scans together asked the store for little more than
            // the wider of them alone.
            assert!(
                fx.store.bytes_requested() * 4 <= single_scan * 5,
                "{case}: {} bytes requested by two scans, {single_scan} by the wider alone",
                fx.store.bytes_requested()
            );
            for s in &stats {
                assert_eq!(
                    s.bytes_fetched() - s.bytes_wasted(),
                    s.bytes_used(),
                    "{case}"
                );
            }
        }
    }
}
