//! [`PrefetchGovernor`]: one limit on everything prefetching holds in a
//! process, shared by every prefetching scan of every session on one
//! `RuntimeEnv`.
//!
//! `prefetch.memory_budget` bounds one scan; a query service runs many
//! queries at once, each with several scans. The governor bounds their sum:
//! every byte a scan fetches ahead is reserved here before its request goes
//! out, and stays reserved until the last buffer holding it is dropped —
//! staged pieces, requests in flight, buffers a decoder still holds after
//! their piece was released, and the gap bytes of merged requests. A scan
//! the governor refuses stops reading ahead (its decoder reads on demand, as
//! stock DataFusion does) until room is freed.
//!
//! - `ledger.rs`: the decisions, pure — shares, turns, who should shed;
//! - `hold.rs`: a reservation, released when the last buffer holding it goes;
//! - `keeping.rs`: what planning keeps for scans to come, and the task
//!   that lets it go in time;
//! - `registry.rs`: one governor per runtime.
//!
//! How shares flow: see [`Ledger::try_reserve`](ledger::Ledger::try_reserve).

mod hold;
mod keeping;
mod ledger;
mod registry;

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::ObjectStore;
use parking_lot::Mutex;

pub(crate) use hold::{Hold, hold_buffers};
use keeping::Sweeper;
use ledger::{IDLE_AFTER, Ledger, Notices, ScanKey, Verdict};

use crate::config::{ByteSize, LimitSource};
use crate::pacing::{GatesByStore, RequestGate, RequestWindowStats};
use crate::sharing::{KEPT_FOR, KeptObjects, SharedReads};

/// The governor's limit on a runtime whose memory pool is unbounded (the
/// DataFusion default): four default scan budgets.
pub const DEFAULT_MEMORY_LIMIT: ByteSize = ByteSize::mib(1024);

/// On a runtime whose memory pool has a limit, the governor's default limit
/// is `1 / POOL_LIMIT_DIVISOR` of it (DuckDB caps its read-ahead at a quarter
/// of its memory limit too); each scan's budget is at most a sixteenth
/// ([`POOL_SHARE_DIVISOR`](crate::POOL_SHARE_DIVISOR)).
pub const POOL_LIMIT_DIVISOR: u64 = 4;

/// The process-wide limit on what prefetching holds, shared by every
/// prefetching scan of every session that uses one `RuntimeEnv` (more
/// exactly, one memory pool: sessions built on one runtime share it).
///
/// Its default limit is [`DEFAULT_MEMORY_LIMIT`], or a quarter of the memory
/// pool's limit when the pool is bounded. Set it when the runtime or the
/// context is built: with [`PrefetchGovernor::set_limit`], or with
/// `prefetch.memory_limit` in the [`SessionConfig`](datafusion::prelude::SessionConfig)
/// the context is built from; `SHOW prefetch.memory_limit` shows it.
///
/// ```
/// use datafusion::execution::runtime_env::RuntimeEnvBuilder;
/// use datafusion::prelude::{SessionConfig, SessionContext};
/// use datafusion_prefetch::{ByteSize, PrefetchGovernor, enable_prefetch};
///
/// let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
/// PrefetchGovernor::of(&runtime).set_limit(ByteSize::mib(512));
/// let state = SessionContext::new_with_config_rt(SessionConfig::new(), runtime.clone()).state();
/// let ctx = SessionContext::new_with_state(enable_prefetch(state));
/// // Every prefetching scan of `ctx`, and of any other session on `runtime`,
/// // holds at most 512 MiB between them.
/// assert_eq!(PrefetchGovernor::of(&runtime).limit(), ByteSize::mib(512));
/// ```
pub struct PrefetchGovernor {
    ledger: Mutex<Ledger>,
    /// How each scan is told of freed room, or asked to shed.
    tenants: Mutex<BTreeMap<ScanKey, Listener>>,
    started: Instant,
    /// The reads in flight of the runtime's scans, so that two scans reading
    /// the same bytes at once send one request.
    shared_reads: Arc<SharedReads>,
    /// Each store's window of requests in flight from the runtime's `auto`
    /// scans and planning.
    request_gates: GatesByStore,
    /// Small objects `auto`'s planning read whole, for the scans that read
    /// them, held under the ledger's keeper account.
    kept: Mutex<KeptObjects>,
    keeper: ScanKey,
    /// Lets kept bodies go once past their time.
    sweeper: Arc<Sweeper>,
    /// This governor, for the sweeper to hold weakly.
    this: Weak<PrefetchGovernor>,
}

impl std::fmt::Debug for PrefetchGovernor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ledger = self.ledger.lock();
        f.debug_struct("PrefetchGovernor")
            .field("limit", &ledger.limit())
            .field("held", &ledger.held())
            .field("staged", &ledger.staged())
            .field("live_scans", &ledger.live_scans())
            .field("staged_over_held_violations", &ledger.violations())
            .finish()
    }
}

