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
//! - `registry.rs`: one governor per runtime.
//!
//! How shares flow: see [`Ledger::try_reserve`](ledger::Ledger::try_reserve).

mod hold;
mod ledger;
mod registry;

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnv;
use parking_lot::Mutex;

pub(crate) use hold::{Hold, hold_buffers};
use ledger::{IDLE_AFTER, Ledger, Notices, ScanKey, Verdict};

use crate::config::{ByteSize, LimitSource};

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
    /// How each scan is told of freed room, or asked to shed (held weakly:
    /// the governor never keeps a finished scan alive).
    tenants: Mutex<BTreeMap<ScanKey, Weak<dyn Tenant>>>,
    started: Instant,
}

impl std::fmt::Debug for PrefetchGovernor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ledger = self.ledger.lock();
        f.debug_struct("PrefetchGovernor")
            .field("limit", &ledger.limit())
            .field("held", &ledger.held())
            .field("staged", &ledger.staged())
            .field("live_scans", &ledger.live_scans())
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

    fn new(limit: u64) -> Self {
        Self {
            ledger: Mutex::new(Ledger::new(limit, IDLE_AFTER)),
            tenants: Mutex::default(),
            started: Instant::now(),
        }
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
    /// requests in flight, and buffers still referenced after release.
    pub fn held_bytes(&self) -> u64 {
        self.ledger.lock().held()
    }

    /// Bytes staged now, across every scan (a part of [`Self::held_bytes`]).
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

    /// Prefetching scans running now.
    pub fn live_scans(&self) -> usize {
        self.ledger.lock().live_scans()
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// A new scan joins; `tenant` is how it is told of freed room.
    pub(crate) fn join(self: &Arc<Self>, tenant: Weak<dyn Tenant>) -> ScanShare {
        let key = self.ledger.lock().join(self.now());
        self.tenants.lock().insert(key, tenant);
        ScanShare {
            governor: Arc::clone(self),
            key,
        }
    }

    /// Tell scans what the ledger decided. Each report runs as a task of its
    /// own: a release may happen while the releasing scan's scheduler is
    /// locked, and the scan told may be that one.
    fn deliver(&self, notices: Notices) {
        if notices.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Outside tokio (a buffer dropped by a plain thread): the scan
            // resumes at its own next release.
            return;
        };
        let tenants = self.tenants.lock();
        let told = notices
            .wake
            .into_iter()
            .map(|key| (key, Notice::RoomFreed))
            .chain(
                notices
                    .shed
                    .into_iter()
                    .map(|(key, bytes)| (key, Notice::Shed { bytes })),
            );
        for (key, notice) in told {
            if let Some(tenant) = tenants.get(&key).and_then(Weak::upgrade) {
                runtime.spawn(async move { tenant.notify(notice) });
            }
        }
    }

    fn release(&self, key: ScanKey, bytes: u64) {
        let notices = self.ledger.lock().release(key, bytes);
        self.deliver(notices);
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
    /// Reserve `bytes` for a fetch, or `None`: the limit has no room for
    /// this scan now, and it is told when room is freed.
    pub(crate) fn try_reserve(&self, bytes: u64) -> Option<Hold> {
        let governor = &self.governor;
        let (verdict, notices) =
            governor
                .ledger
                .lock()
                .try_reserve(self.key, bytes, governor.now());
        governor.deliver(notices);
        (verdict == Verdict::Granted).then(|| Hold::new(Arc::clone(governor), self.key, bytes))
    }

    /// The scan's decoders asked for bytes: its consumer is reading.
    pub(crate) fn read_asked(&self) {
        let now = self.governor.now();
        self.governor.ledger.lock().read_asked(self.key, now);
    }

    /// The scan's scheduler stages `staged` bytes now.
    pub(crate) fn set_staged(&self, staged: u64) {
        self.governor.ledger.lock().set_staged(self.key, staged);
    }
}

impl Drop for ScanShare {
    fn drop(&mut self) {
        self.governor.tenants.lock().remove(&self.key);
        let notices = self.governor.ledger.lock().leave(self.key);
        self.governor.deliver(notices);
    }
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
