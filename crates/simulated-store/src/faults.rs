//! Faults and the rules that trigger them (their shared, run-time list is
//! in `fault_rules.rs`).

use std::fmt;
use std::ops::{Bound, Range, RangeBounds};
use std::time::Duration;

use object_store::GetRange;

/// What a [`FaultyStore`](crate::FaultyStore) does to a GET that a
/// [`FaultRule`] selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The request fails at once with an [`InjectedFault`](crate::InjectedFault)
    /// error and never reaches the inner store.
    ///
    /// Whether the error is *transient* (a retry succeeds) or *permanent*
    /// (every retry fails too) is decided by the rule: limit it with
    /// [`FaultRule::times`] or [`FaultRule::once_per_range`] for a transient
    /// error, leave it unlimited for a permanent one.
    Error,
    /// The request never answers: its future stays pending (without ever
    /// waking) until the caller drops it. It never reaches the inner store.
    Stall,
    /// The request answers normally, but only after this extra delay on
    /// tokio's clock (so a paused-clock test can advance past it).
    Delay(Duration),
    /// The response arrives, with [`GetResult::range`](object_store::GetResult)
    /// still advertising the full range, but its body is cut short after
    /// `keep` bytes, ending as [`mode`](TruncateMode) says.
    ///
    /// `keep` is capped at one byte less than the body, so a non-empty body
    /// is always short; a body already no longer than `keep` is cut after
    /// all but its last byte. An empty body cannot be shortened:
    /// [`TruncateMode::EndEarly`] then changes nothing, the other modes
    /// still fail or stall at its end.
    Truncate {
        /// Body bytes delivered before the cut.
        keep: u64,
        /// How the body ends.
        mode: TruncateMode,
    },
    /// Silent corruption: the body has the right length, but `len` bytes
    /// starting `offset` bytes into the body are inverted (XOR `0xFF`), so
    /// each of them is guaranteed to differ from the stored byte.
    ///
    /// `offset` is relative to the start of the returned body (not of the
    /// object) and is capped at its last byte; the flipped run is cut at the
    /// end of the body. `len = 0` delivers the body unchanged.
    Corrupt {
        /// First flipped byte, counted from the start of the body.
        offset: u64,
        /// Number of consecutive bytes flipped.
        len: u64,
    },
    /// Silent corruption of the object's bytes `start..start + len`, wherever
    /// a response carries them: the body has the right length, and the bytes
    /// of that object range it covers are inverted (XOR `0xFF`).
    ///
    /// Unlike [`Corrupt`](Self::Corrupt), which bytes of the file go wrong
    /// does not depend on how the reader cut its requests, so readers that
    /// split and merge their GETs differently (a demand read, a coalesced
    /// read-ahead) meet the same corruption. Combine with
    /// [`FaultRule::overlapping`] so only requests that carry those bytes
    /// count as injected.
    CorruptObject {
        /// First flipped byte, as an object offset.
        start: u64,
        /// Number of consecutive bytes flipped.
        len: u64,
    },
}

impl Fault {
    /// A body cut after `keep` bytes that ends in an error, the way a real
    /// HTTP response that is shorter than its `Content-Length` does.
    pub fn truncate(keep: u64) -> Self {
        Self::Truncate {
            keep,
            mode: TruncateMode::Error,
        }
    }

    /// A body cut after `keep` bytes that ends cleanly (see
    /// [`TruncateMode::EndEarly`]).
    pub fn truncate_silently(keep: u64) -> Self {
        Self::Truncate {
            keep,
            mode: TruncateMode::EndEarly,
        }
    }

    /// A body of the right length whose byte at `offset` (from the start of
    /// the body) is inverted.
    pub fn flip_byte(offset: u64) -> Self {
        Self::Corrupt { offset, len: 1 }
    }

    /// The kind this fault is counted under in
    /// [`FaultStats`](crate::FaultStats).
    pub fn kind(&self) -> FaultKind {
        match self {
            Self::Error => FaultKind::Error,
            Self::Stall => FaultKind::Stall,
            Self::Delay(_) => FaultKind::Delay,
            Self::Truncate { .. } => FaultKind::Truncate,
            Self::Corrupt { .. } | Self::CorruptObject { .. } => FaultKind::Corrupt,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Error => f.write_str("error"),
            Self::Stall => f.write_str("stall"),
            Self::Delay(d) => write!(f, "delay of {d:?}"),
            Self::Truncate { keep, mode } => write!(f, "truncation after {keep} bytes ({mode})"),
            Self::Corrupt { offset, len } => {
                write!(f, "corruption of {len} bytes at body offset {offset}")
            }
            Self::CorruptObject { start, len } => {
                write!(f, "corruption of {len} bytes at object offset {start}")
            }
        }
    }
}

