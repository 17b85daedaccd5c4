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
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{
    ByteSize, PrefetchGovernor, PrefetchOptions, RequestWindowStats, enable_prefetch,
};
use datafusion_prefetch_simstore::{
    LatencyModel, SimulatedStore, SimulatedStoreConfig, StoreStats,
};
use datafusion_prefetch_testdata::{Numbers, SplitMix64, checksum};
use object_store::ObjectStore;
use serde::Serialize;
use url::Url;

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
    client: usize,
    query: String,
    latency_ms: f64,
    rows: usize,
    checksum: String,
    error: Option<String>,
}

/// What one policy did, as `--json` reports it.
#[derive(Debug, Clone, Serialize)]
struct PolicySummary {
    suite: &'static str,
    policy: String,
    clients: usize,
    latency: String,
    queries: usize,
    wall_ms: f64,
    queries_per_min: f64,
    p50_ms: f64,
    p95_ms: f64,
    max_ms: f64,
    /// The most bytes all scans had staged at once, sampled every 5 ms.
    peak_total_staged_bytes: u64,
    /// The same, exactly: the governor's peak, updated on every change.
    peak_total_staged_bytes_exact: u64,
    /// The most bytes prefetching held at once (staged, in flight, still
    /// referenced), exactly.
    peak_total_held_bytes: u64,
    governor_limit_bytes: u64,
    /// Changes after which some scan staged more than it held (the
    /// governor's own count during this policy's run): must be 0.
    staged_over_held_violations: u64,
    /// The runtime's memory pool limit, if bounded.
    pool_limit_bytes: Option<u64>,
    peak_rss_bytes: u64,
    failed_queries: usize,
    matches_off: bool,
    /// GETs the store received (each request once, retries not counted).
    requests: u64,
    /// Every request the store received, each retry after a `503` one more.
    attempts: u64,
    /// `503 SlowDown` answers.
    throttled: u64,
    /// The process's CPU time (user + system) over the run, per query.
    cpu_ms_per_query: f64,
    /// The store's window of requests in flight (`auto` only).
    window: Option<WindowSummary>,
}

/// What `auto`'s window of requests in flight to the store did in one run.
#[derive(Debug, Clone, Serialize)]
struct WindowSummary {
    limit_at_end: u32,
    peak_limit: u32,
    cuts_on_slow_answers: u64,
    cuts_on_refusals: u64,
    cuts_on_give_ups: u64,
    withdrawn: u64,
    hedges: u64,
    reads_ahead_queued: u64,
    /// Time reads ahead waited for room, summed.
    queued_ms: f64,
    /// The part of it a decoder waited on the read.
    queued_while_wanted_ms: f64,
    /// Reads ahead sent at once because a decoder came to wait on them.
    hurried: u64,
    /// `(ms since the run started, limit, in flight)` every 100 ms.
    timeline: Vec<(u64, u32, u32)>,
}

impl WindowSummary {
    fn new(window: &RequestWindowStats, timeline: Vec<(u64, u32, u32)>) -> Self {
        Self {
            limit_at_end: window.limit,
            peak_limit: window.peak_limit,
            cuts_on_slow_answers: window.cuts_on_slow_answers,
            cuts_on_refusals: window.cuts_on_refusals,
            cuts_on_give_ups: window.cuts_on_give_ups,
            withdrawn: window.withdrawn,
            hedges: window.hedges,
            reads_ahead_queued: window.reads_ahead_queued,
            queued_ms: window.queued.as_secs_f64() * 1e3,
            queued_while_wanted_ms: window.queued_while_wanted.as_secs_f64() * 1e3,
            hurried: window.hurried,
            timeline,
        }
    }
}

/// The process's CPU time so far (Linux: user + system, from
/// `/proc/self/stat`, in clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name, which is in parentheses.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the whole line.
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The process's resident set now (Linux), in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// Nearest-rank percentile of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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

