//! The door every `auto` request to a store goes through: a
//! [`RequestWindow`] shared by every scan of a runtime that reads the
//! store, and the waiting for room in it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::futures::TaskLocalFuture;

use super::outcome::Outcome;
use super::window::{RequestWindow, Ticket, WindowCounts};

/// Requests one store may have in flight from one runtime's `auto` scans
/// before it has throttled: high enough that it never binds a store that
/// does not throttle (128 connections at S3's round trips serve ~4,000
/// requests a second), and a start the window halves from when one does.
pub(crate) const MAX_REQUESTS_IN_FLIGHT: u32 = 1024;

/// A store's window and its waiters.
#[derive(Debug)]
pub(crate) struct RequestGate {
    window: Mutex<RequestWindow>,
    room: Notify,
    /// Woken by a cut that withdraws reads ahead.
    withdrawing: Notify,
    waits: WaitCounts,
}

/// How long reads ahead waited for room, summed (microseconds).
#[derive(Debug, Default)]
struct WaitCounts {
    /// Reads ahead that found no room at first.
    queued: AtomicU64,
    queued_micros: AtomicU64,
    /// The part of that wait after a decoder came to need the read.
    wanted_micros: AtomicU64,
    /// Reads ahead sent without waiting for room because a decoder waited
    /// on them.
    hurried: AtomicU64,
}

/// A read ahead a decoder may come to wait on: told when it does
/// ([`Self::want`]), it stops waiting for room and goes out at once, as a
/// demand read would.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    since: OnceLock<tokio::time::Instant>,
    told: Notify,
}

impl Wanted {
    /// A decoder waits on the read now.
    pub(crate) fn want(&self) {
        if self.since.set(tokio::time::Instant::now()).is_ok() {
            self.told.notify_waiters();
        }
    }

    fn since(&self) -> Option<tokio::time::Instant> {
        self.since.get().copied()
    }

    /// Resolves once a decoder waits on the read.
    pub(crate) async fn wanted(&self) {
        loop {
            let told = self.told.notified();
            tokio::pin!(told);
            // Registered before looking, so a want between the look and the
            // wait still wakes this one.
            told.as_mut().enable();
            if self.since().is_some() {
                return;
            }
            told.await;
        }
    }
}

impl Default for RequestGate {
    fn default() -> Self {
        Self::new(MAX_REQUESTS_IN_FLIGHT)
    }
}

impl RequestGate {
    pub(crate) fn new(max: u32) -> Self {
        Self {
            window: Mutex::new(RequestWindow::new(max)),
            room: Notify::new(),
            withdrawing: Notify::new(),
            waits: WaitCounts::default(),
        }
    }

    /// A request, once the window has room for it. Dropping the future
    /// while it waits holds nothing.
    #[cfg(test)]
    pub(crate) async fn send(self: &Arc<Self>) -> Permit {
        self.send_wanted(None).await
    }

    /// A request once the window has room, its wait counted — unless a decoder waits on the
    /// read (`wanted`): then it goes out at once, as a demand read would,
    /// whatever waited before it (a decoder never waits behind reads ahead
    /// for room, nor behind reads ahead of other scans of the store).
    async fn send_wanted(self: &Arc<Self>, wanted: Option<&Wanted>) -> Permit {
        if wanted.is_some_and(|wanted| wanted.since().is_some()) {
            return self.hurried();
        }
        if let Some(ticket) = self.window.lock().try_send() {
            return self.permit(ticket);
        }
        // Tokio's clock, which tests can pause.
        let queued = tokio::time::Instant::now();
        let permit = match wanted {
            None => self.wait_for_room().await,
            Some(wanted) => tokio::select! {
                biased;
                permit = self.wait_for_room() => permit,
                () = wanted.wanted() => self.hurried(),
            },
        };
        let now = tokio::time::Instant::now();
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.waits.queued.fetch_add(1, Ordering::Relaxed);
        self.waits
            .queued_micros
            .fetch_add(micros(now - queued), Ordering::Relaxed);
        if let Some(since) = wanted.and_then(Wanted::since) {
            let from = since.max(queued);
            self.waits.wanted_micros.fetch_add(
                micros(now.saturating_duration_since(from)),
                Ordering::Relaxed,
            );
        }
        permit
    }

