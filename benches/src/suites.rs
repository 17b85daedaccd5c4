//! Benchmark suites: the data each one generates (once, into a cache folder)
//! and the queries it runs.

use std::fs;
use std::path::{Path, PathBuf};

use datafusion::common::{DataFusionError, Result};

use crate::datagen::write_id_payload;
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
