//! The process-wide governor: many queries at once on one runtime, under one
//! limit smaller than what their scans would stage on their own. Every query
//! gets `off`'s answer, the governor's total never goes over the limit (in
//! every sample, and in its exact peaks), and once all have ended — or been
//! dropped midway — nothing is staged, held, reserved or running.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::{collect, execute_stream};
use datafusion_prefetch::{ByteSize, PrefetchGovernor, PrefetchStats, prefetch_stats};
use futures::StreamExt;

use crate::support::{Fixture, FixtureOptions, assert_released, fixture, parquet_file, sql_text};

/// Each query must finish within this, or the test fails (a deadlock or hang).
const DEADLINE: Duration = Duration::from_secs(120);

/// The governor's limit: a few row groups' chunks (about 40 KB each).
const LIMIT: u64 = 256 << 10;

const QUERIES: [&str; 4] = [
    "SELECT count(*), sum(payload), min(id), max(id) FROM t",
    "SELECT tag, count(*), sum(payload) FROM t WHERE id % 3 = 0 GROUP BY tag ORDER BY tag",
    "SELECT id, payload FROM t ORDER BY payload DESC NULLS LAST, id LIMIT 20",
    "SELECT count(DISTINCT tag), sum(id) FROM t WHERE payload > 500000",
];

async fn many_files(partitions: usize) -> Fixture {
    let files: Vec<_> = (0..12)
        .map(|i| parquet_file(i * 20_000, 20_000, 5_000))
        .collect();
    fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(10),
            partitions,
            ..Default::default()
        },
    )
    .await
}

