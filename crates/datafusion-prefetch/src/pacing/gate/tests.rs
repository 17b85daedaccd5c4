// Tests spawn on the runtime `#[tokio::test]` gives them (clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::super::window::CALM_AFTER;
use super::*;

/// `n` reads ahead through `gate` at once, each sending with (a clone of)
/// `send` and, once answered, ending its permit as answered after
/// `answered`; each task gives how often its read was withdrawn.
fn spawn_reads_ahead<F, Fut>(
    gate: &Arc<RequestGate>,
    n: usize,
    answered: Duration,
    send: F,
) -> Vec<JoinHandle<u64>>
where
    F: FnMut() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    (0..n)
        .map(|_| {
            let (gate, send) = (Arc::clone(gate), send.clone());
            tokio::spawn(async move {
                let sent = gate.read_ahead(None, send).await;
                sent.permit.ended(Outcome::Answered(answered));
                sent.withdrawn
            })
        })
        .collect()
}

/// How often the reads of `reads` were withdrawn, summed, once all end.
async fn withdrawn(reads: Vec<JoinHandle<u64>>) -> u64 {
    let mut withdrawn = 0;
    for read in reads {
        withdrawn += read.await.unwrap();
    }
    withdrawn
}

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
    let reads = spawn_reads_ahead(&gate, 20, Duration::from_secs(1), {
        let sends = Arc::clone(&sends);
        move || {
            sends.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1))
        }
    });
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
    let withdrawn = withdrawn(reads).await;
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
    let reads = spawn_reads_ahead(&gate, 20, Duration::from_millis(50), {
        let sends = Arc::clone(&sends);
        move || {
            let refused = sends.fetch_add(1, Ordering::SeqCst) < 8;
            async move {
                if refused {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    refused_now();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Cut at the fourth refusal, from the 20 in flight to 10; only the
    // refused reads are withdrawn (the others are on admitted attempts).
    let state = gate.state();
    assert_eq!((state.cuts, state.limit, state.withdrawn), (1, 10, 8));
    assert_eq!(state.in_flight, 12);
    let withdrawn = withdrawn(reads).await;
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
    let reads = spawn_reads_ahead(&gate, 8, Duration::from_millis(50), {
        let sends = Arc::clone(&sends);
        move || {
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
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let state = gate.state();
    assert_eq!((state.cuts, state.limit), (1, 4));
    assert_eq!(state.withdrawn, 3, "not the read whose retry is out");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(gate.state().withdrawn, 4, "refused again, it goes");
    let withdrawn = withdrawn(reads).await;
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
