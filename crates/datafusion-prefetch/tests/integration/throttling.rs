//! A store that throttles: over its request rate it answers `503 SlowDown`
//! (S3) or `429 Too Many Requests` (GCS), which the client retries after a
//! backoff. `auto` narrows its window of
//! requests in flight, so it provokes fewer `503`s than a fixed policy
//! opening as many files ahead, and every policy answers as `off` does.

use std::time::Duration;

use datafusion_prefetch_simstore::{RequestRateLimit, ThrottleAnswer};

use datafusion_prefetch::{RequestPrice, prefetch_stats};

use crate::support::{Fixture, FixtureOptions, fixture, metric, parquet_file, settle, sql_text};

const SQL: &str = "SELECT count(*), sum(payload), min(id), max(tag) FROM t";

/// 48 files of 4 row groups each in a store of 10 ms round trips that
/// admits 100 requests a second, 10 at once, answering `503 SlowDown` over
/// that.
async fn throttling_store() -> Fixture {
    throttling_store_answering(ThrottleAnswer::SlowDown).await
}

/// [`throttling_store`], answering `answer` over its rate.
async fn throttling_store_answering(answer: ThrottleAnswer) -> Fixture {
    let files = (0..48)
        .map(|i| parquet_file(i * 2_000, 2_000, 500))
        .collect();
    let options = FixtureOptions {
        latency: Duration::from_millis(10),
        partitions: 2,
        rate_limit: Some(
            RequestRateLimit::per_second(100)
                .with_burst(10)
                .with_answer(answer),
        ),
        ..Default::default()
    };
    fixture(files, options).await
}

/// The answer under `settings`, and the 503s and retries it caused.
async fn run(settings: &[(&str, &str)]) -> (String, u64, u64) {
    let fx = throttling_store().await;
    for (key, value) in settings {
        fx.set(key, value).await;
    }
    let (answer, _) = fx.run(SQL).await;
    (answer, fx.store.throttled(), fx.store.retries())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_backs_off_a_throttling_store_and_answers_as_off() {
    let (expected, off_503s, _) = run(&[("policy", "off")]).await;
    let (pipelined, pipelined_503s, pipelined_retries) =
        run(&[("policy", "pipelined"), ("file_open_depth", "64")]).await;
    let (auto, auto_503s, auto_retries) = run(&[("policy", "auto")]).await;
    assert_eq!(pipelined, expected);
    assert_eq!(auto, expected);
    eprintln!(
        "503s: off {off_503s}, pipelined(64) {pipelined_503s} ({pipelined_retries} retries), \
         auto {auto_503s} ({auto_retries} retries)"
    );
    assert!(pipelined_503s > 0, "the limit binds");
    assert!(
        auto_503s < pipelined_503s,
        "auto {auto_503s}, pipelined {pipelined_503s}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_the_window_auto_cut() {
    let fx = throttling_store().await;
    fx.set("policy", "auto").await;
    let text = sql_text(&fx.ctx, &format!("EXPLAIN ANALYZE {SQL}")).await;
    let cuts = metric(&text, "prefetch_auto_request_window_cuts");
    let window = metric(&text, "prefetch_auto_request_window");
    assert!(cuts >= 1, "{text}");
    // Each cut withdrew the reads ahead beyond its new window (50-60 in
    // local runs, over 5 or 6 cuts).
    let withdrawn = metric(&text, "prefetch_requests_withdrawn");
    assert!(withdrawn >= 1, "{text}");
    // Cut from the first window of 32 at least once.
    assert!((1..32).contains(&window), "{text}");
    assert!(fx.store.throttled() > 0);
}

/// GCS throttles with `429 Too Many Requests`: `auto` cuts its window on
/// them as on `503`s, and answers as `off` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_backs_off_a_store_that_answers_429() {
    let fx = throttling_store_answering(ThrottleAnswer::TooManyRequests).await;
    fx.set("policy", "auto").await;
    let text = sql_text(&fx.ctx, &format!("EXPLAIN ANALYZE {SQL}")).await;
    assert!(
        metric(&text, "prefetch_auto_request_window_cuts") >= 1,
        "{text}"
    );
    assert!(metric(&text, "prefetch_attempts_throttled") >= 1, "{text}");
    assert!(fx.store.throttled() > 0);
    let (auto, _) = fx.run(SQL).await;
    fx.set("policy", "off").await;
    let (expected, _) = fx.run(SQL).await;
    assert_eq!(auto, expected);
}

/// Every attempt the store answered while a query ran, retries and hedges
/// included, counts for one of its scans: the scans' attempts and `503`s
/// are the store's own counts, not estimates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scans_count_every_attempt_the_store_answered() {
    for settings in [
        &[("policy", "pipelined"), ("file_open_depth", "64")][..],
        &[("policy", "auto")],
        &[("policy", "streaming")],
    ] {
        let fx = throttling_store().await;
        for (key, value) in settings {
            fx.set(key, value).await;
        }
        let plan = fx.plan(SQL).await;
        let scans = prefetch_stats(&plan);
        // Listing the files is planning's: what the scans do starts here.
        fx.store.reset();
        datafusion::physical_plan::collect(plan, fx.ctx.task_ctx())
            .await
            .unwrap();
        for scan in &scans {
            settle(scan).await;
        }
        let attempts: u64 = scans.iter().map(|s| s.attempts()).sum();
        let throttled: u64 = scans.iter().map(|s| s.attempts_throttled()).sum();
        let store = fx.store.snapshot();
        assert_eq!(
            (attempts, throttled),
            (store.attempts(), store.throttled),
            "{settings:?}: {store}"
        );
        assert!(
            store.throttled > 0,
            "{settings:?}: the limit binds: {store}"
        );
        let requests: u64 = scans.iter().map(|s| s.requests()).sum();
        assert!(
            attempts > requests,
            "{settings:?}: retries are attempts too"
        );
        let cost: f64 = scans.iter().map(|s| s.request_cost()).sum();
        let priced = RequestPrice::default().cost_of(attempts);
        assert!(
            (cost - priced).abs() < 1e-12,
            "{settings:?}: {cost} != {priced}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_the_attempts_and_the_503s() {
    let fx = throttling_store().await;
    fx.set("policy", "pipelined").await;
    fx.set("file_open_depth", "64").await;
    fx.set("price_per_1000_requests", "$5").await;
    let text = sql_text(&fx.ctx, &format!("EXPLAIN ANALYZE {SQL}")).await;
    let attempts = metric(&text, "prefetch_attempts");
    // $5 per 1,000 attempts: half a cent, 5,000,000 nanodollars, each
    // (both shown rounded to three digits).
    let cost = metric(&text, "prefetch_request_cost_nanodollars");
    let priced = attempts as f64 * 5e6;
    assert!(
        (cost as f64 - priced).abs() <= priced * 0.01,
        "{cost}: {text}"
    );
    let throttled = metric(&text, "prefetch_attempts_throttled");
    assert!(throttled > 0, "{text}");
    // Shown rounded (`1.03 K`): the exact counts are the test above's.
    assert!(attempts > metric(&text, "prefetch_requests"), "{text}");
}
