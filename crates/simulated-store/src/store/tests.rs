//! Behavioural tests of [`SimulatedStore`]. Most run on tokio's paused clock,
//! where sleeps complete instantly and `Instant` differences are exact.

use std::ops::Range;
use std::time::Duration;

use futures::TryStreamExt;
use futures::future::join_all;
use object_store::memory::InMemory;
use object_store::{GetRange, ObjectStoreExt};
use tokio::time::Instant;

use super::get::MIN_SLEEP;
use super::*;
use crate::{LatencyModel, RequestRecord};

mod answers;
mod requests;
mod throttling;

const MIB: u64 = 1024 * 1024;

/// InMemory returns every body as one chunk; this splits bodies into
/// `chunk`-byte pieces so streaming behaviour can be observed.
#[derive(Debug)]
struct ChunkedStore {
    inner: InMemory,
    chunk: usize,
}

impl fmt::Display for ChunkedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for ChunkedStore {
    async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }

    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut result = self.inner.get_opts(location, options).await?;
        let chunk = self.chunk;
        let stream = std::mem::replace(
            &mut result.payload,
            GetResultPayload::Stream(futures::stream::empty().boxed()),
        );
        let GetResultPayload::Stream(stream) = stream else {
            unreachable!("InMemory only returns streams")
        };
        let pieces = stream
            .map_ok(move |bytes| {
                let pieces: Vec<Result<Bytes>> = (0..bytes.len())
                    .step_by(chunk)
                    .map(|start| Ok(bytes.slice(start..(start + chunk).min(bytes.len()))))
                    .collect();
                futures::stream::iter(pieces)
            })
            .try_flatten();
        result.payload = GetResultPayload::Stream(pieces.boxed());
        Ok(result)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A store over InMemory holding `objects` (path, size) filled with a byte
/// pattern that makes misplaced ranges detectable.
async fn store_with(
    config: SimulatedStoreConfig,
    objects: &[(&str, u64)],
) -> SimulatedStore<InMemory> {
    let store = SimulatedStore::new(InMemory::new(), config);
    for (path, size) in objects {
        store
            .inner()
            .put(&Path::from(*path), pattern(*size).into())
            .await
            .unwrap();
    }
    store
}

async fn chunked_store_with(
    config: SimulatedStoreConfig,
    chunk: usize,
    path: &str,
    size: u64,
) -> SimulatedStore<ChunkedStore> {
    let inner = ChunkedStore {
        inner: InMemory::new(),
        chunk,
    };
    inner
        .put(&Path::from(path), pattern(size).into())
        .await
        .unwrap();
    SimulatedStore::new(inner, config)
}

/// `store` holding `keys` one-byte objects `dir/k<i>` and `prefixes` more
/// in subfolders `dir/p<i>/`.
async fn store_of_keys(
    config: SimulatedStoreConfig,
    keys: usize,
    prefixes: usize,
) -> SimulatedStore<InMemory> {
    let store = store_with(config, &[]).await;
    let paths = (0..keys)
        .map(|i| format!("dir/k{i:05}"))
        .chain((0..prefixes).map(|i| format!("dir/p{i:05}/x")));
    for path in paths {
        store
            .inner()
            .put(&Path::from(path), vec![0u8].into())
            .await
            .unwrap();
    }
    store
}

/// Everything `store` lists under `prefix`.
async fn listing(store: &dyn ObjectStore, prefix: &str) -> Vec<ObjectMeta> {
    store
        .list(Some(&Path::from(prefix)))
        .try_collect()
        .await
        .unwrap()
}

fn pattern(size: u64) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

