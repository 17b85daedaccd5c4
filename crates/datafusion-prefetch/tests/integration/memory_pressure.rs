//! Memory pressure: a small `FairSpillPool` or `GreedyMemoryPool` that stock
//! DataFusion completes its queries in. Every policy completes them too, with
//! the same answer (read-ahead shrinks to what the pool grants), the pool's
//! view of the prefetch reservation never exceeds what the scheduler reports
//! as staged, and the pool is empty afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::execution::memory_pool::{FairSpillPool, GreedyMemoryPool, MemoryPool};
use datafusion_prefetch::{PrefetchPolicy, PrefetchStats, prefetch_stats};

use crate::pools::TrackingPool;
use crate::support::{Fixture, FixtureOptions, assert_released, fixture, parquet_file};

/// A scan with an aggregation that needs little memory beside the scan: in a
/// 2 MiB pool, read-ahead is refused and must shrink.
const AGGREGATE: &str = "SELECT tag, count(*), count(payload), sum(payload), min(id), max(id) \
     FROM t GROUP BY tag ORDER BY tag";

/// A scan with a sort of a fifth of the rows (which spills under
/// `FairSpillPool` when it must).
const SORT: &str =
    "SELECT id, payload, tag FROM t WHERE id % 5 = 0 ORDER BY payload DESC NULLS LAST, id";

async fn collect(fx: &Fixture, sql: &str) -> datafusion::common::Result<RecordBatch> {
    let plan = fx.plan(sql).await;
    let schema = plan.schema();
    let batches = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx()).await?;
    Ok(concat_batches(&schema, &batches)?)
}

