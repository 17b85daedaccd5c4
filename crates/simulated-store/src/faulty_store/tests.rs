//! Behavioural tests of [`FaultyStore`], alone and composed with
//! [`SimulatedStore`](crate::SimulatedStore).

use std::time::Duration;

use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use tokio::time::{Instant, timeout};

use super::*;
use crate::{RequestState, SimulatedStore, SimulatedStoreConfig};

mod bodies;

const MIB: u64 = 1024 * 1024;

fn pattern(size: u64) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

async fn put_all(store: &impl ObjectStore, objects: &[(&str, u64)]) {
    for (path, size) in objects {
        store
            .put(&Path::from(*path), pattern(*size).into())
            .await
            .unwrap();
    }
}

/// A fault-free FaultyStore over InMemory holding `objects` (path, size).
async fn store_with(objects: &[(&str, u64)]) -> FaultyStore<InMemory> {
    let store = FaultyStore::new(InMemory::new());
    put_all(store.inner(), objects).await;
    store
}

/// The injected fault behind an error, panicking if it is not one.
fn injected(err: &object_store::Error) -> &InjectedFault {
    match err {
        object_store::Error::Generic { store, source } => {
            assert_eq!(*store, "FaultyStore");
            source
                .downcast_ref::<InjectedFault>()
                .unwrap_or_else(|| panic!("not an injected fault: {err}"))
        }
        other => panic!("not an injected fault: {other}"),
    }
}

fn slice(size: u64, range: Range<u64>) -> Vec<u8> {
    pattern(size)[range.start as usize..range.end as usize].to_vec()
}

#[tokio::test]
async fn permanent_error_fails_every_matching_request() {
    let store = store_with(&[("a", 100), ("b", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Error).path("a").named("a is down"));
    let stats = store.stats();
    let a = Path::from("a");

    for _ in 0..2 {
        let err = store.get_range(&a, 10..20).await.unwrap_err();
        assert_eq!(injected(&err).kind, FaultKind::Error);
    }
    let err = store.get(&a).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Generic FaultyStore error: injected error on GET #2 of a (whole object), rule 0 \"a is down\""
    );
    let fault = injected(&store.get_range(&a, 10..20).await.unwrap_err()).clone();
    assert_eq!(fault.request, 3);
    assert_eq!(fault.path, "a");
    assert_eq!(fault.range, Some(GetRange::Bounded(10..20)));
    assert_eq!(fault.label.as_deref(), Some("a is down"));
    assert!(
        fault.to_string().contains("GET #3 of a (bytes 10..20)"),
        "{fault}"
    );

    let b = store.get_range(&Path::from("b"), 10..20).await.unwrap();
    assert_eq!(b, slice(100, 10..20));

    assert_eq!(stats.get_requests(), 5);
    assert_eq!(stats.injected(FaultKind::Error), 4);
    assert_eq!(stats.total_injected(), 4);
    assert_eq!(stats.requests_with(FaultKind::Error), [0, 1, 2, 3]);
    assert!(stats.records_for("b").is_empty());
    let record = &stats.records_for(&a)[0];
    assert_eq!(record.requested, Some(GetRange::Bounded(10..20)));
    assert_eq!((record.rule, record.fault), (0, Fault::Error));
}

#[tokio::test]
async fn transient_error_lets_the_retry_succeed() {
    let store = store_with(&[("a", 300)])
        .await
        .with_rule(FaultRule::new(Fault::Error).overlapping(100..200).once());
    let a = Path::from("a");

    // Not overlapping: untouched, and not counted as a match.
    assert!(store.get_range(&a, 0..100).await.is_ok());
    let err = store.get_range(&a, 150..250).await.unwrap_err();
    assert_eq!(injected(&err).request, 1);
    let retry = store.get_range(&a, 150..250).await.unwrap();
    assert_eq!(retry, slice(300, 150..250));
    assert!(store.get_range(&a, 100..110).await.is_ok());

    assert_eq!(store.stats().injected(FaultKind::Error), 1);
    assert_eq!(store.faults().fired(0), Some(1));
}