fn ranges_of(records: &[RequestRecord]) -> Vec<Option<Range<u64>>> {
    records.iter().map(|r| r.range.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn fixed_latency_is_charged_per_get() {
    let latency = Duration::from_millis(100);
    let store = store_with(SimulatedStoreConfig::fixed(latency), &[("a", 1000)]).await;
    let path = Path::from("a");

    let start = Instant::now();
    for i in 0..3 {
        let bytes = store.get_range(&path, i * 10..i * 10 + 10).await.unwrap();
        assert_eq!(
            &bytes[..],
            &pattern(1000)[(i * 10) as usize..(i * 10 + 10) as usize]
        );
    }
    assert_eq!(start.elapsed(), 3 * latency);

    for r in store.stats().records() {
        assert_eq!(r.first_byte_latency, latency);
        assert_eq!(r.first_byte_at.unwrap() - r.started_at, latency);
        assert_eq!(r.queue_time(), Some(Duration::ZERO));
    }
}

#[tokio::test(start_paused = true)]
async fn bandwidth_is_charged_on_body_consumption() {
    let config = SimulatedStoreConfig::none().with_bandwidth(Some(MIB));
    let store = store_with(config, &[("a", MIB)]).await;
    let stats = store.stats();
    let path = Path::from("a");

    let start = Instant::now();
    let result = store
        .get_opts(&path, GetOptions::new().with_range(Some(0..MIB / 2)))
        .await
        .unwrap();
    // Nothing is charged until the body is read ...
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(stats.bytes_transferred(), 0);
    assert_eq!(stats.in_flight_gets(), 1);

    // ... and time the reader spends elsewhere is not credited to the transfer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let read_start = Instant::now();
    let bytes = result.bytes().await.unwrap();
    assert_eq!(bytes.len() as u64, MIB / 2);
    assert_eq!(read_start.elapsed(), Duration::from_millis(500));

    assert_eq!(stats.bytes_requested(), MIB / 2);
    assert_eq!(stats.bytes_transferred(), MIB / 2);
    assert_eq!(stats.in_flight_gets(), 0);
    let record = &stats.records()[0];
    assert!(record.is_completed());
    assert_eq!(
        record.finished_at.unwrap() - record.first_byte_at.unwrap(),
        Duration::from_millis(1500)
    );
}

#[tokio::test(start_paused = true)]
async fn bandwidth_accumulates_debt_over_tiny_chunks() {
    // 1 KiB chunks at 100 MiB/s cost ~9.8 µs each, below the sleep threshold.
    let config = SimulatedStoreConfig::none().with_bandwidth(Some(100 * MIB));
    let store = chunked_store_with(config, 1024, "a", MIB).await;

    let start = Instant::now();
    let mut body = store.get(&Path::from("a")).await.unwrap().into_stream();
    let mut chunks = 0;
    let mut len = 0;
    while let Some(chunk) = body.try_next().await.unwrap() {
        chunks += 1;
        len += chunk.len() as u64;
    }
    assert_eq!((chunks, len), (1024, MIB));
    // 1 MiB at 100 MiB/s is 10 ms; debt is carried, never lost or doubled.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(10) - MIN_SLEEP && elapsed <= Duration::from_millis(10),
        "{elapsed:?}"
    );
    assert!(store.stats().records()[0].is_completed());
}

#[tokio::test(start_paused = true)]
async fn latency_and_bandwidth_add_up_per_connection() {
    let config =
        SimulatedStoreConfig::fixed(Duration::from_millis(30)).with_bandwidth(Some(1_000_000));
    let store = store_with(config, &[("a", 2 * MIB)]).await;
    let path = Path::from("a");

    // Two concurrent GETs each get their own connection and full bandwidth:
    // 30 ms to the first byte plus 100 kB at 1 MB/s, not twice that.
    let start = Instant::now();
    let (a, b) = tokio::join!(
        store.get_range(&path, 0..100_000),
        store.get_range(&path, MIB..MIB + 100_000)
    );
    assert_eq!(a.unwrap().len() + b.unwrap().len(), 200_000);
    assert_eq!(start.elapsed(), Duration::from_millis(130));
    assert_eq!(store.stats().max_in_flight_gets(), 2);
}

#[tokio::test(start_paused = true)]
async fn connection_cap_limits_concurrency() {
    let latency = Duration::from_millis(10);
    let config = SimulatedStoreConfig::fixed(latency).with_max_connections(Some(3));
    let store = store_with(config, &[("a", 1000)]).await;
    let stats = store.stats();
    let path = Path::from("a");

    let start = Instant::now();
    let results = join_all((0..10u64).map(|i| store.get_range(&path, i * 10..i * 10 + 5))).await;
    assert!(results.iter().all(|r| r.is_ok()));
    // 10 requests through 3 connections take 4 rounds of 10 ms.
    assert_eq!(start.elapsed(), 4 * latency);
    assert_eq!(stats.max_in_flight_gets(), 3);
    assert_eq!(stats.in_flight_gets(), 0);

    let queued: Vec<Duration> = stats
        .records()
        .iter()
        .map(|r| r.queue_time().unwrap())
        .collect();
    assert_eq!(queued.iter().filter(|q| q.is_zero()).count(), 3);
    assert_eq!(*queued.iter().max().unwrap(), 3 * latency);
}

#[tokio::test(start_paused = true)]
async fn connection_is_held_until_body_is_consumed() {
    let config = SimulatedStoreConfig::none()
        .with_max_connections(Some(1))
        .with_bandwidth(Some(MIB));
    let store = store_with(config, &[("a", MIB)]).await;
    let path = Path::from("a");

    let first = store
        .get_opts(&path, GetOptions::new().with_range(Some(0..1000)))
        .await
        .unwrap();
    // The second GET cannot start while the first body is unread.
    let second = store.get_range(&path, 0..10);
    tokio::pin!(second);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), &mut second)
            .await
            .is_err()
    );
    assert_eq!(store.stats().max_in_flight_gets(), 1);

    first.bytes().await.unwrap();
    second.await.unwrap();
    assert_eq!(store.stats().in_flight_gets(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_body_mid_way_releases_connection() {
    let config = SimulatedStoreConfig::none()
        .with_max_connections(Some(1))
        .with_bandwidth(Some(MIB));
    let store = chunked_store_with(config, 1024, "a", 64 * 1024).await;
    let stats = store.stats();
    let path = Path::from("a");

    let mut body = store.get(&path).await.unwrap().into_stream();
    let first_chunk = body.try_next().await.unwrap().unwrap();
    assert_eq!(first_chunk.len(), 1024);
    assert_eq!(stats.in_flight_gets(), 1);
    drop(body);
    assert_eq!(stats.in_flight_gets(), 0);

    // The single connection is free again: the next GET starts immediately.
    let start = Instant::now();
    let next = store
        .get_opts(&path, GetOptions::new().with_range(Some(0..10)))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    drop(next);

    let records = stats.records();
    assert_eq!(records[0].state, RequestState::Cancelled);
    assert_eq!(records[0].bytes_transferred, 1024);
    assert_eq!(records[1].state, RequestState::Cancelled);
    assert_eq!(stats.bytes_transferred(), 1024);
}

#[tokio::test(start_paused = true)]
async fn dropping_pending_get_releases_connection() {
    let config =
        SimulatedStoreConfig::fixed(Duration::from_millis(100)).with_max_connections(Some(1));
    let store = store_with(config, &[("a", 100)]).await;
    let stats = store.stats();
    let path = Path::from("a");

    // Cancelled while waiting for its first byte ...
    let timed_out =
        tokio::time::timeout(Duration::from_millis(50), store.get_range(&path, 0..10)).await;
    assert!(timed_out.is_err());
    assert_eq!(stats.in_flight_gets(), 0);
    let record = &stats.records()[0];
    assert_eq!(record.state, RequestState::Cancelled);
    assert!(record.connected_at.is_some() && record.first_byte_at.is_none());

    // ... so the next request gets the connection without queueing.
    store.get_range(&path, 0..10).await.unwrap();
    assert_eq!(stats.records()[1].queue_time(), Some(Duration::ZERO));
}
