//! Pacing the requests to a store under `auto`: how many may be in flight
//! at once and how many of them may be hedges, narrowed when the store
//! throttles and widened again when it answers cleanly.
//!
//! - `window.rs`: the decisions, pure — the AIMD window and the hedge cap;
//! - `outcome.rs`: what a request's end says about the store's load;
//! - `gate.rs`: one window per store and runtime, and waiting for room;
//! - `stores.rs`: which gate is a store's;
//! - `paced_store.rs`: an `ObjectStore` whose GETs go through a gate, for
//!   the footer reads made by DataFusion's own readers;
//! - `report.rs`: what a window has done, for the runtime's governor to
//!   report.
//!
//! One gate per store is shared by every `auto` scan of a runtime (the
//! [`PrefetchGovernor`](crate::PrefetchGovernor) keeps them): a store
//! throttles what a process sends it, not what one scan does. The fixed
//! policies are not paced.

mod gate;
mod outcome;
mod paced_store;
mod report;
mod stores;
mod window;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

pub(crate) use gate::{Permit, RequestGate, Sent, Wanted, WindowState, attempt_now, refused_now};
pub(crate) use outcome::Outcome;
pub(crate) use paced_store::PacedStore;
pub use report::RequestWindowStats;
pub(crate) use stores::GatesByStore;

/// How one scan's requests are paced: its store's gate, and the share of
/// hedges it may add.
#[derive(Debug, Clone)]
pub(crate) struct Pacing {
    gate: Arc<RequestGate>,
    hedge_share: f64,
}

impl Pacing {
    /// Paced by `gate`, with hedges within `hedge_share` percent of the
    /// store's other requests in flight.
    pub(crate) fn new(gate: Arc<RequestGate>, hedge_share: u8) -> Self {
        Self {
            gate,
            hedge_share: f64::from(hedge_share) / 100.0,
        }
    }

    /// The answer to `request`, sent through the window: a read ahead waits
    /// for room and is sent again if a cut withdraws it before it answers
    /// ([`RequestGate::read_ahead`]); a read a decoder waits on (`demand`)
    /// goes out at once. `wanted` tells when a decoder comes to wait on a
    /// read ahead.
    pub(crate) async fn request<T, F: Future<Output = T>>(
        &self,
        demand: bool,
        wanted: Option<&Wanted>,
        mut request: impl FnMut() -> F,
    ) -> Sent<T> {
        if demand {
            let permit = self.gate.send_anyway();
            let at = Instant::now();
            let answer = permit.sending(request()).await;
            Sent {
                permit,
                at,
                answer,
                withdrawn: 0,
            }
        } else {
            self.gate.read_ahead(wanted, request).await
        }
    }

    /// A hedge, if the window allows one now.
    pub(crate) fn try_hedge(&self) -> Option<Permit> {
        self.gate.try_hedge(self.hedge_share)
    }

    /// The store's gate.
    pub(crate) fn gate(&self) -> Arc<RequestGate> {
        Arc::clone(&self.gate)
    }

    /// The store's window now.
    pub(crate) fn window(&self) -> WindowState {
        self.gate.state()
    }
}
