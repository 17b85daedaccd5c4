//! What [`SimulatedStore`] records, forwards and reports: coalesced
//! `get_ranges`, the request log, HEAD/LIST, the s3 profile, writes, and
//! the real-clock checks.

use super::*;

#[tokio::test(start_paused = true)]
async fn get_ranges_coalesces_and_counts() {
    let store = store_with(
        SimulatedStoreConfig::fixed(Duration::from_millis(10)),
        &[("a", 8 * MIB)],
    )
    .await;
    let stats = store.stats();
    let path = Path::from("a");
    let data = pattern(8 * MIB);

    // Nearby ranges (gap below OBJECT_STORE_COALESCE_DEFAULT) become one GET.
    let parts = store.get_ranges(&path, &[0..100, 200..300]).await.unwrap();
    assert_eq!(&parts[0][..], &data[0..100]);
    assert_eq!(&parts[1][..], &data[200..300]);
    assert_eq!(stats.get_requests(), 1);
    assert_eq!(ranges_of(&stats.records()), vec![Some(0..300)]);
    assert_eq!(stats.bytes_requested(), 300);
    assert_eq!(stats.bytes_transferred(), 300);

    // Distant ranges stay separate GETs, issued concurrently.
    stats.reset();
    let far = 6 * MIB..6 * MIB + 100;
    let start = Instant::now();
    let parts = store
        .get_ranges(&path, &[0..100, far.clone()])
        .await
        .unwrap();
    assert_eq!(&parts[1][..], &data[far.start as usize..far.end as usize]);
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert_eq!(stats.get_requests(), 2);
    assert_eq!(ranges_of(&stats.records()), vec![Some(0..100), Some(far)]);
    assert_eq!(stats.bytes_requested(), 200);
    assert_eq!(stats.max_in_flight_gets(), 2);
}

#[tokio::test(start_paused = true)]
async fn request_log_records_paths_and_ranges_in_order() {
    let store = store_with(
        SimulatedStoreConfig::fixed(Duration::from_millis(1)),
        &[("dir/a.parquet", 1000), ("dir/b.parquet", 500)],
    )
    .await;
    let stats = store.stats();
    let a = Path::from("dir/a.parquet");
    let b = Path::from("dir/b.parquet");

    store.get_range(&a, 992..1000).await.unwrap();
    store.get_range(&b, 0..50).await.unwrap();
    store.get(&a).await.unwrap().bytes().await.unwrap();
    store
        .get_opts(&b, GetOptions::new().with_range(Some(GetRange::Suffix(8))))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    store.get_range(&a, 100..200).await.unwrap();

    let records = stats.records();
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        records.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        vec![
            "dir/a.parquet",
            "dir/b.parquet",
            "dir/a.parquet",
            "dir/b.parquet",
            "dir/a.parquet"
        ]
    );
    assert_eq!(
        ranges_of(&records),
        vec![
            Some(992..1000),
            Some(0..50),
            Some(0..1000),
            Some(492..500),
            Some(100..200)
        ]
    );
    assert_eq!(records[2].requested, None);
    assert_eq!(records[3].requested, Some(GetRange::Suffix(8)));
    assert!(
        records
            .iter()
            .all(|r| r.is_completed() && r.bytes_transferred == r.range_len().unwrap())
    );
    assert!(
        records
            .windows(2)
            .all(|w| w[0].finished_at <= Some(w[1].started_at))
    );

    let for_a = stats.get_requests_for(&a);
    assert_eq!(
        ranges_of(&for_a),
        vec![Some(992..1000), Some(0..1000), Some(100..200)]
    );
    assert_eq!(stats.get_requests_for("dir/b.parquet").len(), 2);
    assert_eq!(stats.duplicate_ranges_for(&a), vec![100..200, 992..1000]);
    assert!(stats.duplicate_ranges_for(&b).is_empty());
    assert_eq!(stats.bytes_requested(), 8 + 50 + 1000 + 8 + 100);
}

#[tokio::test(start_paused = true)]
async fn failed_get_is_logged_and_releases_connection() {
    let config =
        SimulatedStoreConfig::fixed(Duration::from_millis(5)).with_max_connections(Some(1));
    let store = store_with(config, &[]).await;
    let stats = store.stats();

    let err = store
        .get_range(&Path::from("missing"), 0..10)
        .await
        .unwrap_err();
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
    let record = &stats.records()[0];
    assert_eq!(record.state, RequestState::Failed);
    assert!(record.first_byte_at.is_none());
    assert_eq!(stats.in_flight_gets(), 0);
    assert_eq!(stats.bytes_transferred(), 0);
}

