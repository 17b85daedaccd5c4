//! `auto`'s store probe: one timed HEAD request, when a scan must know
//! whether its store is remote before anything else has been timed.

use std::sync::Arc;
use std::time::Instant;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;

use super::sink::{Reports, report};
use super::tasks::{ScanTask, SharedResult, Slot};
use crate::scheduler::Event;

/// A scan's probe, started at most once.
#[derive(Default)]
pub(crate) struct Probe {
    slot: Mutex<Option<Slot<()>>>,
}

impl Probe {
    /// The probe's answer to await: a HEAD of `location`, timed and reported
    /// to `sink`; started on the first call, shared by the later ones.
    pub(crate) fn start(
        &self,
        store: &Arc<dyn ObjectStore>,
        location: &Path,
        task: impl FnOnce() -> ScanTask,
        sink: Reports,
    ) -> SharedResult<()> {
        let mut slot = self.slot.lock();
        let slot = slot.get_or_insert_with(|| {
            let store = Arc::clone(store);
            let location = location.clone();
            let task = task();
            task.spawn_slot("store probe", async move {
                let started = Instant::now();
                store
                    .head(&location)
                    .await
                    .map_err(|e| Arc::new(e.to_string()))?;
                let took = started.elapsed();
                report(&sink, Event::RequestTimed { bytes: 0, took });
                Ok(())
            })
        });
        slot.result.clone()
    }

    /// Stop the probe, if it is still running.
    pub(crate) fn stop(&self) {
        if let Some(slot) = self.slot.lock().take() {
            slot.stop();
        }
    }
}
