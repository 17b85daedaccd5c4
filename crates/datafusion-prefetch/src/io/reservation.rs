//! The scan's reservation in the memory pool, kept equal to what the
//! scheduler has staged: grown for each fetch it admits, shrunk as bytes are
//! released.

use datafusion::execution::memory_pool::MemoryReservation;

/// What a scan has reserved from the session's memory pool.
#[derive(Debug)]
pub(crate) struct Reservation(MemoryReservation);

impl Reservation {
    pub(crate) fn new(reservation: MemoryReservation) -> Self {
        Self(reservation)
    }

    /// Reserve `bytes` the scheduler admitted. `false`: the pool refused,
    /// and the driver must report it so read-ahead shrinks to what the pool
    /// grants.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        self.0.try_grow(bytes as usize).is_ok()
    }

    /// Give back whatever is reserved beyond `bytes`, so what a transition
    /// released returns to the pool before anything new is reserved and the
    /// pool never holds more than the budget.
    pub(crate) fn shrink_to(&self, bytes: u64) {
        let keep = bytes as usize;
        if self.0.size() > keep {
            self.0.shrink(self.0.size() - keep);
        }
    }

    /// Give everything back (the scan is over).
    pub(crate) fn free(&self) {
        self.0.free();
    }
}
