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

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Weak};

use datafusion_datasource::file_scan_config::FileScanConfig;
use object_store::ObjectStore;

use crate::io::ScanDriver;

/// The drivers of one source (shared by its clones).
#[derive(Default)]
pub(crate) struct RunningScan {
    /// The latest execution's driver, while a stream (or
    /// [`Self::started_early`]) holds it.
    driver: Weak<ScanDriver>,
    /// The partitions whose streams it serves.
    claimed: BTreeSet<usize>,
    /// A driver started before DataFusion created any of its execution's
    /// streams, held until the first of them takes it over, a later
    /// execution replaces it, or the source is dropped (for a scan
    /// DataFusion never creates: its first reads stay staged until then, and
    /// the governor asks it to shed them as an idle scan when others wait).
    started_early: Option<Arc<ScanDriver>>,
}

impl RunningScan {
    /// The driver for a stream of `partition`: the running execution's, or
    /// one `start`ed for a new execution when the running one serves
    /// `partition` already (or none runs). `true` with a new driver.
    pub(crate) fn for_stream(
        &mut self,
        partition: usize,
        start: impl FnOnce() -> Arc<ScanDriver>,
    ) -> (Arc<ScanDriver>, bool) {
        // Taken, not dropped, before the upgrade: it may be the driver's only
        // strong reference (dropping it first would end the early start and
        // make this stream read the files again).
        let _started_early = self.started_early.take();
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
    /// later, held until the first of them takes it. It replaces a driver
    /// started early for an earlier execution that never took it (a
    /// subquery that failed): this execution's streams must not read that
    /// one's state.
    pub(crate) fn start_early(
        &mut self,
        start: impl FnOnce() -> Arc<ScanDriver>,
    ) -> Arc<ScanDriver> {
        let driver = start();
        self.driver = Arc::downgrade(&driver);
        self.claimed.clear();
        self.started_early = Some(Arc::clone(&driver));
        driver
    }
}

/// A scan that can be started before DataFusion creates its streams.
pub(crate) trait StartsEarly: Send + Sync {
    /// Start a new execution of the scan of `config`'s files, reading from
    /// `store`: each of its partitions as when its stream is created.
    fn start_early(&self, store: &Arc<dyn ObjectStore>, config: &FileScanConfig);
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
    /// Start a new execution of the scan, if it reads from `store_url` (the
    /// one store the caller has at hand).
    pub(crate) fn start(&self, store_url: &str, store: &Arc<dyn ObjectStore>) {
        if self.config.object_store_url.as_str() == store_url {
            self.source.start_early(store, &self.config);
        }
    }
}
