//! [`ScanDriver`]: the thin async layer around one scan's [`ScanCore`]. It
//! reports what happens as [`Event`]s, carries out the [`Action`]s it gets
//! back (background fetches, footer reads, releases), keeps the memory-pool
//! reservation equal to the staged bytes and publishes the counters. This
//! file is the one place the scheduler is changed; serving the decoder's
//! reads is in `reads.rs`, starting streams in `start.rs`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_datasource_parquet::ParquetFileReaderFactory;
use object_store::ObjectStore;
use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::fetch::{HedgeDelay, Sending};
use super::fetches::{Buffers, Fetches};
use super::footers::Footers;
use super::probe::Probe;
use super::pruning::StatisticsPruning;
use super::reservation::{Refusal, Reservation};
use super::sink::{EventSink, Reports};
use super::tasks::{ScanRuntime, ScanTask, SharedResult};
use super::units::ScanUnits;
use crate::attempts::ScanAttempts;
use crate::governor::{Hold, Notice, PrefetchGovernor, ScanShare, Tenant};
use crate::metrics::ScanMetrics;
use crate::pacing::Pacing;
use crate::profiles::StoreProfiles;
use crate::scheduler::{
    Action, CoreStats, Event, FetchId, FileId, PartitionId, ReadPlan, ScanCore, SlicePlan,
};

/// Everything a scan's driver needs from the source that created it.
pub(crate) struct DriverParts {
    pub core: ScanCore,
    pub units: ScanUnits,
    pub store: Arc<dyn ObjectStore>,
    pub inner_factory: Arc<dyn ParquetFileReaderFactory>,
    /// The factory footers are read ahead with: the inner factory over the
    /// scan's store, paced under `auto`.
    pub footer_factory: Arc<dyn ParquetFileReaderFactory>,
    pub metadata_size_hint: Option<usize>,
    pub plan_metrics: ExecutionPlanMetricsSet,
    pub reservation: MemoryReservation,
    /// The process-wide limit the scan's read-ahead counts against.
    pub governor: Arc<PrefetchGovernor>,
    /// `auto`: the window of requests in flight to the scan's store.
    pub pacing: Option<Pacing>,
    pub metrics: ScanMetrics,
    /// The scan may read files with an offset index slice by slice.
    pub slicing: bool,
    /// The scan's predicate, to predict the row groups its openers prune.
    pub pruning: Option<StatisticsPruning>,
    /// `prefetch.request_timeout`: the longest a demand read may take.
    pub request_timeout: Option<Duration>,
    /// The metadata cache the wrapped factory reads footers through: a footer
    /// found there says nothing about the store's round trip.
    pub metadata_cache: Option<Arc<FileMetadataCache>>,
    /// `auto`: where the session keeps what was measured of this scan's
    /// store, and the store's key there.
    pub profiles: Option<(Arc<StoreProfiles>, String)>,
}

/// The scheduler's answer to a read, with the fetches it is served from.
pub(crate) struct Served {
    pub plan: ReadPlan,
    pub staged: HashMap<FetchId, SharedResult<Buffers>>,
    /// What the widened and the retained ranges are held under, once the
    /// demand read brings them.
    pub widened_hold: Option<Hold>,
    pub retained_hold: Option<Hold>,
}

