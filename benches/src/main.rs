//! `prefetch-bench`: stock DataFusion (`off`) and each prefetch policy, side by
//! side in one process, on the same data and the same simulated store.
//!
//! ```text
//! prefetch-bench --suite cross_file --latency fixed:100 --policies off,pipelined
//! prefetch-bench --suite tpch --scale 1 --latency fixed:50 --plot tpch.svg
//! prefetch-bench --suite peers --latency s3   # vs Polars, DuckDB, PyArrow over S3
//! prefetch-bench --suite peers --store gcs --latency s3   # … over GCS (also azure, http)
//! prefetch-bench --suite concurrent --clients 8 --latency s3  # one runtime, 8 clients
//! prefetch-bench --suite concurrent --clients 1,8,16,32 --ceiling --latency s3  # a sweep
//! prefetch-bench --suite concurrent --clients 8 --rounds 3 --latency s3  # each policy 3 times
//! prefetch-bench --suite many_files --files 10000,100000 --policies off,auto
//! ```
//!
//! See `benches/README.md` for every flag and suite.

mod ballista;
mod clickbench;
mod concurrent;
mod datagen;
mod first_batch;
mod many_files;
mod peers;
mod plot;
mod proxy;
mod report;
mod run;
mod suites;
mod throttled;
mod tpch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use datafusion_prefetch::ByteSize;
use datafusion_prefetch_simstore::{LatencyModel, RequestRateLimit, SimulatedStoreConfig};
use indicatif::{ProgressBar, ProgressStyle};

use crate::report::Report;
use crate::run::{Measurement, RunConfig, measure, sample_staged};
use crate::suites::{ClickbenchCopy, Query, Suite, SuiteOptions};

