//! Reads shared between scans: when two scans of one runtime read exactly
//! the same bytes of the same object version at the same time — the two
//! scans of `partsupp` in TPC-H q2 and q11, which DataFusion's decorrelated
//! plans read once for the outer query and once for the subquery, or two
//! queries reading one table at once — the second waits for the first's
//! request instead of sending its own.
//!
//! - `in_flight.rs`: the decisions, pure — which read is listed, who waits;
//! - this module: the waiting, and telling the waiters.
//!
//! A waiter gets the very bytes the store answered the first scan (the same
//! buffer, no copy). If that request fails, is stopped (its scan released
//! it unserved, or was cancelled) or came back short, the waiter sends its
//! own: sharing never fails a read the store would have answered.

mod in_flight;

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::Shared;
use parking_lot::Mutex;

pub(crate) use in_flight::ObjectKey;
use in_flight::{InFlight, Joined, ScanToken, Ticket};

/// How waiters get a listed read's bytes: `Err` when it ended without them.
type Waiters = Shared<oneshot::Receiver<Bytes>>;

/// The reads in flight of every scan of one runtime (one per
/// [`PrefetchGovernor`](crate::PrefetchGovernor)).
#[derive(Debug, Default)]
pub(crate) struct SharedReads {
    in_flight: Mutex<InFlight<Waiters>>,
    next_scan: AtomicU64,
}

impl SharedReads {
    /// A new scan's handle on the reads of every scan.
    pub(crate) fn join(self: &Arc<Self>) -> ReadSharing {
        ReadSharing {
            reads: Arc::clone(self),
            scan: self.next_scan.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Reads listed now (none once every read has ended).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.lock().len()
    }
}

/// Where a read's bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// This scan's own request.
    Fetched(Bytes),
    /// Another scan's request for the same range.
    Shared(Bytes),
}

/// One scan's side of [`SharedReads`].
#[derive(Debug)]
pub(crate) struct ReadSharing {
    reads: Arc<SharedReads>,
    scan: ScanToken,
}

impl ReadSharing {
    /// The bytes of `range` of `object`: another scan's if it is reading
    /// exactly this range now, else `fetch`ed (and shared with scans that
    /// ask for the range while it is in flight).
    ///
    /// Shared bytes are the whole range; a request of another scan that
    /// fails, stops or comes back short is not shared, and this scan fetches
    /// the range itself.
    pub(crate) async fn read<F, Fut>(
        &self,
        object: &ObjectKey,
        range: Range<u64>,
        fetch: F,
    ) -> object_store::Result<Body>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = object_store::Result<Bytes>>,
    {
        let (sender, receiver) = oneshot::channel();
        let joined = self
            .reads
            .in_flight
            .lock()
            .join(self.scan, object, &range, || receiver.shared());
        match joined {
            Joined::Wait(waiters) => {
                let expected = range.end - range.start;
                if let Ok(bytes) = waiters.await
                    && bytes.len() as u64 == expected
                {
                    return Ok(Body::Shared(bytes));
                }
                fetch().await.map(Body::Fetched)
            }
            Joined::Send(ticket) => {
                let listed = Listed {
                    reads: &self.reads,
                    ticket,
                    sender: Some(sender),
                };
                let bytes = fetch().await?;
                listed.landed(&bytes);
                Ok(Body::Fetched(bytes))
            }
        }
    }
}

/// A read listed for others to wait on, while it is in flight. Dropped
/// without landing (failed, or its future dropped), it is unlisted and its
/// waiters are told to read for themselves.
struct Listed<'a> {
    reads: &'a SharedReads,
    ticket: Option<Ticket>,
    sender: Option<oneshot::Sender<Bytes>>,
}