/// How a [`Fault::Truncate`]d body ends once its kept bytes are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TruncateMode {
    /// The body stream yields one error, then ends.
    ///
    /// This is what a real truncated HTTP response looks like to
    /// object_store: hyper fails the body with "end of file before message
    /// length reached" when the connection closes before `Content-Length`
    /// bytes arrived, and object_store's HTTP client passes that error up
    /// through the body stream. [`GetResult::bytes`](object_store::GetResult::bytes),
    /// `get_range` and `get_ranges` therefore return an error.
    Error,
    /// The body stream simply ends early, without an error.
    ///
    /// object_store does **not** check a body against its range:
    /// [`GetResult::bytes`](object_store::GetResult::bytes) and `get_range`
    /// return `Ok` with fewer bytes than requested (the trait's default
    /// `get_ranges` hands out short buffers, or for a range starting past the
    /// cut panics slicing; this store's own `get_ranges` fails there). Only a caller that compares the length with
    /// [`GetResult::range`](object_store::GetResult) notices. Use this to
    /// test that the code under test makes that comparison.
    EndEarly,
    /// The body stream never yields again: the connection hangs mid-body.
    /// It stays pending until the caller drops it.
    Stall,
}

impl fmt::Display for TruncateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "then an error",
            Self::EndEarly => "then a clean end",
            Self::Stall => "then a stall",
        })
    }
}

/// The kinds of [`Fault`], as counted by [`FaultStats`](crate::FaultStats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// [`Fault::Error`].
    Error,
    /// [`Fault::Stall`].
    Stall,
    /// [`Fault::Delay`].
    Delay,
    /// [`Fault::Truncate`], whatever its mode.
    Truncate,
    /// [`Fault::Corrupt`] and [`Fault::CorruptObject`].
    Corrupt,
}

impl FaultKind {
    /// Every kind, in declaration order.
    pub const ALL: [FaultKind; 5] = [
        Self::Error,
        Self::Stall,
        Self::Delay,
        Self::Truncate,
        Self::Corrupt,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Stall => "stall",
            Self::Delay => "delay",
            Self::Truncate => "truncation",
            Self::Corrupt => "corruption",
        })
    }
}

/// How a [`FaultRule`] matches the path of a request.
///
/// Paths are compared with the string form of
/// [`object_store::path::Path`], which has no leading `/`
/// (`"data/file.parquet"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathMatcher {
    /// The whole path equals this string.
    Exact(String),
    /// The path contains this string.
    Contains(String),
    /// The whole path matches this glob pattern: `*` matches any run of
    /// characters, `/` included, and `?` any single character. There is no
    /// escaping and no `[...]` class.
    Glob(String),
}

impl PathMatcher {
    /// Returns `true` if `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => path == p,
            Self::Contains(p) => path.contains(p.as_str()),
            Self::Glob(p) => glob_match(p, path),
        }
    }
}

/// `*` / `?` glob matching with the classic greedy algorithm: on a mismatch,
/// let the most recent `*` absorb one more character and retry.
fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// When a [`FaultyStore`](crate::FaultyStore) injects a [`Fault`].
///
/// A rule starts out matching every GET; each builder method adds a
/// condition, and all conditions must hold:
///
/// * [`path`](Self::path) / [`path_contains`](Self::path_contains) /
///   [`path_glob`](Self::path_glob): the object's path;
/// * [`request`](Self::request) / [`requests`](Self::requests): the
///   store-wide request number. GETs are numbered **from 0** in the order
///   they reach the store's `get_opts` (HEAD requests are not numbered),
///   and numbering never restarts, even when rules change;
/// * [`overlapping`](Self::overlapping): the requested byte range;
/// * [`probability`](Self::probability): a seeded coin flip, drawn only for
///   requests that satisfy the conditions above.
///
/// A request meeting all conditions is a *match*. Of its matches, the rule
/// ignores the first [`skip`](Self::skip) ones and then fires on at most
/// [`times`](Self::times) of them; with [`once_per_range`](Self::once_per_range)
/// it fires at most once per distinct (path, requested range).
///
/// ```
/// use datafusion_prefetch_simstore::{Fault, FaultRule};
///
/// // Fail the third GET of one file, once.
/// let rule = FaultRule::new(Fault::Error)
///     .path("data/file_001.parquet")
///     .skip(2)
///     .times(1)
///     .named("third read of file 1");
/// assert_eq!(rule.fault(), Fault::Error);
/// assert_eq!(rule.label(), Some("third read of file 1"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    pub(crate) fault: Fault,
    pub(crate) label: Option<String>,
    path: Option<PathMatcher>,
    requests: Option<(u64, Option<u64>)>,
    overlapping: Option<Range<u64>>,
    pub(crate) probability: Option<(f64, u64)>,
    pub(crate) skip: u64,
    pub(crate) times: Option<u64>,
    pub(crate) once_per_range: bool,
}

