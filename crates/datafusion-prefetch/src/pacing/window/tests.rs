use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Sends `n` requests; panics if the window refuses one.
fn send(window: &mut RequestWindow, n: usize) -> Vec<Ticket> {
    (0..n).map(|_| window.try_send().expect("room")).collect()
}

/// A window of `max` opened by clean answers.
fn opened(max: u32) -> RequestWindow {
    let mut window = RequestWindow::new(max);
    answer(&mut window, max as usize, ms(30));
    assert_eq!(window.limit(), max);
    window
}

/// Sends and answers `n` requests one at a time, each after `first_byte`.
fn answer(window: &mut RequestWindow, n: usize, first_byte: Duration) {
    for _ in 0..n {
        let ticket = window.send_anyway();
        window.ended(ticket, Outcome::Answered(first_byte));
    }
}

/// Keeps 64 requests in flight through 10,000 answers, the `i`th after
/// `first_byte(i)`; panics if the window ever refuses the next request.
fn answer_steadily(window: &mut RequestWindow, first_byte: impl Fn(u64) -> Duration) {
    let mut tickets = send(window, 64);
    for i in 0..10_000_u64 {
        window.ended(tickets.remove(0), Outcome::Answered(first_byte(i)));
        tickets.push(window.try_send().expect("the window stays open"));
    }
}

#[test]
fn the_window_starts_small_and_doubles_with_each_window_of_clean_answers() {
    let mut window = RequestWindow::new(1024);
    let mut flying = send(&mut window, INITIAL_WINDOW as usize);
    assert_eq!(window.try_send(), None);
    let mut rounds = 0;
    while window.limit() < 1024 {
        let answered = flying.len();
        for ticket in flying.drain(..) {
            window.ended(ticket, Outcome::Answered(ms(30)));
        }
        assert_eq!(window.limit(), (2 * answered as u32).min(1024));
        flying = std::iter::from_fn(|| window.try_send()).collect();
        rounds += 1;
    }
    // 32, 64, ..., 1024: five round trips.
    assert_eq!(rounds, 5);
    assert_eq!(window.cuts(), 0);
}

#[test]
fn a_store_that_never_throttles_is_never_held_back() {
    let mut window = opened(64);
    // A store's tail: one answer in 16 over 100 ms later than the quick
    // ones, here three in a row.
    answer_steadily(&mut window, |i| {
        if i % 48 < 3 { ms(200) } else { ms(25 + i % 20) }
    });
    assert_eq!((window.limit(), window.cuts()), (64, 0));
    assert!(!window.throttled());
}

#[test]
fn throttling_halves_what_is_in_flight() {
    let mut window = opened(256);
    let mut flying = send(&mut window, 40);
    for slow in 0..SLOW_CUT_AFTER {
        assert_eq!(window.cuts(), 0, "cut after {slow} slow answers");
        window.ended(flying.pop().unwrap(), Outcome::Answered(ms(30) + SLOW_BY));
    }
    // 33 were in flight when the eighth slow answer came, 32 after it.
    assert_eq!((window.cuts(), window.limit()), (1, 16));
    assert!(window.throttled());
    assert_eq!(window.try_send(), None);
    while window.in_flight() >= 16 {
        window.ended(flying.pop().unwrap(), Outcome::NoAnswer);
    }
    assert!(window.try_send().is_some());
}

#[test]
fn answers_to_requests_sent_before_a_cut_are_not_evidence() {
    let mut window = opened(256);
    let mut before = send(&mut window, 40);
    for _ in 0..SLOW_CUT_AFTER {
        window.ended(before.pop().unwrap(), Outcome::Answered(ms(500)));
    }
    assert_eq!(window.cuts(), 1);
    // The rest of the requests sent before the cut answer just as slowly,
    // and a client gives up: still the one cut.
    for ticket in before.drain(..CUT_AFTER * 2) {
        window.ended(ticket, Outcome::Answered(ms(500)));
    }
    window.ended(before.pop().unwrap(), Outcome::GaveUp);
    assert_eq!(window.cuts(), 1);
    // Requests sent after it are evidence again: half of them slow.
    for _ in 0..SLOW_CUT_AFTER {
        let (quick, slow) = (window.send_anyway(), window.send_anyway());
        window.ended(quick, Outcome::Answered(ms(30)));
        window.ended(slow, Outcome::Answered(ms(500)));
    }
    assert_eq!(window.cuts(), 2);
}

