//! Footers read ahead at planning time (`PrefetchingParquetFormat`): more
//! at once than DataFusion reads them, each once, within the governor, and
//! nothing else changes — the schema, the answers, the errors.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{
    ByteSize, PrefetchGovernor, PrefetchOptions, PrefetchingParquetTable, enable_prefetch,
};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig, StoreStats};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use crate::support::{metadata, parquet_file};

const FILES: usize = 200;

/// DataFusion's default `meta_fetch_concurrency`: the most footer reads
/// stock planning keeps in flight.
const DATAFUSION_FOOTER_READS: u64 = 32;

/// A file name as long as a small footer: the metadata cache counts its
/// keys as well as its footers.
fn long_name() -> String {
    "long_name_".repeat(300)
}

struct Planned {
    ctx: SessionContext,
    store: Arc<StoreStats>,
    governor: Arc<PrefetchGovernor>,
    /// GETs while the table was registered (its schema inferred) and the
    /// query planned (its files' statistics collected).
    planning_gets: u64,
    max_in_flight: u64,
    result: Result<String, String>,
}

/// `FILES` small files in a store of 5 ms per request, one of them replaced
/// by `corrupt` if given; a fresh runtime (so no footer is cached yet) whose
/// governor limit is `limit`; the table registered through
/// `PrefetchingParquetTable` under `policy` and `SELECT count(*), sum(id)`
/// planned and run.
async fn plan_and_run(policy: &str, limit: Option<ByteSize>, corrupt: Option<usize>) -> Planned {
    plan_and_run_with_cache(policy, limit, corrupt, None).await
}

async fn plan_and_run_with_cache(
    policy: &str,
    limit: Option<ByteSize>,
    corrupt: Option<usize>,
    metadata_cache_limit: Option<usize>,
) -> Planned {
    let memory = InMemory::new();
    for i in 0..FILES {
        let bytes = match corrupt {
            Some(c) if c == i => {
                bytes::Bytes::from_static(b"not parquet, just long enough to have a tail")
            }
            _ => parquet_file(i as u64 * 10, 10, 10),
        };
        // Names as long as a footer, so the cache's keys count as much as
        // its values.
        let path = Path::from(format!("data/{}{i:04}.parquet", long_name()));
        memory.put(&path, bytes.into()).await.unwrap();
    }
    let store = SimulatedStore::new(
        memory,
        SimulatedStoreConfig::fixed(Duration::from_millis(5)),
    );
    let stats = store.stats();
    let mut cache = CacheManagerConfig::default();
    if let Some(limit) = metadata_cache_limit {
        cache = cache.with_metadata_cache_limit(limit);
    }
    let runtime = RuntimeEnvBuilder::new()
        .with_cache_manager(cache)
        .build_arc()
        .unwrap();
    let governor = PrefetchGovernor::of(&runtime);
    if let Some(limit) = limit {
        governor.set_limit(limit);
    }
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_option_extension(PrefetchOptions::default()))
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(enable_prefetch(state));
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    ctx.register_object_store(&Url::parse("sim://bucket").unwrap(), store);
    ctx.sql(&format!("SET prefetch.policy = '{policy}'"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();

    let planned = async {
        let table = PrefetchingParquetTable::builder("sim://bucket/data/")
            .build(&ctx.state())
            .await?;
        ctx.register_table("t", Arc::new(table))?;
        ctx.sql("SELECT count(*), sum(id) FROM t")
            .await?
            .create_physical_plan()
            .await
    }
    .await;
    let planning_gets = stats.get_requests();
    let max_in_flight = stats.max_in_flight_gets();
    let result = match planned {
        Ok(plan) => datafusion::physical_plan::collect(plan, ctx.task_ctx())
            .await
            .map(|batches| pretty_format_batches(&batches).unwrap().to_string())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    Planned {
        ctx,
        store: stats,
        governor,
        planning_gets,
        max_in_flight,
        result,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reads_the_footers_many_at_once_and_each_once() {
    let off = plan_and_run("off", None, None).await;
    let auto = plan_and_run("auto", None, None).await;
    assert!(off.result.is_ok(), "{:?}", off.result);
    assert_eq!(auto.result, off.result);
    // Each footer is one suffix GET of the small file, read once: schema
    // inference and the statistics both find it cached afterwards.
    assert_eq!(off.planning_gets, FILES as u64);
    assert_eq!(auto.planning_gets, FILES as u64);
    assert!(
        off.max_in_flight <= DATAFUSION_FOOTER_READS,
        "{}",
        off.max_in_flight
    );
    assert!(
        auto.max_in_flight > 2 * DATAFUSION_FOOTER_READS,
        "auto read {} footers at once",
        auto.max_in_flight
    );
    // The footers read ahead landed in the cache the scans use: executing
    // read no footer again (one GET per file for its data).
    assert_eq!(auto.store.get_requests() - auto.planning_gets, FILES as u64);
    for run in [&off, &auto] {
        assert_eq!(run.governor.held_bytes(), 0);
        assert_eq!(run.governor.live_scans(), 0);
    }
    assert!(
        auto.governor.peak_held_bytes() > 0,
        "the reads beyond DataFusion's were reserved"
    );
    assert_eq!(off.governor.peak_held_bytes(), 0, "off reserves nothing");
    drop(auto.ctx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_governor_limit_bounds_the_footers_in_flight() {
    // Room for about four footers beyond DataFusion's own reads.
    let file_size = parquet_file(0, 10, 10).len() as u64;
    let limit = ByteSize::new(4 * file_size + file_size / 2);
    let off = plan_and_run("off", None, None).await;
    let auto = plan_and_run("auto", Some(limit), None).await;
    assert_eq!(auto.result, off.result);
    assert_eq!(auto.planning_gets, FILES as u64);
    assert!(auto.governor.peak_held_bytes() <= limit.as_u64());
    assert!(
        auto.max_in_flight <= DATAFUSION_FOOTER_READS + 4,
        "{} in flight",
        auto.max_in_flight
    );
    assert!(auto.governor.refusals() > 0, "the limit was reached");
    assert_eq!(auto.governor.held_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_footer_fails_planning_as_it_does_under_off() {
    let off = plan_and_run("off", None, Some(FILES / 2)).await;
    let auto = plan_and_run("auto", None, Some(FILES / 2)).await;
    let error = off
        .result
        .clone()
        .expect_err("a corrupt file fails schema inference");
    assert!(error.contains("Corrupt footer"), "{error}");
    assert_eq!(auto.result, off.result);
    assert_eq!(auto.governor.held_bytes(), 0);
    assert_eq!(auto.governor.live_scans(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_footer_is_read_ahead_only_to_be_evicted_from_a_small_cache() {
    let per_footer = metadata(&parquet_file(0, 10, 10)).memory_size() + long_name().len();
    // Room for fewer footers than DataFusion reads at once (about 20), then
    // for about half of the table's.
    for (room, read_ahead) in [
        (per_footer * FILES / 7, false),
        (per_footer * FILES / 3, true),
        (per_footer * FILES / 2, true),
    ] {
        let off = plan_and_run_with_cache("off", None, None, Some(room)).await;
        let auto = plan_and_run_with_cache("auto", None, None, Some(room)).await;
        assert_eq!(auto.result, off.result);
        assert!(
            off.planning_gets > FILES as u64,
            "the cache is too small for stock too"
        );
        assert_eq!(auto.planning_gets, off.planning_gets, "cache room {room}");
        if read_ahead {
            assert!(
                auto.max_in_flight > DATAFUSION_FOOTER_READS,
                "some were read ahead"
            );
        }
    }
}
