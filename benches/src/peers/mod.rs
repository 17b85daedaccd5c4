//! `--suite peers`: this project against the engines users would pick
//! instead, all reading the same Parquet files from the same object store
//! server through the same [latency proxy](crate::proxy), each with its own
//! client for that store, in one run. `--store` picks the wire: S3 (s3s-fs,
//! the default), GCS (fake-gcs-server), Azure Blob (Azurite) or HTTP (rclone
//! serving a folder over WebDAV).
//!
//! Engines: DataFusion `off` (stock), DataFusion under this project's default
//! policy (object_store's client for the store), Polars (`scan_parquet`, its
//! object_store client), DuckDB (its httpfs and azure extensions from PyPI),
//! PyArrow datasets (`S3FileSystem` / `GcsFileSystem` / `AzureFileSystem`,
//! `pre_buffer`), and datafusion-python 55, stock (`register_parquet` over
//! its `datafusion.object_store` client) and with this project's wheel
//! (`datafusion_prefetch.ParquetTable`). An engine that has no client for a
//! store is reported as impossible on that wire, with the reason
//! ([`impossible`]). Every run is its own
//! process — DataFusion's a re-run of this binary (`prefetch-bench
//! peer-worker …`), the others `benches/peers/peers.py run …` in the venv of
//! `benches/peers/setup.sh` — which reports its wall time, result and peak
//! RSS; the proxy counts requests and bytes. An engine that is not installed
//! is skipped, with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use datafusion_prefetch::PrefetchPolicy;
use datafusion_prefetch_s3server::{ACCESS_KEY, REGION, SECRET_KEY};
use datafusion_prefetch_simstore::SimulatedStoreConfig;
use serde::Serialize;

use datafusion_prefetch_wireservers::azure;

use crate::proxy::{LatencyProxy, ProxyConfig};
use crate::suites::{self, ClickbenchCopy, SuiteOptions};

mod queries;
#[cfg(test)]
mod slow_down;
mod stores;
mod worker;

pub use queries::Race;
use queries::{Compare, PeerQuery, peer_queries};
use stores::Server;
pub use stores::{Store, impossible};
pub use worker::worker;

const BUCKET: &str = "peers";

/// How one `--suite peers` invocation runs.
#[derive(Debug, Clone)]
pub struct PeersConfig {
    pub data_dir: PathBuf,
    /// The store the engines read from.
    pub wire: Store,
    /// Where its server keeps its objects (uploads are reused across runs).
    pub server_root: PathBuf,
    pub scale: f64,
    pub iterations: usize,
    /// The queries: the quick set or the full race.
    pub race: Race,
    /// Only these of the race's queries (all when empty).
    pub queries: Vec<String>,
    pub store: SimulatedStoreConfig,
    pub latency_label: String,
    pub partitions: usize,
    /// `prefetch.*` settings of the default-policy runs.
    pub settings: Vec<(String, String)>,
    pub python: PathBuf,
    pub timeout: Duration,
    /// Only these Python engines, by `peers.py`'s names (all when empty).
    pub only: Vec<String>,
    pub json: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
}

/// The engines, in the order they are run (and reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    DataFusion(PrefetchPolicy),
    Python(&'static str),
}

impl Engine {
    fn all() -> Vec<Engine> {
        let mut engines = vec![Engine::DataFusion(PrefetchPolicy::Off)];
        if PrefetchPolicy::default() != PrefetchPolicy::Off {
            engines.push(Engine::DataFusion(PrefetchPolicy::default()));
        }
        engines.extend(PYTHON_ENGINES.map(Engine::Python));
        engines
    }

    fn name(self) -> String {
        match self {
            Engine::DataFusion(policy) => format!("datafusion {policy}"),
            Engine::Python(DATAFUSION_PYTHON_PREFETCH) => "datafusion-python + prefetch".into(),
            Engine::Python(name) => name.to_string(),
        }
    }

    /// Whether it runs DataFusion's SQL dialect (the query's `sql`, not its
    /// `portable_sql`).
    fn speaks_datafusion_sql(self) -> bool {
        match self {
            Engine::DataFusion(_) => true,
            Engine::Python(name) => name.starts_with("datafusion-python"),
        }
    }
}