#[tokio::test(start_paused = true)]
async fn head_and_list_are_counted_and_delayed() {
    let config = SimulatedStoreConfig::fixed(Duration::from_millis(20))
        .with_list_latency(LatencyModel::Fixed(Duration::from_millis(70)));
    let store = store_with(config, &[("dir/a", 10), ("dir/sub/b", 10)]).await;
    let stats = store.stats();

    let start = Instant::now();
    let meta = store.head(&Path::from("dir/a")).await.unwrap();
    assert_eq!(meta.size, 10);
    assert_eq!(start.elapsed(), Duration::from_millis(20));

    let start = Instant::now();
    assert_eq!(listing(&store, "dir").await.len(), 2);
    let delimited = store
        .list_with_delimiter(Some(&Path::from("dir")))
        .await
        .unwrap();
    assert_eq!(
        (delimited.objects.len(), delimited.common_prefixes.len()),
        (1, 1)
    );
    let after: Vec<ObjectMeta> = store
        .list_with_offset(Some(&Path::from("dir")), &Path::from("dir/a"))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(start.elapsed(), Duration::from_millis(210));

    let snapshot = stats.snapshot();
    assert_eq!((snapshot.head_requests, snapshot.list_requests), (1, 3));
    // HEAD and LIST are not GETs.
    assert_eq!(snapshot.get_requests, 0);
    assert!(stats.records().is_empty());
}

/// A store of `keys` one-byte objects under `dir/`, and `prefixes` more in
/// subfolders `dir/p<i>/`, at 50 ms per LIST request, paged by 1,000.
async fn paged_store(keys: usize, prefixes: usize) -> SimulatedStore<InMemory> {
    let config =
        SimulatedStoreConfig::fixed(Duration::from_millis(50)).with_list_page_keys(Some(1000));
    store_of_keys(config, keys, prefixes).await
}

