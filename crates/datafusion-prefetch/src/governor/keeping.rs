//! What `auto`'s planning keeps for the scans to come: small objects read
//! whole, held under the governor's keeper account ([`KeptObjects`]
//! decides which), and the sweeper, a task that lets them go once they
//! have waited their time — with no further keep, query or scan to look,
//! an `EXPLAIN` or a table registered and never queried would hold them
//! until the limit ran short.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use parking_lot::MutexGuard;
use tokio::sync::Notify;

use super::PrefetchGovernor;
use super::ledger::{Notices, Verdict};
use crate::sharing::{KEPT_SHARE_DIVISOR, KeptKey, KeptObjects};

/// The sweeper waits at least this long between looks unless woken,
/// however close the next expiry: a body may stay up to this long past its
/// time, and the bodies of thousands of files kept over a planning of
/// seconds are not walked (for those of dropped stores) once per file.
const SWEEP_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// A governor's sweeper: one task waiting at most (an ending task and the
/// next may overlap for a moment), while anything is kept and a runtime
/// can run it.
///
/// It runs on the runtime of the keep that armed it. While that runtime
/// lives and is not driven (a current-thread runtime no longer blocked on)
/// no other sweeper starts, and bodies past their time go, as they do off
/// any runtime, at the next keep or when a scan is short of room.
#[derive(Debug, Default)]
pub(super) struct Sweeper {
    /// A task is spawned and has not found nothing kept: cleared when it
    /// does, or when the task is dropped (its runtime shut down, or the
    /// governor is gone). A task that panicked (a runtime without timers)
    /// leaves it set, so that no keep starts another to panic again.
    armed: AtomicBool,
    /// Wakes the task before its time: nothing is kept any more, or the
    /// governor is gone.
    pub(super) wake: Notify,
}

/// Disarms the sweeper when its task ends any other way than by finding
/// nothing kept: its runtime shut down, or the governor is gone — but not
/// when it panicked.
struct Disarm(Option<Arc<Sweeper>>);

impl Drop for Disarm {
    fn drop(&mut self) {
        if let Some(sweeper) = &self.0
            && !std::thread::panicking()
        {
            sweeper.armed.store(false, Ordering::SeqCst);
        }
    }
}

impl PrefetchGovernor {
    /// Keep `body`, the whole of the object `key` names, for a scan to read
    /// instead of the store ([`KeptObjects`]): reserved under the
    /// limit as staged bytes, within `1 / KEPT_SHARE_DIVISOR` of it, and
    /// not while a scan waits for room. Returns whether it was kept.
    pub(crate) fn keep_whole(
        &self,
        key: KeptKey,
        store: &Arc<dyn ObjectStore>,
        body: Bytes,
    ) -> bool {
        let bytes = body.len() as u64;
        let now = self.now();
        let mut kept = self.kept.lock();
        let (room, expired) = kept.room_for(bytes, self.limit().as_u64() / KEPT_SHARE_DIVISOR, now);
        let mut ledger = self.ledger.lock();
        let mut notices = Notices::default();
        if expired > 0 {
            ledger.set_staged(self.keeper, kept.bytes());
            notices = ledger.release(self.keeper, expired);
        }
        let granted =
            room && ledger.try_reserve(self.keeper, bytes, bytes, now).0 == Verdict::Granted;
        if granted {
            let replaced = kept.keep(key, store, body, now);
            if replaced > 0 {
                ledger.set_staged(self.keeper, kept.bytes());
                // The first release marked the scans it wakes as told: its
                // notices must still reach them.
                notices = notices.merge(ledger.release(self.keeper, replaced));
            }
        }
        drop((ledger, kept));
        self.deliver(notices);
        if granted {
            self.arm_sweeper();
        }
        granted
    }

    /// The whole body of the object `key` names, if planning kept it.
    pub(crate) fn kept_whole(&self, key: &KeptKey) -> Option<Bytes> {
        self.kept.lock().get(key)
    }

    /// Stop keeping the objects `keys` name (their scan ended, or their
    /// table's schema inference failed).
    pub(crate) fn forget_kept(&self, keys: impl IntoIterator<Item = KeptKey>) {
        let mut kept = self.kept.lock();
        if kept.len() == 0 {
            return;
        }
        let freed: u64 = keys.into_iter().map(|key| kept.forget(&key)).sum();
        self.release_kept(kept, freed);
    }

    /// Bytes kept for scans to come: small files `auto`'s planning read
    /// whole (no larger than `metadata_size_hint`), for their scan to cut
    /// its data from instead of asking the store again. A part of
    /// [`Self::staged_bytes`], at most an eighth of the limit, given back
    /// first when a scan is short of room.
    pub fn kept_bytes(&self) -> u64 {
        self.kept.lock().bytes()
    }

