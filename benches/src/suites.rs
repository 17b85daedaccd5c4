//! Benchmark suites: the data each one generates (once, into a cache folder)
//! and the queries it runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::{clickbench, tpch};

/// A named query of a suite.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
    /// Whether the result depends on how ties at a `LIMIT` are broken (or has
    /// a `LIMIT` without a total order). With one partition DataFusion breaks
    /// them the same way every run; with more it need not, even under `off`,
    /// so the check then compares row counts only.
    pub ties: bool,
}

/// What a suite scans and asks.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: &'static str,
    /// Folder holding the suite's tables, one sub-folder per table.
    pub data_dir: PathBuf,
    pub tables: Vec<&'static str>,
    pub queries: Vec<Query>,
    /// Round trips on each table scan's critical path that no read-ahead can
    /// hide; the floor of a query counts them once per scan in its plan.
    pub dependent_round_trips: u32,
}

/// Every suite this binary knows.
pub const SUITES: [&str; 6] = [
    "cross_file",
    "single_row_group",
    "four_row_groups",
    "many_small_files",
    "tpch",
    "clickbench",
];

/// Which copy of the ClickBench table the `clickbench` suite queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClickbenchCopy {
    /// `hits`: like the published files, no page index.
    Published,
    /// `hits_page_index`: with a column and offset index.
    #[value(name = "page_index", alias = "page-index")]
    PageIndex,
    /// Both, each query twice (`q0` and `q0_page_index`).
    Both,
}

/// What shapes the generated data of the `tpch` and `clickbench` suites.
#[derive(Debug, Clone, Copy)]
pub struct SuiteOptions {
    /// TPC-H scale factor; ClickBench: 1 = 4 files of 1M rows.
    pub scale: f64,
    pub clickbench_copy: ClickbenchCopy,
}

/// `id`, then `payload` and `payload_2 … payload_n` for `payload_columns` = n.
fn id_payload_schema(payload_columns: usize) -> SchemaRef {
    let mut fields = vec![Field::new("id", DataType::UInt64, false)];
    for column in 1..=payload_columns {
        let name = match column {
            1 => "payload".to_string(),
            n => format!("payload_{n}"),
        };
        fields.push(Field::new(name, DataType::Int64, false));
    }
    Arc::new(Schema::new(fields))
}