/// One scan's I/O driver, shared by all its partitions.
pub(crate) struct ScanDriver {
    core: Mutex<ScanCore>,
    published: Mutex<CoreStats>,
    pub(super) units: ScanUnits,
    pub(super) store: Arc<dyn ObjectStore>,
    inner_factory: Arc<dyn ParquetFileReaderFactory>,
    footer_factory: Arc<dyn ParquetFileReaderFactory>,
    metadata_size_hint: Option<usize>,
    plan_metrics: ExecutionPlanMetricsSet,
    pub(super) fetches: Fetches,
    pub(super) footers: Footers,
    pub(super) probe: Probe,
    /// `auto`: tasks that start a partition once the store is measured.
    pub(super) starts: Mutex<Vec<AbortHandle>>,
    /// Where the scan's background work runs, wherever it is started from.
    runtime: ScanRuntime,
    pub(super) reservation: Reservation,
    pub(super) metrics: ScanMetrics,
    /// When its GETs are hedged, as last decided (`None`: never).
    hedge_after: Option<HedgeDelay>,
    /// `auto`: the window of requests in flight to the store.
    pacing: Option<Pacing>,
    pub(super) slicing: bool,
    pub(super) request_timeout: Option<Duration>,
    metadata_cache: Option<Arc<FileMetadataCache>>,
    pub(super) profiles: Option<(Arc<StoreProfiles>, String)>,
    pub(super) started: Instant,
    first_batch_seen: AtomicBool,
    /// The store's throttled spell as last told to the core.
    store_throttled: AtomicBool,
    /// Where planning kept the objects it read whole.
    governor: Arc<PrefetchGovernor>,
    pub(super) this: Weak<ScanDriver>,
}

impl std::fmt::Debug for ScanDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanDriver")
            .field("files", &self.units.len())
            .field("stats", &self.core.lock().stats())
            .finish_non_exhaustive()
    }
}

impl ScanDriver {
    pub(crate) fn new(parts: DriverParts) -> Arc<Self> {
        Arc::new_cyclic(|this: &Weak<Self>| {
            let tenant: Weak<dyn Tenant> = this.clone();
            let share = parts.governor.join(tenant);
            Self::with_parts(parts, share, this)
        })
    }

    fn with_parts(parts: DriverParts, share: ScanShare, this: &Weak<Self>) -> Self {
        let hedge_after = parts.core.may_hedge().then(HedgeDelay::default);
        let runtime = ScanRuntime::here();
        Self {
            core: Mutex::new(parts.core),
            published: Mutex::new(CoreStats::default()),
            units: parts.units,
            fetches: Fetches::new(
                Arc::clone(&parts.store),
                parts.governor.shared_reads().join(),
                Arc::clone(&parts.governor),
                runtime.clone(),
            ),
            store: parts.store,
            inner_factory: parts.inner_factory,
            footer_factory: parts.footer_factory,
            metadata_size_hint: parts.metadata_size_hint,
            plan_metrics: parts.plan_metrics,
            footers: Footers::new(parts.slicing, parts.pruning.map(Arc::new)),
            probe: Probe::default(),
            starts: Mutex::new(vec![]),
            runtime,
            reservation: Reservation::new(parts.reservation, share),
            hedge_after,
            pacing: parts.pacing,
            metrics: parts.metrics,
            slicing: parts.slicing,
            request_timeout: parts.request_timeout,
            metadata_cache: parts.metadata_cache,
            profiles: parts.profiles,
            started: Instant::now(),
            first_batch_seen: AtomicBool::default(),
            store_throttled: AtomicBool::default(),
            governor: parts.governor,
            this: this.clone(),
        }
    }

    /// A background task of this scan (see [`ScanTask`]).
    pub(super) fn task(&self) -> ScanTask {
        ScanTask::new(&self.metrics, self.runtime.handle())
    }

    /// Where the attempts of the scan's reads count.
    pub(crate) fn attempts(&self) -> &ScanAttempts {
        self.metrics.attempts()
    }

    /// Whether the driver sends the decoders' data reads to the store itself.
    pub(crate) fn owns_demand_reads(&self) -> bool {
        self.core.lock().owns_demand_reads()
    }

    /// The scan unit a reader was created for.
    pub(crate) fn file_id(&self, file: &datafusion_datasource::PartitionedFile) -> Option<FileId> {
        self.units.id(file)
    }

    /// The factory whose readers do the actual I/O.
    pub(crate) fn inner_factory(&self) -> Arc<dyn ParquetFileReaderFactory> {
        Arc::clone(&self.inner_factory)
    }

