//! What a scan may hold, asked of two keepers at once: the process-wide
//! [`PrefetchGovernor`](crate::PrefetchGovernor), which counts every byte
//! prefetching holds until its last buffer is dropped, and the session's
//! memory pool, whose reservation is kept equal to what the scheduler has
//! staged (grown for each fetch it admits, shrunk as bytes are released).

use datafusion::execution::memory_pool::MemoryReservation;

use crate::governor::{Hold, ScanShare};

/// Who said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The process-wide limit has no room now; the scan is told when it has.
    Governor,
    /// The memory pool refused; read-ahead shrinks to what it grants.
    Pool,
}

/// A scan's share of the governor and its reservation in the memory pool.
#[derive(Debug)]
pub(crate) struct Reservation {
    pool: MemoryReservation,
    share: ScanShare,
}

impl Reservation {
    pub(crate) fn new(pool: MemoryReservation, share: ScanShare) -> Self {
        Self { pool, share }
    }

    /// Reserve what the scheduler admitted: `held` bytes under the
    /// governor (all a fetch's requests read, gaps included), `staged` of
    /// them staged in the governor's gauge from the grant on, and `pool`
    /// bytes in the memory pool. The pool is asked first, so a refusal never
    /// lets go of a hold already counted staged. The hold is released when it
    /// and every buffer it is attached to are dropped.
    pub(crate) fn try_reserve(&self, pool: u64, held: u64, staged: u64) -> Result<Hold, Refusal> {
        self.pool
            .try_grow(pool as usize)
            .map_err(|_| Refusal::Pool)?;
        match self.share.try_reserve(held, staged) {
            Some(hold) => Ok(hold),
            None => {
                self.pool.shrink(pool as usize);
                Err(Refusal::Governor)
            }
        }
    }

    /// Reserve `bytes` in the pool only (buffers already held under the
    /// governor). `false`: the pool refused.
    pub(crate) fn try_reserve_pool(&self, bytes: u64) -> bool {
        self.pool.try_grow(bytes as usize).is_ok()
    }

    /// Give back whatever the pool holds beyond `bytes`, so what a
    /// transition released returns to the pool before anything new is
    /// reserved and the pool never holds more than the budget.
    pub(crate) fn shrink_to(&self, bytes: u64) {
        let keep = bytes as usize;
        if self.pool.size() > keep {
            self.pool.shrink(self.pool.size() - keep);
        }
    }

    /// The scheduler stages `bytes` now that holds cover (the governor's
    /// gauge): lowered before released bytes' holds go.
    pub(crate) fn staged(&self, bytes: u64) {
        self.share.set_staged(bytes);
    }

    /// Changes after which this scan staged more than it held.
    pub(crate) fn violations(&self) -> u64 {
        self.share.violations()
    }

    /// The scan's decoders asked for bytes: its consumer is reading.
    pub(crate) fn read_asked(&self) {
        self.share.read_asked();
    }

    /// Give the pool everything back (the scan is over).
    pub(crate) fn free(&self) {
        self.pool.free();
    }
}
