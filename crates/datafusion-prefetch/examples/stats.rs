//! What a scan did: [`PrefetchStats`] after a query, and the same figures in
//! `EXPLAIN ANALYZE`.
//!
//! ```text
//! cargo run -p datafusion-prefetch --example stats
//! ```
//!
//! It writes a small table to a temporary folder and serves it through a
//! `SimulatedStore` at 20 ms per request, so that `auto` reads ahead.

use std::sync::Arc;
use std::time::Duration;

use datafusion::physical_plan::collect;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchGovernor, prefetch_stats, prefetching_context};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
use object_store::local::LocalFileSystem;
use url::Url;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let folder = tempfile::tempdir()?;
    let writer = SessionContext::new();
    for file in 0..4 {
        let path = folder.path().join(format!("t/part-{file}.parquet"));
        writer
            .sql(&format!(
                "COPY (SELECT value, value % 7 AS bucket FROM range({}, {})) \
                 TO '{}' STORED AS PARQUET",
                file * 250_000,
                (file + 1) * 250_000,
                path.display()
            ))
            .await?
            .collect()
            .await?;
    }
    let store = SimulatedStore::new(
        LocalFileSystem::new_with_prefix(folder.path())?,
        SimulatedStoreConfig::fixed(Duration::from_millis(20)),
    );
    let store_stats = store.stats();

    let ctx = prefetching_context(SessionConfig::new());
    let url = Url::parse("sim://sample/")?;
    ctx.register_object_store(&url, Arc::new(store));
    ctx.register_parquet("t", "sim://sample/t/", ParquetReadOptions::default())
        .await?;

    let sql = "SELECT bucket, sum(value) FROM t GROUP BY bucket ORDER BY bucket";
    // Take the scans' stats between planning and execution; they are live
    // while the query runs and final when it is done.
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let scans = prefetch_stats(&plan);
    let batches = collect(plan, ctx.task_ctx()).await?;
    println!(
        "{} groups",
        batches.iter().map(|b| b.num_rows()).sum::<usize>()
    );
    for (i, scan) in scans.iter().enumerate() {
        println!("scan {i}:");
        println!("  requests            {}", scan.requests());
        println!("  requests hedged     {}", scan.requests_hedged());
        println!("  bytes fetched       {}", scan.bytes_fetched());
        println!("  fetched ahead       {}", scan.bytes_fetched_ahead());
        println!(
            "  served from ahead   {}",
            scan.bytes_served_from_prefetch()
        );
        println!("  wasted              {}", scan.bytes_wasted());
        println!("  peak staged         {}", scan.peak_staged_bytes());
        println!("  staged now          {}", scan.staged_bytes());
        println!("  tasks still running {}", scan.live_tasks());
    }
    println!("the store saw {} GETs", store_stats.get_requests());

    // The process-wide governor: what every prefetching scan held at most.
    let governor = PrefetchGovernor::of(&ctx.runtime_env());
    println!(
        "governor: limit {}, peak held {} bytes, peak staged {} bytes",
        governor.limit(),
        governor.peak_held_bytes(),
        governor.peak_staged_bytes()
    );

    // The same figures, per scan, in EXPLAIN ANALYZE (prefetch_* metrics on
    // DataSourceExec, with what `auto` measured and chose).
    let explained = ctx
        .sql(&format!("EXPLAIN ANALYZE {sql}"))
        .await?
        .collect()
        .await?;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&explained)?.to_string();
    for line in text.lines().filter(|line| line.contains("DataSourceExec")) {
        for metric in line.split(", ").filter(|m| m.contains("prefetch_")) {
            println!("  {}", metric.trim());
        }
    }
    Ok(())
}
