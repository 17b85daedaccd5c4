//! Body faults of [`FaultyStore`]: truncated (loudly, silently, hanging)
//! and corrupted bodies, across chunks.

use super::*;

#[tokio::test]
async fn truncated_body_fails_like_a_short_http_body() {
    let store = store_with(&[("a", 1000)])
        .await
        .with_rule(FaultRule::new(Fault::truncate(40)));
    let a = Path::from("a");

    // The response still advertises the full range...
    let result = store
        .get_opts(&a, GetOptions::new().with_range(Some(100..200)))
        .await
        .unwrap();
    assert_eq!(result.range, 100..200);
    // ...but the body delivers 40 bytes, then an error.
    let mut body = result.into_stream();
    assert_eq!(
        body.try_next().await.unwrap().unwrap(),
        slice(1000, 100..140)
    );
    let err = body.try_next().await.unwrap_err();
    let fault = injected(&err);
    assert_eq!(fault.kind, FaultKind::Truncate);
    assert_eq!(fault.delivered, Some((40, 100)));
    assert_eq!(
        fault.to_string(),
        "injected truncation on GET #0 of a (bytes 100..200), rule 0: \
         response body ended after 40 of 100 bytes"
    );
    assert!(body.try_next().await.unwrap().is_none());

    // `bytes()`, `get_range` and `get_ranges` all surface the error.
    let result = store.get(&a).await.unwrap();
    assert!(result.bytes().await.is_err());
    assert!(store.get_range(&a, 0..10).await.is_err());
    assert!(store.get_ranges(&a, &[0..10, 500..600]).await.is_err());
    assert_eq!(store.stats().injected(FaultKind::Truncate), 4);
}

#[tokio::test]
async fn silently_truncated_body_is_short_but_ok() {
    let store = store_with(&[("a", 1000)])
        .await
        .with_rule(FaultRule::new(Fault::truncate_silently(40)).once())
        .with_rule(FaultRule::new(Fault::truncate_silently(u64::MAX)).once());
    let a = Path::from("a");

    // object_store does not check the body length: only a comparison with
    // `GetResult::range` reveals the truncation.
    let result = store
        .get_opts(&a, GetOptions::new().with_range(Some(100..200)))
        .await
        .unwrap();
    let range = result.range.clone();
    let bytes = result.bytes().await.unwrap();
    assert_eq!(bytes, slice(1000, 100..140));
    assert!((bytes.len() as u64) < range.end - range.start);

    // `keep` beyond the body is capped: the body is still one byte short.
    let bytes = store.get_range(&a, 100..200).await.unwrap();
    assert_eq!(bytes, slice(1000, 100..199));

    assert_eq!(store.get_range(&a, 100..200).await.unwrap().len(), 100);
}

