//! `get_ranges` as a real store answers it, without the panic of
//! object_store's default.
//!
//! A real store answers a GET whose range runs past the end of the object
//! with the bytes that exist (HTTP 206 with the clamped `Content-Range`), and
//! one that starts at or past the end with an error (416). object_store's
//! default `get_ranges` (its `coalesce_ranges`) coalesces nearby ranges into
//! one GET and slices each requested range out of the body, clamped to its
//! length; a requested range that starts past the end of a short body
//! panics there (object_store 0.13.2). The wrappers of this crate stand in
//! for S3 in tests and benchmarks, so they answer exactly as the default
//! does — the same GETs, the same clamped slices — except that such a range
//! fails the call with an error naming it.

use std::ops::Range;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Error, GetOptions, OBJECT_STORE_COALESCE_DEFAULT, ObjectStore, Result, coalesce_ranges,
};

/// `ranges` of `location`, fetched through `store.get_opts` in requests
/// coalesced as object_store's default `get_ranges` coalesces them and cut
/// as it cuts them; an error where it would panic.
pub(crate) async fn get_ranges_bounded<S: ObjectStore + ?Sized>(
    store: &S,
    location: &Path,
    ranges: &[Range<u64>],
) -> Result<Vec<Bytes>> {
    coalesce_ranges(
        ranges,
        |request| async move {
            let options = GetOptions::new().with_range(Some(request.clone()));
            let answer = store.get_opts(location, options).await?;
            let size = answer.meta.size;
            let body = answer.bytes().await?;
            let body_end = request.start + body.len() as u64;
            // The ranges this request serves (coalescing merges ranges that
            // overlap or lie close, so each lies within one request).
            let past_the_end = ranges
                .iter()
                .find(|r| r.start >= request.start && r.end <= request.end && r.start > body_end);
            match past_the_end {
                Some(range) => Err(Error::Generic {
                    store: "SimulatedStore",
                    source: format!(
                        "{location}: range {}..{} starts past the end of the {} bytes returned \
                         for {}..{} (the object has {size} bytes)",
                        range.start,
                        range.end,
                        body.len(),
                        request.start,
                        request.end
                    )
                    .into(),
                }),
                None => Ok(body),
            }
        },
        OBJECT_STORE_COALESCE_DEFAULT,
    )
    .await
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    use super::*;

    async fn store() -> (InMemory, Path) {
        let store = InMemory::new();
        let path = Path::from("f");
        store.put(&path, vec![7u8; 1000].into()).await.unwrap();
        (store, path)
    }

    #[tokio::test]
    async fn ranges_inside_the_object_come_back_whole() {
        let (store, path) = store().await;
        let parts = get_ranges_bounded(&store, &path, &[0..10, 500..1000])
            .await
            .unwrap();
        assert_eq!(parts.iter().map(Bytes::len).collect::<Vec<_>>(), [10, 500]);
    }

    /// As a real store and object_store's default: the bytes that exist.
    #[tokio::test]
    async fn a_range_that_runs_past_the_end_is_clamped_as_a_real_store_clamps_it() {
        let (store, path) = store().await;
        let parts = get_ranges_bounded(&store, &path, &[0..10, 900..1100])
            .await
            .unwrap();
        assert_eq!(parts.iter().map(Bytes::len).collect::<Vec<_>>(), [10, 100]);
    }

    /// object_store's default would clamp the merged request to 100..1000
    /// and panic slicing 4900.. out of a 900-byte body.
    #[tokio::test]
    async fn a_range_that_starts_past_the_end_is_an_error_not_a_panic() {
        let (store, path) = store().await;
        let err = get_ranges_bounded(&store, &path, &[100..200, 5000..6000])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("range 5000..6000 starts past the end of the 900 bytes returned for 100..6000 (the object has 1000 bytes)"),
            "{err}"
        );
        // Alone, the store itself refuses it (a real store's 416).
        let at_the_end = 1000..1010;
        let err = get_ranges_bounded(&store, &path, std::slice::from_ref(&at_the_end))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("but object was only 1000 bytes"), "{err}");
    }
}
