//! Which byte ranges of which objects are being read, and by which scan:
//! the decisions of read sharing, pure (no locks, no I/O — `super` does
//! those). A scan about to read a range another scan is already reading
//! waits for that read instead of sending its own.

use std::collections::HashMap;
use std::ops::Range;

use object_store::path::Path;

/// Identifies one scan among those sharing reads.
pub(crate) type ScanToken = u64;

/// One version of one object: two scans read the same bytes only if they
/// read the same path of the same store, of the same size and modification
/// time (as their plans listed it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjectKey {
    /// The store's URL (`s3://bucket/`): a path names an object only there.
    pub store: std::sync::Arc<str>,
    pub location: Path,
    pub size: u64,
    /// Microseconds since the epoch.
    pub modified: i64,
}

/// What a scan about to read a range should do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Joined<W> {
    /// Another scan is reading exactly this range: wait for its bytes.
    Wait(W),
    /// Read it; with a ticket, the read is listed so that other scans wait
    /// for it, and its end must be told ([`InFlight::ended`]). Without one,
    /// this scan already reads this range (a hedge, a read served again): it
    /// reads it again, unlisted.
    Send(Option<Ticket>),
}

/// A listed read, to tell its end with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticket {
    object: ObjectKey,
    range: Range<u64>,
    id: u64,
}

/// A listed read: who sends it, and how its bytes reach those who wait.
#[derive(Debug)]
struct Listed<W> {
    owner: ScanToken,
    id: u64,
    waiters: W,
}

/// The reads in flight of every scan sharing reads. `W` is how waiters get
/// the bytes (a shared receiver; anything in the tests).
#[derive(Debug)]
pub(crate) struct InFlight<W> {
    reads: HashMap<(ObjectKey, Range<u64>), Listed<W>>,
    next_id: u64,
}

impl<W> Default for InFlight<W> {
    fn default() -> Self {
        Self {
            reads: HashMap::new(),
            next_id: 0,
        }
    }
}

impl<W: Clone> InFlight<W> {
    /// `scan` is about to read `range` of `object`: wait for another scan's
    /// read of exactly this range, or send its own (listed, with `waiters`
    /// made for those who will wait on it, unless it is already listed as
    /// this scan's).
    ///
    /// Only exact ranges are shared: a read of a wider range would make the
    /// waiter wait for bytes it does not want.
    pub(crate) fn join(
        &mut self,
        scan: ScanToken,
        object: &ObjectKey,
        range: &Range<u64>,
        waiters: impl FnOnce() -> W,
    ) -> Joined<W> {
        let key = (object.clone(), range.clone());
        match self.reads.get(&key) {
            Some(listed) if listed.owner != scan => Joined::Wait(listed.waiters.clone()),
            Some(_) => Joined::Send(None),
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.reads.insert(
                    key,
                    Listed {
                        owner: scan,
                        id,
                        waiters: waiters(),
                    },
                );
                Joined::Send(Some(Ticket {
                    object: object.clone(),
                    range: range.clone(),
                    id,
                }))
            }
        }
    }

    /// The read of `ticket` ended (landed, failed or stopped): later reads
    /// of its range are sent again. Returns how its waiters were reached.
    pub(crate) fn ended(&mut self, ticket: &Ticket) -> Option<W> {
        let key = (ticket.object.clone(), ticket.range.clone());
        match self.reads.get(&key) {
            Some(listed) if listed.id == ticket.id => self.reads.remove(&key).map(|l| l.waiters),
            _ => None,
        }
    }

    /// Reads listed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.reads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, size: u64, modified: i64) -> ObjectKey {
        ObjectKey {
            store: "s3://bucket/".into(),
            location: Path::from(name),
            size,
            modified,
        }
    }

    fn ticket(joined: Joined<u32>) -> Ticket {
        match joined {
            Joined::Send(Some(ticket)) => ticket,
            other => panic!("expected a listed read, got {other:?}"),
        }
    }

    #[test]
    fn a_second_scan_waits_for_the_first_scans_read_of_the_same_range() {
        let mut reads = InFlight::default();
        let file = object("t/a.parquet", 1000, 7);
        let first = ticket(reads.join(1, &file, &(4..400), || 10));
        assert_eq!(reads.join(2, &file, &(4..400), || 20), Joined::Wait(10));
        assert_eq!(reads.join(3, &file, &(4..400), || 30), Joined::Wait(10));
        assert_eq!(reads.ended(&first), Some(10));
        // Ended: the next read of the range is sent, and listed, again.
        let again = ticket(reads.join(2, &file, &(4..400), || 40));
        assert_eq!(reads.join(1, &file, &(4..400), || 50), Joined::Wait(40));
        reads.ended(&again);
        assert_eq!(reads.len(), 0);
    }

    #[test]
    fn only_the_same_range_of_the_same_object_version_is_shared() {
        let mut reads = InFlight::default();
        let file = object("t/a.parquet", 1000, 7);
        let _listed = ticket(reads.join(1, &file, &(4..400), || 10));
        for (other, range) in [
            (object("t/a.parquet", 1000, 7), 4..300),
            (object("t/a.parquet", 1000, 7), 0..400),
            (object("t/b.parquet", 1000, 7), 4..400),
            (object("t/a.parquet", 1001, 7), 4..400),
            (object("t/a.parquet", 1000, 8), 4..400),
            (
                ObjectKey {
                    store: "s3://other/".into(),
                    ..file.clone()
                },
                4..400,
            ),
        ] {
            let joined = reads.join(2, &other, &range, || 20);
            assert!(
                matches!(joined, Joined::Send(Some(_))),
                "{other:?} {range:?}: {joined:?}"
            );
        }
    }

    #[test]
    fn a_scan_never_waits_for_its_own_read() {
        let mut reads = InFlight::default();
        let file = object("t/a.parquet", 1000, 7);
        let first = ticket(reads.join(1, &file, &(4..400), || 10));
        assert_eq!(reads.join(1, &file, &(4..400), || 11), Joined::Send(None));
        assert_eq!(reads.ended(&first), Some(10));
    }

    #[test]
    fn a_stale_ticket_ends_nothing() {
        let mut reads = InFlight::default();
        let file = object("t/a.parquet", 1000, 7);
        let first = ticket(reads.join(1, &file, &(4..400), || 10));
        reads.ended(&first);
        let second = ticket(reads.join(2, &file, &(4..400), || 20));
        assert_eq!(reads.ended(&first), None, "the second read stays listed");
        assert_eq!(reads.join(3, &file, &(4..400), || 30), Joined::Wait(20));
        assert_eq!(reads.ended(&second), Some(20));
    }
}
