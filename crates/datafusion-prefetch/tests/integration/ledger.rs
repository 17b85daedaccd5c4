//! The governor's ledger never lies: every byte a scan reports staged is
//! held, at every instant (the ledger counts every change that breaks it),
//! whether a read lands, fails or is dropped midway, and while a query keeps
//! batches that still reference prefetched buffers.

use std::sync::Arc;
use std::time::Duration;

use datafusion::physical_plan::{collect, execute_stream};
use datafusion_prefetch::{ByteSize, PrefetchGovernor, prefetch_stats};
use datafusion_prefetch_simstore::{Fault, FaultRule};
use futures::StreamExt;

use crate::support::{Fixture, FixtureOptions, chunk, fixture, parquet_file, settle};

const PAYLOAD: usize = 1;

async fn six_files() -> Fixture {
    let files: Vec<_> = (0..6)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .await
}

/// Wait (bounded) until the governor holds nothing, then check its ledger.
async fn assert_ledger_clean(governor: &PrefetchGovernor, what: &str) {
    for _ in 0..300 {
        if governor.held_bytes() == 0 && governor.live_scans() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        (governor.staged_bytes(), governor.held_bytes()),
        (0, 0),
        "{what}: {governor:?}"
    );
    assert_eq!(governor.staged_over_held_violations(), 0, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_dropped_during_a_widened_demand_read_unstages_before_letting_go() {
    let fx = six_files().await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    let (path, file) = fx.files[2].clone();
    for policy in ["batched", "streaming", "auto"] {
        fx.set("policy", policy).await;
        // File 2's first payload read never answers: the query is dropped
        // while its demand read (widened under `batched`) is in flight.
        fx.faults.set([FaultRule::new(Fault::Stall)
            .path(path.as_ref())
            .overlapping(chunk(&file, 0, PAYLOAD))]);
        let plan = fx.plan("SELECT sum(payload) FROM t").await;
        let stats = prefetch_stats(&plan);
        let run = collect(plan, fx.ctx.task_ctx());
        assert!(
            tokio::time::timeout(Duration::from_millis(1500), run)
                .await
                .is_err(),
            "{policy}: stalled"
        );
        fx.faults.set([]);
        settle(&stats[0]).await;
        assert_eq!(stats[0].staged_bytes(), 0, "{policy}");
        assert_ledger_clean(&governor, policy).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_dropped_midway_unstage_before_their_fetches_let_go() {
    let fx = six_files().await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        let plan = fx.plan("SELECT id, payload FROM t").await;
        let stats = prefetch_stats(&plan);
        let mut stream = execute_stream(plan, fx.ctx.task_ctx()).unwrap();
        stream.next().await.unwrap().unwrap();
        // Read-ahead has landed by now, unserved.
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(stream);
        settle(&stats[0]).await;
        assert_ledger_clean(&governor, policy).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_a_query_keeps_never_take_the_held_bytes_over_the_limit() {
    const LIMIT: u64 = 192 << 10;
    let fx = six_files().await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    governor.set_limit(ByteSize::new(LIMIT));
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        // Kept whole, as a sort or a join's build side keeps them; `tag` is
        // read as a view type, whose arrays may reference page buffers.
        let plan = fx.plan("SELECT * FROM t").await;
        let batches = collect(Arc::clone(&plan), fx.ctx.task_ctx()).await.unwrap();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 120_000, "{policy}");
        assert!(governor.held_bytes() <= LIMIT, "{policy}: {governor:?}");
        assert!(
            governor.peak_held_bytes() <= LIMIT,
            "{policy}: {governor:?}"
        );
        drop(batches);
        assert_ledger_clean(&governor, policy).await;
    }
}