/// Compare prefetch policies against stock DataFusion in one run.
#[derive(Debug, Clone, Parser)]
#[command(name = "prefetch-bench", version, about)]
struct Args {
    /// Suite to run: cross_file, single_row_group, four_row_groups, many_small_files, tpch,
    /// clickbench, peers (against other engines over a real S3 server),
    /// concurrent (`--clients` clients on one runtime, each running the TPC-H
    /// queries in its own order), many_files (planning and execution over
    /// `--files` tiny files), or throttled (many_files at 10,000 files and
    /// tpch, each at a rate limit that binds; of the other options only
    /// --iterations (of many_files), --partitions, --scale, --data-dir,
    /// --json, --markdown and the prefetch settings apply).
    #[arg(long)]
    suite: String,
    /// many_files: the table sizes, in files of 100 rows.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    files: Vec<usize>,
    /// concurrent: clients running at once on one runtime; a list (1,8,16,32)
    /// runs each count in turn.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    clients: Vec<usize>,
    /// concurrent: also run `auto` with no store latency at each count of
    /// clients — this machine's CPU ceiling, measured in the same run.
    #[arg(long)]
    ceiling: bool,
    /// concurrent: processes spinning on the CPU for the whole run, beside
    /// the benchmark (CPU contention).
    #[arg(long, default_value_t = 0)]
    busy_loops: usize,
    /// concurrent: times each policy runs at each count of clients, odd
    /// rounds in reverse order; its figures are over every round, and the
    /// table shows each round's queries per minute (how far one run strays).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// concurrent: give the runtime a `FairSpillPool` of this size (e.g. 4GiB)
    /// instead of DataFusion's unbounded pool.
    #[arg(long)]
    pool_limit: Option<String>,
    /// `prefetch.memory_limit`: what every prefetching scan of the runtime may
    /// hold together (default: the governor's, a quarter of a bounded pool or 1GiB).
    #[arg(long)]
    memory_limit: Option<String>,
    /// concurrent: the seed each client's query order is shuffled from.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Data size of tpch (TPC-H scale factor) and clickbench (1 = 4 files of
    /// 1M rows); the other suites have a fixed size.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Which copy of the ClickBench table to query: `published` (no page
    /// index, like the published files), `page_index`, or `both`.
    #[arg(long, value_enum, default_value = "both")]
    clickbench_copy: ClickbenchCopy,
    /// Policies to compare; `off` (stock DataFusion) is always measured first.
    /// `policy@N` runs the policy with `prefetch.file_open_depth = N`
    /// (`pipelined@8,pipelined@64,auto`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,pipelined,streaming,auto"
    )]
    policies: Vec<String>,
    /// First-byte latency per request: none, fixed:<ms> or s3. Not none: the
    /// floor runs first, every query without latency.
    #[arg(long, default_value = "none")]
    latency: String,
    /// Per-connection bandwidth in MiB/s (default: unlimited, or 100 with s3).
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Concurrent connections the store allows (default: unlimited, or 128 with s3).
    #[arg(long)]
    connections: Option<usize>,
    /// Seed of the store's latency draws (`s3`): each run's store draws the
    /// same delays in the order its requests arrive (default: the store's).
    /// With --latency-seeds N, the first of N consecutive seeds.
    #[arg(long)]
    latency_seed: Option<u64>,
    /// Latency draws to average over (`s3`): every iteration runs every
    /// policy once per seed, and a query's figure is the mean over the seeds
    /// of its median over iterations, so that one unlucky draw does not move
    /// a comparison. Default: 3 for tpch with a latency model that draws, 1
    /// otherwise (a fixed latency draws nothing).
    #[arg(long)]
    latency_seeds: Option<usize>,
    /// Scan partitions (`datafusion.execution.target_partitions`); default 1,
    /// or the number of cores for peers (the other engines use every core).
    #[arg(long)]
    partitions: Option<usize>,
    /// `prefetch.memory_budget` (per scan), e.g. 512MiB.
    #[arg(long)]
    memory_budget: Option<String>,
    /// `prefetch.read_ahead_window` (per stream), e.g. 64MiB.
    #[arg(long)]
    read_ahead_window: Option<String>,
    /// `prefetch.file_open_depth`: upcoming files opened ahead.
    #[arg(long)]
    file_open_depth: Option<String>,
    /// `prefetch.eager_first_read_cap`.
    #[arg(long)]
    eager_first_read_cap: Option<String>,
    /// `prefetch.hedge_after`: auto, off, or e.g. 80ms.
    #[arg(long)]
    hedge_after: Option<String>,
    /// The store's request rate per prefix (GET, HEAD and LIST pages a
    /// second; over it the store answers `503 SlowDown` and the client
    /// retries), with a burst of one second's worth, or `off`. Default: the
    /// latency model's (`s3`: S3's 5,500; otherwise off).
    #[arg(long)]
    rate_limit: Option<String>,
    /// Iterations; each runs the policies forwards, then backwards.
    #[arg(long, default_value_t = 2)]
    iterations: usize,
    /// Only these queries (by name).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<String>,
    /// Where generated data is cached between runs.
    #[arg(long, default_value = "bench-data")]
    data_dir: PathBuf,
    /// Write every measurement and the per-policy summary as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write each measured run's store requests (path, range, and when each
    /// was issued, answered and finished, in ms from the query's start) to
    /// `<dir>/<query>_<policy>_<iteration>.tsv`.
    #[arg(long)]
    request_log: Option<PathBuf>,
    /// Serve the measured runs' files from disk through `LocalFileSystem`
    /// rather than from memory (how this binary measured before 2026-12-02;
    /// the floor runs read from memory either way).
    #[arg(long)]
    from_disk: bool,
    /// Write the summary tables as markdown.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Draw the median wall times and the staged bytes of one scan of the
    /// first query into this SVG (or PNG, by extension) file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// peers: the store the engines race on, each with its own client for
    /// it: s3 (s3s-fs), gcs (fake-gcs-server), azure (Azurite) or http
    /// (rclone serving a folder over WebDAV).
    #[arg(long, value_enum, default_value = "s3")]
    store: peers::Store,
    /// peers: where the store's server keeps the uploaded files (default:
    /// `<data-dir>/peers_<store>`; uploads are reused across runs).
    #[arg(long, alias = "s3-root")]
    server_root: Option<PathBuf>,
    /// peers: the Python of the venv `benches/peers/setup.sh` makes.
    #[arg(long, default_value = "/var/tmp/dfprefetch-peers-venv/bin/python")]
    python: PathBuf,
    /// Where the queries run: `datafusion` (in this process) or `ballista`: a
    /// scheduler and `--executors` executor processes on loopback
    /// (`dfprefetch-ballista-scheduler` / `-executor`, built next to this
    /// binary), each reading the data through its own simulated store with
    /// `--latency`; results are checked against local DataFusion `off`.
    #[arg(long, value_enum, default_value = "datafusion")]
    engine: Engine,
    /// ballista: executor processes.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// ballista: task slots per executor (default: the number of cores).
    #[arg(long)]
    executor_vcores: Option<usize>,
    /// peers: `quick` (seven queries every engine runs) or `full` (all 22
    /// TPC-H and 43 ClickBench queries).
    #[arg(long, value_enum, default_value = "quick")]
    race: peers::Race,
    /// peers: seconds one engine run may take before it is stopped.
    #[arg(long, default_value_t = 600)]
    peer_timeout: u64,
    /// peers: only these of the other engines (polars, duckdb, pyarrow,
    /// datafusion-python, datafusion-python-prefetch) race DataFusion `off`
    /// and its default, which always run; default: all of them
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
}

