//! The thin async layer around [`ScanCore`]: it carries out the core's actions
//! (background fetches, footer reads, cancellations), keeps the memory-pool
//! reservation equal to the staged bytes, and serves decoder reads.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_datasource::PartitionedFile;
use datafusion_datasource_parquet::{
    ParquetAccessPlan, ParquetFileReaderFactory, ParquetRowSelection,
};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use tokio::task::AbortHandle;

use crate::core::{
    Action, CoreStats, FetchId, FileId, FileLayout, Part, PartitionId, RequestPlan, ScanCore,
    SlicePlan, StoreProfiles, offset_index_fits,
};
use crate::metrics::ScanMetrics;

type FetchResult = Result<Arc<Vec<Bytes>>, Arc<String>>;
type SharedFetch = Shared<BoxFuture<'static, FetchResult>>;
type MetadataResult = Result<Arc<ParquetMetaData>, Arc<String>>;
type SharedMetadata = Shared<BoxFuture<'static, MetadataResult>>;
type SharedProbe = Shared<BoxFuture<'static, Result<(), Arc<String>>>>;

/// The position of `file` (the same object and byte range) in a scan's file list.
pub(crate) fn scan_unit_id(files: &[PartitionedFile], file: &PartitionedFile) -> Option<FileId> {
    let range = |f: &PartitionedFile| f.range.as_ref().map(|r| (r.start, r.end));
    files.iter().position(|f| {
        f.object_meta.location == file.object_meta.location && range(f) == range(file)
    })
}

struct Slot<T: Clone> {
    result: T,
    abort: Option<AbortHandle>,
}

impl<T: Clone + Send + Sync + 'static> Slot<Shared<BoxFuture<'static, Result<T, Arc<String>>>>> {
    /// Run `task` in the background; any number of readers may await its result.
    fn spawn(
        what: &'static str,
        task: impl Future<Output = Result<T, Arc<String>>> + Send + 'static,
    ) -> Self {
        let handle = tokio::spawn(task);
        let abort = handle.abort_handle();
        let result = async move {
            match handle.await {
                Ok(result) => result,
                Err(e) => Err(Arc::new(format!("{what} ended: {e}"))),
            }
        }
        .boxed()
        .shared();
        Self {
            result,
            abort: Some(abort),
        }
    }
}

/// Everything a scan's scheduler needs from the source that created it.
pub(crate) struct SchedulerParts {
    pub core: ScanCore,
    pub files: Vec<PartitionedFile>,
    pub store: Arc<dyn ObjectStore>,
    pub inner_factory: Arc<dyn ParquetFileReaderFactory>,
    pub metadata_size_hint: Option<usize>,
    pub plan_metrics: ExecutionPlanMetricsSet,
    pub reservation: MemoryReservation,
    pub metrics: ScanMetrics,
    /// `streaming` (and the scan's row order allows it): read files with an
    /// offset index slice by slice.
    pub slicing: bool,
    /// `prefetch.request_timeout`: the longest a demand read may take.
    pub request_timeout: Option<Duration>,
    /// The metadata cache the wrapped factory reads footers through: a footer
    /// found there says nothing about the store's round trip.
    pub metadata_cache: Option<Arc<FileMetadataCache>>,
    /// `auto`: where the session keeps what was measured of this scan's
    /// store, and the store's key there.
    pub profiles: Option<(Arc<StoreProfiles>, String)>,
    /// `auto` with DataFusion's own reader factory: demand reads on a remote
    /// store go to the store as `auto` plans them (split when one
    /// connection's bandwidth is the limit). A custom factory keeps its reads.
    pub own_demand_requests: bool,
}