/// The engines `benches/peers/peers.py` runs, by its names for them.
const PYTHON_ENGINES: [&str; 5] = [
    "polars",
    "duckdb",
    "pyarrow",
    "datafusion-python",
    DATAFUSION_PYTHON_PREFETCH,
];

/// datafusion-python with this project's wheel.
const DATAFUSION_PYTHON_PREFETCH: &str = "datafusion-python-prefetch";

/// What one engine process reported, and what the proxy counted.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRun {
    pub query: String,
    pub engine: String,
    pub iteration: usize,
    pub latency: String,
    pub partitions: usize,
    pub wall_ms: f64,
    /// DataFusion engines: of `wall_ms`, the time until every table was
    /// registered (listed, its schema inferred), before the query planned.
    pub register_ms: Option<f64>,
    pub rows: usize,
    pub checksum: String,
    pub peak_rss_bytes: u64,
    pub requests: u64,
    pub list_requests: u64,
    pub bytes_from_server: u64,
    pub error: Option<String>,
    pub matches_off: bool,
}

#[derive(serde::Deserialize)]
struct Reported {
    rows: Option<usize>,
    checksum: Option<String>,
    wall_ms: Option<f64>,
    register_ms: Option<f64>,
    peak_rss_bytes: Option<u64>,
    error: Option<String>,
}

// --- the orchestrator ----------------------------------------------------------

