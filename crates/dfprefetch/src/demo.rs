//! `dfprefetch demo`: prefetching off vs `auto` (the default policy) on a simulated remote store.
//!
//! 1. Writes 16 Parquet files (two row groups each) of deterministic data:
//!    `id` (sorted), `payload` (random `Int64`), `category` (8 strings) and
//!    `value` (a `Float64` in exact quarters, so sums do not depend on the
//!    order partitions add them in and results compare exactly).
//! 2. Serves them through a [`SimulatedStore`] over the local files, with the
//!    given latency (100 ms) on every request.
//! 3. Registers the table once in one prefetching session, then runs each
//!    query four times, interleaved off, auto, auto, off, and keeps
//!    each arm's faster run. Planning is outside the timer.
//! 4. Checks every run returns the rows of the first (the workspace's shared,
//!    order-insensitive result checksum), and
//!    that the peak of staged bytes stayed within the memory budget.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::physical_plan::collect;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{prefetch_stats, prefetching_context};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig, StoreStats};
use datafusion_prefetch_testdata::{Numbers, checksum, mix};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use url::Url;

use crate::cli::DemoArgs;
use crate::scan::ScanTotals;

/// Files in the dataset.
const FILES: usize = 16;
/// Row groups per file.
const ROW_GROUPS_PER_FILE: usize = 2;
/// The auto arm's memory budget, also the bound the demo checks.
const MEMORY_BUDGET_MIB: u64 = 256;
/// The auto arm's settings, in an order each `SET` validates in.
const DEFAULT_ARM: [(&str, &str); 3] = [
    ("memory_budget", "256MiB"),
    ("read_ahead_window", "auto"),
    ("file_open_depth", "auto"),
];
/// The values of `category`.
const CATEGORIES: [&str; 8] = [
    "books",
    "electronics",
    "garden",
    "grocery",
    "music",
    "outdoor",
    "toys",
    "travel",
];

/// The demo's queries: name and SQL over table `events`.
const QUERIES: [(&str, &str); 4] = [
    (
        "aggregate",
        "SELECT count(*) AS n, sum(payload) AS payload, avg(value) AS value, \
         min(id) AS first, max(id) AS last FROM events",
    ),
    (
        "group_by",
        "SELECT category, count(*) AS n, sum(value) AS value, max(payload) AS payload \
         FROM events GROUP BY category ORDER BY category",
    ),
    (
        "filter",
        "SELECT id, category, value FROM events WHERE payload % 1000 = 42",
    ),
    (
        "top_k",
        "SELECT id, payload, category FROM events ORDER BY payload DESC, id LIMIT 10",
    ),
];

/// The arms in the order they run for each query.
const ORDER: [Policy; 4] = [Policy::Off, Policy::Auto, Policy::Auto, Policy::Off];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Off,
    Auto,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Auto => "auto",
        }
    }
}

/// One timed execution.
#[derive(Debug, Clone)]
struct Run {
    wall: Duration,
    requests: u64,
    max_in_flight: u64,
    scans: ScanTotals,
    /// Row count and checksum of the result.
    result: (usize, String),
}