    /// Where background work reports to.
    pub(super) fn sink(&self) -> Reports {
        self.this.clone()
    }

    /// Record the scan's first output batch (time to first batch).
    pub(crate) fn batch_produced(&self) {
        if !self.first_batch_seen.swap(true, Ordering::SeqCst) {
            self.metrics.first_batch(self.started.elapsed());
        }
    }

    /// Ask the scheduler something without changing it.
    pub(super) fn view<R>(&self, question: impl FnOnce(&ScanCore) -> R) -> R {
        question(&self.core.lock())
    }

    /// Report `events` to the scheduler, carry out its answers — reporting
    /// what the governor or the memory pool refuses as it goes — and publish
    /// its counters. The answer to a [`Event::ReadAsked`] among them is
    /// returned, with the fetches it is served from.
    ///
    /// The governor's gauge of this scan's staged bytes follows the one rule
    /// the ledger checks: it falls (to what the scheduler stages, less what it
    /// admitted, or was refused, that holds do not cover yet) before any
    /// action lets a released fetch's hold go, and rises only with a
    /// granted hold.
    pub(super) fn apply(&self, events: impl IntoIterator<Item = Event>) -> Option<Served> {
        let mut core = self.core.lock();
        let mut pending: VecDeque<Refusable> = events.into_iter().map(|event| (event, 0)).collect();
        // The store's throttled spell as the window last said, told first
        // when it changed (the core decides nothing on the window itself).
        if let Some(pacing) = &self.pacing {
            let throttled = pacing.window().throttled;
            if self.store_throttled.swap(throttled, Ordering::Relaxed) != throttled {
                pending.push_front((Event::StoreThrottled { throttled }, 0));
            }
        }
        let mut served = None;
        while let Some((event, _)) = pending.pop_front() {
            let actions = core.handle(event);
            // Refusals queued but not yet reported: still staged in the
            // scheduler, held by nothing.
            let refused_bytes: u64 = pending.iter().map(|(_, bytes)| bytes).sum();
            // What this answer released goes back to the pool and out of
            // the gauge before anything it admitted is reserved.
            let staged = core.stats().staged_bytes;
            self.reservation
                .shrink_to(staged.saturating_sub(unreserved(&actions)));
            self.reservation
                .staged(staged.saturating_sub(unheld(&actions) + refused_bytes));
            // Published before the pool grows for what this answer admitted:
            // the pool never holds more than `PrefetchStats` reports staged,
            // whenever an outside reader looks.
            self.publish_counters(&core);
            for action in actions {
                self.carry_out(action, &mut served, &mut pending);
            }
        }
        self.publish(&core);
        served
    }

    /// Carry out one action, queueing what the governor or the pool
    /// refused as events to report.
    fn carry_out(
        &self,
        action: Action,
        served: &mut Option<Served>,
        refused: &mut VecDeque<Refusable>,
    ) {
        match action {
            Action::Serve(mut plan) => {
                // The widened and retained ranges ride on the demand read:
                // refused room, they are simply not kept.
                let mut widened_hold = None;
                if let Some((id, widened)) = &plan.widened {
                    let bytes = total(widened);
                    match self.reservation.try_reserve(bytes, bytes, bytes) {
                        Ok(hold) => {
                            self.fetches.ride(*id);
                            widened_hold = Some(hold);
                        }
                        Err(refusal) => {
                            refused.push_back((refusal_event(refusal, *id), bytes));
                            plan.widened = None;
                        }
                    }
                }
                let mut retained_hold = None;
                if let Some((id, positions)) = &plan.retained {
                    let bytes = retained_bytes(&plan, positions);
                    // The pool is asked once the pages have landed.
                    match self.reservation.try_reserve(0, bytes, bytes) {
                        Ok(hold) => {
                            self.fetches.ride(*id);
                            retained_hold = Some(hold);
                        }
                        Err(refusal) => {
                            refused.push_back((refusal_event(refusal, *id), bytes));
                            plan.retained = None;
                        }
                    }
                }
                let staged = self.fetches.serving(&plan.parts);
                *served = Some(Served {
                    plan,
                    staged,
                    widened_hold,
                    retained_hold,
                });
            }
            Action::OpenAhead { file, partition } => self.open_ahead(file, partition, false),
            Action::Fetch {
                id,
                file,
                ranges,
                requests,
            } => {
                // The scheduler admitted these bytes against the budget; the
                // governor and the pool must agree too.
                let bytes = total(&ranges);
                let hold = match self.reservation.try_reserve(bytes, requests.bytes(), bytes) {
                    Ok(hold) => hold,
                    Err(refusal) => {
                        refused.push_back((refusal_event(refusal, id), bytes));
                        return;
                    }
                };
                let object = self.units.object(file);
                self.fetches
                    .spawn(id, object, requests, hold, self.sending(), self.sink());
            }
            Action::Release { id, abort } => self.fetches.release(id, abort),
        }
    }