/// Where the queries run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Engine {
    Datafusion,
    Ballista,
}

fn store_config(args: &Args) -> Result<(SimulatedStoreConfig, Duration), String> {
    let model: LatencyModel = args
        .latency
        .parse()
        .map_err(|e| format!("--latency: {e}"))?;
    let mut config = SimulatedStoreConfig::from_latency(model);
    if let Some(mib) = args.bandwidth {
        config = config.with_bandwidth(Some(mib * 1024 * 1024));
    }
    if let Some(connections) = args.connections {
        config = config.with_max_connections(Some(connections));
    }
    if let Some(seed) = args.latency_seed {
        config = config.with_seed(seed);
    }
    match args.rate_limit.as_deref() {
        None => {}
        Some("off") => config = config.with_rate_limit(None),
        Some(rate) => {
            let per_second = rate.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("--rate-limit: '{rate}' is not off or a whole number of requests a second")
            })?;
            config = config.with_rate_limit(Some(RequestRateLimit::per_second(per_second)));
        }
    }
    // The floor's round trips: the least the model ever draws.
    Ok((config, model.minimum()))
}

/// The seeds of the store's latency draws the measured runs use: `n`
/// consecutive ones from `--latency-seed` (or the store's), `n` from
/// `--latency-seeds`, by default 3 for `tpch` under a model that draws and 1
/// otherwise.
fn latency_seeds(args: &Args, store: &SimulatedStoreConfig) -> Result<Vec<u64>, String> {
    let draws = matches!(store.latency, LatencyModel::S3 | LatencyModel::S3List);
    let n = match args.latency_seeds {
        Some(0) => return Err("--latency-seeds: at least 1".into()),
        Some(n) => n,
        None if draws && args.suite == "tpch" => 3,
        None => 1,
    };
    Ok((0..n as u64).map(|k| store.seed.wrapping_add(k)).collect())
}

#[tokio::main]
async fn main() -> ExitCode {
    // One DataFusion run of the peers suite, in a process of its own.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("peer-worker") {
        return peers::worker(&argv[2..]).await;
    }
    let args = Args::parse();
    match bench(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("prefetch-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// Progress over every run on stderr; per-run lines print above it.
struct Progress(ProgressBar);

impl Progress {
    fn new(runs: u64) -> Self {
        let bar = ProgressBar::new(runs);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} runs  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        Self(bar)
    }

    /// A line above the bar (or plainly, when stderr is not a terminal and
    /// the bar is hidden).
    fn println(&self, line: impl AsRef<str>) {
        if self.0.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            self.0.println(line.as_ref());
        }
    }

    fn start(&self, suite: &Suite, query: &Query, policy: &str, what: &str) {
        self.0
            .set_message(format!("{} {} {policy}{what}", suite.name, query.name));
    }
}

fn run_line(m: &Measurement) -> String {
    format!(
        "{:>10} {:<16} {:<10} {:>9.1} ms  ttfb {:>8.1} ms  scan ttfb {:>8.1} ms  {:>5} requests  peak staged {:>6.1} MiB",
        m.suite,
        m.query,
        m.policy,
        m.wall_ms,
        m.ttfb_ms,
        m.scan_ttfb_ms,
        m.requests,
        m.peak_staged_bytes as f64 / (1 << 20) as f64
    )
}

