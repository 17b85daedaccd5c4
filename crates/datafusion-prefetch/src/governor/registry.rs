//! One governor per runtime: looked up by the runtime's memory pool (the
//! sessions of one `RuntimeEnv` share its pool), made on first use with the
//! default limit, and forgotten once the pool is gone.

use std::sync::{Arc, LazyLock, Weak};

use datafusion::execution::memory_pool::{MemoryPool, UnboundedMemoryPool};
use parking_lot::Mutex;

use super::PrefetchGovernor;

/// A pool, held weakly, and its governor.
type Registered = (Weak<dyn MemoryPool>, Arc<PrefetchGovernor>);

/// The governors of live pools.
static GOVERNORS: Mutex<Vec<Registered>> = Mutex::new(vec![]);

/// Stands for the runtime of sources built without one.
static DETACHED: LazyLock<Arc<dyn MemoryPool>> =
    LazyLock::new(|| Arc::new(UnboundedMemoryPool::default()));

/// The one governor of every source built without a runtime.
pub(super) fn detached() -> Arc<PrefetchGovernor> {
    governor_of(&DETACHED)
}

/// The governor of the runtime whose memory pool is `pool`.
pub(super) fn governor_of(pool: &Arc<dyn MemoryPool>) -> Arc<PrefetchGovernor> {
    let mut governors = GOVERNORS.lock();
    governors.retain(|(pool, _)| pool.strong_count() > 0);
    let found = governors
        .iter()
        .find(|(known, _)| std::ptr::addr_eq(known.as_ptr(), Arc::as_ptr(pool)));
    if let Some((_, governor)) = found {
        return Arc::clone(governor);
    }
    let limit = PrefetchGovernor::default_limit(pool.as_ref());
    let governor = PrefetchGovernor::new(limit.as_u64());
    governors.push((Arc::downgrade(pool), Arc::clone(&governor)));
    governor
}

#[cfg(test)]
mod tests {
    use datafusion::execution::memory_pool::{GreedyMemoryPool, UnboundedMemoryPool};

    use super::*;
    use crate::governor::{DEFAULT_MEMORY_LIMIT, POOL_LIMIT_DIVISOR};

    #[test]
    fn one_governor_per_pool_with_the_default_limit() {
        let unbounded: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let bounded: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(400 << 20));
        let a = governor_of(&unbounded);
        assert!(Arc::ptr_eq(&a, &governor_of(&unbounded)));
        assert_eq!(a.limit(), DEFAULT_MEMORY_LIMIT);
        let b = governor_of(&bounded);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.limit().as_u64(), (400 << 20) / POOL_LIMIT_DIVISOR);
    }

    #[test]
    fn a_dropped_pool_forgets_its_governor() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let weak = Arc::downgrade(&governor_of(&pool));
        drop(pool);
        // The next lookup prunes it.
        let other: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        governor_of(&other);
        assert!(weak.upgrade().is_none());
    }
}
