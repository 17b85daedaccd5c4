//! How many requests one store gets at once under `auto`: a window that
//! starts at [`INITIAL_WINDOW`] and doubles with every window of clean
//! answers until the store first throttles (TCP's slow start: a scan's
//! first wave does not send every request at a store that may throttle
//! before a single answer has told), then halves when the store throttles
//! and grows back by about one request per window of clean answers (AIMD,
//! as TCP paces a link); and how many of those may be hedges. Pure: it
//! counts requests and reads the answers' first-byte times it is handed;
//! the async gate in front of the store waits on it.
//!
//! Through object_store's HTTP client a throttled request is not an error:
//! the client retries a `503 SlowDown` after a backoff of at least 100 ms,
//! so the answer only comes late. Where the store's client reports each
//! attempt and each `503` as it comes (the attempt counting of
//! [`crate::attempts`]), the window is cut when [`CUT_AFTER`] of the last
//! [`EVIDENCE`] answers were refusals, and a late answer is no evidence: it
//! is the store's tail, or this process too busy to hear the answer on
//! time (many queries decoding at once), and a store that never throttled
//! is not paced as if it had. Where the client does not report, lateness is
//! the only sign: an answer is *slow* when its first byte came [`SLOW_BY`]
//! later than the store's quick answers (the quarter of recent answers that
//! came first), and since a store's ordinary tail is slow now and then, the
//! window is cut only when [`SLOW_CUT_AFTER`] of the last [`EVIDENCE`]
//! answers were slow. A client that gave up on `503`s cuts it at once.
//! Answers to requests sent before a cut say nothing about the window after
//! it and are not counted as evidence.
//!
//! From a cut, or a refusal heard, until [`CALM_AFTER`] clean answers the
//! store is *throttled*: no hedge is sent, since at a store that
//! refuses requests a hedge spends what the store is short of (a hedge
//! admitted beside a request the store also admits costs a second request
//! of the store's rate, and the wall time of whatever waits behind it). A
//! store at its rate refuses now and then without ever refusing enough at
//! once for a cut, so a refusal alone starts a spell. Nor is a request the
//! store refused ever hedged: it is slow because its client waits out a
//! backoff before a retry the store will count.
//!
//! Where the store's client reports each `503` as it comes (the attempt
//! counting of [`crate::attempts`]), a request refused is evidence at once,
//! a round trip after it was sent, rather than when its retry answers late:
//! in a slow start the window would otherwise double several times over
//! during the client's backoff. Each request counts once, refused or slow.
//!
//! A cut also withdraws the reads ahead in flight beyond the new window
//! that have not answered yet: a throttled request stays in flight through
//! the client's retries, each one more request the store refuses, so the
//! requests a window sent before the store throttled would go on provoking
//! `503`s long after the window was cut. Their holders drop them (a request
//! waiting out a backoff costs the store nothing to drop) and send them
//! again when the window has room. A refused request whose retry is on the
//! wire is not withdrawn until it is refused again: the store may have
//! admitted that attempt, and dropping it would waste a request of the
//! store's rate (and bill one).

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use super::outcome::Outcome;

/// How much later than the store's quick answers a slow answer came:
/// object_store's first wait before retrying a `503`.
pub(crate) const SLOW_BY: Duration = Duration::from_millis(100);

/// Requests in flight to a store before any has answered: a first wave
/// that a store admitting S3's 5,500 a second takes in its stride, and
/// that doubles every round trip while the answers are clean.
pub(crate) const INITIAL_WINDOW: u32 = 32;

/// Answers kept as evidence of throttling.
pub(crate) const EVIDENCE: usize = 16;

/// Refusals among the last [`EVIDENCE`] answers that cut the window: a
/// quarter.
pub(crate) const CUT_AFTER: usize = 4;

/// Slow answers (or refusals) among the last [`EVIDENCE`] that cut the
/// window where the store's client does not report refusals: half. S3's
/// tail puts about one answer in eleven [`SLOW_BY`] above the store's quick
/// ones when it does not throttle (P90 110 ms against a quick quartile of
/// 17 ms), so a quarter of 16 comes slow by chance about once every 200
/// answers — a cut every few hundred requests to a store that never
/// throttled — and half of 16 about once in 40,000 (by the binomial; none
/// in 300,000 draws of the simulated store's `s3` model replayed through
/// this rule); a store that refuses a third of what it is sent still
/// reaches half within a few windows.
pub(crate) const SLOW_CUT_AFTER: usize = 8;

