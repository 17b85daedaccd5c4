//! `dfprefetch-ballista-scheduler`: a Ballista 55 scheduler whose sessions know
//! the `prefetch.*` settings, plan prefetching Parquet scans, and encode them
//! for the executors.
//!
//! ```text
//! dfprefetch-ballista-scheduler --port 50050 --store sim://bench=/data/tpch_sf1 --latency s3
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::scheduler_process::start_server;
use clap::Parser;
use datafusion_prefetch_ballista::{ObjectStores, scheduler_config};

/// A Ballista scheduler with prefetching Parquet scans.
#[derive(Debug, Parser)]
#[command(name = "dfprefetch-ballista-scheduler", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_host: String,
    /// Host name the executors and clients reach this scheduler by.
    #[arg(long, default_value = "localhost")]
    external_host: String,
    /// gRPC port.
    #[arg(long, default_value_t = 50050)]
    port: u16,
    /// An object store to register, `URL=DIR`: the local directory DIR served
    /// at URL (e.g. `sim://bench=/data/tpch_sf1`) through a simulated store.
    /// Repeatable. The scheduler lists files and reads footers through it.
    #[arg(long)]
    store: Vec<String>,
    /// First-byte latency of the simulated stores: `none`, `fixed:<ms>` or `s3`.
    #[arg(long, default_value = "none")]
    latency: String,
}

async fn run(args: Args) -> Result<(), String> {
    let stores = ObjectStores::from_specs(&args.store, &args.latency).map_err(|e| e.to_string())?;
    let address: SocketAddr = format!("{}:{}", args.bind_host, args.port)
        .parse()
        .map_err(|e| format!("--bind-host/--port: {e}"))?;
    let mut config = scheduler_config(stores).with_port(args.port);
    config.bind_host = args.bind_host;
    config.external_host = args.external_host;
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("dfprefetch-ballista-scheduler listening on {address}");
    start_server(cluster, address, Arc::new(config))
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dfprefetch-ballista-scheduler: {e}");
            ExitCode::FAILURE
        }
    }
}
