//! `--engine ballista`: a Ballista scheduler and executors as processes of
//! their own on loopback, each serving the suite's data through its own
//! simulated store.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::prelude::SessionConfig;
use datafusion_prefetch_ballista::{ObjectStores, ballista_prefetching_context};

/// The scheduler and executor processes; stopped when dropped.
pub struct Cluster {
    children: Vec<Child>,
    /// The scheduler, as `df://127.0.0.1:<port>`.
    pub url: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port free right now on loopback (the processes bind it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `name` next to this executable (cargo builds the binaries of the workspace
/// into the same directory).
fn sibling_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate prefetch-bench: {e}"))?;
    let path = exe.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build --release -p datafusion-prefetch-ballista`",
            path.display()
        ))
    }
}

impl Cluster {
    /// Start a scheduler and `executors` executors (`vcores` task slots each)
    /// serving `data_dir` at `sim://bench` with `latency`, and wait until a
    /// query runs on them.
    pub async fn start(
        data_dir: &Path,
        latency: &str,
        executors: usize,
        vcores: usize,
    ) -> Result<Self, String> {
        let store = format!("sim://bench={}", data_dir.display());
        let scheduler_port = free_port().map_err(|e| e.to_string())?;
        let mut cluster = Cluster {
            children: vec![],
            url: format!("df://127.0.0.1:{scheduler_port}"),
        };
        let spawn = |command: &mut Command| {
            command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))
        };
        cluster.children.push(spawn(
            Command::new(sibling_binary("dfprefetch-ballista-scheduler")?)
                .args(["--port", &scheduler_port.to_string()])
                .args(["--external-host", "127.0.0.1"])
                .args(["--store", &store, "--latency", latency]),
        )?);
        for _ in 0..executors {
            let (port, grpc_port) = (free_port(), free_port());
            let (port, grpc_port) = (
                port.map_err(|e| e.to_string())?,
                grpc_port.map_err(|e| e.to_string())?,
            );
            cluster.children.push(spawn(
                Command::new(sibling_binary("dfprefetch-ballista-executor")?)
                    .args(["--port", &port.to_string()])
                    .args(["--grpc-port", &grpc_port.to_string()])
                    .args(["--external-host", "127.0.0.1"])
                    .args(["--scheduler-host", "127.0.0.1"])
                    .args(["--scheduler-port", &scheduler_port.to_string()])
                    .args(["--vcores", &vcores.to_string()])
                    .args(["--store", &store, "--latency", latency]),
            )?);
        }
        cluster.wait_until_ready().await?;
        Ok(cluster)
    }

    /// Run a trivial query until it succeeds: the scheduler answers and an
    /// executor has registered.
    async fn wait_until_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let attempt = async {
                let ctx = ballista_prefetching_context(
                    &self.url,
                    SessionConfig::new(),
                    &ObjectStores::new(),
                )
                .await?;
                ctx.sql("SELECT 1").await?.collect().await
            };
            match tokio::time::timeout(Duration::from_secs(10), attempt).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) if started.elapsed() > Duration::from_secs(60) => {
                    return Err(format!("the Ballista cluster did not start: {e}"));
                }
                Err(_) if started.elapsed() > Duration::from_secs(60) => {
                    return Err("the Ballista cluster did not start within 60 s".into());
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}
