//! A rate limit per prefix: requests over it are answered `503 SlowDown`
//! and retried as object_store's client retries them.

use crate::{RequestRateLimit, RetryModel};

use super::*;

const RTT: Duration = Duration::from_millis(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 10 ms round trips, `per_second` requests a second per prefix with a
/// burst of `burst`.
fn limited(per_second: u32, burst: u32) -> SimulatedStoreConfig {
    let limit = RequestRateLimit::per_second(per_second).with_burst(burst);
    SimulatedStoreConfig::fixed(RTT).with_rate_limit(Some(limit))
}

#[tokio::test(start_paused = true)]
async fn requests_over_the_rate_are_answered_slow_down_and_retried() {
    // A burst of 2, then one request every 100 ms.
    let store = store_with(limited(10, 2), &[("data/a", 1000)]).await;
    let path = Path::from("data/a");
    let gets = (0..4).map(|i| store.get_range(&path, i * 100..i * 100 + 100));
    let bodies = join_all(gets).await;
    for (i, body) in (0_usize..).zip(bodies) {
        assert_eq!(body.unwrap(), pattern(1000)[i * 100..i * 100 + 100]);
    }

    let stats = store.stats();
    let mut records = stats.records();
    records.sort_by_key(|r| (r.throttled, r.first_byte_at));
    let throttled: Vec<u32> = records.iter().map(|r| r.throttled).collect();
    // Two go through; at 110 ms one retry finds the token of 100 ms, the
    // other is refused again and waits a second backoff.
    assert_eq!(throttled, [0, 0, 1, 2]);
    let answered: Vec<Duration> = records
        .iter()
        .map(|r| r.first_byte_at.unwrap() - r.started_at)
        .collect();
    assert_eq!(answered[..3], [RTT, RTT, RTT + ms(100) + RTT]);
    // 503, 100 ms, 503, a drawn wait of 100 to 200 ms, the admitted trip.
    let last = answered[3] - (RTT + ms(100) + RTT + RTT);
    assert!((ms(100)..ms(200)).contains(&last), "{answered:?}");

    assert_eq!((stats.throttled(), stats.retries()), (3, 3));
    assert_eq!(stats.get_requests(), 4);
    assert_eq!(stats.attempts(), 7);
    assert_eq!(stats.in_flight_gets(), 0);
    assert!(records.iter().all(RequestRecord::is_completed));
    // The first connection of a throttled GET is its first attempt's.
    assert!(
        records
            .iter()
            .all(|r| r.queue_time() == Some(Duration::ZERO))
    );
}

#[tokio::test(start_paused = true)]
async fn each_prefix_has_its_own_rate() {
    let objects = [("data/a", 10), ("data/b", 10), ("other/c", 10), ("top", 10)];
    let store = store_with(limited(1, 1), &objects).await;
    let store = &store;
    let gets = objects.map(|(path, _)| async move { store.get(&Path::from(path)).await });
    let start = Instant::now();
    for answer in join_all(gets).await {
        answer.unwrap().bytes().await.unwrap();
    }
    // data/b waits (retry after retry) for the token data/a's prefix
    // refills in a second; other/c and the top level are not throttled.
    let stats = store.stats();
    let throttled: Vec<u32> = stats.records().iter().map(|r| r.throttled).collect();
    assert_eq!(throttled[0], 0);
    assert_eq!(throttled[2..], [0, 0]);
    assert!(throttled[1] > 1, "{throttled:?}");
    assert_eq!(stats.throttled(), u64::from(throttled[1]));
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn list_pages_and_heads_count_against_their_prefix() {
    let config = limited(10, 1).with_list_page_keys(Some(2));
    let store = store_of_keys(config, 5, 0).await;

    let start = Instant::now();
    assert_eq!(listing(&store, "dir").await.len(), 5);
    // Page 1 at 0 ms takes the token. Page 2 is refused at 10 ms and
    // retried at 120 ms; page 3 is refused at 130 ms and retried at 240 ms
    // (a new request's first backoff is 100 ms).
    assert_eq!(start.elapsed(), ms(250));
    let stats = store.stats();
    assert_eq!(stats.list_requests(), 3);
    assert_eq!((stats.throttled(), stats.retries()), (2, 2));
    assert_eq!(stats.attempts(), 5);

    // At 250 ms the bucket holds 0.4 tokens: the HEAD waits its backoff.
    let start = Instant::now();
    store.head(&Path::from("dir/k00000")).await.unwrap();
    assert_eq!(start.elapsed(), RTT + ms(100) + RTT);
    assert_eq!((stats.head_requests(), stats.throttled()), (1, 3));
    // HEADs and LISTs are not GETs.
    assert!(stats.records().is_empty());
}

/// One request a second, and a client that retries twice.
fn gives_up_after_two_retries() -> SimulatedStoreConfig {
    let retry = RetryModel {
        max_retries: 2,
        ..RetryModel::default()
    };
    limited(1, 1)
        .with_retry(retry)
        .with_max_connections(Some(1))
}

#[tokio::test(start_paused = true)]
async fn a_client_that_gives_up_fails_as_object_stores_does() {
    let store = store_with(gives_up_after_two_retries(), &[("data/a", 100)]).await;
    let path = Path::from("data/a");
    store.get_range(&path, 0..10).await.unwrap();

    let error = store.get_range(&path, 10..20).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, object_store::Error::Generic { .. }));
    for expected in [
        "Error performing GET data/a in ",
        "after 2 retries, max_retries: 2, retry_timeout: 180s",
        "503 Service Unavailable: SlowDown",
        "prefix 'data' is over its 1 requests/s",
    ] {
        assert!(message.contains(expected), "{message}");
    }
    let stats = store.stats();
    let failed = &stats.records()[1];
    assert_eq!(failed.state, RequestState::Failed);
    assert_eq!((failed.throttled, failed.range.clone()), (3, Some(10..20)));
    assert_eq!(
        (stats.throttled(), stats.retries(), stats.attempts()),
        (3, 2, 4)
    );
    assert_eq!(stats.in_flight_gets(), 0);

    // The one connection is free again: once the bucket has refilled, the
    // next GET goes straight through.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    store.get_range(&path, 20..30).await.unwrap();
    assert_eq!(start.elapsed(), RTT);

    // A listing whose client gives up ends with the client's error.
    let listed: Vec<Result<ObjectMeta>> = store.list(Some(&Path::from("data"))).collect().await;
    assert_eq!(listed.len(), 1);
    let message = listed[0].as_ref().unwrap_err().to_string();
    assert!(
        message.contains("Error performing LIST data in "),
        "{message}"
    );
    let head = store.head(&path).await.unwrap_err().to_string();
    assert!(head.contains("Error performing HEAD data/a in "), "{head}");
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_its_backoff_off_the_connection() {
    let store = store_with(gives_up_after_two_retries(), &[("data/a", 10), ("b", 10)]).await;
    let a = Path::from("data/a");
    store.get(&a).await.unwrap().bytes().await.unwrap();

    // The throttled GET waits its backoff; meanwhile the one connection
    // serves another prefix.
    let throttled = store.get(&a);
    let other = async {
        tokio::time::sleep(RTT + ms(1)).await;
        let start = Instant::now();
        store.get(&Path::from("b")).await.unwrap();
        start.elapsed()
    };
    let (other_took, throttled) =
        tokio::join!(other, tokio::time::timeout(RTT + ms(50), throttled));
    assert_eq!(other_took, RTT);
    // Dropped in its backoff, the GET holds nothing.
    assert!(throttled.is_err());
    let stats = store.stats();
    assert_eq!(stats.in_flight_gets(), 0);
    assert_eq!(stats.get_requests_for(&a)[1].state, RequestState::Cancelled);
    // Its retry was never sent.
    assert_eq!((stats.throttled(), stats.retries()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn the_attempt_observer_is_told_every_attempt_and_every_503() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
    static THROTTLED: AtomicU64 = AtomicU64::new(0);
    fn observe(attempt: crate::Attempt) {
        let count = match attempt {
            crate::Attempt::Sent => &ATTEMPTS,
            crate::Attempt::Throttled => &THROTTLED,
        };
        count.fetch_add(1, Ordering::SeqCst);
    }
    let store = store_with(gives_up_after_two_retries(), &[("data/a", 100)])
        .await
        .with_attempt_observer(observe);
    let path = Path::from("data/a");
    store.get_range(&path, 0..10).await.unwrap();
    store.get_range(&path, 10..20).await.unwrap_err();
    tokio::time::sleep(Duration::from_secs(1)).await;
    store.head(&path).await.unwrap();
    let _: Vec<Result<ObjectMeta>> = store.list(Some(&Path::from("data"))).collect().await;

    let stats = store.stats();
    let observed = (
        ATTEMPTS.load(Ordering::SeqCst),
        THROTTLED.load(Ordering::SeqCst),
    );
    assert_eq!(observed, (stats.attempts(), stats.throttled()));
    assert!(stats.throttled() >= 3, "{}", stats.snapshot());
}