#[test]
fn clean_answers_grow_the_window_by_about_one_per_window() {
    let mut window = opened(20);
    let mut flying = send(&mut window, 20);
    // 20 in flight when the client gave up (the one that did included).
    window.ended(flying.pop().unwrap(), Outcome::GaveUp);
    for ticket in flying {
        window.ended(ticket, Outcome::NoAnswer);
    }
    assert_eq!(window.limit(), 10);
    answer(&mut window, 11, ms(30));
    assert_eq!(window.limit(), 11);
    answer(&mut window, 12, ms(30));
    assert_eq!(window.limit(), 12);
    answer(&mut window, 1000, ms(30));
    assert_eq!(window.limit(), 20, "never over its maximum");
}

#[test]
fn a_client_that_gives_up_cuts_at_once_and_the_window_never_closes() {
    let mut window = opened(8);
    for cut in 1..=10 {
        let ticket = window.try_send().expect("at least one request");
        window.ended(ticket, Outcome::GaveUp);
        assert_eq!(window.cuts(), cut);
    }
    assert_eq!(window.limit(), 1);
    let ticket = window.try_send().unwrap();
    assert_eq!(window.try_send(), None);
    // A read a decoder waits on goes out all the same.
    let demand = window.send_anyway();
    assert_eq!(window.in_flight(), 2);
    window.ended(ticket, Outcome::NoAnswer);
    window.ended(demand, Outcome::NoAnswer);
    assert_eq!(window.in_flight(), 0);
}

#[test]
fn hedges_stay_within_their_share_and_stop_while_throttled() {
    let mut window = opened(256);
    let mut flying = send(&mut window, 20);
    // A quarter of the 20 requests in flight: 5 hedges.
    let hedges: Vec<Ticket> = (0..5)
        .map(|_| window.try_hedge(0.25, None).unwrap())
        .collect();
    assert_eq!(window.try_hedge(0.25, None), None);
    assert_eq!(window.hedges_in_flight(), 5);
    // With one request in flight, one hedge is allowed whatever the share.
    let mut lone = opened(4);
    let _first = lone.try_send().unwrap();
    assert!(lone.try_hedge(0.01, None).is_some());
    for ticket in hedges {
        window.ended(ticket, Outcome::Answered(ms(30)));
    }
    assert_eq!(window.hedges_in_flight(), 0);

    for _ in 0..SLOW_CUT_AFTER {
        window.ended(flying.pop().unwrap(), Outcome::Answered(ms(300)));
    }
    assert!(window.throttled());
    // Room again in the halved window: 1 of the 16 left in flight.
    for ticket in flying.drain(1..) {
        window.ended(ticket, Outcome::NoAnswer);
    }
    assert!(window.in_flight() < window.limit());
    assert_eq!(window.try_hedge(1.0, None), None);
    answer(&mut window, CALM_AFTER as usize - 1, ms(30));
    assert_eq!(window.try_hedge(1.0, None), None);
    answer(&mut window, 1, ms(30));
    assert!(!window.throttled());
    assert!(window.try_hedge(1.0, None).is_some());
}

#[test]
fn nothing_is_slow_before_the_store_has_answered_a_few_times() {
    let mut window = RequestWindow::new(16);
    answer(&mut window, CUT_AFTER - 1, ms(900));
    answer(&mut window, 1, ms(900));
    assert_eq!(window.cuts(), 0);
}