/// Samples, while a query runs, the pool's view of the prefetch reservation
/// against the scheduler's staged bytes, and returns the samples where the
/// pool held more for longer than 5 ms.
///
/// The scheduler grows its reservation and then publishes its staged bytes
/// (both under its lock, but not atomically for an outside reader), so one
/// sample may fall between the two — and until bug 3 of docs/reliability.md
/// is fixed, the pool briefly still holds bytes just released. An excess that
/// persists is a reservation the scheduler no longer accounts for.
pub fn watch(
    pool: Arc<TrackingPool>,
    stats: Vec<Arc<PrefetchStats>>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(usize, u64)>> {
    let excess = move || {
        let reserved = pool.prefetch_reserved();
        let staged: u64 = stats.iter().map(|s| s.staged_bytes()).sum();
        (reserved as u64 > staged).then_some((reserved, staged))
    };
    tokio::spawn(async move {
        let mut over = vec![];
        while !done.load(Ordering::SeqCst) {
            if excess().is_some() {
                let started = std::time::Instant::now();
                let mut last = excess();
                while last.is_some() && started.elapsed() < Duration::from_millis(5) {
                    tokio::task::yield_now().await;
                    last = excess();
                }
                over.extend(last);
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        over
    })
}

/// Which pool a test runs in.
#[derive(Debug, Clone, Copy)]
enum Pool {
    FairSpill,
    Greedy,
}

/// Run `sql` under `off` and then under every policy in a fresh session whose
/// runtime has a `limit`-byte pool of the given kind: every policy must
/// complete with `off`'s answer; the pool's view of the prefetch reservation
/// never exceeds the scheduler's staged bytes (sampled while the query runs,
/// and at the peak); afterwards the pool is empty. Returns how often the pool
/// refused read-ahead.
async fn every_policy_completes(pool: Pool, limit: usize, sql: &str) -> usize {
    let files: Vec<_> = (0..8)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let inner: Arc<dyn MemoryPool> = match pool {
        Pool::FairSpill => Arc::new(FairSpillPool::new(limit)),
        Pool::Greedy => Arc::new(GreedyMemoryPool::new(limit)),
    };
    let tracking = Arc::new(TrackingPool::new(inner));
    let fx = fixture(
        files,
        FixtureOptions {
            partitions: 4,
            memory_pool: Some(Arc::clone(&tracking) as Arc<dyn MemoryPool>),
            ..Default::default()
        },
    )
    .await;
    // A sort reserves 10 MB for merging by default; a small pool needs less.
    fx.ctx
        .sql("SET datafusion.execution.sort_spill_reservation_bytes = 262144")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    // A budget and window far above what the pool can grant beside the query:
    // the pool is what limits read-ahead.
    fx.set("memory_budget", "1GiB").await;
    fx.set("read_ahead_window", "1GiB").await;
    let label = format!("{pool:?} pool of {limit} bytes");

    fx.set("policy", "off").await;
    let expected = collect(&fx, sql)
        .await
        .unwrap_or_else(|e| panic!("{label}: stock DataFusion fails {sql}: {e}"));
    let mut refusals = 0;
    for policy in PrefetchPolicy::ALL {
        fx.set("policy", policy.name()).await;
        tracking.reset_counters();
        let plan = fx.plan(sql).await;
        let stats = prefetch_stats(&plan);
        let done = Arc::new(AtomicBool::new(false));
        let watcher = watch(Arc::clone(&tracking), stats.clone(), Arc::clone(&done));
        let schema = plan.schema();
        let result = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx()).await;
        done.store(true, Ordering::SeqCst);
        let over = watcher.await.unwrap();
        let what = format!("{label}, {policy}: {sql}");
        let batches = result.unwrap_or_else(|e| panic!("{what}: {e}"));
        let result = concat_batches(&schema, &batches).unwrap();
        assert!(result == expected, "{what}: a different answer");
        assert!(
            over.is_empty(),
            "{what}: the pool held more for prefetch than was staged for 5 ms \
             (pool, staged): {over:?}"
        );
        let peak: u64 = stats.iter().map(|s| s.peak_staged_bytes()).sum();
        assert!(
            tracking.prefetch_peak() as u64 <= peak,
            "{what}: pool peak {} over the staged peak {peak}",
            tracking.prefetch_peak()
        );
        refusals += tracking.prefetch_refusals();
        assert_released(&stats, tracking.as_ref(), &what).await;
    }
    refusals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_an_aggregation_in_a_small_fair_spill_pool() {
    let refusals = every_policy_completes(Pool::FairSpill, 2 << 20, AGGREGATE).await;
    assert!(
        refusals > 0,
        "the pool never refused read-ahead: no pressure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_an_aggregation_in_a_small_greedy_pool() {
    let refusals = every_policy_completes(Pool::Greedy, 2 << 20, AGGREGATE).await;
    assert!(
        refusals > 0,
        "the pool never refused read-ahead: no pressure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_a_sort_in_a_small_fair_spill_pool() {
    every_policy_completes(Pool::FairSpill, 8 << 20, SORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_a_sort_in_a_small_greedy_pool() {
    every_policy_completes(Pool::Greedy, 8 << 20, SORT).await;
}

/// Read-ahead's reservation cannot spill, and with a budget above what the
/// pool holds it takes whatever the pool grants. In a `FairSpillPool` that
/// leaves a sort (a spilling consumer) too little to hold even one batch:
/// "Not enough memory to continue external sort ... Failed to allocate
/// additional 514.0 KB for ExternalSorter[0] with 0.0 B already allocated".
/// Stock DataFusion completes the same sort in the same pool every time;
/// `pipelined` (and, less often, `batched`) fails some of the runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "library bug: read-ahead takes the memory a sort needs in a FairSpillPool"]
async fn read_ahead_leaves_a_sort_the_memory_it_needs_in_a_fair_spill_pool() {
    const RUNS: usize = 10;
    for policy in PrefetchPolicy::ALL {
        let mut failures = vec![];
        for _ in 0..RUNS {
            let files: Vec<_> = (0..8)
                .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
                .collect();
            let fx = fixture(
                files,
                FixtureOptions {
                    partitions: 4,
                    memory_pool: Some(Arc::new(FairSpillPool::new(3584 << 10))),
                    ..Default::default()
                },
            )
            .await;
            fx.ctx
                .sql("SET datafusion.execution.sort_spill_reservation_bytes = 262144")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            fx.set("memory_budget", "1GiB").await;
            fx.set("read_ahead_window", "1GiB").await;
            fx.set("policy", policy.name()).await;
            if let Err(e) = collect(&fx, SORT).await {
                failures.push(e.to_string());
            }
        }
        assert!(
            failures.is_empty(),
            "{policy}: {} of {RUNS} runs failed, first: {}",
            failures.len(),
            failures[0]
        );
    }
}
