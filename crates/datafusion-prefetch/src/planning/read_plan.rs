//! Which footer to read next at planning time, and when to stop: pure
//! decisions, driven by [`read_ahead`](super::read_ahead) and by unit tests
//! without a store or a runtime.

/// The limits of one planning-time footer read-ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FooterReadLimits {
    /// The most footer reads in flight at once.
    pub depth: usize,
    /// Reads DataFusion itself keeps in flight while it infers a schema
    /// (`datafusion.execution.meta_fetch_concurrency`): that many need no
    /// reservation, since stock DataFusion would hold them anyway. Every read
    /// beyond them is reserved in the governor first.
    pub unreserved: usize,
    /// Bytes of DataFusion's file-metadata cache the footers may fill: a
    /// footer read ahead and then evicted before DataFusion asks for it would
    /// be read twice.
    pub cache_room: u64,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FooterStep {
    /// Read the footer of object `index`; first reserve `reserve` bytes in
    /// the governor when it is `Some` (and hand the read back with
    /// [`FooterReadPlan::refused`] if the governor has no room).
    Read { index: usize, reserve: Option<u64> },
    /// Wait for a read in flight to land.
    Wait,
    /// Nothing more to start; wait for what is in flight, if anything.
    Done,
}

/// The footers to read ahead, in the order DataFusion lists them, and what
/// has happened to them so far.
#[derive(Debug)]
pub(crate) struct FooterReadPlan {
    /// Bytes each read fetches: the object's size, at most the metadata size
    /// hint (DataFusion reads a footer with one suffix request of the hint).
    read_bytes: Vec<u64>,
    limits: FooterReadLimits,
    next: usize,
    in_flight: usize,
    /// The governor refused the last reservation: start nothing reserved
    /// until a read lands and frees room.
    refused: bool,
    /// Cache bytes taken by the footers landed so far, and how many landed.
    cached_bytes: u64,
    landed: usize,
    /// A read failed: nothing more is started.
    failed: bool,
}

impl FooterReadPlan {
    /// A plan over objects of `sizes` bytes, each read with one request of at
    /// most `size_hint` bytes (`None`: DataFusion reads the last 8 bytes
    /// first, then the footer — its length is only known then, so the size is
    /// estimated as a whole small file or 64 KiB).
    pub(crate) fn new(sizes: &[u64], size_hint: Option<u64>, limits: FooterReadLimits) -> Self {
        let cap = size_hint.unwrap_or(UNHINTED_FOOTER_ESTIMATE);
        Self {
            read_bytes: sizes.iter().map(|&size| size.min(cap)).collect(),
            limits,
            next: 0,
            in_flight: 0,
            refused: false,
            cached_bytes: 0,
            landed: 0,
            failed: false,
        }
    }

    /// Whether reading ahead can do anything DataFusion would not do anyway.
    pub(crate) fn is_worthwhile(&self) -> bool {
        self.limits.depth > self.limits.unreserved && self.read_bytes.len() > self.limits.unreserved
    }

    /// The next thing to do.
    pub(crate) fn step(&mut self) -> FooterStep {
        if self.failed || self.next >= self.read_bytes.len() || !self.cache_has_room_for_one_more()
        {
            return FooterStep::Done;
        }
        if self.in_flight >= self.depth_now() {
            return FooterStep::Wait;
        }
        let reserve =
            (self.in_flight >= self.limits.unreserved).then(|| self.read_bytes[self.next]);
        if reserve.is_some() && self.refused {
            return FooterStep::Wait;
        }
        let index = self.next;
        self.next += 1;
        self.in_flight += 1;
        FooterStep::Read { index, reserve }
    }

    /// The governor had no room for read `index`: it is started again after
    /// the next landing.
    pub(crate) fn refused(&mut self, index: usize) {
        debug_assert_eq!(
            index + 1,
            self.next,
            "only the read just planned can be refused"
        );
        self.next = index;
        self.in_flight -= 1;
        self.refused = true;
    }

    /// A read landed, its footer taking `cache_bytes` in the metadata cache.
    pub(crate) fn landed(&mut self, cache_bytes: u64) {
        self.in_flight -= 1;
        self.refused = false;
        self.cached_bytes += cache_bytes;
        self.landed += 1;
    }

    /// A read failed: DataFusion's own read of that footer will report why,
    /// and nothing more is started — a corrupt file fails the schema
    /// inference anyway, and a store that refuses (wrong credentials, gone)
    /// should fail it after one round trip, not after every file's.
    pub(crate) fn failed(&mut self) {
        self.in_flight -= 1;
        self.failed = true;
    }

    /// Reads in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Until a footer has landed, what one takes in the cache is unknown (its
    /// decoded form is several times its bytes, and a cache may hold fewer
    /// than DataFusion reads at once): one is read first. Then up to the
    /// depth.
    fn depth_now(&self) -> usize {
        if self.landed == 0 {
            1
        } else {
            self.limits.depth
        }
    }

    /// Whether the footers landed and in flight, plus one more, fit the
    /// cache room, each estimated at the mean of those landed (before any
    /// landed: at its read size).
    fn cache_has_room_for_one_more(&self) -> bool {
        let per_footer = if self.landed == 0 {
            self.read_bytes[self.next]
        } else {
            self.cached_bytes.div_ceil(self.landed as u64)
        };
        let projected = self.cached_bytes + per_footer * (self.in_flight as u64 + 1);
        projected <= self.limits.cache_room
    }
}

