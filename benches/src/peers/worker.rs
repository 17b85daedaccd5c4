//! `prefetch-bench peer-worker …`: one DataFusion run in a process of its
//! own, reporting its wall time, result and peak RSS as one JSON line.

use std::process::ExitCode;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::Result;
use datafusion::prelude::{ParquetReadOptions, SessionConfig};
use datafusion_prefetch::{prefetching_context, register_parquet_tables};
use datafusion_prefetch_testdata::{Numbers, canonical_lines, checksum};

use super::stores::{Store, client};
use crate::run::set_prefetch;

// --- the engine-independent checksum (same as peers.py) ----------------------

/// Row count and a checksum of `batches` that any engine can reproduce: the
/// shared checksum with every number as a float to five significant digits
/// (`benches/peers/peers.py` computes the same). `PEERS_PRINT_ROWS` prints
/// the canonical rows.
pub fn canonical_checksum(batches: &[RecordBatch]) -> Result<(usize, String)> {
    let numbers = Numbers::Significant(5);
    if std::env::var_os("PEERS_PRINT_ROWS").is_some() {
        for line in canonical_lines(batches, numbers)? {
            eprintln!("{}", line.replace('\u{1f}', " | "));
        }
    }
    Ok(checksum(batches, numbers)?)
}

fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

#[derive(Debug)]
struct WorkerArgs {
    store: Store,
    endpoint: String,
    policy: String,
    partitions: usize,
    tables: Vec<(String, String)>,
    settings: Vec<(String, String)>,
    sql: String,
}

fn parse_worker_args(args: &[String]) -> Result<WorkerArgs, String> {
    let mut parsed = WorkerArgs {
        store: Store::S3,
        endpoint: String::new(),
        policy: "off".into(),
        partitions: 1,
        tables: vec![],
        settings: vec![],
        sql: String::new(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?.clone();
        let pair = |v: &str| {
            v.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or(format!("{flag} {v}: expected NAME=VALUE"))
        };
        match flag.as_str() {
            "--store" => parsed.store = Store::parse(&value)?,
            "--endpoint" => parsed.endpoint = value,
            "--policy" => parsed.policy = value,
            "--partitions" => parsed.partitions = value.parse().map_err(|e| format!("{e}"))?,
            "--table" => parsed.tables.push(pair(&value)?),
            "--setting" => parsed.settings.push(pair(&value)?),
            "--sql" => parsed.sql = value,
            other => return Err(format!("unknown peer-worker flag {other}")),
        }
    }
    Ok(parsed)
}

async fn worker_run(args: &WorkerArgs) -> Result<serde_json::Value> {
    let store = client(args.store, &args.endpoint)?;
    let ctx = prefetching_context(SessionConfig::new().with_target_partitions(args.partitions));
    set_prefetch(&ctx, &args.policy, &args.settings).await?;
    let (_, url) = args.store.table_url(&args.endpoint, "");
    let started = Instant::now();
    ctx.register_object_store(&url, store);
    // All at once, as a DataFusion application over many tables should
    // (`register_parquet_tables`): one after another, each table's listing
    // and footers add their round trips to the query's.
    let tables = args.tables.iter().map(|(name, prefix)| {
        let (table, _) = args.store.table_url(&args.endpoint, prefix);
        (name.as_str(), table)
    });
    register_parquet_tables(&ctx, tables, ParquetReadOptions::default()).await?;
    let registered = started.elapsed();
    let batches = ctx.sql(&args.sql).await?.collect().await?;
    let wall = started.elapsed();
    let (rows, checksum) = canonical_checksum(&batches)?;
    Ok(serde_json::json!({
        "rows": rows,
        "checksum": checksum,
        "wall_ms": wall.as_secs_f64() * 1e3,
        "register_ms": registered.as_secs_f64() * 1e3,
        "peak_rss_bytes": peak_rss_bytes(),
    }))
}

/// `prefetch-bench peer-worker …`: one DataFusion run in this process.
pub async fn worker(args: &[String]) -> ExitCode {
    let outcome = match parse_worker_args(args) {
        Ok(args) => worker_run(&args).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}", serde_json::json!({ "error": e }));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn the_worker_takes_its_store_and_tables() {
        let args: Vec<String> = [
            "--store",
            "azure",
            "--endpoint",
            "http://127.0.0.1:9",
            "--policy",
            "auto",
            "--partitions",
            "2",
            "--table",
            "t=cross_file/t/",
            "--setting",
            "memory_budget=64MiB",
            "--sql",
            "SELECT 1",
        ]
        .map(String::from)
        .to_vec();
        let parsed = parse_worker_args(&args).unwrap();
        assert_eq!(parsed.store, Store::Azure);
        assert_eq!(parsed.endpoint, "http://127.0.0.1:9");
        assert_eq!(parsed.partitions, 2);
        assert_eq!(parsed.tables, vec![("t".into(), "cross_file/t/".into())]);
        assert_eq!(
            parsed.settings,
            vec![("memory_budget".into(), "64MiB".into())]
        );
        // S3 unless told otherwise; an unknown store, flag or pair is refused.
        assert_eq!(parse_worker_args(&[]).unwrap().store, Store::S3);
        for bad in [
            &["--store", "ftp"][..],
            &["--stores", "s3"],
            &["--table", "t"],
            &["--store"],
        ] {
            let bad: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(parse_worker_args(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_checksum_is_the_one_peers_py_computes() {
        // Two rows, in an order the checksum ignores; a decimal and a float of
        // the same value agree.
        let schema = Arc::new(Schema::new(vec![
            Field::new("flag", DataType::Utf8, true),
            Field::new("sum", DataType::Decimal128(15, 2), true),
            Field::new("avg", DataType::Float64, true),
            Field::new("n", DataType::Int64, true),
            Field::new("day", DataType::Date32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("R"), None])),
                Arc::new(
                    Decimal128Array::from(vec![Some(3_775_000_123), Some(-5)])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![Some(25.522005853), Some(0.0)])),
                Arc::new(Int64Array::from(vec![Some(1_478_493), None])),
                Arc::new(Date32Array::from(vec![Some(10_471), Some(0)])),
            ],
        )
        .unwrap();
        let (rows, checksum) = canonical_checksum(&[batch]).unwrap();
        assert_eq!(rows, 2);
        // What benches/peers/peers.py computes for the same rows:
        //   canonical_checksum([
        //     ("R", 37750001.23, 25.522005853, 1478493, datetime.date(1998, 9, 2)),
        //     (None, -0.05, 0.0, None, datetime.date(1970, 1, 1))])
        assert_eq!(checksum, "005b142bdd37695c");
    }
}
