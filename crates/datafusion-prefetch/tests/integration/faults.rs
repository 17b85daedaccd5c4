//! Store faults under prefetching: a failed prefetch never fails a query whose
//! demand read succeeds, and nothing is left staged or running afterwards.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion_prefetch::PrefetchStats;
use datafusion_prefetch_simstore::{Fault, FaultKind, FaultRule};

use crate::support::{Fixture, FixtureOptions, chunk, fixture, parquet_file, settle};

const PAYLOAD: usize = 1;

/// The query the four-file tests run.
const SUM: &str = "SELECT sum(payload), count(*) FROM t";

/// The first GET of file 2's payload (of `files`, served by `fx`) never
/// answers.
fn stall_file_2_payload_once(fx: &Fixture, files: &[Bytes]) {
    let (path, _) = &fx.files[2];
    fx.faults.push(
        FaultRule::new(Fault::Stall)
            .path(path.as_ref())
            .overlapping(chunk(&files[2], 0, PAYLOAD))
            .once(),
    );
}

/// Run `sql`, which must not hang on a stalled GET.
async fn run_within_30s(fx: &Fixture, sql: &str) -> (String, Vec<Arc<PrefetchStats>>) {
    tokio::time::timeout(Duration::from_secs(30), fx.run(sql))
        .await
        .expect("a stalled GET must not hang the query")
}

