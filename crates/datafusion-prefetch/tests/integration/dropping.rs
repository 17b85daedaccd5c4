//! Streams dropped where no tokio runtime is current: on a plain thread (as
//! datafusion-ffi releases a stream) and after the runtime they ran on has
//! shut down. Dropping a reader tells the scan's scheduler, whose answer may
//! start work (reads ahead, footers of files opened ahead): that work goes to
//! the runtime the scan started on, or, once that one is gone, nowhere. No
//! drop panics, and what the scan held is let go.

use std::sync::Arc;
use std::time::Duration;

use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream, execute_stream};
use datafusion_prefetch::prefetch_stats;
use futures::StreamExt;

use crate::support::{
    Fixture, FixtureOptions, assert_nothing_left, fixture, parquet_file, sql_text,
};

const POLICIES: [&str; 5] = ["off", "batched", "pipelined", "streaming", "auto"];

/// Twenty-four files of four row groups at 30 ms a request, one partition:
/// a stream dropped after its first batch leaves files opened ahead and
/// reads ahead of them in flight.
async fn files_at_30ms() -> Fixture {
    let files: Vec<_> = (0..24)
        .map(|i| parquet_file(i * 2_000, 2_000, 500))
        .collect();
    fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(30),
            partitions: 1,
            cold_footers: true,
            ..Default::default()
        },
    )
    .await
}

/// The plan of a scan of every column of `t` under `policy`, and its stream
/// after its first batch (the first file read, the next ones opened ahead).
async fn partly_read(
    fx: &Fixture,
    policy: &str,
) -> (Arc<dyn ExecutionPlan>, SendableRecordBatchStream) {
    fx.set("policy", policy).await;
    // Small windows, so that what a closed reader frees lets more start.
    fx.set("read_ahead_window", "64KiB").await;
    let plan = fx.plan("SELECT * FROM t").await;
    let mut stream = execute_stream(Arc::clone(&plan), fx.ctx.task_ctx()).unwrap();
    stream.next().await.unwrap().unwrap();
    // Let the footers and reads ahead of the next files go out.
    tokio::time::sleep(Duration::from_millis(40)).await;
    (plan, stream)
}

/// Nothing of `plan`'s scans is left staged, running, reserved or held,
/// and the session still answers.
async fn assert_clean_after(fx: &Fixture, plan: &Arc<dyn ExecutionPlan>, what: &str) {
    assert_nothing_left(fx, plan, what).await;
    let count = sql_text(&fx.ctx, "SELECT count(*) AS n FROM t").await;
    assert!(count.contains("| 48000 |"), "{what}: {count}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_read_stream_dropped_on_a_plain_thread_does_not_panic() {
    for policy in POLICIES {
        let fx = files_at_30ms().await;
        let (plan, stream) = partly_read(&fx, policy).await;
        let dropped = std::thread::spawn(move || drop(stream)).join();
        assert!(
            dropped.is_ok(),
            "{policy}: dropping the stream on a thread without a runtime panicked"
        );
        assert_clean_after(&fx, &plan, policy).await;
    }
}

#[test]
fn a_partly_read_stream_dropped_after_its_runtime_shut_down_does_not_panic() {
    for policy in POLICIES {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (fx, plan, stream) = runtime.block_on(async {
            let fx = files_at_30ms().await;
            let (plan, stream) = partly_read(&fx, policy).await;
            (fx, plan, stream)
        });
        let stats = prefetch_stats(&plan);
        drop(runtime);
        let dropped = std::thread::spawn(move || drop(stream)).join();
        assert!(
            dropped.is_ok(),
            "{policy}: dropping the stream after its runtime shut down panicked"
        );
        // The runtime's tasks were dropped with it: none is left counted live.
        for stats in &stats {
            assert_eq!(stats.live_tasks(), 0, "{policy}: live background tasks");
        }
        drop((plan, fx));
    }
}