impl Listed<'_> {
    fn landed(mut self, bytes: &Bytes) {
        self.unlist();
        if let Some(sender) = self.sender.take() {
            // No waiter left is no error.
            let _ = sender.send(bytes.clone());
        }
    }

    /// Later reads of the range are sent again (unlisted before the waiters
    /// are told, so none joins a read that has ended).
    fn unlist(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.reads.in_flight.lock().ended(&ticket);
        }
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.unlist();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use object_store::path::Path;
    use tokio::sync::Notify;

    use super::*;

    fn object() -> ObjectKey {
        ObjectKey {
            store: "memory://".into(),
            location: Path::from("t/a.parquet"),
            size: 1000,
            modified: 1,
        }
    }

    /// A fetch that counts itself and answers `bytes` once `gate` opens.
    async fn gated(
        sent: &AtomicUsize,
        gate: &Notify,
        answer: object_store::Result<Bytes>,
    ) -> object_store::Result<Bytes> {
        sent.fetch_add(1, Ordering::SeqCst);
        gate.notified().await;
        answer
    }

    fn body(len: usize) -> Bytes {
        Bytes::from(vec![7u8; len])
    }

    #[tokio::test]
    async fn a_scan_reading_the_same_range_at_the_same_time_gets_the_first_scans_bytes() {
        let reads = Arc::new(SharedReads::default());
        let file = object();
        let (a, b) = (reads.join(), reads.join());
        let (sent, gate) = (AtomicUsize::new(0), Notify::new());
        let first = a.read(&file, 4..104, || gated(&sent, &gate, Ok(body(100))));
        let second = b.read(&file, 4..104, || gated(&sent, &gate, Ok(body(100))));
        let open = async {
            tokio::task::yield_now().await;
            gate.notify_waiters();
        };
        let (first, second, ()) = tokio::join!(first, second, open);
        let (Body::Fetched(fetched), Body::Shared(shared)) = (first.unwrap(), second.unwrap())
        else {
            panic!("the first fetches, the second shares");
        };
        assert_eq!(sent.load(Ordering::SeqCst), 1, "one request");
        assert_eq!(
            fetched.as_ptr(),
            shared.as_ptr(),
            "the same buffer, no copy"
        );
        assert_eq!(reads.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_waiter_fetches_for_itself_when_the_shared_read_fails_or_is_short() {
        for answer in [
            Err(object_store::Error::Generic {
                store: "test",
                source: "refused".into(),
            }),
            Ok(body(60)),
        ] {
            let reads = Arc::new(SharedReads::default());
            let file = object();
            let (a, b) = (reads.join(), reads.join());
            let (sent, gate) = (AtomicUsize::new(0), Notify::new());
            let first = a.read(&file, 4..104, || gated(&sent, &gate, answer));
            let second = b.read(&file, 4..104, || async {
                sent.fetch_add(1, Ordering::SeqCst);
                Ok(body(100))
            });
            let open = async {
                tokio::task::yield_now().await;
                gate.notify_waiters();
            };
            let (_, second, ()) = tokio::join!(first, second, open);
            assert_eq!(second.unwrap(), Body::Fetched(body(100)));
            assert_eq!(sent.load(Ordering::SeqCst), 2, "the waiter sent its own");
            assert_eq!(reads.in_flight(), 0);
        }
    }

    #[tokio::test]
    async fn a_waiter_fetches_for_itself_when_the_shared_read_is_dropped() {
        let reads = Arc::new(SharedReads::default());
        let file = object();
        let (a, b) = (reads.join(), reads.join());
        let (sent, gate) = (AtomicUsize::new(0), Notify::new());
        let mut first = Box::pin(a.read(&file, 4..104, || gated(&sent, &gate, Ok(body(100)))));
        // Listed, then stopped (its scan released it unserved).
        assert!(futures::poll!(first.as_mut()).is_pending());
        let second = b.read(&file, 4..104, || async { Ok(body(100)) });
        let stop = async {
            tokio::task::yield_now().await;
            drop(first);
        };
        let (second, ()) = tokio::join!(second, stop);
        assert_eq!(second.unwrap(), Body::Fetched(body(100)));
        assert_eq!(reads.in_flight(), 0);
    }
}