/// First-byte times kept to tell the store's quick answers.
const LATENCIES: usize = 32;

/// Clean answers after a cut or a refusal before hedging resumes.
pub(crate) const CALM_AFTER: u32 = 32;

/// A request the window let out; hand it back with its [`Outcome`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket is handed back when its request ends"]
pub(crate) struct Ticket {
    seq: u64,
    kind: Kind,
}

impl Ticket {
    /// The request's number, for [`RequestWindow::refused`].
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }
}

/// What a request is to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Waited for room; may be withdrawn by a cut.
    ReadAhead,
    /// A read a decoder waits on: sent at once, never withdrawn.
    Demand,
    /// A second request beside a slow one.
    Hedge,
}

/// What made the window cut: the evidence that tipped it, or a client
/// that gave up on `503`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// Answered in the store's usual time.
    Clean,
    /// Answered [`SLOW_BY`] later than the store's quick answers.
    Slow,
    /// Refused (`503`), as its client reported.
    Refused,
}

/// What a window has done since it was made, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowCounts {
    /// The highest the limit has been.
    pub peak_limit: u32,
    /// Cuts tipped by slow answers.
    pub cuts_on_slow_answers: u64,
    /// Cuts tipped by refusals the client reported.
    pub cuts_on_refusals: u64,
    /// Cuts because a client gave up on `503`s or `429`s.
    pub cuts_on_give_ups: u64,
    /// Hedges sent.
    pub hedges: u64,
}

/// The requests in flight to one store, and how many may be.
#[derive(Debug)]
pub(crate) struct RequestWindow {
    /// Requests allowed in flight: grown by one per clean answer until the
    /// first cut (doubling per window), by `1 / limit` after, which is why
    /// it is fractional.
    limit: f64,
    max: u32,
    in_flight: u32,
    hedges_in_flight: u32,
    next_seq: u64,
    /// Answers to requests numbered from here on count as evidence.
    evidence_from: u64,
    /// What each of the last answers said.
    evidence: VecDeque<Evidence>,
    latencies: VecDeque<Duration>,
    cuts: u64,
    /// Clean answers since the last cut or refusal; `None` before either.
    clean_since_throttling: Option<u32>,
    /// Reads ahead in flight the last cut asks to withdraw, still to be
    /// claimed by their holders.
    withdrawals: u32,
    /// Reads ahead withdrawn.
    withdrawn: u64,
    /// Requests in flight the store refused: counted as evidence already
    /// (if sent since the last cut), and withdrawable.
    refused: HashSet<u64>,
    /// Refused requests whose client has sent a retry, not yet answered:
    /// on the wire again, perhaps admitted, so not withdrawn.
    retrying: HashSet<u64>,
    /// Whether the store's client reports refusals ([`Self::refused`]).
    hears_refusals: bool,
    /// Whether the store's client reports its attempts
    /// ([`Self::attempt_sent`]), and so its refusals: then a late answer is
    /// no evidence.
    hears_attempts: bool,
    counts: WindowCounts,
}

impl RequestWindow {
    /// A window of at most `max` requests (at least 1), starting at
    /// [`INITIAL_WINDOW`] or `max` if lower.
    pub(crate) fn new(max: u32) -> Self {
        let max = max.max(1);
        let limit = INITIAL_WINDOW.min(max);
        Self {
            limit: f64::from(limit),
            max,
            in_flight: 0,
            hedges_in_flight: 0,
            next_seq: 0,
            evidence_from: 0,
            evidence: VecDeque::with_capacity(EVIDENCE),
            latencies: VecDeque::with_capacity(LATENCIES),
            cuts: 0,
            clean_since_throttling: None,
            withdrawals: 0,
            withdrawn: 0,
            refused: HashSet::new(),
            retrying: HashSet::new(),
            hears_refusals: false,
            hears_attempts: false,
            counts: WindowCounts {
                peak_limit: limit,
                ..WindowCounts::default()
            },
        }
    }