/// Run `command`, whose last stdout line is a JSON report, within `timeout`.
fn run_child(mut command: Command, timeout: Duration) -> Result<Reported, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no result within {} s", timeout.as_secs()));
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    let last = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
    match last.map(serde_json::from_str::<Reported>) {
        Some(Ok(reported)) => Ok(reported),
        _ => {
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            Err(format!(
                "exited with {status} without a report; stderr: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        }
    }
}

/// The Python engines that import (and, for DuckDB, load the extension the
/// store needs), or why not.
fn probe_python(
    config: &PeersConfig,
    script: &Path,
) -> Vec<(&'static str, Result<String, String>)> {
    let names = PYTHON_ENGINES;
    let missing = |why: String| names.iter().map(|n| (*n, Err(why.clone()))).collect();
    if !config.python.is_file() {
        return missing(format!(
            "no Python at {}: run benches/peers/setup.sh",
            config.python.display()
        ));
    }
    let out = Command::new(&config.python)
        .arg(script)
        .arg("probe")
        .args(["--store", config.wire.name()])
        .stderr(Stdio::inherit())
        .output();
    let report: serde_json::Value = match out
        .map_err(|e| e.to_string())
        .and_then(|o| serde_json::from_slice(&o.stdout).map_err(|e| e.to_string()))
    {
        Ok(report) => report,
        Err(e) => return missing(format!("{} probe failed: {e}", script.display())),
    };
    names
        .iter()
        .map(|name| {
            let entry = &report[*name];
            let result = if entry["ok"].as_bool() == Some(true) {
                Ok(entry["version"].as_str().unwrap_or("?").to_string())
            } else {
                Err(entry["error"].as_str().unwrap_or("unknown").to_string())
            };
            (*name, result)
        })
        .collect()
}

/// The Parquet files of `dir`, sorted.
fn parquet_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    names.sort();
    Ok(names)
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / (1 << 20) as f64
}

struct Peers {
    config: PeersConfig,
    engines: Vec<Engine>,
    skipped: Vec<(String, String)>,
    /// Engines with no client for this store, and why.
    impossible: Vec<(String, String)>,
    queries: Vec<PeerQuery>,
    runs: Vec<PeerRun>,
}

impl Peers {
    fn runs_of<'a>(&'a self, query: &'a str, engine: &'a str) -> impl Iterator<Item = &'a PeerRun> {
        self.runs
            .iter()
            .filter(move |r| r.query == query && r.engine == engine && r.error.is_none())
    }

    fn median_of(&self, query: &str, engine: &str, f: impl Fn(&PeerRun) -> f64) -> f64 {
        median(self.runs_of(query, engine).map(f))
    }

    fn title(&self) -> String {
        format!(
            "peers — {} ({}), latency {}, {} partition(s), scale {}",
            self.config.wire.name(),
            self.config.wire.server_name(),
            self.config.latency_label,
            self.config.partitions,
            self.config.scale
        )
    }

    fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let ours = Engine::DataFusion(PrefetchPolicy::default()).name();
        let mut out = String::new();
        let _ = writeln!(out, "### {}\n", self.title());
        let _ = writeln!(
            out,
            "| query | engine | wall ms (median) | time vs {ours} | requests | MiB from server | peak RSS MiB | matches off |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---|");
        let engines: Vec<String> = self.engines.iter().map(|e| e.name()).collect();
        for q in &self.queries {
            let our_wall = self.median_of(&q.name, &ours, |r| r.wall_ms);
            for engine in &engines {
                let failed = self
                    .runs
                    .iter()
                    .find(|r| r.query == q.name && &r.engine == engine && r.error.is_some());
                if self.runs_of(&q.name, engine).next().is_none() {
                    let why = failed
                        .and_then(|r| r.error.clone())
                        .unwrap_or_else(|| "not run".into());
                    let _ = writeln!(
                        out,
                        "| {} | {engine} | failed | | | | | {} |",
                        q.name,
                        why.replace('|', "/").chars().take(160).collect::<String>()
                    );
                    continue;
                }
                let wall = self.median_of(&q.name, engine, |r| r.wall_ms);
                let matches = match (
                    self.runs_of(&q.name, engine).all(|r| r.matches_off),
                    q.compare,
                ) {
                    (false, _) => "NO",
                    (true, Compare::Checksum) => "yes",
                    (true, Compare::RowCount) => "rows (ties)",
                };
                let _ = writeln!(
                    out,
                    "| {} | {engine} | {wall:.1} | {:.2}x | {:.0} | {:.1} | {:.1} | {} |",
                    q.name,
                    wall / our_wall,
                    self.median_of(&q.name, engine, |r| r.requests as f64),
                    mib(self.median_of(&q.name, engine, |r| r.bytes_from_server as f64)),
                    mib(self.median_of(&q.name, engine, |r| r.peak_rss_bytes as f64)),
                    matches,
                );
            }
        }
        let _ = writeln!(
            out,
            "\n| benchmark | engine | queries run | total wall ms | {ours} on the same queries | time vs {ours} |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|");
        let mut suites: Vec<&str> = vec![];
        for q in &self.queries {
            if !suites.contains(&q.suite) {
                suites.push(q.suite);
            }
        }
        for suite in suites {
            let of_suite: Vec<&PeerQuery> =
                self.queries.iter().filter(|q| q.suite == suite).collect();
            for engine in &engines {
                let ran: Vec<&PeerQuery> = of_suite
                    .iter()
                    .copied()
                    .filter(|q| self.runs_of(&q.name, engine).next().is_some())
                    .collect();
                if ran.is_empty() {
                    let _ = writeln!(
                        out,
                        "| {suite} | {engine} | 0/{} | – | – | – |",
                        of_suite.len()
                    );
                    continue;
                }
                let total_of = |who: &str| -> f64 {
                    ran.iter()
                        .map(|q| self.median_of(&q.name, who, |r| r.wall_ms))
                        .sum()
                };
                let (total, our_total) = (total_of(engine), total_of(&ours));
                let _ = writeln!(
                    out,
                    "| {suite} | {engine} | {}/{} | {total:.1} | {our_total:.1} | {:.2}x |",
                    ran.len(),
                    of_suite.len(),
                    total / our_total
                );
            }
        }
        let _ = writeln!(
            out,
            "\nWall time: in the engine's own process, from before its tables are opened \
             (listing, footers) to the last row; process start and imports excluded. \
             Requests and bytes: counted by the proxy. Peak RSS: of the engine's process. \
             `time vs {ours}` > 1 means slower than {ours}."
        );
        if !self.impossible.is_empty() {
            let _ = writeln!(
                out,
                "\nNot possible on the {} wire:\n",
                self.config.wire.name()
            );
            for (engine, why) in &self.impossible {
                let _ = writeln!(out, "- {engine}: {why}");
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "\nSkipped engines:\n");
            for (engine, why) in &self.skipped {
                let _ = writeln!(out, "- {engine}: {why}");
            }
        }
        out
    }

    /// Mark every run against the first successful `datafusion off` run of its
    /// query (by row count alone where ties decide the rows); whether every
    /// engine that ran agreed.
    fn check(&mut self) -> bool {
        let off = Engine::DataFusion(PrefetchPolicy::Off).name();
        let mut ok = true;
        let reference: Vec<(String, Compare, usize, String)> = self
            .queries
            .iter()
            .filter_map(|q| {
                self.runs_of(&q.name, &off)
                    .next()
                    .map(|r| (q.name.clone(), q.compare, r.rows, r.checksum.clone()))
            })
            .collect();
        for run in self.runs.iter_mut().filter(|r| r.error.is_none()) {
            let Some((_, compare, rows, checksum)) =
                reference.iter().find(|(q, ..)| q == &run.query)
            else {
                continue;
            };
            run.matches_off =
                run.rows == *rows && (*compare == Compare::RowCount || &run.checksum == checksum);
            if !run.matches_off {
                ok = false;
                eprintln!(
                    "MISMATCH {} {} iteration {}: {} rows / {} vs datafusion off {rows} rows / {checksum}",
                    run.query, run.engine, run.iteration, run.rows, run.checksum
                );
            }
        }
        ok
    }
}

