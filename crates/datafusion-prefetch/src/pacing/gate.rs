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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::super::window::CALM_AFTER;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_room_and_a_dropped_wait_holds_nothing() {
        let gate = Arc::new(RequestGate::new(2));
        let first = gate.send().await;
        let second = gate.send().await;
        let waiting = tokio::time::timeout(Duration::from_millis(10), gate.send()).await;
        assert!(waiting.is_err(), "no room for a third");
        assert_eq!(gate.state().in_flight, 2);

        let third = tokio::spawn({
            let gate = Arc::clone(&gate);
            async move { gate.send().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!third.is_finished());
        first.ended(Outcome::Answered(Duration::from_millis(30)));
        let third = third.await.unwrap();
        assert_eq!(gate.state().in_flight, 2);
        drop((second, third));
        assert_eq!(gate.state().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_withdraws_reads_ahead_which_are_sent_again_when_there_is_room() {
        let gate = Arc::new(RequestGate::new(64));
        let sends = Arc::new(AtomicUsize::new(0));
        let reads: Vec<_> = (0..20)
            .map(|_| {
                let (gate, sends) = (Arc::clone(&gate), Arc::clone(&sends));
                tokio::spawn(async move {
                    let sent = gate
                        .read_ahead(None, || {
                            sends.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_secs(1))
                        })
                        .await;
                    sent.permit.ended(Outcome::Answered(Duration::from_secs(1)));
                    sent.withdrawn
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(sends.load(Ordering::SeqCst), 20);
        // A client gave up on 503s: the window halves the 21 in flight.
        gate.send_anyway().ended(Outcome::GaveUp);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let state = gate.state();
        assert_eq!(
            (state.limit, state.in_flight, state.withdrawn),
            (10, 10, 10)
        );
        assert_eq!(
            sends.load(Ordering::SeqCst),
            20,
            "withdrawn until there is room"
        );
        let mut withdrawn = 0;
        for read in reads {
            withdrawn += read.await.unwrap();
        }
        assert_eq!(
            withdrawn, 10,
            "each read ahead tells how often it was withdrawn"
        );
        assert_eq!(
            sends.load(Ordering::SeqCst),
            30,
            "each withdrawn read sent again"
        );
        assert_eq!(gate.state().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_reported_while_reads_run_cut_at_once_and_withdraw_them() {
        let gate = Arc::new(RequestGate::new(64));
        let sends = Arc::new(AtomicUsize::new(0));
        // Twenty reads ahead; the first eight sendings are refused by the
        // store 10 ms in (their client then waits out a backoff), the rest
        // and every sending after them answer after 50 ms.
        let reads: Vec<_> = (0..20)
            .map(|_| {
                let (gate, sends) = (Arc::clone(&gate), Arc::clone(&sends));
                tokio::spawn(async move {
                    let sent = gate
                        .read_ahead(None, || {
                            let refused = sends.fetch_add(1, Ordering::SeqCst) < 8;
                            async move {
                                if refused {
                                    tokio::time::sleep(Duration::from_millis(10)).await;
                                    refused_now();
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        })
                        .await;
                    sent.permit
                        .ended(Outcome::Answered(Duration::from_millis(50)));
                    sent.withdrawn
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Cut at the fourth refusal, from the 20 in flight to 10; only the
        // refused reads are withdrawn (the others are on admitted attempts).
        let state = gate.state();
        assert_eq!((state.cuts, state.limit, state.withdrawn), (1, 10, 8));
        assert_eq!(state.in_flight, 12);
        let mut withdrawn = 0;
        for read in reads {
            withdrawn += read.await.unwrap();
        }
        assert_eq!(withdrawn, 8);
        assert_eq!(sends.load(Ordering::SeqCst), 28);
        assert_eq!(gate.state().in_flight, 0);
        // Outside a paced request, a refusal tells no window.
        refused_now();
        assert_eq!(gate.state().cuts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_read_is_not_withdrawn_while_its_retry_is_on_the_wire() {
        let gate = Arc::new(RequestGate::new(64));
        let sends = Arc::new(AtomicUsize::new(0));
        // Eight reads ahead. The first sending is refused at 5 ms, its
        // client retries it at 8 ms, and that retry is refused at 30 ms;
        // the next three are refused at 10 ms (the fourth refusal: a cut,
        // from 8 in flight to 4). Then each waits out a 200 ms backoff;
        // every sending answers 50 ms after its last refusal or its start.
        let reads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, sends) = (Arc::clone(&gate), Arc::clone(&sends));
                tokio::spawn(async move {
                    let sent = gate
                        .read_ahead(None, || {
                            let sending = sends.fetch_add(1, Ordering::SeqCst);
                            async move {
                                let ms = |n| tokio::time::sleep(Duration::from_millis(n));
                                if sending == 0 {
                                    ms(5).await;
                                    refused_now();
                                    ms(3).await;
                                    attempt_now();
                                    ms(22).await;
                                    refused_now();
                                    ms(200).await;
                                } else if sending < 4 {
                                    ms(10).await;
                                    refused_now();
                                    ms(200).await;
                                }
                                ms(50).await;
                            }
                        })
                        .await;
                    sent.permit
                        .ended(Outcome::Answered(Duration::from_millis(50)));
                    sent.withdrawn
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let state = gate.state();
        assert_eq!((state.cuts, state.limit), (1, 4));
        assert_eq!(state.withdrawn, 3, "not the read whose retry is out");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(gate.state().withdrawn, 4, "refused again, it goes");
        let mut withdrawn = 0;
        for read in reads {
            withdrawn += read.await.unwrap();
        }
        assert_eq!(withdrawn, 4);
        assert_eq!(sends.load(Ordering::SeqCst), 12);
        assert_eq!(gate.state().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_is_not_sent_beside_a_request_its_store_refused() {
        let gate = Arc::new(RequestGate::new(64));
        let refused = gate.send().await;
        let answering = gate.send().await;
        refused.sending(async { refused_now() }).await;
        assert!(gate.state().throttled, "a refusal starts a throttled spell");
        for _ in 0..CALM_AFTER {
            gate.send_anyway()
                .ended(Outcome::Answered(Duration::from_millis(30)));
        }
        assert!(!gate.state().throttled);
        // The request being sent is the one a hedge would be beside.
        let beside_refused = refused.sending(async { gate.try_hedge(1.0) }).await;
        assert!(beside_refused.is_none(), "its client's retry is coming");
        let beside_answering = answering.sending(async { gate.try_hedge(1.0) }).await;
        assert!(beside_answering.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_takes_room_and_gives_it_back() {
        let gate = Arc::new(RequestGate::new(2));
        let request = gate.send().await;
        let hedge = gate.try_hedge(0.5).expect("one hedge");
        assert_eq!(gate.state().hedges_in_flight, 1);
        assert!(gate.try_hedge(1.0).is_none(), "the window is full");
        drop(hedge);
        assert_eq!(gate.state().hedges_in_flight, 0);
        let _demand = gate.send_anyway();
        assert_eq!(gate.state().in_flight, 2);
        drop(request);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_ahead_a_decoder_comes_to_wait_on_goes_out_at_once() {
        let gate = Arc::new(RequestGate::new(1));
        let first = gate.send().await;
        let wanted = Arc::new(Wanted::default());
        let waiting = tokio::spawn({
            let (gate, wanted) = (Arc::clone(&gate), Arc::clone(&wanted));
            async move { gate.send_wanted(Some(&wanted)).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiting.is_finished(), "no room, nobody waits on it yet");
        wanted.want();
        let hurried = tokio::time::timeout(Duration::from_millis(1), waiting)
            .await
            .expect("sent once wanted, the window still full")
            .unwrap();
        let stats = gate.stats();
        assert_eq!((stats.hurried, stats.state.in_flight), (1, 2));
        assert_eq!(stats.reads_ahead_queued, 1);
        assert_eq!(stats.queued, Duration::from_millis(30));
        assert_eq!(stats.queued_while_wanted, Duration::ZERO);
        drop((first, hurried));

        // Wanted before it is sent: out at once, not counted as queued.
        let gate = Arc::new(RequestGate::new(1));
        let _first = gate.send().await;
        let wanted = Wanted::default();
        wanted.want();
        let _second = gate.send_wanted(Some(&wanted)).await;
        let stats = gate.stats();
        assert_eq!((stats.hurried, stats.reads_ahead_queued), (1, 0));
    }
}
