//! How the settings become one scan's limits: its budget (lowered in a
//! bounded memory pool) and what each of its streams may stage and open
//! ahead.

use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool};

use super::options::{
    AUTO_MAX_FILE_OPEN_DEPTH, FIXED_POLICY_EAGER_FIRST_READ_CAP, FIXED_POLICY_FILE_OPEN_DEPTH,
    FIXED_POLICY_WINDOW, MAX_FILE_OPEN_DEPTH, PrefetchOptions,
};
use super::policy::PrefetchPolicy;

/// The most one scan's read-ahead may hold in a memory pool with a finite
/// limit, as a fraction of that limit: `1 / POOL_SHARE_DIVISOR`.
///
/// Read-ahead's reservation cannot spill, and in a `FairSpillPool` every byte
/// an unspillable consumer holds shrinks the share of each spilling operator
/// (a sort gets `(limit - unspillable) / spillers`); in a `GreedyMemoryPool`
/// it is simply gone for the others. A sort whose share is barely above one
/// batch — a pool in which stock DataFusion just completes — fails as soon as
/// read-ahead holds more than a few percent of the pool at the wrong moment
/// (bug 4 in
/// [the reliability notes](https://github.com/datafusion-prefetch/datafusion-prefetch/blob/main/docs/reliability.md):
/// a quarter was still too much). A sixteenth leaves each spiller at least
/// 15/16 of its stock share while still staging several row groups in any
/// pool large enough to be useful.
pub const POOL_SHARE_DIVISOR: u64 = 16;

/// `memory_budget`, lowered to `1 / POOL_SHARE_DIVISOR` of `pool`'s limit when
/// the pool has a finite one.
pub(crate) fn pool_bounded_budget(budget: u64, pool: Option<&dyn MemoryPool>) -> u64 {
    match pool.map(|p| p.memory_limit()) {
        Some(MemoryLimit::Finite(limit)) => budget.min((limit as u64 / POOL_SHARE_DIVISOR).max(1)),
        _ => budget,
    }
}

/// What one stream of a scan may stage and how many files it opens ahead,
/// from the settings (`auto` where left to the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamLimits {
    /// The window: what a stream of a fixed policy stages, and what slices
    /// are sized by.
    pub window: u64,
    /// The ceiling of `auto`'s measured lead.
    pub auto_stream_limit: u64,
    /// Files opened ahead (under `auto`, the most it opens).
    pub file_open_depth: usize,
    /// Bytes of an upcoming file read before its decoder asks (under `auto`
    /// left to itself, unbounded here: its lead bounds it).
    pub eager_first_read_cap: u64,
}

impl StreamLimits {
    pub(crate) fn new(options: &PrefetchOptions, budget: u64, streams: usize) -> Self {
        let fixed_window = FIXED_POLICY_WINDOW.as_u64().min(budget);
        let window = options
            .read_ahead_window()
            .map_or(fixed_window, |w| w.as_u64());
        // Left to `auto`, a stream's lead may take its share of the budget —
        // a lone stream all of it — but never less than the fixed window.
        let auto_stream_limit = match (options.read_ahead_window(), options.policy()) {
            (None, PrefetchPolicy::Auto) => (budget / streams.max(1) as u64).max(fixed_window),
            _ => window,
        };
        let file_open_depth = match (options.file_open_depth(), options.policy()) {
            (Some(depth), _) => depth,
            (None, PrefetchPolicy::Auto) => AUTO_MAX_FILE_OPEN_DEPTH,
            (None, _) => FIXED_POLICY_FILE_OPEN_DEPTH,
        };
        let eager_first_read_cap = match (options.eager_first_read_cap(), options.policy()) {
            (Some(cap), _) => cap.as_u64(),
            (None, PrefetchPolicy::Auto) => u64::MAX,
            (None, _) => FIXED_POLICY_EAGER_FIRST_READ_CAP.as_u64(),
        };
        Self {
            window,
            auto_stream_limit,
            file_open_depth,
            eager_first_read_cap,
        }
    }
}

