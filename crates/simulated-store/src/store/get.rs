//! A GET in flight: the guard that ends its record and frees its
//! connection on every exit path, and its body, paced to the connection's
//! bandwidth as it is consumed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use object_store::Result;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::wire::ConnectionSlot;
use crate::{RequestState, StoreStats};

/// Bandwidth debt below this is carried over to the next chunk instead of
/// slept off: a timer costs far more than 50 µs of simulated transfer, and
/// tokio's timer cannot sleep that briefly anyway.
pub(super) const MIN_SLEEP: Duration = Duration::from_micros(50);

/// Owns a GET's connection and the bookkeeping for its end, so every exit
/// path — success, error, or the caller dropping the future or the body —
/// releases the connection and finishes the log record exactly once.
pub(super) struct GetGuard {
    stats: Arc<StoreStats>,
    seq: u64,
    connection: Option<OwnedSemaphorePermit>,
    connected: bool,
    transferred: u64,
    finished: bool,
}

impl GetGuard {
    pub(super) fn new(stats: Arc<StoreStats>, seq: u64) -> Self {
        Self {
            stats,
            seq,
            connection: None,
            connected: false,
            transferred: 0,
            finished: false,
        }
    }

    pub(super) fn finish(&mut self, state: RequestState) {
        if self.finished {
            return;
        }
        self.finished = true;
        if self.connected {
            // Decrement before releasing the permit: the other order would
            // let a waiter take the connection and count itself while we
            // are still counted, briefly exceeding the cap in the stats.
            self.stats.disconnected();
        }
        self.connection = None;
        self.stats.finish(self.seq, state, self.transferred);
    }
}

impl ConnectionSlot for GetGuard {
    fn hold(&mut self, connection: Option<OwnedSemaphorePermit>) {
        self.connection = connection;
        self.connected = true;
        self.stats.connected(self.seq);
    }

    fn release(&mut self) {
        if self.connected {
            // Before the permit, as in `finish`.
            self.stats.disconnected();
            self.connected = false;
        }
        self.connection = None;
    }

    fn get_seq(&self) -> Option<u64> {
        Some(self.seq)
    }
}

impl Drop for GetGuard {
    fn drop(&mut self) {
        self.finish(RequestState::Cancelled);
    }
}

/// A GET body that charges the connection's bandwidth as it is consumed.
///
/// Pacing follows a schedule rather than sleeping `len / bandwidth` per
/// chunk: `due` is when the bytes delivered so far would have finished
/// arriving. A chunk is held back only if it is due more than [`MIN_SLEEP`]
/// in the future, so tiny chunks accumulate debt instead of each paying for
/// a timer, and time lost to a late timer wakeup is credited to later
/// chunks instead of slowing the transfer down. Time the consumer spends
/// between polls is *not* credited: the body is charged as it is consumed,
/// as if the network only moved data the reader asked for.
pub(super) struct SimulatedBody {
    inner: BoxStream<'static, Result<Bytes>>,
    bandwidth: Option<u64>,
    /// Body length from the response's range; reaching it completes the
    /// request even if the caller never polls for the end of the stream.
    expected: u64,
    guard: GetGuard,
    due: Instant,
    last_delivery: Instant,
    /// A chunk waiting for `timer` before it may be handed out.
    held: Option<Bytes>,
    /// Reused across chunks to avoid one allocation per sleep.
    timer: Option<Pin<Box<Sleep>>>,
}

impl SimulatedBody {
    pub(super) fn new(
        inner: BoxStream<'static, Result<Bytes>>,
        expected: u64,
        bandwidth: Option<u64>,
        mut guard: GetGuard,
    ) -> Self {
        if expected == 0 {
            // Nothing to transfer, so the connection is free right away.
            guard.finish(RequestState::Completed);
        }
        let now = Instant::now();
        Self {
            inner,
            bandwidth,
            expected,
            guard,
            due: now,
            last_delivery: now,
            held: None,
            timer: None,
        }
    }

    fn deliver(&mut self, chunk: Bytes) -> Bytes {
        let len = chunk.len() as u64;
        self.guard.transferred += len;
        self.guard.stats.add_transferred(len);
        self.last_delivery = Instant::now();
        if self.guard.transferred >= self.expected {
            self.guard.finish(RequestState::Completed);
        }
        chunk
    }

    /// Advances the schedule by `chunk` and returns `true` if the chunk must
    /// wait for `self.due`.
    fn schedule(&mut self, chunk_len: usize, bandwidth: u64) -> bool {
        let now = Instant::now();
        let consumer_time = now.saturating_duration_since(self.last_delivery);
        self.due += consumer_time + transfer_time(chunk_len as u64, bandwidth);
        self.due > now + MIN_SLEEP
    }
}

fn transfer_time(bytes: u64, bytes_per_sec: u64) -> Duration {
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(bytes_per_sec);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

impl Stream for SimulatedBody {
    type Item = Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();

        if this.held.is_some() {
            if let Some(timer) = this.timer.as_mut() {
                ready!(timer.as_mut().poll(cx));
            }
            let chunk = this.held.take().expect("checked above");
            return Poll::Ready(Some(Ok(this.deliver(chunk))));
        }

        match ready!(this.inner.poll_next_unpin(cx)) {
            Some(Ok(chunk)) => {
                let Some(bandwidth) = this.bandwidth else {
                    return Poll::Ready(Some(Ok(this.deliver(chunk))));
                };
                if !this.schedule(chunk.len(), bandwidth) {
                    return Poll::Ready(Some(Ok(this.deliver(chunk))));
                }
                let due = this.due;
                let timer = match &mut this.timer {
                    Some(timer) => {
                        timer.as_mut().reset(due);
                        timer
                    }
                    slot @ None => slot.insert(Box::pin(tokio::time::sleep_until(due))),
                };
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Ok(this.deliver(chunk))));
                }
                this.held = Some(chunk);
                Poll::Pending
            }
            Some(Err(e)) => {
                this.guard.finish(RequestState::Failed);
                Poll::Ready(Some(Err(e)))
            }
            None => {
                // A body shorter than its advertised range still ends the
                // request normally; the shortfall shows in bytes_transferred.
                this.guard.finish(RequestState::Completed);
                Poll::Ready(None)
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lower, upper) = self.inner.size_hint();
        let held = usize::from(self.held.is_some());
        (
            lower.saturating_add(held),
            upper.and_then(|u| u.checked_add(held)),
        )
    }
}
