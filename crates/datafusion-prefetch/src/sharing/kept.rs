//! Small objects read whole at planning, kept for the scan that reads them.
//!
//! With DataFusion's default `metadata_size_hint` (512 KiB) the footer read
//! of a smaller file reads all of it: a table of many small files is read
//! twice, once whole at planning and once for its column chunks when the
//! scan runs. Where a store throttles by requests, as S3 does per prefix,
//! that second round of GETs doubles what the query waits for. `auto`'s
//! footer read-ahead keeps such bodies, and a scan reads its ranges from
//! them instead of the store.
//!
//! The decisions, pure: which bodies are kept, found, dropped; no locks and
//! no clock (time is passed in). The governor reserves what is kept under
//! its limit, and asks for it back like any idle scan's staged bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;

/// How long a kept body waits for its scan: a query planned and not run
/// (an `EXPLAIN`, a table registered and queried much later) does not hold
/// its share of the limit for longer.
pub(crate) const KEPT_FOR: Duration = Duration::from_secs(60);

/// Kept bodies take at most `1 / KEPT_SHARE_DIVISOR` of the governor's
/// limit, so that what planning kept never crowds out a scan's read-ahead.
pub(crate) const KEPT_SHARE_DIVISOR: u64 = 8;

/// One version of one object of one store. The store is known by its
/// identity, as the request gates know it (see
/// [`GatesByStore`](crate::pacing::GatesByStore)): schema inference is given
/// the store but not its URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct KeptKey {
    store: usize,
    location: Path,
    size: u64,
    /// Microseconds since the epoch.
    modified: i64,
}

impl KeptKey {
    /// The version of `location` of `size` bytes last modified at
    /// `modified` (microseconds since the epoch) in `store`.
    pub(crate) fn new(
        store: &Arc<dyn ObjectStore>,
        location: Path,
        size: u64,
        modified: i64,
    ) -> Self {
        Self {
            store: Arc::as_ptr(store).cast::<()>() as usize,
            location,
            size,
            modified,
        }
    }
}

#[derive(Debug)]
struct Entry {
    body: Bytes,
    /// Keeps the address the key names the store by from being reused
    /// while the entry stands.
    store: Weak<dyn ObjectStore>,
    kept_at: Duration,
}

/// The bodies kept, oldest first.
#[derive(Debug)]
pub(crate) struct KeptObjects {
    entries: HashMap<KeptKey, Entry>,
    /// Keys in the order kept; a key kept again is listed again, and the
    /// older listing skipped.
    order: VecDeque<(Duration, KeptKey)>,
    bytes: u64,
    /// How long a body waits for its scan ([`KEPT_FOR`] but in tests).
    kept_for: Duration,
}

impl Default for KeptObjects {
    fn default() -> Self {
        Self::new(KEPT_FOR)
    }
}