impl PrefetchGovernor {
    /// The governor of `runtime`, made with the default limit the first time
    /// it is asked for.
    pub fn of(runtime: &RuntimeEnv) -> Arc<PrefetchGovernor> {
        registry::governor_of(&runtime.memory_pool)
    }

    /// The governor of every [`PrefetchingParquetSource`](crate::PrefetchingParquetSource)
    /// built without a runtime (they reserve from a private unbounded pool).
    pub(crate) fn detached() -> Arc<PrefetchGovernor> {
        registry::detached()
    }

    fn new(limit: u64) -> Arc<Self> {
        Self::keeping_for(limit, KEPT_FOR)
    }

    /// A governor under `limit` whose kept bodies wait `kept_for` at most.
    fn keeping_for(limit: u64, kept_for: Duration) -> Arc<Self> {
        let mut ledger = Ledger::new(limit, IDLE_AFTER);
        let keeper = ledger.join_keeper(Duration::ZERO);
        Arc::new_cyclic(|this| Self {
            ledger: Mutex::new(ledger),
            tenants: Mutex::default(),
            started: Instant::now(),
            shared_reads: Arc::default(),
            request_gates: GatesByStore::default(),
            kept: Mutex::new(KeptObjects::new(kept_for)),
            keeper,
            sweeper: Arc::default(),
            this: Weak::clone(this),
        })
    }

    /// The default limit for a runtime with `pool`.
    pub(crate) fn default_limit(pool: &dyn MemoryPool) -> ByteSize {
        match pool.memory_limit() {
            MemoryLimit::Finite(limit) => ByteSize::new((limit as u64 / POOL_LIMIT_DIVISOR).max(1)),
            _ => DEFAULT_MEMORY_LIMIT,
        }
    }

    /// The limit.
    pub fn limit(&self) -> ByteSize {
        ByteSize::new(self.ledger.lock().limit())
    }

    /// Change the limit. Reservations already made stay; new ones wait
    /// until they fit.
    pub fn set_limit(&self, limit: ByteSize) {
        let notices = self.ledger.lock().set_limit(limit.as_u64().max(1));
        self.deliver(notices);
    }

    /// Bytes prefetching holds now, across every scan: staged pieces,
    /// requests in flight, and buffers still referenced after release; and
    /// the files planning kept for scans to come ([`Self::kept_bytes`]).
    pub fn held_bytes(&self) -> u64 {
        self.ledger.lock().held()
    }

    /// Bytes staged now, across every scan, and kept for scans to come
    /// ([`Self::kept_bytes`]): a part of [`Self::held_bytes`].
    pub fn staged_bytes(&self) -> u64 {
        self.ledger.lock().staged()
    }

    /// The most bytes ever held at once.
    pub fn peak_held_bytes(&self) -> u64 {
        self.ledger.lock().peak_held()
    }

    /// The most bytes ever staged at once, across every scan (exact, not
    /// sampled: updated whenever any scan's staged bytes change).
    pub fn peak_staged_bytes(&self) -> u64 {
        self.ledger.lock().peak_staged()
    }

    /// Reservations the limit refused so far (each made a scan's
    /// read-ahead wait for room).
    pub fn refusals(&self) -> u64 {
        self.ledger.lock().refusals()
    }

    /// Changes after which some scan's staged bytes exceeded what it held
    /// under the governor (each scan raises its staged figure with the hold
    /// that covers it and lowers it before letting the hold go): zero unless
    /// the bookkeeping is wrong. Checked at every change, never clamped.
    pub fn staged_over_held_violations(&self) -> u64 {
        self.ledger.lock().violations()
    }

    /// Prefetching scans running now.
    pub fn live_scans(&self) -> usize {
        self.ledger.lock().live_scans()
    }

