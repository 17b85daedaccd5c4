//! `--suite many_files`: how cost grows with the number of files. For each
//! size in `--files` (default 10,000 and 100,000 files of 100 rows), each
//! policy registers the table (a `PrefetchingParquetTable`, which under `off`
//! plans as stock DataFusion does) and plans `SELECT count(*), sum(payload)`
//! in a fresh session over the simulated store (timed: planning lists the
//! files and reads footers), then executes it (timed: time to first batch, execution).
//! Reported per size and policy: planning, time to first batch, execution,
//! end-to-end wall, store requests (planning and execution), and the log-log
//! slope of each time between the smallest and the largest size, which says
//! how it grows with the number of files (1 = linearly).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;
use datafusion_prefetch::{
    PrefetchingParquetTable, RequestPrice, prefetch_stats, prefetching_context,
};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
use datafusion_prefetch_testdata::{Numbers, canonical_lines, checksum};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use serde::Serialize;
use url::Url;

use crate::datagen::{parallel, write_id_payload};
use crate::run::{Executed, execute_timed, set_prefetch};

/// The query every size and policy runs.
const SQL: &str = "SELECT count(*), sum(payload) FROM t";

/// Rows in each generated file (one row group).
const ROWS_PER_FILE: usize = 100;

/// Files each generator job writes.
const FILES_PER_JOB: usize = 1_000;