    async fn wait_for_room(self: &Arc<Self>) -> Permit {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before looking, so an end between the look and the
            // wait still wakes this one.
            room.as_mut().enable();
            if let Some(ticket) = self.window.lock().try_send() {
                return self.permit(ticket);
            }
            room.await;
        }
    }

    /// The answer to `request`, sent as a read ahead: once the window has
    /// room, and sent again (once it has room again) each time a cut
    /// withdraws it before it answers.
    pub(crate) async fn read_ahead<T, F: Future<Output = T>>(
        self: &Arc<Self>,
        wanted: Option<&Wanted>,
        mut request: impl FnMut() -> F,
    ) -> Sent<T> {
        let mut withdrawn = 0;
        loop {
            let mut permit = self.send_wanted(wanted).await;
            let at = Instant::now();
            let sending = permit.sending(request());
            let answered = tokio::select! {
                biased;
                answer = sending => Some(answer),
                () = permit.withdrawn() => None,
            };
            match answered {
                Some(answer) => {
                    return Sent {
                        permit,
                        at,
                        answer,
                        withdrawn,
                    };
                }
                None => withdrawn += 1,
            }
        }
    }

    /// A read ahead sent at once because a decoder waits on it.
    fn hurried(self: &Arc<Self>) -> Permit {
        self.waits.hurried.fetch_add(1, Ordering::Relaxed);
        self.send_anyway()
    }

    /// A request that does not wait (a read a decoder waits on).
    pub(crate) fn send_anyway(self: &Arc<Self>) -> Permit {
        let ticket = self.window.lock().send_anyway();
        self.permit(ticket)
    }

    /// A hedge of the request being sent in the current task (if it is
    /// this gate's), if the window allows one now (see
    /// [`RequestWindow::try_hedge`]).
    pub(crate) fn try_hedge(self: &Arc<Self>, share: f64) -> Option<Permit> {
        let of = SENDING
            .try_with(|(gate, seq)| Arc::ptr_eq(gate, self).then_some(*seq))
            .ok()
            .flatten();
        let ticket = self.window.lock().try_hedge(share, of)?;
        Some(self.permit(ticket))
    }

    /// The window's state, for metrics and tests.
    pub(crate) fn state(&self) -> WindowState {
        WindowState::of(&self.window.lock())
    }

    /// What the window has done since it was made, and how long reads
    /// ahead waited for room in it.
    pub(crate) fn stats(&self) -> GateStats {
        let micros = |counter: &AtomicU64| Duration::from_micros(counter.load(Ordering::Relaxed));
        let (state, counts) = {
            let window = self.window.lock();
            (WindowState::of(&window), window.counts())
        };
        GateStats {
            state,
            counts,
            reads_ahead_queued: self.waits.queued.load(Ordering::Relaxed),
            queued: micros(&self.waits.queued_micros),
            queued_while_wanted: micros(&self.waits.wanted_micros),
            hurried: self.waits.hurried.load(Ordering::Relaxed),
        }
    }

    fn permit(self: &Arc<Self>, ticket: Ticket) -> Permit {
        Permit {
            gate: Arc::clone(self),
            ticket: Some(ticket),
        }
    }

    fn end(&self, ticket: Ticket, outcome: Outcome) -> bool {
        let (throttled, withdrawing) = {
            let mut window = self.window.lock();
            let cuts = window.cuts();
            let throttled = window.ended(ticket, outcome);
            (throttled, window.cuts() > cuts && window.withdrawing())
        };
        self.room.notify_waiters();
        if withdrawing {
            self.withdrawing.notify_waiters();
        }
        throttled
    }

    /// The client of the request numbered `seq` sent an attempt of it (see
    /// [`RequestWindow::attempt_sent`]).
    fn attempt_sent(&self, seq: u64) {
        self.window.lock().attempt_sent(seq);
    }

    /// The request numbered `seq` was answered `503` (see
    /// [`RequestWindow::refused`]): it may be withdrawn now, if a cut asks
    /// for withdrawals (this one's, or an earlier one's).
    fn refused(&self, seq: u64) {
        let withdrawing = {
            let mut window = self.window.lock();
            window.refused(seq);
            window.withdrawing()
        };
        if withdrawing {
            self.withdrawing.notify_waiters();
        }
    }
}