    /// Publish the scheduler's counters (staged bytes among them) to the
    /// metrics and [`PrefetchStats`](crate::PrefetchStats).
    fn publish_counters(&self, core: &ScanCore) {
        let stats = core.stats();
        let mut published = self.published.lock();
        self.metrics.publish(&published, &stats);
        *published = stats;
    }

    /// Keep the pool reservation no larger than the staged bytes and publish
    /// the scheduler's counters.
    fn publish(&self, core: &ScanCore) {
        let stats = core.stats();
        self.reservation.shrink_to(stats.staged_bytes);
        self.reservation.staged(stats.staged_bytes);
        self.metrics.staged_over_held(self.reservation.violations());
        self.publish_counters(core);
        if let Some(auto) = core.auto_snapshot() {
            self.metrics.publish_auto(&auto);
        }
        if let Some(pacing) = &self.pacing {
            self.metrics.publish_window(&pacing.window());
        }
        if let Some(hedge_after) = &self.hedge_after {
            hedge_after.set(core.hedge_after());
        }
    }

    /// How this scan's reads ahead are sent (paced and hedged under
    /// `auto`) and counted.
    pub(super) fn sending(&self) -> Sending<'_> {
        Sending {
            after: self.hedge_after.as_ref(),
            metrics: &self.metrics,
            pacing: self.pacing.as_ref(),
            demand: false,
            wanted: None,
        }
    }

    /// Read an upcoming file's footer in the background, through the wrapped
    /// reader factory (into the metadata cache, exactly as the decoder
    /// would). Under `auto` a footer read ahead is paced by the store's
    /// window; one a decoder waits on (`demand`) goes out at once.
    pub(super) fn open_ahead(&self, file: FileId, partition: PartitionId, demand: bool) {
        let unit = self.units.file(file).clone();
        let factory = match demand {
            true => &self.inner_factory,
            false => &self.footer_factory,
        };
        let reader = factory.create_reader(
            partition,
            unit.clone(),
            self.metadata_size_hint,
            &self.plan_metrics,
        );
        let Ok(reader) = reader else {
            return;
        };
        let from_store = self
            .metadata_cache
            .as_ref()
            .is_none_or(|cache| !cache.contains_key(&unit.object_meta.location));
        // A paced footer's time includes its wait for room in the window:
        // not a round trip to tell the tuner.
        let timed = from_store && (demand || self.pacing.is_none());
        let task = self.task();
        self.footers
            .read_ahead(file, unit, reader, timed, task, self.sink());
    }

    /// A decoder in `partition` opened `file`.
    pub(crate) fn reader_opened(&self, file: FileId, partition: PartitionId) {
        self.apply([Event::ReaderOpened { file, partition }]);
    }

    /// A reader of `file` was dropped. (What planning kept of the file
    /// stays until the scan ends: DataFusion may open a file's readers
    /// one after another, one for each morsel of it.)
    pub(crate) fn reader_closed(&self, file: FileId) {
        self.apply([Event::ReaderClosed { file }]);
        self.footers.forget(file);
    }

    /// The whole of `file`'s object, if planning kept it.
    pub(super) fn kept(&self, file: FileId) -> Option<Bytes> {
        self.governor
            .kept_whole(&self.units.kept_key(&self.store, file))
    }

    /// The decoder of `file` starts on slice `slice`.
    pub(crate) fn slice_started(&self, file: FileId, slice: usize) {
        self.apply([Event::SliceStarted { file, slice }]);
    }

    /// Whether `file`'s slice plan over-predicts what its decoders read.
    pub(crate) fn slices_mispredicted(&self, file: FileId) -> bool {
        self.view(|core| core.slices_mispredicted(file))
    }

    /// The slices `file` is read in now, if any.
    pub(super) fn slice_plan(&self, file: FileId) -> Option<Arc<SlicePlan>> {
        self.view(|core| core.slice_plan(file))
    }
}

