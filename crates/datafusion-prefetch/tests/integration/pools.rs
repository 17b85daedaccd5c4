//! A memory pool wrapper that watches what prefetching reserves.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// The name under which a prefetching scan registers its reservation.
pub const PREFETCH_CONSUMER: &str = "PrefetchingParquetSource";

/// Wraps a [`MemoryPool`] and keeps, for the prefetching scans' reservations,
/// the bytes reserved now, the most ever reserved at once, and how often the
/// pool refused them.
#[derive(Debug)]
pub struct TrackingPool {
    inner: Arc<dyn MemoryPool>,
    prefetch: AtomicUsize,
    prefetch_peak: AtomicUsize,
    prefetch_refusals: AtomicUsize,
}

impl TrackingPool {
    pub fn new(inner: Arc<dyn MemoryPool>) -> Self {
        Self {
            inner,
            prefetch: AtomicUsize::new(0),
            prefetch_peak: AtomicUsize::new(0),
            prefetch_refusals: AtomicUsize::new(0),
        }
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

    fn grew(&self, additional: usize) {
        let now = self.prefetch.fetch_add(additional, Ordering::SeqCst) + additional;
        self.prefetch_peak.fetch_max(now, Ordering::SeqCst);
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
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        if Self::is_prefetch(reservation) {
            self.grew(additional);
        }
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        if Self::is_prefetch(reservation) {
            self.prefetch.fetch_sub(shrink, Ordering::SeqCst);
        }
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let prefetch = Self::is_prefetch(reservation);
        match self.inner.try_grow(reservation, additional) {
            Ok(()) => {
                if prefetch {
                    self.grew(additional);
                }
                Ok(())
            }
            Err(e) => {
                if prefetch {
                    self.prefetch_refusals.fetch_add(1, Ordering::SeqCst);
                }
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