impl FaultRule {
    /// A rule that injects `fault` into every GET.
    pub fn new(fault: Fault) -> Self {
        Self {
            fault,
            label: None,
            path: None,
            requests: None,
            overlapping: None,
            probability: None,
            skip: 0,
            times: None,
            once_per_range: false,
        }
    }

    /// Only requests for exactly this path. Takes a `&str` or an
    /// [`object_store::path::Path`].
    #[must_use]
    pub fn path(self, path: impl AsRef<str>) -> Self {
        self.path_matching(PathMatcher::Exact(path.as_ref().to_string()))
    }

    /// Only requests whose path contains `needle`.
    #[must_use]
    pub fn path_contains(self, needle: impl AsRef<str>) -> Self {
        self.path_matching(PathMatcher::Contains(needle.as_ref().to_string()))
    }

    /// Only requests whose path matches the glob `pattern` (see
    /// [`PathMatcher::Glob`]).
    #[must_use]
    pub fn path_glob(self, pattern: impl AsRef<str>) -> Self {
        self.path_matching(PathMatcher::Glob(pattern.as_ref().to_string()))
    }

    /// Only requests whose path `matcher` accepts (replaces any earlier path
    /// condition).
    #[must_use]
    pub fn path_matching(mut self, matcher: PathMatcher) -> Self {
        self.path = Some(matcher);
        self
    }

    /// Only the GET numbered `n` (counting from 0, store-wide).
    #[must_use]
    pub fn request(self, n: u64) -> Self {
        self.requests(n..=n)
    }

    /// Only GETs whose store-wide number (counting from 0) is in `numbers`,
    /// e.g. `5..`, `..3` or `2..=4`. Combine with
    /// [`FaultRules::next_request`](crate::FaultRules::next_request) for "from now on".
    #[must_use]
    pub fn requests(mut self, numbers: impl RangeBounds<u64>) -> Self {
        let start = match numbers.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match numbers.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        self.requests = Some((start, end));
        self
    }

    /// Only requests whose byte range shares at least one byte with `range`.
    ///
    /// The requested range is used as the caller gave it: a bounded range
    /// as is, an offset range (`GetRange::Offset(o)`) as `o..`, a
    /// whole-object GET as `0..`. A suffix request (`GetRange::Suffix`)
    /// never matches, since where it starts depends on the object's size.
    #[must_use]
    pub fn overlapping(mut self, range: Range<u64>) -> Self {
        self.overlapping = Some(range);
        self
    }

    /// Only a pseudo-random share `p` of the requests that meet the other
    /// conditions, drawn from an RNG seeded with `seed`. The same seed and
    /// the same sequence of candidate requests give the same choices; each
    /// rule has its own RNG, which restarts when the rule is (re)installed.
    ///
    /// # Panics
    ///
    /// If `p` is not within `0.0..=1.0`.
    #[must_use]
    pub fn probability(mut self, p: f64, seed: u64) -> Self {
        assert!(
            (0.0..=1.0).contains(&p),
            "fault probability must be within 0.0..=1.0, got {p}"
        );
        self.probability = Some((p, seed));
        self
    }

    /// Let the first `n` matches through unharmed.
    #[must_use]
    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Fire on at most `k` matches (after the [`skipped`](Self::skip) ones);
    /// afterwards the rule stays installed but never fires. Without it a
    /// rule fires on every match, i.e. its fault is permanent.
    #[must_use]
    pub fn times(mut self, k: u64) -> Self {
        self.times = Some(k);
        self
    }

    /// Shorthand for [`times(1)`](Self::times): the first match fails, a
    /// retry succeeds.
    #[must_use]
    pub fn once(self) -> Self {
        self.times(1)
    }

    /// Fire at most once for each distinct (path, requested range): every
    /// new range is hit, but a retry of the very same request succeeds. A
    /// request already hit is not counted as a match (nor by
    /// [`skip`](Self::skip) and [`times`](Self::times)).
    #[must_use]
    pub fn once_per_range(mut self) -> Self {
        self.once_per_range = true;
        self
    }

