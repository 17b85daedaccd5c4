//! Memory pressure: a small `FairSpillPool` or `GreedyMemoryPool` that stock
//! DataFusion completes its queries in. Every policy completes them too, with
//! the same answer (read-ahead holds at most a sixteenth of a finite pool and
//! shrinks to what the pool grants), the pool's view of the prefetch
//! reservation never exceeds what the scheduler reports as staged, and the
//! pool is empty afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::execution::memory_pool::{
    FairSpillPool, GreedyMemoryPool, MemoryConsumer, MemoryPool,
};
use datafusion_prefetch::POOL_SHARE_DIVISOR;
use datafusion_prefetch::{PrefetchPolicy, PrefetchStats, prefetch_stats};

use crate::pools::TrackingPool;
use crate::support::{
    Fixture, FixtureOptions, assert_released, assert_released_beside, fixture, parquet_file,
};

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
/// The scan publishes its staged bytes before its reservation grows, and
/// shrinks its reservation before it publishes less, so the pool never
/// holds more than is published; but a sample reads the two one after the
/// other, and the scan may change both between the reads. Such a torn sample
/// is gone at the next read unless the sampler itself is kept off a CPU, so
/// an excess counts once it persists for 5 ms and three of the sampler's
/// re-reads
/// (a reservation the scan no longer accounts for persists until the scan's
/// next change).
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
                let mut reads = 1;
                // At least three re-reads, so one read torn by the sampler's
                // own time off a CPU is not all it saw.
                while last.is_some() && (reads < 3 || started.elapsed() < Duration::from_millis(5))
                {
                    tokio::task::yield_now().await;
                    last = excess();
                    reads += 1;
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

/// What the policies did in [`every_policy_completes`].
#[derive(Debug, Default)]
struct Pressure {
    /// How often the pool refused read-ahead, over all policies.
    refusals: usize,
    /// The most any policy's scan staged at once.
    peak_staged: u64,
}

/// Run `sql` under `off` and then under every policy in a fresh session whose
/// runtime has a `limit`-byte pool of the given kind, `occupied` bytes of which
/// another consumer holds throughout: every policy must complete with `off`'s
/// answer; read-ahead never stages more than its share of the pool; the pool's
/// view of the prefetch reservation never exceeds the scheduler's staged bytes
/// (sampled while the query runs, and at the peak); afterwards the pool holds
/// only the occupant.
async fn every_policy_completes(pool: Pool, limit: usize, occupied: usize, sql: &str) -> Pressure {
    let files: Vec<_> = (0..8)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    let inner: Arc<dyn MemoryPool> = match pool {
        Pool::FairSpill => Arc::new(FairSpillPool::new(limit)),
        Pool::Greedy => Arc::new(GreedyMemoryPool::new(limit)),
    };
    let tracking = Arc::new(TrackingPool::new(inner));
    let as_pool = Arc::clone(&tracking) as Arc<dyn MemoryPool>;
    let occupant = MemoryConsumer::new("occupant").register(&as_pool);
    occupant.grow(occupied);
    let fx = fixture(
        files,
        FixtureOptions {
            partitions: 4,
            memory_pool: Some(as_pool),
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
    let label = format!("{pool:?} pool of {limit} bytes, {occupied} occupied");
    let share = limit as u64 / POOL_SHARE_DIVISOR;

    fx.set("policy", "off").await;
    let expected = collect(&fx, sql)
        .await
        .unwrap_or_else(|e| panic!("{label}: stock DataFusion fails {sql}: {e}"));
    let mut pressure = Pressure::default();
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
        assert!(
            peak <= share,
            "{what}: staged {peak} bytes at once, over a 1/{POOL_SHARE_DIVISOR} share ({share})"
        );
        pressure.refusals += tracking.prefetch_refusals();
        pressure.peak_staged = pressure.peak_staged.max(peak);
        assert_released_beside(&stats, tracking.as_ref(), occupied, &what).await;
    }
    pressure
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_an_aggregation_in_a_small_fair_spill_pool() {
    let pressure = every_policy_completes(Pool::FairSpill, 2 << 20, 0, AGGREGATE).await;
    assert!(pressure.peak_staged > 0, "nothing was read ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_an_aggregation_in_a_small_greedy_pool() {
    let pressure = every_policy_completes(Pool::Greedy, 2 << 20, 0, AGGREGATE).await;
    assert!(pressure.peak_staged > 0, "nothing was read ahead");
}

/// A pool whose share for read-ahead (4 MiB) is more than what it has left
/// beside another consumer (2 MiB, most of which the aggregation needs): the
/// pool refuses read-ahead, which shrinks to what it grants, and every policy
/// still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_shrinks_to_what_a_busy_pool_grants() {
    for pool in [Pool::FairSpill, Pool::Greedy] {
        let pressure = every_policy_completes(pool, 64 << 20, 62 << 20, AGGREGATE).await;
        assert!(
            pressure.refusals > 0,
            "{pool:?}: the pool never refused read-ahead: no pressure"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_a_sort_in_a_small_fair_spill_pool() {
    every_policy_completes(Pool::FairSpill, 8 << 20, 0, SORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_completes_a_sort_in_a_small_greedy_pool() {
    every_policy_completes(Pool::Greedy, 8 << 20, 0, SORT).await;
}

/// Runs of each policy in the tight-pool sort test; `PREFETCH_POOL_RUNS`
/// raises it for a long local run.
fn pool_runs() -> usize {
    std::env::var("PREFETCH_POOL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// A sort in a pool so small that stock DataFusion has little to spare: a
/// `FairSpillPool` divides what unspillable consumers leave among the
/// spilling ones, so any byte read-ahead holds shrinks every sorter's share.
/// `off` is the control: it must complete every run, or the pool is too small
/// to say anything about read-ahead. Every policy must complete every run too,
/// with the pool's view of read-ahead matching the scheduler's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_leaves_a_sort_the_memory_it_needs_in_a_fair_spill_pool() {
    let runs = pool_runs();
    let mut report = vec![];
    for policy in PrefetchPolicy::ALL {
        let mut failures = vec![];
        for _ in 0..runs {
            let files: Vec<_> = (0..8)
                .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
                .collect();
            let tracking = Arc::new(TrackingPool::new(Arc::new(FairSpillPool::new(POOL_LIMIT))));
            let fx = fixture(
                files,
                FixtureOptions {
                    partitions: 4,
                    memory_pool: Some(Arc::clone(&tracking) as Arc<dyn MemoryPool>),
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
            let plan = fx.plan(SORT).await;
            let stats = prefetch_stats(&plan);
            let done = Arc::new(AtomicBool::new(false));
            let watcher = watch(Arc::clone(&tracking), stats.clone(), Arc::clone(&done));
            let result = datafusion::physical_plan::collect(plan, fx.ctx.task_ctx()).await;
            done.store(true, Ordering::SeqCst);
            let over = watcher.await.unwrap();
            let what = format!("{policy}, FairSpillPool of 3.5 MiB: {SORT}");
            assert!(
                over.is_empty(),
                "{what}: the pool held more for prefetch than was staged for 5 ms \
                 (pool, staged): {over:?}"
            );
            let share = (POOL_LIMIT as u64 / POOL_SHARE_DIVISOR) as usize;
            assert!(
                tracking.prefetch_peak() <= share,
                "{what}: read-ahead held {} bytes in the pool, over its 1/{POOL_SHARE_DIVISOR} \
                 share ({share})",
                tracking.prefetch_peak()
            );
            if let Err(e) = result {
                failures.push((e.find_root().to_string(), tracking.refusals()));
            }
            assert_released(&stats, tracking.as_ref(), &what).await;
        }
        report.push((policy, failures));
    }
    let summary: Vec<String> = report
        .iter()
        .map(|(policy, failures)| format!("{policy}: {} of {runs} failed", failures.len()))
        .collect();
    eprintln!("{}", summary.join("; "));
    for (policy, failures) in &report {
        for (failure, refusals) in failures {
            eprintln!("{policy}: {failure}; refusals: {refusals:?}");
        }
    }
    let (_, off_failures) = &report[0];
    assert!(
        off_failures.is_empty(),
        "the control failed, the pool is too small to say anything: {}",
        summary.join("; ")
    );
    for (policy, failures) in &report {
        for (failure, refusals) in failures {
            // A sort may still fail where stock DataFusion would have, had
            // its partitions met the pool in the same order: read-ahead is
            // to blame where it held the bytes the failing request lacked.
            // That request is the named consumer's last refusal (earlier
            // ones it answered by spilling).
            let failing = refusals
                .iter()
                .rev()
                .find(|r| failure.contains(&format!("for {} ", r.consumer)));
            assert!(
                failing.is_some_and(|r| !r.granted_without_prefetch(POOL_LIMIT)),
                "{}; {policy} failed where the pool would have granted the request \
                 without read-ahead (or not for want of memory): {failure}; {refusals:?}",
                summary.join("; ")
            );
        }
    }
}

/// The pool of [`read_ahead_leaves_a_sort_the_memory_it_needs_in_a_fair_spill_pool`]:
/// small enough that `off`'s sorts just fit.
const POOL_LIMIT: usize = 3584 << 10;
