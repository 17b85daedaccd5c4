//! The scan's background fetches: started when the scheduler admits them,
//! awaited by the readers served from them, stopped when released unserved
//! or abandoned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::ObjectStore;
use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::fetch::{Sending, SharedObject, ShortBodies, Target, fetch_planned};
use super::sink::{Reports, report};
use super::tasks::{ScanRuntime, ScanTask, SharedResult, Slot};
use crate::governor::{Hold, PrefetchGovernor, hold_buffers};
use crate::pacing::Wanted;
use crate::scheduler::{Event, FetchId, Part, RequestPlan};
use crate::sharing::{KeptKey, ObjectKey, ReadSharing};

/// A fetch's buffers, one per range, in the order of its ranges.
pub(crate) type Buffers = Arc<Vec<Bytes>>;

/// The least a reader waits for a read-ahead before fetching the bytes itself.
const MIN_STALL_WAIT: Duration = Duration::from_secs(2);

/// The background fetches of one scan.
pub(crate) struct Fetches {
    store: Arc<dyn ObjectStore>,
    /// Where planning kept the small objects it read whole.
    governor: Arc<PrefetchGovernor>,
    /// This scan's side of the reads other scans of the runtime share.
    sharing: Arc<ReadSharing>,
    slots: Mutex<HashMap<FetchId, Slot<Buffers>>>,
    /// Released fetches still landing for a reader that was served from them.
    landing: Mutex<HashMap<FetchId, AbortHandle>>,
    /// Widened or retained ranges riding on a demand read not landed yet:
    /// kept when it lands unless released meanwhile.
    riding: Mutex<HashSet<FetchId>>,
    /// The longest a fetch has taken, to tell a slow one from a stalled one.
    slowest_micros: Arc<AtomicU64>,
    /// Told when a reader comes to wait on the fetch, until it is released.
    wanted: Mutex<HashMap<FetchId, Arc<Wanted>>>,
    /// Where the fetches run, wherever they are started from.
    runtime: ScanRuntime,
}

