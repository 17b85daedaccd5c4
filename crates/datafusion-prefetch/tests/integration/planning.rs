//! Footers read ahead at planning time (`PrefetchingParquetFormat`): more
//! at once than DataFusion reads them, each once, within the governor, and
//! nothing else changes — the schema, the answers, the errors.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{
    ByteSize, PrefetchGovernor, PrefetchStats, PrefetchingParquetFormatFactory,
    PrefetchingParquetTable, prefetch_stats, register_parquet_tables,
};
use datafusion_prefetch_simstore::{
    RequestRateLimit, RequestState, SimulatedStore, SimulatedStoreConfig, StoreStats,
};
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::support::{metadata, parquet_file, prefetching_session, small_tables_at};

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
    /// The store's `503 SlowDown`s meanwhile.
    planning_503s: u64,
    max_in_flight: u64,
    result: Result<String, String>,
    /// What the query's prefetching scans counted (none if it was not run).
    scans: Vec<Arc<PrefetchStats>>,
}

/// How [`plan_and_run`] sets up its table.
#[derive(Default, Clone, Copy)]
struct Setup {
    /// The governor's limit.
    limit: Option<ByteSize>,
    /// The file replaced by one that is not Parquet.
    corrupt: Option<usize>,
    /// The metadata cache's limit.
    metadata_cache_limit: Option<usize>,
    /// Registered with `CREATE EXTERNAL TABLE` in a session with
    /// `PrefetchingParquetFormatFactory`, not through `PrefetchingParquetTable`.
    create_external_table: bool,
    /// The store's request-rate limit.
    rate_limit: Option<RequestRateLimit>,
    /// `prefetch.file_open_depth`.
    file_open_depth: Option<usize>,
    /// `datafusion.execution.parquet.metadata_size_hint`.
    metadata_size_hint: Option<usize>,
    /// The query planned, not run.
    plan_only: bool,
    /// The query instead of `SELECT count(*), sum(id) FROM t`.
    query: Option<&'static str>,
    /// The store's time per request instead of 5 ms.
    latency: Option<Duration>,
}

