//! The [`SimulatedStore`] wrapper.

mod get;
mod pages;
mod wire;

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use tokio::sync::OwnedSemaphorePermit;

use self::get::{GetGuard, SimulatedBody};
use self::pages::ListPages;
pub use self::wire::{Attempt, AttemptObserver};
use self::wire::{Request, Wire};
use crate::ranges::get_ranges_bounded;
use crate::retry::Retries;
use crate::{RequestState, SimulatedStoreConfig, StoreStats};

/// An [`ObjectStore`] wrapper that makes a fast store (typically
/// [`InMemory`](object_store::memory::InMemory)) behave like a remote object
/// store such as S3, and records every request it serves.
///
/// A GET (`get_opts`, and therefore `get`, `get_range` and `get_ranges`):
///
/// 1. is logged in [`StoreStats`] with the next sequence number and a
///    first-byte delay drawn from [`SimulatedStoreConfig::latency`];
/// 2. waits for a free connection if
///    [`max_connections`](SimulatedStoreConfig::max_connections) are busy;
/// 3. sleeps the first-byte delay, then asks the inner store;
/// 4. returns a body stream that is charged
///    [`bandwidth_bytes_per_sec`](SimulatedStoreConfig::bandwidth_bytes_per_sec)
///    as it is consumed, and holds the connection until its last byte has
///    been handed out or it is dropped.
///
/// `get_ranges` is deliberately *not* overridden: the trait's default
/// implementation coalesces nearby ranges
/// ([`OBJECT_STORE_COALESCE_DEFAULT`](object_store::OBJECT_STORE_COALESCE_DEFAULT))
/// into fewer `get_range` calls, as the real S3 client does, so the request
/// log shows the GETs S3 would have seen.
///
/// A HEAD (`get_opts` with `head: true`) holds a connection for a
/// first-byte delay drawn from the same model as GETs — on S3 a HEAD costs a
/// full round trip — and is counted in [`StoreStats::head_requests`], but
/// it is not logged as a GET and transfers no body.
///
/// LIST requests are counted, draw from
/// [`list_latency`](SimulatedStoreConfig::list_latency) and hold a
/// connection while they wait; the listing stream itself is not throttled.
///
/// With a [`rate_limit`](SimulatedStoreConfig::rate_limit), a request
/// (GET, HEAD or LIST page) sent while its prefix is over the limit is
/// answered `503 SlowDown` after its round trip and retried as
/// object_store's client retries it ([`retry`](SimulatedStoreConfig::retry)):
/// the caller sees only the delay, or the client's error once it gives up.
/// [`StoreStats::throttled`] and [`StoreStats::retries`] count them.
///
/// Writes (`put`, multipart, `copy`, `rename`, `delete`) are forwarded
/// unchanged: the engine under test only reads.
///
/// Delays use tokio's clock, so tests can run them instantly and
/// deterministically with `#[tokio::test(start_paused = true)]`.
pub struct SimulatedStore<T: ObjectStore> {
    inner: T,
    config: SimulatedStoreConfig,
    stats: Arc<StoreStats>,
    wire: Arc<Wire>,
    rngs: Mutex<LatencyRngs>,
}

/// One RNG per request kind, so that e.g. an extra HEAD or LIST does not
/// shift the sequence of GET latencies a test or benchmark relies on; the
/// seeds of GETs' and HEADs' retries come from one of their own.
struct LatencyRngs {
    get: StdRng,
    head: StdRng,
    list: StdRng,
    retry: StdRng,
}

impl LatencyRngs {
    fn new(seed: u64) -> Self {
        // Arbitrary odd constants; `seed_from_u64` scrambles its input, so
        // nearby seeds still give unrelated streams.
        Self {
            get: StdRng::seed_from_u64(seed),
            head: StdRng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15),
            list: StdRng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03),
            retry: StdRng::seed_from_u64(seed ^ 0x94D0_49BB_1331_11EB),
        }
    }
}

impl<T: ObjectStore> SimulatedStore<T> {
    /// Tells `observer` of every attempt the store makes — each request and
    /// each retry — and of each `503` answered.
    ///
    /// # Panics
    ///
    /// If a listing of the store is still running.
    pub fn with_attempt_observer(mut self, observer: AttemptObserver) -> Self {
        Arc::get_mut(&mut self.wire)
            .expect("no listing holds the wire of a store being built")
            .observe_attempts(observer);
        self
    }

    /// Wraps `inner` with the behaviour described by `config`.
    ///
    /// # Panics
    ///
    /// If `config.max_connections` or `config.bandwidth_bytes_per_sec` is
    /// `Some(0)`: no request could ever make progress.
    pub fn new(inner: T, config: SimulatedStoreConfig) -> Self {
        assert!(
            config.max_connections != Some(0),
            "SimulatedStoreConfig::max_connections must be at least 1 (use None for unlimited)"
        );
        assert!(
            config.list_page_keys != Some(0),
            "SimulatedStoreConfig::list_page_keys must be at least 1 (use None for one page)"
        );
        assert!(
            config.bandwidth_bytes_per_sec != Some(0),
            "SimulatedStoreConfig::bandwidth_bytes_per_sec must be at least 1 (use None for unlimited)"
        );
        let stats = Arc::new(StoreStats::new());
        let wire = Wire::new(
            config.max_connections,
            config.rate_limit,
            config.retry,
            Arc::clone(&stats),
        );
        Self {
            inner,
            wire: Arc::new(wire),
            rngs: Mutex::new(LatencyRngs::new(config.seed)),
            stats,
            config,
        }
    }

    /// The shared counters and request log of this store.
    pub fn stats(&self) -> Arc<StoreStats> {
        Arc::clone(&self.stats)
    }

    /// The configuration this store was created with.
    pub fn config(&self) -> &SimulatedStoreConfig {
        &self.config
    }