    /// The windows of requests in flight to the stores this runtime's
    /// `auto` scans read (one per store, in no set order; see
    /// [`RequestWindowStats`]).
    pub fn request_windows(&self) -> Vec<RequestWindowStats> {
        self.request_gates
            .all()
            .iter()
            .map(|gate| gate.stats().into())
            .collect()
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// The reads in flight of every scan under this governor (of one
    /// runtime), for a new scan to share.
    pub(crate) fn shared_reads(&self) -> &Arc<SharedReads> {
        &self.shared_reads
    }

    /// The window of requests in flight to `store`, shared by every `auto`
    /// scan of this runtime that reads it and by `auto`'s footer read-ahead
    /// at planning.
    pub(crate) fn request_gate(&self, store: &Arc<dyn ObjectStore>) -> Arc<RequestGate> {
        self.request_gates.gate(store)
    }

    /// A new scan joins; `tenant` is how it is told of freed room.
    pub(crate) fn join(self: &Arc<Self>, tenant: Weak<dyn Tenant>) -> ScanShare {
        let key = self.ledger.lock().join(self.now());
        let listener = Listener {
            tenant,
            runtime: tokio::runtime::Handle::try_current().ok(),
        };
        self.tenants.lock().insert(key, listener);
        ScanShare {
            governor: Arc::clone(self),
            key,
        }
    }

    /// Tell scans what the ledger decided. Each report runs as a task of its
    /// own, on the current runtime or else on the one the scan joined from: a
    /// release may happen while the releasing scan's scheduler is locked,
    /// and the scan told may be that one. The tasks are spawned after the
    /// lock on the tenants is let go and hold each scan weakly until it
    /// runs (a notice never keeps a finished scan alive, nor drops the last
    /// reference to one under that lock). A notice no runtime can run is
    /// re-armed in the ledger, so the next change delivers it.
    fn deliver(&self, mut notices: Notices) {
        if notices.is_empty() {
            return;
        }
        // The keeper gives back what it is asked for at once.
        if let Some(at) = notices.shed.iter().position(|(key, _)| *key == self.keeper) {
            let (_, bytes) = notices.shed.remove(at);
            let mut kept = self.kept.lock();
            let freed = kept.shed(bytes);
            self.release_kept(kept, freed);
        }
        let told: Vec<(ScanKey, Notice)> = notices
            .wake
            .iter()
            .map(|&key| (key, Notice::RoomFreed))
            .chain(
                notices
                    .shed
                    .iter()
                    .map(|&(key, bytes)| (key, Notice::Shed { bytes })),
            )
            .collect();
        let listeners: Vec<(ScanKey, Notice, Listener)> = {
            let tenants = self.tenants.lock();
            told.into_iter()
                .filter_map(|(key, notice)| tenants.get(&key).map(|l| (key, notice, l.clone())))
                .collect()
        };
        let current = tokio::runtime::Handle::try_current().ok();
        let mut undelivered = Notices::default();
        for (key, notice, Listener { tenant, runtime }) in listeners {
            match current.as_ref().or(runtime.as_ref()) {
                Some(runtime) => {
                    runtime.spawn(async move {
                        if let Some(tenant) = tenant.upgrade() {
                            tenant.notify(notice);
                        }
                    });
                }
                None => match notice {
                    Notice::RoomFreed => undelivered.wake.push(key),
                    Notice::Shed { bytes } => undelivered.shed.push((key, bytes)),
                },
            }
        }
        // Only what no runtime could run is told again: the rest was sent.
        if !undelivered.is_empty() {
            self.ledger.lock().rearm(&undelivered);
        }
    }

    fn release(&self, key: ScanKey, bytes: u64) {
        let notices = self.ledger.lock().release(key, bytes);
        self.deliver(notices);
    }

    fn set_staged(&self, key: ScanKey, staged: u64) {
        self.ledger.lock().set_staged(key, staged);
    }
}

impl Drop for PrefetchGovernor {
    fn drop(&mut self) {
        // Its sweeper need not wait for its time to find it gone.
        self.sweeper.wake.notify_one();
    }
}

impl LimitSource for PrefetchGovernor {
    fn limit(&self) -> ByteSize {
        PrefetchGovernor::limit(self)
    }
}

/// One scan's membership in its governor; leaving is dropping it.
pub(crate) struct ScanShare {
    governor: Arc<PrefetchGovernor>,
    key: ScanKey,
}

impl std::fmt::Debug for ScanShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanShare").field("key", &self.key).finish()
    }
}

impl ScanShare {
    /// Reserve `bytes` for a fetch, `staged` of them staged by the scan's
    /// scheduler from the moment they are granted (the scan's staged figure
    /// rises with the hold, atomically), or `None`: the limit has no room
    /// for this scan now, and it is told when room is freed.
    pub(crate) fn try_reserve(&self, bytes: u64, staged: u64) -> Option<Hold> {
        let governor = &self.governor;
        let (verdict, notices) =
            governor
                .ledger
                .lock()
                .try_reserve(self.key, bytes, staged, governor.now());
        governor.deliver(notices);
        (verdict == Verdict::Granted).then(|| Hold::new(Arc::clone(governor), self.key, bytes))
    }

    /// The scan's decoders asked for bytes: its consumer is reading.
    pub(crate) fn read_asked(&self) {
        let now = self.governor.now();
        self.governor.ledger.lock().read_asked(self.key, now);
    }

    /// The scan's scheduler stages `staged` bytes now: set before the holds
    /// of bytes it released are let go.
    pub(crate) fn set_staged(&self, staged: u64) {
        self.governor.ledger.lock().set_staged(self.key, staged);
    }