/// `FILES` small files in a store of 5 ms per request; a fresh runtime (so
/// no footer is cached yet); the table registered under `policy` and
/// `SELECT count(*), sum(id)` planned and run.
async fn plan_and_run(policy: &str, setup: Setup) -> Planned {
    let Setup {
        limit,
        corrupt,
        metadata_cache_limit,
        create_external_table,
        rate_limit,
        file_open_depth,
        metadata_size_hint,
        plan_only,
        query,
        latency,
    } = setup;
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
        SimulatedStoreConfig::fixed(latency.unwrap_or(Duration::from_millis(5)))
            .with_rate_limit(rate_limit),
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
    let mut config = SessionConfig::new();
    if let Some(hint) = metadata_size_hint {
        config.options_mut().execution.parquet.metadata_size_hint = Some(hint);
    }
    let ctx = prefetching_session(config, runtime, Arc::new(store));
    ctx.sql(&format!("SET prefetch.policy = '{policy}'"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    if let Some(depth) = file_open_depth {
        ctx.sql(&format!("SET prefetch.file_open_depth = {depth}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }

    let planned = async {
        if create_external_table {
            ctx.state_ref()
                .write()
                .register_file_format(Arc::new(PrefetchingParquetFormatFactory::default()), true)?;
            ctx.sql("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'sim://bucket/data/'")
                .await?
                .collect()
                .await?;
        } else {
            let table = PrefetchingParquetTable::builder("sim://bucket/data/")
                .build(&ctx.state())
                .await?;
            ctx.register_table("t", Arc::new(table))?;
        }
        ctx.sql(query.unwrap_or("SELECT count(*), sum(id) FROM t"))
            .await?
            .create_physical_plan()
            .await
    }
    .await;
    let planning_gets = stats.get_requests();
    let planning_503s = stats.throttled();
    let max_in_flight = stats.max_in_flight_gets();
    let mut scans = vec![];
    let result = match planned {
        Ok(_) if plan_only => Ok("planned".into()),
        Ok(plan) => {
            scans = prefetch_stats(&plan);
            datafusion::physical_plan::collect(plan, ctx.task_ctx())
                .await
                .map(|batches| pretty_format_batches(&batches).unwrap().to_string())
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    Planned {
        ctx,
        store: stats,
        governor,
        planning_gets,
        planning_503s,
        max_in_flight,
        result,
        scans,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reads_the_footers_many_at_once_and_each_once() {
    for create_external_table in [false, true] {
        let setup = Setup {
            create_external_table,
            ..Setup::default()
        };
        footers_read_ahead_each_once(setup).await;
    }
}

async fn footers_read_ahead_each_once(setup: Setup) {
    let off = plan_and_run("off", setup).await;
    let auto = plan_and_run("auto", setup).await;
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
    // Stock execution reads no footer again (they are cached) but reads each
    // file's data: one GET per file.
    assert_eq!(executed_gets(&off), FILES);
    // Under `auto` each small file's footer read was the whole file, kept for
    // the scan, which cut its data from it: no GET at all.
    assert_eq!(executed_gets(&auto), 0);
    for run in [&off, &auto] {
        assert_eq!(run.governor.held_bytes(), 0);
        assert_eq!(run.governor.kept_bytes(), 0, "let go as the scan ended");
        assert_eq!(run.governor.live_scans(), 0);
    }
    assert!(
        auto.governor.peak_held_bytes() > 0,
        "the reads beyond DataFusion's were reserved"
    );
    assert_eq!(off.governor.peak_held_bytes(), 0, "off reserves nothing");
    drop(auto.ctx);
}

/// The sizes of [`plan_and_run`]'s files.
fn file_sizes() -> Vec<usize> {
    (0..FILES)
        .map(|i| parquet_file(i as u64 * 10, 10, 10).len())
        .collect()
}

/// GETs answered after planning.
fn executed_gets(run: &Planned) -> usize {
    run.store.records()[run.planning_gets as usize..]
        .iter()
        .filter(|r| r.state == RequestState::Completed)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_files_the_footer_read_reads_whole_are_kept_for_the_scan() {
    let sizes = file_sizes();
    let (smallest, largest) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    // A size hint below every file's size: the footer read is a suffix of
    // each, and the scan reads its data from the store.
    let setup = Setup {
        metadata_size_hint: Some(smallest - 1),
        ..Setup::default()
    };
    let off = plan_and_run("off", setup).await;
    let auto = plan_and_run("auto", setup).await;
    assert!(off.result.is_ok(), "{:?}", off.result);
    assert_eq!(auto.result, off.result);
    assert_eq!(executed_gets(&auto), FILES);
    // The hint at the largest file's size: each is read whole, and kept.
    let whole = plan_and_run(
        "auto",
        Setup {
            metadata_size_hint: Some(*largest),
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(whole.result, off.result);
    assert_eq!(whole.planning_gets, FILES as u64);
    assert_eq!(executed_gets(&whole), 0);
    assert!(
        whole.governor.peak_staged_bytes() >= sizes.iter().sum::<usize>() as u64,
        "the kept files were staged under the governor"
    );
    assert_eq!(whole.governor.kept_bytes(), 0);
    assert_eq!(whole.governor.staged_bytes(), 0);
}

/// The sum of `count` over a run's scans.
fn summed(run: &Planned, count: impl Fn(&PrefetchStats) -> u64) -> u64 {
    run.scans.iter().map(|scan| count(scan)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_cut_from_kept_files_count_the_requests_and_bytes_they_saved() {
    // At 5 ms, and on a store as fast as a local one, where `auto` reads as
    // stock DataFusion does.
    for latency in [Duration::from_millis(5), Duration::ZERO] {
        kept_reads_counted_as_the_requests_they_saved(latency).await;
    }
}

async fn kept_reads_counted_as_the_requests_they_saved(latency: Duration) {
    // Every column: a file's reads are of several column chunks at once.
    let query = Some("SELECT count(*), sum(id), sum(payload), count(DISTINCT tag) FROM t");
    let latency = Some(latency);
    let sizes = file_sizes();
    let (smallest, largest) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    let asked = plan_and_run(
        "auto",
        Setup {
            metadata_size_hint: Some(smallest - 1),
            query,
            latency,
            ..Setup::default()
        },
    )
    .await;
    let kept = plan_and_run(
        "auto",
        Setup {
            metadata_size_hint: Some(*largest),
            query,
            latency,
            ..Setup::default()
        },
    )
    .await;
    let off = plan_and_run(
        "off",
        Setup {
            query,
            latency,
            ..Setup::default()
        },
    )
    .await;
    assert!(off.result.is_ok(), "{:?}", off.result);
    assert_eq!(asked.result, off.result);
    assert_eq!(kept.result, off.result);
    assert_eq!(executed_gets(&kept), 0);
    // What the scan asked the store for when nothing was kept (hedges
    // aside), it cut from the kept bodies: as many requests, as many bytes.
    let requests =
        summed(&asked, PrefetchStats::requests) - summed(&asked, PrefetchStats::requests_hedged);
    assert!(requests >= FILES as u64, "{latency:?}: {requests}");
    assert_eq!(summed(&asked, PrefetchStats::requests_kept), 0);
    assert_eq!(summed(&kept, PrefetchStats::requests), 0);
    assert_eq!(
        summed(&kept, PrefetchStats::requests_kept),
        requests,
        "{latency:?}"
    );
    let fetched = summed(&asked, PrefetchStats::bytes_fetched);
    assert!(fetched > 0);
    assert_eq!(summed(&kept, PrefetchStats::bytes_kept), fetched);
    assert_eq!(summed(&kept, PrefetchStats::bytes_fetched), fetched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_kept_for_a_query_planned_and_not_run_stay_within_their_share() {
    let file_size = parquet_file(0, 10, 10).len() as u64;
    // Room in the kept share (an eighth of the limit) for about 50 files.
    let limit = ByteSize::new(8 * 50 * file_size);
    let planned = plan_and_run(
        "auto",
        Setup {
            limit: Some(limit),
            plan_only: true,
            ..Setup::default()
        },
    )
    .await;
    let kept = planned.governor.kept_bytes();
    assert!(
        kept <= limit.as_u64() / 8 && kept > 45 * file_size,
        "{kept} bytes kept"
    );
    assert!(planned.governor.held_bytes() <= limit.as_u64());
    // Planned again, and run: the files kept are read from the kept bodies,
    // the rest from the store.
    let ctx = &planned.ctx;
    let batches = ctx
        .sql("SELECT count(*), sum(id) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let off = plan_and_run("off", Setup::default()).await;
    assert_eq!(
        Ok(pretty_format_batches(&batches).unwrap().to_string()),
        off.result
    );
    assert_eq!(planned.governor.kept_bytes(), 0, "the scan let them go");
    assert_eq!(planned.governor.held_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_governor_limit_bounds_the_footers_in_flight() {
    // Room for about four footers beyond DataFusion's own reads.
    let file_size = parquet_file(0, 10, 10).len() as u64;
    let limit = ByteSize::new(4 * file_size + file_size / 2);
    let off = plan_and_run("off", Setup::default()).await;
    let auto = plan_and_run(
        "auto",
        Setup {
            limit: Some(limit),
            ..Setup::default()
        },
    )
    .await;
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
    let setup = Setup {
        corrupt: Some(FILES / 2),
        ..Setup::default()
    };
    let off = plan_and_run("off", setup).await;
    let auto = plan_and_run("auto", setup).await;
    let error = off
        .result
        .clone()
        .expect_err("a corrupt file fails schema inference");
    assert!(error.contains("Corrupt footer"), "{error}");
    assert_eq!(auto.result, off.result);
    assert_eq!(
        auto.governor.held_bytes(),
        0,
        "nothing kept for a table not made"
    );
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
        let setup = Setup {
            metadata_cache_limit: Some(room),
            ..Setup::default()
        };
        let off = plan_and_run("off", setup).await;
        let auto = plan_and_run("auto", setup).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_paces_its_footer_reads_on_a_throttling_store() {
    // 200 footers against 200 requests a second, 20 at once: any depth
    // beyond DataFusion's own 32 meets `503 SlowDown`s.
    let throttling = Setup {
        rate_limit: Some(RequestRateLimit::per_second(200).with_burst(20)),
        ..Setup::default()
    };
    let off = plan_and_run("off", throttling).await;
    let pipelined = plan_and_run(
        "pipelined",
        Setup {
            file_open_depth: Some(256),
            ..throttling
        },
    )
    .await;
    let auto = plan_and_run("auto", throttling).await;
    assert!(off.result.is_ok(), "{:?}", off.result);
    assert_eq!(pipelined.result, off.result);
    assert_eq!(auto.result, off.result);
    eprintln!(
        "planning 503s: off {}, pipelined(256) {}, auto {}",
        off.planning_503s, pipelined.planning_503s, auto.planning_503s
    );
    assert!(pipelined.planning_503s > 0, "the limit binds");
    // Paced, auto sends about 40% of the 503s at depth 256 (and somewhat
    // more than stock's 32 at once: its window starts at 32 and grows until
    // the first throttled answers come back, 100 ms after they were sent).
    assert!(
        3 * auto.planning_503s < 2 * pipelined.planning_503s,
        "auto {}, pipelined(256) {}",
        auto.planning_503s,
        pipelined.planning_503s
    );
}

/// Four tables of two files each in a store at 30 ms per request,
/// registered with `register_parquet_tables` or (`at_once: false`) one
/// after another: whether each table's first footer read went out before
/// any table's footer read landed, and how many rows each table has.
async fn register_four_tables(at_once: bool) -> (Vec<bool>, Vec<String>) {
    let store = small_tables_at("tpch", 4, Duration::from_millis(30)).await;
    let stats = store.stats();
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let ctx = prefetching_session(SessionConfig::new(), runtime, Arc::new(store));
    let tables: Vec<(String, String)> = (0..4)
        .map(|t| (format!("t{t}"), format!("sim://bucket/tpch/t{t}/")))
        .collect();
    let options = datafusion::prelude::ParquetReadOptions::default();
    if at_once {
        register_parquet_tables(&ctx, tables.clone(), options)
            .await
            .unwrap();
    } else {
        for (name, location) in &tables {
            ctx.register_parquet(name.as_str(), location, options.clone())
                .await
                .unwrap();
        }
    }
    let records = stats.records();
    let first_landed = records.iter().filter_map(|r| r.finished_at).min().unwrap();
    let went_out_together = (0..4)
        .map(|t| {
            let prefix = format!("tpch/t{t}/");
            records
                .iter()
                .filter(|r| r.path.starts_with(&prefix))
                .map(|r| r.started_at)
                .min()
                .is_some_and(|first| first < first_landed)
        })
        .collect();
    let mut counts = vec![];
    for (name, _) in &tables {
        let batches = ctx
            .sql(&format!("SELECT count(*) FROM {name}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        counts.push(pretty_format_batches(&batches).unwrap().to_string());
    }
    (went_out_together, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_registered_at_once_read_their_footers_together() {
    let (together, counts) = register_four_tables(true).await;
    assert_eq!(
        together,
        vec![true; 4],
        "every table's footers went out at once"
    );
    // One after another, a table's footers wait for the previous table's.
    let (apart, counts_apart) = register_four_tables(false).await;
    assert_eq!(apart, vec![true, false, false, false]);
    assert_eq!(counts, counts_apart);
    assert!(counts.iter().all(|c| c.contains("200")), "{counts:?}");
}