/// How many footers may be read at once while a table's schema is inferred
/// at planning time: the file-open depth, which left to `auto` under the
/// `auto` policy is [`MAX_FILE_OPEN_DEPTH`] (footers are small, and each read
/// beyond DataFusion's own is reserved in the governor), and 0 under `off`.
pub(crate) fn planning_footer_depth(options: &PrefetchOptions) -> usize {
    match (options.file_open_depth(), options.policy()) {
        (_, PrefetchPolicy::Off) => 0,
        (Some(depth), _) => depth,
        (None, PrefetchPolicy::Auto) => MAX_FILE_OPEN_DEPTH,
        (None, _) => FIXED_POLICY_FILE_OPEN_DEPTH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn options(policy: &str, settings: &[(&str, &str)]) -> PrefetchOptions {
        let mut options = PrefetchOptions::default();
        options.set_key("policy", policy).unwrap();
        for (key, value) in settings {
            options.set_key(key, value).unwrap();
        }
        options
    }

    #[test]
    fn fixed_policies_left_to_auto_get_the_measured_defaults() {
        let limits = StreamLimits::new(&options("pipelined", &[]), 256 * MIB, 1);
        assert_eq!(limits.window, 64 * MIB);
        assert_eq!(limits.auto_stream_limit, 64 * MIB);
        assert_eq!(limits.file_open_depth, 8);
        assert_eq!(limits.eager_first_read_cap, 16 * MIB);
        // A budget under the fixed window bounds it.
        let limits = StreamLimits::new(&options("streaming", &[]), 16 * MIB, 1);
        assert_eq!(limits.window, 16 * MIB);
    }

    #[test]
    fn auto_left_to_itself_may_lead_by_its_share_of_the_budget() {
        let limits = StreamLimits::new(&options("auto", &[]), 256 * MIB, 1);
        assert_eq!(limits.window, 64 * MIB, "slices are sized as before");
        assert_eq!(limits.auto_stream_limit, 256 * MIB);
        assert_eq!(limits.file_open_depth, AUTO_MAX_FILE_OPEN_DEPTH);
        assert_eq!(limits.eager_first_read_cap, u64::MAX, "its lead bounds it");
        let limits = StreamLimits::new(&options("auto", &[]), 256 * MIB, 2);
        assert_eq!(limits.auto_stream_limit, 128 * MIB);
        // Never less than a fixed policy's window.
        let limits = StreamLimits::new(&options("auto", &[]), 256 * MIB, 16);
        assert_eq!(limits.auto_stream_limit, 64 * MIB);
    }

    #[test]
    fn settings_the_user_made_bound_auto_too() {
        let set = [
            ("read_ahead_window", "32MiB"),
            ("file_open_depth", "3"),
            ("eager_first_read_cap", "1MiB"),
        ];
        let limits = StreamLimits::new(&options("auto", &set), 256 * MIB, 1);
        assert_eq!(limits.eager_first_read_cap, MIB);
        assert_eq!(limits.window, 32 * MIB);
        assert_eq!(limits.auto_stream_limit, 32 * MIB);
        assert_eq!(limits.file_open_depth, 3);
    }

    #[test]
    fn footers_are_read_ahead_at_planning_as_deep_as_files_are_opened() {
        assert_eq!(planning_footer_depth(&options("off", &[])), 0);
        assert_eq!(
            planning_footer_depth(&options("off", &[("file_open_depth", "64")])),
            0
        );
        assert_eq!(
            planning_footer_depth(&options("auto", &[])),
            MAX_FILE_OPEN_DEPTH
        );
        assert_eq!(planning_footer_depth(&options("pipelined", &[])), 8);
        assert_eq!(
            planning_footer_depth(&options("auto", &[("file_open_depth", "3")])),
            3
        );
    }
}