#[test]
fn a_slow_answer_tells_of_the_store_only_while_it_does_not_throttle() {
    let mut window = opened(64);
    let mut flying = send(&mut window, 20);
    // Slow answers before the store has been found throttling are its
    // round trips (its tail).
    for _ in 0..SLOW_CUT_AFTER - 1 {
        assert!(!window.ended(flying.pop().unwrap(), Outcome::Answered(ms(300))));
    }
    // The one that cuts, and slow answers after, timed the client's retries.
    assert!(window.ended(flying.pop().unwrap(), Outcome::Answered(ms(300))));
    assert!(window.ended(flying.pop().unwrap(), Outcome::Answered(ms(300))));
    assert!(!window.ended(flying.pop().unwrap(), Outcome::Answered(ms(30))));
    // Once calm again, a slow answer is the store's own.
    answer(&mut window, CALM_AFTER as usize, ms(30));
    assert!(!window.ended(flying.pop().unwrap(), Outcome::Answered(ms(300))));
}

/// A window of 256 opened, 40 reads ahead sent, and cut by eight slow
/// answers: 32 in flight, 16 allowed.
fn cut_with_reads_ahead_in_flight() -> (RequestWindow, Vec<Ticket>) {
    let mut window = opened(256);
    let mut flying = send(&mut window, 40);
    for _ in 0..SLOW_CUT_AFTER {
        window.ended(flying.pop().unwrap(), Outcome::Answered(ms(30) + SLOW_BY));
    }
    assert_eq!(
        (window.cuts(), window.in_flight(), window.limit()),
        (1, 32, 16)
    );
    (window, flying)
}

#[test]
fn a_cut_withdraws_the_reads_ahead_beyond_the_new_window() {
    let (mut window, flying) = cut_with_reads_ahead_in_flight();
    assert!(window.withdrawing());
    let mut kept = vec![];
    for ticket in flying {
        if let Err(ticket) = window.try_withdraw(ticket) {
            kept.push(ticket);
        }
    }
    assert_eq!((kept.len(), window.withdrawn()), (16, 16));
    assert_eq!(window.in_flight(), 16);
    assert!(!window.withdrawing());
    assert_eq!(window.try_send(), None, "the window is full, not over");
    window.ended(kept.pop().unwrap(), Outcome::NoAnswer);
    assert!(window.try_send().is_some());
}

#[test]
fn requests_that_end_meanwhile_leave_fewer_to_withdraw() {
    let (mut window, mut flying) = cut_with_reads_ahead_in_flight();
    for _ in 0..10 {
        window.ended(flying.pop().unwrap(), Outcome::NoAnswer);
    }
    let withdrawn = flying
        .into_iter()
        .filter_map(|ticket| window.try_withdraw(ticket).err())
        .count();
    assert_eq!((22 - withdrawn, window.in_flight()), (6, 16));
}

#[test]
fn reads_a_decoder_waits_on_and_hedges_are_never_withdrawn() {
    let mut window = opened(256);
    let demands: Vec<Ticket> = (0..8).map(|_| window.send_anyway()).collect();
    let hedge = window.try_hedge(1.0, None).expect("a hedge");
    let reads_ahead = send(&mut window, 3);
    let gave_up = window.try_send().expect("room");
    window.ended(gave_up, Outcome::GaveUp);
    assert_eq!((window.in_flight(), window.limit()), (12, 6));
    assert!(window.withdrawing());
    for ticket in demands.into_iter().chain([hedge]) {
        assert!(window.try_withdraw(ticket).is_err());
    }
    let withdrawn = reads_ahead
        .into_iter()
        .filter_map(|ticket| window.try_withdraw(ticket).ok())
        .count();
    assert_eq!(withdrawn, 3, "only reads ahead, as many as there are");
}

#[test]
fn refusals_reported_as_they_come_cut_the_slow_start_before_it_doubles_again() {
    // The first wave of 32, not yet answered: four of them refused.
    let mut window = RequestWindow::new(1024);
    let mut flying = send(&mut window, INITIAL_WINDOW as usize);
    for (i, ticket) in flying.iter().take(CUT_AFTER).enumerate() {
        assert_eq!(window.cuts(), 0, "cut after {i} refusals");
        window.refused(ticket.seq());
    }
    // Cut from the 32 in flight, before any answer could double it.
    assert_eq!((window.cuts(), window.limit()), (1, 16));
    assert!(window.throttled());
    // Refused again by the client's retries, or answered late: each
    // request counted once, and not against the window after the cut.
    let refused: Vec<Ticket> = flying.drain(..CUT_AFTER).collect();
    for ticket in &refused {
        window.refused(ticket.seq());
    }
    for ticket in refused {
        assert!(
            window.ended(ticket, Outcome::Answered(ms(600))),
            "its time is the retries'"
        );
    }
    assert_eq!(window.cuts(), 1);
}