impl KeptObjects {
    /// None kept yet; each body kept for `kept_for` at most.
    pub(crate) fn new(kept_for: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            kept_for,
        }
    }

    /// Bytes kept.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bodies kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `bytes` more may be kept now, `limit` bytes being the most
    /// kept at once. Bodies past their time go first, and, if that leaves no
    /// room, those of stores dropped since (the bytes of both are returned,
    /// to be released); then a body that would go over `limit` is not kept.
    pub(crate) fn room_for(&mut self, bytes: u64, limit: u64, now: Duration) -> (bool, u64) {
        let mut freed = self.expire(now);
        if self.bytes + bytes > limit {
            // A walk over every entry: only when short of room, not at every
            // one of a scan's thousands of keeps.
            freed += self.forget_dropped_stores();
        }
        (self.bytes + bytes <= limit, freed)
    }

    /// When the oldest listing's body is past its time, if any body is kept:
    /// the earliest a body can expire (nothing may go then, if that body
    /// was forgotten or kept again since).
    pub(crate) fn next_expiry(&self) -> Option<Duration> {
        self.order.front().map(|(at, _)| *at + self.kept_for)
    }

    /// Keep `body` as `key` at `now` (its bytes already reserved). Returns
    /// the bytes of a body it replaces.
    pub(crate) fn keep(
        &mut self,
        key: KeptKey,
        store: &Arc<dyn ObjectStore>,
        body: Bytes,
        now: Duration,
    ) -> u64 {
        self.bytes += body.len() as u64;
        self.order.push_back((now, key.clone()));
        let entry = Entry {
            body,
            store: Arc::downgrade(store),
            kept_at: now,
        };
        let replaced = self.entries.insert(key, entry);
        replaced.map_or(0, |old| self.dropped(&old))
    }

    /// The body kept as `key`, if any (it stays kept).
    pub(crate) fn get(&self, key: &KeptKey) -> Option<Bytes> {
        self.entries.get(key).map(|entry| entry.body.clone())
    }

    /// Stop keeping `key`; returns the bytes freed.
    pub(crate) fn forget(&mut self, key: &KeptKey) -> u64 {
        match self.entries.remove(key) {
            Some(entry) => self.dropped(&entry),
            None => 0,
        }
    }

    /// Drop the oldest bodies until at least `bytes` are freed (or none are
    /// left); returns the bytes freed.
    pub(crate) fn shed(&mut self, bytes: u64) -> u64 {
        let mut freed = 0;
        while freed < bytes {
            let Some((_, key)) = self.order.pop_front() else {
                break;
            };
            freed += self.forget_listed(&key, None);
        }
        freed
    }

    /// Drop the bodies kept longer than their time at `now`; returns the
    /// bytes freed.
    pub(crate) fn expire(&mut self, now: Duration) -> u64 {
        let mut freed = 0;
        while let Some((at, _)) = self.order.front() {
            if now.saturating_sub(*at) <= self.kept_for {
                break;
            }
            let (at, key) = self.order.pop_front().expect("looked at");
            freed += self.forget_listed(&key, Some(at));
        }
        freed
    }

    /// Drop the bodies of stores dropped since they were kept; returns the
    /// bytes freed.
    pub(crate) fn forget_dropped_stores(&mut self) -> u64 {
        let mut freed = 0;
        let gone: Vec<KeptKey> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.store.strong_count() == 0)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            freed += self.forget(&key);
        }
        freed
    }

    /// Forget `key` as listed in the order at `at` (`None`: whenever): a
    /// listing older than the entry, which was kept again since, is stale.
    fn forget_listed(&mut self, key: &KeptKey, at: Option<Duration>) -> u64 {
        let current = self
            .entries
            .get(key)
            .is_some_and(|entry| at.is_none_or(|at| entry.kept_at == at));
        if current { self.forget(key) } else { 0 }
    }

    fn dropped(&mut self, entry: &Entry) -> u64 {
        let bytes = entry.body.len() as u64;
        self.bytes -= bytes;
        if self.entries.is_empty() {
            self.order.clear();
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    fn key(store: &Arc<dyn ObjectStore>, name: &str, size: u64) -> KeptKey {
        KeptKey::new(store, Path::from(name), size, 7)
    }

    fn body(size: usize) -> Bytes {
        Bytes::from(vec![1u8; size])
    }

    #[test]
    fn a_kept_body_is_found_by_its_store_and_version_only() {
        let (a, b) = (store(), store());
        let mut kept = KeptObjects::default();
        assert_eq!(kept.keep(key(&a, "f", 10), &a, body(10), S), 0);
        assert_eq!(kept.get(&key(&a, "f", 10)).map(|b| b.len()), Some(10));
        assert!(kept.get(&key(&b, "f", 10)).is_none(), "another store");
        assert!(kept.get(&key(&a, "f", 11)).is_none(), "another version");
        let modified = KeptKey::new(&a, Path::from("f"), 10, 8);
        assert!(kept.get(&modified).is_none(), "another version");
        assert_eq!(kept.forget(&key(&a, "f", 10)), 10);
        assert_eq!((kept.bytes(), kept.len()), (0, 0));
    }

    #[test]
    fn bodies_stay_within_the_limit_and_expire() {
        let a = store();
        let mut kept = KeptObjects::default();
        assert_eq!(kept.room_for(60, 100, S), (true, 0));
        kept.keep(key(&a, "old", 60), &a, body(60), S);
        assert_eq!(kept.room_for(50, 100, 2 * S), (false, 0));
        assert_eq!(kept.room_for(40, 100, 2 * S), (true, 0));
        kept.keep(key(&a, "new", 40), &a, body(40), 2 * S);
        // The first goes once it has waited KEPT_FOR, the second after.
        let later = S + KEPT_FOR + S / 2;
        assert_eq!(kept.room_for(60, 100, later), (true, 60));
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.room_for(0, 100, 3 * S + KEPT_FOR), (true, 40));
        assert_eq!(kept.bytes(), 0);
    }

    #[test]
    fn a_body_kept_again_replaces_the_old_and_is_not_expired_by_its_listing() {
        let a = store();
        let mut kept = KeptObjects::default();
        kept.keep(key(&a, "f", 10), &a, body(10), S);
        assert_eq!(kept.keep(key(&a, "f", 10), &a, body(10), 30 * S), 10);
        assert_eq!(kept.bytes(), 10);
        // The first listing expires; the body kept at 30 s stays.
        assert_eq!(kept.room_for(0, 100, 2 * S + KEPT_FOR).1, 0);
        assert!(kept.get(&key(&a, "f", 10)).is_some());
    }

    #[test]
    fn shedding_drops_the_oldest_first() {
        let a = store();
        let mut kept = KeptObjects::default();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            kept.keep(key(&a, name, 10), &a, body(10), S * i as u32);
        }
        assert_eq!(kept.shed(15), 20);
        assert!(kept.get(&key(&a, "c", 10)).is_some());
        assert_eq!(kept.shed(100), 10);
        assert_eq!(kept.shed(1), 0, "nothing left");
    }

    #[test]
    fn the_bodies_of_a_dropped_store_go_when_room_is_short() {
        let (a, b) = (store(), store());
        let mut kept = KeptObjects::default();
        kept.keep(key(&a, "f", 10), &a, body(10), S);
        kept.keep(key(&b, "f", 5), &b, body(5), S);
        drop(a);
        assert_eq!(
            kept.room_for(0, 100, 2 * S),
            (true, 0),
            "room: not looked for"
        );
        assert_eq!(kept.bytes(), 15);
        assert_eq!(kept.room_for(90, 100, 2 * S), (true, 10));
        assert_eq!(kept.bytes(), 5);
        assert_eq!(kept.forget_dropped_stores(), 0);
    }

    #[test]
    fn the_next_expiry_is_the_oldest_body_s() {
        let a = store();
        let mut kept = KeptObjects::new(10 * S);
        assert_eq!(kept.next_expiry(), None);
        kept.keep(key(&a, "f", 10), &a, body(10), S);
        kept.keep(key(&a, "g", 10), &a, body(10), 3 * S);
        assert_eq!(kept.next_expiry(), Some(11 * S));
        assert_eq!(kept.expire(11 * S), 0, "not past its time yet");
        assert_eq!(kept.expire(12 * S), 10);
        assert_eq!(kept.next_expiry(), Some(13 * S));
        kept.forget(&key(&a, "g", 10));
        assert_eq!(kept.next_expiry(), None, "nothing kept");
    }
}
