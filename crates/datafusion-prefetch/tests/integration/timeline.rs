//! How deep the pipeline runs and when it starts: requests in flight before
//! the first one lands, and streams that read before they are polled.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{Fixture, FixtureOptions, assert_released, fixture, parquet_file};

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
    issued_before_first_landed(&fx.store.records())
}

/// How many of `records` were issued before the first of them completed.
fn issued_before_first_landed(records: &[datafusion_prefetch_simstore::RequestRecord]) -> usize {
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

/// One single-row-group file at `latency_ms` per request.
async fn one_file_at(latency_ms: u64) -> Fixture {
    fixture(
        vec![parquet_file(0, 20_000, 20_000)],
        FixtureOptions {
            latency: Duration::from_millis(latency_ms),
            ..Default::default()
        },
    )
    .await
}

/// `sql` over one single-row-group file at 50 ms per request, under
/// `policy`: its requests, how many were issued before the first one landed,
/// and its result. `plan_shows` is an operator the plan must have.
async fn one_file_requests(policy: &str, sql: &str, plan_shows: &str) -> (usize, usize, String) {
    let fx = one_file_at(50).await;
    fx.set("policy", policy).await;
    let plan = fx.plan(sql).await;
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string();
    assert!(shown.contains(plan_shows), "{shown}");
    let (result, _) = fx.run(sql).await;
    let records = fx.store.records();
    (records.len(), issued_before_first_landed(&records), result)
}

/// A self-join of one single-row-group file under `policy`. The two sides
/// read different columns: reads of the same bytes at once would be shared
/// (`mechanism::two_scans_reading_the_same_bytes_at_once_send_one_request`).
async fn join_requests(policy: &str) -> (usize, usize, String) {
    let sql = "SELECT count(*), sum(b.id) FROM t a JOIN t b ON a.payload = b.id";
    one_file_requests(policy, sql, "HashJoinExec").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_side_of_a_join_reads_while_the_build_side_does() {
    // Stock DataFusion reads the probe side once the build side is done.
    let (off_requests, off_before, off_result) = join_requests("off").await;
    assert_eq!(off_before, 1);
    // Every stream is created before any is polled: the probe side's first
    // read goes out with the build side's, and nothing is read twice.
    let (requests, before, result) = join_requests("pipelined").await;
    assert_eq!(before, 2);
    assert_eq!(requests, off_requests);
    assert_eq!(result, off_result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_started_but_never_polled_release_everything_when_dropped() {
    let fx = one_file_at(20).await;
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        let plan = fx
            .plan("SELECT count(*) FROM t a JOIN t b ON a.id = b.id")
            .await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        assert_eq!(stats.len(), 2);
        let stream = datafusion::physical_plan::execute_stream(plan, fx.ctx.task_ctx()).unwrap();
        // Never polled: both scans read their first file on their own.
        for _ in 0..200 {
            if stats.iter().all(|s| s.staged_bytes() > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            stats.iter().all(|s| s.staged_bytes() > 0),
            "{policy}: both scans staged their first read"
        );
        drop(stream);
        assert_released(&stats, fx.pool.as_ref(), policy).await;
    }
}

/// A scalar subquery over the one-file table: DataFusion runs the main
/// input only once the subquery has its value. The two read different
/// columns (reads of the same bytes at once would be shared).
const SCALAR_SUBQUERY: &str =
    "SELECT count(*), sum(id) FROM t WHERE id < (SELECT avg(payload) FROM t)";

/// [`SCALAR_SUBQUERY`] under `policy`.
async fn scalar_subquery_requests(policy: &str) -> (usize, usize, String) {
    one_file_requests(policy, SCALAR_SUBQUERY, "ScalarSubqueryExec").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scalar_subquerys_main_input_reads_while_the_subquery_does() {
    // Stock DataFusion creates the main input's scan once the subquery is done.
    let (off_requests, off_before, off_result) = scalar_subquery_requests("off").await;
    assert_eq!(off_before, 1);
    // The subquery's scan starts the main input's with its first stream.
    for policy in ["pipelined", "auto"] {
        let (requests, before, result) = scalar_subquery_requests(policy).await;
        assert_eq!(before, 2, "{policy}");
        assert_eq!(requests, off_requests, "{policy}");
        assert_eq!(result, off_result, "{policy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_input_started_early_releases_everything_when_the_subquery_fails() {
    let fx = one_file_at(20).await;
    // The subquery returns 20,000 rows: the query fails, and the main input,
    // started by the subquery's scan, is never created by DataFusion. The
    // two read different columns: a read of the same bytes would wait for
    // the subquery's request and count as fetched only once it landed.
    let sql = "SELECT count(*) FROM t WHERE id > (SELECT payload FROM t)";
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        let plan = fx.plan(sql).await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        assert_eq!(stats.len(), 2);
        let err = datafusion::physical_plan::collect(Arc::clone(&plan), fx.ctx.task_ctx())
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("more than one row"),
            "{policy}: {err}"
        );
        assert!(
            stats.iter().all(|s| s.bytes_fetched() > 0),
            "{policy}: both scans read"
        );
        drop(plan);
        assert_released(&stats, fx.pool.as_ref(), policy).await;
    }
}