/// The footer size assumed when DataFusion reads without a size hint.
const UNHINTED_FOOTER_ESTIMATE: u64 = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: usize, unreserved: usize, cache_room: u64) -> FooterReadLimits {
        FooterReadLimits {
            depth,
            unreserved,
            cache_room,
        }
    }

    fn drain_starts(plan: &mut FooterReadPlan) -> Vec<(usize, Option<u64>)> {
        let mut started = vec![];
        while let FooterStep::Read { index, reserve } = plan.step() {
            started.push((index, reserve));
        }
        started
    }

    #[test]
    fn the_first_wave_fills_the_depth_and_reserves_only_beyond_datafusions_own_reads() {
        let mut plan = FooterReadPlan::new(&[100; 10], Some(512 * 1024), limits(4, 2, u64::MAX));
        assert!(plan.is_worthwhile());
        // One first: what a footer takes in the cache is measured.
        assert_eq!(drain_starts(&mut plan), vec![(0, None)]);
        assert_eq!(plan.step(), FooterStep::Wait);
        plan.landed(300);
        assert_eq!(
            drain_starts(&mut plan),
            vec![(1, None), (2, None), (3, Some(100)), (4, Some(100))]
        );
        assert_eq!(plan.step(), FooterStep::Wait);
        plan.landed(300);
        assert_eq!(drain_starts(&mut plan), vec![(5, Some(100))]);
    }

    #[test]
    fn a_read_is_at_most_the_size_hint() {
        let mut plan = FooterReadPlan::new(&[10, 10, 1 << 30], Some(1000), limits(4, 1, u64::MAX));
        assert_eq!(drain_starts(&mut plan), vec![(0, None)]);
        plan.landed(10);
        assert_eq!(drain_starts(&mut plan), vec![(1, None), (2, Some(1000))]);
        let mut unhinted = FooterReadPlan::new(&[1 << 30; 3], None, limits(4, 1, u64::MAX));
        assert_eq!(drain_starts(&mut unhinted), vec![(0, None)]);
        unhinted.landed(10);
        assert_eq!(
            drain_starts(&mut unhinted),
            vec![(1, None), (2, Some(UNHINTED_FOOTER_ESTIMATE))]
        );
    }

    #[test]
    fn a_refused_read_waits_for_a_landing_then_goes_out_first() {
        let mut plan = FooterReadPlan::new(&[100; 5], Some(100), limits(8, 1, u64::MAX));
        assert_eq!(drain_starts(&mut plan), vec![(0, None)]);
        plan.landed(100);
        assert_eq!(
            drain_starts(&mut plan),
            vec![(1, None), (2, Some(100)), (3, Some(100)), (4, Some(100))]
        );
        plan.refused(4);
        assert_eq!(plan.in_flight(), 3);
        assert_eq!(plan.step(), FooterStep::Wait);
        plan.landed(100);
        assert_eq!(drain_starts(&mut plan), vec![(4, Some(100))]);
        assert_eq!(plan.step(), FooterStep::Done);
    }

    #[test]
    fn a_failed_read_ends_the_read_ahead() {
        let mut plan = FooterReadPlan::new(&[100; 50], Some(100), limits(8, 2, u64::MAX));
        assert_eq!(drain_starts(&mut plan), vec![(0, None)]);
        plan.landed(100);
        assert_eq!(drain_starts(&mut plan).len(), 8);
        plan.failed();
        assert_eq!(plan.step(), FooterStep::Done, "nothing more starts");
        assert_eq!(plan.in_flight(), 7, "what is in flight lands or fails");
    }

    #[test]
    fn reading_stops_where_the_cache_would_evict_footers_read_ahead() {
        // Footers take 250 cache bytes each once landed; the cache has 1000.
        let mut plan = FooterReadPlan::new(&[100; 10], Some(100), limits(2, 0, 1000));
        let mut landed = 0;
        loop {
            match plan.step() {
                FooterStep::Read { .. } => {}
                FooterStep::Wait => {
                    plan.landed(250);
                    landed += 1;
                }
                FooterStep::Done if plan.in_flight() > 0 => {
                    plan.landed(250);
                    landed += 1;
                }
                FooterStep::Done => break,
            }
        }
        assert_eq!(landed, 4, "four footers of 250 bytes fill 1000");
    }

    #[test]
    fn nothing_to_gain_when_datafusion_reads_as_many_at_once() {
        assert!(!FooterReadPlan::new(&[1; 100], Some(8), limits(32, 32, u64::MAX)).is_worthwhile());
        assert!(!FooterReadPlan::new(&[1; 10], Some(8), limits(256, 32, u64::MAX)).is_worthwhile());
    }

    #[test]
    fn every_object_is_read_once_in_listed_order() {
        let mut plan = FooterReadPlan::new(&[7; 50], Some(7), limits(5, 2, u64::MAX));
        let mut order = vec![];
        loop {
            match plan.step() {
                FooterStep::Read { index, reserve } => {
                    // Every third reservation is refused.
                    if reserve.is_some() && index % 3 == 0 && !order.contains(&(usize::MAX - index))
                    {
                        order.push(usize::MAX - index);
                        plan.refused(index);
                    } else {
                        order.push(index);
                    }
                }
                FooterStep::Wait => plan.landed(7),
                FooterStep::Done if plan.in_flight() > 0 => plan.landed(7),
                FooterStep::Done => break,
            }
        }
        let read: Vec<usize> = order.into_iter().filter(|&i| i < 50).collect();
        assert_eq!(read, (0..50).collect::<Vec<_>>());
    }
}
