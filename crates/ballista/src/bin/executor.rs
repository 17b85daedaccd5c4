//! `dfprefetch-ballista-executor`: a Ballista 55 executor that decodes and runs
//! prefetching Parquet scans, with the object stores they read.
//!
//! ```text
//! dfprefetch-ballista-executor --port 50051 --grpc-port 50052 \
//!     --scheduler-port 50050 --store sim://bench=/data/tpch_sf1 --latency s3
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use ballista_executor::executor_process::start_executor_process;
use clap::Parser;
use datafusion_prefetch_ballista::{ObjectStores, executor_config};

/// A Ballista executor with prefetching Parquet scans.
#[derive(Debug, Parser)]
#[command(name = "dfprefetch-ballista-executor", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_host: String,
    /// Host name the scheduler and the other executors reach this one by.
    #[arg(long, default_value = "localhost")]
    external_host: String,
    /// Arrow Flight port (shuffle data).
    #[arg(long, default_value_t = 50051)]
    port: u16,
    /// gRPC port (tasks pushed by the scheduler).
    #[arg(long, default_value_t = 50052)]
    grpc_port: u16,
    /// The scheduler's host.
    #[arg(long, default_value = "localhost")]
    scheduler_host: String,
    /// The scheduler's gRPC port.
    #[arg(long, default_value_t = 50050)]
    scheduler_port: u16,
    /// Concurrent tasks (default: the number of cores).
    #[arg(long)]
    vcores: Option<usize>,
    /// Directory for shuffle files (default: a temporary directory).
    #[arg(long)]
    work_dir: Option<String>,
    /// An object store to register, `URL=DIR`: the local directory DIR served
    /// at URL (e.g. `sim://bench=/data/tpch_sf1`) through a simulated store.
    /// Repeatable; every URL the queries read must be registered.
    #[arg(long)]
    store: Vec<String>,
    /// First-byte latency of the simulated stores: `none`, `fixed:<ms>` or `s3`.
    #[arg(long, default_value = "none")]
    latency: String,
}

async fn run(args: Args) -> Result<(), String> {
    let stores = ObjectStores::from_specs(&args.store, &args.latency).map_err(|e| e.to_string())?;
    let mut config = executor_config(stores);
    config.bind_host = args.bind_host;
    config.external_host = Some(args.external_host);
    config.port = args.port;
    config.grpc_port = args.grpc_port;
    config.scheduler_host = args.scheduler_host;
    config.scheduler_port = args.scheduler_port;
    config.scheduler_connect_timeout_seconds = 30;
    if let Some(vcores) = args.vcores {
        config.vcores = vcores;
    }
    config.work_dir = args.work_dir;
    eprintln!(
        "dfprefetch-ballista-executor on port {} (scheduler {}:{})",
        config.port, config.scheduler_host, config.scheduler_port
    );
    start_executor_process(Arc::new(config))
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dfprefetch-ballista-executor: {e}");
            ExitCode::FAILURE
        }
    }
}
