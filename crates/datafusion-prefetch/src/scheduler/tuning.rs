//! How a scan's policy — and under `auto`, what it measured — sets the
//! limits the rest of the scheduler works within: whether to read ahead at
//! all, how far, whether files are read in slices, how requests are cut.

use std::ops::Range;
use std::time::Duration;

use super::auto::AutoTuner;
use super::layout::FileLayout;
use super::protocol::FileId;
use super::requests::{RequestPlan, STORE_MERGE_GAP, plan_requests};
use super::scan::ScanCore;
use super::state::Locality;
use crate::config::{FIXED_POLICY_EAGER_FIRST_READ_CAP, HedgeAfter, PrefetchPolicy};

impl ScanCore {
    /// The decoder of `file` asks for bytes at `at`. The time since its
    /// partition was last handed bytes was spent decoding them and waiting
    /// for the consumer: a decode-rate sample.
    pub(super) fn on_read_started(&mut self, file: FileId, at: Duration) {
        let partition = self.files[file].charged_to;
        if let Some(auto) = self.auto.as_mut()
            && let Some((handed_at, bytes)) = auto.handed_back.remove(&partition)
        {
            auto.tuner
                .observe_decode(bytes, at.saturating_sub(handed_at));
        }
    }

    /// The decoder of `file` was handed `bytes` at `at`.
    pub(super) fn on_read_finished(&mut self, file: FileId, bytes: u64, at: Duration) {
        let partition = self.files[file].charged_to;
        if let Some(auto) = self.auto.as_mut() {
            auto.handed_back.insert(partition, (at, bytes));
        }
    }

    pub(super) fn on_request_timed(&mut self, bytes: u64, took: Duration) {
        if let Some(auto) = self.auto.as_mut() {
            auto.tuner.observe_request(bytes, took);
            auto.note_locality();
        }
    }

    pub(super) fn on_transfer_timed(&mut self, bytes: u64, first_byte: Duration, took: Duration) {
        if let Some(auto) = self.auto.as_mut() {
            auto.tuner.observe_transfer(bytes, first_byte, took);
            auto.note_locality();
        }
    }

    /// `auto`'s store probe went unanswered for longer than any local store
    /// takes: the store is remote, and a stream may start reading now rather
    /// than a round trip later.
    pub(super) fn on_probe_unanswered(&mut self) {
        if let Some(auto) = self.auto.as_mut() {
            auto.slow_probe = true;
        }
    }

    /// Whether `auto` knows enough of its store to read ahead before any
    /// decoder asks: it has timed a request, or its probe went unanswered
    /// for longer than a local store takes.
    pub(super) fn store_known(&self) -> bool {
        self.auto
            .as_ref()
            .is_none_or(|a| a.tuner.has_measured() || a.slow_probe)
    }

    /// Before this scan has timed a request: start from what other scans
    /// have measured of the store since this one was created (the scans of
    /// one query are all created before any of them reads), so it needs no
    /// probe of its own.
    pub(super) fn on_store_throttled(&mut self, throttled: bool) {
        if let Some(auto) = self.auto.as_mut() {
            auto.store_throttled = throttled;
        }
    }

    pub(super) fn on_store_measured(&mut self, measured: &AutoTuner) {
        if let Some(auto) = self.auto.as_mut() {
            auto.tuner.adopt_store_measurements(measured);
            auto.note_locality();
        }
    }

    /// How long a planned GET waits for its first byte before an identical
    /// one is sent beside it: `prefetch.hedge_after` when set; left to the
    /// policy, `auto`'s measured delay on a remote store
    /// (`AutoTuner::hedge_after`) and never for the fixed policies. `None`
    /// while there is no delay yet (a store not measured) or ever.
    pub(crate) fn hedge_after(&self) -> Option<Duration> {
        match self.config.hedge_after {
            HedgeAfter::Off => None,
            HedgeAfter::After(after) => self.reads_ahead().then_some(after),
            HedgeAfter::Auto if self.auto_remote() => self.auto.as_ref()?.tuner.hedge_after(),
            HedgeAfter::Auto => None,
        }
    }

    /// Whether this scan may ever hedge a GET (see [`Self::hedge_after`]).
    pub(crate) fn may_hedge(&self) -> bool {
        match self.config.hedge_after {
            HedgeAfter::Off => false,
            HedgeAfter::After(_) => true,
            HedgeAfter::Auto => self.auto.is_some(),
        }
    }

    /// `auto`: whether this scan treats its store as remote.
    pub(super) fn auto_remote(&self) -> bool {
        self.auto
            .as_ref()
            .is_some_and(|a| a.locality == Locality::AsMeasured && a.tuner.remote())
    }