/// `prefetch-bench --suite peers`. Ok(false) if results differ between engines.
pub async fn run(config: PeersConfig) -> Result<bool, Box<dyn std::error::Error>> {
    let mut queries = peer_queries(config.race);
    if !config.queries.is_empty() {
        queries.retain(|q| config.queries.contains(&q.name));
        if queries.is_empty() {
            let known: Vec<String> = peer_queries(config.race)
                .into_iter()
                .map(|q| q.name)
                .collect();
            return Err(format!(
                "none of --queries {:?} is a peers query ({})",
                config.queries,
                known.join(", ")
            )
            .into());
        }
    }

    // The data of the suites the queries read, generated as those suites do.
    let options = SuiteOptions {
        scale: config.scale,
        clickbench_copy: ClickbenchCopy::Published,
    };
    let mut prefixes: Vec<(&'static str, String)> = vec![];
    let mut local: Vec<(PathBuf, String)> = vec![];
    for suite in ["cross_file", "tpch", "clickbench"] {
        let needed: Vec<&'static str> = queries
            .iter()
            .filter(|q| q.suite == suite)
            .flat_map(|q| q.tables.iter().copied())
            .collect();
        if needed.is_empty() {
            continue;
        }
        let prepared = suites::prepare(suite, &config.data_dir, &options)?;
        let folder = prepared
            .data_dir
            .file_name()
            .expect("a suite folder")
            .to_string_lossy()
            .to_string();
        for table in needed {
            let prefix = format!("{folder}/{table}/");
            if !prefixes.iter().any(|(t, p)| *t == table && *p == prefix) {
                local.push((prepared.data_dir.join(table), prefix.clone()));
                prefixes.push((table, prefix));
            }
        }
    }

    // The server, the uploads (kept in --server-root across runs), the proxy.
    let server = Server::start(config.wire, &config.server_root)?;
    eprintln!(
        "{} server: {} at {} (objects in {})",
        config.wire.name(),
        server.binary().display(),
        server.addr(),
        config.server_root.display()
    );
    if config.wire == Store::S3 && !server.binary().to_string_lossy().contains("/release/") {
        eprintln!(
            "note: a debug build of the S3 server; `bash benches/peers/setup.sh --server` \
             installs an optimised one for measurements"
        );
    }
    // Each table's files, as keys in the bucket (the Python engines are given
    // them where their client cannot list the store).
    let mut files: Vec<(&'static str, String)> = vec![];
    for ((dir, prefix), (table, _)) in local.iter().zip(&prefixes) {
        let (mut uploaded, mut bytes) = (0, 0);
        for path in parquet_files(dir)? {
            let name = path.file_name().expect("a file").to_string_lossy();
            let key = format!("{prefix}{name}");
            if server.upload(&path, &key).await? {
                uploaded += 1;
                bytes += std::fs::metadata(&path)?.len();
            }
            files.push((table, key));
        }
        if uploaded > 0 {
            eprintln!(
                "uploaded {uploaded} files ({:.1} MiB) to {}/{BUCKET}/{prefix}",
                mib(bytes as f64),
                config.wire.name()
            );
        }
    }
    let proxy = LatencyProxy::start(
        server.addr(),
        ProxyConfig::from(&config.store),
        server.wire(),
    )
    .await?;

    // The engines that can run.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/peers.py");
    let mut engines = vec![];
    let mut skipped = vec![];
    for engine in Engine::all() {
        match engine {
            Engine::DataFusion(_) => engines.push(engine),
            Engine::Python(_) => {}
        }
    }
    let mut impossible_here = vec![];
    if let Some(unknown) = config
        .only
        .iter()
        .find(|name| !PYTHON_ENGINES.contains(&name.as_str()))
    {
        return Err(format!(
            "--peers: no engine '{unknown}' (the others are {})",
            PYTHON_ENGINES.join(", ")
        )
        .into());
    }
    for (name, probe) in probe_python(&config, &script) {
        if !config.only.is_empty() && !config.only.iter().any(|n| n == name) {
            continue;
        }
        if let Some(why) = impossible(name, config.wire) {
            eprintln!("IMPOSSIBLE {name} on {}: {why}", config.wire.name());
            impossible_here.push((Engine::Python(name).name(), why.to_string()));
            continue;
        }
        match probe {
            Ok(version) => {
                eprintln!("{name}: {version}");
                if version.contains("(debug wheel)") {
                    eprintln!(
                        "note: a debug build of the datafusion-prefetch wheel; \
                         `bash benches/peers/setup.sh --wheel` installs an optimised one \
                         for measurements"
                    );
                }
                engines.push(Engine::Python(name));
            }
            Err(why) => {
                eprintln!("SKIPPED {name}: {why}");
                skipped.push((Engine::Python(name).name(), why));
            }
        }
    }

    let mut peers = Peers {
        config: config.clone(),
        engines: engines.clone(),
        skipped,
        impossible: impossible_here,
        queries: queries.clone(),
        runs: vec![],
    };
    let exe = std::env::current_exe()?;
    for iteration in 0..config.iterations {
        let mut order = engines.clone();
        if iteration % 2 == 1 {
            order.reverse();
        }
        for query in &queries {
            for engine in &order {
                let tables: Vec<String> = query
                    .tables
                    .iter()
                    .map(|t| {
                        let (_, prefix) = prefixes.iter().find(|(n, _)| n == t).expect("uploaded");
                        format!("{t}={prefix}")
                    })
                    .collect();
                let mut command = match engine {
                    Engine::DataFusion(policy) => {
                        let mut c = Command::new(&exe);
                        c.arg("peer-worker")
                            .args(["--store", config.wire.name()])
                            .args(["--endpoint", &proxy.endpoint()])
                            .args(["--policy", policy.name()])
                            .args(["--partitions", &config.partitions.to_string()])
                            .args(["--sql", &query.sql]);
                        if *policy != PrefetchPolicy::Off {
                            for (k, v) in &config.settings {
                                c.args(["--setting", &format!("{k}={v}")]);
                            }
                        }
                        for t in &tables {
                            c.args(["--table", t]);
                        }
                        c
                    }
                    Engine::Python(name) => {
                        let sql = if engine.speaks_datafusion_sql() {
                            &query.sql
                        } else {
                            &query.portable_sql
                        };
                        let mut c = Command::new(&config.python);
                        c.arg(&script)
                            .arg("run")
                            .args(["--engine", name])
                            .args(["--store", config.wire.name()])
                            .args(["--endpoint", &proxy.endpoint()])
                            .args(["--bucket", BUCKET])
                            .args(["--query", &query.name])
                            .args(["--sql", sql])
                            .args(["--partitions", &config.partitions.to_string()])
                            .args(["--access-key", ACCESS_KEY])
                            .args(["--secret-key", SECRET_KEY])
                            .args(["--region", REGION])
                            .args(["--account", azure::ACCOUNT])
                            .args(["--account-key", azure::ACCOUNT_KEY]);
                        for t in &tables {
                            c.args(["--table", t]);
                        }
                        if *name == DATAFUSION_PYTHON_PREFETCH {
                            for (k, v) in &config.settings {
                                c.args(["--setting", &format!("{k}={v}")]);
                            }
                        }
                        // Only HTTP has no listing for them.
                        for (table, key) in files.iter().filter(|_| config.wire == Store::Http) {
                            if query.tables.contains(table) {
                                c.args(["--file", &format!("{table}={key}")]);
                            }
                        }
                        c
                    }
                };
                command
                    .env("AWS_EC2_METADATA_DISABLED", "true")
                    .env_remove("AWS_PROFILE")
                    .env_remove("HTTP_PROXY")
                    .env_remove("HTTPS_PROXY")
                    .env_remove("http_proxy")
                    .env_remove("https_proxy");
                proxy.stats().reset();
                let timeout = config.timeout;
                let outcome = tokio::task::spawn_blocking(move || run_child(command, timeout))
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let counts = proxy.stats().counts();
                let error = match &outcome {
                    Err(e) => Some(e.clone()),
                    Ok(r) => r.error.clone(),
                };
                let reported = outcome.ok();
                let field =
                    |f: fn(&Reported) -> Option<f64>| reported.as_ref().and_then(f).unwrap_or(0.0);
                let run = PeerRun {
                    query: query.name.clone(),
                    engine: engine.name(),
                    iteration,
                    latency: config.latency_label.clone(),
                    partitions: config.partitions,
                    wall_ms: field(|r| r.wall_ms),
                    register_ms: reported.as_ref().and_then(|r| r.register_ms),
                    rows: reported.as_ref().and_then(|r| r.rows).unwrap_or(0),
                    checksum: reported
                        .as_ref()
                        .and_then(|r| r.checksum.clone())
                        .unwrap_or_default(),
                    peak_rss_bytes: reported
                        .as_ref()
                        .and_then(|r| r.peak_rss_bytes)
                        .unwrap_or(0),
                    requests: counts.requests,
                    list_requests: counts.list_requests,
                    bytes_from_server: counts.bytes_to_clients,
                    error,
                    matches_off: false,
                };
                match &run.error {
                    None => eprintln!(
                        "{:<14} {:<22} {:>9.1} ms  {:>6} requests  {:>8.1} MiB  rss {:>7.1} MiB  {} rows {}",
                        run.query,
                        run.engine,
                        run.wall_ms,
                        run.requests,
                        mib(run.bytes_from_server as f64),
                        mib(run.peak_rss_bytes as f64),
                        run.rows,
                        run.checksum
                    ),
                    Some(e) => eprintln!("FAILED {} {}: {e}", run.query, run.engine),
                }
                if matches!(engine, Engine::DataFusion(_))
                    && let Some(e) = &run.error
                {
                    return Err(format!("{} under {}: {e}", run.query, run.engine).into());
                }
                peers.runs.push(run);
            }
        }
    }
    drop(proxy);
    drop(server);

    let all_match = peers.check();
    let markdown = peers.markdown();
    println!("{markdown}");
    if let Some(path) = &config.markdown {
        std::fs::write(path, &markdown)?;
    }
    if let Some(path) = &config.json {
        #[derive(Serialize)]
        struct Output<'a> {
            store: &'static str,
            runs: &'a [PeerRun],
            skipped: &'a [(String, String)],
            impossible: &'a [(String, String)],
        }
        std::fs::write(
            path,
            serde_json::to_string_pretty(&Output {
                store: config.wire.name(),
                runs: &peers.runs,
                skipped: &peers.skipped,
                impossible: &peers.impossible,
            })?,
        )?;
    }
    Ok(all_match)
}