impl Fetches {
    /// No fetches yet, of objects in `store`, sharing reads as `sharing`,
    /// finding what planning kept under `governor` and running on `runtime`.
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        sharing: ReadSharing,
        governor: Arc<PrefetchGovernor>,
        runtime: ScanRuntime,
    ) -> Self {
        Self {
            store,
            governor,
            sharing: Arc::new(sharing),
            slots: Mutex::default(),
            landing: Mutex::default(),
            riding: Mutex::default(),
            slowest_micros: Arc::default(),
            wanted: Mutex::default(),
            runtime,
        }
    }

    /// Start fetch `id` of `object` (cut from the whole of it where planning
    /// kept it): the GETs of its request plan, one
    /// buffer per range the plan was made for, each keeping `hold` (the
    /// governor's reservation) until the last of them is dropped. When the
    /// task starts, its requests go out (paced and hedged as `sending` says): they are
    /// counted in its metrics and
    /// reported to `sink` then ([`Event::FetchSent`]; a fetch stopped before
    /// its task started requested nothing). A failure is reported to `sink`
    /// too (the pieces go to demand reads).
    pub(crate) fn spawn(
        &self,
        id: FetchId,
        object: ObjectKey,
        requests: RequestPlan,
        hold: Hold,
        sending: Sending<'_>,
        sink: Reports,
    ) {
        let store = Arc::clone(&self.store);
        let kept = self.governor.kept_whole(&KeptKey::new(
            &self.store,
            object.location.clone(),
            object.size,
            object.modified,
        ));
        let sharing = Arc::clone(&self.sharing);
        let task = ScanTask::new(sending.metrics, self.runtime.handle());
        let slowest = Arc::clone(&self.slowest_micros);
        let metrics = sending.metrics.clone();
        let hedge_after = sending.after.cloned();
        let pacing = sending.pacing.cloned();
        let wanted = Arc::new(Wanted::default());
        self.wanted.lock().insert(id, Arc::clone(&wanted));
        let slot = task.spawn_slot("prefetch task", async move {
            report(&sink, Event::FetchSent { id });
            let started = Instant::now();
            let sending = Sending {
                after: hedge_after.as_ref(),
                metrics: &metrics,
                pacing: pacing.as_ref(),
                demand: false,
                wanted: Some(&wanted),
            };
            let shared = SharedObject {
                sharing: &sharing,
                object: &object,
            };
            let target = Target {
                location: &object.location,
                kept: kept.as_ref(),
                shared: Some(shared),
            };
            match fetch_planned(
                store.as_ref(),
                target,
                &requests,
                ShortBodies::Fail,
                sending,
                &sink,
            )
            .await
            {
                Ok(bytes) => {
                    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                    slowest.fetch_max(micros, Ordering::Relaxed);
                    Ok(Arc::new(hold_buffers(bytes, hold)))
                }
                Err(e) => {
                    // The scheduler unstages the failed bytes before the hold
                    // goes; a scan being dropped cannot hear of it, so its
                    // staged gauge falls first, as its drop is about to make it.
                    if !report(&sink, Event::FetchFailed { id }) {
                        hold.release_as_scan_ends();
                    }
                    let location = &object.location;
                    Err(Arc::new(format!("prefetch of {location} failed: {e}")))
                }
            }
        });
        self.slots.lock().insert(id, slot);
    }

    /// Fetch `id` rides on a demand read: its buffers come when the read
    /// lands ([`Self::insert_ready`]).
    pub(crate) fn ride(&self, id: FetchId) {
        self.riding.lock().insert(id);
    }

    /// The demand read fetch `id` rode on failed or was dropped: nothing
    /// comes for it.
    pub(crate) fn unride(&self, id: FetchId) {
        self.riding.lock().remove(&id);
    }

    /// Keep buffers that came with a demand read (widened or retained
    /// ranges) under `id`, held under `hold` until the last is dropped —
    /// unless the scheduler released `id` while the read was in flight:
    /// then they and their hold go now.
    ///
    /// The slots stay locked from the check to the insert (as in
    /// [`Self::release`]): a release between the two would miss both the
    /// ride and the slot, and leave an orphan slot holding until the scan
    /// ends.
    pub(crate) fn insert_ready(&self, id: FetchId, buffers: Vec<Bytes>, hold: Hold) {
        let mut slots = self.slots.lock();
        if !self.riding.lock().remove(&id) {
            return;
        }
        let buffers = hold_buffers(buffers, hold);
        slots.insert(id, Slot::ready(Arc::new(buffers)));
    }

    /// Whether fetch `id` still rides on its demand read (not released
    /// while the read was in flight).
    pub(crate) fn rides(&self, id: FetchId) -> bool {
        self.riding.lock().contains(&id)
    }

    /// The fetches `parts` are served from, to await, each told that a
    /// reader now waits on it. Taken when the read is planned: serving a
    /// piece whole releases its fetch, and the release drops the scan's
    /// handle on it.
    pub(crate) fn serving(&self, parts: &[Part]) -> HashMap<FetchId, SharedResult<Buffers>> {
        {
            let wanted = self.wanted.lock();
            for part in parts {
                if let Part::Staged { id, .. } = part
                    && let Some(wanted) = wanted.get(id)
                {
                    wanted.want();
                }
            }
        }
        let slots = self.slots.lock();
        parts
            .iter()
            .filter_map(|p| match p {
                Part::Staged { id, .. } => slots.get(id).map(|s| (*id, s.result.clone())),
                Part::Demand { .. } => None,
            })
            .collect()
    }

    /// The scheduler is done with fetch `id`. Unserved (`abort`), a request
    /// still in flight is stopped; otherwise a reader may be awaiting it: it
    /// lands, but stays stoppable by a stall or the scan's end.
    pub(crate) fn release(&self, id: FetchId, abort: bool) {
        self.wanted.lock().remove(&id);
        let slot = {
            let mut slots = self.slots.lock();
            if self.riding.lock().remove(&id) {
                return;
            }
            slots.remove(&id)
        };
        let Some(handle) = slot.and_then(|s| s.abort) else {
            return;
        };
        if abort {
            handle.abort();
        } else {
            let mut landing = self.landing.lock();
            landing.retain(|_, h| !h.is_finished());
            landing.insert(id, handle);
        }
    }

    /// Stop fetch `id`, which a reader gave up waiting for, wherever it is,
    /// and forget it (the scheduler has dropped its pieces: readers served
    /// from it fall back to demand reads).
    pub(crate) fn abandon(&self, id: FetchId) {
        self.wanted.lock().remove(&id);
        let landing = self.landing.lock().remove(&id);
        let staged = self.slots.lock().remove(&id).and_then(|s| s.abort);
        for handle in landing.into_iter().chain(staged) {
            handle.abort();
        }
    }

    /// How long a reader waits for a read-ahead before reading the bytes
    /// itself: four times the slowest read-ahead so far, at least
    /// [`MIN_STALL_WAIT`].
    pub(crate) fn patience(&self) -> Duration {
        let slowest = Duration::from_micros(self.slowest_micros.load(Ordering::Relaxed));
        MIN_STALL_WAIT.max(slowest * 4)
    }

    /// Stop everything (the scan is over).
    pub(crate) fn stop_all(&self) {
        for (_, slot) in self.slots.lock().drain() {
            slot.stop();
        }
        for (_, handle) in self.landing.lock().drain() {
            handle.abort();
        }
        self.riding.lock().clear();
        self.wanted.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use datafusion::execution::runtime_env::RuntimeEnv;
    use object_store::memory::InMemory;

    use super::*;
    use crate::governor::{Notice, Tenant};

    struct Nobody;
    impl Tenant for Nobody {
        fn notify(&self, _: Notice) {}
    }

    #[test]
    fn ranges_released_while_their_demand_read_is_in_flight_are_not_kept() {
        let governor = PrefetchGovernor::of(&RuntimeEnv::default());
        let share = governor.join(Weak::<Nobody>::new());
        let fetches = Fetches::new(
            Arc::new(InMemory::new()),
            governor.shared_reads().join(),
            Arc::clone(&governor),
            ScanRuntime::here(),
        );
        let (riding, released) = (FetchId(1), FetchId(2));
        fetches.ride(riding);
        fetches.ride(released);
        // A shed releases one before the read lands.
        fetches.release(released, true);
        let buffers = || vec![Bytes::from(vec![7u8; 100])];
        fetches.insert_ready(released, buffers(), share.try_reserve(100, 0).unwrap());
        assert_eq!(governor.held_bytes(), 0, "its hold went with its buffers");
        fetches.insert_ready(riding, buffers(), share.try_reserve(100, 0).unwrap());
        assert_eq!(governor.held_bytes(), 100, "kept");
        fetches.release(riding, false);
        assert_eq!(governor.held_bytes(), 0, "released once landed");
    }

    /// A read ahead waiting for room in its store's full window goes out
    /// once a reader is served from it: the reader does not wait behind
    /// the window.
    #[tokio::test(start_paused = true)]
    async fn a_read_ahead_a_reader_comes_to_wait_on_leaves_the_queue() {
        use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
        use object_store::path::Path;
        use object_store::{ObjectStoreExt, PutPayload};

        use crate::config::RequestPrice;
        use crate::io::sink::EventSink;
        use crate::metrics::{PrefetchStats, ScanMetrics};
        use crate::pacing::{Pacing, RequestGate};
        use crate::scheduler::plan_requests;

        let governor = PrefetchGovernor::of(&RuntimeEnv::default());
        let share = governor.join(Weak::<Nobody>::new());
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let location = Path::from("a.parquet");
        store
            .put(&location, PutPayload::from(vec![1u8; 1000]))
            .await
            .unwrap();
        let fetches = Fetches::new(
            Arc::clone(&store),
            governor.shared_reads().join(),
            Arc::clone(&governor),
            ScanRuntime::here(),
        );
        // A window of one, taken by another scan's read that never answers.
        let gate = Arc::new(RequestGate::new(1));
        let _elsewhere = gate.send().await;
        let pacing = Pacing::new(Arc::clone(&gate), 25);
        let metrics = ScanMetrics::new(
            &ExecutionPlanMetricsSet::new(),
            Arc::new(PrefetchStats::default()),
            true,
            RequestPrice::default(),
        );
        let sending = Sending {
            after: None,
            metrics: &metrics,
            pacing: Some(&pacing),
            demand: false,
            wanted: None,
        };
        let object = ObjectKey {
            store: "memory://".into(),
            location,
            size: 1000,
            modified: 0,
        };
        let id = FetchId(7);
        let sink: Reports = Weak::<NoSink>::new();
        fetches.spawn(
            id,
            object,
            plan_requests(std::slice::from_ref(&(100..200)), 0, |_| None),
            share.try_reserve(100, 0).unwrap(),
            sending,
            sink,
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(gate.stats().reads_ahead_queued, 0, "still waiting for room");
        let part = Part::Staged {
            id,
            index: 0,
            offset: 0,
            len: 100,
        };
        let served = fetches.serving(&[part]);
        let buffers = tokio::time::timeout(Duration::from_millis(10), served[&id].clone())
            .await
            .expect("out at once")
            .expect("fetched");
        assert_eq!(buffers[0].len(), 100);
        let stats = gate.stats();
        assert_eq!((stats.hurried, stats.reads_ahead_queued), (1, 1));
        assert_eq!(stats.queued, Duration::from_secs(1));

        struct NoSink;
        impl EventSink for NoSink {
            fn report(&self, _: crate::scheduler::Event) {}
        }
    }
}
