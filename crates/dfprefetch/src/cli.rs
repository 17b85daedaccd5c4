//! Command-line arguments.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use datafusion_prefetch_simstore::LatencyModel;

/// A SQL shell and runner for Apache DataFusion whose every Parquet scan
/// prefetches.
///
/// Runs the SQL given with `-c` (in order) and `-f`, or an interactive shell
/// when neither is given. Tune prefetching with SQL, e.g.
/// `SET prefetch.policy = 'auto' | 'off' | 'batched' | 'pipelined' | 'streaming'`,
/// `SET prefetch.read_ahead_window = '64MiB'`, `SHOW prefetch.policy`.
#[derive(Debug, Parser)]
#[command(name = "dfprefetch", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Register a Parquet table: NAME=URL, where URL is a local file or
    /// folder, file://…, s3://bucket/prefix, gs://bucket/prefix,
    /// az://container/prefix, abfss://…, or http(s)://…. Cloud credentials
    /// come from the environment (AWS_*, GOOGLE_*, AZURE_*); AWS_ENDPOINT and
    /// AWS_ALLOW_HTTP=true select an S3-compatible server.
    #[arg(long = "table", value_name = "NAME=URL", value_parser = parse_table)]
    pub tables: Vec<TableArg>,

    /// SQL to run; repeat to run several, in order. A value may hold several
    /// statements separated by `;`.
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub commands: Vec<String>,

    /// A file of `;`-separated SQL statements to run (after any `-c`).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// How query results are written to stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// After each statement print one JSON line of metrics to stderr.
    #[arg(long)]
    pub metrics: bool,

    /// Add a per-request delay to every object store (local files too):
    /// `none`, `fixed:50`, `50ms`, `1.5s` or `s3` (an S3-like distribution
    /// with 100 MiB/s per connection and 128 connections).
    #[arg(long, value_name = "MODEL")]
    pub simulate_latency: Option<LatencyModel>,

    /// Limit every object store connection to this many MiB/s.
    #[arg(long, value_name = "MiB/s", value_parser = parse_bandwidth)]
    pub simulate_bandwidth: Option<f64>,

    /// Target partitions (DataFusion's `target_partitions`; default: the
    /// number of cores).
    #[arg(long, value_name = "N", global = true)]
    pub partitions: Option<NonZeroUsize>,

    /// A subcommand instead of SQL.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a small Parquet dataset, serve it through a simulated
    /// high-latency object store, and time a few queries with prefetching off
    /// and `auto` (the default).
    Demo(DemoArgs),
}

/// Arguments of `dfprefetch demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Per-request latency of the simulated store (`fixed:100`, `100ms`,
    /// `s3`, …).
    #[arg(long, value_name = "MODEL", default_value = "fixed:100")]
    pub latency: LatencyModel,

    /// Total rows, spread over 16 files of two row groups each.
    #[arg(long, value_name = "N", default_value_t = 4_000_000,
          value_parser = clap::value_parser!(u64).range(16..=100_000_000))]
    pub rows: u64,

    /// Write the dataset to DIR and keep it (default: a temporary folder,
    /// deleted at the end).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}

/// Output format of query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned text table.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON array of row objects per statement.
    Json,
    /// One JSON object per row (newline-delimited JSON).
    Ndjson,
}

/// One `--table NAME=URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableArg {
    /// The table name used in SQL.
    pub name: String,
    /// Where the Parquet files are.
    pub url: String,
}

fn parse_table(value: &str) -> Result<TableArg, String> {
    let (name, url) = value
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=URL, got '{value}'"))?;
    let (name, url) = (name.trim(), url.trim());
    if name.is_empty() || url.is_empty() {
        return Err(format!("expected NAME=URL, got '{value}'"));
    }
    Ok(TableArg {
        name: name.to_string(),
        url: url.to_string(),
    })
}

fn parse_bandwidth(value: &str) -> Result<f64, String> {
    let mib: f64 = value
        .trim()
        .trim_end_matches("MiB/s")
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of MiB/s such as 100, got '{value}'"))?;
    if !mib.is_finite() || mib <= 0.0 {
        return Err(format!(
            "bandwidth must be a positive number of MiB/s, got '{value}'"
        ));
    }
    Ok(mib)
}