async fn run_query(ctx: &SessionContext, query: &Query) -> (f64, Result<(usize, String)>) {
    let started = Instant::now();
    let result = async {
        let batches = ctx.sql(&query.sql).await?.collect().await?;
        Ok(checksum(&batches, Numbers::Exact)?)
    }
    .await;
    (started.elapsed().as_secs_f64() * 1e3, result)
}

/// Every client of `policy` at once; the runs and the policy's summary.
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

async fn run_policy(
    suite: &Suite,
    run: &Run<'_>,
    config: &ConcurrentConfig,
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
                    let (rows, checksum, error) = match result {
                        Ok((rows, checksum)) => (rows, checksum, None),
                        Err(e) => (0, String::new(), Some(e.to_string())),
                    };
                    runs.push(QueryRun {
                        policy: policy.clone(),
                        clients,
                        latency: latency.clone(),
                        client,
                        query: query.name.clone(),
                        latency_ms,
                        rows,
                        checksum,
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
        window: governor
            .request_windows()
            .first()
            .map(|window| WindowSummary::new(window, timeline)),
    };
    Ok((runs, summary))
}

/// Processes spinning on the CPU until dropped: beside the benchmark, not
/// in it, so that its CPU time per query stays its own.
struct BusyLoops(Vec<std::process::Child>);

impl BusyLoops {
    fn start(n: usize) -> Result<Self> {
        let children = (0..n)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self(children))
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
        let runs = policies
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
            }));
        for run in runs {
            eprintln!(
                "concurrent: {clients} clients x {} queries under {} at latency {}",
                suite.queries.len(),
                run.policy,
                run.latency(config)
            );
            let (runs, summary) = run_policy(suite, &run, config).await?;
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
            all_runs.extend(runs);
            summaries.push(summary);
        }
    }
    let ok = judge(&all_runs, &mut summaries);
    let markdown = markdown(suite, config, &summaries);
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

fn markdown(suite: &Suite, config: &ConcurrentConfig, summaries: &[PolicySummary]) -> String {
    let pool = config
        .pool_limit
        .map_or("unbounded".to_string(), |l| format!("FairSpillPool {l}"));
    let mut out = format!(
        "concurrent: {} clients, {} ({} queries each), latency {}, {} partitions, memory pool {pool}, {} busy loops\n\n",
        config
            .clients
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        suite.name,
        suite.queries.len(),
        config.latency_label,
        config.partitions,
        config.busy_loops
    );
    for &clients in &config.clients {
        let runs: Vec<&PolicySummary> = summaries.iter().filter(|s| s.clients == clients).collect();
        out.push_str(&format!("### {clients} clients\n\n"));
        out.push_str(&results_table(&runs));
        out.push('\n');
        out.push_str(&causes_table(&runs));
        out.push('\n');
    }
    if config.clients.len() > 1 || config.ceiling {
        out.push_str(&sweep_table(config, summaries));
    }
    out
}

/// A run's name in the tables: the policy, and the latency if it is the
/// ceiling's.
fn label(s: &PolicySummary, latency: &str) -> String {
    if s.latency == latency {
        s.policy.clone()
    } else {
        format!("{} at {}", s.policy, s.latency)
    }
}

