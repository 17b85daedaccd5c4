//! Runs every `.slt` suite in `suites/` under every prefetch policy.
//!
//! The same expected results must hold for every policy: `off` is stock
//! DataFusion, so any policy that returns something else has a bug. Each
//! (policy, suite) pair gets a fresh `prefetching_context`, a `SimulatedStore`
//! (1 ms per request) over the generated datasets registered as `sim://data/`,
//! and these settings before the suite starts:
//!
//! ```sql
//! SET prefetch.policy = '<policy>';
//! SET prefetch.read_ahead_window = '256KiB';
//! SET prefetch.memory_budget = '1MiB';
//! SET prefetch.file_open_depth = 2;
//! ```
//!
//! A suite containing the line `# runner: once` is policy-independent: it runs
//! once, on a fresh context without those settings (so it sees the defaults).
//! A suite must leave the configuration as it found it.
//!
//! Usage (all arguments after `--`):
//!
//! ```text
//! cargo test -p datafusion-prefetch-sqllogictest [-- [--complete] [FILTER...]]
//! ```
//!
//! - `FILTER`: run only suites whose file name contains one of the filters.
//! - `--complete` or `SLT_COMPLETE=1`: rewrite the expected results of the
//!   selected suites from policy `off` (the reference), then review the diff.
//! - `SLT_POLICIES=off,pipelined`: run only these policies.
//! - `SLT_JOBS=N`: how many (policy, suite) pairs run at once (default 4).
//! - `SLT_TIMEOUT_SECS=N`: per-pair timeout (default 300).
//! - `SLT_KEEP_DATA=1`: keep the generated data directory and print its path.
//! - `SLT_SETTINGS='prefetch.read_ahead_window=4KiB;prefetch.file_open_depth=0'`:
//!   extra `SET key = 'value'` applied after the runner's settings in the
//!   policy-dependent suites (to explore other prefetch configurations; not
//!   used by `--complete`).
//! - `SLT_LATENCY=s3` (or `5ms`, `none`, ...): the simulated GET latency model
//!   instead of a fixed 1 ms; `s3` draws seeded, jittery delays, so responses
//!   complete out of order (about twice as slow as the default).
//! - `SLT_ENGINES=datafusion` (or `ballista`, default both): where the queries
//!   run. `ballista` runs every pair again on a Ballista standalone cluster (a
//!   scheduler and two executors in this process, over loopback gRPC, set up by
//!   `datafusion-prefetch-ballista`), so the same expected results must hold
//!   with the scans planned on a scheduler, shipped through the codec and run
//!   on executors, and with the settings shipped there from the client. Its
//!   lines are labelled `ballista/<policy>`.
//!
//! Output: one line per (policy, suite), the details of every failure, and a
//! last line `N passed, M failed`; the exit status is non-zero on any failure.

mod datagen;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchPolicy, prefetching_context};
use datafusion_prefetch_ballista::{
    ObjectStores, ballista_prefetching_context, start_standalone_cluster,
};
use datafusion_prefetch_simstore::{
    LatencyModel, SimulatedStore, SimulatedStoreConfig, StoreStats,
};
use datafusion_sqllogictest::{DFColumnType, DataFusion, df_value_validator, value_normalizer};
use indicatif::ProgressBar;
use object_store::local::LocalFileSystem;
use sqllogictest::{Record, parse_file, strict_column_validator};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The URL the suites read from: `LOCATION 'sim://data/<dataset>/'`.
const DATA_URL: &str = "sim://data";
/// Marks a suite that runs once, without the runner's settings.
const RUN_ONCE_MARKER: &str = "# runner: once";
/// The settings applied before every policy-dependent suite, after the policy.
const RUNNER_SETTINGS: [&str; 3] = [
    "SET prefetch.read_ahead_window = '256KiB'",
    "SET prefetch.memory_budget = '1MiB'",
    "SET prefetch.file_open_depth = 2",
];
/// Suites the Ballista engine does not run, and why: both fail the same way
/// on stock Ballista 55 (its own codec and defaults, no prefetching) with two
/// executors, so they would test Ballista, not prefetching.
const BALLISTA_SKIPPED: [(&str, &str); 2] = [
    (
        "hive.slt",
        "dictionary-encoded partition columns lose their type in Ballista 55's shuffle between executors (RowConverter column schema mismatch)",
    ),
    (
        "types.slt",
        "a dictionary-encoded column loses its type in Ballista 55's shuffle between executors, and Ballista's defaults turn off Utf8View",
    ),
];
/// Errors shown per failing (policy, suite); the rest are counted.
const ERRORS_SHOWN: usize = 10;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Command line and environment.
struct Options {
    complete: bool,
    filters: Vec<String>,
    policies: Vec<PrefetchPolicy>,
    jobs: usize,
    timeout: Duration,
    keep_data: bool,
    /// Extra `(key, value)` settings from `SLT_SETTINGS`.
    extra_settings: Vec<(String, String)>,
    /// GET latency of the simulated store.
    latency: LatencyModel,
    /// Where the suites run.
    engines: Vec<Engine>,
}

