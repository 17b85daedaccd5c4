//! The [`FaultyStore`] wrapper.

use std::fmt;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};
use tokio::time::Instant;

use crate::TruncateMode;
use crate::fault_rules::Decision;
use crate::ranges::get_ranges_bounded;
use crate::{Fault, FaultKind, FaultRecord, FaultRule, FaultRules, FaultStats, InjectedFault};

/// An [`ObjectStore`] wrapper that injects faults into GET requests, for
/// testing how a reader copes with a misbehaving object store.
///
/// Every GET (`get_opts`, and therefore `get`, `get_range` and
/// `get_ranges`) is numbered — from 0, in arrival order — and checked
/// against the store's [`FaultRules`]; the first [`FaultRule`] that fires
/// injects its [`Fault`]:
///
/// | fault | effect |
/// |---|---|
/// | [`Error`](Fault::Error) | fails at once, without reaching the inner store |
/// | [`Stall`](Fault::Stall) | never answers; cancelled by dropping the future |
/// | [`Delay`](Fault::Delay) | answers after an extra delay |
/// | [`Truncate`](Fault::Truncate) | body cut short: error, clean early end, or hang |
/// | [`Corrupt`](Fault::Corrupt) | body of the right length with bytes inverted |
/// | [`CorruptObject`](Fault::CorruptObject) | the same, at fixed object offsets |
///
/// Errors are `object_store::Error::Generic { store: "FaultyStore", source }`
/// with an [`InjectedFault`] source whose message names the fault, the
/// request number, the path and the range. Each injection is counted and
/// logged in [`FaultStats`].
///
/// The rules live behind an `Arc` ([`faults`](Self::faults)), so a test can
/// change them after handing the store to DataFusion.
///
/// `get_ranges` coalesces ranges as object_store's default does and then
/// calls `get_opts`, so faults hit the coalesced GETs a real store would
/// see (a range starting past the end of a short body is an error there,
/// where the default panics). HEAD requests (`get_opts` with `head: true`),
/// LISTs and writes are forwarded untouched and are not numbered.
///
/// # Composing with [`SimulatedStore`](crate::SimulatedStore)
///
/// Both orders work and mean slightly different things:
///
/// * `FaultyStore<SimulatedStore<_>>`: an injected error or stall happens
///   *before* the simulated network, so it costs no latency, takes no
///   connection and does not appear in the [`StoreStats`](crate::StoreStats)
///   log. Body faults apply to the simulated (paced) body as it leaves the
///   simulated network, so the `StoreStats` log shows what the network
///   delivered, not the cut or corrupted body the caller got.
/// * `SimulatedStore<FaultyStore<_>>`: every faulted request first pays the
///   simulated latency and holds a connection — a stalled request keeps its
///   connection until dropped, as a hung HTTP request would — and appears in
///   the log (`Failed` for errors, `Pending` then `Cancelled` for stalls).
pub struct FaultyStore<T: ObjectStore> {
    inner: T,
    faults: Arc<FaultRules>,
    stats: Arc<FaultStats>,
}

impl<T: ObjectStore> FaultyStore<T> {
    /// Wraps `inner` with an empty rule list: a pass-through until rules are
    /// added through [`faults`](Self::faults) or [`with_rule`](Self::with_rule).
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            faults: Arc::new(FaultRules::new()),
            stats: Arc::new(FaultStats::new()),
        }
    }

    /// Appends `rule` to the rule list.
    #[must_use]
    pub fn with_rule(self, rule: FaultRule) -> Self {
        self.faults.push(rule);
        self
    }

    /// The shared, changeable rule list.
    pub fn faults(&self) -> Arc<FaultRules> {
        Arc::clone(&self.faults)
    }

    /// The shared counters and log of injected faults.
    pub fn stats(&self) -> Arc<FaultStats> {
        Arc::clone(&self.stats)
    }

    /// The wrapped store, for setting up data without faults.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Unwraps the inner store.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: ObjectStore> fmt::Display for FaultyStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Debug for FaultyStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("rules", &self.faults.rules())
            .finish_non_exhaustive()
    }
}

/// Everything needed to describe one injection in an error message.
struct Injection {
    request: u64,
    path: String,
    rule: usize,
    label: Option<String>,
}

