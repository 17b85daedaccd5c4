//! One measured run: a fresh session over the simulated store, the query
//! planned outside the timer, then executed and checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::attempts::{record_attempt, record_throttled};
use datafusion_prefetch::{PrefetchStats, RequestPrice, prefetch_stats, prefetching_context};
use datafusion_prefetch_ballista::{ObjectStores, ballista_prefetching_context};
use datafusion_prefetch_simstore::{Attempt, SimulatedStore, SimulatedStoreConfig, StoreStats};
use datafusion_prefetch_testdata::{Numbers, checksum};
use futures::StreamExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
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
    /// The scheduler (`df://…`) when the queries run on Ballista; its
    /// executors scan through stores of their own, so the store and scan
    /// statistics of such a run are the client's (table registration only).
    pub ballista: Option<String>,
    /// Where each run's store requests are written (`--request-log`).
    pub request_log: Option<PathBuf>,
    /// The suite's files preloaded in memory: runs read them from there
    /// rather than from disk (the floor's decode-only runs).
    pub in_memory: Option<Arc<InMemory>>,
}

/// Every file under `dir`, read into a new in-memory store under its path
/// relative to `dir` (as `LocalFileSystem::new_with_prefix(dir)` names it).
pub async fn preload(dir: &Path) -> Result<Arc<InMemory>> {
    let memory = InMemory::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(dir).expect("under dir");
            let location = object_store::path::Path::from_iter(
                relative
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned()),
            );
            let bytes = std::fs::read(&path)?;
            memory.put(&location, bytes.into()).await?;
        }
    }
    Ok(Arc::new(memory))
}

/// A simulated store's attempt told to the scan whose read made it, as
/// `AttemptCountingConnector` tells a real store's: counted in its metrics,
/// and a `503` heard by `auto`'s window at once.
pub fn tell_scans(attempt: Attempt) {
    match attempt {
        Attempt::Sent => record_attempt(),
        Attempt::Throttled => record_throttled(),
    };
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub suite: String,
    pub query: String,
    pub policy: String,
    pub iteration: usize,
    pub latency: String,
    /// The seed of the store's latency draws for this run.
    pub latency_seed: u64,
    pub partitions: usize,
    pub wall_ms: f64,
    pub ttfb_ms: f64,
    /// Time to the first batch of the plan's Parquet scans (the first scan
    /// to produce rows), measured the same way for every policy.
    pub scan_ttfb_ms: f64,
    pub requests: u64,
    /// Every request the store received, as S3 bills them: GETs, HEADs and
    /// LIST pages, each retry after a `503 SlowDown` one of its own.
    pub attempts: u64,
    /// Requests the store answered `503 SlowDown` (its rate limit per
    /// prefix; retried by the client as object_store retries them).
    pub throttled: u64,
    /// What the attempts cost at S3 Standard's price for GETs ($0.0004 per
    /// 1,000), in dollars.
    pub cost_usd: f64,
    /// GETs `auto` sent again beside one that had not answered (summed
    /// over the query's scans; in `requests` and `attempts` too).
    pub hedges: u64,
    /// Of those, hedges whose answer was read.
    pub hedges_won: u64,
    /// Bytes the store served (data, footers and page indexes).
    pub bytes_fetched: u64,
    /// The scans' own count of the data they fetched (`prefetch_bytes_fetched`;
    /// 0 under `off`, which reads as stock DataFusion does).
    pub scan_bytes_fetched: u64,
    /// Of those, bytes handed to a decoder.
    pub bytes_used: u64,
    /// Of those, bytes no decoder was handed.
    pub bytes_wasted: u64,
    pub peak_staged_bytes: u64,
    /// Changes after which one of the query's scans staged more than the
    /// governor held for it (summed over its scans): must be 0.
    pub staged_over_held_violations: u64,
    /// Bytes copied out of demand-read bodies to be kept staged (retained
    /// pages, widened ranges): the price of holds that count exactly what
    /// they keep alive.
    pub bytes_copied: u64,
    /// Parquet scans in the query's plan.
    pub scans: usize,
    pub memory_budget: String,
    pub rows: usize,
    pub checksum: String,
    pub matches_off: bool,
}

/// Whether `sql` names `table` (as a whole word).
fn mentions(sql: &str, table: &str) -> bool {
    sql.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| word.eq_ignore_ascii_case(table))
}

