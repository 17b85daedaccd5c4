//! One measured run: a fresh session over the simulated store, the query
//! planned outside the timer, then executed and checked.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::Result;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{ParquetReadOptions, SessionConfig};
use datafusion_prefetch::{PrefetchStats, PrefetchingParquetSource, prefetching_context};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use serde::Serialize;
use url::Url;

use crate::suites::{Query, Suite};

/// How every run of one benchmark invocation is set up.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub store: SimulatedStoreConfig,
    pub latency_label: String,
    pub partitions: usize,
    /// `prefetch.*` settings other than the policy, as `(key, value)`.
    pub settings: Vec<(String, String)>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub suite: String,
    pub query: String,
    pub policy: String,
    pub iteration: usize,
    pub latency: String,
    pub partitions: usize,
    pub wall_ms: f64,
    pub ttfb_ms: f64,
    pub requests: u64,
    pub bytes_fetched: u64,
    pub bytes_wasted: u64,
    pub peak_staged_bytes: u64,
    pub memory_budget: String,
    pub rows: usize,
    pub checksum: String,
    pub matches_off: bool,
}

fn prefetch_stats(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<PrefetchStats>>) {
    if let Some(exec) = plan.downcast_ref::<DataSourceExec>()
        && let Some(scan) = exec.data_source().downcast_ref::<FileScanConfig>()
        && let Some(source) = scan
            .file_source()
            .downcast_ref::<PrefetchingParquetSource>()
    {
        out.push(source.stats());
    }
    for child in plan.children() {
        prefetch_stats(child, out);
    }
}

/// A checksum of the result that ignores row order: the sorted rows, hashed.
pub fn checksum(batches: &[RecordBatch]) -> Result<(usize, String)> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            rows.push(cells.join("\u{1f}"));
        }
    }
    rows.sort();
    let mut hasher = DefaultHasher::new();
    rows.hash(&mut hasher);
    Ok((rows.len(), format!("{:016x}", hasher.finish())))
}

/// Run `query` of `suite` once under `policy`.
pub async fn measure(
    suite: &Suite,
    query: &Query,
    policy: &str,
    iteration: usize,
    config: &RunConfig,
) -> Result<Measurement> {
    let ctx = prefetching_context(SessionConfig::new().with_target_partitions(config.partitions));
    let local = LocalFileSystem::new_with_prefix(&suite.data_dir)?;
    let store = SimulatedStore::new(local, config.store);
    let store_stats = store.stats();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    ctx.register_object_store(&Url::parse("sim://bench").expect("valid url"), store);
    for table in &suite.tables {
        ctx.register_parquet(
            *table,
            format!("sim://bench/{table}/"),
            ParquetReadOptions::default(),
        )
        .await?;
    }
    ctx.sql(&format!("SET prefetch.policy = '{policy}'"))
        .await?
        .collect()
        .await?;
    let mut budget = "default".to_string();
    for (key, value) in &config.settings {
        ctx.sql(&format!("SET prefetch.{key} = '{value}'"))
            .await?
            .collect()
            .await?;
        if key == "memory_budget" {
            budget = value.clone();
        }
    }
    let plan = ctx.sql(&query.sql).await?.create_physical_plan().await?;
    let mut sources = vec![];
    prefetch_stats(&plan, &mut sources);
    store_stats.reset();

    let started = Instant::now();
    let mut stream = execute_stream(plan, ctx.task_ctx())?;
    let mut batches = vec![];
    let mut ttfb = None;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        if ttfb.is_none() && batch.num_rows() > 0 {
            ttfb = Some(started.elapsed());
        }
        batches.push(batch);
    }
    let wall = started.elapsed();
    drop(stream);

    let (rows, checksum) = checksum(&batches)?;
    Ok(Measurement {
        suite: suite.name.to_string(),
        query: query.name.clone(),
        policy: policy.to_string(),
        iteration,
        latency: config.latency_label.clone(),
        partitions: config.partitions,
        wall_ms: wall.as_secs_f64() * 1e3,
        ttfb_ms: ttfb.unwrap_or(wall).as_secs_f64() * 1e3,
        requests: store_stats.get_requests(),
        bytes_fetched: store_stats.bytes_transferred(),
        bytes_wasted: sources.iter().map(|s| s.bytes_wasted()).sum(),
        peak_staged_bytes: sources
            .iter()
            .map(|s| s.peak_staged_bytes())
            .max()
            .unwrap_or(0),
        memory_budget: budget,
        rows,
        checksum,
        matches_off: true,
    })
}
