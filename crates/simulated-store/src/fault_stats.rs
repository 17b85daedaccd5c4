//! Counters and log of injected faults, and the error they produce.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::GetRange;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::{Fault, FaultKind};

/// One fault injected by a [`FaultyStore`](crate::FaultyStore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    /// The store-wide number of the GET, counting from 0 (see
    /// [`FaultRule::requests`](crate::FaultRule::requests)).
    pub request: u64,
    /// The object's path, as [`object_store::path::Path`] displays it.
    pub path: String,
    /// The range as the caller asked for it (`None` = whole object).
    pub requested: Option<GetRange>,
    /// Index of the rule that fired, in the rule list at that moment.
    pub rule: usize,
    /// The rule's [label](crate::FaultRule::named), if any.
    pub label: Option<String>,
    /// What was injected.
    pub fault: Fault,
    /// When the fault was decided, as the request arrived (tokio clock).
    pub at: Instant,
}

impl FaultRecord {
    /// Shorthand for `self.fault.kind()`.
    pub fn kind(&self) -> FaultKind {
        self.fault.kind()
    }
}

/// Counters and log of the faults a [`FaultyStore`](crate::FaultyStore)
/// injected, shared through an `Arc` like
/// [`StoreStats`](crate::StoreStats).
///
/// A fault is counted and logged when it is decided, as the request
/// arrives: a stalled request is counted although it never completes, and
/// a body fault is counted even if the caller never reads the body.
#[derive(Debug, Default)]
pub struct FaultStats {
    get_requests: AtomicU64,
    injected: [AtomicU64; FaultKind::ALL.len()],
    log: Mutex<Vec<FaultRecord>>,
}

impl FaultStats {
    /// Creates empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// GETs seen by the store, faulted or not (HEAD requests excluded).
    pub fn get_requests(&self) -> u64 {
        self.get_requests.load(Ordering::Relaxed)
    }

    /// Faults of `kind` injected so far.
    pub fn injected(&self, kind: FaultKind) -> u64 {
        self.injected[kind.index()].load(Ordering::Relaxed)
    }

    /// Faults of every kind injected so far.
    pub fn total_injected(&self) -> u64 {
        FaultKind::ALL.iter().map(|&k| self.injected(k)).sum()
    }

    /// A copy of the fault log, in request order.
    pub fn records(&self) -> Vec<FaultRecord> {
        self.log.lock().clone()
    }

    /// The logged faults of one object, in request order. `path` may be a
    /// `&str` or an `&object_store::path::Path`.
    pub fn records_for(&self, path: impl AsRef<str>) -> Vec<FaultRecord> {
        let path = path.as_ref();
        self.log
            .lock()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// The numbers of the GETs that received a fault of `kind`.
    pub fn requests_with(&self, kind: FaultKind) -> Vec<u64> {
        self.log
            .lock()
            .iter()
            .filter(|r| r.kind() == kind)
            .map(|r| r.request)
            .collect()
    }

    /// Zeroes the counters and clears the log. Request numbering is not
    /// affected (it belongs to the [`FaultRules`](crate::FaultRules)).
    pub fn reset(&self) {
        let mut log = self.log.lock();
        log.clear();
        self.get_requests.store(0, Ordering::Relaxed);
        for counter in &self.injected {
            counter.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_get(&self) {
        self.get_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record(&self, record: FaultRecord) {
        let mut log = self.log.lock();
        self.injected[record.kind().index()].fetch_add(1, Ordering::Relaxed);
        log.push(record);
    }
}

/// The error a [`FaultyStore`](crate::FaultyStore) injects, wrapped in
/// `object_store::Error::Generic { store: "FaultyStore", source }`.
///
/// A test can tell an injected failure from a real one by downcasting the
/// source:
///
/// ```
/// # use datafusion_prefetch_simstore::InjectedFault;
/// fn is_injected(e: &object_store::Error) -> bool {
///     matches!(e, object_store::Error::Generic { source, .. } if source.is::<InjectedFault>())
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InjectedFault {
    /// [`FaultKind::Error`] for a failed request, [`FaultKind::Truncate`]
    /// for a body cut short with [`TruncateMode::Error`](crate::TruncateMode::Error).
    pub kind: FaultKind,
    /// The store-wide number of the GET (from 0).
    pub request: u64,
    /// The object's path.
    pub path: String,
    /// The requested range for a failed request; the range the response
    /// advertised for a truncated body.
    pub range: Option<GetRange>,
    /// Index of the rule that fired.
    pub rule: usize,
    /// The rule's label, if any.
    pub label: Option<String>,
    /// For a truncated body: bytes delivered before the error, and bytes
    /// the range promised.
    pub delivered: Option<(u64, u64)>,
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected {} on GET #{} of {} ({}), rule {}",
            self.kind,
            self.request,
            self.path,
            DisplayRange(self.range.as_ref()),
            self.rule
        )?;
        if let Some(label) = &self.label {
            write!(f, " \"{label}\"")?;
        }
        if let Some((delivered, expected)) = self.delivered {
            write!(
                f,
                ": response body ended after {delivered} of {expected} bytes"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for InjectedFault {}

impl From<InjectedFault> for object_store::Error {
    fn from(fault: InjectedFault) -> Self {
        Self::Generic {
            store: "FaultyStore",
            source: Box::new(fault),
        }
    }
}

/// Formats a requested range for humans (`GetRange`'s own `Display` is the
/// HTTP header form and panics on an empty range).
struct DisplayRange<'a>(Option<&'a GetRange>);

impl fmt::Display for DisplayRange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("whole object"),
            Some(GetRange::Bounded(r)) => write!(f, "bytes {}..{}", r.start, r.end),
            Some(GetRange::Offset(o)) => write!(f, "bytes {o}.."),
            Some(GetRange::Suffix(n)) => write!(f, "last {n} bytes"),
        }
    }
}
