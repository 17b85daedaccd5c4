//! Background tasks whose result any number of readers may await, and that
//! the driver can stop.

use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::runtime::Handle;
use tokio::task::{AbortHandle, JoinHandle};

use crate::attempts::ScanAttempts;
use crate::metrics::{ScanMetrics, TaskGuard};

/// The result of a background task, shareable among its awaiting readers.
pub(crate) type SharedResult<T> = Shared<BoxFuture<'static, Result<T, Arc<String>>>>;

/// The tokio runtime a scan's background work runs on: the one current
/// where the scan was created, or, if none was, the first one current where
/// it started work. Work started off a runtime — from a `Drop` on a plain
/// thread, as datafusion-ffi releases a stream — goes there; once that
/// runtime has shut down, tokio drops it unstarted.
#[derive(Debug, Default, Clone)]
pub(crate) struct ScanRuntime(Arc<OnceLock<Handle>>);

impl ScanRuntime {
    /// The runtime current here, if any.
    pub(crate) fn here() -> Self {
        let runtime = Self::default();
        if let Ok(current) = Handle::try_current() {
            let _ = runtime.0.set(current);
        }
        runtime
    }

    /// The runtime to start work on now: the current one if there is one
    /// (remembered if none was), else the scan's.
    pub(crate) fn handle(&self) -> Option<Handle> {
        match Handle::try_current() {
            Ok(current) => {
                let _ = self.0.set(current.clone());
                Some(current)
            }
            Err(_) => self.0.get().cloned(),
        }
    }
}

/// A background task of a scan: live (in [`PrefetchStats::live_tasks`](crate::PrefetchStats::live_tasks))
/// until it ends or is aborted, and the store attempts of its reads count
/// for the scan (a spawned task does not inherit its spawner's). It runs on
/// the scan's runtime, never on whatever thread started it.
pub(crate) struct ScanTask {
    guard: TaskGuard,
    attempts: ScanAttempts,
    runtime: Option<Handle>,
}

impl ScanTask {
    /// A task of the scan `metrics` count for, to run on `runtime` (none:
    /// it never runs).
    pub(crate) fn new(metrics: &ScanMetrics, runtime: Option<Handle>) -> Self {
        Self {
            guard: metrics.stats().task_started(),
            attempts: metrics.attempts().clone(),
            runtime,
        }
    }

    /// Start `task` in the background; the handle that stops it, or `None`
    /// when there is no runtime to run it on (it is dropped unstarted).
    pub(crate) fn spawn(
        self,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> Option<AbortHandle> {
        self.start(task).map(|handle| handle.abort_handle())
    }

    /// Start `task` in the background; any number of readers may await its
    /// result. Without a runtime to run it on, the result is an error that
    /// says so.
    pub(crate) fn spawn_slot<T: Clone + Send + Sync + 'static>(
        self,
        what: &'static str,
        task: impl Future<Output = Result<T, Arc<String>>> + Send + 'static,
    ) -> Slot<T> {
        let Some(handle) = self.start(task) else {
            let error = format!("{what} not started: no tokio runtime to run it on");
            return Slot {
                result: futures::future::ready(Err(Arc::new(error)))
                    .boxed()
                    .shared(),
                abort: None,
            };
        };
        let abort = handle.abort_handle();
        let result = async move {
            match handle.await {
                Ok(result) => result,
                Err(e) => Err(Arc::new(format!("{what} ended: {e}"))),
            }
        }
        .boxed()
        .shared();
        Slot {
            result,
            abort: Some(abort),
        }
    }

    /// `task`, run as this scan's on its runtime, if it has one.
    fn start<F>(self, task: F) -> Option<JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Self {
            guard,
            attempts,
            runtime,
        } = self;
        let task = attempts.counting(async move {
            let _guard = guard;
            task.await
        });
        Some(runtime?.spawn(task))
    }
}

/// A background task's result, and the handle that stops it (none for a
/// result that was ready when it was made).
pub(crate) struct Slot<T: Clone> {
    pub(crate) result: SharedResult<T>,
    pub(crate) abort: Option<AbortHandle>,
}

impl<T: Clone + Send + Sync + 'static> Slot<T> {
    /// A result that is already there.
    pub(crate) fn ready(value: T) -> Self {
        Self {
            result: futures::future::ready(Ok(value)).boxed().shared(),
            abort: None,
        }
    }

    /// Stop the task, if it is still running.
    pub(crate) fn stop(self) {
        if let Some(abort) = self.abort {
            abort.abort();
        }
    }
}