/// Four single-row-group files at 20 ms per request, and [`SUM`]'s result
/// under `off`.
async fn four_files_at_20ms() -> (Vec<Bytes>, Fixture, String) {
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 20_000))
        .collect();
    let fx = fixture(
        files.clone(),
        FixtureOptions {
            latency: Duration::from_millis(20),
            ..Default::default()
        },
    )
    .await;
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(SUM).await;
    (files, fx, expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prefetch_falls_back_to_the_demand_read() {
    let (files, fx, expected) = four_files_at_20ms().await;
    let sql = SUM;

    // Under pipelined, the first GET of file 2's payload is a read-ahead: fail it.
    let (path, _) = &fx.files[2];
    let failing = FaultRule::new(Fault::Error)
        .path(path.as_ref())
        .overlapping(chunk(&files[2], 0, PAYLOAD))
        .once();
    fx.faults.push(failing.clone());
    fx.set("policy", "pipelined").await;
    let (result, stats) = fx.run(sql).await;
    assert_eq!(result, expected);
    assert_eq!(
        fx.fault_stats.injected(FaultKind::Error),
        1,
        "the fault fired"
    );
    settle(&stats[0]).await;
    assert_eq!(stats[0].staged_bytes(), 0);
    assert_eq!(stats[0].live_tasks(), 0);
    assert_eq!(fx.pool.reserved(), 0);

    // The control: under off the same fault hits the demand read and fails the query.
    fx.faults.set([failing]);
    fx.set("policy", "off").await;
    let plan = fx.plan(sql).await;
    let err = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("injected error"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_demand_read_fails_the_query_and_leaves_nothing_behind() {
    let files: Vec<_> = (0..6)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let fx = fixture(files, FixtureOptions::default()).await;
    // Every data read of file 3 fails, ahead or on demand.
    let (path, _) = &fx.files[3];
    fx.faults
        .push(FaultRule::new(Fault::Error).path(path.as_ref()));
    for policy in ["batched", "pipelined", "streaming"] {
        fx.set("policy", policy).await;
        let plan = fx.plan("SELECT sum(payload) FROM t").await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        let err = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reading sim://bucket/data/file_003.parquet bytes ["),
            "{policy}: {err}"
        );
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy}");
        assert_eq!(stats[0].live_tasks(), 0, "{policy}");
        assert_eq!(fx.pool.reserved(), 0, "{policy}");
    }
}

/// On a local store a failed read names the file by its path, leading `/`
/// included (an object path has none), as the user gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_of_a_local_file_names_it_by_its_path() {
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    use datafusion_prefetch::prefetching_context;
    use datafusion_prefetch_simstore::FaultyStore;
    use object_store::local::LocalFileSystem;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.parquet");
    let bytes = parquet_file(0, 20_000, 5_000);
    let data = 0..bytes.len() as u64 / 2;
    std::fs::write(&file, bytes).unwrap();
    let store = FaultyStore::new(LocalFileSystem::new());
    let faults = store.faults();
    let ctx: SessionContext = prefetching_context(Default::default());
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        std::sync::Arc::new(store),
    );
    ctx.register_parquet("t", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    // Registered (its footer cached): every read of its data fails.
    faults.push(
        FaultRule::new(Fault::Error)
            .path_contains("f.parquet")
            .overlapping(data),
    );
    ctx.sql("SET prefetch.policy = 'pipelined'").await.unwrap();
    let err = ctx
        .sql("SELECT sum(payload) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("reading {} bytes [", file.display())),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_prefetch_is_abandoned_for_a_demand_read() {
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 20_000))
        .collect();
    let fx = fixture(files.clone(), FixtureOptions::default()).await;
    let sql = "SELECT sum(payload), count(*) FROM t";
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(sql).await;

    // The read-ahead of file 2's payload never answers; the retry does.
    stall_file_2_payload_once(&fx, &files);
    fx.set("policy", "pipelined").await;
    let (result, stats) = run_within_30s(&fx, sql).await;
    assert_eq!(result, expected);
    assert_eq!(
        fx.fault_stats.injected(FaultKind::Stall),
        1,
        "the stall fired"
    );
    settle(&stats[0]).await;
    assert_eq!(stats[0].staged_bytes(), 0);
    assert_eq!(
        stats[0].live_tasks(),
        0,
        "the stalled request was cancelled"
    );
    assert_eq!(fx.pool.reserved(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sends_a_request_that_does_not_answer_again_beside_it() {
    let (files, fx, expected) = four_files_at_20ms().await;
    let sql = SUM;
    // A first run measures the store (20 ms per request) for the session:
    // the next run's GETs are hedged after two of them from the start.
    fx.set("policy", "auto").await;
    let (result, _) = fx.run(sql).await;
    assert_eq!(result, expected);

    // The first GET of file 2's payload never answers; its hedge does.
    stall_file_2_payload_once(&fx, &files);
    let (result, stats) = run_within_30s(&fx, sql).await;
    assert_eq!(result, expected);
    assert_eq!(fx.fault_stats.injected(FaultKind::Stall), 1);
    assert!(
        stats[0].requests_hedged() >= 1,
        "the stalled GET was hedged"
    );
    assert!(
        (1..=stats[0].requests_hedged()).contains(&stats[0].hedges_won()),
        "the stalled GET's hedge answered it: {} of {} hedges won",
        stats[0].hedges_won(),
        stats[0].requests_hedged()
    );
    settle(&stats[0]).await;
    assert_eq!(stats[0].staged_bytes(), 0);
    assert_eq!(stats[0].live_tasks(), 0, "the stalled GET was dropped");
    assert_eq!(
        stats[0].bytes_fetched() - stats[0].bytes_wasted(),
        stats[0].bytes_used()
    );
    assert_eq!(fx.pool.reserved(), 0);

    // With hedging off the stalled read-ahead is abandoned for a demand read.
    fx.set("hedge_after", "off").await;
    stall_file_2_payload_once(&fx, &files);
    let (result, stats) = run_within_30s(&fx, sql).await;
    assert_eq!(result, expected);
    assert_eq!(fx.fault_stats.injected(FaultKind::Stall), 2);
    assert_eq!(stats[0].requests_hedged(), 0);
    assert_eq!(stats[0].hedges_won(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demand_read_that_stalls_fails_after_the_request_timeout() {
    let files = vec![parquet_file(0, 20_000, 20_000)];
    let fx = fixture(files.clone(), FixtureOptions::default()).await;
    let (path, _) = &fx.files[0];
    // Every read of the payload column stalls, demand reads included.
    fx.faults.push(
        FaultRule::new(Fault::Stall)
            .path(path.as_ref())
            .overlapping(chunk(&files[0], 0, PAYLOAD)),
    );
    fx.set("request_timeout", "300ms").await;
    for policy in ["batched", "pipelined", "streaming"] {
        fx.set("policy", policy).await;
        let plan = fx.plan("SELECT sum(payload) FROM t").await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            datafusion::physical_plan::collect(plan, fx.ctx.task_ctx()),
        )
        .await
        .expect("the timeout must end the query");
        let error = outcome
            .expect_err("a stalled demand read fails the query")
            .to_string();
        assert!(
            error.contains("prefetch.request_timeout"),
            "{policy}: {error}"
        );
        assert!(error.contains(path.as_ref()), "{policy}: {error}");
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy}");
        assert_eq!(stats[0].live_tasks(), 0, "{policy}");
        assert_eq!(fx.pool.reserved(), 0, "{policy}");
    }
    assert!(fx.fault_stats.injected(FaultKind::Stall) >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_error_on_a_demand_read_fails_the_query_naming_the_file() {
    // One file, one row group. Under pipelined its first data read may be
    // fetched ahead when the stream is created; a failed read-ahead falls
    // back to the decoder's own read, so the error strikes twice.
    let files = vec![parquet_file(0, 20_000, 20_000)];
    let fx = fixture(files.clone(), FixtureOptions::default()).await;
    let (path, _) = &fx.files[0];
    for policy in ["off", "batched", "pipelined"] {
        fx.faults.set([FaultRule::new(Fault::Error)
            .path(path.as_ref())
            .overlapping(chunk(&files[0], 0, PAYLOAD))
            .times(2)]);
        fx.set("policy", policy).await;
        let plan = fx.plan("SELECT sum(payload) FROM t").await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        let error = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx())
            .await
            .expect_err("a failed demand read fails the query, as under off")
            .to_string();
        assert!(error.contains("injected error"), "{policy}: {error}");
        if policy != "off" {
            assert!(error.contains(path.as_ref()), "{policy}: {error}");
            settle(&stats[0]).await;
            assert_eq!(stats[0].staged_bytes(), 0, "{policy}");
            assert_eq!(stats[0].live_tasks(), 0, "{policy}");
        }
        assert_eq!(fx.pool.reserved(), 0, "{policy}");
    }
}

/// Bytes of `file` between the magic number and the footer: every column
/// chunk, no footer.
fn data_bytes(file: &bytes::Bytes) -> std::ops::Range<u64> {
    let footer = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap());
    4..file.len() as u64 - 8 - u64::from(footer)
}

/// Every data read of one file stalls forever (its footer does not, so it
/// opens): the partition scanning it hangs, as under `off`, but the other
/// partitions — which share the scan's scheduler, budget and pool reservation
/// with it — finish with every row of their files while the stall is still in
/// effect, and dropping the stalled stream leaves nothing behind. `off` is the
/// control: if it did not finish the other partitions either, the test would
/// prove nothing about read-ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_request_does_not_block_other_partitions() {
    use datafusion::arrow::array::UInt64Array;
    use datafusion::physical_plan::execute_stream_partitioned;
    use futures::TryStreamExt;

    const STALLED: usize = 0;
    let files: Vec<_> = (0..4)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let fx = fixture(
        files.clone(),
        FixtureOptions {
            partitions: 4,
            // Above auto's 5 ms local threshold, so auto reads ahead too.
            latency: Duration::from_millis(10),
            ..Default::default()
        },
    )
    .await;
    let (path, _) = &fx.files[STALLED];
    fx.faults.push(
        FaultRule::new(Fault::Stall)
            .path(path.as_ref())
            .overlapping(data_bytes(&files[STALLED])),
    );
    // Small enough that a stalled read-ahead holding its bytes would squeeze
    // the other partitions' read-ahead, large enough for a row group each.
    fx.set("read_ahead_window", "128KiB").await;
    fx.set("memory_budget", "256KiB").await;
    let others: u64 = (0..4u64)
        .filter(|i| *i != STALLED as u64)
        .map(|i| (i * 20_000..(i + 1) * 20_000).sum::<u64>())
        .sum();
    for policy in datafusion_prefetch::PrefetchPolicy::ALL {
        let stalls_before = fx.fault_stats.injected(FaultKind::Stall);
        fx.set("policy", policy.name()).await;
        let plan = fx.plan("SELECT id FROM t").await;
        let stats = datafusion_prefetch::prefetch_stats(&plan);
        let streams = execute_stream_partitioned(plan, fx.ctx.task_ctx()).unwrap();
        assert_eq!(streams.len(), 4, "{policy}: one stream per file");
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|stream| {
                tokio::spawn(async move {
                    let batches: Vec<datafusion::arrow::array::RecordBatch> =
                        stream.try_collect().await?;
                    let ids: Vec<u64> = batches
                        .iter()
                        .flat_map(|b| {
                            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>();
                            ids.unwrap().values().to_vec()
                        })
                        .collect();
                    datafusion::common::Result::<Vec<u64>>::Ok(ids)
                })
            })
            .collect();
        // Three partitions finish while the fourth is stalled.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tasks.iter().filter(|t| t.is_finished()).count() < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{policy}: only {} of the other 3 partitions finished in 30 s",
                tasks.iter().filter(|t| t.is_finished()).count()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Give a wrongly finishing stalled stream a moment to show itself.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (done, pending): (Vec<_>, Vec<_>) = tasks.into_iter().partition(|t| t.is_finished());
        assert_eq!(pending.len(), 1, "{policy}: the stalled partition finished");
        assert!(
            fx.fault_stats.injected(FaultKind::Stall) > stalls_before,
            "{policy}: no request stalled"
        );
        let mut sum = 0u64;
        let mut rows = 0usize;
        for task in done {
            let ids = task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{policy}: {e}"));
            assert!(
                ids.iter().all(|id| *id / 20_000 != STALLED as u64),
                "{policy}: rows of the stalled file"
            );
            rows += ids.len();
            sum += ids.iter().sum::<u64>();
        }
        assert_eq!(rows, 60_000, "{policy}: rows of the other files");
        assert_eq!(sum, others, "{policy}: ids of the other files");
        // The other partitions kept reading ahead beside the stalled request
        // (a full window of the stalled partition once stopped all read-ahead).
        let served: u64 = stats.iter().map(|s| s.bytes_served_from_prefetch()).sum();
        assert_eq!(
            served > 0,
            policy != datafusion_prefetch::PrefetchPolicy::Off,
            "{policy}: {served} bytes served from read-ahead"
        );
        for task in pending {
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
        }
        crate::support::assert_released(&stats, fx.pool.as_ref(), &policy.to_string()).await;
    }
}