/// Run once; a query that fails under `off` (stock DataFusion) is skipped
/// from then on, with the reason printed; a failure under any other policy
/// is an error of this crate and ends the benchmark.
async fn run_or_skip(
    report: &mut Report,
    progress: &Progress,
    (suite, query, policy): (&Suite, &Query, &str),
    iteration: usize,
    config: &RunConfig,
) -> Result<Option<Measurement>, Box<dyn std::error::Error>> {
    let result = measure(suite, query, policy, iteration, config).await;
    progress.0.inc(1);
    match result {
        Ok(m) => Ok(Some(m)),
        Err(e) if policy == "off" => {
            let reason = e.to_string();
            progress.println(format!(
                "SKIPPED {} {}: it fails under off (stock DataFusion): {reason}",
                suite.name, query.name
            ));
            report.skip(&query.name, reason);
            Ok(None)
        }
        Err(e) => Err(format!("{} {} under {policy}: {e}", suite.name, query.name).into()),
    }
}

fn prefetch_settings(args: &Args) -> Vec<(String, String)> {
    let mut settings = vec![];
    for (key, value) in [
        ("memory_budget", &args.memory_budget),
        ("read_ahead_window", &args.read_ahead_window),
        ("file_open_depth", &args.file_open_depth),
        ("eager_first_read_cap", &args.eager_first_read_cap),
        ("hedge_after", &args.hedge_after),
    ] {
        if let Some(value) = value {
            settings.push((key.to_string(), value.clone()));
        }
    }
    // The window may never exceed the budget; with the window left to the
    // policy by default, any budget can be set first.
    settings.sort_by_key(|(k, _)| k != "memory_budget");
    settings
}