#[tokio::test]
async fn once_per_range_fails_every_new_range_once() {
    let store = store_with(&[("a", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Error).once_per_range());
    let a = Path::from("a");
    for range in [0..10, 10..20, 0..20] {
        assert!(store.get_range(&a, range.clone()).await.is_err());
        assert_eq!(
            store.get_range(&a, range.clone()).await.unwrap(),
            slice(100, range)
        );
    }
    assert_eq!(store.stats().requests_with(FaultKind::Error), [0, 2, 4]);
}

#[tokio::test]
async fn request_numbers_count_gets_from_zero_and_skip_heads() {
    let store = store_with(&[("a", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Error).request(2));
    let a = Path::from("a");
    store.head(&a).await.unwrap();
    let outcomes: Vec<bool> = futures::future::join_all((0..4).map(|_| store.get(&a)))
        .await
        .iter()
        .map(Result::is_ok)
        .collect();
    store.head(&a).await.unwrap();
    assert_eq!(outcomes, [true, true, false, true]);
    assert_eq!(store.faults().next_request(), 4);
    assert_eq!(store.stats().get_requests(), 4);
    assert_eq!(store.stats().records()[0].request, 2);
}

#[tokio::test]
async fn nth_request_of_one_file_fails_once() {
    // "Fail the 3rd request of file x once", with requests to y in between.
    let store = store_with(&[("x", 100), ("y", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Error).path("x").skip(2).once());
    let (x, y) = (Path::from("x"), Path::from("y"));
    let mut outcomes = vec![];
    for path in [&x, &y, &x, &y, &x, &x, &y, &x] {
        outcomes.push(store.get_range(path, 0..10).await.is_ok());
    }
    assert_eq!(outcomes, [true, true, true, true, false, true, true, true]);
    assert_eq!(store.stats().requests_with(FaultKind::Error), [4]);
}

#[tokio::test]
async fn path_rules_match_exact_substring_and_glob() {
    let objects = [
        ("data/file_001.parquet", 10),
        ("data/file_002.parquet", 10),
        ("data/sub/file_003.parquet", 10),
        ("logs/file_001.json", 10),
        ("data/file_001.parquet.bak", 10),
    ];
    let store = store_with(&objects).await;
    let faults = store.faults();
    let failing = async |rule: FaultRule| {
        faults.set([rule]);
        let mut failed = vec![];
        for (path, _) in objects {
            if store.get(&Path::from(path)).await.is_err() {
                failed.push(path);
            }
        }
        failed
    };

    assert_eq!(
        failing(FaultRule::new(Fault::Error).path(Path::from("data/file_001.parquet"))).await,
        ["data/file_001.parquet"]
    );
    assert_eq!(
        failing(FaultRule::new(Fault::Error).path_contains("file_001")).await,
        [
            "data/file_001.parquet",
            "logs/file_001.json",
            "data/file_001.parquet.bak"
        ]
    );
    assert_eq!(
        failing(FaultRule::new(Fault::Error).path_glob("data/*.parquet")).await,
        [
            "data/file_001.parquet",
            "data/file_002.parquet",
            "data/sub/file_003.parquet"
        ]
    );
    assert_eq!(
        failing(FaultRule::new(Fault::Error).path_glob("*/file_00?.*")).await,
        [
            "data/file_001.parquet",
            "data/file_002.parquet",
            "data/sub/file_003.parquet",
            "logs/file_001.json",
            "data/file_001.parquet.bak"
        ]
    );
}

#[tokio::test]
async fn range_rule_hits_the_coalesced_gets_of_get_ranges() {
    let size = 4 * MIB;
    let store = store_with(&[("a", size)]).await;
    let stats = store.stats();
    let a = Path::from("a");
    let far = 3 * MIB..3 * MIB + 10;

    // Nearby ranges are coalesced into one GET 0..30, which overlaps.
    store
        .faults()
        .push(FaultRule::new(Fault::Error).overlapping(25..26));
    assert!(store.get_ranges(&a, &[0..10, 20..30]).await.is_err());
    assert_eq!(stats.get_requests(), 1);
    assert_eq!(stats.records()[0].requested, Some(GetRange::Bounded(0..30)));

    // Far-apart ranges are two GETs; only the second overlaps.
    store
        .faults()
        .set([FaultRule::new(Fault::Error).overlapping(far.clone())]);
    stats.reset();
    let err = store
        .get_ranges(&a, &[0..10, far.clone()])
        .await
        .unwrap_err();
    assert_eq!(injected(&err).range, Some(GetRange::Bounded(far.clone())));
    assert_eq!(stats.get_requests(), 2);
    assert_eq!(stats.total_injected(), 1);

    store.faults().clear();
    let parts = store.get_ranges(&a, &[0..10, far.clone()]).await.unwrap();
    assert_eq!(parts[1], slice(size, far));
}

#[tokio::test]
async fn probability_rule_is_deterministic_per_seed() {
    async fn failures(p: f64, seed: u64) -> Vec<u64> {
        let store = store_with(&[("a", 10), ("b", 10)])
            .await
            .with_rule(FaultRule::new(Fault::Error).path("a").probability(p, seed));
        for i in 0..400 {
            let path = if i % 2 == 0 { "a" } else { "b" };
            let _ = store.get(&Path::from(path)).await;
        }
        store.stats().requests_with(FaultKind::Error)
    }

    let first = failures(0.25, 7).await;
    assert_eq!(first, failures(0.25, 7).await);
    assert_ne!(first, failures(0.25, 8).await);
    // Only requests to "a" (even numbers) are candidates; about a quarter
    // of its 200 requests fail.
    assert!(first.iter().all(|r| r % 2 == 0));
    assert!((25..=75).contains(&first.len()), "{}", first.len());
    assert!(failures(0.0, 7).await.is_empty());
    assert_eq!(failures(1.0, 7).await.len(), 200);
}

#[tokio::test]
async fn first_matching_rule_wins() {
    let store = store_with(&[("x", 100), ("y", 100)]).await;
    store.faults().set([
        FaultRule::new(Fault::Error).path("x").named("x fails"),
        FaultRule::new(Fault::flip_byte(0)).named("everything else is corrupt"),
    ]);
    assert!(store.get(&Path::from("x")).await.is_err());
    let y = store
        .get(&Path::from("y"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(y[0], 0xFF);
    let rules: Vec<_> = store
        .stats()
        .records()
        .iter()
        .map(|r| (r.rule, r.label.clone().unwrap()))
        .collect();
    assert_eq!(
        rules,
        [
            (0, "x fails".to_string()),
            (1, "everything else is corrupt".to_string())
        ]
    );
}

#[tokio::test]
async fn rules_change_at_run_time_through_the_shared_handle() {
    let store = store_with(&[("a", 100)]).await;
    let faults = store.faults();
    let stats = store.stats();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let a = Path::from("a");

    // "Planning" runs clean...
    assert!(store.head(&a).await.is_ok());
    assert!(store.get_range(&a, 90..100).await.is_ok());
    // ...then faults are installed for the "scan" only.
    faults.push(FaultRule::new(Fault::Error).requests(faults.next_request()..));
    assert!(store.get_range(&a, 0..10).await.is_err());
    assert!(store.get_range(&a, 90..100).await.is_err());
    faults.clear();
    assert!(store.get_range(&a, 0..10).await.is_ok());
    faults.set([FaultRule::new(Fault::Error).once()]);
    assert!(store.get_range(&a, 0..10).await.is_err());
    assert!(store.get_range(&a, 0..10).await.is_ok());
    assert_eq!(stats.requests_with(FaultKind::Error), [1, 2, 4]);
    assert_eq!(faults.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn stalled_request_is_cancellable_and_does_not_block_others() {
    let store = Arc::new(
        store_with(&[("slow", 100), ("fast", 100)])
            .await
            .with_rule(FaultRule::new(Fault::Stall).path("slow")),
    );
    let stats = store.stats();

    let stalled = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.get_range(&Path::from("slow"), 0..10).await })
    };
    let started = Instant::now();
    let fast_path = Path::from("fast");
    let fast =
        futures::future::join_all((0..3).map(|i| store.get_range(&fast_path, i * 10..i * 10 + 10)))
            .await;
    assert!(fast.iter().all(Result::is_ok));
    assert_eq!(started.elapsed(), Duration::ZERO);

    // An hour later (of paused time) the stalled GET has still not answered.
    let mut stalled = stalled;
    assert!(
        timeout(Duration::from_secs(3600), &mut stalled)
            .await
            .is_err()
    );
    stalled.abort();
    assert!(stalled.await.unwrap_err().is_cancelled());
    // Dropping the request released everything it held.
    assert_eq!(Arc::strong_count(&store), 1);

    // The same with a plain future under a timeout.
    let outcome = timeout(
        Duration::from_secs(60),
        store.get_range(&Path::from("slow"), 10..20),
    )
    .await;
    assert!(outcome.is_err(), "a stalled GET completed");
    assert_eq!(stats.injected(FaultKind::Stall), 2);
    assert_eq!(stats.get_requests(), 5);
}

#[tokio::test(start_paused = true)]
async fn delay_fault_answers_after_the_delay() {
    let delay = Duration::from_secs(30);
    let store = store_with(&[("a", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Delay(delay)).request(1));
    let a = Path::from("a");

    let started = Instant::now();
    store.get_range(&a, 0..10).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(store.get_range(&a, 0..10).await.unwrap(), slice(100, 0..10));
    assert_eq!(started.elapsed(), delay);
    assert_eq!(store.stats().injected(FaultKind::Delay), 1);

    // A caller with a shorter timeout gives up on a delayed request.
    store.faults().set([FaultRule::new(Fault::Delay(delay))]);
    assert!(
        timeout(Duration::from_secs(5), store.get_range(&a, 0..10))
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn faulty_store_over_simulated_store() {
    let latency = Duration::from_millis(5);
    let sim = SimulatedStore::new(
        InMemory::new(),
        SimulatedStoreConfig::fixed(latency).with_max_connections(Some(1)),
    );
    put_all(sim.inner(), &[("a", 1000)]).await;
    let sim_stats = sim.stats();
    let store = FaultyStore::new(sim);
    let faults = store.faults();
    let a = Path::from("a");

    // An injected error never reaches the simulated network.
    faults.set([FaultRule::new(Fault::Error).once()]);
    let started = Instant::now();
    assert!(store.get_ranges(&a, &[0..10, 20..30]).await.is_err());
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(sim_stats.get_requests(), 0);
    // The retry goes through, coalesced into one simulated GET.
    let parts = store.get_ranges(&a, &[0..10, 20..30]).await.unwrap();
    assert_eq!(parts[1], slice(1000, 20..30));
    assert_eq!(started.elapsed(), latency);
    assert_eq!(sim_stats.records()[0].range, Some(0..30));
    assert_eq!(store.stats().get_requests(), 2);

    // A stall takes no connection: the next GET is not held up.
    faults.set([FaultRule::new(Fault::Stall).once()]);
    assert!(
        timeout(Duration::from_secs(60), store.get_range(&a, 0..10))
            .await
            .is_err()
    );
    assert_eq!(sim_stats.get_requests(), 1);
    assert!(store.get_range(&a, 0..10).await.is_ok());

    // Body faults apply on top of the simulated body, which (InMemory
    // answering in one chunk) the simulated network delivered in full.
    faults.set([FaultRule::new(Fault::truncate(3))]);
    let started = Instant::now();
    assert!(store.get_range(&a, 0..10).await.is_err());
    assert_eq!(started.elapsed(), latency);
    let record = sim_stats.records().pop().unwrap();
    assert!(record.state.is_finished());
    assert_eq!(sim_stats.in_flight_gets(), 0);
}

#[tokio::test(start_paused = true)]
async fn simulated_store_over_faulty_store() {
    let latency = Duration::from_millis(5);
    let faulty = FaultyStore::new(InMemory::new());
    put_all(faulty.inner(), &[("a", 1000)]).await;
    let faults = faulty.faults();
    let fault_stats = faulty.stats();
    let store = SimulatedStore::new(
        faulty,
        SimulatedStoreConfig::fixed(latency).with_max_connections(Some(1)),
    );
    let sim_stats = store.stats();
    let a = Path::from("a");

    // A failed GET pays the latency and is logged as failed.
    faults.set([FaultRule::new(Fault::Error).once()]);
    let started = Instant::now();
    assert!(store.get_ranges(&a, &[0..10, 20..30]).await.is_err());
    assert_eq!(started.elapsed(), latency);
    assert_eq!(sim_stats.records()[0].state, RequestState::Failed);
    assert_eq!(sim_stats.records()[0].range, Some(0..30));
    let parts = store.get_ranges(&a, &[0..10, 20..30]).await.unwrap();
    assert_eq!(parts[1], slice(1000, 20..30));

    // A stalled GET holds the only connection until it is dropped...
    faults.set([FaultRule::new(Fault::Stall).once()]);
    assert!(
        timeout(Duration::from_secs(60), store.get_range(&a, 0..10))
            .await
            .is_err()
    );
    // ...after which the connection is free again.
    assert_eq!(sim_stats.in_flight_gets(), 0);
    assert_eq!(sim_stats.records()[2].state, RequestState::Cancelled);
    assert!(store.get_range(&a, 0..10).await.is_ok());

    // A truncated body fails the simulated request; corruption passes through.
    faults.set([
        FaultRule::new(Fault::truncate(3)).once(),
        FaultRule::new(Fault::flip_byte(0)).once(),
    ]);
    assert!(store.get_range(&a, 0..10).await.is_err());
    assert_eq!(sim_stats.records()[4].state, RequestState::Failed);
    assert_eq!(sim_stats.records()[4].bytes_transferred, 3);
    let got = store.get_range(&a, 0..10).await.unwrap();
    assert_eq!(got[0], 0xFF);
    assert!(sim_stats.records()[5].is_completed());

    assert_eq!(fault_stats.get_requests(), 6);
    assert_eq!(fault_stats.total_injected(), 4);
}

#[tokio::test]
async fn heads_lists_and_writes_pass_through() {
    let store = store_with(&[("dir/a", 10)])
        .await
        .with_rule(FaultRule::new(Fault::Error));
    let a = Path::from("dir/a");
    let b = Path::from("dir/b");
    assert_eq!(store.head(&a).await.unwrap().size, 10);
    assert_eq!(
        store
            .list(None)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store
            .list_with_delimiter(Some(&Path::from("dir")))
            .await
            .unwrap()
            .objects
            .len(),
        1
    );
    store.put(&b, vec![1u8; 5].into()).await.unwrap();
    store.copy(&b, &Path::from("dir/c")).await.unwrap();
    store
        .rename(&Path::from("dir/c"), &Path::from("dir/d"))
        .await
        .unwrap();
    store.delete(&b).await.unwrap();
    assert_eq!(
        store.inner().head(&Path::from("dir/d")).await.unwrap().size,
        5
    );
    assert_eq!(store.stats().get_requests(), 0);
    assert!(store.get(&a).await.is_err());
}

#[test]
fn display_and_debug() {
    let store = FaultyStore::new(InMemory::new()).with_rule(FaultRule::new(Fault::Stall).path("x"));
    assert_eq!(store.to_string(), "FaultyStore(InMemory)");
    let debug = format!("{store:?}");
    assert!(debug.starts_with("FaultyStore {"), "{debug}");
    assert!(debug.contains("Stall"), "{debug}");
    assert_eq!(
        Fault::truncate(4).to_string(),
        "truncation after 4 bytes (then an error)"
    );
}

/// object_store's default `get_ranges` slices each coalesced buffer without
/// checking its length, so a range starting past a silent cut panics there;
/// this store's `get_ranges` fails with an error instead.
#[tokio::test]
async fn silent_truncation_under_get_ranges_is_an_error_not_a_panic() {
    let store = store_with(&[("a", 1000)])
        .await
        .with_rule(FaultRule::new(Fault::truncate_silently(5)));
    let err = store
        .get_ranges(&Path::from("a"), &[0..10, 20..30])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("range 20..30 starts past the end of the 5 bytes returned for 0..30"),
        "{err}"
    );
}
