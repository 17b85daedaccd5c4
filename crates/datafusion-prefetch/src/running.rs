//! A source's running scans: one [`ScanDriver`] per execution of the plan,
//! and the scans a scalar subquery starts before DataFusion creates their
//! streams ([`LateScan`]).
//!
//! DataFusion 55 gives a [`FileSource`](datafusion_datasource::file::FileSource)
//! no handle on the execution a stream belongs to (`create_morselizer` gets
//! the partition, not the `TaskContext`), so an execution is told apart by
//! its partitions: each driver serves each partition once, and a stream for
//! a partition the running driver already serves belongs to a new execution
//! (a plan run again, or run twice at once), which gets a driver of its own.
//! A driver lives as long as the streams of its execution (or, started early,
//! until its first stream takes it over or a later execution replaces it).
//!
//! The same heuristic has limits: a stream created after every earlier stream
//! of its execution has ended, or a straggler of an earlier execution, counts
//! as a new execution (it reads its files on a driver of its own: the answers
//! stay right, only read-ahead is not shared).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Weak};

use datafusion_datasource::file_scan_config::FileScanConfig;
use object_store::ObjectStore;

use crate::io::ScanDriver;

/// The drivers of one source (shared by its clones): [`ScanDriver`]s, or
/// anything else in the unit tests, which drive this without a store.
pub(crate) struct RunningScan<D = ScanDriver> {
    /// The latest execution's driver, while a stream (or
    /// [`Self::started_early`]) holds it.
    driver: Weak<D>,
    /// The partitions whose streams it serves.
    claimed: BTreeSet<usize>,
    /// A driver started before DataFusion created any of its execution's
    /// streams, held until the first of them takes it over, a later
    /// execution replaces it, or the source is dropped (for a scan
    /// DataFusion never creates: its first reads stay staged until then, and
    /// the governor asks it to shed them as an idle scan when others wait).
    started_early: Option<Arc<D>>,
    /// The drivers of the scans whose first streams asked for
    /// [`Self::started_early`]: while one of them runs, the early driver
    /// belongs to their execution, and another scan of that execution (a
    /// subquery reads several tables) asking again keeps it.
    early_starters: Vec<Weak<D>>,
}

impl<D> Default for RunningScan<D> {
    fn default() -> Self {
        Self {
            driver: Weak::new(),
            claimed: BTreeSet::new(),
            started_early: None,
            early_starters: Vec::new(),
        }
    }
}

impl<D> RunningScan<D> {
    /// The driver for a stream of `partition`: the running execution's, or
    /// one `start`ed for a new execution when the running one serves
    /// `partition` already (or none runs). `true` with a new driver.
    pub(crate) fn for_stream(
        &mut self,
        partition: usize,
        start: impl FnOnce() -> Arc<D>,
    ) -> (Arc<D>, bool) {
        // Taken, not dropped, before the upgrade: it may be the driver's only
        // strong reference (dropping it first would end the early start and
        // make this stream read the files again).
        let _started_early = self.started_early.take();
        self.early_starters.clear();
        if let Some(driver) = self.driver.upgrade()
            && self.claimed.insert(partition)
        {
            return (driver, false);
        }
        let driver = start();
        self.driver = Arc::downgrade(&driver);
        self.claimed = BTreeSet::from([partition]);
        (driver, true)
    }

    /// A driver `start`ed for an execution whose streams DataFusion creates
    /// later, asked for by `starter` (the driver of the scan that starts
    /// it), and held until the first of those streams takes it; `None` when
    /// one started for the same execution is still untaken (another of its
    /// scans asked first). It replaces a driver started early for an earlier
    /// execution that never took it (a subquery that failed, whose scans
    /// have all ended): this execution's streams must not read that one's
    /// state.
    pub(crate) fn start_early(
        &mut self,
        starter: &Arc<D>,
        start: impl FnOnce() -> Arc<D>,
    ) -> Option<Arc<D>> {
        let same_execution = self.started_early.is_some()
            && self.early_starters.iter().any(|s| s.strong_count() > 0);
        if same_execution {
            self.early_starters.push(Arc::downgrade(starter));
            return None;
        }
        let driver = start();
        self.driver = Arc::downgrade(&driver);
        self.claimed.clear();
        self.started_early = Some(Arc::clone(&driver));
        self.early_starters = vec![Arc::downgrade(starter)];
        Some(driver)
    }
}

