//! A listing's pages after its first: each a LIST request of its own.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use tokio::sync::Semaphore;

use super::{acquire, sleep};
use crate::{LatencyModel, StoreStats};

/// The later pages of one listing: each a LIST request of its own, counted
/// and delayed when the listing reaches it.
pub(super) struct ListPages {
    /// Entries per page and the listing's own RNG; `None`: one page.
    pages: Option<(usize, StdRng)>,
    stats: Arc<StoreStats>,
    connections: Option<Arc<Semaphore>>,
    latency: LatencyModel,
}

impl ListPages {
    /// A listing whose later pages hold `pages.0` entries each and draw
    /// their delays from `latency` with `pages.1`; `None`: one page.
    pub(super) fn new(
        pages: Option<(usize, StdRng)>,
        stats: Arc<StoreStats>,
        connections: Option<Arc<Semaphore>>,
        latency: LatencyModel,
    ) -> Self {
        Self {
            pages,
            stats,
            connections,
            latency,
        }
    }

    /// Whether the entry after `served` ones opens a new page.
    pub(super) fn starts_page(&self, served: usize) -> bool {
        self.pages
            .as_ref()
            .is_some_and(|(keys, _)| served > 0 && served.is_multiple_of(*keys))
    }

    /// One LIST round trip of `delay`, on a connection.
    pub(super) async fn round_trip(&mut self, delay: Duration) {
        let _connection = acquire(self.connections.as_ref()).await;
        sleep(delay).await;
    }

    /// The next page's request: counted, and a round trip drawn from the
    /// listing's RNG.
    pub(super) async fn next_page(&mut self) {
        self.stats.count_list();
        let delay = match &mut self.pages {
            Some((_, rng)) => self.latency.sample(rng),
            None => Duration::ZERO,
        };
        self.round_trip(delay).await;
    }
}