    /// The wrapped store, for setting up data without simulated costs or
    /// log entries.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Unwraps the inner store.
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// Wraps a listing so it costs one LIST round trip before its first
    /// entry, and with [`SimulatedStoreConfig::list_page_keys`] one more
    /// before each further page, one after another. Counting and drawing
    /// happen now, at call time, so that the LIST delay sequence follows call
    /// order rather than poll order (a listing's later pages draw from an RNG
    /// of its own, seeded now).
    ///
    /// A page whose client gives up on `503 SlowDown` ends the listing with
    /// the client's error, as object_store's paginated listing does.
    fn simulate_list(
        &self,
        prefix: Option<&Path>,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (first, pages) = self.start_list(prefix);
        let state = (listing, 0_usize, pages, Some(first));
        futures::stream::unfold(
            state,
            |(mut listing, served, mut pages, first)| async move {
                let sent = match first {
                    Some((delay, retries)) => pages.round_trip(delay, retries).await,
                    None => Ok(()),
                };
                let entry = match sent {
                    Ok(()) => listing.next().await?,
                    Err(e) => Err(e),
                };
                let entry = match entry {
                    Ok(meta) if pages.starts_page(served) => pages.next_page().await.map(|()| meta),
                    entry => entry,
                };
                // After an error the listing ends, as the caller's next poll finds.
                let listing = match entry {
                    Ok(_) => listing,
                    Err(_) => futures::stream::empty().boxed(),
                };
                Some((entry, (listing, served + 1, pages, None)))
            },
        )
        .boxed()
    }

    /// A LIST request's first delay and retries (counted), and its later
    /// pages: their size and an RNG of their own when listings are paged.
    fn start_list(&self, prefix: Option<&Path>) -> ((Duration, Option<Retries>), ListPages) {
        self.stats.count_list();
        let mut rngs = self.rngs.lock();
        let first = self.config.list_latency.sample(&mut rngs.list);
        let retries = self.wire.retries(&mut rngs.list);
        let pages = self
            .config
            .list_page_keys
            .map(|keys| (keys, StdRng::seed_from_u64(rngs.list.next_u64())));
        let prefix = prefix.map(Path::to_string).unwrap_or_default();
        let pages = ListPages::new(
            pages,
            prefix,
            Arc::clone(&self.wire),
            self.config.list_latency,
        );
        ((first, retries), pages)
    }

    async fn head_request(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.stats.count_head();
        let (delay, retries) = {
            let mut rngs = self.rngs.lock();
            let delay = self.config.latency.sample(&mut rngs.head);
            (delay, self.wire.retries(&mut rngs.retry))
        };
        let key = location.to_string();
        let request = Request::to_object("HEAD", &key, delay, self.config.latency, retries);
        let mut connection: Option<OwnedSemaphorePermit> = None;
        self.wire.round_trip(&mut connection, request).await?;
        self.inner.get_opts(location, options).await
    }
}

impl<T: ObjectStore> fmt::Display for SimulatedStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimulatedStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Debug for SimulatedStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimulatedStore")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for SimulatedStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            return self.head_request(location, options).await;
        }

        // Draw the delay and take a sequence number under one lock, so the
        // n-th logged GET always gets the n-th draw for a given seed.
        let key = location.to_string();
        let (seq, delay, retries) = {
            let mut rngs = self.rngs.lock();
            let delay = self.config.latency.sample(&mut rngs.get);
            let retries = self.wire.retries(&mut rngs.retry);
            let seq = self
                .stats
                .start_get(key.clone(), options.range.clone(), delay);
            (seq, delay, retries)
        };
        // From here on, dropping this future (or failing) finishes the record.
        let mut guard = GetGuard::new(Arc::clone(&self.stats), seq);

        let request = Request::to_object("GET", &key, delay, self.config.latency, retries);
        if let Err(e) = self.wire.round_trip(&mut guard, request).await {
            guard.finish(RequestState::Failed);
            return Err(e);
        }

        let result = match self.inner.get_opts(location, options).await {
            Ok(result) => result,
            Err(e) => {
                guard.finish(RequestState::Failed);
                return Err(e);
            }
        };
        self.stats.first_byte(seq, result.range.clone());

        let GetResult {
            payload,
            meta,
            range,
            attributes,
        } = result;
        // `into_stream` turns a local-file payload into a stream as well, so
        // a wrapped LocalFileSystem is throttled like any other store.
        let body = GetResult {
            payload,
            meta: meta.clone(),
            range: range.clone(),
            attributes: Attributes::new(),
        }
        .into_stream();
        let body = SimulatedBody::new(
            body,
            range.end.saturating_sub(range.start),
            self.config.bandwidth_bytes_per_sec,
            guard,
        );
        Ok(GetResult {
            payload: GetResultPayload::Stream(body.boxed()),
            meta,
            range,
            attributes,
        })
    }

    /// Coalesced and cut as object_store's default `get_ranges` does, so the
    /// log shows the GETs S3 would receive; unlike the default, a range
    /// starting past the end of a short body is an error, not a panic
    /// (`ranges.rs`).
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        get_ranges_bounded(self, location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.simulate_list(prefix, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.simulate_list(prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let ((delay, retries), mut pages) = self.start_list(prefix);
        pages.round_trip(delay, retries).await?;
        let listed = self.inner.list_with_delimiter(prefix).await?;
        // Keys and common prefixes share S3's pages.
        let entries = listed.objects.len() + listed.common_prefixes.len();
        for served in 1..entries {
            if pages.starts_page(served) {
                pages.next_page().await?;
            }
        }
        Ok(listed)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        // Forwarded rather than left to the default copy + delete, so a
        // wrapped store keeps its own (possibly atomic) rename.
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests;
