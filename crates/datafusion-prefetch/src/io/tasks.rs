//! Background tasks whose result any number of readers may await, and that
//! the driver can stop.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::task::AbortHandle;
use tokio::task::futures::TaskLocalFuture;

use crate::attempts::ScanAttempts;
use crate::metrics::{ScanMetrics, TaskGuard};

/// The result of a background task, shareable among its awaiting readers.
pub(crate) type SharedResult<T> = Shared<BoxFuture<'static, Result<T, Arc<String>>>>;

/// A background task of a scan: live (in [`PrefetchStats::live_tasks`](crate::PrefetchStats::live_tasks))
/// until it ends or is aborted, and the store attempts of its reads count
/// for the scan (a spawned task does not inherit its spawner's).
pub(crate) struct ScanTask {
    guard: TaskGuard,
    attempts: ScanAttempts,
}

impl ScanTask {
    pub(crate) fn new(metrics: &ScanMetrics) -> Self {
        Self {
            guard: metrics.stats().task_started(),
            attempts: metrics.attempts().clone(),
        }
    }

    /// `task`, run as this scan's.
    pub(crate) fn run<F: Future>(
        self,
        task: F,
    ) -> TaskLocalFuture<ScanAttempts, impl Future<Output = F::Output>> {
        let Self { guard, attempts } = self;
        attempts.counting(async move {
            let _guard = guard;
            task.await
        })
    }
}

/// A background task's result, and the handle that stops it (none for a
/// result that was ready when it was made).
pub(crate) struct Slot<T: Clone> {
    pub(crate) result: SharedResult<T>,
    pub(crate) abort: Option<AbortHandle>,
}

impl<T: Clone + Send + Sync + 'static> Slot<T> {
    /// Run `task` in the background; any number of readers may await its result.
    pub(crate) fn spawn(
        what: &'static str,
        task: impl Future<Output = Result<T, Arc<String>>> + Send + 'static,
    ) -> Self {
        let handle = tokio::spawn(task);
        let abort = handle.abort_handle();
        let result = async move {
            match handle.await {
                Ok(result) => result,
                Err(e) => Err(Arc::new(format!("{what} ended: {e}"))),
            }
        }
        .boxed()
        .shared();
        Self {
            result,
            abort: Some(abort),
        }
    }

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
