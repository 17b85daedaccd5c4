//! Sending a request again beside itself when it is slow to answer.
//!
//! On an object store most requests answer near the median round trip and a
//! few wait several times longer (on S3 one in ten over three times the
//! median); a second identical request is likely to take a path that is not
//! slow. Whoever answers first is read, the other is dropped, which cancels
//! it before any of its body is read.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a request waiting for its answer looks again whether there is a
/// delay to hedge after (there is none until the store has been measured).
const RECHECK: Duration = Duration::from_millis(10);

/// Which of the two sendings of a request answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// The request itself (hedged or not).
    First,
    /// The hedge sent beside it.
    Hedge,
}

/// The answer to `send()`, and which sending gave it. Unanswered after `after()` — read again while it
/// waits, so a request sent before the store was measured is hedged once it
/// has been; `None` means no delay yet — the same request is sent again
/// beside it, once `hedge()` allows (it hands out what the second request
/// holds until it is answered or dropped; `None`: not now, ask again
/// shortly), and the first of the two to answer is returned. A failed one
/// leaves the answer to the other. Nothing is hedged before `needed`
/// resolves (a read ahead: once a decoder waits on it; the delay still
/// counts from the sending, so a request already late then is hedged at
/// once).
pub(crate) async fn first_of_two<T, E, Fut, Permit>(
    send: impl Fn() -> Fut,
    needed: impl Future<Output = ()>,
    after: impl Fn() -> Option<Duration>,
    mut hedge: impl FnMut() -> Option<Permit>,
) -> Result<(T, Answered), E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let first = send();
    tokio::pin!(first);
    // Waited on without a timer: a read ahead nobody needs yet costs
    // nothing until it answers.
    tokio::select! {
        answer = &mut first => return answer.map(|a| (a, Answered::First)),
        () = needed => {}
    }
    let _permit = loop {
        let wait = match after() {
            Some(after) => match after.checked_sub(started.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => match hedge() {
                    Some(permit) => break permit,
                    None => RECHECK,
                },
            },
            None => RECHECK,
        };
        tokio::select! {
            answer = &mut first => return answer.map(|a| (a, Answered::First)),
            () = tokio::time::sleep(wait) => {}
        }
    };
    let second = send();
    tokio::pin!(second);
    tokio::select! {
        answer = &mut first => match answer {
            Ok(answer) => Ok((answer, Answered::First)),
            Err(_) => second.await.map(|a| (a, Answered::Hedge)),
        },
        answer = &mut second => match answer {
            Ok(answer) => Ok((answer, Answered::Hedge)),
            Err(_) => first.await.map(|a| (a, Answered::First)),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A request whose `n`th sending (from 0) answers after `delays[n]`.
    async fn answer_after(delays: &[u64], sent: &AtomicUsize) -> Result<usize, ()> {
        let n = sent.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delays[n])).await;
        Ok(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_request_is_answered_by_its_hedge() {
        let sent = AtomicUsize::new(0);
        let mut hedges = 0;
        let answer = first_of_two(
            || answer_after(&[1000, 20], &sent),
            std::future::ready(()),
            || Some(Duration::from_millis(50)),
            || {
                hedges += 1;
                Some(())
            },
        )
        .await;
        // The second sending, out at 50 ms, answers at 70 ms.
        assert_eq!(answer, Ok((1, Answered::Hedge)));
        assert_eq!(hedges, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_answered_in_time_is_sent_once() {
        let sent = AtomicUsize::new(0);
        let answer = first_of_two(
            || answer_after(&[30, 1], &sent),
            std::future::ready(()),
            || Some(Duration::from_millis(50)),
            || -> Option<()> { panic!("hedged") },
        )
        .await;
        assert_eq!(answer, Ok((0, Answered::First)));
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_waits_for_its_permit_and_holds_it_until_answered() {
        let sent = AtomicUsize::new(0);
        let asked = AtomicUsize::new(0);
        let held = std::sync::Arc::new(());
        let answer = first_of_two(
            || answer_after(&[1000, 100], &sent),
            std::future::ready(()),
            || Some(Duration::from_millis(50)),
            // Refused twice (at 50 and 60 ms), then granted at 70 ms.
            || (asked.fetch_add(1, Ordering::SeqCst) >= 2).then(|| std::sync::Arc::clone(&held)),
        )
        .await;
        // The hedge, out at 70 ms, answers at 170 ms; its permit is gone.
        assert_eq!(answer, Ok((1, Answered::Hedge)));
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        assert_eq!(std::sync::Arc::strong_count(&held), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_delay_a_request_is_never_hedged() {
        let sent = AtomicUsize::new(0);
        let answer = first_of_two(
            || answer_after(&[5000], &sent),
            std::future::ready(()),
            || None,
            || -> Option<()> { panic!("hedged") },
        )
        .await;
        assert_eq!(answer, Ok((0, Answered::First)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_hedged_only_once_needed_and_then_at_once_if_late() {
        let sent = AtomicUsize::new(0);
        let started = Instant::now();
        let needed = tokio::time::sleep(Duration::from_millis(200));
        let answer = first_of_two(
            || answer_after(&[1000, 20], &sent),
            needed,
            || Some(Duration::from_millis(50)),
            || Some(()),
        )
        .await;
        // Needed at 200 ms, 150 ms past its delay: hedged then, answered
        // at 220 ms.
        assert_eq!(answer, Ok((1, Answered::Hedge)));
        assert_eq!(started.elapsed(), Duration::from_millis(220));

        // Answered before it is needed: sent once.
        let sent = AtomicUsize::new(0);
        let answer = first_of_two(
            || answer_after(&[100], &sent),
            std::future::pending(),
            || Some(Duration::from_millis(50)),
            || -> Option<()> { panic!("hedged") },
        )
        .await;
        assert_eq!(answer, Ok((0, Answered::First)));
    }
}
