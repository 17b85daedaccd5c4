//! `dfprefetch`: a SQL shell and runner for Apache DataFusion whose every
//! Parquet scan prefetches, plus a self-contained `demo` of what that buys on
//! a high-latency object store.
//!
//! The session comes from [`datafusion_prefetch::prefetching_context`], so the
//! `prefetch.*` settings are plain SQL:
//!
//! ```text
//! $ dfprefetch --table trips=s3://my-bucket/trips/ --metrics \
//!     -c "SET prefetch.policy = 'streaming'" \
//!     -c "SELECT count(*) FROM trips"
//! ```
//!
//! * Tables: `--table NAME=URL`, where URL is a local path, `file://…`,
//!   `s3://bucket/prefix` (credentials, region, `AWS_ENDPOINT` and
//!   `AWS_ALLOW_HTTP` from the environment), `gs://…`, `az://…`/`abfss://…` or
//!   `http(s)://…`. Each becomes a Parquet listing table.
//! * SQL: `-c SQL` (repeatable, run in order), `-f FILE` (split into statements
//!   with DataFusion's parser), or an interactive shell when neither is given.
//! * `--simulate-latency` / `--simulate-bandwidth` wrap every object store,
//!   local files included, in a `SimulatedStore`, so a laptop behaves like S3.
//! * `--metrics` prints one JSON line per statement to stderr: wall time, time
//!   to first batch, rows, requests, bytes fetched and wasted, peak staged
//!   bytes and the policy in force.
//! * `dfprefetch demo` writes a small dataset, serves it with 100 ms per
//!   request and times a few queries with prefetching off and `auto` (the default).
//!
//! Any SQL error prints `Error: <message>` to stderr; in `-c`/`-f` mode the run
//! stops there and the process exits with status 1.

mod cli;
mod demo;
mod output;
mod scan;
mod session;
mod shell;
mod stores;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::session::{Session, SessionOptions};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match &cli.command {
        Some(Command::Demo(args)) => runtime.block_on(demo::run(args, cli.partitions)),
        None => run_sql(&runtime, &cli),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Register the tables, then run `-c`/`-f` SQL, or the shell when there is none.
fn run_sql(runtime: &tokio::runtime::Runtime, cli: &Cli) -> datafusion::common::Result<ExitCode> {
    let options = SessionOptions {
        partitions: cli.partitions,
        simulate_latency: cli.simulate_latency,
        simulate_bandwidth: cli.simulate_bandwidth,
        format: cli.format,
        metrics: cli.metrics,
    };
    let mut session = Session::new(options)?;
    let tables: Vec<(&str, &str)> = cli
        .tables
        .iter()
        .map(|t| (t.name.as_str(), t.url.as_str()))
        .collect();
    runtime.block_on(session.register_tables(&tables))?;
    if cli.commands.is_empty() && cli.files.is_empty() {
        shell::run(runtime, &mut session)?;
        return Ok(ExitCode::SUCCESS);
    }
    for sql in &cli.commands {
        runtime.block_on(session.run_sql(sql))?;
    }
    for file in &cli.files {
        let sql = std::fs::read_to_string(file).map_err(|e| {
            datafusion::common::DataFusionError::Execution(format!(
                "cannot read {}: {e}",
                file.display()
            ))
        })?;
        runtime.block_on(session.run_sql(&sql))?;
    }
    Ok(ExitCode::SUCCESS)
}