async fn bench(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    if args.suite == "throttled" {
        return throttled::run(&args).await;
    }
    for policy in &args.policies {
        run::policy_and_depth(policy)?;
    }
    let (store, least_latency) = store_config(&args)?;
    if args.suite == "peers" {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        return peers::run(peers::PeersConfig {
            wire: args.store,
            server_root: args
                .server_root
                .clone()
                .unwrap_or_else(|| args.data_dir.join(format!("peers_{}", args.store.name()))),
            data_dir: args.data_dir.clone(),
            scale: args.scale,
            iterations: args.iterations,
            race: args.race,
            queries: args.queries.clone(),
            store,
            latency_label: args.latency.clone(),
            partitions: args.partitions.unwrap_or(cores),
            settings: prefetch_settings(&args),
            python: args.python.clone(),
            timeout: Duration::from_secs(args.peer_timeout),
            only: args.peers.clone(),
            json: args.json.clone(),
            markdown: args.markdown.clone(),
        })
        .await;
    }
    if args.suite == "many_files" {
        if args.files.contains(&0) {
            return Err("--files: every size must be at least 1".into());
        }
        return Ok(many_files::run(&many_files::ManyFilesConfig {
            sizes: args.files.clone(),
            policies: args.policies.clone(),
            store,
            latency_label: args.latency.clone(),
            partitions: args.partitions.unwrap_or(1),
            settings: prefetch_settings(&args),
            iterations: args.iterations,
            data_dir: args.data_dir.clone(),
            json: args.json.clone(),
            markdown: args.markdown.clone(),
        })
        .await?);
    }
    let options = SuiteOptions {
        scale: args.scale,
        clickbench_copy: args.clickbench_copy,
    };
    let concurrent = args.suite == "concurrent";
    let data = if concurrent {
        "tpch"
    } else {
        args.suite.as_str()
    };
    let mut suite = suites::prepare(data, &args.data_dir, &options)?;
    if !args.queries.is_empty() {
        suite.queries.retain(|q| args.queries.contains(&q.name));
        if suite.queries.is_empty() {
            return Err(format!(
                "none of --queries {:?} is in suite {}",
                args.queries, suite.name
            )
            .into());
        }
    }
    let mut policies: Vec<String> = vec!["off".into()];
    policies.extend(args.policies.iter().filter(|p| *p != "off").cloned());
    if concurrent {
        let size = |flag: &str, value: &Option<String>| -> Result<Option<ByteSize>, String> {
            value
                .as_deref()
                .map(|v| v.parse().map_err(|e| format!("--{flag}: {e}")))
                .transpose()
        };
        return Ok(concurrent::run(
            &suite,
            &concurrent::ConcurrentConfig {
                clients: args.clients.iter().map(|&n| n.max(1)).collect(),
                policies,
                store,
                latency_label: args.latency.clone(),
                ceiling: args.ceiling,
                busy_loops: args.busy_loops,
                rounds: args.rounds.max(1),
                partitions: args.partitions.unwrap_or(1),
                settings: prefetch_settings(&args),
                pool_limit: size("pool-limit", &args.pool_limit)?,
                memory_limit: size("memory-limit", &args.memory_limit)?,
                seed: args.seed,
                json: args.json.clone(),
                markdown: args.markdown.clone(),
            },
        )
        .await?);
    }

    let mut config = RunConfig {
        store,
        latency_label: args.latency.clone(),
        partitions: args.partitions.unwrap_or(1),
        settings: prefetch_settings(&args),
        ballista: None,
        request_log: args.request_log.clone(),
        in_memory: None,
    };
    // Kept until the end of the run: dropping it stops the processes.
    let mut cluster = None;
    if args.engine == Engine::Ballista {
        if args.suite == "peers" || args.bandwidth.is_some() || args.connections.is_some() {
            return Err("--engine ballista takes neither the peers suite nor --bandwidth / --connections (the executors' stores use --latency's defaults)".into());
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let vcores = args.executor_vcores.unwrap_or(cores);
        eprintln!(
            "starting a Ballista scheduler and {} executor(s) of {vcores} task slots",
            args.executors
        );
        let started =
            ballista::Cluster::start(&suite.data_dir, &args.latency, args.executors, vcores)
                .await?;
        config.ballista = Some(started.url.clone());
        cluster = Some(started);
    }

    // The simulated store serves the suite's files from memory, so it costs
    // what a network store costs the client (little CPU), not what reading
    // a local disk through object_store's 8 KiB chunks costs. Ballista's
    // executors read through stores of their own.
    let in_memory = match cluster {
        None => {
            eprintln!("preloading {} into memory", suite.data_dir.display());
            Some(run::preload(&suite.data_dir).await?)
        }
        Some(_) => None,
    };
    if !args.from_disk {
        config.in_memory = in_memory.clone();
    }
    // Ballista's executors keep their store's latency: no floor runs there.
    let with_floor = !matches!(store.latency, LatencyModel::None) && cluster.is_none();
    let queries = suite.queries.len() as u64;
    let policy_count = policies.len() as u64;
    let seeds = latency_seeds(&args, &store)?;
    if seeds.len() > 1 {
        eprintln!("latency seeds: {seeds:?} (each iteration runs every policy once per seed)");
    }
    let runs = queries
        * policy_count
        * ((args.iterations * seeds.len()) as u64 + if with_floor { 2 } else { 0 })
        + if args.plot.is_some() {
            policy_count - 1
        } else {
            0
        };
    let runs = runs + if cluster.is_some() { queries } else { 0 };
    let progress = Progress::new(runs);

    let mut report = Report::new(suite.clone(), config.clone(), least_latency);
    // On Ballista, every run must return what local DataFusion `off` does
    // (run without latency: only its result is used).
    if cluster.is_some() {
        let local = RunConfig {
            ballista: None,
            store: SimulatedStoreConfig::none(),
            latency_label: "none".into(),
            ..config.clone()
        };
        for query in &suite.queries {
            progress.start(&suite, query, "off", " (local DataFusion, the reference)");
            let run = (&suite, query, "off");
            if let Some(m) = run_or_skip(&mut report, &progress, run, 0, &local).await? {
                progress.println(format!("{} (local DataFusion)", run_line(&m)));
                report.reference(&query.name, m.rows, m.checksum);
            }
        }
    }
    // The floor's decode-only part: the best run of any policy per query
    // with every file already in memory and no store delay.
    if with_floor {
        let unthrottled = RunConfig {
            store: SimulatedStoreConfig::none(),
            latency_label: "none".into(),
            request_log: None,
            in_memory,
            ..config.clone()
        };
        for query in &suite.queries {
            let mut best = f64::INFINITY;
            for policy in policies.iter().chain(policies.iter()) {
                if report.is_skipped(&query.name) {
                    progress.0.inc(1);
                    continue;
                }
                progress.start(&suite, query, policy, " (no latency, for the floor)");
                let run = (&suite, query, policy.as_str());
                if let Some(m) = run_or_skip(&mut report, &progress, run, 0, &unthrottled).await? {
                    best = best.min(m.wall_ms);
                }
            }
            if !report.is_skipped(&query.name) {
                report.no_latency_wall_ms(&query.name, best);
            }
        }
    }
    for iteration in 0..args.iterations {
        let mut order = policies.clone();
        if iteration % 2 == 1 {
            order.reverse();
        }
        for &seed in &seeds {
            let config = RunConfig {
                store: config.store.with_seed(seed),
                ..config.clone()
            };
            for policy in &order {
                for query in &suite.queries {
                    if report.is_skipped(&query.name) {
                        progress.0.inc(1);
                        continue;
                    }
                    let what = match seeds.len() {
                        1 => format!(" (iteration {iteration})"),
                        _ => format!(" (iteration {iteration}, seed {seed})"),
                    };
                    progress.start(&suite, query, policy, &what);
                    let run = (&suite, query, policy.as_str());
                    if let Some(m) =
                        run_or_skip(&mut report, &progress, run, iteration, &config).await?
                    {
                        progress.println(run_line(&m));
                        report.add(m);
                    }
                }
            }
        }
    }
    // One more, untimed execution of the first query (that reads data: not
    // ClickBench's q0, answered from statistics) per non-off policy, sampling
    // its scans' staged bytes every 2 ms, for the plot.
    let mut staged = vec![];
    let measured = || suite.queries.iter().filter(|q| !report.is_skipped(&q.name));
    if args.plot.is_some()
        && let Some(query) = measured()
            .find(|q| report.fetched_data(&q.name))
            .or_else(|| measured().next())
    {
        for policy in policies.iter().filter(|p| *p != "off") {
            progress.start(&suite, query, policy, " (sampling staged bytes)");
            let series =
                sample_staged(&suite, query, policy, &config, Duration::from_millis(2)).await?;
            progress.0.inc(1);
            staged.push(series);
        }
    }
    progress.0.finish_and_clear();

    let all_match = report.check_results();
    let below_floor = report.below_floor();
    for (query, policy, ratio) in &below_floor {
        eprintln!(
            "BELOW THE FLOOR {} {query} {policy}: wall / floor = {ratio:.3} (the floor is a lower bound: a bug in it)",
            suite.name
        );
    }
    println!("{}", report.markdown());
    if let Some(path) = &args.json {
        std::fs::write(path, report.json()?)?;
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, report.markdown())?;
    }
    if let Some(path) = &args.plot {
        plot::draw(path, &report.title(), &report.median_wall_ms(), &staged)?;
        eprintln!("plot written to {}", path.display());
    }
    if !all_match {
        eprintln!("prefetch-bench: RESULTS DIFFER FROM POLICY off (see matches_off above)");
    }
    drop(cluster);
    Ok(all_match && below_floor.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(flags: &[&str]) -> Result<Vec<u64>, String> {
        let args = Args::parse_from([&["prefetch-bench"], flags].concat());
        let (store, _) = store_config(&args)?;
        latency_seeds(&args, &store)
    }

    #[test]
    fn tpch_at_s3_latency_averages_three_seeds_by_default() {
        let s3 = ["--suite", "tpch", "--latency", "s3"];
        let default_seed = SimulatedStoreConfig::s3().seed;
        let expected: Vec<u64> = (0..3).map(|k| default_seed.wrapping_add(k)).collect();
        assert_eq!(seeds(&s3).unwrap(), expected);
        assert_eq!(
            seeds(&[&s3[..], &["--latency-seed", "10"]].concat()).unwrap(),
            vec![10, 11, 12]
        );
        assert_eq!(
            seeds(&[&s3[..], &["--latency-seeds", "1", "--latency-seed", "5"]].concat()).unwrap(),
            vec![5]
        );
        // A fixed latency draws nothing; other suites keep one seed unless asked.
        assert_eq!(
            seeds(&["--suite", "tpch", "--latency", "fixed:50"])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            seeds(&["--suite", "clickbench", "--latency", "s3"])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            seeds(&[
                "--suite",
                "clickbench",
                "--latency",
                "s3",
                "--latency-seeds",
                "2"
            ])
            .unwrap()
            .len(),
            2
        );
        assert!(seeds(&[&s3[..], &["--latency-seeds", "0"]].concat()).is_err());
    }
}
