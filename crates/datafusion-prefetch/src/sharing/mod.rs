//! Reads shared between scans: when two scans of one runtime read exactly
//! the same bytes of the same object version at the same time — the two
//! scans of `partsupp` in TPC-H q2 and q11, which DataFusion's decorrelated
//! plans read once for the outer query and once for the subquery, or two
//! queries reading one table at once — the second waits for the first's
//! request instead of sending its own. Reads are shared with planning too:
//! a small object `auto`'s footer read-ahead read whole is kept for the scan
//! (the governor holds it, see `kept.rs`), which cuts its ranges from it
//! instead of asking the store again.
//!
//! - `in_flight.rs`: the decisions, pure — which read is listed, who waits;
//! - `kept.rs`: small objects planning read whole, kept for their scans —
//!   pure too;
//! - this module: the waiting, and telling the waiters.
//!
//! A waiter gets the very bytes the store answered the first scan (the same
//! buffer, no copy). If that request fails, is stopped (its scan released
//! it unserved, or was cancelled) or came back short, the waiter sends its
//! own: sharing never fails a read the store would have answered.

mod in_flight;
mod kept;

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{Shared, try_join_all};
use parking_lot::Mutex;

pub(crate) use in_flight::ObjectKey;
use in_flight::{InFlight, Part, ScanToken, Ticket};
pub(crate) use kept::{KEPT_FOR, KEPT_SHARE_DIVISOR, KeptKey, KeptObjects};

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

/// A read's bytes, and how much of them other scans' requests brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub bytes: Bytes,
    /// Other scans' requests waited for.
    pub waited: u64,
    /// Bytes of them in `bytes`.
    pub shared: u64,
    /// Bytes copied to make `bytes` (of parts joined, or of a part of a
    /// wider body, which a slice would keep alive whole).
    pub copied: u64,
}

/// One scan's side of [`SharedReads`].
#[derive(Debug)]
pub(crate) struct ReadSharing {
    reads: Arc<SharedReads>,
    scan: ScanToken,
}

impl ReadSharing {
    /// The bytes of `range` of `object`: what other scans are reading of it
    /// now, waited for, and the rest `fetch`ed (and shared with scans that
    /// ask for it while it is in flight). See [`InFlight::join`] for which
    /// reads are waited for.
    ///
    /// A read of another scan that fails, stops or comes back short is not
    /// shared: this scan fetches that part itself. A part sent that comes
    /// back short (a range past the end of the object, read on demand) ends
    /// the read there: the range is fetched whole, as without sharing.
    pub(crate) async fn read<F, Fut>(
        &self,
        object: &ObjectKey,
        range: Range<u64>,
        fetch: F,
    ) -> object_store::Result<Read>
    where
        F: Fn(Range<u64>) -> Fut,
        Fut: Future<Output = object_store::Result<Bytes>>,
    {
        let mut sender = None;
        let joined = self
            .reads
            .in_flight
            .lock()
            .join(self.scan, object, &range, || {
                let (tx, rx) = oneshot::channel();
                sender = Some(tx);
                rx.shared()
            });
        // Made before anything is awaited: dropped, the listed part is
        // unlisted and its waiters read for themselves.
        let mut listed = joined.parts.iter().find_map(|part| match part {
            Part::Send {
                ticket: Some(ticket),
                ..
            } => Some(Listed {
                reads: &self.reads,
                ticket: Some(ticket.clone()),
                sender: sender.take(),
            }),
            _ => None,
        });
        let fetch = &fetch;
        let parts = joined.parts.into_iter().map(|part| {
            let listed = match &part {
                Part::Send {
                    ticket: Some(_), ..
                } => listed.take(),
                _ => None,
            };
            async move {
                match part {
                    Part::Send { range, .. } => {
                        let bytes = fetch(range.clone()).await?;
                        if let Some(listed) = listed {
                            listed.landed(&bytes);
                        }
                        Ok::<_, object_store::Error>(Piece::sent(range, bytes))
                    }
                    Part::Wait {
                        range,
                        within,
                        waiters,
                    } => match waiters.await {
                        Ok(body) if body.len() as u64 == within.end - within.start => {
                            let at = (range.start - within.start) as usize;
                            let len = (range.end - range.start) as usize;
                            Ok(Piece {
                                whole: range == within,
                                range,
                                bytes: body.slice(at..at + len),
                                shared: true,
                            })
                        }
                        _ => Ok(Piece::sent(range.clone(), fetch(range).await?)),
                    },
                }
            }
        });
        let pieces: Vec<Piece> = try_join_all(parts).await?;
        let waited = pieces.iter().filter(|p| p.shared).count() as u64;
        let shared = pieces
            .iter()
            .filter(|p| p.shared)
            .map(|p| p.bytes.len() as u64)
            .sum();
        match pieces.as_slice() {
            // Exactly this scan's request, or exactly the other scan's body:
            // the same buffer.
            [piece] if !piece.shared || piece.whole => {
                return Ok(Read {
                    bytes: piece.bytes.clone(),
                    waited,
                    shared,
                    copied: 0,
                });
            }
            [.., _] if pieces[..pieces.len() - 1].iter().any(Piece::short) => {
                return Ok(Read {
                    bytes: fetch(range).await?,
                    waited: 0,
                    shared: 0,
                    copied: 0,
                });
            }
            _ => {}
        }
        let mut joined = BytesMut::with_capacity(pieces.iter().map(|p| p.bytes.len()).sum());
        for piece in &pieces {
            joined.extend_from_slice(&piece.bytes);
        }
        Ok(Read {
            copied: joined.len() as u64,
            bytes: joined.freeze(),
            waited,
            shared,
        })
    }
}