#[test]
fn a_refusal_counts_once_whether_reported_or_answered_slowly() {
    let mut window = opened(256);
    let mut flying = send(&mut window, 40);
    // Three requests refused as they come, then answered late: three
    // pieces of evidence, one short of a cut.
    for _ in 0..CUT_AFTER - 1 {
        let ticket = flying.pop().unwrap();
        window.refused(ticket.seq());
        window.refused(ticket.seq());
        window.ended(ticket, Outcome::Answered(ms(30) + SLOW_BY));
    }
    assert_eq!(window.cuts(), 0);
    // A fourth, refused: the cut.
    let fourth = flying.pop().unwrap();
    window.refused(fourth.seq());
    assert_eq!(window.cuts(), 1);
    window.ended(fourth, Outcome::Answered(ms(30) + SLOW_BY));
    assert_eq!(window.cuts(), 1);
    // Refusals of requests sent before the cut, or no longer in flight,
    // are no evidence.
    for ticket in flying.drain(..CUT_AFTER) {
        window.refused(ticket.seq());
        window.ended(ticket, Outcome::NoAnswer);
    }
    window.refused(u64::MAX);
    assert_eq!(window.cuts(), 1);
}

#[test]
fn where_refusals_are_reported_a_cut_withdraws_only_refused_reads_ahead() {
    let mut window = opened(256);
    let flying = send(&mut window, 40);
    // Four of the 40 in flight refused: a cut to 20 ...
    for ticket in &flying[..CUT_AFTER] {
        window.refused(ticket.seq());
    }
    assert_eq!((window.cuts(), window.limit()), (1, 20));
    // ... that withdraws only the refused ones (waiting out a backoff):
    // the others may be on an admitted attempt.
    let mut kept = 0;
    for ticket in flying {
        if window.try_withdraw(ticket).is_err() {
            kept += 1;
        }
    }
    assert_eq!((window.withdrawn(), kept), (CUT_AFTER as u64, 36));
    assert!(window.withdrawing(), "16 more to withdraw, once refused");
}

#[test]
fn a_refusal_without_a_cut_stops_hedges_until_the_store_is_calm_again() {
    let mut window = opened(256);
    let flying = send(&mut window, 40);
    // One refusal of 40 in flight: no cut, but the store is at its rate.
    window.refused(flying[0].seq());
    assert_eq!(window.cuts(), 0);
    assert!(window.throttled());
    assert_eq!(window.try_hedge(1.0, None), None);
    // Another refusal before the spell ends starts it again.
    answer(&mut window, CALM_AFTER as usize - 1, ms(30));
    window.refused(flying[1].seq());
    answer(&mut window, CALM_AFTER as usize - 1, ms(30));
    assert!(window.throttled());
    assert_eq!(window.try_hedge(1.0, None), None);
    answer(&mut window, 1, ms(30));
    assert!(!window.throttled());
    assert!(window.try_hedge(1.0, None).is_some());
    // A refusal of a request the window never sent tells nothing.
    window.refused(u64::MAX);
    assert!(!window.throttled());
}

#[test]
fn a_request_the_store_refused_is_never_hedged() {
    let mut window = opened(256);
    let flying = send(&mut window, 40);
    let (refused, answered_in_time) = (flying[0].seq(), flying[1].seq());
    window.refused(refused);
    answer(&mut window, CALM_AFTER as usize, ms(30));
    assert!(!window.throttled());
    // Still waiting out its client's backoff: its retry comes, not a hedge.
    assert_eq!(window.try_hedge(1.0, Some(refused)), None);
    assert!(window.try_hedge(1.0, Some(answered_in_time)).is_some());
}

