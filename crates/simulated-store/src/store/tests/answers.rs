//! A [`SimulatedStore`] answers every request a reader makes as the store it
//! wraps does, apart from timing: the same bytes, metadata, ranges and
//! errors, for every kind of GET, HEAD and LIST. Two differences are by
//! design, both what S3, GCS, Azure and HTTP stores answer: a body is
//! always a stream (a wrapped `LocalFileSystem` answers with a file), and
//! `get_ranges` is object_store's default, coalescing ranges into GETs and
//! clamping each to the object (`ranges.rs`; `InMemory`'s and
//! `LocalFileSystem`'s own fail an empty range, and the latter one past
//! the end).

use object_store::local::LocalFileSystem;
use object_store::{GetOptions, ListResult, OBJECT_STORE_COALESCE_DEFAULT, coalesce_ranges};

use super::*;
use crate::RequestRateLimit;

const SIZE: u64 = 1000;

/// The objects every store under test holds.
const OBJECTS: [&str; 4] = ["dir/a", "dir/b", "dir/sub/c", "other"];

/// What a reader could learn of `store`'s answers, one line per request
/// (an error by its message). `default_get_ranges`: ask for several ranges
/// as object_store's default `get_ranges` does (as a remote store answers),
/// not through the store's own.
async fn transcript(store: &dyn ObjectStore, default_get_ranges: bool) -> Vec<String> {
    let a = Path::from("dir/a");
    let mut lines = vec![];
    let ranges = [
        None,
        Some(GetRange::Bounded(10..20)),
        Some(GetRange::Bounded(990..1010)),
        Some(GetRange::Bounded(1000..1010)),
        Some(GetRange::Offset(990)),
        Some(GetRange::Offset(2000)),
        Some(GetRange::Suffix(10)),
        Some(GetRange::Suffix(5000)),
    ];
    for range in ranges {
        let options = GetOptions::new().with_range(range.clone());
        lines.push(format!("get {range:?}: {}", get(store, &a, options).await));
    }
    let head = GetOptions {
        head: true,
        ..GetOptions::default()
    };
    lines.push(format!("get head: {}", get(store, &a, head).await));
    lines.push(format!("head: {:?}", store.head(&a).await.map(meta)));
    let missing = Path::from("dir/missing");
    let options = GetOptions::default();
    lines.push(format!(
        "get missing: {}",
        get(store, &missing, options).await
    ));
    for ranges in [&[0..10, 5..15, 990..1000, 0..0][..], &[0..10, 995..1005]] {
        let got = if default_get_ranges {
            let fetch = |range| store.get_range(&a, range);
            coalesce_ranges(ranges, fetch, OBJECT_STORE_COALESCE_DEFAULT).await
        } else {
            store.get_ranges(&a, ranges).await
        };
        lines.push(format!(
            "get_ranges {ranges:?}: {:?}",
            got.map(|b| b.concat())
        ));
    }
    for prefix in [None, Some(Path::from("dir")), Some(Path::from("nothing"))] {
        let listed: Result<Vec<_>> = store.list(prefix.as_ref()).try_collect().await;
        lines.push(format!("list {prefix:?}: {:?}", listed.map(metas)));
        let delimited = store.list_with_delimiter(prefix.as_ref()).await;
        lines.push(format!(
            "delimited {prefix:?}: {:?}",
            delimited.map(delimited_names)
        ));
    }
    let offset = store.list_with_offset(Some(&Path::from("dir")), &a);
    let after: Result<Vec<_>> = offset.try_collect().await;
    lines.push(format!("list after dir/a: {:?}", after.map(metas)));
    lines
}

async fn get(store: &dyn ObjectStore, location: &Path, options: GetOptions) -> String {
    let head = options.head;
    match store.get_opts(location, options).await {
        Ok(answer) => {
            let range = answer.range.clone();
            let attributes = format!("{:?}", answer.attributes);
            let meta = meta(answer.meta.clone());
            let body = if head {
                String::new()
            } else {
                format!("{:?}", answer.bytes().await.map(|b| b.to_vec()))
            };
            format!("{meta} range {range:?} attributes {attributes} body {body}")
        }
        Err(e) => format!("error {e}"),
    }
}

fn meta(meta: ObjectMeta) -> String {
    format!(
        "{} {} bytes, modified {}, e-tag {:?}, version {:?}",
        meta.location, meta.size, meta.last_modified, meta.e_tag, meta.version
    )
}

fn metas(mut listed: Vec<ObjectMeta>) -> Vec<String> {
    listed.sort_by(|a, b| a.location.cmp(&b.location));
    listed.into_iter().map(meta).collect()
}

fn delimited_names(listed: ListResult) -> (Vec<String>, Vec<String>) {
    let mut prefixes: Vec<String> = listed
        .common_prefixes
        .iter()
        .map(|p| p.to_string())
        .collect();
    prefixes.sort();
    (prefixes, metas(listed.objects))
}

async fn fill(store: &dyn ObjectStore) {
    for path in OBJECTS {
        store
            .put(&Path::from(path), pattern(SIZE).into())
            .await
            .unwrap();
    }
}

/// Every profile: none, fixed latency with a bandwidth and a connection cap,
/// `s3` (paged listings), and a rate limit that throttles most requests.
fn configs() -> [SimulatedStoreConfig; 4] {
    let limit = RequestRateLimit::per_second(50).with_burst(3);
    [
        SimulatedStoreConfig::none(),
        SimulatedStoreConfig::fixed(Duration::from_millis(5))
            .with_bandwidth(Some(100 * 1024))
            .with_max_connections(Some(2))
            .with_list_page_keys(Some(2)),
        SimulatedStoreConfig::s3().with_seed(11),
        SimulatedStoreConfig::fixed(Duration::from_millis(1))
            .with_list_page_keys(Some(2))
            .with_rate_limit(Some(limit)),
    ]
}

#[tokio::test]
async fn answers_are_the_wrapped_in_memory_stores() {
    for config in configs() {
        let bare: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        fill(bare.as_ref()).await;
        let expected = transcript(bare.as_ref(), true).await;
        let simulated = SimulatedStore::new(Arc::clone(&bare), config);
        same(transcript(&simulated, false).await, &expected, &config);
    }
}

/// Each line of `answers` is the line of `expected` (a mismatch names the
/// request, not the whole transcript).
fn same(answers: Vec<String>, expected: &[String], config: &SimulatedStoreConfig) {
    assert_eq!(answers.len(), expected.len());
    for (answer, expected) in answers.iter().zip(expected) {
        assert_eq!(answer, expected, "{config}");
    }
}

#[tokio::test]
async fn answers_are_the_wrapped_local_file_systems() {
    let dir = tempfile::tempdir().unwrap();
    let bare: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    fill(bare.as_ref()).await;
    let expected = transcript(bare.as_ref(), true).await;
    for config in configs() {
        let simulated = SimulatedStore::new(Arc::clone(&bare), config);
        same(transcript(&simulated, false).await, &expected, &config);
        // A body is a stream, not the file.
        let answer = simulated.get(&Path::from("dir/a")).await.unwrap();
        assert!(matches!(answer.payload, GetResultPayload::Stream(_)));
    }
    let answer = bare.get(&Path::from("dir/a")).await.unwrap();
    assert!(matches!(answer.payload, GetResultPayload::File(..)));
}