    /// Let go of `freed` kept bytes, `kept` what is left: the keeper's
    /// staged figure falls before its hold. Once nothing is kept, the
    /// sweeper need not wait for its time.
    pub(super) fn release_kept(&self, kept: MutexGuard<'_, KeptObjects>, freed: u64) {
        if freed == 0 {
            return;
        }
        let notices = {
            let mut ledger = self.ledger.lock();
            ledger.set_staged(self.keeper, kept.bytes());
            ledger.release(self.keeper, freed)
        };
        let empty = kept.len() == 0;
        drop(kept);
        self.deliver(notices);
        if empty {
            self.sweeper.wake.notify_one();
        }
    }

    /// Start the sweeper on the current runtime unless one runs. Off a
    /// runtime it does not start: bodies past their time then go at the
    /// next keep.
    fn arm_sweeper(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.sweeper.armed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Made before the task runs, so that a task dropped unpolled (its
        // runtime shut down) disarms too.
        let disarm = Disarm(Some(Arc::clone(&self.sweeper)));
        let governor = Weak::clone(&self.this);
        runtime.spawn(async move {
            let mut disarm = disarm;
            loop {
                // The governor is held only while it is swept, never while
                // the task waits.
                let wait = match governor.upgrade().map(|g| g.sweep_kept()) {
                    Some(Some(wait)) => wait,
                    Some(None) => {
                        // Disarmed under the lock on the kept bodies.
                        disarm.0 = None;
                        return;
                    }
                    None => return,
                };
                let sweeper = disarm.0.as_ref().expect("armed");
                // On tokio's clock, while kept bodies are timed on std's: on
                // a paused clock (tests) this wait advances the clock.
                // No test pauses it with bodies kept.
                let _ =
                    tokio::time::timeout(wait.max(SWEEP_AT_MOST_EVERY), sweeper.wake.notified())
                        .await;
            }
        });
    }

    /// Let go of the bodies past their time and those of dropped stores;
    /// returns how long until the next may be, or `None` when nothing is
    /// kept (the sweeper is disarmed then, under the lock a keep takes).
    fn sweep_kept(&self) -> Option<Duration> {
        let now = self.now();
        let mut kept = self.kept.lock();
        let freed = kept.expire(now) + kept.forget_dropped_stores();
        let next = kept.next_expiry();
        if next.is_none() {
            self.sweeper.armed.store(false, Ordering::SeqCst);
        }
        self.release_kept(kept, freed);
        next.map(|at| at.saturating_sub(now))
    }

    /// Whether the sweeper runs.
    #[cfg(test)]
    fn sweeping(&self) -> bool {
        self.sweeper.armed.load(Ordering::SeqCst)
    }

    /// Keep the sweeper from starting: only keeps let bodies go.
    #[cfg(test)]
    fn without_sweeper(self: Arc<Self>) -> Arc<Self> {
        self.sweeper.armed.store(true, Ordering::SeqCst);
        self
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use super::*;
    use crate::governor::Tenant;
    use crate::governor::tests::Counting;

    fn kept_key(store: &Arc<dyn ObjectStore>, name: &str) -> KeptKey {
        KeptKey::new(store, object_store::path::Path::from(name), 100, 0)
    }

    fn body() -> Bytes {
        Bytes::from(vec![0u8; 100])
    }

    /// A governor with room for two kept bodies, each kept for `kept_for`
    /// at most, and a store to keep them for.
    fn keeping(kept_for: Duration) -> (Arc<PrefetchGovernor>, Arc<dyn ObjectStore>) {
        let governor = PrefetchGovernor::keeping_for(8 * 250, kept_for);
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        (governor, store)
    }

    #[test]
    fn kept_bodies_are_staged_within_their_share_and_shed_for_a_scan() {
        let governor = PrefetchGovernor::new(8 * 250);
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        // An eighth of the limit: two bodies, not three.
        assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
        assert!(governor.keep_whole(kept_key(&store, "b"), &store, body()));
        assert!(!governor.keep_whole(kept_key(&store, "c"), &store, body()));
        assert_eq!(governor.kept_bytes(), 200);
        assert_eq!((governor.held_bytes(), governor.staged_bytes()), (200, 200));
        assert_eq!(governor.live_scans(), 0);
        assert!(governor.kept_whole(&kept_key(&store, "a")).is_some());

        // A scan short of room gets the kept bytes back, oldest first.
        let share = governor.join(Weak::<Counting>::new());
        share.read_asked();
        let hold = share.try_reserve(1750, 0).expect("room");
        assert!(share.try_reserve(100, 0).is_none(), "refused: 2050 > 2000");
        assert_eq!(governor.kept_bytes(), 100);
        assert!(governor.kept_whole(&kept_key(&store, "a")).is_none());
        let more = share.try_reserve(100, 0).expect("room given back");
        // Asked again, the keeper gives back the rest.
        assert!(share.try_reserve(100, 0).is_none());
        assert_eq!(governor.kept_bytes(), 0);
        assert!(share.try_reserve(100, 0).is_some());
        // Kept bodies are let go once their scan is over.
        assert!(governor.keep_whole(kept_key(&store, "d"), &store, body()));
        assert_eq!(governor.kept_bytes(), 100);
        governor.forget_kept([kept_key(&store, "d")]);
        assert_eq!(governor.kept_bytes(), 0);
        drop((hold, more, share));
        assert_eq!((governor.held_bytes(), governor.staged_bytes()), (0, 0));
        assert_eq!(governor.staged_over_held_violations(), 0);
    }

    #[test]
    fn scans_woken_by_an_expiry_are_told_when_the_same_keep_replaces_a_body() {
        let kept_for = Duration::from_secs(1);
        let (governor, store) = keeping(kept_for);
        // The keep must find "a" past its time: a sweeper would let it go
        // (and wake the scan) first.
        let governor = governor.without_sweeper();
        let waiter = Arc::new(Counting::default());
        let waiting = governor.join(Arc::downgrade(&waiter) as Weak<dyn Tenant>);
        let reading = governor.join(Weak::<Counting>::new());
        runtime().block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
            tokio::time::sleep(kept_for * 6 / 10).await;
            assert!(governor.keep_whole(kept_key(&store, "b"), &store, body()));
            // Over its share with another scan reading, the waiting scan does
            // not hold the keeper up: refused, it waits for freed room.
            let hold = waiting.try_reserve(1800, 0).expect("room");
            assert!(waiting.try_reserve(300, 0).is_none());
            tokio::time::sleep(kept_for * 6 / 10).await;
            reading.read_asked();
            // "a" is past its time ("b" not yet, unless this machine stalled
            // for 0.4 s): its release wakes the waiting scan, and keeping
            // "b" again releases the old "b".
            assert!(governor.keep_whole(kept_key(&store, "b"), &store, body()));
            tokio::task::yield_now().await;
            assert_eq!(waiter.0.load(Ordering::SeqCst), 1, "{governor:?}");
            drop(hold);
        });
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// Wait (up to 20 s, so a loaded machine does not fail it) until `done`.
    async fn until(mut done: impl FnMut() -> bool) -> bool {
        let started = Instant::now();
        while !done() {
            if started.elapsed() > Duration::from_secs(20) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    #[test]
    fn kept_bodies_go_after_their_time_with_nothing_else_to_look() {
        let (governor, store) = keeping(Duration::from_millis(100));
        runtime().block_on(async {
            let kept_at = Instant::now();
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
            assert!(governor.sweeping());
            assert_eq!(governor.kept_bytes(), 100);
            assert!(until(|| governor.kept_bytes() == 0).await, "{governor:?}");
            assert!(
                kept_at.elapsed() >= Duration::from_millis(100),
                "not before"
            );
            assert_eq!((governor.held_bytes(), governor.staged_bytes()), (0, 0));
            assert!(
                until(|| !governor.sweeping()).await,
                "nothing left to sweep"
            );
        });
    }

    #[test]
    fn the_sweeper_ends_as_soon_as_nothing_is_kept() {
        let (governor, store) = keeping(Duration::from_secs(3600));
        runtime().block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
            tokio::task::yield_now().await;
            assert!(governor.sweeping());
            governor.forget_kept([kept_key(&store, "a")]);
            assert!(
                until(|| !governor.sweeping()).await,
                "woken, not left for an hour"
            );
        });
    }

    #[test]
    fn a_sweeper_whose_runtime_shut_down_leaves_the_next_keep_to_start_one() {
        let (governor, store) = keeping(Duration::from_millis(100));
        // Spawned and never run: the runtime goes with the block.
        runtime().block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
        });
        assert!(!governor.sweeping());
        assert_eq!(governor.kept_bytes(), 100);
        runtime().block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "b"), &store, body()));
            assert!(governor.sweeping());
            assert!(until(|| governor.kept_bytes() == 0).await, "{governor:?}");
        });
    }

    #[test]
    fn a_sweeper_that_panicked_is_not_started_again() {
        // An hour: however slow this machine, no keep here finds "a" past
        // its time.
        let (governor, store) = keeping(Duration::from_secs(3600));
        // No timers: the sweeper's wait panics.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(governor.sweeping(), "left armed");
            // Keeps go on without it.
            assert!(governor.keep_whole(kept_key(&store, "b"), &store, body()));
        });
        assert_eq!(governor.kept_bytes(), 200);
    }

    #[test]
    fn a_dropped_governor_stops_its_sweeper() {
        let (governor, store) = keeping(Duration::from_secs(3600));
        let sweeper = Arc::clone(&governor.sweeper);
        runtime().block_on(async {
            assert!(governor.keep_whole(kept_key(&store, "a"), &store, body()));
            tokio::task::yield_now().await;
            drop(governor);
            assert!(until(|| !sweeper.armed.load(Ordering::SeqCst)).await);
        });
    }
}
