//! Which byte ranges of which objects are being read, and by which scan:
//! the decisions of read sharing, pure (no locks, no I/O — `super` does
//! those). A scan about to read a range other scans are already reading
//! waits for their reads instead of sending its own, for as much of the
//! range as they cover.

use std::collections::{BTreeMap, HashMap};
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

/// How many bytes beyond what it wants a scan waits for: another scan's
/// read that covers part of a range is waited for only if it reads at most
/// this much that the waiter does not want. At 100 MiB/s per connection
/// that is 10 ms of transfer, well under one S3 round trip, and the read
/// waited for is already on its way.
pub(crate) const SHARE_SLACK_BYTES: u64 = 1024 * 1024;

/// How a scan reads a range: the parts other scans are reading now, waited
/// for, and the rest, sent. Together the parts are the range, in order, and
/// at most one of them is sent (so sharing never turns one request into
/// two).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Joined<W> {
    pub parts: Vec<Part<W>>,
}

/// One part of a [`Joined`] range.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Part<W> {
    /// `range` lies in `within`, which another scan is reading: wait for
    /// its bytes.
    Wait {
        range: Range<u64>,
        within: Range<u64>,
        waiters: W,
    },
    /// Read `range`; with a ticket, the read is listed so that other scans
    /// wait for it, and its end must be told ([`InFlight::ended`]). Without
    /// one, this scan already reads this range (a hedge, a read served
    /// again): it reads it again, unlisted.
    Send {
        range: Range<u64>,
        ticket: Option<Ticket>,
    },
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
    reads: HashMap<ObjectKey, BTreeMap<(u64, u64), Listed<W>>>,
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
    /// `scan` is about to read `range` of `object`: which parts of it to wait
    /// for (other scans' reads in flight that cover them, reading at most
    /// [`SHARE_SLACK_BYTES`] it does not want), and which one to send
    /// (listed, with `waiters` made for those who will wait on it, unless
    /// this scan lists the same range already). When waiting for what others
    /// read would leave more than one part to send, the range is sent whole.
    pub(crate) fn join(
        &mut self,
        scan: ScanToken,
        object: &ObjectKey,
        range: &Range<u64>,
        waiters: impl FnOnce() -> W,
    ) -> Joined<W> {
        let reads = self.reads.entry(object.clone()).or_default();
        let mut parts = Vec::new();
        let mut cursor = range.start;
        let mut gaps = 0;
        for (&(start, end), listed) in reads.iter() {
            let within = start..end;
            if within.end <= cursor || cursor >= range.end {
                continue;
            }
            if within.start >= range.end {
                break;
            }
            let wanted = within.end.min(range.end) - within.start.max(range.start);
            let unwanted = (within.end - within.start) - wanted;
            if listed.owner == scan || unwanted > SHARE_SLACK_BYTES {
                continue;
            }
            if within.start > cursor {
                gaps += 1;
                parts.push(Part::Send {
                    range: cursor..within.start,
                    ticket: None,
                });
                cursor = within.start;
            }
            let end = within.end.min(range.end);
            parts.push(Part::Wait {
                range: cursor..end,
                within,
                waiters: listed.waiters.clone(),
            });
            cursor = end;
        }
        if cursor < range.end {
            gaps += 1;
            parts.push(Part::Send {
                range: cursor..range.end,
                ticket: None,
            });
        }
        if gaps > 1 {
            parts = vec![Part::Send {
                range: range.clone(),
                ticket: None,
            }];
        }
        // The part sent, if any, is listed for others (unless this scan
        // lists it already).
        for part in &mut parts {
            if let Part::Send { range, ticket } = part
                && !reads.contains_key(&(range.start, range.end))
            {
                let id = self.next_id;
                self.next_id += 1;
                reads.insert(
                    (range.start, range.end),
                    Listed {
                        owner: scan,
                        id,
                        waiters: waiters(),
                    },
                );
                *ticket = Some(Ticket {
                    object: object.clone(),
                    range: range.clone(),
                    id,
                });
                break;
            }
        }
        if reads.is_empty() {
            self.reads.remove(object);
        }
        Joined { parts }
    }

    /// The read of `ticket` ended (landed, failed or stopped): later reads
    /// of its range are sent again. Returns how its waiters were reached.
    pub(crate) fn ended(&mut self, ticket: &Ticket) -> Option<W> {
        let reads = self.reads.get_mut(&ticket.object)?;
        let key = (ticket.range.start, ticket.range.end);
        let waiters = match reads.get(&key) {
            Some(listed) if listed.id == ticket.id => reads.remove(&key).map(|l| l.waiters),
            _ => None,
        };
        if reads.is_empty() {
            self.reads.remove(&ticket.object);
        }
        waiters
    }

    /// Reads listed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.reads.values().map(BTreeMap::len).sum()
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

    fn file() -> ObjectKey {
        object("t/a.parquet", 10 << 20, 7)
    }

    /// `joined` as (part, range) pairs: `send` (listed), `again` (sent
    /// unlisted) or `wait:<read waited for>`.
    fn shape(joined: &Joined<u32>) -> Vec<(String, Range<u64>)> {
        joined
            .parts
            .iter()
            .map(|part| match part {
                Part::Send {
                    range,
                    ticket: Some(_),
                } => ("send".to_string(), range.clone()),
                Part::Send {
                    range,
                    ticket: None,
                } => ("again".to_string(), range.clone()),
                Part::Wait { range, within, .. } => (
                    format!("wait:{}..{}", within.start, within.end),
                    range.clone(),
                ),
            })
            .collect()
    }

    fn ticket(joined: Joined<u32>) -> Ticket {
        joined
            .parts
            .into_iter()
            .find_map(|part| match part {
                Part::Send { ticket, .. } => ticket,
                Part::Wait { .. } => None,
            })
            .expect("a listed read")
    }

    fn parts(list: &[(&str, Range<u64>)]) -> Vec<(String, Range<u64>)> {
        list.iter()
            .map(|(s, r)| (s.to_string(), r.clone()))
            .collect()
    }

    #[test]
    fn a_second_scan_waits_for_the_first_scans_read_of_the_same_range() {
        let mut reads = InFlight::default();
        let first = ticket(reads.join(1, &file(), &(4..400), || 10));
        let second = reads.join(2, &file(), &(4..400), || 20);
        assert_eq!(shape(&second), parts(&[("wait:4..400", 4..400)]));
        assert!(matches!(second.parts[0], Part::Wait { waiters: 10, .. }));
        assert_eq!(
            shape(&reads.join(3, &file(), &(4..400), || 30)),
            shape(&second)
        );
        assert_eq!(reads.ended(&first), Some(10));
        // Ended: the next read of the range is sent, and listed, again.
        let again = ticket(reads.join(2, &file(), &(4..400), || 40));
        assert_eq!(
            shape(&reads.join(1, &file(), &(4..400), || 50)),
            parts(&[("wait:4..400", 4..400)])
        );
        reads.ended(&again);
        assert_eq!(reads.len(), 0);
    }

    #[test]
    fn a_wider_read_sends_only_what_no_other_scan_is_reading() {
        // TPC-H q11: the subquery's scan of partsupp reads three columns,
        // the outer query's four, the first of them ahead of the three.
        let mut reads = InFlight::default();
        let _subquery = ticket(reads.join(1, &file(), &(1_936_500..6_961_485), || 10));
        let outer = reads.join(2, &file(), &(4..6_961_485), || 20);
        assert_eq!(
            shape(&outer),
            parts(&[
                ("send", 4..1_936_500),
                ("wait:1936500..6961485", 1_936_500..6_961_485)
            ])
        );
        // The part sent is listed for a third.
        assert_eq!(
            shape(&reads.join(3, &file(), &(4..1_936_500), || 30)),
            parts(&[("wait:4..1936500", 4..1_936_500)])
        );
    }

    #[test]
    fn a_narrower_read_waits_only_for_a_read_with_little_it_does_not_want() {
        // TPC-H q2: the outer query reads seven columns of supplier, the
        // subquery two of them.
        let mut reads = InFlight::default();
        let _outer = ticket(reads.join(1, &file(), &(4..899_497), || 10));
        for narrow in [4..57_619, 430_606..437_030] {
            assert_eq!(
                shape(&reads.join(2, &file(), &narrow, || 20)),
                parts(&[("wait:4..899497", narrow.clone())])
            );
        }
        let wide = 1_000_000..(1_000_000 + SHARE_SLACK_BYTES + 101);
        let _wide = ticket(reads.join(1, &file(), &wide, || 11));
        assert_eq!(
            shape(&reads.join(2, &file(), &(1_000_000..1_000_100), || 21)),
            parts(&[("send", 1_000_000..1_000_100)]),
            "one byte more than the slack"
        );
    }

    #[test]
    fn a_range_is_sent_whole_rather_than_as_two_requests() {
        let mut reads = InFlight::default();
        let _middle = ticket(reads.join(1, &file(), &(100..200), || 10));
        assert_eq!(
            shape(&reads.join(2, &file(), &(0..300), || 20)),
            parts(&[("send", 0..300)])
        );
        // Reads that cover it from both ends leave one part to send.
        let mut reads = InFlight::default();
        let _head = ticket(reads.join(1, &file(), &(0..100), || 10));
        let _tail = ticket(reads.join(3, &file(), &(200..300), || 30));
        assert_eq!(
            shape(&reads.join(2, &file(), &(0..300), || 20)),
            parts(&[
                ("wait:0..100", 0..100),
                ("send", 100..200),
                ("wait:200..300", 200..300)
            ])
        );
    }

    #[test]
    fn only_reads_of_the_same_object_version_are_shared() {
        let mut reads = InFlight::default();
        let _listed = ticket(reads.join(1, &file(), &(4..400), || 10));
        for other in [
            object("t/b.parquet", 10 << 20, 7),
            object("t/a.parquet", (10 << 20) + 1, 7),
            object("t/a.parquet", 10 << 20, 8),
            ObjectKey {
                store: "s3://other/".into(),
                ..file()
            },
        ] {
            assert_eq!(
                shape(&reads.join(2, &other, &(4..400), || 20)),
                parts(&[("send", 4..400)]),
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_scan_never_waits_for_its_own_read() {
        let mut reads = InFlight::default();
        let first = ticket(reads.join(1, &file(), &(4..400), || 10));
        assert_eq!(
            shape(&reads.join(1, &file(), &(4..400), || 11)),
            parts(&[("again", 4..400)])
        );
        assert_eq!(
            shape(&reads.join(1, &file(), &(4..200), || 12)),
            parts(&[("send", 4..200)])
        );
        assert_eq!(reads.ended(&first), Some(10));
    }

    #[test]
    fn a_stale_ticket_ends_nothing() {
        let mut reads = InFlight::default();
        let first = ticket(reads.join(1, &file(), &(4..400), || 10));
        reads.ended(&first);
        let second = ticket(reads.join(2, &file(), &(4..400), || 20));
        assert_eq!(reads.ended(&first), None, "the second read stays listed");
        assert!(matches!(
            reads.join(3, &file(), &(4..400), || 30).parts[..],
            [Part::Wait { waiters: 20, .. }]
        ));
        assert_eq!(reads.ended(&second), Some(20));
        assert_eq!(reads.len(), 0);
    }
}