/// Where a suite's queries run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// A local prefetching `SessionContext`.
    DataFusion,
    /// A Ballista client of an in-process standalone cluster.
    Ballista,
}

impl Engine {
    const ALL: [Engine; 2] = [Engine::DataFusion, Engine::Ballista];

    fn name(self) -> &'static str {
        match self {
            Engine::DataFusion => "datafusion",
            Engine::Ballista => "ballista",
        }
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
}

fn env_number(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name} must be a whole number, got '{v}'")),
        Err(_) => Ok(default),
    }
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut complete = env_flag("SLT_COMPLETE");
        let mut filters = vec![];
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--complete" => complete = true,
                // Flags cargo or a test harness may pass (--nocapture, --quiet, ...).
                flag if flag.starts_with('-') => {}
                filter => filters.push(filter.to_string()),
            }
        }
        let policies = match std::env::var("SLT_POLICIES") {
            Ok(list) => list
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(|name| {
                    PrefetchPolicy::ALL
                        .into_iter()
                        .find(|p| p.name() == name)
                        .ok_or_else(|| {
                            let known = PrefetchPolicy::ALL.map(PrefetchPolicy::name).join(", ");
                            format!("SLT_POLICIES: unknown policy '{name}' (known: {known})")
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => PrefetchPolicy::ALL.to_vec(),
        };
        let extra_settings = std::env::var("SLT_SETTINGS")
            .unwrap_or_default()
            .split(';')
            .map(str::trim)
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .ok_or_else(|| format!("SLT_SETTINGS: expected key=value, got '{kv}'"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let latency = match std::env::var("SLT_LATENCY") {
            Ok(model) => model.parse().map_err(|e| format!("SLT_LATENCY: {e}"))?,
            Err(_) => LatencyModel::Fixed(Duration::from_millis(1)),
        };
        let engines = match std::env::var("SLT_ENGINES") {
            Ok(list) => list
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(|name| {
                    Engine::ALL
                        .into_iter()
                        .find(|e| e.name() == name)
                        .ok_or_else(|| {
                            format!(
                                "SLT_ENGINES: unknown engine '{name}' (known: datafusion, ballista)"
                            )
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => Engine::ALL.to_vec(),
        };
        Ok(Self {
            engines,
            complete,
            filters,
            policies,
            jobs: env_number("SLT_JOBS", 4)?.max(1) as usize,
            timeout: Duration::from_secs(env_number("SLT_TIMEOUT_SECS", 300)?),
            keep_data: env_flag("SLT_KEEP_DATA"),
            extra_settings,
            latency,
        })
    }
}

/// One `.slt` file.
#[derive(Clone)]
struct Suite {
    path: PathBuf,
    name: String,
    run_once: bool,
}

fn discover_suites(filters: &[String]) -> Result<Vec<Suite>, BoxError> {
    // cargo test sets CARGO_MANIFEST_DIR for the run too: the checkout being
    // tested, where the compile-time value names whichever checkout built
    // the binary (one target folder serves several clones, and cargo does
    // not rebuild when only the checkout moved).
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let dir = manifest_dir.join("suites");
    let mut suites = vec![];
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("slt") {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("suite file name is not UTF-8")?
            .to_string();
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let run_once = std::fs::read_to_string(&path)?
            .lines()
            .any(|line| line.trim() == RUN_ONCE_MARKER);
        suites.push(Suite {
            path,
            name,
            run_once,
        });
    }
    suites.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(suites)
}

/// The simulated store the suites read as `sim://data/`: LIST requests take
/// 1 ms, GETs `latency`.
fn simulated_store(
    data_dir: &Path,
    latency: LatencyModel,
) -> Result<SimulatedStore<LocalFileSystem>, BoxError> {
    Ok(SimulatedStore::new(
        LocalFileSystem::new_with_prefix(data_dir)?,
        SimulatedStoreConfig::fixed(Duration::from_millis(1)).with_latency(latency),
    ))
}

/// A fresh prefetching context reading `data_dir` as `sim://data/`, with the
/// runner's settings for `policy` and then `extra_settings` (none at all for
/// `None`): local, or a client of the Ballista cluster at `ballista`. The
/// store statistics are those of the local context's store.
async fn make_context(
    data_dir: &Path,
    policy: Option<PrefetchPolicy>,
    extra_settings: &[(String, String)],
    latency: LatencyModel,
    ballista: Option<&str>,
) -> Result<(SessionContext, Option<Arc<StoreStats>>), BoxError> {
    // information_schema is what SHOW reads (prefetching_context enables it too).
    let config = SessionConfig::new()
        .with_target_partitions(4)
        .with_information_schema(true);
    let store = simulated_store(data_dir, latency)?;
    let url = ObjectStoreUrl::parse(DATA_URL)?;
    let (ctx, stats) = match ballista {
        None => {
            let ctx = prefetching_context(config);
            let stats = store.stats();
            ctx.register_object_store(url.as_ref(), Arc::new(store));
            (ctx, Some(stats))
        }
        Some(scheduler) => {
            // The client lists files and reads footers when a table is
            // created; the executors' own stores count the scans' GETs.
            let stores = ObjectStores::new().with_store(url, Arc::new(store));
            let ctx = ballista_prefetching_context(scheduler, config, &stores).await?;
            (ctx, None)
        }
    };
    if let Some(policy) = policy {
        let set_policy = format!("SET prefetch.policy = '{}'", policy.name());
        for sql in std::iter::once(set_policy.as_str()).chain(RUNNER_SETTINGS) {
            ctx.sql(sql).await?.collect().await?;
        }
        for (key, value) in extra_settings {
            ctx.sql(&format!("SET {key} = '{value}'"))
                .await?
                .collect()
                .await?;
        }
    }
    Ok((ctx, stats))
}

fn config_snapshot(ctx: &SessionContext) -> BTreeMap<String, Option<String>> {
    ctx.state()
        .config()
        .options()
        .entries()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

/// A runner over DataFusion's own sqllogictest engine, on a prefetching context.
fn new_runner(
    ctx: &SessionContext,
    suite: &Path,
) -> sqllogictest::Runner<
    DataFusion,
    impl sqllogictest::MakeConnection<Conn = DataFusion, MakeFuture: Send> + Send,
> {
    let ctx = ctx.clone();
    let suite = suite.to_path_buf();
    let mut runner = sqllogictest::Runner::new(move || {
        let engine = DataFusion::new(ctx.clone(), suite.clone(), ProgressBar::hidden());
        async move { Ok(engine) }
    });
    runner.with_column_validator(strict_column_validator);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(df_value_validator);
    runner
}

/// Run every record of `path`; returns the error messages (empty = pass).
async fn run_suite(ctx: &SessionContext, path: &Path) -> Vec<String> {
    let records = match parse_file::<DFColumnType>(path) {
        Ok(records) => records,
        Err(e) => return vec![format!("cannot parse {}: {e}", path.display())],
    };
    let before = config_snapshot(ctx);
    let mut runner = new_runner(ctx, path);
    let mut errors = vec![];
    for record in records {
        if let Record::Halt { .. } = record {
            break;
        }
        if let Err(e) = runner.run_async(record).await {
            errors.push(e.display(false).to_string());
        }
    }
    runner.shutdown_async().await;

    let after = config_snapshot(ctx);
    let changed: Vec<String> = after
        .iter()
        .filter(|(key, value)| before.get(*key) != Some(*value))
        .map(|(key, value)| {
            let old = before.get(key).cloned().flatten();
            format!(
                "  {key}: {} -> {}",
                old.as_deref().unwrap_or("NULL"),
                value.as_deref().unwrap_or("NULL")
            )
        })
        .collect();
    if !changed.is_empty() {
        errors.push(format!(
            "suite left modified configuration (restore what it SETs):\n{}",
            changed.join("\n")
        ));
    }
    errors
}

/// Rewrite the expected results of `path` from what `ctx` returns.
async fn complete_suite(ctx: &SessionContext, path: &Path) -> Result<(), String> {
    let mut runner = new_runner(ctx, path);
    runner
        .update_test_file(
            path,
            " ",
            df_value_validator,
            value_normalizer,
            strict_column_validator,
        )
        .await
        .map_err(|e| e.to_string())?;
    runner.shutdown_async().await;
    Ok(())
}

/// The outcome of one (policy, suite) pair.
struct Outcome {
    label: String,
    suite: String,
    errors: Vec<String>,
    elapsed: Duration,
    requests: Option<u64>,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.errors.is_empty()
    }

    fn line(&self) -> String {
        let requests = self
            .requests
            .map(|n| format!(", {n} GETs"))
            .unwrap_or_default();
        format!(
            "{} {:<10} {:<24} ({:.2}s{requests})",
            if self.passed() { "ok  " } else { "FAIL" },
            self.label,
            self.suite,
            self.elapsed.as_secs_f64(),
        )
    }
}

/// What every pair shares.
struct PairSettings {
    data_dir: PathBuf,
    complete: bool,
    timeout: Duration,
    extra_settings: Vec<(String, String)>,
    latency: LatencyModel,
    /// The `df://` URL of the Ballista cluster, when a pair runs there.
    ballista: Option<String>,
}

async fn run_pair(
    settings: Arc<PairSettings>,
    suite: Suite,
    policy: Option<PrefetchPolicy>,
    engine: Engine,
) -> Outcome {
    let started = Instant::now();
    let policy_name = policy.map_or("default", PrefetchPolicy::name);
    let label = match engine {
        Engine::DataFusion => policy_name.to_string(),
        Engine::Ballista => format!("ballista/{policy_name}"),
    };
    let ballista = match engine {
        Engine::DataFusion => None,
        Engine::Ballista => settings.ballista.as_deref(),
    };
    let mut requests = None;
    let work = async {
        let extra: &[(String, String)] = if settings.complete {
            &[]
        } else {
            &settings.extra_settings
        };
        let (ctx, stats) = make_context(
            &settings.data_dir,
            policy,
            extra,
            settings.latency,
            ballista,
        )
        .await
        .map_err(|e| vec![format!("cannot set up the context: {e}")])?;
        let errors = if settings.complete {
            complete_suite(&ctx, &suite.path)
                .await
                .err()
                .into_iter()
                .collect()
        } else {
            run_suite(&ctx, &suite.path).await
        };
        requests = stats.map(|s| s.get_requests());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    };
    let timeout = settings.timeout;
    let errors = match tokio::time::timeout(timeout, work).await {
        Ok(Ok(())) => vec![],
        Ok(Err(errors)) => errors,
        Err(_) => vec![format!(
            "timed out after {}s (set SLT_TIMEOUT_SECS to change)",
            timeout.as_secs()
        )],
    };
    Outcome {
        label,
        suite: suite.name,
        errors,
        elapsed: started.elapsed(),
        requests,
    }
}

async fn run(options: Options) -> Result<bool, BoxError> {
    let suites = discover_suites(&options.filters)?;
    if suites.is_empty() {
        return Err("no .slt suite matches the filters".into());
    }

    let started = Instant::now();
    let data = tempfile::Builder::new()
        .prefix("dfprefetch-slt-")
        .tempdir()?;
    datagen::generate(data.path())?;
    println!(
        "generated datasets in {:.2}s{}",
        started.elapsed().as_secs_f64(),
        if options.keep_data {
            format!(" at {}", data.path().display())
        } else {
            String::new()
        }
    );

    if !options.extra_settings.is_empty() && !options.complete {
        println!(
            "extra settings (SLT_SETTINGS): {:?}",
            options.extra_settings
        );
    }
    if options.latency != LatencyModel::Fixed(Duration::from_millis(1)) {
        println!("GET latency (SLT_LATENCY): {:?}", options.latency);
    }

    // Completion uses the reference policy only; running does every policy.
    let policies: Vec<PrefetchPolicy> = if options.complete {
        vec![PrefetchPolicy::Off]
    } else {
        options.policies.clone()
    };
    // Completion writes what local DataFusion returns.
    let engines: Vec<Engine> = if options.complete {
        vec![Engine::DataFusion]
    } else {
        options.engines.clone()
    };
    let skipped = |engine: Engine, suite: &Suite| {
        engine == Engine::Ballista && BALLISTA_SKIPPED.iter().any(|(name, _)| *name == suite.name)
    };
    if engines.contains(&Engine::Ballista) {
        for (name, why) in BALLISTA_SKIPPED {
            if suites.iter().any(|s| s.name == name) {
                println!("skip ballista/* {name}: {why}");
            }
        }
    }
    let mut pairs = vec![];
    for &engine in &engines {
        for &policy in &policies {
            for suite in suites.iter().filter(|s| !skipped(engine, s)) {
                if !suite.run_once {
                    pairs.push((suite.clone(), Some(policy), engine));
                }
            }
        }
        for suite in suites.iter().filter(|s| s.run_once && !skipped(engine, s)) {
            pairs.push((suite.clone(), None, engine));
        }
    }

    // One cluster for every Ballista pair; each pair is a session of its own.
    let ballista = if engines.contains(&Engine::Ballista) {
        let store = simulated_store(data.path(), options.latency)?;
        let stores =
            ObjectStores::new().with_store(ObjectStoreUrl::parse(DATA_URL)?, Arc::new(store));
        Some(start_standalone_cluster(stores, 2, 2).await?)
    } else {
        None
    };

    // Pairs run concurrently (most of their time is simulated latency); lines
    // are printed as pairs finish, failures in pair order at the end.
    let shared = Arc::new(PairSettings {
        data_dir: data.path().to_path_buf(),
        complete: options.complete,
        timeout: options.timeout,
        extra_settings: options.extra_settings.clone(),
        latency: options.latency,
        ballista,
    });
    let slots = Arc::new(Semaphore::new(options.jobs));
    let mut tasks = JoinSet::new();
    for (index, (suite, policy, engine)) in pairs.into_iter().enumerate() {
        let slots = Arc::clone(&slots);
        let shared = Arc::clone(&shared);
        tasks.spawn(async move {
            let _slot = slots
                .acquire_owned()
                .await
                .expect("semaphore is never closed");
            (index, run_pair(shared, suite, policy, engine).await)
        });
    }
    let mut outcomes = vec![];
    while let Some(joined) = tasks.join_next().await {
        let (index, outcome) = match joined {
            Ok(done) => done,
            Err(e) => {
                // A panic inside DataFusion or the prefetcher: report it, keep going.
                let outcome = Outcome {
                    label: "?".into(),
                    suite: "?".into(),
                    errors: vec![format!("task failed: {e}")],
                    elapsed: Duration::ZERO,
                    requests: None,
                };
                (usize::MAX, outcome)
            }
        };
        println!("{}", outcome.line());
        outcomes.push((index, outcome));
    }
    outcomes.sort_by_key(|(index, _)| *index);

    let failed: Vec<&Outcome> = outcomes
        .iter()
        .map(|(_, o)| o)
        .filter(|o| !o.passed())
        .collect();
    for outcome in &failed {
        println!(
            "\n==== FAILED: policy {} / {} ({} errors) ====",
            outcome.label,
            outcome.suite,
            outcome.errors.len()
        );
        for (i, error) in outcome.errors.iter().take(ERRORS_SHOWN).enumerate() {
            println!("{}. {error}", i + 1);
        }
        if outcome.errors.len() > ERRORS_SHOWN {
            println!(
                "... {} more errors not shown",
                outcome.errors.len() - ERRORS_SHOWN
            );
        }
    }
    if options.keep_data {
        let kept = data.keep();
        println!("kept datasets at {}", kept.display());
    }
    if options.complete {
        println!(
            "\ncompleted {} suite(s) from policy off",
            outcomes.len() - failed.len()
        );
    }
    println!("\ntotal {:.2}s", started.elapsed().as_secs_f64());
    println!(
        "{} passed, {} failed",
        outcomes.len() - failed.len(),
        failed.len()
    );
    Ok(failed.is_empty())
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(options)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("sqllogictest runner error: {e}");
            println!("0 passed, 1 failed");
            ExitCode::FAILURE
        }
    }
}
