//! Benchmark suites: the data each one generates (once, into a cache folder)
//! and the queries it runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// A named query of a suite.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
}

/// What a suite scans and asks.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: &'static str,
    /// Folder holding the suite's tables, one sub-folder per table.
    pub data_dir: PathBuf,
    pub tables: Vec<&'static str>,
    pub queries: Vec<Query>,
    /// Round trips on the scan's critical path that no read-ahead can hide.
    pub dependent_round_trips: u32,
}

/// Every suite this binary knows.
pub const SUITES: [&str; 3] = ["cross_file", "single_row_group", "many_small_files"];

fn id_payload_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("payload", DataType::Int64, false),
    ]))
}

/// SplitMix64: deterministic, incompressible payloads.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Write `files` files of `rows` rows each, `row_group_rows` rows per row group.
fn write_id_payload(dir: &Path, files: usize, rows: usize, row_group_rows: usize) -> Result<()> {
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
            id_payload_schema(),
            Some(props.clone()),
        )?;
        let first = (file * rows) as u64;
        let chunk = 1 << 20;
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let ids: Vec<u64> = (first + start as u64..first + (start + n) as u64).collect();
            let payload: Int64Array = ids.iter().map(|i| (mix(*i) >> 1) as i64).collect();
            let batch = RecordBatch::try_new(
                id_payload_schema(),
                vec![Arc::new(UInt64Array::from(ids)), Arc::new(payload)],
            )?;
            writer.write(&batch)?;
            start += n;
        }
        writer.close()?;
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// The tables and queries of a suite, before its data is generated.
struct Definition {
    tables: Vec<&'static str>,
    queries: Vec<(&'static str, &'static str)>,
    dependent_round_trips: u32,
}

fn definition(name: &str) -> Result<Definition> {
    let one_table = |queries| Definition {
        tables: vec!["t"],
        queries,
        dependent_round_trips: 1,
    };
    Ok(match name {
        "cross_file" => one_table(vec![("sum_payload", "SELECT sum(payload) FROM t")]),
        "single_row_group" => one_table(vec![(
            "full_scan",
            "SELECT sum(payload), count(id), max(id) FROM t",
        )]),
        "many_small_files" => one_table(vec![
            ("sum_payload", "SELECT sum(payload) FROM t"),
            (
                "count_filtered",
                "SELECT count(*) FROM t WHERE payload % 7 = 0",
            ),
        ]),
        other => {
            return Err(DataFusionError::Configuration(format!(
                "unknown suite '{other}'; known suites: {}",
                SUITES.join(", ")
            )));
        }
    })
}

fn generate(name: &str, dir: &Path) -> Result<()> {
    match name {
        // Upstream's cross-file workload: 20 single-row-group files.
        "cross_file" => write_id_payload(&dir.join("t"), 20, 1_000_000, 1_000_000),
        // One ~300 MB file in a single 8M-row row group.
        "single_row_group" => write_id_payload(&dir.join("t"), 1, 8_000_000, 8_000_000),
        // 1,000 files of about 100 KB each.
        "many_small_files" => write_id_payload(&dir.join("t"), 1_000, 6_000, 6_000),
        other => unreachable!("suite {other} has a definition"),
    }
}

/// Generate `name`'s data under `cache` unless a complete copy is there, and
/// describe the suite.
pub fn prepare(name: &str, cache: &Path) -> Result<Suite> {
    let definition = definition(name)?;
    let data_dir = cache.join(name);
    let done = data_dir.join(".complete");
    if !done.exists() {
        if data_dir.exists() {
            fs::remove_dir_all(&data_dir)?;
        }
        eprintln!("generating {name} data in {}", data_dir.display());
        generate(name, &data_dir)?;
        fs::write(&done, b"")?;
    }
    Ok(Suite {
        name: SUITES.iter().find(|s| **s == name).expect("known suite"),
        data_dir,
        tables: definition.tables,
        queries: definition
            .queries
            .into_iter()
            .map(|(n, sql)| Query {
                name: n.to_string(),
                sql: sql.to_string(),
            })
            .collect(),
        dependent_round_trips: definition.dependent_round_trips,
    })
}
