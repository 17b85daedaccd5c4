//! A listing's pages: each a LIST request of its own.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;

use super::wire::{Request, Wire};
use crate::LatencyModel;
use crate::retry::Retries;

/// The pages of one listing: each a LIST request of its own, counted and
/// sent when the listing reaches it.
pub(super) struct ListPages {
    /// Entries per page and the listing's own RNG; `None`: one page.
    pages: Option<(usize, StdRng)>,
    /// The listed prefix, which every page counts against.
    prefix: String,
    wire: Arc<Wire>,
    latency: LatencyModel,
}

impl ListPages {
    /// A listing of `prefix` whose later pages hold `pages.0` entries each
    /// and draw their delays (and retries) from `latency` with `pages.1`;
    /// `None`: one page.
    pub(super) fn new(
        pages: Option<(usize, StdRng)>,
        prefix: String,
        wire: Arc<Wire>,
        latency: LatencyModel,
    ) -> Self {
        Self {
            pages,
            prefix,
            wire,
            latency,
        }
    }

    /// Whether the entry after `served` ones opens a new page.
    pub(super) fn starts_page(&self, served: usize) -> bool {
        self.pages
            .as_ref()
            .is_some_and(|(keys, _)| served > 0 && served.is_multiple_of(*keys))
    }

    /// One LIST request whose first attempt takes `delay`, on a connection.
    pub(super) async fn round_trip(
        &mut self,
        delay: Duration,
        retries: Option<Retries>,
    ) -> object_store::Result<()> {
        let request = Request {
            method: "LIST",
            target: &self.prefix,
            prefix: &self.prefix,
            delay,
            latency: self.latency,
            retries,
        };
        let mut connection = None;
        self.wire.round_trip(&mut connection, request).await
    }

    /// The next page's request: counted, its round trip and retries drawn
    /// from the listing's RNG.
    pub(super) async fn next_page(&mut self) -> object_store::Result<()> {
        self.wire.stats().count_list();
        let (delay, retries) = match &mut self.pages {
            Some((_, rng)) => (self.latency.sample(rng), self.wire.retries(rng)),
            None => (Duration::ZERO, None),
        };
        self.round_trip(delay, retries).await
    }
}
