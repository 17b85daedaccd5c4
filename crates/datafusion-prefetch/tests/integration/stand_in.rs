//! The simulated store stands in for S3 in every test and benchmark: a
//! query reads through it as through a remote store (a stream body), even
//! where DataFusion reads a local file (a file body) another way.

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// The rows of `SELECT * FROM x` over an Arrow IPC file that DataFusion
/// wrote, read through `store` (registered as `sim://bucket`), or the error.
async fn arrow_table_through(store: Arc<dyn ObjectStore>) -> Result<String, String> {
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_object_store(&url::Url::parse("sim://bucket").unwrap(), store);
    let create = "CREATE EXTERNAL TABLE x STORED AS ARROW LOCATION 'sim://bucket/x.arrow'";
    let run = async {
        ctx.sql(create).await?.collect().await?;
        let batches = ctx.sql("SELECT * FROM x").await?.collect().await?;
        Ok::<_, datafusion::error::DataFusionError>(pretty_format_batches(&batches)?.to_string())
    };
    run.await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn an_arrow_file_reads_through_the_simulated_store_as_through_any_remote_store() {
    // DataFusion 55 infers an Arrow IPC file's schema from a file body with
    // arrow's FileReader and from a stream body with its own parser, and
    // every remote store (S3, GCS, Azure, HTTP; InMemory too) answers with a
    // stream: a LocalFileSystem wrapped in the simulated store must read as
    // they do, not as the bare LocalFileSystem (a file body) does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.arrow");
    let ctx = datafusion::prelude::SessionContext::new();
    let copy = format!(
        "COPY (VALUES (1), (2)) TO '{}' STORED AS ARROW",
        path.display()
    );
    ctx.sql(&copy).await.unwrap().collect().await.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let memory = InMemory::new();
    memory
        .put(&Path::from("x.arrow"), bytes.into())
        .await
        .unwrap();
    let remote = arrow_table_through(Arc::new(memory)).await;
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let simulated = SimulatedStore::new(local, SimulatedStoreConfig::none());
    assert_eq!(arrow_table_through(Arc::new(simulated)).await, remote);
    let bare = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let from_file = arrow_table_through(Arc::new(bare)).await;
    assert!(from_file.is_ok(), "{from_file:?}");
}
