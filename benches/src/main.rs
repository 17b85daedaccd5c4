//! `prefetch-bench`: stock DataFusion (`off`) and each prefetch policy, side by
//! side in one process, on the same data and the same simulated store.
//!
//! ```text
//! prefetch-bench --suite cross_file --latency fixed:100 --policies off,pipelined
//! ```

mod report;
mod run;
mod suites;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};

use crate::report::Report;
use crate::run::{RunConfig, measure};

/// Compare prefetch policies against stock DataFusion in one run.
#[derive(Debug, Parser)]
#[command(name = "prefetch-bench", version, about)]
struct Args {
    /// Suite to run: cross_file, single_row_group or many_small_files.
    #[arg(long)]
    suite: String,
    /// Policies to compare; `off` (stock DataFusion) is always measured first.
    #[arg(long, value_delimiter = ',', default_value = "off,batched,pipelined")]
    policies: Vec<String>,
    /// First-byte latency per request: none, fixed:<ms> or s3.
    #[arg(long, default_value = "none")]
    latency: String,
    /// Per-connection bandwidth in MiB/s (default: unlimited, or 100 with s3).
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Concurrent connections the store allows (default: unlimited, or 128 with s3).
    #[arg(long)]
    connections: Option<usize>,
    /// Scan partitions (`datafusion.execution.target_partitions`).
    #[arg(long, default_value_t = 1)]
    partitions: usize,
    #[arg(long)]
    memory_budget: Option<String>,
    #[arg(long)]
    read_ahead_window: Option<String>,
    #[arg(long)]
    file_open_depth: Option<String>,
    #[arg(long)]
    eager_first_read_cap: Option<String>,
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
    /// Write the summary tables as markdown.
    #[arg(long)]
    markdown: Option<PathBuf>,
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
    let typical = match model {
        LatencyModel::None => Duration::ZERO,
        LatencyModel::Fixed(d) => d,
        _ => Duration::from_millis(32),
    };
    Ok((config, typical))
}

#[tokio::main]
async fn main() -> ExitCode {
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

async fn bench(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let (store, typical_latency) = store_config(&args)?;
    let mut suite = suites::prepare(&args.suite, &args.data_dir)?;
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

    let mut settings = vec![];
    for (key, value) in [
        ("memory_budget", &args.memory_budget),
        ("read_ahead_window", &args.read_ahead_window),
        ("file_open_depth", &args.file_open_depth),
        ("eager_first_read_cap", &args.eager_first_read_cap),
    ] {
        if let Some(value) = value {
            settings.push((key.to_string(), value.clone()));
        }
    }
    // The budget must be raised before a window above the default budget.
    settings.sort_by_key(|(k, _)| k != "memory_budget");
    let config = RunConfig {
        store,
        latency_label: args.latency.clone(),
        partitions: args.partitions,
        settings,
    };

    let mut report = Report::new(suite.clone(), config.clone(), typical_latency);
    // The no-latency floor: the best run of any policy per query without any
    // store delay (the first runs also warm the page cache).
    if !matches!(store.latency, LatencyModel::None) {
        let unthrottled = RunConfig {
            store: SimulatedStoreConfig::none(),
            latency_label: "none".into(),
            ..config.clone()
        };
        for query in &suite.queries {
            let mut best = f64::INFINITY;
            for policy in policies.iter().chain(policies.iter()) {
                let m = measure(&suite, query, policy, 0, &unthrottled).await?;
                best = best.min(m.wall_ms);
            }
            report.no_latency_wall_ms(&query.name, best);
        }
    }
    for iteration in 0..args.iterations {
        let mut order = policies.clone();
        if iteration % 2 == 1 {
            order.reverse();
        }
        for policy in &order {
            for query in &suite.queries {
                let m = measure(&suite, query, policy, iteration, &config).await?;
                eprintln!(
                    "{:>10} {:<16} {:<10} {:>9.1} ms  ttfb {:>8.1} ms  {:>5} requests  peak staged {:>6.1} MiB",
                    suite.name,
                    query.name,
                    policy,
                    m.wall_ms,
                    m.ttfb_ms,
                    m.requests,
                    m.peak_staged_bytes as f64 / (1 << 20) as f64
                );
                report.add(m);
            }
        }
    }
    let all_match = report.check_results();
    println!("{}", report.markdown());
    if let Some(path) = &args.json {
        std::fs::write(path, report.json()?)?;
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, report.markdown())?;
    }
    if !all_match {
        eprintln!("prefetch-bench: RESULTS DIFFER FROM POLICY off (see matches_off above)");
    }
    Ok(all_match)
}
