//! Shared fixtures: Parquet files in a simulated store, a prefetching session,
//! and access to the scan's live statistics.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::attempts::{record_attempt, record_throttled};
use datafusion_prefetch::{PrefetchGovernor, PrefetchStats, enable_prefetch, prefetch_stats};
use datafusion_prefetch_simstore::{
    Attempt, FaultRules, FaultStats, FaultyStore, RequestRateLimit, SimulatedStore,
    SimulatedStoreConfig, StoreStats,
};
use datafusion_prefetch_testdata::mix;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use url::Url;

/// The table every fixture registers: `t(id UInt64, payload Int64, tag Utf8)`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("payload", DataType::Int64, true),
        Field::new("tag", DataType::Utf8, true),
    ]))
}

/// A Parquet file of `rows` rows starting at `first_id`, in row groups of
/// `row_group_rows`. Payloads are random, so they do not compress.
pub fn parquet_file(first_id: u64, rows: usize, row_group_rows: usize) -> Bytes {
    parquet_file_with(first_id, rows, row_group_rows, |props| props)
}

/// Tables `t0`, `t1`, … (`tables` of them) under `folder/`, each of two
/// 100-row files (ids unique across all of them), behind a fixed `latency`
/// per request.
pub async fn small_tables_at(
    folder: &str,
    tables: u64,
    latency: Duration,
) -> SimulatedStore<InMemory> {
    let memory = InMemory::new();
    for table in 0..tables {
        for file in 0..2u64 {
            let path = Path::from(format!("{folder}/t{table}/part-{file}.parquet"));
            let first = (table * 2 + file) * 100;
            memory
                .put(&path, parquet_file(first, 100, 50).into())
                .await
                .unwrap();
        }
    }
    SimulatedStore::new(memory, SimulatedStoreConfig::fixed(latency))
}

/// Like [`parquet_file`], with the writer's properties adjusted by `adjust`.
pub fn parquet_file_with(
    first_id: u64,
    rows: usize,
    row_group_rows: usize,
    adjust: impl FnOnce(
        parquet::file::properties::WriterPropertiesBuilder,
    ) -> parquet::file::properties::WriterPropertiesBuilder,
) -> Bytes {
    let ids: Vec<u64> = (first_id..first_id + rows as u64).collect();
    let payload: Int64Array = ids
        .iter()
        .map(|i| (i % 97 != 0).then(|| (mix(*i) >> 1) as i64 % 1_000_000))
        .collect();
    let tags: StringArray = ids.iter().map(|i| Some(format!("tag{}", i % 7))).collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(UInt64Array::from(ids)),
            Arc::new(payload),
            Arc::new(tags),
        ],
    )
    .unwrap();
    let props =
        adjust(WriterProperties::builder().set_max_row_group_row_count(Some(row_group_rows)))
            .build();
    let mut out = vec![];
    let mut writer = ArrowWriter::try_new(&mut out, schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

/// The footer of a file, parsed locally.
pub fn metadata(file: &Bytes) -> ParquetMetaData {
    ParquetMetaDataReader::new().parse_and_finish(file).unwrap()
}

/// Byte range of column `column` in row group `row_group`.
pub fn chunk(file: &Bytes, row_group: usize, column: usize) -> Range<u64> {
    let (start, len) = metadata(file)
        .row_group(row_group)
        .column(column)
        .byte_range();
    start..start + len
}

/// Files in a simulated store registered as table `t`.
pub struct Fixture {
    pub ctx: SessionContext,
    pub store: Arc<StoreStats>,
    /// Faults injected into GETs (below the latency; empty unless a test adds rules).
    pub faults: Arc<FaultRules>,
    pub fault_stats: Arc<FaultStats>,
    pub files: Vec<(Path, Bytes)>,
    pub pool: Arc<dyn MemoryPool>,
}

/// Options of a [`Fixture`].
pub struct FixtureOptions {
    pub latency: Duration,
    pub partitions: usize,
    /// Register with an explicit schema and no statistics, so no footer is read
    /// (and cached) while planning.
    pub cold_footers: bool,
    pub memory_limit: Option<usize>,
    /// Per-connection bandwidth of the store, bytes per second (unlimited if `None`).
    pub bandwidth: Option<u64>,
    /// A memory pool for the session (takes precedence over `memory_limit`).
    pub memory_pool: Option<Arc<dyn MemoryPool>>,
    /// The store's request rate per prefix (every file is in one).
    pub rate_limit: Option<RequestRateLimit>,
}

impl Default for FixtureOptions {
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(5),
            partitions: 1,
            cold_footers: false,
            memory_limit: None,
            bandwidth: None,
            memory_pool: None,
            rate_limit: None,
        }
    }
}

