//! The SQL surface: settings, EXPLAIN, registration paths and results.

use std::sync::Arc;

use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchOptions, PrefetchingParquetTable, prefetching_context};

use crate::support::{FixtureOptions, fixture, parquet_file, sql_text};

async fn sql_error(ctx: &SessionContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(df) => df.collect().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    }
}

async fn show(ctx: &SessionContext, key: &str) -> String {
    sql_text(ctx, &format!("SHOW prefetch.{key}")).await
}

#[tokio::test]
async fn invalid_settings_are_refused_at_set_time() {
    let ctx = prefetching_context(SessionConfig::new());
    let err = sql_error(&ctx, "SET prefetch.policy = 'bogus'").await;
    assert!(err.contains("off, batched, pipelined"), "{err}");
    let err = sql_error(&ctx, "SET prefetch.read_ahead_window = '-1'").await;
    assert!(err.contains("prefetch.read_ahead_window"), "{err}");
    sql_text(&ctx, "SET prefetch.read_ahead_window = '64MiB'").await;
    let err = sql_error(&ctx, "SET prefetch.memory_budget = '1KiB'").await;
    assert!(
        err.contains("must not exceed prefetch.memory_budget"),
        "{err}"
    );
    // The refused values left the defaults in place.
    assert!(show(&ctx, "policy").await.contains("auto"));
    assert!(show(&ctx, "memory_budget").await.contains("256MiB"));
}

#[tokio::test]
async fn a_set_between_two_queries_changes_the_second() {
    let fx = fixture(vec![parquet_file(0, 1000, 500)], FixtureOptions::default()).await;
    let explain = |policy: &'static str| {
        let ctx = fx.ctx.clone();
        async move {
            sql_text(&ctx, &format!("SET prefetch.policy = '{policy}'")).await;
            sql_text(&ctx, "EXPLAIN SELECT sum(payload) FROM t").await
        }
    };
    assert!(explain("off").await.contains("prefetch=off("));
    let plan = explain("batched").await;
    assert!(
        plan.contains(
            "prefetch=batched(read_ahead_window=auto, memory_budget=256MiB, file_open_depth=auto"
        ),
        "{plan}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_reports_the_scan_metrics() {
    let files = (0..3)
        .map(|i| parquet_file(i * 10_000, 10_000, 2_500))
        .collect();
    let fx = fixture(files, FixtureOptions::default()).await;
    let text = sql_text(&fx.ctx, "EXPLAIN ANALYZE SELECT sum(payload) FROM t").await;
    for metric in [
        "prefetch_requests=",
        "prefetch_bytes_fetched=",
        "prefetch_bytes_fetched_ahead=",
        "prefetch_bytes_served_from_prefetch=",
        "prefetch_bytes_wasted=",
        "prefetch_peak_staged_bytes=",
        "prefetch_time_to_first_batch=",
        "prefetch_io_wait=",
    ] {
        assert!(text.contains(metric), "{metric} missing from\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_returns_what_off_returns() {
    let files = (0..5)
        .map(|i| parquet_file(i * 7_000, 7_000, 1_000))
        .collect();
    let fx = fixture(
        files,
        FixtureOptions {
            partitions: 3,
            ..Default::default()
        },
    )
    .await;
    let queries = [
        "SELECT count(*), sum(payload), min(id), max(id) FROM t",
        "SELECT tag, count(payload), sum(payload) FROM t GROUP BY tag ORDER BY tag",
        "SELECT id, payload FROM t WHERE id BETWEEN 12000 AND 12010 ORDER BY id",
        "SELECT id FROM t WHERE payload IS NULL ORDER BY id DESC LIMIT 5",
        "SELECT id, tag FROM t ORDER BY payload DESC, id LIMIT 7",
    ];
    for pushdown in ["false", "true"] {
        fx.ctx
            .sql(&format!(
                "SET datafusion.execution.parquet.pushdown_filters = {pushdown}"
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        for sql in queries {
            fx.set("policy", "off").await;
            let (expected, _) = fx.run(sql).await;
            for policy in ["batched", "pipelined", "streaming"] {
                fx.set("policy", policy).await;
                let (result, _) = fx.run(sql).await;
                assert_eq!(result, expected, "{policy}, pushdown={pushdown}: {sql}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_provider_prefetches_without_the_session_rule() {
    let dir = tempfile::tempdir().unwrap();
    for (i, year) in [2023, 2024].iter().enumerate() {
        let folder = dir.path().join(format!("year={year}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("part.parquet"),
            parquet_file(i as u64 * 100, 100, 50),
        )
        .unwrap();
    }
    // A plain session: no optimizer rule, only the extension for the settings.
    let ctx = datafusion::prelude::SessionContext::new_with_config(
        SessionConfig::new().with_option_extension(PrefetchOptions::default()),
    );
    let table = PrefetchingParquetTable::builder(format!("{}/", dir.path().display()))
        .with_hive_partitions()
        .build(&ctx.state())
        .await
        .unwrap();
    ctx.register_table("events", Arc::new(table)).unwrap();
    let text = sql_text(
        &ctx,
        "SELECT year, count(*), min(id) FROM events WHERE year = '2024' GROUP BY year",
    )
    .await;
    let row: Vec<&str> = text
        .lines()
        .nth(3)
        .unwrap()
        .split('|')
        .map(str::trim)
        .collect();
    assert_eq!(row[1..4], ["2024", "100", "100"], "{text}");
    let plan = sql_text(&ctx, "EXPLAIN SELECT count(*) FROM events WHERE id > 3").await;
    assert!(plan.contains("prefetch=auto("), "{plan}");
}
