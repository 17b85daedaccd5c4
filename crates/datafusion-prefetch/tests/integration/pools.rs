//! A memory pool wrapper that watches what prefetching reserves.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// The name under which a prefetching scan registers its reservation.
pub const PREFETCH_CONSUMER: &str = "PrefetchingParquetSource";

/// Wraps a [`MemoryPool`] and keeps, for the prefetching scans' reservations,
/// the bytes reserved now, the most ever reserved at once, and how often the
/// pool refused them; and, for every other consumer the pool refused, what
/// the pool held at that moment ([`Refusal`]).
#[derive(Debug)]
pub struct TrackingPool {
    inner: Arc<dyn MemoryPool>,
    prefetch: AtomicUsize,
    prefetch_peak: AtomicUsize,
    prefetch_refusals: AtomicUsize,
    /// What unspillable consumers (prefetch among them) hold, and how many
    /// spilling consumers are registered: the terms of `FairSpillPool`'s
    /// share.
    unspillable: AtomicUsize,
    spillers: AtomicUsize,
    refusals: Mutex<Vec<Refusal>>,
}

/// The pool refused a consumer other than read-ahead: what it asked for, and
/// what the pool held when it did.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub consumer: String,
    /// Bytes asked for, and what the consumer already held.
    pub additional: usize,
    pub held: usize,
    /// Read-ahead's reservation, and all unspillable reservations with it.
    pub prefetch: usize,
    pub unspillable: usize,
    pub spillers: usize,
    /// Whether the consumer can spill, and all the pool held.
    pub can_spill: bool,
    pub reserved: usize,
}

impl Refusal {
    /// Whether a `FairSpillPool` of `limit` bytes would have granted the
    /// request had read-ahead held nothing: a spilling consumer gets its
    /// share, `(limit - unspillable) / spillers`; an unspillable one what
    /// the pool has left.
    pub fn granted_without_prefetch(&self, limit: usize) -> bool {
        if !self.can_spill {
            let others = self.reserved.saturating_sub(self.prefetch);
            return limit.saturating_sub(others) >= self.additional;
        }
        let others = self.unspillable.saturating_sub(self.prefetch);
        let share = limit.saturating_sub(others) / self.spillers.max(1);
        share.saturating_sub(self.held) >= self.additional
    }
}

impl TrackingPool {
    pub fn new(inner: Arc<dyn MemoryPool>) -> Self {
        Self {
            inner,
            prefetch: AtomicUsize::new(0),
            prefetch_peak: AtomicUsize::new(0),
            prefetch_refusals: AtomicUsize::new(0),
            unspillable: AtomicUsize::new(0),
            spillers: AtomicUsize::new(0),
            refusals: Mutex::default(),
        }
    }

    /// Every refusal of a consumer other than read-ahead so far.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.refusals.lock().clone()
    }

    /// Bytes the prefetching scans hold in the pool right now.
    pub fn prefetch_reserved(&self) -> usize {
        self.prefetch.load(Ordering::SeqCst)
    }

    /// The most bytes the prefetching scans ever held at once.
    pub fn prefetch_peak(&self) -> usize {
        self.prefetch_peak.load(Ordering::SeqCst)
    }

    /// How often the pool refused a prefetching scan.
    pub fn prefetch_refusals(&self) -> usize {
        self.prefetch_refusals.load(Ordering::SeqCst)
    }

    /// Forget the peak and the refusals (between queries).
    pub fn reset_counters(&self) {
        self.prefetch_peak
            .store(self.prefetch_reserved(), Ordering::SeqCst);
        self.prefetch_refusals.store(0, Ordering::SeqCst);
    }

    fn is_prefetch(reservation: &MemoryReservation) -> bool {
        reservation.consumer().name() == PREFETCH_CONSUMER
    }

    fn grew(&self, reservation: &MemoryReservation, additional: usize) {
        if !reservation.consumer().can_spill() {
            self.unspillable.fetch_add(additional, Ordering::SeqCst);
        }
        if Self::is_prefetch(reservation) {
            let now = self.prefetch.fetch_add(additional, Ordering::SeqCst) + additional;
            self.prefetch_peak.fetch_max(now, Ordering::SeqCst);
        }
    }

    fn refused(&self, reservation: &MemoryReservation, additional: usize) {
        if Self::is_prefetch(reservation) {
            self.prefetch_refusals.fetch_add(1, Ordering::SeqCst);
            return;
        }
        self.refusals.lock().push(Refusal {
            consumer: reservation.consumer().name().to_string(),
            additional,
            held: reservation.size(),
            prefetch: self.prefetch.load(Ordering::SeqCst),
            unspillable: self.unspillable.load(Ordering::SeqCst),
            spillers: self.spillers.load(Ordering::SeqCst),
            can_spill: reservation.consumer().can_spill(),
            reserved: self.inner.reserved(),
        });
    }
}

impl fmt::Display for TrackingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrackingPool({})", self.inner)
    }
}

impl MemoryPool for TrackingPool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
        if consumer.can_spill() {
            self.spillers.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer);
        if consumer.can_spill() {
            self.spillers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.grew(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        if !reservation.consumer().can_spill() {
            self.unspillable.fetch_sub(shrink, Ordering::SeqCst);
        }
        if Self::is_prefetch(reservation) {
            self.prefetch.fetch_sub(shrink, Ordering::SeqCst);
        }
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        match self.inner.try_grow(reservation, additional) {
            Ok(()) => {
                self.grew(reservation, additional);
                Ok(())
            }
            Err(e) => {
                self.refused(reservation, additional);
                Err(e)
            }
        }
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

/// The refusal CI saw (a sorter asking 508 KB of a 3.5 MiB `FairSpillPool`
/// while unspillable consumers held 1,819 KB): read-ahead is to blame only
/// if it held enough of those to lift the share over the request.
#[test]
fn a_refusal_is_blamed_on_read_ahead_only_if_its_bytes_would_have_sufficed() {
    let refusal = |prefetch: usize| Refusal {
        consumer: "ExternalSorter[3]".into(),
        additional: 508 << 10,
        held: 0,
        prefetch,
        unspillable: 1819 << 10,
        spillers: 4,
        can_spill: true,
        reserved: 3000 << 10,
    };
    let limit = 3584 << 10;
    assert!(!refusal(224 << 10).granted_without_prefetch(limit));
    assert!(refusal(300 << 10).granted_without_prefetch(limit));
    // An unspillable consumer gets what the pool has left.
    let unspillable = |prefetch: usize| Refusal {
        can_spill: false,
        reserved: 3400 << 10,
        ..refusal(prefetch)
    };
    assert!(!unspillable(100 << 10).granted_without_prefetch(limit));
    assert!(unspillable(400 << 10).granted_without_prefetch(limit));
}