pub async fn fixture(files: Vec<Bytes>, options: FixtureOptions) -> Fixture {
    let faulty = FaultyStore::new(InMemory::new());
    let (faults, fault_stats) = (faulty.faults(), faulty.stats());
    let config = if options.latency.is_zero() {
        SimulatedStoreConfig::none()
    } else {
        SimulatedStoreConfig::fixed(options.latency)
    };
    let config = config
        .with_bandwidth(options.bandwidth)
        .with_rate_limit(options.rate_limit);
    // Each attempt counts for the scan whose read made it, as through
    // `AttemptCountingConnector` on a real wire.
    let store = SimulatedStore::new(faulty, config).with_attempt_observer(record_sim_attempt);
    let stats = store.stats();
    let mut named = vec![];
    for (i, bytes) in files.into_iter().enumerate() {
        let path = Path::from(format!("data/file_{i:03}.parquet"));
        let seed = store.inner().inner();
        seed.put(&path, bytes.clone().into()).await.unwrap();
        named.push((path, bytes));
    }
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(pool) = options.memory_pool {
        runtime = runtime.with_memory_pool(pool);
    } else if let Some(limit) = options.memory_limit {
        runtime = runtime.with_memory_limit(limit, 1.0);
    }
    let runtime = runtime.build_arc().unwrap();
    let pool = Arc::clone(&runtime.memory_pool);
    let mut config = SessionConfig::new()
        .with_target_partitions(options.partitions)
        .with_information_schema(true);
    if options.cold_footers {
        config.options_mut().execution.collect_statistics = false;
    }
    let ctx = prefetching_session(config, runtime, Arc::new(store));
    let schema = schema();
    let mut read = ParquetReadOptions::default();
    if options.cold_footers {
        read = read.schema(&schema);
    }
    ctx.register_parquet("t", "sim://bucket/data/", read)
        .await
        .unwrap();
    // Planning may have read footers; tests look at what the scan does.
    stats.reset();
    Fixture {
        ctx,
        store: stats,
        faults,
        fault_stats,
        files: named,
        pool,
    }
}

/// A [`SimulatedStore`] attempt, counted for the scan whose read made it.
pub fn record_sim_attempt(attempt: Attempt) {
    match attempt {
        Attempt::Sent => record_attempt(),
        Attempt::Throttled => record_throttled(),
    };
}

/// A prefetching session on `runtime` whose `sim://bucket` is `store`.
pub fn prefetching_session(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    store: Arc<dyn ObjectStore>,
) -> SessionContext {
    prefetching_session_at(config, runtime, &Url::parse("sim://bucket").unwrap(), store)
}

/// A prefetching session on `runtime` with `store` registered for `url`.
pub fn prefetching_session_at(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    url: &Url,
    store: Arc<dyn ObjectStore>,
) -> SessionContext {
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(enable_prefetch(state));
    ctx.register_object_store(url, store);
    ctx
}

impl Fixture {
    pub async fn set(&self, key: &str, value: &str) {
        self.ctx
            .sql(&format!("SET prefetch.{key} = '{value}'"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }

    pub async fn plan(&self, sql: &str) -> Arc<dyn ExecutionPlan> {
        self.ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    /// Run `sql`, returning its pretty-printed result and the stats of its scans.
    pub async fn run(&self, sql: &str) -> (String, Vec<Arc<PrefetchStats>>) {
        let plan = self.plan(sql).await;
        let stats = prefetch_stats(&plan);
        let batches = datafusion::physical_plan::collect(plan, self.ctx.task_ctx())
            .await
            .unwrap();
        (pretty_format_batches(&batches).unwrap().to_string(), stats)
    }
}

/// Run `sql` and pretty-print its result.
pub async fn sql_text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

/// Wait (bounded) until background tasks have wound down; the scan never
/// staged a byte its governor did not hold.
pub async fn settle(stats: &PrefetchStats) {
    for _ in 0..200 {
        if stats.live_tasks() == 0 && stats.staged_bytes() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stats.staged_over_held_violations(), 0, "staged over held");
}

/// Wait (bounded) until the scans' background tasks have wound down and the
/// pool holds nothing (operators of a failed or cancelled query release
/// their reservations as their tasks are dropped), then assert both.
pub async fn assert_released(stats: &[Arc<PrefetchStats>], pool: &dyn MemoryPool, what: &str) {
    assert_released_beside(stats, pool, 0, what).await
}

/// [`assert_released`] for a pool in which something outside the query holds
/// `held` bytes throughout.
pub async fn assert_released_beside(
    stats: &[Arc<PrefetchStats>],
    pool: &dyn MemoryPool,
    held: usize,
    what: &str,
) {
    for _ in 0..300 {
        let busy = stats
            .iter()
            .any(|s| s.live_tasks() > 0 || s.staged_bytes() > 0);
        if !busy && pool.reserved() == held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for stats in stats {
        assert_eq!(stats.staged_bytes(), 0, "{what}: staged bytes");
        assert_eq!(stats.live_tasks(), 0, "{what}: live background tasks");
        assert_eq!(
            stats.staged_over_held_violations(),
            0,
            "{what}: staged over held"
        );
    }
    assert_eq!(pool.reserved(), held, "{what}: memory pool reservation");
}

/// Nothing of `plan`'s scans is left staged, running, reserved or held.
pub async fn assert_nothing_left(fx: &Fixture, plan: &Arc<dyn ExecutionPlan>, what: &str) {
    assert_released(&prefetch_stats(plan), fx.pool.as_ref(), what).await;
    let governor = PrefetchGovernor::of(&fx.ctx.runtime_env());
    for _ in 0..300 {
        if governor.held_bytes() == 0 && governor.live_scans() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        (governor.held_bytes(), governor.live_scans()),
        (0, 0),
        "{what}: {governor:?}"
    );
    assert_eq!(governor.staged_over_held_violations(), 0, "{what}");
}

/// The value of metric `name` in an `EXPLAIN ANALYZE` text, which prints
/// large values with a unit (`27.13 K`, `2.33 M`).
pub fn metric(text: &str, name: &str) -> u64 {
    let start = text
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
        + name.len()
        + 1;
    let value: String = text[start..]
        .chars()
        .take_while(|c| *c != ',' && *c != ']')
        .collect();
    let (number, unit) = value.split_once(' ').unwrap_or((&value, ""));
    let scale = match unit {
        "" => 1.0,
        "K" => 1e3,
        "M" => 1e6,
        "B" => 1e9,
        other => panic!("{name}: unit {other} in\n{text}"),
    };
    let number: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value} is not a number in\n{text}"));
    (number * scale).round() as u64
}