/// Samples the governor every millisecond until `done`; returns the most it
/// saw staged and held.
fn sample(
    governor: Arc<PrefetchGovernor>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64)> {
    tokio::spawn(async move {
        let (mut staged, mut held) = (0, 0);
        while !done.load(Ordering::SeqCst) {
            staged = staged.max(governor.staged_bytes());
            held = held.max(governor.held_bytes());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (staged, held)
    })
}

async fn expected_answers(fx: &Fixture) -> Vec<String> {
    fx.set("policy", "off").await;
    let mut expected = vec![];
    for query in QUERIES {
        expected.push(sql_text(&fx.ctx, query).await);
    }
    expected
}

/// Wait (bounded) until the governor holds nothing and has no scan left.
async fn assert_governor_idle(governor: &PrefetchGovernor, what: &str) {
    for _ in 0..500 {
        if governor.held_bytes() == 0 && governor.live_scans() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(governor.staged_bytes(), 0, "{what}: staged");
    assert_eq!(governor.held_bytes(), 0, "{what}: held");
    assert_eq!(governor.live_scans(), 0, "{what}: scans");
    assert_eq!(
        governor.staged_over_held_violations(),
        0,
        "{what}: staged over held"
    );
}

fn check_peaks(governor: &PrefetchGovernor, sampled: (u64, u64), what: &str) {
    let (staged, held) = sampled;
    assert!(staged <= LIMIT, "{what}: {staged} bytes staged in a sample");
    assert!(held <= LIMIT, "{what}: {held} bytes held in a sample");
    assert!(
        governor.peak_staged_bytes() <= LIMIT,
        "{what}: {governor:?}"
    );
    assert!(governor.peak_held_bytes() <= LIMIT, "{what}: {governor:?}");
    assert_eq!(
        governor.staged_over_held_violations(),
        0,
        "{what}: {governor:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_queries_share_one_small_limit_and_get_offs_answers() {
    let fx = many_files(2).await;
    let expected = expected_answers(&fx).await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    governor.set_limit(ByteSize::new(LIMIT));
    for policy in ["pipelined", "streaming", "auto"] {
        fx.set("policy", policy).await;
        let refusals = governor.refusals();
        let done = Arc::new(AtomicBool::new(false));
        let sampler = sample(Arc::clone(&governor), Arc::clone(&done));
        let mut runs = vec![];
        let mut all_stats: Vec<Arc<PrefetchStats>> = vec![];
        for i in 0..16 {
            let query = QUERIES[i % QUERIES.len()];
            let plan = fx.plan(query).await;
            all_stats.extend(prefetch_stats(&plan));
            let task = fx.ctx.task_ctx();
            runs.push(tokio::spawn(async move {
                let batches = collect(plan, task).await.unwrap();
                (i, pretty_format_batches(&batches).unwrap().to_string())
            }));
        }
        for run in runs {
            let (i, result) = tokio::time::timeout(DEADLINE, run)
                .await
                .unwrap_or_else(|_| panic!("{policy}: a query is not done after {DEADLINE:?}"))
                .unwrap();
            assert_eq!(result, expected[i % QUERIES.len()], "{policy}: query {i}");
        }
        done.store(true, Ordering::SeqCst);
        let what = format!("{policy}, 16 at once");
        check_peaks(&governor, sampler.await.unwrap(), &what);
        // The limit bound: scans waited for room, and read ahead all the same.
        assert!(
            governor.refusals() > refusals,
            "{what}: never refused: {governor:?}"
        );
        let ahead: u64 = all_stats
            .iter()
            .map(|s| s.bytes_served_from_prefetch())
            .sum();
        assert!(ahead > 0, "{what}: nothing was served from read-ahead");
        assert_released(&all_stats, fx.pool.as_ref(), &what).await;
        assert_governor_idle(&governor, &what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_of_sixteen_queries_dropped_midway_leave_nothing_behind() {
    let fx = many_files(2).await;
    let expected = expected_answers(&fx).await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    governor.set_limit(ByteSize::new(LIMIT));
    for policy in ["pipelined", "auto"] {
        fx.set("policy", policy).await;
        let done = Arc::new(AtomicBool::new(false));
        let sampler = sample(Arc::clone(&governor), Arc::clone(&done));
        let mut runs = vec![];
        let mut all_stats: Vec<Arc<PrefetchStats>> = vec![];
        for i in 0..16 {
            // Full scans, so a dropped one is dropped with work left.
            let query = if i % 2 == 0 {
                QUERIES[i / 2 % QUERIES.len()]
            } else {
                "SELECT id, payload, tag FROM t"
            };
            let plan = fx.plan(query).await;
            all_stats.extend(prefetch_stats(&plan));
            let task = fx.ctx.task_ctx();
            runs.push(tokio::spawn(async move {
                if i % 2 == 1 {
                    let mut stream = execute_stream(plan, task).unwrap();
                    stream.next().await.unwrap().unwrap();
                    drop(stream);
                    return (i, None);
                }
                let batches = collect(plan, task).await.unwrap();
                (
                    i,
                    Some(pretty_format_batches(&batches).unwrap().to_string()),
                )
            }));
        }
        for run in runs {
            let (i, result) = tokio::time::timeout(DEADLINE, run)
                .await
                .unwrap_or_else(|_| panic!("{policy}: a query is not done after {DEADLINE:?}"))
                .unwrap();
            if let Some(result) = result {
                assert_eq!(
                    result,
                    expected[i / 2 % QUERIES.len()],
                    "{policy}: query {i}"
                );
            }
        }
        done.store(true, Ordering::SeqCst);
        let what = format!("{policy}, half dropped");
        check_peaks(&governor, sampler.await.unwrap(), &what);
        assert_released(&all_stats, fx.pool.as_ref(), &what).await;
        assert_governor_idle(&governor, &what).await;
    }
}

/// A scan whose consumer never reads (a stream created and not polled, like
/// a join's probe side waiting for its build side) holds its first reads;
/// once it has been idle a while, another scan that needs room gets it, by
/// the idle scan giving its staged bytes back. Polled later, it still
/// answers as `off` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_scan_gives_its_share_to_a_scan_that_reads() {
    // One partition: nothing polls the stream but the test (with more, a
    // coalescing operator would drain it in the background).
    let fx = many_files(1).await;
    let expected = expected_answers(&fx).await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    fx.set("policy", "pipelined").await;
    governor.set_limit(ByteSize::new(LIMIT));

    let idle_plan = fx.plan(QUERIES[0]).await;
    let idle_stats = prefetch_stats(&idle_plan);
    let idle = execute_stream(idle_plan, fx.ctx.task_ctx()).unwrap();
    // Its stream's start fetched its first files' first reads.
    for _ in 0..500 {
        if governor.held_bytes() > 0 && idle_stats[0].live_tasks() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let staged = idle_stats[0].staged_bytes();
    assert!(staged > 0, "the idle scan staged nothing: {governor:?}");
    // Leave it little room: what it holds plus less than a row group.
    governor.set_limit(ByteSize::new(governor.held_bytes() + (8 << 10)));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (result, stats) = fx.run(QUERIES[1]).await;
    assert_eq!(result, expected[1]);
    assert!(
        idle_stats[0].staged_bytes() < staged,
        "the idle scan kept everything: {governor:?}"
    );
    assert!(
        stats[0].bytes_served_from_prefetch() > 0,
        "the reading scan got no room: {governor:?}"
    );

    let batches: Vec<_> = idle.collect().await;
    let batches: Vec<_> = batches.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        pretty_format_batches(&batches).unwrap().to_string(),
        expected[0]
    );
    assert_released(&idle_stats, fx.pool.as_ref(), "idle scan").await;
    assert_governor_idle(&governor, "idle scan").await;
}

#[tokio::test]
async fn the_limit_is_shown_and_set_where_the_context_is_built() {
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use datafusion_prefetch::{PrefetchOptions, enable_prefetch};

    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(1 << 30, 1.0)
        .build_arc()
        .unwrap();
    let config = SessionConfig::new()
        .with_information_schema(true)
        .with_option_extension(PrefetchOptions::default());
    let show = |ctx: SessionContext| async move {
        sql_text(
            &ctx,
            "SELECT value FROM information_schema.df_settings WHERE name = 'prefetch.memory_limit'",
        )
        .await
    };
    // By default, a quarter of a bounded pool.
    let ctx = SessionContext::new_with_state(enable_prefetch(
        SessionContext::new_with_config_rt(config.clone(), Arc::clone(&runtime)).state(),
    ));
    assert!(show(ctx.clone()).await.contains("256MiB"));
    // A second session on the runtime, built with a limit, sets it for both.
    let mut limited = config.clone();
    limited
        .options_mut()
        .set("prefetch.memory_limit", "64MiB")
        .unwrap();
    let other = SessionContext::new_with_state(enable_prefetch(
        SessionContext::new_with_config_rt(limited, Arc::clone(&runtime)).state(),
    ));
    assert!(show(ctx.clone()).await.contains("64MiB"));
    assert!(show(other.clone()).await.contains("64MiB"));
    assert_eq!(PrefetchGovernor::of(&runtime).limit(), ByteSize::mib(64));
    // SET in a running session is refused with what to do instead.
    let err = match ctx.sql("SET prefetch.memory_limit = '1GiB'").await {
        Err(e) => e,
        Ok(df) => df.collect().await.unwrap_err(),
    }
    .to_string();
    assert!(
        err.contains("Set it when the runtime or context is built"),
        "{err}"
    );
}