/// A session over a fresh simulated store, with `query` planned.
struct Planned {
    ctx: SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    sources: Vec<Arc<PrefetchStats>>,
    store_stats: Arc<StoreStats>,
    budget: String,
}

async fn plan(suite: &Suite, query: &Query, policy: &str, config: &RunConfig) -> Result<Planned> {
    let session = SessionConfig::new().with_target_partitions(config.partitions);
    let files: Arc<dyn ObjectStore> = match &config.in_memory {
        Some(memory) => Arc::clone(memory) as Arc<dyn ObjectStore>,
        None => Arc::new(LocalFileSystem::new_with_prefix(&suite.data_dir)?),
    };
    let store = SimulatedStore::new(files, config.store).with_attempt_observer(tell_scans);
    let store_stats = store.stats();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let ctx = match &config.ballista {
        None => {
            let ctx = prefetching_context(session);
            ctx.register_object_store(&Url::parse("sim://bench").expect("valid url"), store);
            ctx
        }
        Some(scheduler) => {
            let stores =
                ObjectStores::new().with_store(ObjectStoreUrl::parse("sim://bench")?, store);
            ballista_prefetching_context(scheduler, session, &stores).await?
        }
    };
    // Only the tables the query names: registering reads every file's footer
    // through the (slow) store.
    for table in suite.tables.iter().filter(|t| mentions(&query.sql, t)) {
        ctx.register_parquet(
            *table,
            format!("sim://bench/{table}/"),
            ParquetReadOptions::default(),
        )
        .await?;
    }
    set_prefetch(&ctx, policy, &config.settings).await?;
    let budget = config
        .settings
        .iter()
        .rev()
        .find(|(key, _)| key == "memory_budget")
        .map_or_else(|| "default".to_string(), |(_, value)| value.clone());
    let plan = ctx.sql(&query.sql).await?.create_physical_plan().await?;
    let sources = prefetch_stats(&plan);
    Ok(Planned {
        ctx,
        plan,
        sources,
        store_stats,
        budget,
    })
}

/// Run `query` of `suite` once under `policy`.
pub async fn measure(
    suite: &Suite,
    query: &Query,
    policy: &str,
    iteration: usize,
    config: &RunConfig,
) -> Result<Measurement> {
    let Planned {
        ctx,
        plan,
        sources,
        store_stats,
        budget,
    } = self::plan(suite, query, policy, config).await?;
    store_stats.reset();
    let (plan, first_scan_batch) = crate::first_batch::observe_scans(plan)?;

    let started = Instant::now();
    let Executed {
        batches,
        ttfb,
        wall,
    } = execute_timed(plan, &ctx).await?;
    if let Some(dir) = &config.request_log {
        let name = format!("{}_{}_{}.tsv", query.name, policy, iteration);
        write_request_log(&dir.join(name), &store_stats, started)?;
    }

    let (rows, checksum) = checksum(&batches, Numbers::Exact)?;
    Ok(Measurement {
        suite: suite.name.to_string(),
        query: query.name.clone(),
        policy: policy.to_string(),
        iteration,
        latency: config.latency_label.clone(),
        latency_seed: config.store.seed,
        partitions: config.partitions,
        wall_ms: wall.as_secs_f64() * 1e3,
        ttfb_ms: ttfb.unwrap_or(wall).as_secs_f64() * 1e3,
        scan_ttfb_ms: first_scan_batch
            .get()
            .map_or(wall, |at| at.duration_since(started))
            .as_secs_f64()
            * 1e3,
        requests: store_stats.get_requests(),
        attempts: store_stats.attempts(),
        throttled: store_stats.throttled(),
        cost_usd: RequestPrice::default().cost_of(store_stats.attempts()),
        hedges: sources.iter().map(|s| s.requests_hedged()).sum(),
        hedges_won: sources.iter().map(|s| s.hedges_won()).sum(),
        bytes_fetched: store_stats.bytes_transferred(),
        scan_bytes_fetched: sources.iter().map(|s| s.bytes_fetched()).sum(),
        bytes_used: sources.iter().map(|s| s.bytes_used()).sum(),
        bytes_wasted: sources.iter().map(|s| s.bytes_wasted()).sum(),
        peak_staged_bytes: sources
            .iter()
            .map(|s| s.peak_staged_bytes())
            .max()
            .unwrap_or(0),
        staged_over_held_violations: sources
            .iter()
            .map(|s| s.staged_over_held_violations())
            .sum(),
        bytes_copied: sources.iter().map(|s| s.bytes_copied()).sum(),
        scans: sources.len(),
        memory_budget: budget,
        rows,
        checksum,
        matches_off: true,
    })
}