    /// [`PrefetchGovernor::staged_over_held_violations`] of this scan.
    pub(crate) fn violations(&self) -> u64 {
        self.governor.ledger.lock().violations_of(self.key)
    }
}

impl Drop for ScanShare {
    fn drop(&mut self) {
        self.governor.tenants.lock().remove(&self.key);
        let notices = self.governor.ledger.lock().leave(self.key);
        self.governor.deliver(notices);
    }
}

/// How a scan is told: weakly (the governor never keeps a finished scan
/// alive), on the runtime it joined from when a change happens off one.
#[derive(Clone)]
struct Listener {
    tenant: Weak<dyn Tenant>,
    runtime: Option<tokio::runtime::Handle>,
}

/// What the governor tells a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// Room was freed: a scan that was refused may read ahead again.
    RoomFreed,
    /// The scan's consumer is idle while others wait: give back up to
    /// `bytes` of staged read-ahead.
    Shed {
        /// How much is asked back.
        bytes: u64,
    },
}

/// A scan as the governor knows it: something it can tell of freed room.
pub(crate) trait Tenant: Send + Sync {
    /// Take `notice` (called from a task of its own, never under the
    /// governor's lock).
    fn notify(&self, notice: Notice);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    pub(super) struct Counting(pub(super) AtomicUsize);

    impl Tenant for Counting {
        fn notify(&self, _: Notice) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A governor with room for one 100-byte hold, `waiter` refused.
    fn full(waiter: &Arc<Counting>) -> (Arc<PrefetchGovernor>, ScanShare, ScanShare, Hold) {
        let governor = PrefetchGovernor::new(100);
        let holder = governor.join(Weak::<Counting>::new());
        let tenant: Weak<dyn Tenant> = Arc::downgrade(waiter) as Weak<dyn Tenant>;
        let waiting = governor.join(tenant);
        let hold = holder.try_reserve(100, 0).expect("room");
        assert!(waiting.try_reserve(10, 0).is_none());
        (governor, holder, waiting, hold)
    }

    #[test]
    fn a_notice_holds_its_scan_weakly_until_it_runs() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let waiter = Arc::new(Counting::default());
        let (_governor, _holder, _waiting, hold) = full(&waiter);
        runtime.block_on(async {
            drop(hold);
            // Spawned, not run yet: the task must not keep the scan alive.
            assert_eq!(Arc::strong_count(&waiter), 1);
            tokio::task::yield_now().await;
        });
        assert_eq!(waiter.0.load(Ordering::SeqCst), 1, "told once it ran");
    }

    #[test]
    fn a_scan_that_finished_before_its_notice_ran_is_not_told() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let waiter = Arc::new(Counting::default());
        let (_governor, _holder, waiting, hold) = full(&waiter);
        let weak = Arc::downgrade(&waiter);
        runtime.block_on(async {
            drop(hold);
            drop(waiting);
            drop(waiter);
            tokio::task::yield_now().await;
        });
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn a_wake_up_with_no_runtime_to_run_it_is_delivered_at_the_next_release() {
        let waiter = Arc::new(Counting::default());
        // Joined outside any runtime, released by a plain thread: nothing
        // can run the notice now.
        let (governor, holder, _waiting, hold) = full(&waiter);
        drop(hold);
        assert_eq!(waiter.0.load(Ordering::SeqCst), 0);
        let again = holder.try_reserve(10, 0).expect("room");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            drop(again);
            tokio::task::yield_now().await;
        });
        assert_eq!(waiter.0.load(Ordering::SeqCst), 1, "{governor:?}");
    }

    #[test]
    fn releasing_a_hold_before_lowering_staged_is_counted() {
        let governor = PrefetchGovernor::new(1000);
        let share = governor.join(Weak::<Counting>::new());
        let hold = share.try_reserve(100, 100).expect("room");
        share.set_staged(0);
        drop(hold);
        assert_eq!(governor.staged_over_held_violations(), 0, "right order");
        let hold = share.try_reserve(100, 100).expect("room");
        drop(hold);
        share.set_staged(0);
        assert_eq!(governor.staged_over_held_violations(), 1, "wrong order");
        assert_eq!(share.violations(), 1);
    }

    #[test]
    fn a_hold_let_go_as_its_scan_ends_lowers_staged_first() {
        let governor = PrefetchGovernor::new(1000);
        let share = governor.join(Weak::<Counting>::new());
        let kept = share.try_reserve(50, 50).expect("room");
        let failed = share.try_reserve(100, 100).expect("room");
        // The scan's driver is being dropped: it cannot unstage the failed
        // fetch's 100 bytes before their hold goes.
        failed.release_as_scan_ends();
        assert_eq!(governor.staged_over_held_violations(), 0);
        assert_eq!(governor.held_bytes(), 50, "{governor:?}");
        drop(kept);
        drop(share);
        assert_eq!(governor.staged_over_held_violations(), 0);
    }
}
