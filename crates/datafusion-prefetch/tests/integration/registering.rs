//! `register_parquet_tables` over a store where one LIST or one footer read
//! never answers: under a policy whose scans hedge, the registration sends
//! it again and completes; under `off` (stock DataFusion) it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig};
use datafusion_prefetch::register_parquet_tables;
use datafusion_prefetch_simstore::{Fault, FaultRule, FaultStats, FaultyStore, SimulatedStore};
use futures::stream::{self, BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::support::{prefetching_session, small_tables_at};

/// Tables `t0` … `t2` of two files each, behind 30 ms per request.
async fn tables_at_30ms() -> SimulatedStore<InMemory> {
    small_tables_at("data", 3, Duration::from_millis(30)).await
}

/// Register the three tables through `store` with `settings`: how long it
/// took, or `None` if it had not finished after `patience`; and each table's
/// row count when it did.
async fn register(
    store: Arc<dyn ObjectStore>,
    settings: &[(&str, &str)],
    patience: Duration,
) -> Option<(Duration, Vec<String>)> {
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let ctx = prefetching_session(SessionConfig::new(), runtime, store);
    for (key, value) in settings {
        let set = format!("SET prefetch.{key} = '{value}'");
        ctx.sql(&set).await.unwrap().collect().await.unwrap();
    }
    let tables: Vec<(String, String)> = (0..3)
        .map(|t| (format!("t{t}"), format!("sim://bucket/data/t{t}/")))
        .collect();
    let started = Instant::now();
    let registered = register_parquet_tables(&ctx, tables.clone(), ParquetReadOptions::default());
    tokio::time::timeout(patience, registered)
        .await
        .ok()?
        .unwrap();
    let took = started.elapsed();
    let mut counts = vec![];
    for (name, _) in &tables {
        let sql = format!("SELECT count(*) FROM {name}");
        let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        counts.push(pretty_format_batches(&batches).unwrap().to_string());
    }
    Some((took, counts))
}

/// The three tables, the second file of `t1` stalling its first GET.
async fn stalled_footer() -> (Arc<dyn ObjectStore>, Arc<FaultStats>) {
    let store = FaultyStore::new(tables_at_30ms().await).with_rule(
        FaultRule::new(Fault::Stall)
            .path_contains("t1/part-1")
            .once(),
    );
    let stats = store.stats();
    (Arc::new(store), stats)
}

/// The three tables, the first LIST of `t2` never answering.
async fn stalled_list() -> Arc<dyn ObjectStore> {
    Arc::new(FirstListStalls::new(
        Arc::new(tables_at_30ms().await),
        "data/t2",
    ))
}

const HEDGED: [(&str, &str); 1] = [("policy", "auto")];
const NOT_HEDGED: [&[(&str, &str)]; 3] = [
    &[("policy", "off")],
    &[("policy", "auto"), ("hedge_after", "off")],
    &[("policy", "pipelined")],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_footer_read_that_never_answers_is_hedged_under_auto() {
    let (store, faults) = stalled_footer().await;
    let (took, counts) = register(store, &HEDGED, Duration::from_secs(10))
        .await
        .expect("the stalled footer read was hedged");
    assert_eq!(faults.total_injected(), 1);
    // A LIST, then the footers; the stalled one sent again after two round
    // trips of the others' (60 ms).
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(counts.iter().all(|c| c.contains("200")), "{counts:?}");
    for settings in NOT_HEDGED {
        let (store, _) = stalled_footer().await;
        let finished = register(store, settings, Duration::from_millis(1500)).await;
        assert!(finished.is_none(), "{settings:?}: not hedged, it waits");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_never_answers_is_hedged_under_auto() {
    let (took, counts) = register(stalled_list().await, &HEDGED, Duration::from_secs(10))
        .await
        .expect("the stalled LIST was hedged");
    // Sent again after two round trips of the other tables' LISTs (60 ms).
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(counts.iter().all(|c| c.contains("200")), "{counts:?}");
    for settings in NOT_HEDGED {
        let finished = register(stalled_list().await, settings, Duration::from_millis(1500)).await;
        assert!(finished.is_none(), "{settings:?}: not hedged, it waits");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_listing_that_never_answers_is_hedged_before_anything_is_measured() {
    // One table: no other LIST has answered, so it is sent again after
    // four default round trips (120 ms).
    let store = Arc::new(FirstListStalls::new(
        Arc::new(tables_at_30ms().await),
        "data/t0",
    ));
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let ctx = prefetching_session(SessionConfig::new(), runtime, store.clone());
    let started = Instant::now();
    let one = [("t0", "sim://bucket/data/t0/")];
    let registered = register_parquet_tables(&ctx, one, ParquetReadOptions::default());
    tokio::time::timeout(Duration::from_secs(10), registered)
        .await
        .expect("hedged")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(120));
    assert_eq!(store.lists.load(Ordering::SeqCst), 2);
}

/// A store whose first LIST under `prefix` never answers; everything else
/// is `inner`'s.
#[derive(Debug)]
struct FirstListStalls {
    inner: Arc<dyn ObjectStore>,
    prefix: String,
    lists: AtomicUsize,
}

impl FirstListStalls {
    fn new(inner: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            inner,
            prefix: prefix.to_string(),
            lists: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Display for FirstListStalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FirstListStalls({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FirstListStalls {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let ours = prefix.is_some_and(|p| p.as_ref().starts_with(&self.prefix));
        if ours && self.lists.fetch_add(1, Ordering::SeqCst) == 0 {
            return stream::pending().boxed();
        }
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
