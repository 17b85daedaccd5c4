//! How background work reports back: to the scan's driver, through this
//! trait, held weakly so a task never keeps a finished scan alive (and no
//! module that spawns work needs to know the driver).

use std::sync::Weak;

use crate::scheduler::Event;

/// Takes what background work observed to the scheduler.
pub(crate) trait EventSink: Send + Sync {
    /// Report `event`.
    fn report(&self, event: Event);
}

/// A sink held by a background task.
pub(crate) type Reports = Weak<dyn EventSink>;

/// Report `event` to `sink`, if the scan is still there; `false`: it is not
/// (its driver is being dropped, or was).
pub(crate) fn report(sink: &Reports, event: Event) -> bool {
    match sink.upgrade() {
        Some(sink) => {
            sink.report(event);
            true
        }
        None => false,
    }
}