tokio::task_local! {
    /// The paced request whose sending runs in the current task.
    static SENDING: (Arc<RequestGate>, u64);
}

/// The store's client answered the request being sent in the current task
/// `503` and will retry it: its window hears of it now (nothing happens
/// outside a paced request). Called by [`crate::attempts::record_throttled`].
pub(crate) fn refused_now() {
    let _ = SENDING.try_with(|(gate, seq)| gate.refused(*seq));
}

/// The store's client sent an attempt of the request being sent in the
/// current task (see [`RequestWindow::attempt_sent`]). Called by
/// [`crate::attempts::record_attempt`].
pub(crate) fn attempt_now() {
    let _ = SENDING.try_with(|(gate, seq)| gate.attempt_sent(*seq));
}

/// A request sent through a [`RequestGate`], answered.
#[derive(Debug)]
pub(crate) struct Sent<T> {
    /// Its room in the window, held until its body is in.
    pub permit: Permit,
    /// When the sending that answered went out.
    pub at: Instant,
    pub answer: T,
    /// Sendings withdrawn by cuts before it (each one more request on the
    /// wire).
    pub withdrawn: u64,
}

/// A snapshot of a [`RequestGate`]'s window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowState {
    pub limit: u32,
    pub in_flight: u32,
    pub hedges_in_flight: u32,
    pub cuts: u64,
    /// Reads ahead withdrawn by cuts.
    pub withdrawn: u64,
    /// Whether the store throttled recently (see [`RequestWindow::throttled`]).
    pub throttled: bool,
}

impl WindowState {
    fn of(window: &RequestWindow) -> Self {
        Self {
            limit: window.limit(),
            in_flight: window.in_flight(),
            hedges_in_flight: window.hedges_in_flight(),
            cuts: window.cuts(),
            withdrawn: window.withdrawn(),
            throttled: window.throttled(),
        }
    }
}

/// A [`RequestGate`]'s window now, what it has done, and the waits for
/// room in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GateStats {
    pub state: WindowState,
    pub counts: WindowCounts,
    /// Reads ahead that found no room when first sent.
    pub reads_ahead_queued: u64,
    /// How long they waited, summed.
    pub queued: Duration,
    /// The part of that wait after a decoder came to need the read.
    pub queued_while_wanted: Duration,
    /// Reads ahead sent without waiting for room because a decoder waited
    /// on them.
    pub hurried: u64,
}

/// A request in flight through a [`RequestGate`]. Dropped without
/// [`ended`](Self::ended), it ends with no evidence.
#[derive(Debug)]
pub(crate) struct Permit {
    gate: Arc<RequestGate>,
    ticket: Option<Ticket>,
}

impl Permit {
    /// `request`, sent under this permit: a `503` its client reports while
    /// it runs is told to the window at once ([`refused_now`]).
    pub(crate) fn sending<F: Future>(
        &self,
        request: F,
    ) -> TaskLocalFuture<(Arc<RequestGate>, u64), F> {
        let seq = self.ticket.as_ref().map_or(u64::MAX, Ticket::seq);
        SENDING.scope((Arc::clone(&self.gate), seq), request)
    }

    /// The request ended so. Returns whether it answered slowly while the
    /// store throttles (see [`RequestWindow::ended`]).
    pub(crate) fn ended(mut self, outcome: Outcome) -> bool {
        let ticket = self.ticket.take().expect("a permit ends once");
        self.gate.end(ticket, outcome)
    }
}

impl Permit {
    /// Resolves when a cut withdraws this request (a read ahead that has not
    /// answered, beyond the window the cut left); the permit is spent then.
    /// Dropped while waiting, it leaves the permit as it was.
    async fn withdrawn(&mut self) {
        loop {
            let asked = self.gate.withdrawing.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            let Some(ticket) = self.ticket.take() else {
                return std::future::pending().await;
            };
            match self.gate.window.lock().try_withdraw(ticket) {
                Ok(()) => break,
                Err(ticket) => self.ticket = Some(ticket),
            }
            asked.await;
        }
        self.gate.room.notify_waiters();
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.gate.end(ticket, Outcome::NoAnswer);
        }
    }
}

#[cfg(test)]
mod tests;