#[tokio::test(start_paused = true)]
async fn a_listing_costs_one_round_trip_per_page_one_after_another() {
    // (keys, pages): a full last page needs no request after it, and an
    // empty listing is still one request.
    for (keys, pages) in [(0, 1), (999, 1), (1000, 1), (1001, 2), (2500, 3)] {
        let store = paged_store(keys, 0).await;
        let start = Instant::now();
        assert_eq!(listing(&store, "dir").await.len(), keys);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(50) * pages,
            "{keys} keys"
        );
        assert_eq!(
            store.stats().list_requests(),
            u64::from(pages),
            "{keys} keys"
        );
    }
    // Unpaged, 2,500 keys are one request.
    let store = paged_store(2500, 0).await;
    let unpaged = SimulatedStore::new(
        store.into_inner(),
        SimulatedStoreConfig::fixed(Duration::from_millis(50)),
    );
    let start = Instant::now();
    let listed: Vec<ObjectMeta> = unpaged.list(None).try_collect().await.unwrap();
    assert_eq!(listed.len(), 2500);
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert_eq!(unpaged.stats().list_requests(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_delimited_listing_pages_keys_and_prefixes_together() {
    // 700 keys and 700 subfolders: 1,400 entries, two pages.
    let store = paged_store(700, 700).await;
    let start = Instant::now();
    let listed = store
        .list_with_delimiter(Some(&Path::from("dir")))
        .await
        .unwrap();
    assert_eq!(
        (listed.objects.len(), listed.common_prefixes.len()),
        (700, 700)
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(store.stats().list_requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn later_pages_follow_the_seed_whatever_the_poll_order() {
    // Two paged listings at s3 latency, polled in either order: each page's
    // delay is the same, so each listing takes as long.
    async fn took(first: bool) -> (Duration, Duration) {
        let config = SimulatedStoreConfig::s3().with_seed(3);
        let store = store_with(config, &[]).await;
        for i in 0..2500 {
            let path = Path::from(format!("a/k{i:05}"));
            store.inner().put(&path, vec![0u8].into()).await.unwrap();
            let path = Path::from(format!("b/k{i:05}"));
            store.inner().put(&path, vec![0u8].into()).await.unwrap();
        }
        let a = store.list(Some(&Path::from("a")));
        let b = store.list(Some(&Path::from("b")));
        let time = |listing: BoxStream<'static, Result<ObjectMeta>>| async move {
            let start = Instant::now();
            let n = listing.try_collect::<Vec<_>>().await.unwrap().len();
            assert_eq!(n, 2500);
            start.elapsed()
        };
        if first {
            let ta = time(a).await;
            (ta, time(b).await)
        } else {
            let tb = time(b).await;
            (time(a).await, tb)
        }
    }
    assert_eq!(took(true).await, took(false).await);
}

#[tokio::test(start_paused = true)]
async fn s3_profile_is_deterministic_per_seed() {
    async fn latencies(seed: u64) -> Vec<Duration> {
        let store = store_with(SimulatedStoreConfig::s3().with_seed(seed), &[("a", 100)]).await;
        // A HEAD in between must not shift the GET latency sequence.
        store.head(&Path::from("a")).await.unwrap();
        for i in 0..20 {
            store.get_range(&Path::from("a"), i..i + 1).await.unwrap();
        }
        let records = store.stats().records();
        for r in &records {
            assert_eq!(
                r.first_byte_at.unwrap() - r.started_at,
                r.first_byte_latency
            );
        }
        records.iter().map(|r| r.first_byte_latency).collect()
    }

    let a = latencies(1).await;
    assert_eq!(a, latencies(1).await);
    assert_ne!(a, latencies(2).await);
    assert!(a.iter().all(|d| *d >= Duration::from_millis(5)));

    let mut rng = StdRng::seed_from_u64(1);
    let direct: Vec<Duration> = (0..20).map(|_| LatencyModel::S3.sample(&mut rng)).collect();
    assert_eq!(a, direct);
}

#[tokio::test]
async fn writes_and_metadata_are_forwarded() {
    let store = SimulatedStore::new(InMemory::new(), SimulatedStoreConfig::default());
    let a = Path::from("a");
    let b = Path::from("b");
    let c = Path::from("c");
    store.put(&a, "hello".into()).await.unwrap();
    store.copy(&a, &b).await.unwrap();
    store.rename(&b, &c).await.unwrap();
    store.delete(&a).await.unwrap();
    let mut upload = store.put_multipart(&a).await.unwrap();
    upload.put_part("again".into()).await.unwrap();
    upload.complete().await.unwrap();

    assert_eq!(
        &store.get(&c).await.unwrap().bytes().await.unwrap()[..],
        b"hello"
    );
    assert_eq!(
        &store.get(&a).await.unwrap().bytes().await.unwrap()[..],
        b"again"
    );
    assert!(store.head(&b).await.is_err());
    assert_eq!(store.stats().get_requests(), 2);
}

#[tokio::test]
async fn empty_range_completes_immediately() {
    let store = store_with(
        SimulatedStoreConfig::none().with_max_connections(Some(1)),
        &[("empty", 0)],
    )
    .await;
    let result = store.get(&Path::from("empty")).await.unwrap();
    // The connection is free before the (empty) body is even polled.
    assert_eq!(store.stats().in_flight_gets(), 0);
    assert!(result.bytes().await.unwrap().is_empty());
    assert!(store.stats().records()[0].is_completed());
}

#[test]
fn display_and_debug() {
    let store = SimulatedStore::new(InMemory::new(), SimulatedStoreConfig::s3());
    assert_eq!(store.to_string(), "SimulatedStore(InMemory)");
    let debug = format!("{store:?}");
    assert!(debug.starts_with("SimulatedStore {"), "{debug}");
    assert!(debug.contains("S3"), "{debug}");
}

#[test]
#[should_panic(expected = "max_connections must be at least 1")]
fn zero_connections_is_rejected() {
    SimulatedStore::new(
        InMemory::new(),
        SimulatedStoreConfig::none().with_max_connections(Some(0)),
    );
}

// The tests below use the real clock and a multi-threaded runtime, so their
// timing bounds are generous.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_holds_on_multi_thread_runtime() {
    let config =
        SimulatedStoreConfig::fixed(Duration::from_millis(2)).with_max_connections(Some(4));
    let store = Arc::new(store_with(config, &[("a", 10_000)]).await);
    let start = std::time::Instant::now();
    let tasks: Vec<_> = (0..48u64)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .get_range(&Path::from("a"), i * 100..i * 100 + 50)
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let stats = store.stats();
    assert!(stats.max_in_flight_gets() <= 4, "{}", stats.snapshot());
    assert_eq!(stats.in_flight_gets(), 0);
    // 12 waves of at least 2 ms each.
    assert!(
        start.elapsed() >= Duration::from_millis(24),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(stats.get_requests(), 48);
    assert_eq!(stats.bytes_transferred(), 48 * 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_pacing_on_real_clock() {
    // 2 MiB in 4 KiB chunks at 20 MiB/s: 100 ms, paced by ~1 ms timer ticks
    // whose overshoot must be credited back rather than accumulate.
    let config = SimulatedStoreConfig::none().with_bandwidth(Some(20 * MIB));
    let store = chunked_store_with(config, 4096, "a", 2 * MIB).await;
    let start = std::time::Instant::now();
    let bytes = store
        .get(&Path::from("a"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(bytes.len() as u64, 2 * MIB);
    assert!(
        elapsed >= Duration::from_millis(99) && elapsed < Duration::from_millis(300),
        "{elapsed:?}"
    );
}
