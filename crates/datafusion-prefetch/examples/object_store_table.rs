//! Reading a Parquet table from an object store with prefetching on.
//!
//! ```text
//! cargo run -p datafusion-prefetch --example object_store_table -- s3://bucket/prefix/
//! cargo run -p datafusion-prefetch --example object_store_table
//! ```
//!
//! Given an `s3://` URL it reads that table, with credentials, region and
//! endpoint from the usual `AWS_*` variables (`AWS_ENDPOINT` and
//! `AWS_ALLOW_HTTP=true` for an S3-compatible server). Without one it writes a
//! sample table to a temporary folder and serves it through a
//! `SimulatedStore` at 50 ms per request, so that the read-ahead has a
//! round trip to hide. Either way it runs one query with prefetching off
//! (stock DataFusion) and with the default policy, `auto`, and checks that
//! both return the same rows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchingParquetTable, prefetching_context};
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use url::Url;

type Error = Box<dyn std::error::Error>;

const QUERY: &str = "SELECT count(*) AS n, sum(value) AS total, max(label) AS last FROM t";

#[tokio::main]
async fn main() -> Result<(), Error> {
    let sample = tempfile::tempdir()?;
    let (url, store) = match std::env::args().nth(1) {
        Some(location) => (Url::parse(&location)?, s3_store(&location)?),
        None => sample_store(sample.path()).await?,
    };

    // Every Parquet scan of this session prefetches; the store is registered
    // as with stock DataFusion.
    let ctx = prefetching_context(SessionConfig::new());
    ctx.register_object_store(&url, store);
    // A table provider whose scans prefetch in any session (it also reads the
    // files' footers ahead while it infers the schema).
    let table = PrefetchingParquetTable::builder(url.as_str())
        .build(&ctx.state())
        .await?;
    ctx.register_table("t", Arc::new(table))?;

    let mut answers = Vec::new();
    for policy in ["off", "auto"] {
        ctx.sql(&format!("SET prefetch.policy = '{policy}'"))
            .await?
            .collect()
            .await?;
        let started = Instant::now();
        let batches = ctx.sql(QUERY).await?.collect().await?;
        println!("policy {policy}: {:?}", started.elapsed());
        answers.push(pretty_format_batches(&batches)?.to_string());
    }
    println!("{}", answers[1]);
    if answers[0] != answers[1] {
        return Err("off and auto returned different rows".into());
    }
    println!("off and auto returned the same rows");
    Ok(())
}

/// The bucket of an `s3://` URL as an S3 client configured from `AWS_*`.
fn s3_store(location: &str) -> Result<Arc<dyn ObjectStore>, Error> {
    let url = Url::parse(location)?;
    if url.scheme() != "s3" {
        return Err(format!("{location}: this example reads s3:// URLs").into());
    }
    let bucket = url.host_str().ok_or("an s3:// URL names a bucket")?;
    Ok(Arc::new(
        AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()?,
    ))
}

/// Eight single-row-group files in `folder`, served by a store that takes
/// 50 ms per request, at `sim://sample/t/`.
async fn sample_store(folder: &std::path::Path) -> Result<(Url, Arc<dyn ObjectStore>), Error> {
    let writer = SessionContext::new();
    for file in 0..8 {
        let rows = format!("range({}, {})", file * 125_000, (file + 1) * 125_000);
        let path = folder.join(format!("t/part-{file}.parquet"));
        writer
            .sql(&format!(
                "COPY (SELECT value, concat('label-', value % 997) AS label FROM {rows}) \
                 TO '{}' STORED AS PARQUET",
                path.display()
            ))
            .await?
            .collect()
            .await?;
    }
    let local = LocalFileSystem::new_with_prefix(folder)?;
    let slow = SimulatedStore::new(
        local,
        SimulatedStoreConfig::fixed(Duration::from_millis(50)),
    );
    Ok((Url::parse("sim://sample/t/")?, Arc::new(slow)))
}
