//! Streams start reading when they are created: the driver's side of
//! [`Event::PartitionStarted`], and of `auto`'s need to know its store
//! before it decides anything (a probe, or what sibling scans measured).

use std::time::Duration;

use super::driver::ScanDriver;
use super::tasks::SharedResult;
use crate::scheduler::{Event, FileId};

/// The longest a scan's first file waits for `auto`'s store probe: twice
/// `auto`'s local round trip (`LOCAL_RTT`), so a local store under load
/// still answers in time, and a remote one costs at most this once per scan.
const PROBE_WAIT: Duration = Duration::from_millis(10);

/// How often a stream waiting to start checks whether a sibling scan has
/// measured the store.
const SIBLING_POLL: Duration = Duration::from_millis(1);

impl ScanDriver {
    /// The stream of `partition` was created: open its first files now, in
    /// the background, so their first reads overlap whatever the query runs
    /// before the stream is polled. `auto` on a store the session has not
    /// measured waits, in a task, for its probe or a sibling's measurement;
    /// everything else starts at once. Outside a tokio runtime nothing starts
    /// early: the first poll opens the file as usual.
    pub(crate) fn partition_started(&self, partition: usize) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        if self.units.len() == 0 {
            return;
        }
        // Nothing to wait for (a fixed policy, or a store already measured):
        // start now, before the stream can be polled.
        let Some(mut probe) = self.start_probe(0) else {
            self.apply([Event::PartitionStarted { partition }]);
            return;
        };
        let this = self.this.clone();
        let task = self.task().spawn(async move {
            // Whichever lands first: this scan's probe, or any sibling scan's
            // measurement of the store (every scan of a query starts at once,
            // each with a probe of its own).
            // Unanswered after `PROBE_WAIT`, the store is remote: start then,
            // rather than a round trip later when the probe lands.
            let mut ticks = tokio::time::interval(SIBLING_POLL);
            let unanswered = tokio::time::sleep(PROBE_WAIT);
            tokio::pin!(unanswered);
            loop {
                tokio::select! {
                    // A failed probe leaves the store unmeasured: nothing starts.
                    _ = &mut probe => break,
                    _ = &mut unanswered => {
                        if let Some(driver) = this.upgrade() {
                            driver.apply([Event::ProbeUnanswered]);
                        }
                        break;
                    }
                    _ = ticks.tick() => {
                        let Some(driver) = this.upgrade() else {
                            return;
                        };
                        if !driver.adopt_session_measurements() {
                            break;
                        }
                    }
                }
            }
            if let Some(driver) = this.upgrade() {
                driver.apply([Event::PartitionStarted { partition }]);
            }
        });
        let mut starts = self.starts.lock();
        starts.retain(|h| !h.is_finished());
        starts.extend(task);
    }

    /// `auto` before any request has been timed (footers came from the
    /// metadata cache): time a HEAD of `file`, waiting for it at most
    /// [`PROBE_WAIT`]. Unanswered by then, the store is remote — the default
    /// assumption — and the probe's time is recorded whenever it lands.
    pub(super) async fn probe_store(&self, file: FileId) {
        if let Some(probe) = self.start_probe(file)
            && tokio::time::timeout(PROBE_WAIT, probe).await.is_err()
        {
            self.apply([Event::ProbeUnanswered]);
        }
    }

    /// `auto`: adopt what the session's other scans have measured of the
    /// store, if this scan has timed nothing yet. Whether it still wants a
    /// probe.
    fn adopt_session_measurements(&self) -> bool {
        if let Some((profiles, store)) = &self.profiles {
            let measured = profiles.tuner_for(store);
            if measured.has_measured() {
                self.apply([Event::StoreMeasured { measured }]);
            }
        }
        self.view(|core| core.wants_probe())
    }

    /// `auto`: adopt what the session's other scans measured of the store;
    /// if that is nothing, start (once per scan) a timed HEAD of `file` and
    /// return it to await.
    fn start_probe(&self, file: FileId) -> Option<SharedResult<()>> {
        if !self.adopt_session_measurements() {
            return None;
        }
        let location = &self.units.file(file).object_meta.location;
        Some(
            self.probe
                .start(&self.store, location, || self.task(), self.sink()),
        )
    }
}