/// One part of a read, read.
struct Piece {
    range: Range<u64>,
    bytes: Bytes,
    /// Another scan's request brought it...
    shared: bool,
    /// ... and it is that request's whole body.
    whole: bool,
}

impl Piece {
    fn sent(range: Range<u64>, bytes: Bytes) -> Self {
        Self {
            range,
            bytes,
            shared: false,
            whole: false,
        }
    }

    /// Shorter than its range (past the end of the object).
    fn short(&self) -> bool {
        (self.bytes.len() as u64) < self.range.end - self.range.start
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

    /// The object's bytes in `range`: each byte its offset, wrapped.
    fn bytes_of(range: Range<u64>) -> Bytes {
        range.map(|i| i as u8).collect::<Vec<u8>>().into()
    }

    /// A store's side of a scan: counts what it is asked for, and answers
    /// once `gate` opens (if given) with the object's bytes (or `answer`).
    struct Store {
        asked: Mutex<Vec<Range<u64>>>,
        gate: Option<Notify>,
    }

    impl Store {
        fn new(gated: bool) -> Self {
            Self {
                asked: Mutex::default(),
                gate: gated.then(Notify::new),
            }
        }

        async fn get(
            &self,
            range: Range<u64>,
            answer: Option<object_store::Result<Bytes>>,
        ) -> object_store::Result<Bytes> {
            self.asked.lock().push(range.clone());
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            answer.unwrap_or_else(|| Ok(bytes_of(range)))
        }

        fn open(&self) {
            if let Some(gate) = &self.gate {
                gate.notify_waiters();
            }
        }

        fn asked(&self) -> Vec<Range<u64>> {
            self.asked.lock().clone()
        }
    }

    /// Open `store`'s gate once everything joined has been polled.
    async fn open_later(store: &Store) {
        tokio::task::yield_now().await;
        store.open();
    }

    #[tokio::test]
    async fn a_scan_reading_the_same_range_at_the_same_time_gets_the_first_scans_bytes() {
        let reads = Arc::new(SharedReads::default());
        let (a, b) = (reads.join(), reads.join());
        let (first_store, second_store) = (Store::new(true), Store::new(false));
        let file = object();
        let first = a.read(&file, 4..104, |r| first_store.get(r, None));
        let second = b.read(&file, 4..104, |r| second_store.get(r, None));
        let (first, second, ()) = tokio::join!(first, second, open_later(&first_store));
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!((first.waited, second.waited), (0, 1));
        assert_eq!((second.shared, second.copied), (100, 0));
        assert_eq!(
            first.bytes.as_ptr(),
            second.bytes.as_ptr(),
            "the same buffer"
        );
        assert!(second_store.asked().is_empty(), "one request");
        assert_eq!(reads.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_wider_read_fetches_only_what_the_other_scan_does_not() {
        let reads = Arc::new(SharedReads::default());
        let (a, b) = (reads.join(), reads.join());
        let (first_store, second_store) = (Store::new(true), Store::new(false));
        let file = object();
        let first = a.read(&file, 300..900, |r| first_store.get(r, None));
        let second = b.read(&file, 100..900, |r| second_store.get(r, None));
        let (_, second, ()) = tokio::join!(first, second, open_later(&first_store));
        let second = second.unwrap();
        assert_eq!(second_store.asked(), vec![100..300]);
        assert_eq!(second.bytes, bytes_of(100..900));
        assert_eq!((second.waited, second.shared, second.copied), (1, 600, 800));
    }

    #[tokio::test]
    async fn a_narrower_read_gets_a_copy_of_its_part_of_the_other_scans_body() {
        let reads = Arc::new(SharedReads::default());
        let (a, b) = (reads.join(), reads.join());
        let (first_store, second_store) = (Store::new(true), Store::new(false));
        let file = object();
        let first = a.read(&file, 0..1000, |r| first_store.get(r, None));
        let second = b.read(&file, 100..200, |r| second_store.get(r, None));
        let (first, second, ()) = tokio::join!(first, second, open_later(&first_store));
        let (first, second) = (first.unwrap(), second.unwrap());
        assert!(second_store.asked().is_empty());
        assert_eq!(second.bytes, bytes_of(100..200));
        assert_ne!(second.bytes.as_ptr(), first.bytes[100..].as_ptr(), "a copy");
        assert_eq!((second.waited, second.shared, second.copied), (1, 100, 100));
    }

    #[tokio::test]
    async fn a_waiter_fetches_for_itself_when_the_shared_read_fails_or_is_short() {
        for answer in [
            Err(object_store::Error::Generic {
                store: "test",
                source: "refused".into(),
            }),
            Ok(bytes_of(4..64)),
        ] {
            let reads = Arc::new(SharedReads::default());
            let (a, b) = (reads.join(), reads.join());
            let (first_store, second_store) = (Store::new(true), Store::new(false));
            let file = object();
            let answer = std::sync::Mutex::new(Some(answer));
            let first = a.read(&file, 4..104, |r| {
                first_store.get(r, answer.lock().unwrap().take())
            });
            let second = b.read(&file, 4..104, |r| second_store.get(r, None));
            let (_, second, ()) = tokio::join!(first, second, open_later(&first_store));
            let second = second.unwrap();
            assert_eq!(second.bytes, bytes_of(4..104));
            assert_eq!(second.waited, 0);
            assert_eq!(
                second_store.asked(),
                vec![4..104],
                "the waiter sent its own"
            );
            assert_eq!(reads.in_flight(), 0);
        }
    }

    #[tokio::test]
    async fn a_waiter_fetches_for_itself_when_the_shared_read_is_dropped() {
        let reads = Arc::new(SharedReads::default());
        let (a, b) = (reads.join(), reads.join());
        let (first_store, second_store) = (Store::new(true), Store::new(false));
        let file = object();
        let mut first = Box::pin(a.read(&file, 4..104, |r| first_store.get(r, None)));
        // Listed, then stopped (its scan released it unserved).
        assert!(futures::poll!(first.as_mut()).is_pending());
        let second = b.read(&file, 4..104, |r| second_store.get(r, None));
        let stop = async {
            tokio::task::yield_now().await;
            drop(first);
        };
        let (second, ()) = tokio::join!(second, stop);
        assert_eq!(second.unwrap().bytes, bytes_of(4..104));
        assert_eq!(second_store.asked(), vec![4..104]);
        assert_eq!(reads.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_part_sent_that_comes_back_short_reads_the_range_whole() {
        let reads = Arc::new(SharedReads::default());
        let (a, b) = (reads.join(), reads.join());
        let (first_store, second_store) = (Store::new(true), Store::new(false));
        let file = object();
        // The second scan's own part ends past the object (a demand read
        // of a corrupt footer's range, clamped): the range is read whole.
        let first = a.read(&file, 500..600, |r| first_store.get(r, None));
        let second = b.read(&file, 400..600, |r| {
            let short = (r.start == 400 && r.end == 500).then(|| Ok(bytes_of(400..450)));
            second_store.get(r, short)
        });
        let (_, second, ()) = tokio::join!(first, second, open_later(&first_store));
        let second = second.unwrap();
        assert_eq!(second_store.asked(), vec![400..500, 400..600]);
        assert_eq!(second.bytes, bytes_of(400..600));
        assert_eq!(second.waited, 0);
    }
}