/// How one `many_files` run is set up.
#[derive(Debug, Clone)]
pub struct ManyFilesConfig {
    pub sizes: Vec<usize>,
    pub policies: Vec<String>,
    pub store: SimulatedStoreConfig,
    pub latency_label: String,
    pub partitions: usize,
    /// `prefetch.*` settings other than the policy, as `(key, value)`.
    pub settings: Vec<(String, String)>,
    pub iterations: usize,
    pub data_dir: PathBuf,
    pub json: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
struct Run {
    suite: &'static str,
    files: usize,
    policy: String,
    iteration: usize,
    latency: String,
    /// Registering the table and planning the query (listing, footers).
    plan_ms: f64,
    /// From the start of execution to the first batch.
    ttfb_ms: f64,
    /// Execution, to the last batch.
    exec_ms: f64,
    /// Planning and execution.
    wall_ms: f64,
    plan_requests: u64,
    exec_requests: u64,
    /// Every request the store received, planning and execution: GETs,
    /// HEADs and LIST pages, each retry after a `503` one of its own.
    attempts: u64,
    /// Requests the store answered `503 SlowDown` (see `--rate-limit`).
    throttled: u64,
    /// Of those, while planning.
    plan_throttled: u64,
    /// GETs `auto`'s scans sent again beside one that had not answered,
    /// and those whose answer was read.
    hedges: u64,
    hedges_won: u64,
    /// Data requests the scans did not send: `auto`'s planning read their
    /// small files whole and kept them.
    requests_kept: u64,
    rows: usize,
    checksum: String,
    /// The result's one row, cells joined by `,`.
    answer: String,
}

/// The medians of one size and policy.
#[derive(Debug, Clone, Serialize)]
struct Summary {
    suite: &'static str,
    files: usize,
    policy: String,
    latency: String,
    plan_ms: f64,
    ttfb_ms: f64,
    exec_ms: f64,
    wall_ms: f64,
    plan_requests: u64,
    exec_requests: u64,
    /// Attempts the store received (retries after `503`s included).
    attempts: f64,
    /// `503 SlowDown`s while planning, and while executing.
    plan_throttled: f64,
    exec_throttled: f64,
    hedges: f64,
    hedges_won: f64,
    requests_kept: f64,
    /// The attempts at S3 Standard's $0.0004 per 1,000 GETs, in dollars.
    cost_usd: f64,
    /// End-to-end speedup over `off` at this size.
    speedup_vs_off: f64,
    matches_off: bool,
}

/// Log-log slope of one policy's times between the smallest and the largest size.
#[derive(Debug, Clone, Serialize)]
struct Slope {
    policy: String,
    from_files: usize,
    to_files: usize,
    plan: f64,
    exec: f64,
    wall: f64,
}

/// The table folder of `files` files, generated once.
fn prepare(data_dir: &Path, files: usize) -> Result<PathBuf> {
    let dir = data_dir.join(format!("many_files_{files}"));
    let done = dir.join(".complete");
    if !done.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        eprintln!("generating {files} files in {}", dir.display());
        let started = Instant::now();
        let table = dir.join("t");
        let jobs: Vec<usize> = (0..files.div_ceil(FILES_PER_JOB)).collect();
        parallel(&jobs, |&job| {
            let first = job * FILES_PER_JOB;
            let count = FILES_PER_JOB.min(files - first);
            // Each job writes in a folder of its own, then moves its files
            // into the table's one folder (DataFusion does not list
            // subfolders) under names numbered across jobs.
            let scratch = dir.join(format!("job-{job:04}"));
            write_id_payload(&scratch, count, ROWS_PER_FILE, ROWS_PER_FILE, 1)?;
            std::fs::create_dir_all(&table)?;
            for i in 0..count {
                std::fs::rename(
                    scratch.join(format!("part-{i:05}.parquet")),
                    table.join(format!("part-{:07}.parquet", first + i)),
                )?;
            }
            std::fs::remove_dir(&scratch)?;
            Ok(())
        })?;
        eprintln!(
            "generated {files} files in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        std::fs::write(&done, b"")?;
    }
    Ok(dir)
}

async fn measure(
    dir: &Path,
    files: usize,
    policy: &str,
    iteration: usize,
    config: &ManyFilesConfig,
) -> Result<Run> {
    let session = SessionConfig::new().with_target_partitions(config.partitions);
    let ctx = prefetching_context(session);
    let store = SimulatedStore::new(LocalFileSystem::new_with_prefix(dir)?, config.store)
        .with_attempt_observer(crate::run::tell_scans);
    let stats = store.stats();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    ctx.register_object_store(&Url::parse("sim://bench").expect("valid url"), store);
    set_prefetch(&ctx, policy, &config.settings).await?;

    let started = Instant::now();
    let table = PrefetchingParquetTable::builder("sim://bench/t/")
        .build(&ctx.state())
        .await?;
    ctx.register_table("t", Arc::new(table))?;
    let plan = ctx.sql(SQL).await?.create_physical_plan().await?;
    let planned = started.elapsed();
    let scans = prefetch_stats(&plan);
    let plan_requests = stats.get_requests();
    let plan_throttled = stats.throttled();

    let Executed {
        batches,
        ttfb,
        wall: executed,
    } = execute_timed(plan, &ctx).await?;
    let (rows, checksum) = checksum(&batches, Numbers::Exact)?;
    let answer = canonical_lines(&batches, Numbers::Exact)?
        .join(";")
        .replace('\u{1f}', ",");
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    Ok(Run {
        suite: "many_files",
        files,
        policy: policy.to_string(),
        iteration,
        latency: config.latency_label.clone(),
        plan_ms: ms(planned),
        ttfb_ms: ms(ttfb.unwrap_or(executed)),
        exec_ms: ms(executed),
        wall_ms: ms(planned + executed),
        plan_requests,
        exec_requests: stats.get_requests() - plan_requests,
        attempts: stats.attempts(),
        throttled: stats.throttled(),
        plan_throttled,
        hedges: scans.iter().map(|s| s.requests_hedged()).sum(),
        hedges_won: scans.iter().map(|s| s.hedges_won()).sum(),
        requests_kept: scans.iter().map(|s| s.requests_kept()).sum(),
        rows,
        checksum,
        answer,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn summarize(runs: &[Run], sizes: &[usize], policies: &[String]) -> Vec<Summary> {
    let mut out = vec![];
    for &files in sizes {
        let of = |policy: &str| -> Vec<&Run> {
            runs.iter()
                .filter(|r| r.files == files && r.policy == policy)
                .collect()
        };
        let off = of("off");
        let off_wall = median(off.iter().map(|r| r.wall_ms).collect());
        for policy in policies {
            let mine = of(policy);
            let m = |f: fn(&Run) -> f64| median(mine.iter().map(|r| f(r)).collect());
            let wall = m(|r| r.wall_ms);
            out.push(Summary {
                suite: "many_files",
                files,
                policy: policy.clone(),
                latency: mine.first().map_or(String::new(), |r| r.latency.clone()),
                plan_ms: m(|r| r.plan_ms),
                ttfb_ms: m(|r| r.ttfb_ms),
                exec_ms: m(|r| r.exec_ms),
                wall_ms: wall,
                plan_requests: mine.first().map_or(0, |r| r.plan_requests),
                exec_requests: mine.first().map_or(0, |r| r.exec_requests),
                attempts: m(|r| r.attempts as f64),
                plan_throttled: m(|r| r.plan_throttled as f64),
                exec_throttled: m(|r| (r.throttled - r.plan_throttled) as f64),
                hedges: m(|r| r.hedges as f64),
                hedges_won: m(|r| r.hedges_won as f64),
                requests_kept: m(|r| r.requests_kept as f64),
                cost_usd: m(|r| RequestPrice::default().cost_of(r.attempts)),
                speedup_vs_off: off_wall / wall,
                matches_off: mine.iter().all(|r| {
                    off.first()
                        .is_some_and(|o| (o.rows, &o.checksum) == (r.rows, &r.checksum))
                }),
            });
        }
    }
    out
}

fn slopes(summaries: &[Summary], sizes: &[usize], policies: &[String]) -> Vec<Slope> {
    let (Some(&small), Some(&large)) = (sizes.iter().min(), sizes.iter().max()) else {
        return vec![];
    };
    if small == large {
        return vec![];
    }
    let at = |files: usize, policy: &str| {
        summaries
            .iter()
            .find(|s| s.files == files && s.policy == policy)
            .expect("a summary per size and policy")
    };
    let slope = |a: f64, b: f64| (b / a).ln() / (large as f64 / small as f64).ln();
    policies
        .iter()
        .map(|policy| {
            let (a, b) = (at(small, policy), at(large, policy));
            Slope {
                policy: policy.clone(),
                from_files: small,
                to_files: large,
                plan: slope(a.plan_ms, b.plan_ms),
                exec: slope(a.exec_ms, b.exec_ms),
                wall: slope(a.wall_ms, b.wall_ms),
            }
        })
        .collect()
}

fn markdown(config: &ManyFilesConfig, summaries: &[Summary], slopes: &[Slope]) -> String {
    let mut out = format!(
        "many_files: {SQL}, files of {ROWS_PER_FILE} rows, latency {}, {} partition(s), median of {} iteration(s)\n\n",
        config.latency_label, config.partitions, config.iterations
    );
    out.push_str("| files | policy | plan ms | ttfb ms | exec ms | wall ms | vs off | requests (plan / exec) | kept | attempts | 503s (plan / exec) | hedges (won) | request cost | matches off |\n");
    out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for s in summaries {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {} / {} | {:.0} | {:.0} | {:.0} / {:.0} | {:.0} ({:.0}) | ${:.6} | {} |\n",
            s.files,
            s.policy,
            s.plan_ms,
            s.ttfb_ms,
            s.exec_ms,
            s.wall_ms,
            s.speedup_vs_off,
            s.plan_requests,
            s.exec_requests,
            s.requests_kept,
            s.attempts,
            s.plan_throttled,
            s.exec_throttled,
            s.hedges,
            s.hedges_won,
            s.cost_usd,
            if s.matches_off { "yes" } else { "NO" }
        ));
    }
    if !slopes.is_empty() {
        out.push_str("\n| policy | log-log slope, files | plan | exec | wall |\n");
        out.push_str("|---|---|---:|---:|---:|\n");
        for s in slopes {
            out.push_str(&format!(
                "| {} | {} → {} | {:.2} | {:.2} | {:.2} |\n",
                s.policy, s.from_files, s.to_files, s.plan, s.exec, s.wall
            ));
        }
    }
    out
}

/// Run every size under every policy (`off` first); `Ok(false)` when a
/// result differs from `off`'s.
pub async fn run(config: &ManyFilesConfig) -> Result<bool> {
    let mut policies = vec!["off".to_string()];
    policies.extend(config.policies.iter().filter(|p| *p != "off").cloned());
    let mut runs = vec![];
    for &files in &config.sizes {
        let dir = prepare(&config.data_dir, files)?;
        for iteration in 0..config.iterations {
            let mut order = policies.clone();
            if iteration % 2 == 1 {
                order.reverse();
            }
            for policy in &order {
                let run = measure(&dir, files, policy, iteration, config)
                    .await
                    .map_err(|e| {
                        DataFusionError::Execution(format!("{files} files under {policy}: {e}"))
                    })?;
                eprintln!(
                    "many_files {files:>7} {policy:<10} plan {:>9.1} ms  ttfb {:>8.1} ms  exec {:>9.1} ms  requests {} / {}  attempts {}  503s {} / {}",
                    run.plan_ms,
                    run.ttfb_ms,
                    run.exec_ms,
                    run.plan_requests,
                    run.exec_requests,
                    run.attempts,
                    run.plan_throttled,
                    run.throttled - run.plan_throttled
                );
                runs.push(run);
            }
        }
    }
    let summaries = summarize(&runs, &config.sizes, &policies);
    let slopes = slopes(&summaries, &config.sizes, &policies);
    let markdown = markdown(config, &summaries, &slopes);
    println!("{markdown}");
    if let Some(path) = &config.json {
        let out = serde_json::json!({ "runs": runs, "summaries": summaries, "slopes": slopes });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&out).expect("serializable"),
        )?;
    }
    if let Some(path) = &config.markdown {
        std::fs::write(path, &markdown)?;
    }
    let all_match = summaries.iter().all(|s| s.matches_off);
    if !all_match {
        eprintln!("prefetch-bench: RESULTS DIFFER FROM POLICY off (see matches off above)");
    }
    Ok(all_match)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Two small sizes: every run answers as `off`, every row is counted,
    /// and the JSON carries the summaries and the slopes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sizes_and_policies_are_measured_and_match_off() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = ManyFilesConfig {
            sizes: vec![20, 60],
            policies: vec!["auto".into()],
            store: SimulatedStoreConfig::fixed(Duration::from_millis(2)),
            latency_label: "fixed:2".into(),
            partitions: 2,
            settings: vec![],
            iterations: 1,
            data_dir: dir.path().to_path_buf(),
            json: Some(dir.path().join("many_files.json")),
            markdown: None,
        };
        assert!(run(&config).await.expect("runs"));
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("many_files.json")).unwrap(),
        )
        .unwrap();
        let summaries = json["summaries"].as_array().unwrap();
        assert_eq!(summaries.len(), 4);
        for s in summaries {
            assert_eq!(s["matches_off"], true, "{s}");
            assert!(s["plan_ms"].as_f64().unwrap() > 0.0, "{s}");
            // Every GET is an attempt, and so is the listing.
            let gets = s["plan_requests"].as_f64().unwrap() + s["exec_requests"].as_f64().unwrap();
            assert!(s["attempts"].as_f64().unwrap() > gets, "{s}");
        }
        let runs = json["runs"].as_array().unwrap();
        let sixty = runs.iter().find(|r| r["files"] == 60).unwrap();
        assert!(
            sixty["answer"].as_str().unwrap().starts_with("6000,"),
            "{sixty}"
        );
        assert_eq!(json["slopes"].as_array().unwrap().len(), 2);
    }
}