/// One scan's I/O scheduler, shared by all its partitions.
pub(crate) struct ScanScheduler {
    core: Mutex<ScanCore>,
    published: Mutex<CoreStats>,
    files: Vec<PartitionedFile>,
    store: Arc<dyn ObjectStore>,
    inner_factory: Arc<dyn ParquetFileReaderFactory>,
    metadata_size_hint: Option<usize>,
    plan_metrics: ExecutionPlanMetricsSet,
    fetches: Mutex<HashMap<FetchId, Slot<SharedFetch>>>,
    /// Released fetches still landing for a reader that was served from them.
    landing: Mutex<HashMap<FetchId, AbortHandle>>,
    footers: Mutex<HashMap<FileId, Slot<SharedMetadata>>>,
    /// `auto`: a timed HEAD request, when nothing else has been timed yet.
    probe: Mutex<Option<Slot<SharedProbe>>>,
    /// `auto`: tasks that start a partition once the store is measured (see
    /// [`Self::partition_started`]).
    starts: Mutex<Vec<AbortHandle>>,
    reservation: MemoryReservation,
    metrics: ScanMetrics,
    slicing: bool,
    request_timeout: Option<Duration>,
    metadata_cache: Option<Arc<FileMetadataCache>>,
    own_demand_requests: bool,
    profiles: Option<(Arc<StoreProfiles>, String)>,
    started: Instant,
    first_batch_seen: AtomicBool,
    slowest_fetch_micros: AtomicU64,
    this: Weak<ScanScheduler>,
}

/// The longest a scan's first file waits for `auto`'s store probe: twice
/// [`LOCAL_RTT`](crate::core::LOCAL_RTT), so a local store under load still
/// answers in time, and a remote one costs at most this once per scan.
const PROBE_WAIT: Duration = Duration::from_millis(10);

/// How often a stream waiting to start checks whether a sibling scan has
/// measured the store.
const SIBLING_POLL: Duration = Duration::from_millis(1);

/// The least a reader waits for a read-ahead before fetching the bytes itself.
const MIN_STALL_WAIT: Duration = Duration::from_secs(2);

impl std::fmt::Debug for ScanScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanScheduler")
            .field("files", &self.files.len())
            .field("stats", &self.core.lock().stats())
            .finish_non_exhaustive()
    }
}