/// A scan that can be started before DataFusion creates its streams.
pub(crate) trait StartsEarly: Send + Sync {
    /// Start a new execution of the scan of `config`'s files, reading from
    /// `store`, for the execution of `starter` (the driver of the scan that
    /// starts it): each of its partitions as when its stream is created.
    fn start_early(
        &self,
        starter: &Arc<ScanDriver>,
        store: &Arc<dyn ObjectStore>,
        config: &FileScanConfig,
    );
}

/// A prefetching scan DataFusion creates late, as another scan can start it.
#[derive(Clone)]
pub(crate) struct LateScan {
    /// Shares its running scans with the plan's source (clones of a source
    /// share them), so the streams created later find what this started.
    pub(crate) source: Arc<dyn StartsEarly>,
    pub(crate) config: FileScanConfig,
}

impl fmt::Debug for LateScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: usize = self.config.file_groups.iter().map(|g| g.len()).sum();
        f.debug_struct("LateScan")
            .field("object_store_url", &self.config.object_store_url)
            .field("files", &files)
            .finish()
    }
}

impl LateScan {
    /// Start a new execution of the scan for `starter`'s execution, if it
    /// reads from `store_url` (the one store the caller has at hand).
    pub(crate) fn start(
        &self,
        starter: &Arc<ScanDriver>,
        store_url: &str,
        store: &Arc<dyn ObjectStore>,
    ) {
        if self.config.object_store_url.as_str() == store_url {
            self.source.start_early(starter, store, &self.config);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in driver: its number tells which `start` made it.
    #[derive(Debug, PartialEq)]
    struct Driver(u32);

    fn starts(n: u32) -> impl FnOnce() -> Arc<Driver> {
        move || Arc::new(Driver(n))
    }

    #[test]
    fn each_partition_is_served_once_per_execution() {
        let mut running = RunningScan::default();
        let (first, new) = running.for_stream(0, starts(1));
        assert!(new);
        assert_eq!(
            running.for_stream(1, starts(2)),
            (Arc::clone(&first), false)
        );
        // Partition 0 again: a plan run again, or run twice at once.
        let (second, new) = running.for_stream(0, starts(3));
        assert!(new);
        assert_eq!(*second, Driver(3));
        drop((first, second));
        // Nothing runs: a new execution.
        assert_eq!(*running.for_stream(1, starts(4)).0, Driver(4));
    }

    #[test]
    fn the_first_stream_takes_over_the_driver_started_early() {
        let mut running = RunningScan::default();
        let starter = Arc::new(Driver(0));
        let early = running.start_early(&starter, starts(1)).expect("started");
        let weak = Arc::downgrade(&early);
        drop(early);
        // Held for the streams to come, then taken by the first of them.
        let (taken, new) = running.for_stream(0, starts(2));
        assert_eq!((*taken == Driver(1), new), (true, false));
        assert_eq!(running.for_stream(1, starts(3)).0, taken);
        drop(taken);
        assert!(weak.upgrade().is_none(), "held by its streams only");
    }

    #[test]
    fn scans_of_one_execution_start_the_late_scan_once() {
        let mut running = RunningScan::default();
        // A subquery reading two tables: both scans' first streams ask.
        let (a, b) = (Arc::new(Driver(0)), Arc::new(Driver(0)));
        assert!(running.start_early(&a, starts(1)).is_some());
        assert!(running.start_early(&b, starts(2)).is_none(), "kept");
        // The subquery failed: its scans ended, the early driver was never
        // taken. A run of the plan again starts afresh.
        drop((a, b));
        let again = Arc::new(Driver(0));
        let fresh = running.start_early(&again, starts(3)).expect("replaced");
        assert_eq!(*fresh, Driver(3));
        drop(fresh);
        assert_eq!(*running.for_stream(0, starts(4)).0, Driver(3));
    }
}