/// SplitMix64: deterministic, incompressible payloads.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Write `files` files of `rows` rows each, `row_group_rows` rows per row group.
fn write_id_payload(
    dir: &Path,
    files: usize,
    rows: usize,
    row_group_rows: usize,
    payload_columns: usize,
) -> Result<()> {
    let schema = id_payload_schema(payload_columns);
    fs::create_dir_all(dir)?;
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_max_row_group_bytes(None)
        .build();
    for file in 0..files {
        let path = dir.join(format!("part-{file:05}.parquet"));
        let tmp = path.with_extension("parquet.tmp");
        let mut writer = ArrowWriter::try_new(
            fs::File::create(&tmp)?,
            Arc::clone(&schema),
            Some(props.clone()),
        )?;
        let first = (file * rows) as u64;
        let chunk = 1 << 20;
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let ids: Vec<u64> = (first + start as u64..first + (start + n) as u64).collect();
            let mut columns: Vec<ArrayRef> = vec![];
            for column in 1..=payload_columns as u64 {
                let payload: Int64Array = ids
                    .iter()
                    .map(|i| (mix(i.wrapping_mul(column)) >> 1) as i64)
                    .collect();
                columns.push(Arc::new(payload));
            }
            columns.insert(0, Arc::new(UInt64Array::from(ids)));
            let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
            writer.write(&batch)?;
            start += n;
        }
        writer.close()?;
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// Run `work` on every job, on as many threads as there are cores.
pub fn parallel<T: Sync>(jobs: &[T], work: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::SeqCst)) {
                        if let Err(e) = work(job) {
                            // Let the other workers stop at their next job.
                            next.store(jobs.len(), Ordering::SeqCst);
                            return Err(e);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a generator thread panicked"))
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}

/// The tables and queries of a suite, before its data is generated.
struct Definition {
    tables: Vec<&'static str>,
    /// `(name, sql, ties)`, see [`Query::ties`].
    queries: Vec<(String, String, bool)>,
    dependent_round_trips: u32,
}

fn definition(name: &str, options: &SuiteOptions) -> Result<Definition> {
    let one_table = |queries: Vec<(&str, &str)>| Definition {
        tables: vec!["t"],
        queries: queries
            .into_iter()
            .map(|(n, sql)| (n.to_string(), sql.to_string(), false))
            .collect(),
        dependent_round_trips: 1,
    };
    Ok(match name {
        "cross_file" => one_table(vec![("sum_payload", "SELECT sum(payload) FROM t")]),
        "single_row_group" | "four_row_groups" => one_table(vec![(
            "full_scan",
            "SELECT sum(payload), sum(payload_2), sum(payload_3), sum(payload_4), max(id) FROM t",
        )]),
        "many_small_files" => one_table(vec![
            ("sum_payload", "SELECT sum(payload) FROM t"),
            (
                "count_filtered",
                "SELECT count(*) FROM t WHERE payload % 7 = 0",
            ),
        ]),
        // One dependent round trip per table scan: a scan's first data read
        // waits for nothing the read-ahead could start earlier (footers are
        // read at planning), and a join's build side is complete before its
        // probe side's scan is needed, so a query's scans mostly follow one
        // another. The floor multiplies this by the scans in the plan.
        // Every TPC-H LIMIT (q2, q3, q10, q18, q21) follows an ORDER BY whose
        // keys are unique or practically so (decimal revenues, prices).
        "tpch" => Definition {
            tables: tpch::TABLES.to_vec(),
            queries: tpch::QUERIES
                .iter()
                .map(|(n, sql)| (n.to_string(), sql.to_string(), false))
                .collect(),
            dependent_round_trips: 1,
        },
        // Every ClickBench query scans `hits` once: one dependent round trip.
        "clickbench" => {
            use ClickbenchCopy::*;
            let copy = options.clickbench_copy;
            let mut tables = vec![];
            if matches!(copy, Published | Both) {
                tables.push(clickbench::PUBLISHED);
            }
            if matches!(copy, PageIndex | Both) {
                tables.push(clickbench::PAGE_INDEX);
            }
            let mut queries = vec![];
            for (i, sql) in clickbench::QUERIES.iter().enumerate() {
                let ties = clickbench::TIES.contains(&i);
                if matches!(copy, Published | Both) {
                    queries.push((format!("q{i}"), sql.to_string(), ties));
                }
                if matches!(copy, PageIndex | Both) {
                    queries.push((
                        format!("q{i}_page_index"),
                        clickbench::query_on(sql, clickbench::PAGE_INDEX),
                        ties,
                    ));
                }
            }
            Definition {
                tables,
                queries,
                dependent_round_trips: 1,
            }
        }
        other => {
            return Err(DataFusionError::Configuration(format!(
                "unknown suite '{other}'; known suites: {}",
                SUITES.join(", ")
            )));
        }
    })
}

fn generate(name: &str, dir: &Path, options: &SuiteOptions) -> Result<()> {
    match name {
        // Upstream's cross-file workload: 20 single-row-group files.
        "cross_file" => write_id_payload(&dir.join("t"), 20, 1_000_000, 1_000_000, 1),
        // One ~300 MB file in a single 8M-row row group (id and four payloads).
        "single_row_group" => write_id_payload(&dir.join("t"), 1, 8_000_000, 8_000_000, 4),
        // The same data in four row groups of ~77 MB: a budget below a row group.
        "four_row_groups" => write_id_payload(&dir.join("t"), 1, 8_000_000, 2_000_000, 4),
        // 1,000 files of about 100 KB each.
        "many_small_files" => write_id_payload(&dir.join("t"), 1_000, 6_000, 6_000, 1),
        "tpch" => tpch::generate(dir, options.scale),
        // Both copies are written at once, whichever --clickbench-copy asks for.
        "clickbench" => clickbench::generate(dir, options.scale),
        other => unreachable!("suite {other} has a definition"),
    }
}

/// Generate `name`'s data under `cache` unless a complete copy is there, and
/// describe the suite. The `tpch` and `clickbench` data are kept per scale
/// (`tpch_sf1/`, `clickbench_sf0.01/`, …).
pub fn prepare(name: &str, cache: &Path, options: &SuiteOptions) -> Result<Suite> {
    if !(options.scale > 0.0 && options.scale.is_finite()) {
        return Err(DataFusionError::Configuration(format!(
            "--scale must be a positive number, not {}",
            options.scale
        )));
    }
    let definition = definition(name, options)?;
    let data_dir = match name {
        "tpch" | "clickbench" => cache.join(format!("{name}_sf{}", options.scale)),
        _ => cache.join(name),
    };
    let done = data_dir.join(".complete");
    if !done.exists() {
        if data_dir.exists() {
            fs::remove_dir_all(&data_dir)?;
        }
        eprintln!("generating {name} data in {}", data_dir.display());
        let started = std::time::Instant::now();
        generate(name, &data_dir, options)?;
        eprintln!(
            "generated {name} data in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        fs::write(&done, b"")?;
    }
    Ok(Suite {
        name: SUITES.iter().find(|s| **s == name).expect("known suite"),
        data_dir,
        tables: definition.tables,
        queries: definition
            .queries
            .into_iter()
            .map(|(name, sql, ties)| Query { name, sql, ties })
            .collect(),
        dependent_round_trips: definition.dependent_round_trips,
    })
}

#[cfg(test)]
mod tests {
    use datafusion_prefetch_simstore::SimulatedStoreConfig;

    use super::*;
    use crate::run::{RunConfig, measure};

    /// Generate `name` at a tiny scale and run every query under `off` and
    /// `pipelined`: it must run, and give the same rows.
    async fn every_query_runs(name: &str, scale: f64) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = SuiteOptions {
            scale,
            clickbench_copy: ClickbenchCopy::Both,
        };
        let suite = prepare(name, dir.path(), &options).expect("data generated");
        let config = RunConfig {
            store: SimulatedStoreConfig::none(),
            latency_label: "none".into(),
            partitions: 1,
            settings: vec![],
            ballista: None,
            request_log: Some(dir.path().join("requests")),
        };
        for query in &suite.queries {
            let run = |policy| measure(&suite, query, policy, 0, &config);
            let off = run("off").await;
            let off = off.unwrap_or_else(|e| panic!("{name} {} off: {e}", query.name));
            let pipelined = run("pipelined").await;
            let pipelined =
                pipelined.unwrap_or_else(|e| panic!("{name} {} pipelined: {e}", query.name));
            assert_eq!(
                (off.rows, &off.checksum),
                (pipelined.rows, &pipelined.checksum),
                "{name} {}",
                query.name
            );
            let log = dir
                .path()
                .join(format!("requests/{}_off_0.tsv", query.name));
            let log = std::fs::read_to_string(&log).expect("a request log per run");
            assert!(log.starts_with("path\trange\tissued_ms"), "{log}");
            assert_eq!(log.lines().count() as u64, off.requests + 1, "{log}");
        }
    }

    #[tokio::test]
    async fn every_tpch_query_runs() {
        every_query_runs("tpch", 0.001).await;
    }

    #[tokio::test]
    async fn every_clickbench_query_runs_on_both_copies() {
        every_query_runs("clickbench", 0.001).await;
    }

    #[test]
    fn clickbench_copies_have_every_query_once() {
        for sql in clickbench::QUERIES {
            let on = clickbench::query_on(sql, clickbench::PAGE_INDEX);
            assert_eq!(on.matches(" FROM hits_page_index").count(), 1, "{sql}");
            assert_eq!(on.matches("hits").count(), 1, "{sql}");
        }
        assert_eq!(clickbench::schema().fields().len(), 105);
    }
}