/// Generate the data, run the comparison, print the table. Fails (exit
/// status 1) if any result differs between runs or staging exceeded the budget.
pub async fn run(args: &DemoArgs, partitions: Option<std::num::NonZeroUsize>) -> Result<ExitCode> {
    // A temporary folder lives until the end of the demo.
    let (_temp, root) = match &args.keep {
        Some(dir) => (None, dir.clone()),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("dfprefetch-demo-")
                .tempdir()
                .map_err(DataFusionError::IoError)?;
            let root = temp.path().to_path_buf();
            (Some(temp), root)
        }
    };
    let started = Instant::now();
    eprintln!(
        "generating {} rows in {FILES} files under {} …",
        args.rows,
        root.display()
    );
    let dataset = generate(&root, args.rows)?;
    eprintln!("generated in {:.1} s", started.elapsed().as_secs_f64());

    let mut config = SessionConfig::new();
    if let Some(n) = partitions {
        config = config.with_target_partitions(n.get());
    }
    let ctx = prefetching_context(config);
    let partitions = ctx.copied_config().target_partitions();
    let local = LocalFileSystem::new_with_prefix(&root)?;
    let store = SimulatedStore::new(local, SimulatedStoreConfig::from_latency(args.latency));
    let store_stats = store.stats();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    ctx.register_object_store(&Url::parse("sim://demo").expect("valid url"), store);
    let registering = Instant::now();
    ctx.register_parquet(
        "events",
        "sim://demo/events/",
        ParquetReadOptions::default(),
    )
    .await?;
    eprintln!(
        "registered table events in {:.0} ms ({} requests: listing, footers)",
        registering.elapsed().as_secs_f64() * 1e3,
        store_stats.get_requests() + store_stats.head_requests() + store_stats.list_requests()
    );

    print_header(args, &dataset, partitions);

    let total_runs = QUERIES.len() * ORDER.len();
    let mut step = 0;
    let mut lines = vec![];
    let mut all_match = true;
    let mut over_budget = false;
    let (mut total_off, mut total_auto) = (Duration::ZERO, Duration::ZERO);
    for (name, sql) in QUERIES {
        let mut off: Vec<Run> = vec![];
        let mut auto: Vec<Run> = vec![];
        for policy in ORDER {
            step += 1;
            let run = run_once(&ctx, &store_stats, sql, policy).await?;
            eprintln!(
                "[{step:>2}/{total_runs}] {name:<10} {:<9} {:>9.1} ms {:>5} requests, \
                 at most {} in flight",
                policy.name(),
                millis(run.wall),
                run.requests,
                run.max_in_flight
            );
            match policy {
                Policy::Off => off.push(run),
                Policy::Auto => auto.push(run),
            }
        }
        let reference = &off[0].result;
        let matches = off.iter().chain(&auto).all(|r| &r.result == reference);
        all_match &= matches;
        let best_off = fastest(&off);
        let best_auto = fastest(&auto);
        let peak = auto
            .iter()
            .map(|r| r.scans.peak_staged_bytes)
            .max()
            .unwrap_or(0);
        over_budget |= peak > MEMORY_BUDGET_MIB << 20;
        total_off += best_off.wall;
        total_auto += best_auto.wall;
        lines.push(vec![
            name.to_string(),
            format!("{:.0}", millis(best_off.wall)),
            format!("{:.0}", millis(best_auto.wall)),
            format!("{:.2}x", ratio(best_off.wall, best_auto.wall)),
            format!("{}/{}", best_off.requests, best_auto.requests),
            format!("{:.1}", peak as f64 / (1 << 20) as f64),
            if matches { "yes".into() } else { "NO".into() },
        ]);
    }

    println!();
    print_table(
        &[
            "query",
            "off ms",
            "auto ms",
            "speedup",
            "requests off/auto",
            "peak staged MiB",
            "results match",
        ],
        &lines,
    );
    println!();
    println!(
        "total: off {:.0} ms, auto {:.0} ms: {:.2}x faster with prefetching",
        millis(total_off),
        millis(total_auto),
        ratio(total_off, total_auto)
    );
    if args.keep.is_some() {
        println!("dataset kept in {}", root.display());
    }
    let mut code = ExitCode::SUCCESS;
    if !all_match {
        eprintln!("Error: some query returned different results under off and auto");
        code = ExitCode::FAILURE;
    }
    if over_budget {
        eprintln!("Error: peak staged bytes exceeded the memory budget of {MEMORY_BUDGET_MIB} MiB");
        code = ExitCode::FAILURE;
    }
    Ok(code)
}

/// Plan `sql` under `policy` (untimed), then execute it (timed).
async fn run_once(
    ctx: &SessionContext,
    store_stats: &StoreStats,
    sql: &str,
    policy: Policy,
) -> Result<Run> {
    let mut settings = vec![];
    if policy == Policy::Auto {
        settings.extend(DEFAULT_ARM);
    }
    settings.push(("policy", policy.name()));
    for (key, value) in settings {
        ctx.sql(&format!("SET prefetch.{key} = '{value}'"))
            .await?
            .collect()
            .await?;
    }
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let scans = prefetch_stats(&plan);
    store_stats.reset();
    let started = Instant::now();
    let batches = collect(plan, ctx.task_ctx()).await?;
    let wall = started.elapsed();
    Ok(Run {
        wall,
        requests: store_stats.get_requests(),
        max_in_flight: store_stats.max_in_flight_gets(),
        scans: ScanTotals::of(&scans),
        result: checksum(&batches, Numbers::Exact)?,
    })
}

fn fastest(runs: &[Run]) -> &Run {
    runs.iter()
        .min_by_key(|r| r.wall)
        .expect("every arm runs at least once")
}

/// What was generated.
struct Dataset {
    rows: u64,
    bytes: u64,
    dir: PathBuf,
}

/// Write the dataset's files to `root/events/`, in parallel.
fn generate(root: &Path, rows: u64) -> Result<Dataset> {
    let dir = root.join("events");
    std::fs::create_dir_all(&dir)?;
    let names: Vec<String> = (0..FILES).map(|i| format!("part-{i:02}.parquet")).collect();
    // Only ever overwrite our own files: a stray Parquet file would join the table.
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !names.contains(&name) {
            return Err(DataFusionError::Execution(format!(
                "{} holds other files ({name}); choose an empty or new folder for --keep",
                dir.display()
            )));
        }
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(FILES);
    let results: Vec<Result<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (dir, names) = (&dir, &names);
                scope.spawn(move || {
                    let mut bytes = 0;
                    for file in (t..FILES).step_by(threads) {
                        let (first, count) = file_rows(rows, file);
                        bytes += write_file(&dir.join(&names[file]), first, count)?;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("generator thread panicked"))
            .collect()
    });
    let mut bytes = 0;
    for result in results {
        bytes += result?;
    }
    Ok(Dataset { rows, bytes, dir })
}

