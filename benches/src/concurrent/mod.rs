//! `--suite concurrent`: many clients on one runtime, as a query service runs
//! them. Per policy, one context and one runtime (so one
//! [`PrefetchGovernor`]) serve `--clients` clients at once, each running the
//! TPC-H query list in its own order (shuffled per client from a fixed seed)
//! over the simulated store. Reported per policy: throughput, query latency
//! percentiles, the peak of all scans' staged bytes (sampled every 5 ms, and
//! the governor's exact peak), the peak process RSS, failed queries, and
//! whether every result matched `off`'s; what the store saw (requests,
//! attempts, `503`s) and the process's CPU time per query; and for `auto`,
//! what its store's window of requests in flight did (its limit, cuts by
//! cause, reads ahead withdrawn, how long reads ahead and the decoders
//! waiting on them waited for room, and the limit every 100 ms).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::common::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::collect;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{ByteSize, PrefetchGovernor, PrefetchOptions, enable_prefetch};
use datafusion_prefetch_simstore::{
    LatencyModel, SimulatedStore, SimulatedStoreConfig, StoreStats,
};
use datafusion_prefetch_testdata::{Numbers, SplitMix64, checksum};
use object_store::ObjectStore;
use serde::Serialize;
use url::Url;

mod process;
mod scans;
mod summary;
mod tables;

use process::{BusyLoops, cpu_time, rss_bytes};
use scans::{ScanCounters, scan_counters};
use summary::{PolicySummary, WindowSummary, percentile};

use crate::run::set_prefetch;
use crate::suites::{Query, Suite};

/// How one concurrency run is set up.
#[derive(Debug, Clone)]
pub struct ConcurrentConfig {
    /// Each count of clients, run in turn (a sweep).
    pub clients: Vec<usize>,
    pub policies: Vec<String>,
    pub store: SimulatedStoreConfig,
    pub latency_label: String,
    /// Also run `auto` with no store latency at each count of clients: the
    /// CPU ceiling of this machine, measured in the same run.
    pub ceiling: bool,
    /// Processes spinning on the CPU for the whole run (CPU contention).
    pub busy_loops: usize,
    /// Times each policy runs at each count of clients, in turn (odd rounds
    /// in reverse order); its figures are over all of them.
    pub rounds: usize,
    pub partitions: usize,
    /// `prefetch.*` settings other than the policy, as `(key, value)`.
    pub settings: Vec<(String, String)>,
    /// A `FairSpillPool` of this many bytes for the runtime (default: unbounded).
    pub pool_limit: Option<ByteSize>,
    /// `prefetch.memory_limit` (default: the governor's own).
    pub memory_limit: Option<ByteSize>,
    pub seed: u64,
    pub json: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
}

/// One query of one client.
#[derive(Debug, Clone, Serialize)]
struct QueryRun {
    policy: String,
    /// Clients running at once.
    clients: usize,
    latency: String,
    /// The round (`--rounds`), from 0.
    round: usize,
    client: usize,
    query: String,
    latency_ms: f64,
    rows: usize,
    checksum: String,
    /// The query's `prefetch_*` counters (summed into its policy's summary;
    /// not written per query).
    #[serde(skip)]
    scans: ScanCounters,
    error: Option<String>,
}

/// `queries` in the order client `client` runs them.
fn client_order(queries: &[Query], seed: u64, client: usize) -> Vec<Query> {
    let mut order = queries.to_vec();
    let mut rng = SplitMix64::new(seed ^ (client as u64).wrapping_mul(0x9E37_79B9));
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// One runtime and one context for every client of `policy`, and its
/// store's counters.
async fn context(
    suite: &Suite,
    policy: &str,
    config: &ConcurrentConfig,
) -> Result<(SessionContext, Arc<StoreStats>)> {
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = config.pool_limit {
        runtime = runtime.with_memory_pool(Arc::new(FairSpillPool::new(limit.as_usize())));
    }
    let runtime = runtime.build_arc()?;
    let mut session = SessionConfig::new()
        .with_target_partitions(config.partitions)
        .with_information_schema(true)
        .with_option_extension(PrefetchOptions::default());
    if let Some(limit) = config.memory_limit {
        session
            .options_mut()
            .set("prefetch.memory_limit", &limit.to_string())?;
    }
    let state = SessionStateBuilder::new()
        .with_config(session)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(enable_prefetch(state));
    let files = crate::run::preload(&suite.data_dir).await?;
    let store =
        SimulatedStore::new(files, config.store).with_attempt_observer(crate::run::tell_scans);
    let stats = store.stats();
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
    set_prefetch(&ctx, policy, &config.settings).await?;
    Ok((ctx, stats))
}

/// One query: its latency, and its rows, checksum and scans' counters.
async fn run_query(
    ctx: &SessionContext,
    query: &Query,
) -> (f64, Result<(usize, String, ScanCounters)>) {
    let started = Instant::now();
    let result = async {
        let plan = ctx.sql(&query.sql).await?.create_physical_plan().await?;
        let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await?;
        let (rows, checksum) = checksum(&batches, Numbers::Exact)?;
        Ok((rows, checksum, scan_counters(&plan)))
    }
    .await;
    (started.elapsed().as_secs_f64() * 1e3, result)
}

/// One run: `clients` clients at once under `policy`, on `config`'s store
/// (`ceiling`: with no latency).
struct Run<'a> {
    policy: &'a str,
    clients: usize,
    ceiling: bool,
}