#[test]
fn a_refused_read_ahead_is_not_withdrawn_while_its_retry_is_on_the_wire() {
    let mut window = opened(256);
    let flying = send(&mut window, 40);
    for ticket in &flying[..CUT_AFTER] {
        window.refused(ticket.seq());
    }
    assert_eq!(window.cuts(), 1);
    // The first one's client retries it: the store may admit that attempt.
    window.attempt_sent(flying[0].seq());
    let mut flying = flying.into_iter();
    let retrying = window.try_withdraw(flying.next().unwrap()).unwrap_err();
    for ticket in flying.by_ref().take(CUT_AFTER - 1) {
        assert!(window.try_withdraw(ticket).is_ok());
    }
    // Refused again, it waits out another backoff and may go.
    window.refused(retrying.seq());
    assert!(window.try_withdraw(retrying).is_ok());
    assert_eq!(window.withdrawn(), CUT_AFTER as u64);
    assert_eq!(window.cuts(), 1, "a request counts once as evidence");
}

#[test]
fn the_counts_say_what_cut_the_window_and_how_far_it_opened() {
    let mut window = RequestWindow::new(1024);
    assert_eq!(window.counts().peak_limit, INITIAL_WINDOW);
    answer(&mut window, 100, ms(30));
    assert_eq!(window.counts().peak_limit, INITIAL_WINDOW + 100);

    let flying = send(&mut window, 8);
    for ticket in &flying[..CUT_AFTER] {
        window.refused(ticket.seq());
    }
    let mut flying = flying.into_iter();
    for _ in 0..CUT_AFTER {
        window.ended(flying.next().unwrap(), Outcome::NoAnswer);
    }
    answer(&mut window, SLOW_CUT_AFTER, ms(30) + SLOW_BY);
    let gave_up = window.send_anyway();
    window.ended(gave_up, Outcome::GaveUp);
    let counts = window.counts();
    assert_eq!(
        (
            counts.cuts_on_refusals,
            counts.cuts_on_slow_answers,
            counts.cuts_on_give_ups
        ),
        (1, 1, 1)
    );
    assert_eq!(window.cuts(), 3);
    assert_eq!(
        counts.peak_limit,
        INITIAL_WINDOW + 100,
        "cuts lower no peak"
    );
    drop(flying);

    window = opened(64);
    let _request = window.send_anyway();
    let _hedge = window.try_hedge(1.0, None).expect("room");
    assert_eq!(window.counts().hedges, 1);
}

#[test]
fn the_tail_of_a_store_that_never_throttled_does_not_cut_the_window() {
    // A quarter of every 16 answers slow, in a run: what S3's tail does
    // now and then by chance (about one answer in eleven is SLOW_BY later
    // than its quick ones). Each run would have cut a window that cut on a
    // quarter.
    let mut window = opened(256);
    answer_steadily(&mut window, |i| {
        if i % 16 < 4 { ms(180) } else { ms(20 + i % 30) }
    });
    assert_eq!((window.limit(), window.cuts()), (256, 0));
    // Half of them slow is more than a tail: the cut.
    for _ in 0..SLOW_CUT_AFTER {
        let (quick, slow) = (window.send_anyway(), window.send_anyway());
        window.ended(quick, Outcome::Answered(ms(30)));
        window.ended(slow, Outcome::Answered(ms(500)));
    }
    assert_eq!(window.counts().cuts_on_slow_answers, 1);
}

#[test]
fn where_the_client_reports_its_attempts_only_refusals_cut() {
    let mut window = opened(256);
    let mut tickets = send(&mut window, 64);
    // Every other answer late — a process too busy to hear its answers on
    // time, or the store's tail — but none refused.
    for i in 0..1_000_u64 {
        let ticket = tickets.remove(0);
        window.attempt_sent(ticket.seq());
        let first_byte = if i % 2 == 0 { ms(400) } else { ms(20) };
        window.ended(ticket, Outcome::Answered(first_byte));
        tickets.push(window.try_send().expect("the window stays open"));
    }
    assert_eq!((window.limit(), window.cuts()), (256, 0));
    assert!(!window.throttled());
    // Refusals cut as before.
    for ticket in &tickets[..CUT_AFTER] {
        window.refused(ticket.seq());
    }
    assert_eq!(window.counts().cuts_on_refusals, 1);
}
