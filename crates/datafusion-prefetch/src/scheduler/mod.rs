//! The scan scheduler: the pure, deterministic decisions of read-ahead — what
//! to fetch next, what to release and what the budget allows. No tokio, no
//! store, no clock, and no DataFusion or parquet types: the driver
//! (`crate::io`) turns what it sees into plain data.
//!
//! Like arrow-rs's push decoder, the whole conversation is one call: the
//! driver reports an [`Event`] to [`ScanCore::handle`] and carries out the
//! [`Action`]s it is answered with (nothing else changes the scheduler; the
//! driver may only ask read-only questions such as
//! [`ScanCore::slice_plan`]):
//!
//! ```text
//! driver reports                      scheduler answers
//! PartitionStarted{p}            ──►  OpenAhead(p's first files), Fetch(their first reads)
//! ReaderOpened{file, p}          ──►  OpenAhead(the next files), Fetch(…)
//! FooterKnown{file, layout}      ──►  Fetch(…)           (row groups or slices decided here)
//! ReadAsked{file, ranges}        ──►  Serve(ReadPlan), Release(…), Fetch(…)
//! SliceStarted / ReaderClosed    ──►  Release(…), Fetch(…)
//! FetchFailed                    ──►  Fetch(…)           (its pieces go to demand reads)
//! PoolRefused / GovernorRefused  ──►  (nothing)          (read-ahead pauses until room)
//! RoomFreed                      ──►  Fetch(…)           (read-ahead resumes)
//! ShedAsked                      ──►  Release(…)         (an idle scan gives its share back)
//! RequestTimed / ReadStarted …   ──►  (auto's measurements: later answers change)
//! ScanEnded                      ──►  Release(everything)
//! ```
//!
//! The files, one concern each:
//! - `protocol.rs`: the events, actions and plain data exchanged;
//! - `scan.rs`: [`ScanCore`], its dispatch and its read-only views;
//! - `state.rs`: per-file and per-piece state, as enums naming the states;
//! - `admission.rs`: the budget rule — staging, admission, release;
//! - `accounting.rs`: every requested byte used or wasted, once;
//! - `candidates.rs`: what is worth fetching ahead, in decode order;
//! - `opening.rs`: streams, readers and footers coming and going;
//! - `reads.rs`: answering a decoder's read;
//! - `tuning.rs`: how the policy and `auto`'s measurements set the limits;
//! - `auto.rs` (the measurement model), `layout.rs`, `slices.rs` and
//!   `requests.rs` (plain-data planners the scheduler uses).

mod accounting;
mod admission;
mod auto;
mod candidates;
mod layout;
mod opening;
mod protocol;
mod reads;
mod requests;
mod scan;
mod slices;
mod state;
#[cfg(test)]
mod tests;
mod tuning;

pub(crate) use auto::{AutoSnapshot, AutoTuner, DEFAULT_RTT};
pub(crate) use layout::{ChunkPages, FileLayout, PageSpan};
pub(crate) use protocol::{
    Action, CoreConfig, CoreStats, Event, FetchId, FileId, Part, PartitionId, ReadPlan,
    starts_past_the_end,
};
pub(crate) use requests::RequestPlan;
#[cfg(test)]
pub(crate) use requests::STORE_MERGE_GAP;
#[cfg(test)]
pub(crate) use requests::plan_requests;
pub(crate) use scan::ScanCore;
pub(crate) use slices::{MIN_COLUMN_SLICE_BYTES, SlicePlan};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use slices::{SliceSizing, plan_slices};