/// A plan run to its end, timed.
pub struct Executed {
    pub batches: Vec<RecordBatch>,
    /// To the first batch with rows (`None`: there was none).
    pub ttfb: Option<Duration>,
    /// To the last batch.
    pub wall: Duration,
}

/// `SET prefetch.policy` to `policy` in `ctx`, then each other
/// `prefetch.*` setting in `settings`, in order.
pub async fn set_prefetch(
    ctx: &SessionContext,
    policy: &str,
    settings: &[(String, String)],
) -> Result<()> {
    let (policy, depth) = policy_and_depth(policy)?;
    let policy = ("policy".to_string(), policy.to_string());
    let depth = depth.map(|d| ("file_open_depth".to_string(), d.to_string()));
    for (key, value) in std::iter::once(&policy).chain(settings).chain(&depth) {
        ctx.sql(&format!("SET prefetch.{key} = '{value}'"))
            .await?
            .collect()
            .await?;
    }
    Ok(())
}

/// A `--policies` entry: a policy, or `policy@N` for the policy with
/// `prefetch.file_open_depth = N` (over any `--file-open-depth`), so one run
/// can compare fixed depths with `auto`.
pub fn policy_and_depth(entry: &str) -> Result<(&str, Option<usize>)> {
    match entry.split_once('@') {
        None => Ok((entry, None)),
        Some((policy, depth)) => match depth.parse() {
            Ok(depth) => Ok((policy, Some(depth))),
            Err(_) => Err(DataFusionError::Configuration(format!(
                "{entry}: expected <policy>@<file_open_depth>, e.g. pipelined@64"
            ))),
        },
    }
}

/// Execute `plan` to its end, timing its first batch with rows and its last.
pub async fn execute_timed(plan: Arc<dyn ExecutionPlan>, ctx: &SessionContext) -> Result<Executed> {
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
    Ok(Executed {
        batches,
        ttfb,
        wall: started.elapsed(),
    })
}

/// One line per store GET of a run, in issue order: path, byte range, and
/// when it was issued, answered (first byte) and finished, in ms since
/// `started` (-1 if it never got there), then its drawn first-byte latency.
fn write_request_log(path: &Path, stats: &StoreStats, started: Instant) -> Result<()> {
    let since = |at: Option<tokio::time::Instant>| {
        at.map_or(-1.0, |at| {
            at.into_std()
                .saturating_duration_since(started)
                .as_secs_f64()
                * 1e3
        })
    };
    let mut out = String::from("path\trange\tissued_ms\tfirst_byte_ms\tfinished_ms\tlatency_ms\n");
    for r in stats.records() {
        let range = r
            .range
            .map_or("?".to_string(), |r| format!("{}..{}", r.start, r.end));
        out.push_str(&format!(
            "{}\t{range}\t{:.1}\t{:.1}\t{:.1}\t{}\n",
            r.path,
            since(Some(r.started_at)),
            since(r.first_byte_at),
            since(r.finished_at),
            r.first_byte_latency.as_millis()
        ));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, out)?;
    Ok(())
}

/// Staged bytes over one execution of a scan: `(ms since start, bytes)`.
#[derive(Debug, Clone)]
pub struct StagedSeries {
    pub policy: String,
    pub query: String,
    /// Which scan of the plan (depth-first), of how many.
    pub scan: usize,
    pub scans: usize,
    pub points: Vec<(f64, u64)>,
}