fn results_table(runs: &[&PolicySummary]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::from(
        "| policy | queries/min | vs off | p50 ms | p95 ms | max ms | peak staged MiB (sampled / exact) | held MiB | limit MiB | peak RSS MiB | failed | matches off |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    let off = runs
        .iter()
        .find(|s| s.policy == "off")
        .map_or(f64::NAN, |s| s.queries_per_min);
    let latency = runs.first().map_or("", |s| s.latency.as_str());
    for s in runs {
        out.push_str(&format!(
            "| {} | {:.1} | {:.2}x | {:.0} | {:.0} | {:.0} | {:.1} / {:.1} | {:.1} | {:.1} | {:.0} | {} | {} |\n",
            label(s, latency),
            s.queries_per_min,
            s.queries_per_min / off,
            s.p50_ms,
            s.p95_ms,
            s.max_ms,
            mib(s.peak_total_staged_bytes),
            mib(s.peak_total_staged_bytes_exact),
            mib(s.peak_total_held_bytes),
            mib(s.governor_limit_bytes),
            mib(s.peak_rss_bytes),
            s.failed_queries,
            if s.matches_off { "yes" } else { "NO" }
        ));
    }
    out
}

fn causes_table(runs: &[&PolicySummary]) -> String {
    let mut out = String::from(
        "| policy | requests | attempts | 503s | CPU ms / query | window now / peak | cuts (slow / 503 / gave up) | withdrawn | hedges | reads ahead queued | queued s | decoders waiting s | hurried |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let latency = runs.first().map_or("", |s| s.latency.as_str());
    for s in runs {
        let window = s.window.as_ref().map_or_else(
            || "| - | - | - | - | - | - | - | - |".to_string(),
            |w| {
                format!(
                    "| {} / {} | {} / {} / {} | {} | {} | {} | {:.1} | {:.1} | {} |",
                    w.limit_at_end,
                    w.peak_limit,
                    w.cuts_on_slow_answers,
                    w.cuts_on_refusals,
                    w.cuts_on_give_ups,
                    w.withdrawn,
                    w.hedges,
                    w.reads_ahead_queued,
                    w.queued_ms / 1e3,
                    w.queued_while_wanted_ms / 1e3,
                    w.hurried
                )
            },
        );
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} {window}\n",
            label(s, latency),
            s.requests,
            s.attempts,
            s.throttled,
            s.cpu_ms_per_query
        ));
    }
    out
}

