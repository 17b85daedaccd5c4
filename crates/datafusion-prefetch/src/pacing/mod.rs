//! Pacing the requests to a store under `auto`: how many may be in flight
//! at once and how many of them may be hedges, narrowed when the store
//! throttles and widened again when it answers cleanly.
//!
//! - `window.rs`: the decisions, pure — the AIMD window and the hedge cap;
//! - `outcome.rs`: what a request's end says about the store's load;
//! - `gate.rs`: one window per store and runtime, and waiting for room.

// Wired into the fetch path by the next step.
#![allow(dead_code)]

mod gate;
mod outcome;
mod window;

#[allow(unused_imports)]
pub(crate) use gate::{MAX_REQUESTS_IN_FLIGHT, Permit, RequestGate, WindowState};
#[allow(unused_imports)]
pub(crate) use outcome::Outcome;