    /// Requests allowed in flight now.
    pub(crate) fn limit(&self) -> u32 {
        // Truncation intended: the window admits whole requests.
        (self.limit as u32).clamp(1, self.max)
    }

    /// Requests in flight, hedges included.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Hedges in flight.
    pub(crate) fn hedges_in_flight(&self) -> u32 {
        self.hedges_in_flight
    }

    /// Times the window was cut.
    pub(crate) fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Reads ahead withdrawn by cuts.
    pub(crate) fn withdrawn(&self) -> u64 {
        self.withdrawn
    }

    /// What the window has done since it was made.
    pub(crate) fn counts(&self) -> WindowCounts {
        self.counts
    }

    /// Whether the store throttled recently: from a cut or a refusal until
    /// [`CALM_AFTER`] clean answers. No hedges are sent meanwhile.
    pub(crate) fn throttled(&self) -> bool {
        self.clean_since_throttling
            .is_some_and(|clean| clean < CALM_AFTER)
    }

    /// A request, if the window has room for it.
    pub(crate) fn try_send(&mut self) -> Option<Ticket> {
        (self.in_flight < self.limit()).then(|| self.send(Kind::ReadAhead))
    }

    /// A request that does not wait for room (a read a decoder waits on);
    /// it counts in flight all the same.
    pub(crate) fn send_anyway(&mut self) -> Ticket {
        self.send(Kind::Demand)
    }

    /// A hedge of a request in flight (numbered `of`, where known), if the
    /// window has room, the store has not throttled recently, the store did
    /// not refuse that request, and hedges would stay within `share` of the
    /// other requests in flight (one hedge is always allowed).
    pub(crate) fn try_hedge(&mut self, share: f64, of: Option<u64>) -> Option<Ticket> {
        let requests = self.in_flight - self.hedges_in_flight;
        // Truncation intended: whole hedges.
        let cap = ((share * f64::from(requests)) as u32).max(1);
        let room = self.in_flight < self.limit() && self.hedges_in_flight < cap;
        let refused = of.is_some_and(|seq| self.refused.contains(&seq));
        (room && !self.throttled() && !refused).then(|| self.send(Kind::Hedge))
    }

    fn send(&mut self, kind: Kind) -> Ticket {
        self.in_flight += 1;
        self.hedges_in_flight += u32::from(kind == Kind::Hedge);
        self.counts.hedges += u64::from(kind == Kind::Hedge);
        let seq = self.next_seq;
        self.next_seq += 1;
        Ticket { seq, kind }
    }

    /// Withdraw the request of `ticket` if the last cut asks for one more
    /// withdrawal and it is a read ahead — one the store refused and whose
    /// client waits out a backoff, where the client reports refusals and
    /// retries (any other may be on an admitted attempt, which dropping
    /// would waste): it then ends with no evidence, and its holder drops it
    /// and sends it again once there is room. Otherwise the ticket is
    /// handed back.
    pub(crate) fn try_withdraw(&mut self, ticket: Ticket) -> Result<(), Ticket> {
        self.withdrawals = self
            .withdrawals
            .min(self.in_flight.saturating_sub(self.limit()));
        let waiting_out_a_refusal = !self.hears_refusals
            || (self.refused.contains(&ticket.seq) && !self.retrying.contains(&ticket.seq));
        if ticket.kind != Kind::ReadAhead || self.withdrawals == 0 || !waiting_out_a_refusal {
            return Err(ticket);
        }
        self.withdrawals -= 1;
        self.withdrawn += 1;
        self.in_flight -= 1;
        self.refused.remove(&ticket.seq);
        Ok(())
    }

    /// The client of the request numbered `seq` sent an attempt of it: if
    /// the store refused it before, that is a retry, on the wire until it is
    /// answered or refused again.
    pub(crate) fn attempt_sent(&mut self, seq: u64) {
        self.hears_attempts = true;
        if self.refused.contains(&seq) {
            self.retrying.insert(seq);
        }
    }

    /// Whether the last cut asks reads ahead in flight to withdraw.
    pub(crate) fn withdrawing(&self) -> bool {
        self.withdrawals > 0
    }