impl Run<'_> {
    fn latency<'c>(&self, config: &'c ConcurrentConfig) -> &'c str {
        if self.ceiling {
            "none"
        } else {
            &config.latency_label
        }
    }
}

/// Every client of `run` at once, on a runtime of its own; each query's run
/// and the summary (`round` names the round in each query's run).
async fn run_policy(
    suite: &Suite,
    run: &Run<'_>,
    config: &ConcurrentConfig,
    round: usize,
) -> Result<(Vec<QueryRun>, PolicySummary)> {
    let policy = run.policy;
    let latency = run.latency(config).to_string();
    let config = &ConcurrentConfig {
        store: if run.ceiling {
            config.store.with_latency(LatencyModel::None)
        } else {
            config.store
        },
        ..config.clone()
    };
    let (ctx, store) = context(suite, policy, config).await?;
    let governor = PrefetchGovernor::of(&ctx.runtime_env());
    let violations_before = governor.staged_over_held_violations();
    let store_before = store.snapshot();
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let cpu_before = cpu_time();
    let sampler = {
        let (governor, done) = (Arc::clone(&governor), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut staged, mut rss) = (0u64, 0u64);
            let mut timeline = vec![];
            let mut sample = 0u64;
            while !done.load(Ordering::SeqCst) {
                staged = staged.max(governor.staged_bytes());
                rss = rss.max(rss_bytes());
                if sample.is_multiple_of(20)
                    && let Some(window) = governor.request_windows().first()
                {
                    let at = started.elapsed().as_millis() as u64;
                    timeline.push((at, window.limit, window.in_flight));
                }
                sample += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (staged, rss, timeline)
        })
    };
    let clients = run.clients;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let ctx = ctx.clone();
            let order = client_order(&suite.queries, config.seed, client);
            let policy = policy.to_string();
            let latency = latency.clone();
            tokio::spawn(async move {
                let mut runs = vec![];
                for query in order {
                    let (latency_ms, result) = run_query(&ctx, &query).await;
                    let (rows, checksum, scans, error) = match result {
                        Ok((rows, checksum, scans)) => (rows, checksum, scans, None),
                        Err(e) => (0, String::new(), ScanCounters::new(), Some(e.to_string())),
                    };
                    runs.push(QueryRun {
                        policy: policy.clone(),
                        clients,
                        latency: latency.clone(),
                        round,
                        client,
                        query: query.name.clone(),
                        latency_ms,
                        rows,
                        checksum,
                        scans,
                        error,
                    });
                }
                runs
            })
        })
        .collect();
    let mut runs = vec![];
    for task in tasks {
        runs.extend(
            task.await
                .map_err(|e| datafusion::common::DataFusionError::External(Box::new(e)))?,
        );
    }
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let store_after = store.snapshot();
    done.store(true, Ordering::SeqCst);
    let (peak_staged, peak_rss, timeline) = sampler
        .await
        .map_err(|e| datafusion::common::DataFusionError::External(Box::new(e)))?;
    let mut latencies: Vec<f64> = runs
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| r.latency_ms)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let failed = runs.iter().filter(|r| r.error.is_some()).count();
    let summary = PolicySummary {
        suite: "concurrent",
        policy: policy.to_string(),
        clients,
        latency,
        queries: runs.len(),
        wall_ms,
        queries_per_min: latencies.len() as f64 / (wall_ms / 60_000.0),
        rounds_queries_per_min: vec![],
        p50_ms: percentile(&latencies, 50.0),
        p95_ms: percentile(&latencies, 95.0),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        peak_total_staged_bytes: peak_staged,
        peak_total_staged_bytes_exact: governor.peak_staged_bytes(),
        peak_total_held_bytes: governor.peak_held_bytes(),
        governor_limit_bytes: governor.limit().as_u64(),
        staged_over_held_violations: governor.staged_over_held_violations() - violations_before,
        pool_limit_bytes: config.pool_limit.map(ByteSize::as_u64),
        peak_rss_bytes: peak_rss,
        failed_queries: failed,
        matches_off: true,
        requests: store_after.get_requests - store_before.get_requests,
        attempts: store_after.attempts() - store_before.attempts(),
        throttled: store_after.throttled - store_before.throttled,
        cpu_ms_per_query: cpu.as_secs_f64() * 1e3 / runs.len().max(1) as f64,
        scans: runs.iter().fold(ScanCounters::new(), |mut sum, run| {
            scans::add(&mut sum, &run.scans);
            sum
        }),
        window: governor
            .request_windows()
            .first()
            .map(|window| WindowSummary::new(window, timeline)),
    };
    Ok((runs, summary))
}