/// Execute `query` once more, untimed, sampling every scan's staged bytes
/// every `every`; keep the scan that staged the most.
pub async fn sample_staged(
    suite: &Suite,
    query: &Query,
    policy: &str,
    config: &RunConfig,
    every: Duration,
) -> Result<StagedSeries> {
    let planned = plan(suite, query, policy, config).await?;
    let sources = planned.sources.clone();
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let sampler = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut samples: Vec<(f64, Vec<u64>)> = vec![];
            loop {
                ticks.tick().await;
                let now = started.elapsed().as_secs_f64() * 1e3;
                samples.push((now, sources.iter().map(|s| s.staged_bytes()).collect()));
                if done.load(Ordering::SeqCst) {
                    return samples;
                }
            }
        })
    };
    let mut stream = execute_stream(planned.plan, planned.ctx.task_ctx())?;
    while let Some(batch) = stream.next().await {
        batch?;
    }
    drop(stream);
    done.store(true, Ordering::SeqCst);
    let samples = sampler
        .await
        .map_err(|e| datafusion::common::DataFusionError::External(Box::new(e)))?;
    let scans = planned.sources.len();
    let scan = (0..scans)
        .max_by_key(|i| samples.iter().map(|(_, v)| v[*i]).max().unwrap_or(0))
        .unwrap_or(0);
    Ok(StagedSeries {
        policy: policy.to_string(),
        query: query.name.clone(),
        scan,
        scans,
        points: samples
            .into_iter()
            .map(|(t, v)| (t, v.get(scan).copied().unwrap_or(0)))
            .collect(),
    })
}

/// Every suite's queries run on its generated data, alike under two policies.
#[cfg(test)]
mod tests {
    use datafusion_prefetch_simstore::SimulatedStoreConfig;

    use super::*;
    use crate::suites::{ClickbenchCopy, SuiteOptions, prepare};

    #[test]
    fn a_policy_may_carry_its_file_open_depth() {
        assert_eq!(policy_and_depth("auto").unwrap(), ("auto", None));
        assert_eq!(
            policy_and_depth("pipelined@64").unwrap(),
            ("pipelined", Some(64))
        );
        let error = policy_and_depth("pipelined@deep").unwrap_err().to_string();
        assert!(error.contains("pipelined@64"), "{error}");
    }

    /// Generate `name` at a tiny scale and run every query under `off` and
    /// `pipelined`: it must run, and give the same rows.
    async fn every_query_runs(name: &str, scale: f64) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = SuiteOptions {
            scale,
            clickbench_copy: ClickbenchCopy::Both,
        };
        let suite = prepare(name, dir.path(), &options).expect("data generated");
        let config = RunConfig {
            store: SimulatedStoreConfig::none(),
            latency_label: "none".into(),
            partitions: 1,
            settings: vec![],
            ballista: None,
            request_log: Some(dir.path().join("requests")),
            in_memory: None,
        };
        // The floor's decode-only runs read the same files from memory.
        let from_memory = RunConfig {
            in_memory: Some(preload(&suite.data_dir).await.expect("preloaded")),
            request_log: None,
            ..config.clone()
        };
        for query in &suite.queries {
            let run = |policy| measure(&suite, query, policy, 0, &config);
            let off = run("off").await;
            let off = off.unwrap_or_else(|e| panic!("{name} {} off: {e}", query.name));
            let pipelined = run("pipelined").await;
            let pipelined =
                pipelined.unwrap_or_else(|e| panic!("{name} {} pipelined: {e}", query.name));
            assert_eq!(
                (off.rows, &off.checksum),
                (pipelined.rows, &pipelined.checksum),
                "{name} {}",
                query.name
            );
            assert_eq!(
                pipelined.staged_over_held_violations, 0,
                "{name} {}",
                query.name
            );
            let memory = measure(&suite, query, "off", 0, &from_memory).await;
            let memory = memory.unwrap_or_else(|e| panic!("{name} {} in memory: {e}", query.name));
            assert_eq!(
                (off.rows, &off.checksum, off.bytes_fetched),
                (memory.rows, &memory.checksum, memory.bytes_fetched),
                "{name} {} from memory",
                query.name
            );
            let log = dir
                .path()
                .join(format!("requests/{}_off_0.tsv", query.name));
            let log = std::fs::read_to_string(&log).expect("a request log per run");
            assert!(log.starts_with("path\trange\tissued_ms"), "{log}");
            assert_eq!(log.lines().count() as u64, off.requests + 1, "{log}");
        }
    }

    #[tokio::test]
    async fn every_tpch_query_runs() {
        every_query_runs("tpch", 0.001).await;
    }

    #[tokio::test]
    async fn every_clickbench_query_runs_on_both_copies() {
        every_query_runs("clickbench", 0.001).await;
    }
}