/// The first id and row count of `file`: rows are spread evenly.
fn file_rows(rows: u64, file: usize) -> (u64, u64) {
    let files = FILES as u64;
    let (base, extra) = (rows / files, rows % files);
    let file = file as u64;
    let first = file * base + file.min(extra);
    (first, base + u64::from(file < extra))
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("payload", DataType::Int64, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
    ]))
}

/// Write rows `first..first + count` to `path`; returns the file's size.
fn write_file(path: &Path, first: u64, count: u64) -> Result<u64> {
    let schema = schema();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some((count as usize).div_ceil(ROW_GROUPS_PER_FILE).max(1)))
        .build();
    let file = std::fs::File::create(path)?;
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))?;
    const CHUNK: u64 = 65_536;
    let mut start = first;
    while start < first + count {
        let end = (start + CHUNK).min(first + count);
        let ids: Vec<i64> = (start..end).map(|i| i as i64).collect();
        let payload: Int64Array = (start..end)
            .map(|i| (mix(i) % 1_000_000_000) as i64)
            .collect();
        let category: StringArray = (start..end)
            .map(|i| Some(CATEGORIES[(mix(i ^ 0xC0FFEE) % CATEGORIES.len() as u64) as usize]))
            .collect();
        // Quarters below 100,000: every sum of them is exact in an f64.
        let value: Float64Array = (start..end)
            .map(|i| (mix(i ^ 0xF00D) % 400_000) as f64 / 4.0)
            .collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(payload),
                Arc::new(category),
                Arc::new(value),
            ],
        )?;
        writer.write(&batch)?;
        start = end;
    }
    writer.close()?;
    Ok(std::fs::metadata(path)?.len())
}

fn print_header(args: &DemoArgs, dataset: &Dataset, partitions: usize) {
    let mib = dataset.bytes as f64 / (1 << 20) as f64;
    let row_groups = FILES * ROW_GROUPS_PER_FILE;
    println!("dfprefetch demo");
    println!(
        "  data:     {FILES} Parquet files, {} rows, {mib:.1} MiB, {ROW_GROUPS_PER_FILE} row groups \
         per file (~{:.1} MiB each), in {}",
        dataset.rows,
        mib / row_groups as f64,
        dataset.dir.display()
    );
    println!(
        "  store:    SimulatedStore over the local files, {} per request (GET, HEAD and LIST)",
        args.latency
    );
    println!(
        "  session:  one prefetching SessionContext, target_partitions = {partitions}; the table is \
         registered once, which reads every footer into the session's metadata cache, so both arms \
         run with the same warm footers and cold data"
    );
    println!(
        "  timing:   planning outside the timer; runs interleaved off, auto, auto, off; \
         each arm's faster run is shown"
    );
    println!(
        "  off:       SET prefetch.policy = 'off' (stock DataFusion: one request at a time per partition)"
    );
    println!(
        "  auto:      SET prefetch.policy = 'auto' (the default), with the settings below set explicitly \
         (they are today's defaults, see docs/configuration.md; pinned so the demo does not move \
         with them):"
    );
    println!(
        "    read_ahead_window = auto   how far one partition's stream may fetch ahead of its \
         decoder: auto keeps about what its decoder consumes in two round trips plus one 8 MiB \
         transfer (measured), up to the partition's share of the budget; a row group here is \
         ~{:.1} MiB and at {} per request decodes in much less than a round trip, so many must be \
         in flight for the decoder never to wait",
        mib / row_groups as f64,
        args.latency
    );
    println!(
        "    file_open_depth = auto     footers of as many upcoming files as that lead covers \
         (8 to 64) are read, and their first row groups fetched, while the current file \
         decodes, hiding the per-file round trips; {FILES} files over {partitions} partitions"
    );
    println!(
        "    memory_budget = 256MiB     hard cap on bytes staged by one scan across all its \
         partitions; the peak is checked against it below"
    );
}

/// A plain aligned table.
fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let cells: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, width))| {
                if i == 0 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        println!("| {} |", cells.join(" | "));
    };
    line(header.to_vec());
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn ratio(off: Duration, auto: Duration) -> f64 {
    off.as_secs_f64() / auto.as_secs_f64().max(1e-9)
}
