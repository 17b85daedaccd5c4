//! When a registration's LISTs and metadata GETs are sent again beside
//! themselves: the decisions, with no clock and no store.

use std::time::Duration;

use crate::config::{HedgeAfter, PrefetchOptions, PrefetchPolicy};
use crate::scheduler::{AutoTuner, DEFAULT_RTT};

/// How long a LIST waits for its first page before it is hedged while no
/// LIST of the store has answered yet: four typical round trips. S3 answers
/// a LIST in about two (a median near 65 ms, against 30 ms for a GET), and
/// about one in four takes longer than this.
pub(crate) const UNMEASURED_LIST_HEDGE_AFTER: Duration = DEFAULT_RTT.saturating_mul(4);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing is hedged: the registration is stock DataFusion's.
    Never,
    /// Everything unanswered after this long (`prefetch.hedge_after`).
    After(Duration),
    /// `auto`: after two median round trips of what has answered so far.
    Measured,
}

/// One store's registration hedges: what it measured of the store's LISTs
/// and GETs, and the delays that follow.
#[derive(Debug, Clone)]
pub(crate) struct MetadataHedges {
    mode: Mode,
    /// Time to the first byte of each GET (footers, HEADs).
    gets: AutoTuner,
    /// Time to the first page of each LIST.
    lists: AutoTuner,
}

impl MetadataHedges {
    /// The hedges the session's `prefetch.*` settings ask for: as its scans'
    /// GETs are hedged (`prefetch.hedge_after`, left to `auto` by default),
    /// never under `off` or a policy that does not read ahead.
    pub(crate) fn new(options: &PrefetchOptions) -> Self {
        let policy = options.policy();
        let mode = match options.hedge_after() {
            _ if !policy.reads_ahead() => Mode::Never,
            HedgeAfter::Off => Mode::Never,
            HedgeAfter::After(after) => Mode::After(after),
            HedgeAfter::Auto if policy == PrefetchPolicy::Auto => Mode::Measured,
            HedgeAfter::Auto => Mode::Never,
        };
        Self {
            mode,
            gets: AutoTuner::default(),
            lists: AutoTuner::default(),
        }
    }

    /// Whether anything may ever be hedged.
    pub(crate) fn enabled(&self) -> bool {
        self.mode != Mode::Never
    }

    /// How long a GET waits for its first byte before it is hedged; `None`
    /// while there is no delay yet (no GET of the store measured) or ever.
    pub(crate) fn get_after(&self) -> Option<Duration> {
        match self.mode {
            Mode::Never => None,
            Mode::After(after) => Some(after),
            Mode::Measured => self.gets.hedge_after(),
        }
    }

    /// How long a LIST waits for its first page before it is hedged: as a
    /// GET once a LIST has been measured, [`UNMEASURED_LIST_HEDGE_AFTER`]
    /// before (a registration lists first, so there is nothing else to go
    /// by), never on a store measured local.
    pub(crate) fn list_after(&self) -> Option<Duration> {
        match self.mode {
            Mode::Never => None,
            Mode::After(after) => Some(after),
            Mode::Measured if !self.lists.has_measured() => {
                (self.gets.remote()).then_some(UNMEASURED_LIST_HEDGE_AFTER)
            }
            Mode::Measured => self.lists.hedge_after(),
        }
    }

    /// A GET answered its first byte after `first_byte`.
    pub(crate) fn observe_get(&mut self, first_byte: Duration) {
        self.gets.observe_first_byte(first_byte);
    }

    /// A LIST answered its first page after `first_page`.
    pub(crate) fn observe_list(&mut self, first_page: Duration) {
        self.lists.observe_first_byte(first_page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hedges(settings: &[(&str, &str)]) -> MetadataHedges {
        let mut options = PrefetchOptions::default();
        for (key, value) in settings {
            options.set_key(key, value).unwrap();
        }
        MetadataHedges::new(&options)
    }

    #[test]
    fn auto_hedges_after_two_median_round_trips_of_what_answered() {
        let mut auto = hedges(&[("policy", "auto")]);
        assert!(auto.enabled());
        // Nothing measured: a GET waits for a measurement, a LIST does not.
        assert_eq!(auto.get_after(), None);
        assert_eq!(auto.list_after(), Some(ms(120)));
        for first_byte in [ms(30), ms(34), ms(300)] {
            auto.observe_get(first_byte);
        }
        assert_eq!(auto.get_after(), Some(ms(68)));
        // LISTs are timed apart from GETs: S3's take twice as long.
        auto.observe_list(ms(70));
        assert_eq!(auto.list_after(), Some(ms(140)));
    }

    #[test]
    fn a_local_store_is_never_hedged() {
        let mut auto = hedges(&[("policy", "auto")]);
        auto.observe_get(Duration::from_micros(200));
        assert_eq!(auto.get_after(), None);
        assert_eq!(auto.list_after(), None);
    }

    #[test]
    fn the_settings_decide_as_for_a_scans_gets() {
        // The default policy is auto.
        assert!(hedges(&[]).enabled());
        for policy in ["off", "batched"] {
            let never = hedges(&[("policy", policy), ("hedge_after", "80ms")]);
            assert!(!never.enabled(), "{policy}");
        }
        // The fixed policies hedge only when told to.
        assert!(!hedges(&[("policy", "pipelined")]).enabled());
        let fixed = hedges(&[("policy", "pipelined"), ("hedge_after", "80ms")]);
        assert_eq!(
            (fixed.get_after(), fixed.list_after()),
            (Some(ms(80)), Some(ms(80)))
        );
        assert!(!hedges(&[("policy", "auto"), ("hedge_after", "off")]).enabled());
    }
}