#[tokio::test(start_paused = true)]
async fn truncated_body_can_hang_mid_stream() {
    let store = store_with(&[("a", 100)])
        .await
        .with_rule(FaultRule::new(Fault::Truncate {
            keep: 10,
            mode: TruncateMode::Stall,
        }));
    let a = Path::from("a");
    let mut body = store.get(&a).await.unwrap().into_stream();
    assert_eq!(body.try_next().await.unwrap().unwrap(), slice(100, 0..10));
    assert!(
        timeout(Duration::from_secs(3600), body.try_next())
            .await
            .is_err()
    );
    drop(body);
    assert!(
        timeout(Duration::from_secs(60), store.get_range(&a, 0..50))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn corrupted_body_has_the_right_length_and_flipped_bytes() {
    let store = store_with(&[("a", 1000)])
        .await
        .with_rule(FaultRule::new(Fault::flip_byte(5)).once())
        .with_rule(
            FaultRule::new(Fault::Corrupt {
                offset: 10_000,
                len: 3,
            })
            .once(),
        );
    let a = Path::from("a");
    let expected = slice(1000, 100..200);

    let got = store.get_range(&a, 100..200).await.unwrap();
    assert_eq!(got.len(), expected.len());
    let differing: Vec<usize> = (0..got.len()).filter(|&i| got[i] != expected[i]).collect();
    assert_eq!(differing, [5]);
    assert_eq!(got[5], expected[5] ^ 0xFF);

    // An offset past the body is capped at its last byte.
    let got = store.get_range(&a, 100..200).await.unwrap();
    assert_eq!(got[..99], expected[..99]);
    assert_eq!(got[99], expected[99] ^ 0xFF);

    assert_eq!(store.get_range(&a, 100..200).await.unwrap(), expected);
    assert_eq!(store.stats().injected(FaultKind::Corrupt), 2);
}

/// An object-offset corruption flips the same object bytes whatever range
/// the request covers, and leaves requests that do not carry them intact.
#[tokio::test]
async fn an_object_corruption_hits_the_same_bytes_whatever_the_request() {
    let store = store_with(&[("a", 1000)]).await.with_rule(
        FaultRule::new(Fault::CorruptObject { start: 150, len: 2 }).overlapping(150..152),
    );
    let a = Path::from("a");
    let whole = pattern(1000);
    for range in [100..200, 151..152, 0..1000, 149..151] {
        let got = store.get_range(&a, range.clone()).await.unwrap();
        let expected = &whole[range.start as usize..range.end as usize];
        assert_eq!(got.len(), expected.len(), "{range:?}");
        let differing: Vec<u64> = (0..got.len())
            .filter(|&i| got[i] != expected[i])
            .map(|i| range.start + i as u64)
            .collect();
        let flipped: Vec<u64> = (150..152).filter(|o| range.contains(o)).collect();
        assert_eq!(differing, flipped, "{range:?}");
    }
    // Not carrying the bytes: untouched and not counted.
    assert_eq!(
        store.get_range(&a, 0..150).await.unwrap(),
        whole[..150].to_vec()
    );
    assert_eq!(store.stats().injected(FaultKind::Corrupt), 4);
}

/// A body fault applied directly to a stream of `chunk`-byte pieces.
async fn faulty_body(size: u64, chunk: usize, fault: BodyFault) -> Vec<Result<Bytes>> {
    let data = Bytes::from(pattern(size));
    let pieces: Vec<Result<Bytes>> = (0..data.len())
        .step_by(chunk)
        .map(|s| Ok(data.slice(s..(s + chunk).min(data.len()))))
        .collect();
    let injection = Injection {
        request: 0,
        path: "a".to_string(),
        rule: 0,
        label: None,
    };
    FaultyBody::new(
        futures::stream::iter(pieces).boxed(),
        0..size,
        fault,
        injection,
    )
    .collect()
    .await
}

fn lengths(items: &[Result<Bytes>]) -> Vec<Option<usize>> {
    items
        .iter()
        .map(|i| i.as_ref().ok().map(Bytes::len))
        .collect()
}

#[tokio::test]
async fn body_faults_apply_across_chunks() {
    let truncate = |keep, mode| BodyFault::Truncate { keep, mode };
    let items = faulty_body(50, 7, truncate(20, TruncateMode::Error)).await;
    assert_eq!(lengths(&items), [Some(7), Some(7), Some(6), None]);
    let items = faulty_body(50, 7, truncate(21, TruncateMode::EndEarly)).await;
    assert_eq!(lengths(&items), [Some(7), Some(7), Some(7)]);
    let items = faulty_body(50, 7, truncate(0, TruncateMode::Error)).await;
    assert_eq!(lengths(&items), [None]);
    // An empty body cannot be shortened, but can still end in an error.
    assert_eq!(
        lengths(&faulty_body(0, 7, truncate(5, TruncateMode::Error)).await),
        [None]
    );
    assert!(
        faulty_body(0, 7, truncate(5, TruncateMode::EndEarly))
            .await
            .is_empty()
    );

    let corrupt = |offset, len| BodyFault::Corrupt { offset, len };
    let items = faulty_body(50, 7, corrupt(5, 10)).await;
    let got: Vec<u8> = items.into_iter().flat_map(|i| i.unwrap()).collect();
    let original = pattern(50);
    let differing: Vec<usize> = (0..50).filter(|&i| got[i] != original[i]).collect();
    assert_eq!(differing, (5..15).collect::<Vec<_>>());
    let got: Vec<u8> = faulty_body(50, 7, corrupt(0, 0))
        .await
        .into_iter()
        .flat_map(|i| i.unwrap())
        .collect();
    assert_eq!(got, original);
}