    /// Whether the scan fetches ahead and opens files ahead now.
    pub(super) fn reads_ahead(&self) -> bool {
        match &self.auto {
            Some(_) => self.auto_remote(),
            None => self.config.policy.reads_ahead(),
        }
    }

    /// Whether files with an offset index are read slice by slice: always
    /// under `streaming`; under `auto` when the store is remote, where slices
    /// let decoding start before a row group has landed (on a local store the
    /// per-slice decoder setup would cost more than it saves).
    pub(crate) fn slices_files(&self) -> bool {
        match self.config.policy {
            PrefetchPolicy::Streaming => true,
            PrefetchPolicy::Auto => self.auto_remote(),
            _ => false,
        }
    }

    /// Whether a file with this layout is cut into slices (given an offset
    /// index): always when the scan slices files, except that `auto` keeps
    /// row groups whole unless they outgrow the window.
    pub(super) fn slices_layout(&self, layout: &FileLayout, columns: &[usize]) -> bool {
        match self.config.policy {
            PrefetchPolicy::Auto => {
                self.slices_files() && self.row_groups_outgrow_the_window(layout, columns)
            }
            _ => self.slices_files(),
        }
    }

    /// `auto`: whether the largest scanned row group's projected chunks take
    /// more than a quarter of what one stream may stage. Smaller row groups
    /// pipeline whole — several are in flight while one decodes, and one
    /// decoder per row group costs less than one per slice; larger ones would
    /// leave the decoder waiting for a whole row group and hold it in memory.
    fn row_groups_outgrow_the_window(&self, layout: &FileLayout, columns: &[usize]) -> bool {
        let limit = self.config.read_ahead_window.min(self.config.memory_budget);
        let largest = layout
            .scanned_row_groups
            .iter()
            .map(|&rg| layout.row_group_bytes(rg, columns))
            .max()
            .unwrap_or(0);
        largest > limit / 4
    }

    /// Bytes one partition may keep staged beyond its next unit: `auto`'s
    /// measured lead (all it may stage until its decoder has been timed), the
    /// window for the other policies.
    pub(super) fn lead_limit(&self) -> u64 {
        match &self.auto {
            Some(auto) => auto
                .tuner
                .lead_bytes()
                .unwrap_or(u64::MAX)
                .min(self.stream_limit()),
            None => u64::MAX,
        }
    }

    /// Bytes of an upcoming file's leading row groups fetched before its
    /// decoder asks: the cap, and under `auto` no more than its lead (all
    /// the stream may stage until its decoder has been timed, so the first
    /// wave takes whole files in decode order as far as the budget allows),
    /// nor less than the fixed policies' cap (admission still keeps the
    /// lead, letting through the next unit of a stream with nothing staged).
    pub(super) fn eager_cap(&self) -> u64 {
        let cap = self.config.eager_first_read_cap;
        match &self.auto {
            Some(_) => {
                let lead = self
                    .lead_limit()
                    .max(FIXED_POLICY_EAGER_FIRST_READ_CAP.as_u64());
                cap.min(lead)
            }
            None => cap,
        }
    }

    /// Bytes one partition may hold staged: `auto`'s ceiling, the window for
    /// the other policies. (Slices are still sized by the window.)
    pub(super) fn stream_limit(&self) -> u64 {
        match &self.auto {
            Some(_) => self.config.auto_stream_limit,
            None => self.config.read_ahead_window,
        }
    }

    /// The store requests of a background fetch of `ranges`: `auto`'s
    /// [`Self::request_plan`]; for the other policies merged across gaps of
    /// up to [`STORE_MERGE_GAP`] and never split — what object_store's
    /// `get_ranges` would send to S3, GCS, Azure or HTTP, planned here so
    /// that every byte requested (gaps included) is known.
    pub(super) fn fetch_plan(&mut self, ranges: &[Range<u64>]) -> RequestPlan {
        self.request_plan(ranges).unwrap_or_else(|| {
            let plan = plan_requests(ranges, STORE_MERGE_GAP, |_| None);
            self.stats.requests_merged += plan.merged;
            plan
        })
    }

    /// `auto`'s store requests for `ranges`: merged and split by the
    /// measured round trip and bandwidth (never split while the store
    /// throttles: each piece would be one more request it refuses);
    /// `None` for other policies.
    pub(super) fn request_plan(&mut self, ranges: &[Range<u64>]) -> Option<RequestPlan> {
        let auto = self.auto.as_ref()?;
        let (tuner, whole) = (&auto.tuner, auto.store_throttled);
        let plan = plan_requests(ranges, tuner.merge_gap(), |len| {
            if whole { None } else { tuner.split_bytes(len) }
        });
        self.stats.requests_merged += plan.merged;
        self.stats.requests_split += plan.split;
        Some(plan)
    }
}