/// Queries per minute by count of clients: each policy, the ceiling
/// (`auto` with no latency, measured in the same run), and `auto`'s share
/// of it and ratio to the best fixed policy.
fn sweep_table(config: &ConcurrentConfig, summaries: &[PolicySummary]) -> String {
    let mut policies: Vec<&str> = vec![];
    for s in summaries
        .iter()
        .filter(|s| s.latency == config.latency_label)
    {
        if !policies.contains(&s.policy.as_str()) {
            policies.push(&s.policy);
        }
    }
    let mut out = String::from("### queries/min by clients\n\n| clients |");
    for policy in &policies {
        out.push_str(&format!(" {policy} |"));
    }
    out.push_str(" ceiling (auto at none) | auto / ceiling | auto / best fixed | auto p95 / off p95 |\n|---:|");
    out.push_str(&"---:|".repeat(policies.len() + 4));
    out.push('\n');
    for &clients in &config.clients {
        let find = |policy: &str, latency: &str| {
            summaries
                .iter()
                .find(|s| s.clients == clients && s.policy == policy && s.latency == latency)
        };
        let measured = |policy: &str| find(policy, &config.latency_label);
        out.push_str(&format!("| {clients} |"));
        for policy in &policies {
            let qpm = measured(policy).map_or(f64::NAN, |s| s.queries_per_min);
            out.push_str(&format!(" {qpm:.1} |"));
        }
        let auto = measured("auto");
        let ceiling = find("auto", "none").filter(|_| config.latency_label != "none");
        let best_fixed = summaries
            .iter()
            .filter(|s| s.clients == clients && s.latency == config.latency_label)
            .filter(|s| !["off", "auto"].contains(&s.policy.as_str()))
            .map(|s| s.queries_per_min)
            .fold(f64::NAN, f64::max);
        let qpm = |s: Option<&PolicySummary>| s.map_or(f64::NAN, |s| s.queries_per_min);
        let p95 = |s: Option<&PolicySummary>| s.map_or(f64::NAN, |s| s.p95_ms);
        out.push_str(&format!(
            " {:.1} | {:.2} | {:.2}x | {:.2} |\n",
            qpm(ceiling),
            qpm(auto) / qpm(ceiling),
            qpm(auto) / best_fixed,
            p95(auto) / p95(measured("off"))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::{ClickbenchCopy, SuiteOptions, prepare};

    #[test]
    fn each_client_runs_every_query_once_in_its_own_fixed_order() {
        let queries: Vec<Query> = (0..22)
            .map(|i| Query {
                name: format!("q{i}"),
                sql: String::new(),
                ties: false,
            })
            .collect();
        let names = |c| -> Vec<String> {
            client_order(&queries, 7, c)
                .into_iter()
                .map(|q| q.name)
                .collect()
        };
        let mut sorted = names(0);
        sorted.sort();
        let mut all: Vec<String> = queries.iter().map(|q| q.name.clone()).collect();
        all.sort();
        assert_eq!(sorted, all);
        assert_eq!(names(0), names(0), "fixed by the seed");
        assert_ne!(names(0), names(1), "shuffled per client");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 10.0);
        assert_eq!(percentile(&values, 95.0), 19.0);
        assert_eq!(percentile(&values, 100.0), 20.0);
    }

    /// Four clients on a tiny TPC-H, with a bounded pool and a governor
    /// limit: every result matches `off`'s and the staged peak stays within
    /// the limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_share_one_runtime_and_match_off() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = SuiteOptions {
            scale: 0.001,
            clickbench_copy: ClickbenchCopy::Published,
        };
        let mut suite = prepare("tpch", dir.path(), &options).expect("data generated");
        suite.queries.truncate(6);
        let config = ConcurrentConfig {
            clients: vec![1, 4],
            policies: vec!["pipelined".into(), "auto".into()],
            store: SimulatedStoreConfig::fixed(Duration::from_millis(6)),
            latency_label: "fixed:6".into(),
            ceiling: true,
            busy_loops: 1,
            partitions: 2,
            settings: vec![],
            pool_limit: Some(ByteSize::mib(512)),
            memory_limit: Some(ByteSize::new(64 << 10)),
            seed: 1,
            json: Some(dir.path().join("concurrent.json")),
            markdown: Some(dir.path().join("concurrent.md")),
        };
        assert!(run(&suite, &config).await.expect("runs"));
        let markdown = std::fs::read_to_string(dir.path().join("concurrent.md")).unwrap();
        assert!(markdown.contains("### 4 clients"), "{markdown}");
        assert!(markdown.contains("| auto at none |"), "{markdown}");
        assert!(
            markdown.contains("### queries/min by clients"),
            "{markdown}"
        );
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("concurrent.json")).unwrap(),
        )
        .unwrap();
        let summaries = json["summaries"].as_array().unwrap();
        // Per count of clients: off, pipelined, auto, and auto at no latency.
        assert_eq!(summaries.len(), 8);
        let runs: Vec<(u64, &str, &str)> = summaries
            .iter()
            .map(|s| {
                let field = |key: &str| s[key].as_str().unwrap();
                (
                    s["clients"].as_u64().unwrap(),
                    field("policy"),
                    field("latency"),
                )
            })
            .collect();
        assert_eq!(runs[3], (1, "auto", "none"));
        assert_eq!(runs[7], (4, "auto", "none"));
        for s in summaries {
            assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
            assert!(s["attempts"].as_u64().unwrap() >= s["requests"].as_u64().unwrap());
            assert!(s["cpu_ms_per_query"].as_f64().unwrap() > 0.0, "{s}");
            if s["policy"] != "auto" {
                assert!(s["window"].is_null(), "only auto is paced: {s}");
            } else if s["latency"] != "none" {
                assert!(!s["window"].is_null(), "auto's window in {s}");
            }
            for key in [
                "suite",
                "policy",
                "clients",
                "queries_per_min",
                "p50_ms",
                "p95_ms",
                "max_ms",
                "peak_total_staged_bytes",
                "governor_limit_bytes",
                "staged_over_held_violations",
                "peak_rss_bytes",
                "failed_queries",
                "matches_off",
            ] {
                assert!(!s[key].is_null(), "{key} in {s}");
            }
            assert_eq!(s["governor_limit_bytes"], 64 << 10);
            assert_eq!(s["failed_queries"], 0);
            assert_eq!(s["staged_over_held_violations"], 0);
            assert_eq!(s["matches_off"], true);
        }
    }
}