impl Injection {
    fn error(
        &self,
        kind: FaultKind,
        range: Option<GetRange>,
        delivered: Option<(u64, u64)>,
    ) -> InjectedFault {
        InjectedFault {
            kind,
            request: self.request,
            path: self.path.clone(),
            range,
            rule: self.rule,
            label: self.label.clone(),
            delivered,
        }
    }
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for FaultyStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            return self.inner.get_opts(location, options).await;
        }

        self.stats.count_get();
        let Decision { request, injection } = self
            .faults
            .decide(location.as_ref(), options.range.as_ref());
        let Some((rule, label, fault)) = injection else {
            return self.inner.get_opts(location, options).await;
        };
        self.stats.record(FaultRecord {
            request,
            path: location.to_string(),
            requested: options.range.clone(),
            rule,
            label: label.clone(),
            fault,
            at: Instant::now(),
        });
        let injection = Injection {
            request,
            path: location.to_string(),
            rule,
            label,
        };

        let body_fault = match fault {
            Fault::Error => {
                return Err(injection
                    .error(FaultKind::Error, options.range, None)
                    .into());
            }
            // Pending forever without registering a waker: only dropping the
            // future ends it, and nothing is held but the future itself.
            Fault::Stall => return std::future::pending().await,
            Fault::Delay(delay) => {
                tokio::time::sleep(delay).await;
                return self.inner.get_opts(location, options).await;
            }
            Fault::Truncate { keep, mode } => BodyFault::Truncate { keep, mode },
            Fault::Corrupt { offset, len } => BodyFault::Corrupt { offset, len },
            Fault::CorruptObject { start, len } => BodyFault::CorruptObject { start, len },
        };

        let result = self.inner.get_opts(location, options).await?;
        let GetResult {
            payload,
            meta,
            range,
            attributes,
        } = result;
        // `into_stream` turns a local-file payload into a stream, so body
        // faults work whatever the inner store returns.
        let body = GetResult {
            payload,
            meta: meta.clone(),
            range: range.clone(),
            attributes: Default::default(),
        }
        .into_stream();
        let body = FaultyBody::new(body, range.clone(), body_fault, injection);
        Ok(GetResult {
            payload: GetResultPayload::Stream(body.boxed()),
            meta,
            range,
            attributes,
        })
    }

    /// Coalesced and cut as object_store's default `get_ranges` does, so
    /// faults hit the GETs a real store would see; unlike the default, a
    /// range starting past the end of a short body is an error, not a panic
    /// (`ranges.rs`).
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        get_ranges_bounded(self, location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// A fault applied to a response body.
#[derive(Debug, Clone, Copy)]
enum BodyFault {
    Truncate { keep: u64, mode: TruncateMode },
    Corrupt { offset: u64, len: u64 },
    CorruptObject { start: u64, len: u64 },
}

/// A response body with a [`BodyFault`] applied while it streams.
struct FaultyBody {
    /// `None` once the body has been cut off.
    inner: Option<BoxStream<'static, Result<Bytes>>>,
    /// Body bytes handed out so far.
    delivered: u64,
    /// Length the response's range promised.
    expected: u64,
    action: Action,
}

enum Action {
    /// Deliver `keep` bytes, then yield `error` (if any) and end, or hang.
    Truncate {
        keep: u64,
        mode: TruncateMode,
        error: Option<InjectedFault>,
    },
    /// Invert the body bytes in `flip` (body offsets).
    Corrupt { flip: Range<u64> },
}

impl FaultyBody {
    fn new(
        inner: BoxStream<'static, Result<Bytes>>,
        range: Range<u64>,
        fault: BodyFault,
        injection: Injection,
    ) -> Self {
        let expected = range.end.saturating_sub(range.start);
        let action = match fault {
            BodyFault::Truncate { keep, mode } => {
                let keep = keep.min(expected.saturating_sub(1));
                let error = (mode == TruncateMode::Error).then(|| {
                    injection.error(
                        FaultKind::Truncate,
                        Some(GetRange::Bounded(range.clone())),
                        Some((keep, expected)),
                    )
                });
                Action::Truncate { keep, mode, error }
            }
            BodyFault::Corrupt { offset, len } => {
                let start = offset.min(expected.saturating_sub(1));
                let end = start.saturating_add(len).min(expected);
                Action::Corrupt { flip: start..end }
            }
            BodyFault::CorruptObject { start, len } => {
                // The object bytes this body carries, as body offsets.
                let from = start.max(range.start);
                let to = start.saturating_add(len).min(range.end);
                let flip = if from < to {
                    from - range.start..to - range.start
                } else {
                    0..0
                };
                Action::Corrupt { flip }
            }
        };
        Self {
            inner: Some(inner),
            delivered: 0,
            expected,
            action,
        }
    }
}

impl Stream for FaultyBody {
    type Item = Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Action::Truncate { keep, mode, error } = &mut this.action
            && this.delivered >= *keep
        {
            return match mode {
                // Hold on to the inner body, as a hung connection would.
                TruncateMode::Stall => Poll::Pending,
                TruncateMode::EndEarly | TruncateMode::Error => {
                    // Dropping the inner body closes the "connection" (an
                    // inner SimulatedStore logs it as cancelled).
                    this.inner = None;
                    Poll::Ready(error.take().map(|e| Err(e.into())))
                }
            };
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let mut chunk = match ready!(inner.poll_next_unpin(cx)) {
            Some(Ok(chunk)) => chunk,
            other => return Poll::Ready(other),
        };
        let start = this.delivered;
        match &this.action {
            Action::Truncate { keep, .. } => {
                let room = usize::try_from(keep - start).unwrap_or(usize::MAX);
                chunk.truncate(room);
            }
            Action::Corrupt { flip } => {
                let end = start + chunk.len() as u64;
                let (from, to) = (flip.start.max(start), flip.end.min(end));
                if from < to {
                    let mut bytes = chunk.to_vec();
                    for b in &mut bytes[(from - start) as usize..(to - start) as usize] {
                        *b ^= 0xFF;
                    }
                    chunk = Bytes::from(bytes);
                }
            }
        }
        this.delivered += chunk.len() as u64;
        Poll::Ready(Some(Ok(chunk)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            Some(inner) => {
                let (_, upper) = inner.size_hint();
                // A cut body may add one error item; be conservative.
                (0, upper.and_then(|u| u.checked_add(1)))
            }
            None => (0, Some(0)),
        }
    }
}

impl fmt::Debug for FaultyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyBody")
            .field("delivered", &self.delivered)
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
