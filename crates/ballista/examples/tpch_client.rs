//! A Ballista client that runs TPC-H with prefetching on a running cluster:
//! it registers the tables from a simulated object store, then runs every
//! query under `off` and under the default policy and prints both times.
//!
//! Start a scheduler and two executors first (see `docs/ballista.md`), each
//! with the same `--store sim://bench=DIR --latency s3`, then:
//!
//! ```text
//! cargo run --release -p datafusion-prefetch-ballista --example tpch_client -- \
//!     df://127.0.0.1:50050 /var/tmp/dfprefetch-bench-data/tpch_sf1 s3
//! ```

use std::time::Instant;

use datafusion::common::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::{ParquetReadOptions, SessionConfig};
use datafusion_prefetch_ballista::{ObjectStores, ballista_prefetching_context};
use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};

const TABLES: [&str; 8] = [
    "lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region",
];

macro_rules! tpch_queries {
    ($($n:literal),*) => {
        [$((concat!("q", $n), include_str!(concat!("../../../benches/queries/tpch/q", $n, ".sql")))),*]
    };
}

const QUERIES: [(&str, &str); 22] = tpch_queries!(
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22
);

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scheduler, data_dir, latency] = args.as_slice() else {
        eprintln!(
            "usage: tpch_client SCHEDULER_URL TPCH_DIR LATENCY (e.g. df://127.0.0.1:50050 /data/tpch_sf1 s3)"
        );
        std::process::exit(2);
    };
    // The client reads footers when it registers the tables: through the same
    // kind of store as the executors.
    let model: LatencyModel = latency
        .parse()
        .map_err(|e| datafusion::common::DataFusionError::Configuration(format!("{e}")))?;
    let stores = ObjectStores::new().with_simulated_dir(
        ObjectStoreUrl::parse("sim://bench")?,
        data_dir,
        SimulatedStoreConfig::from_latency(model),
    )?;
    let config = SessionConfig::new().with_target_partitions(4);
    let ctx = ballista_prefetching_context(scheduler, config, &stores).await?;
    for table in TABLES {
        let url = format!("sim://bench/{table}/");
        ctx.register_parquet(table, url, ParquetReadOptions::default())
            .await?;
    }
    println!("| query | off ms | pipelined ms | speedup | rows |");
    println!("|---|---:|---:|---:|---:|");
    let (mut total_off, mut total_on) = (0.0, 0.0);
    for (name, sql) in QUERIES {
        let mut times = vec![];
        let mut rows = 0;
        for policy in ["off", "pipelined"] {
            ctx.sql(&format!("SET prefetch.policy = '{policy}'"))
                .await?
                .collect()
                .await?;
            let started = Instant::now();
            let batches = ctx.sql(sql).await?.collect().await?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
            rows = batches.iter().map(|b| b.num_rows()).sum();
        }
        total_off += times[0];
        total_on += times[1];
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x | {rows} |",
            times[0],
            times[1],
            times[0] / times[1]
        );
    }
    println!(
        "\ntotal: off {total_off:.0} ms, pipelined {total_on:.0} ms: {:.2}x",
        total_off / total_on
    );
    Ok(())
}