impl EventSink for ScanDriver {
    fn report(&self, event: Event) {
        let timed = matches!(
            event,
            Event::RequestTimed { .. } | Event::TransferTimed { .. }
        );
        self.apply([event]);
        // Share what this scan measured of its store with the session's
        // next scans.
        if timed
            && let Some((profiles, store)) = &self.profiles
            && let Some(measured) = self.view(ScanCore::store_measurements)
        {
            profiles.record(store, measured);
        }
    }
}

impl Tenant for ScanDriver {
    fn notify(&self, notice: Notice) {
        self.apply([match notice {
            Notice::RoomFreed => Event::RoomFreed,
            Notice::Shed { bytes } => Event::ShedAsked { bytes },
        }]);
    }
}

impl Drop for ScanDriver {
    fn drop(&mut self) {
        let mut core = self.core.lock();
        core.handle(Event::ScanEnded);
        // Nothing staged any more, before the stopped fetches let their
        // holds go and another scan takes the room.
        self.publish(&core);
        self.fetches.stop_all();
        self.footers.stop_all();
        // What planning kept of the scan's files waits for no one now.
        self.governor
            .forget_kept((0..self.units.len()).map(|file| self.units.kept_key(&self.store, file)));
        self.probe.stop();
        for handle in self.starts.lock().drain(..) {
            handle.abort();
        }
        self.reservation.free();
    }
}

fn total(ranges: &[std::ops::Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

/// An event to report, with the staged bytes no hold covers until it is:
/// a refusal's (zero for any other event).
type Refusable = (Event, u64);

/// The event that reports `refusal` of fetch `id`.
fn refusal_event(refusal: Refusal, id: FetchId) -> Event {
    match refusal {
        Refusal::Governor => Event::GovernorRefused { id },
        Refusal::Pool => Event::PoolRefused { id },
    }
}

/// Bytes of the demanded ranges at `positions` a read keeps staged.
fn retained_bytes(plan: &ReadPlan, positions: &[usize]) -> u64 {
    positions
        .iter()
        .map(|&p| plan.demand[p].end - plan.demand[p].start)
        .sum()
}

/// Bytes an answer admitted that no hold covers yet: its background
/// fetches, and a read's widened and retained ranges.
fn unheld(actions: &[Action]) -> u64 {
    let retained = actions.iter().map(|a| match a {
        Action::Serve(plan) => plan
            .retained
            .as_ref()
            .map_or(0, |(_, positions)| retained_bytes(plan, positions)),
        _ => 0,
    });
    unreserved(actions) + retained.sum::<u64>()
}

/// Bytes an answer admitted that are not reserved in the pool yet: its
/// background fetches and a read's widened ranges.
fn unreserved(actions: &[Action]) -> u64 {
    actions
        .iter()
        .map(|a| match a {
            Action::Fetch { ranges, .. } => total(ranges),
            Action::Serve(ReadPlan {
                widened: Some((_, widened)),
                ..
            }) => total(widened),
            _ => 0,
        })
        .sum()
}