    /// The request numbered `seq`, in flight, was answered `503` (its
    /// client retries it): slow evidence now, once per request, unless it
    /// was sent before the last cut; a read ahead a cut may withdraw, and
    /// not to be hedged; and the store is throttled again.
    pub(crate) fn refused(&mut self, seq: u64) {
        self.hears_refusals = true;
        if seq >= self.next_seq {
            return;
        }
        self.clean_since_throttling = Some(0);
        self.retrying.remove(&seq);
        if self.refused.insert(seq) && seq >= self.evidence_from {
            self.evidence(Evidence::Refused);
        }
    }

    /// A request ended. Returns whether it answered slowly while the store
    /// throttles: then its time is the client's retries, not the store's
    /// round trip, and says nothing to `auto`'s tuner.
    pub(crate) fn ended(&mut self, ticket: Ticket, outcome: Outcome) -> bool {
        self.in_flight -= 1;
        self.hedges_in_flight -= u32::from(ticket.kind == Kind::Hedge);
        let refused = self.refused.remove(&ticket.seq);
        self.retrying.remove(&ticket.seq);
        let slow = match outcome {
            Outcome::Answered(first_byte) => {
                let slow = self
                    .quick()
                    .is_some_and(|quick| first_byte >= quick + SLOW_BY);
                if self.latencies.len() == LATENCIES {
                    self.latencies.pop_front();
                }
                self.latencies.push_back(first_byte);
                slow
            }
            Outcome::GaveUp => {
                if ticket.seq >= self.evidence_from {
                    self.counts.cuts_on_give_ups += 1;
                    self.cut();
                }
                return false;
            }
            Outcome::NoAnswer => return false,
        };
        // Counted when it was refused (a cut since then left it out).
        if refused || ticket.seq < self.evidence_from {
            return refused || (slow && self.throttled());
        }
        // A client that reports its refusals reported this one's, if any.
        self.evidence(if slow && !self.hears_attempts {
            Evidence::Slow
        } else {
            Evidence::Clean
        });
        slow && self.throttled()
    }

    /// One more answer of evidence: a slow one may cut the window, a clean
    /// one grows it.
    fn evidence(&mut self, answer: Evidence) {
        if self.evidence.len() == EVIDENCE {
            self.evidence.pop_front();
        }
        self.evidence.push_back(answer);
        if answer != Evidence::Clean {
            let count = |kind: Evidence| self.evidence.iter().filter(|e| **e == kind).count();
            let refused = count(Evidence::Refused);
            if refused >= CUT_AFTER {
                self.counts.cuts_on_refusals += 1;
                self.cut();
            } else if refused + count(Evidence::Slow) >= SLOW_CUT_AFTER {
                self.counts.cuts_on_slow_answers += 1;
                self.cut();
            }
        } else {
            let growth = if self.cuts == 0 {
                1.0
            } else {
                1.0 / self.limit
            };
            self.limit = (self.limit + growth).min(f64::from(self.max));
            self.counts.peak_limit = self.counts.peak_limit.max(self.limit());
            if let Some(clean) = &mut self.clean_since_throttling {
                *clean = clean.saturating_add(1);
            }
        }
    }

    /// Halves what was in flight (not a limit far above it, which a cut
    /// would not bring down to where the store throttled), asks the reads
    /// ahead beyond the new limit to withdraw, and starts the evidence
    /// afresh with the requests sent from now on.
    fn cut(&mut self) {
        let flying = self.limit.min(f64::from(self.in_flight + 1));
        self.limit = (flying / 2.0).max(1.0);
        self.withdrawals = self.in_flight.saturating_sub(self.limit());
        self.evidence_from = self.next_seq;
        self.evidence.clear();
        self.cuts += 1;
        self.clean_since_throttling = Some(0);
    }

    /// The first byte of the store's quick answers: the lower quartile of
    /// recent ones; `None` until there are a few.
    fn quick(&self) -> Option<Duration> {
        if self.latencies.len() < CUT_AFTER {
            return None;
        }
        let mut sorted: Vec<Duration> = self.latencies.iter().copied().collect();
        sorted.sort_unstable();
        Some(sorted[sorted.len() / 4])
    }
}

#[cfg(test)]
mod tests;
