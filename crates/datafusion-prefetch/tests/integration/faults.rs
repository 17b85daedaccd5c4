//! Store faults under prefetching: a failed prefetch never fails a query whose
//! demand read succeeds, and nothing is left staged or running afterwards.

use std::time::Duration;

use datafusion_prefetch_simstore::{Fault, FaultKind, FaultRule};

use crate::support::{FixtureOptions, chunk, fixture, parquet_file, settle};

const PAYLOAD: usize = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prefetch_falls_back_to_the_demand_read() {
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
    let sql = "SELECT sum(payload), count(*) FROM t";
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(sql).await;

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
            err.contains("reading data/file_003.parquet bytes ["),
            "{policy}: {err}"
        );
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy}");
        assert_eq!(stats[0].live_tasks(), 0, "{policy}");
        assert_eq!(fx.pool.reserved(), 0, "{policy}");
    }
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
    let (path, _) = &fx.files[2];
    fx.faults.push(
        FaultRule::new(Fault::Stall)
            .path(path.as_ref())
            .overlapping(chunk(&files[2], 0, PAYLOAD))
            .once(),
    );
    fx.set("policy", "pipelined").await;
    let (result, stats) = tokio::time::timeout(Duration::from_secs(30), fx.run(sql))
        .await
        .expect("a stalled read-ahead must not hang the query");
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
    // One file, one row group: its first data read is the decoder's own under
    // batched and pipelined (nothing to read ahead of it yet).
    let files = vec![parquet_file(0, 20_000, 20_000)];
    let fx = fixture(files.clone(), FixtureOptions::default()).await;
    let (path, _) = &fx.files[0];
    for policy in ["off", "batched", "pipelined"] {
        fx.faults.set([FaultRule::new(Fault::Error)
            .path(path.as_ref())
            .overlapping(chunk(&files[0], 0, PAYLOAD))
            .once()]);
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