/// For each count of clients, every policy (`off` first) and, with
/// `ceiling`, `auto` with no store latency; then report. `Ok(false)`: a
/// result differed from `off`'s, the staged total went over the governor's
/// limit, or a query failed under a policy that `off` ran.
pub async fn run(suite: &Suite, config: &ConcurrentConfig) -> Result<bool> {
    let mut policies = vec!["off".to_string()];
    policies.extend(config.policies.iter().filter(|p| *p != "off").cloned());
    let _busy = BusyLoops::start(config.busy_loops)?;
    let mut all_runs = vec![];
    let mut summaries = vec![];
    for &clients in &config.clients {
        let runs: Vec<Run> = policies
            .iter()
            .map(|policy| Run {
                policy,
                clients,
                ceiling: false,
            })
            .chain(config.ceiling.then_some(Run {
                policy: "auto",
                clients,
                ceiling: true,
            }))
            .collect();
        let mut rounds: Vec<Vec<PolicySummary>> = vec![vec![]; runs.len()];
        let mut latencies: Vec<Vec<f64>> = vec![vec![]; runs.len()];
        for round in 0..config.rounds.max(1) {
            // Odd rounds run the policies backwards, so that a drift in the
            // machine's speed over the run favours none of them.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..runs.len()).collect()
            } else {
                (0..runs.len()).rev().collect()
            };
            for i in order {
                let run = &runs[i];
                eprintln!(
                    "concurrent: {clients} clients x {} queries under {} at latency {}, round {}",
                    suite.queries.len(),
                    run.policy,
                    run.latency(config),
                    round + 1
                );
                let (query_runs, summary) = run_policy(suite, run, config, round).await?;
                eprintln!(
                    "concurrent: {}: {:.1} queries/min, p50 {:.0} ms, p95 {:.0} ms, peak staged {:.1} MiB of {:.1} MiB, {} failed, {:.0} ms CPU per query",
                    run.policy,
                    summary.queries_per_min,
                    summary.p50_ms,
                    summary.p95_ms,
                    summary.peak_total_staged_bytes_exact as f64 / (1 << 20) as f64,
                    summary.governor_limit_bytes as f64 / (1 << 20) as f64,
                    summary.failed_queries,
                    summary.cpu_ms_per_query
                );
                latencies[i].extend(
                    query_runs
                        .iter()
                        .filter(|r| r.error.is_none())
                        .map(|r| r.latency_ms),
                );
                all_runs.extend(query_runs);
                rounds[i].push(summary);
            }
        }
        for (rounds, latencies) in rounds.into_iter().zip(latencies) {
            summaries.push(PolicySummary::combine(rounds, latencies));
        }
    }
    let ok = judge(&all_runs, &mut summaries);
    let markdown = tables::markdown(suite, config, &summaries);
    println!("{markdown}");
    if let Some(path) = &config.json {
        let out = serde_json::json!({ "runs": all_runs, "summaries": summaries });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&out).expect("serializable"),
        )?;
    }
    if let Some(path) = &config.markdown {
        std::fs::write(path, &markdown)?;
    }
    Ok(ok)
}

/// Check every run against `off`'s answer to the same query, the staged
/// peaks against the limit, and failures against `off`'s.
fn judge(runs: &[QueryRun], summaries: &mut [PolicySummary]) -> bool {
    let mut reference: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    let mut failed_under_off: BTreeMap<&str, bool> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.policy == "off") {
        match &run.error {
            None => {
                reference
                    .entry(run.query.as_str())
                    .or_insert((run.rows, run.checksum.as_str()));
            }
            Some(_) => {
                failed_under_off.insert(run.query.as_str(), true);
            }
        }
    }
    let mut ok = true;
    for summary in summaries.iter_mut() {
        let mine = runs.iter().filter(|r| {
            (r.policy.as_str(), r.clients, r.latency.as_str())
                == (
                    summary.policy.as_str(),
                    summary.clients,
                    summary.latency.as_str(),
                )
        });
        for run in mine {
            match (&run.error, reference.get(run.query.as_str())) {
                (None, Some(&(rows, checksum))) if rows != run.rows || checksum != run.checksum => {
                    eprintln!(
                        "MISMATCH {} client {} {}: {} rows / {} vs off {rows} rows / {checksum}",
                        run.policy, run.client, run.query, run.rows, run.checksum
                    );
                    summary.matches_off = false;
                }
                (Some(e), _) if !failed_under_off.contains_key(run.query.as_str()) => {
                    eprintln!(
                        "FAILED {} client {} {} (off ran it): {e}",
                        run.policy, run.client, run.query
                    );
                    ok = false;
                }
                _ => {}
            }
        }
        ok &= summary.matches_off;
        if summary.peak_total_staged_bytes_exact > summary.governor_limit_bytes
            || summary.peak_total_held_bytes > summary.governor_limit_bytes
        {
            eprintln!(
                "OVER THE LIMIT {}: staged {} / held {} bytes, limit {}",
                summary.policy,
                summary.peak_total_staged_bytes_exact,
                summary.peak_total_held_bytes,
                summary.governor_limit_bytes
            );
            ok = false;
        }
        if summary.staged_over_held_violations > 0 {
            eprintln!(
                "STAGED OVER HELD {}: {} changes left staged bytes without a hold",
                summary.policy, summary.staged_over_held_violations
            );
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests;