    /// Gives the rule a label, reported in
    /// [`FaultRecord`](crate::FaultRecord)s and error messages.
    #[must_use]
    pub fn named(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The fault this rule injects.
    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// The rule's label, if [`named`](Self::named).
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// Whether the deterministic conditions (path, number, range) hold.
    pub(crate) fn selects(&self, request: u64, path: &str, range: Option<&GetRange>) -> bool {
        if let Some(matcher) = &self.path
            && !matcher.matches(path)
        {
            return false;
        }
        if let Some((start, end)) = self.requests
            && (request < start || end.is_some_and(|end| request >= end))
        {
            return false;
        }
        if let Some(wanted) = &self.overlapping {
            let (start, end) = match range {
                None => (0, u64::MAX),
                Some(GetRange::Bounded(r)) => (r.start, r.end),
                Some(GetRange::Offset(o)) => (*o, u64::MAX),
                Some(GetRange::Suffix(_)) => return false,
            };
            if !(start < wanted.end && wanted.start < end && start < end) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault_rules::FaultRules;

    #[test]
    fn glob() {
        assert!(glob_match("data/*.parquet", "data/file_001.parquet"));
        assert!(glob_match("data/*.parquet", "data/sub/file.parquet"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*file_00?.parquet", "x/file_001.parquet"));
        assert!(glob_match("a*b*c", "aXXbYYbc"));
        assert!(!glob_match("data/*.parquet", "data/file.csv"));
        assert!(!glob_match("file_00?.parquet", "file_0012.parquet"));
        assert!(!glob_match("a*b*c", "aXXbYYb"));
        assert!(!glob_match("", "a"));
        assert!(glob_match("exact", "exact"));
    }

    fn fires(rules: &FaultRules, path: &str, range: Option<GetRange>) -> Option<usize> {
        rules
            .decide(path, range.as_ref())
            .injection
            .map(|(index, _, _)| index)
    }

    #[test]
    fn overlap() {
        let rules = FaultRules::new();
        rules.push(FaultRule::new(Fault::Error).overlapping(100..200));
        assert_eq!(fires(&rules, "a", Some((50..100).into())), None);
        assert_eq!(fires(&rules, "a", Some((50..101).into())), Some(0));
        assert_eq!(fires(&rules, "a", Some((199..300).into())), Some(0));
        assert_eq!(fires(&rules, "a", Some((200..300).into())), None);
        assert_eq!(fires(&rules, "a", Some((120..130).into())), Some(0));
        assert_eq!(fires(&rules, "a", Some((0..1000).into())), Some(0));
        assert_eq!(fires(&rules, "a", None), Some(0));
        assert_eq!(fires(&rules, "a", Some(GetRange::Offset(150))), Some(0));
        assert_eq!(fires(&rules, "a", Some(GetRange::Offset(200))), None);
        assert_eq!(fires(&rules, "a", Some(GetRange::Suffix(1000))), None);
    }

    #[test]
    fn request_numbers_and_bounds() {
        let rules = FaultRules::new();
        rules.push(FaultRule::new(Fault::Error).requests(2..4));
        rules.push(FaultRule::new(Fault::Stall).requests(6..));
        let fired: Vec<_> = (0..8).map(|_| fires(&rules, "a", None)).collect();
        assert_eq!(
            fired,
            [None, None, Some(0), Some(0), None, None, Some(1), Some(1)]
        );
        assert_eq!(rules.next_request(), 8);
        assert_eq!(rules.fired(0), Some(2));
        assert_eq!(rules.fired(2), None);
    }

    #[test]
    fn skip_times_and_priority() {
        let rules = FaultRules::new();
        rules.set([
            FaultRule::new(Fault::Error).path("x").skip(1).times(2),
            FaultRule::new(Fault::Stall).path_contains("x").times(1),
        ]);
        // Request 0 is skipped by rule 0, so rule 1 fires on it; requests 1
        // and 2 go to rule 0; rule 1 is then exhausted too.
        let fired: Vec<_> = (0..5).map(|_| fires(&rules, "x", None)).collect();
        assert_eq!(fired, [Some(1), Some(0), Some(0), None, None]);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules.remove(0).map(|r| r.fault()), Some(Fault::Error));
        assert_eq!(rules.remove(5), None);
        rules.insert(0, FaultRule::new(Fault::Delay(Duration::from_secs(1))));
        assert_eq!(
            rules.rules()[0].fault(),
            Fault::Delay(Duration::from_secs(1))
        );
        rules.clear();
        assert!(rules.is_empty());
        assert_eq!(fires(&rules, "x", None), None);
    }

    #[test]
    fn once_per_range_fires_once_per_distinct_range() {
        let rules = FaultRules::new();
        rules.push(FaultRule::new(Fault::Error).once_per_range());
        let a = Some(GetRange::from(0..10));
        let b = Some(GetRange::from(10..20));
        assert_eq!(fires(&rules, "x", a.clone()), Some(0));
        assert_eq!(fires(&rules, "x", a.clone()), None);
        assert_eq!(fires(&rules, "y", a.clone()), Some(0));
        assert_eq!(fires(&rules, "x", b.clone()), Some(0));
        assert_eq!(fires(&rules, "x", b), None);
        assert_eq!(fires(&rules, "x", a), None);
    }

    #[test]
    #[should_panic(expected = "within 0.0..=1.0")]
    fn probability_out_of_range_is_rejected() {
        let _ = FaultRule::new(Fault::Error).probability(1.5, 0);
    }
}