impl ScanScheduler {
    pub(crate) fn new(parts: SchedulerParts) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            core: Mutex::new(parts.core),
            published: Mutex::new(CoreStats::default()),
            files: parts.files,
            store: parts.store,
            inner_factory: parts.inner_factory,
            metadata_size_hint: parts.metadata_size_hint,
            plan_metrics: parts.plan_metrics,
            fetches: Mutex::new(HashMap::new()),
            landing: Mutex::new(HashMap::new()),
            footers: Mutex::new(HashMap::new()),
            probe: Mutex::new(None),
            starts: Mutex::new(vec![]),
            reservation: parts.reservation,
            metrics: parts.metrics,
            slicing: parts.slicing,
            request_timeout: parts.request_timeout,
            metadata_cache: parts.metadata_cache,
            own_demand_requests: parts.own_demand_requests,
            profiles: parts.profiles,
            started: Instant::now(),
            first_batch_seen: Default::default(),
            slowest_fetch_micros: Default::default(),
            this: this.clone(),
        })
    }

    /// The scan unit a reader was created for.
    pub(crate) fn file_id(&self, file: &PartitionedFile) -> Option<FileId> {
        scan_unit_id(&self.files, file)
    }

    /// The factory whose readers do the actual I/O.
    pub(crate) fn inner_factory(&self) -> Arc<dyn ParquetFileReaderFactory> {
        Arc::clone(&self.inner_factory)
    }

    /// Record the scan's first output batch (time to first batch).
    pub(crate) fn batch_produced(&self) {
        if !self.first_batch_seen.swap(true, Ordering::SeqCst) {
            self.metrics.first_batch(self.started.elapsed());
        }
    }

    /// Run a core transition, carry out its actions and publish its counters.
    fn apply<R>(&self, transition: impl FnOnce(&mut ScanCore) -> (R, Vec<Action>)) -> R {
        let mut core = self.core.lock();
        let (result, actions) = transition(&mut core);
        self.make_room(&core, fetch_bytes(&actions));
        self.carry_out(&mut core, actions);
        self.settle(&core);
        result
    }

    /// Shrink the pool reservation to the staged bytes that are already
    /// reserved (all but `unreserved`, admitted and not yet grown for), so what
    /// a transition released is returned before anything new is reserved and
    /// the pool never holds more than the budget.
    fn make_room(&self, core: &ScanCore, unreserved: u64) {
        let reserved = core.stats().staged_bytes.saturating_sub(unreserved) as usize;
        if self.reservation.size() > reserved {
            self.reservation.shrink(self.reservation.size() - reserved);
        }
    }

    /// Keep the pool reservation equal to the staged bytes and publish metrics.
    fn settle(&self, core: &ScanCore) {
        let stats = core.stats();
        let staged = stats.staged_bytes as usize;
        if self.reservation.size() > staged {
            self.reservation.shrink(self.reservation.size() - staged);
        }
        let mut published = self.published.lock();
        self.metrics.publish(&published, &stats);
        *published = stats;
        if let Some(auto) = core.auto_snapshot() {
            self.metrics.publish_auto(&auto);
        }
    }

    fn carry_out(&self, core: &mut ScanCore, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::OpenAhead { file, partition } => self.open_ahead(file, partition),
                Action::Fetch { id, file, ranges } => {
                    // The core admitted these bytes against the budget; the pool
                    // must agree too, or read-ahead shrinks to what it grants.
                    let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
                    if self.reservation.try_grow(bytes as usize).is_err() {
                        core.pool_refused(id);
                        continue;
                    }
                    let requests = core.request_plan(&ranges);
                    self.spawn_fetch(id, file, ranges, requests);
                }
                Action::Release { id, abort } => {
                    let Some(handle) = self.fetches.lock().remove(&id).and_then(|s| s.abort) else {
                        continue;
                    };
                    if abort {
                        handle.abort();
                    } else {
                        // A reader is awaiting it: let it land, but keep the
                        // handle so a stall or the scan's end can still stop it.
                        let mut landing = self.landing.lock();
                        landing.retain(|_, h| !h.is_finished());
                        landing.insert(id, handle);
                    }
                }
            }
        }
    }

    /// Start a background fetch of `ranges`: one `get_ranges` call, or under
    /// `auto` the GETs of its request plan, each timed for the tuner.
    fn spawn_fetch(
        &self,
        id: FetchId,
        file: FileId,
        ranges: Vec<Range<u64>>,
        requests: Option<RequestPlan>,
    ) {
        let store = Arc::clone(&self.store);
        let location = self.files[file].object_meta.location.clone();
        match &requests {
            Some(plan) => {
                for request in &plan.requests {
                    self.metrics.request(request.end - request.start);
                }
            }
            None => self
                .metrics
                .request(ranges.iter().map(|r| r.end - r.start).sum()),
        }
        let guard = self.metrics.stats().task_started();
        let this = self.this.clone();
        let slot = Slot::spawn("prefetch task", async move {
            let _guard = guard;
            let started = Instant::now();
            let fetched = match requests {
                Some(plan) => super::requests::fetch(&store, &location, &plan, &this).await,
                None => store.get_ranges(&location, &ranges).await,
            };
            match fetched {
                Ok(bytes) => {
                    if let Some(scheduler) = this.upgrade() {
                        scheduler.fetch_took(started.elapsed());
                    }
                    Ok(Arc::new(bytes))
                }
                Err(e) => {
                    if let Some(scheduler) = this.upgrade() {
                        scheduler.apply(|core| ((), core.fetch_failed(id)));
                    }
                    Err(Arc::new(format!("prefetch of {location} failed: {e}")))
                }
            }
        });
        self.fetches.lock().insert(id, slot);
    }

    /// Read an upcoming file's footer into the metadata cache (through the
    /// wrapped reader factory, exactly as the decoder would) and learn its layout.
    fn open_ahead(&self, file: FileId, partition: PartitionId) {
        let partitioned_file = self.files[file].clone();
        let reader = self.inner_factory.create_reader(
            partition,
            partitioned_file.clone(),
            self.metadata_size_hint,
            &self.plan_metrics,
        );
        let Ok(mut reader) = reader else {
            return;
        };
        let guard = self.metrics.stats().task_started();
        let this = self.this.clone();
        let from_store = self
            .metadata_cache
            .as_ref()
            .is_none_or(|cache| !cache.contains_key(&partitioned_file.object_meta.location));
        // Slicing needs the offset index; otherwise the decoder loads the page
        // index itself when a predicate can use it.
        let page_index = if self.slicing {
            PageIndexPolicy::Optional
        } else {
            PageIndexPolicy::Skip
        };
        let slot = Slot::spawn("footer read", async move {
            let _guard = guard;
            let options = ArrowReaderOptions::new().with_page_index_policy(page_index);
            let started = Instant::now();
            let mut metadata = reader
                .get_metadata(Some(&options))
                .await
                .map_err(|e| Arc::new(e.to_string()))?;
            if from_store && let Some(scheduler) = this.upgrade() {
                // A footer read is (mostly) one small request: a round trip.
                scheduler.observe_request(0, started.elapsed());
            }
            if !offset_index_fits(&metadata, partitioned_file.object_meta.size) {
                // Loaded for slicing only: a decoder must meet a corrupt offset
                // index only if it loads the page index itself, as without us.
                metadata = Arc::new(
                    ParquetMetaData::clone(&metadata)
                        .into_builder()
                        .set_column_index(None)
                        .set_offset_index(None)
                        .build(),
                );
            }
            if let Some(scheduler) = this.upgrade() {
                scheduler.metadata_known(file, &partitioned_file, &metadata);
            }
            Ok(metadata)
        });
        self.footers.lock().insert(file, slot);
    }

    /// `auto`: a request whose largest range was `bytes` long took `took`.
    pub(crate) fn observe_request(&self, bytes: u64, took: Duration) {
        self.apply(|core| {
            core.observe_request(bytes, took);
            self.keep_measurements(core);
            ((), vec![])
        });
    }

    /// Share what this scan measured of its store with the session's next scans.
    fn keep_measurements(&self, core: &ScanCore) {
        if let (Some((profiles, store)), Some(tuner)) = (&self.profiles, core.auto_tuner()) {
            profiles.record(store, tuner);
        }
    }

    /// `auto`: a GET of `bytes` answered its first byte after `first_byte`
    /// and its last after `took`.
    pub(crate) fn observe_transfer(&self, bytes: u64, first_byte: Duration, took: Duration) {
        self.apply(|core| {
            core.observe_transfer(bytes, first_byte, took);
            self.keep_measurements(core);
            ((), vec![])
        });
    }

    pub(crate) fn reader_opened(&self, file: FileId, partition: PartitionId) {
        self.apply(|core| ((), core.reader_opened(file, partition)));
    }

    pub(crate) fn reader_closed(&self, file: FileId) {
        self.apply(|core| ((), core.reader_closed(file)));
        // The footer read of a finished file is no longer useful to anyone.
        if let Some(handle) = self.footers.lock().remove(&file).and_then(|s| s.abort) {
            handle.abort();
        }
    }

    pub(crate) fn metadata_known(
        &self,
        file: FileId,
        partitioned_file: &PartitionedFile,
        metadata: &ParquetMetaData,
    ) {
        let access_plan = partitioned_file.extensions.get::<ParquetAccessPlan>();
        // A whole-file row selection cannot be split into slices (the
        // extension cannot be replaced), so such files keep row groups whole.
        let with_pages = self.slicing
            && !partitioned_file
                .extensions
                .contains::<ParquetRowSelection>();
        let layout = FileLayout::from_metadata(
            metadata,
            partitioned_file.object_meta.size,
            partitioned_file.range.as_ref(),
            access_plan,
            with_pages,
        );
        self.apply(|core| ((), core.metadata_known(file, Arc::new(layout))));
    }

    /// The slices `file` is read in under `streaming`, once its footer and
    /// offset index are known; `None` reads it at row-group granularity (no
    /// offset index, the footer read failed or stalled — the decoder then reads
    /// the footer itself and reports any error as DataFusion would).
    pub(crate) async fn slices(
        &self,
        file: FileId,
        partition: PartitionId,
    ) -> Option<Arc<SlicePlan>> {
        if !self.slicing {
            return None;
        }
        self.probe_store(file).await;
        if !self.core.lock().slices_files() {
            return self.apply(|core| core.slices_for_reading(file));
        }
        let footer = self.footers.lock().get(&file).map(|s| s.result.clone());
        let footer = match footer {
            Some(footer) => footer,
            None => {
                self.open_ahead(file, partition);
                self.footers.lock().get(&file).map(|s| s.result.clone())?
            }
        };
        self.await_ahead(footer).await?;
        self.apply(|core| core.slices_for_reading(file))
    }

    /// The stream of `partition` was created: open its first files now, in
    /// the background, so their first reads overlap whatever the query runs
    /// before the stream is polled (see [`ScanCore::partition_started`]).
    /// `auto` on a store the session has not measured waits, in a task, for
    /// its probe or a sibling's measurement; everything else starts at once.
    /// Outside a tokio runtime nothing starts early: the first poll opens the
    /// file as usual.
    pub(crate) fn partition_started(&self, partition: PartitionId) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.files.is_empty() {
            return;
        }
        // Nothing to wait for (a fixed policy, or a store already measured):
        // start now, before the stream can be polled.
        let Some(mut probe) = self.start_probe(0) else {
            self.apply(|core| ((), core.partition_started(partition)));
            return;
        };
        let this = self.this.clone();
        let guard = self.metrics.stats().task_started();
        let task = runtime.spawn(async move {
            let _guard = guard;
            // Whichever lands first: this scan's probe, or any sibling scan's
            // measurement of the store (every scan of a query starts at once,
            // each with a probe of its own).
            let mut ticks = tokio::time::interval(SIBLING_POLL);
            loop {
                tokio::select! {
                    // A failed probe leaves the store unmeasured: nothing starts.
                    _ = &mut probe => break,
                    _ = ticks.tick() => {
                        let Some(scheduler) = this.upgrade() else {
                            return;
                        };
                        if !scheduler.adopt_session_measurements() {
                            break;
                        }
                    }
                }
            }
            if let Some(scheduler) = this.upgrade() {
                scheduler.apply(|core| ((), core.partition_started(partition)));
            }
        });
        let mut starts = self.starts.lock();
        starts.retain(|h| !h.is_finished());
        starts.push(task.abort_handle());
    }

    /// `auto` before any request has been timed (footers came from the
    /// metadata cache): time a HEAD of `file`, waiting for it at most
    /// [`PROBE_WAIT`]. Unanswered by then, the store is remote — the default
    /// assumption — and the probe's time is recorded whenever it lands.
    async fn probe_store(&self, file: FileId) {
        if let Some(probe) = self.start_probe(file) {
            let _ = tokio::time::timeout(PROBE_WAIT, probe).await;
        }
    }

    /// `auto`: adopt what the session's other scans have measured of the
    /// store, if this scan has timed nothing yet. Whether it still wants a
    /// probe.
    fn adopt_session_measurements(&self) -> bool {
        if let Some((profiles, store)) = &self.profiles {
            let measured = profiles.tuner_for(store);
            if measured.has_measured() {
                self.apply(|core| {
                    core.adopt_store_measurements(&measured);
                    ((), vec![])
                });
            }
        }
        self.core.lock().wants_probe()
    }

    /// `auto`: adopt what the session's other scans measured of the store;
    /// if that is nothing, start (once per scan) a timed HEAD of `file` and
    /// return it to await.
    fn start_probe(&self, file: FileId) -> Option<SharedProbe> {
        if !self.adopt_session_measurements() {
            return None;
        }
        let probe = {
            let mut probe = self.probe.lock();
            let slot = probe.get_or_insert_with(|| {
                let store = Arc::clone(&self.store);
                let location = self.files[file].object_meta.location.clone();
                let this = self.this.clone();
                let guard = self.metrics.stats().task_started();
                Slot::spawn("store probe", async move {
                    let _guard = guard;
                    let started = Instant::now();
                    store
                        .head(&location)
                        .await
                        .map_err(|e| Arc::new(e.to_string()))?;
                    if let Some(scheduler) = this.upgrade() {
                        scheduler.observe_request(0, started.elapsed());
                    }
                    Ok(())
                })
            });
            slot.result.clone()
        };
        Some(probe)
    }

    /// Whether `file`'s slice plan over-predicts what its decoders read.
    pub(crate) fn slices_mispredicted(&self, file: FileId) -> bool {
        self.core.lock().slices_mispredicted(file)
    }

    /// The decoder of `file` starts on slice `slice`.
    pub(crate) fn slice_started(&self, file: FileId, slice: usize) {
        self.apply(|core| ((), core.slice_started(file, slice)));
    }

    /// The footer of `file`, from a read-ahead if one ran, else from `reader`.
    pub(crate) async fn metadata(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        options: Option<&ArrowReaderOptions>,
    ) -> parquet::errors::Result<Arc<ParquetMetaData>> {
        let ahead = self.footers.lock().get(&file).map(|s| s.result.clone());
        let ahead = match ahead {
            Some(ahead) => self.await_ahead(ahead).await,
            None => None,
        };
        let wants_page_index = options
            .map(|o| o.column_index_policy() != PageIndexPolicy::Skip)
            .unwrap_or(false);
        if let Some(metadata) = ahead
            && (!wants_page_index
                || (metadata.column_index().is_some() && metadata.offset_index().is_some()))
        {
            return Ok(metadata);
        }
        let metadata = reader.get_metadata(options).await?;
        if !self.core.lock().reads_like_off(file) {
            self.metadata_known(file, &self.files[file], &metadata);
        }
        Ok(metadata)
    }

    /// Remember how long a read-ahead took, to tell a slow one from a stalled one.
    fn fetch_took(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.slowest_fetch_micros
            .fetch_max(micros, Ordering::Relaxed);
    }

    /// Wait for a read-ahead, but not forever: after several times the slowest
    /// read-ahead so far (at least [`MIN_STALL_WAIT`]) the reader gives up on it
    /// and reads the bytes itself. `None` if it failed or stalled.
    async fn await_ahead<T: Clone>(
        &self,
        ahead: Shared<BoxFuture<'static, Result<T, Arc<String>>>>,
    ) -> Option<T> {
        let slowest = Duration::from_micros(self.slowest_fetch_micros.load(Ordering::Relaxed));
        let patience = MIN_STALL_WAIT.max(slowest * 4);
        match tokio::time::timeout(patience, ahead).await {
            Ok(result) => result.ok(),
            Err(_) => {
                self.metrics.stalled_read_ahead();
                None
            }
        }
    }

    /// Stop a read-ahead a reader gave up on, wherever the scheduler holds it.
    fn abandon(&self, id: FetchId) {
        let landing = self.landing.lock().remove(&id);
        let staged = self.fetches.lock().get(&id).and_then(|s| s.abort.clone());
        for handle in landing.into_iter().chain(staged) {
            handle.abort();
        }
    }

    /// A demand read, within `prefetch.request_timeout` if one is set.
    async fn demand<T>(
        &self,
        read: impl Future<Output = parquet::errors::Result<T>>,
    ) -> parquet::errors::Result<T> {
        match self.request_timeout {
            None => read.await,
            Some(limit) => tokio::time::timeout(limit, read).await.unwrap_or_else(|_| {
                Err(ParquetError::General(format!(
                    "no answer within prefetch.request_timeout ({limit:?})"
                )))
            }),
        }
    }

    /// A demand read failed: say which file and bytes, whatever the store said.
    fn read_error(&self, file: FileId, ranges: &[Range<u64>], error: ParquetError) -> ParquetError {
        let location = &self.files[file].object_meta.location;
        let ranges: Vec<String> = ranges
            .iter()
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        super::read_error::reading(
            format!("reading {location} bytes [{}]", ranges.join(", ")),
            error,
        )
    }

    /// A range of `ranges` that starts past the end of `file` (a corrupt
    /// footer), refused as a store refuses it rather than asked for: object_store's
    /// range merging can panic on the answer. A range that only ends past the
    /// end is asked for: stores clamp it, and a short buffer is refused later,
    /// as the decoder would.
    fn past_the_end(&self, file: FileId, ranges: &[Range<u64>]) -> Option<ParquetError> {
        let size = self.files[file].object_meta.size;
        let past = ranges.iter().find(|r| r.start >= size)?;
        Some(super::read_error::refused(format!(
            "range {}..{} starts past the end of the file ({size} bytes)",
            past.start, past.end
        )))
    }

    /// `auto` on a local store: the decoder's own read, untouched, only timed
    /// (so a store that turns slow is noticed).
    async fn read_like_off(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        ranges: Vec<Range<u64>>,
    ) -> parquet::errors::Result<Vec<Bytes>> {
        if let Some(refused) = self.past_the_end(file, &ranges) {
            return Err(self.read_error(file, &ranges, refused));
        }
        let largest = ranges.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        self.metrics
            .request(ranges.iter().map(|r| r.end - r.start).sum());
        let asked = Instant::now();
        match self.demand(reader.get_byte_ranges(ranges.clone())).await {
            Ok(fetched) => {
                self.observe_request(largest, asked.elapsed());
                self.metrics.io_wait(asked.elapsed());
                Ok(fetched)
            }
            Err(e) => Err(self.read_error(file, &ranges, e)),
        }
    }

    /// Keep demanded pages a later slice reads staged under `id` (the core has
    /// admitted them), once the pool agrees.
    fn retain(&self, id: FetchId, positions: &[usize], fetched: &[Bytes]) {
        let kept: Vec<Bytes> = positions.iter().map(|&i| fetched[i].clone()).collect();
        let bytes: usize = kept.iter().map(Bytes::len).sum();
        if self.reservation.try_grow(bytes).is_err() {
            self.apply(|core| {
                core.pool_refused(id);
                ((), vec![])
            });
            return;
        }
        let ready: FetchResult = Ok(Arc::new(kept));
        self.fetches.lock().insert(
            id,
            Slot {
                result: futures::future::ready(ready).boxed().shared(),
                abort: None,
            },
        );
    }

    /// Serve a decoder's request: staged buffers where they cover it, one
    /// demand request (widened under `batched`) for the rest.
    pub(crate) async fn read(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        ranges: Vec<Range<u64>>,
    ) -> parquet::errors::Result<Vec<Bytes>> {
        if self.core.lock().reads_like_off(file) {
            return self.read_like_off(file, reader, ranges).await;
        }
        let started = Instant::now();
        let (plan, staged_fetches) = self.apply(|core| {
            core.read_started(file, self.started.elapsed());
            let mut plan = core.plan_read(file, &ranges);
            let actions = std::mem::take(&mut plan.actions);
            if let Some((id, widened)) = &plan.widened {
                let bytes: u64 = widened.iter().map(|r| r.end - r.start).sum();
                self.make_room(core, bytes + fetch_bytes(&actions));
                if self.reservation.try_grow(bytes as usize).is_err() {
                    core.pool_refused(*id);
                    plan.widened = None;
                }
            }
            // Take the staged fetches now: serving a chunk whole releases it, and
            // the release (carried out next) drops the scheduler's handle on it.
            let fetches = self.fetches.lock();
            let staged: HashMap<FetchId, SharedFetch> = plan
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Staged { id, .. } => fetches.get(id).map(|s| (*id, s.result.clone())),
                    Part::Demand { .. } => None,
                })
                .collect();
            ((plan, staged), actions)
        });

        let mut demand_bytes = vec![];
        if !plan.demand.is_empty() || plan.widened.is_some() {
            let mut request = plan.demand.clone();
            if let Some((_, widened)) = &plan.widened {
                request.extend(widened.iter().cloned());
            }
            let bytes: u64 = request.iter().map(|r| r.end - r.start).sum();
            let fetched = if let Some(refused) = self.past_the_end(file, &request) {
                Err(refused)
            } else {
                let lengths: Vec<u64> = request.iter().map(|r| r.end - r.start).collect();
                let planned = if self.own_demand_requests {
                    self.core.lock().demand_request_plan(&request)
                } else {
                    None
                };
                let fetched = match planned {
                    Some(plan) => {
                        for r in &plan.requests {
                            self.metrics.request(r.end - r.start);
                        }
                        let location = &self.files[file].object_meta.location;
                        self.demand(async {
                            super::requests::fetch(self.store.as_ref(), location, &plan, &self.this)
                                .await
                                .map_err(|e| ParquetError::External(Box::new(e)))
                        })
                        .await
                    }
                    None => {
                        self.metrics.request(bytes);
                        let asked = Instant::now();
                        let fetched = self.demand(reader.get_byte_ranges(request)).await;
                        if fetched.is_ok() {
                            // Ranges of one demand read travel in parallel:
                            // the largest one sets its time.
                            let largest = lengths.iter().copied().max().unwrap_or(0);
                            self.observe_request(largest, asked.elapsed());
                        }
                        fetched
                    }
                };
                fetched
                    .and_then(|fetched| {
                    let whole = fetched.len() == lengths.len()
                        && fetched.iter().zip(&lengths).all(|(b, l)| b.len() as u64 == *l);
                    if whole {
                        Ok(fetched)
                    } else {
                        Err(ParquetError::General(format!(
                            "the store returned {} buffers of {:?} bytes for ranges of {lengths:?} bytes",
                            fetched.len(),
                            fetched.iter().map(Bytes::len).collect::<Vec<_>>()
                        )))
                    }
                })
            };
            match fetched {
                Ok(mut fetched) => {
                    if let Some((id, _)) = &plan.widened {
                        let widened = fetched.split_off(plan.demand.len());
                        let ready: FetchResult = Ok(Arc::new(widened));
                        self.fetches.lock().insert(
                            *id,
                            Slot {
                                result: futures::future::ready(ready).boxed().shared(),
                                abort: None,
                            },
                        );
                    }
                    if let Some((id, positions)) = &plan.retained {
                        self.retain(*id, positions, &fetched);
                    }
                    demand_bytes = fetched;
                }
                Err(e) => {
                    if let Some((id, _)) = &plan.widened {
                        let id = *id;
                        self.apply(|core| ((), core.fetch_failed(id)));
                    }
                    if let Some((id, _)) = &plan.retained {
                        let id = *id;
                        self.apply(|core| ((), core.fetch_failed(id)));
                    }
                    self.metrics.io_wait(started.elapsed());
                    return Err(self.read_error(file, &plan.demand, e));
                }
            }
        }

        let mut out = Vec::with_capacity(ranges.len());
        for (range, part) in ranges.iter().zip(&plan.parts) {
            let bytes = match part {
                Part::Demand { index } => demand_bytes[*index].clone(),
                Part::Staged {
                    id,
                    index,
                    offset,
                    len,
                } => {
                    let landed = match staged_fetches.get(id) {
                        Some(fetch) => self.await_ahead(fetch.clone()).await,
                        None => None,
                    };
                    // A buffer shorter than its range (a misbehaving store) is
                    // treated like a failed prefetch rather than sliced out of bounds.
                    let (start, end) = (*offset as usize, (*offset + *len) as usize);
                    let slice = landed
                        .as_ref()
                        .and_then(|buffers| buffers.get(*index))
                        .filter(|buffer| buffer.len() >= end)
                        .map(|buffer| buffer.slice(start..end));
                    if slice.is_none() {
                        self.abandon(*id);
                    }
                    match slice {
                        Some(bytes) => bytes,
                        // A failed, cancelled or stalled prefetch never fails
                        // the query: fetch the range on demand instead.
                        None => {
                            self.metrics.request(range.end - range.start);
                            self.demand(reader.get_bytes(range.clone()))
                                .await
                                .map_err(|e| {
                                    self.read_error(file, std::slice::from_ref(range), e)
                                })?
                        }
                    }
                }
            };
            out.push(bytes);
        }
        self.metrics.io_wait(started.elapsed());
        let handed: u64 = out.iter().map(|b| b.len() as u64).sum();
        let at = self.started.elapsed();
        self.apply(|core| (core.read_finished(file, handed, at), vec![]));
        Ok(out)
    }
}

impl Drop for ScanScheduler {
    fn drop(&mut self) {
        let mut core = self.core.lock();
        core.shutdown();
        for (_, slot) in self.fetches.lock().drain() {
            if let Some(abort) = slot.abort {
                abort.abort();
            }
        }
        for (_, handle) in self.landing.lock().drain() {
            handle.abort();
        }
        for (_, slot) in self.footers.lock().drain() {
            if let Some(abort) = slot.abort {
                abort.abort();
            }
        }
        if let Some(abort) = self.probe.lock().take().and_then(|slot| slot.abort) {
            abort.abort();
        }
        for handle in self.starts.lock().drain(..) {
            handle.abort();
        }
        self.settle(&core);
        self.reservation.free();
    }
}

/// Bytes of the background fetches among `actions` (admitted, not yet reserved).
fn fetch_bytes(actions: &[Action]) -> u64 {
    actions
        .iter()
        .map(|a| match a {
            Action::Fetch { ranges, .. } => ranges.iter().map(|r| r.end - r.start).sum(),
            _ => 0,
        })
        .sum()
}
