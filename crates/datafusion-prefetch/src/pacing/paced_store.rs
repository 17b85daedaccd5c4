//! [`PacedStore`]: an [`ObjectStore`] whose GETs go through a store's
//! [`RequestGate`], for the reads `auto` makes through readers it does not
//! write itself (footers, read by DataFusion's metadata reader).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

use super::gate::{Permit, RequestGate, Sent};
use super::outcome::Outcome;

/// A store whose every GET (each range of `get_ranges` too) is a read
/// ahead through `gate` ([`RequestGate::read_ahead`]): it waits for room in
/// the window, is sent again if a cut withdraws it before it answers, holds
/// its room until its body is read or dropped, and tells the window how it
/// answered (its first byte, or the error). Everything else is passed on
/// unpaced.
pub(crate) struct PacedStore {
    inner: Arc<dyn ObjectStore>,
    gate: Arc<RequestGate>,
}

impl PacedStore {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, gate: Arc<RequestGate>) -> Self {
        Self { inner, gate }
    }
}

impl fmt::Display for PacedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PacedStore({})", self.inner)
    }
}

impl fmt::Debug for PacedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PacedStore({:?})", self.inner)
    }
}

/// A permit that ends, with what the request's first answer said, when the
/// body it came with is read or dropped.
struct EndsWithBody {
    permit: Option<Permit>,
    outcome: Outcome,
}

impl Drop for EndsWithBody {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            permit.ended(self.outcome);
        }
    }
}

/// The answer of a GET sent through a gate, its permit ended now if it
/// failed (with what the error says of the store), else once its body is
/// read or dropped (with its first byte's time).
fn held_until_read(sent: Sent<Result<GetResult>>) -> Result<GetResult> {
    let answer = match sent.answer {
        Ok(answer) => answer,
        Err(error) => {
            sent.permit.ended(Outcome::of_error(&error));
            return Err(error);
        }
    };
    let outcome = Outcome::Answered(sent.at.elapsed());
    let payload = match answer.payload {
        GetResultPayload::Stream(body) => {
            let held = EndsWithBody {
                permit: Some(sent.permit),
                outcome,
            };
            GetResultPayload::Stream(
                body.map(move |chunk| {
                    let _ = &held;
                    chunk
                })
                .boxed(),
            )
        }
        file @ GetResultPayload::File(..) => {
            sent.permit.ended(outcome);
            file
        }
    };
    Ok(GetResult { payload, ..answer })
}

#[async_trait]
impl ObjectStore for PacedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let sent = self
            .gate
            .read_ahead(None, || self.inner.get_opts(location, options.clone()))
            .await;
        held_until_read(sent)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion_prefetch_simstore::{
        RequestRateLimit, RetryModel, SimulatedStore, SimulatedStoreConfig, ThrottleAnswer,
    };
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_get_holds_room_until_its_body_is_read_and_waits_for_room() {
        let inner = Arc::new(InMemory::new());
        let path = Path::from("a");
        inner
            .put(&path, PutPayload::from_static(b"footer"))
            .await
            .unwrap();
        let gate = Arc::new(RequestGate::new(1));
        let store = PacedStore::new(inner, Arc::clone(&gate));

        let answer = store.get(&path).await.unwrap();
        assert_eq!(gate.state().in_flight, 1, "the body is not read yet");
        let blocked = tokio::time::timeout(Duration::from_millis(10), store.get(&path)).await;
        assert!(blocked.is_err(), "a second GET waits for room");
        assert_eq!(&answer.bytes().await.unwrap()[..], b"footer");
        assert_eq!(gate.state().in_flight, 0);

        let ranges = store.get_ranges(&path, &[0..2, 4..6]).await.unwrap();
        assert_eq!(ranges, [&b"fo"[..], &b"er"[..]]);
        assert_eq!(gate.state().in_flight, 0);
    }

    /// GCS throttles with `429`: a GET whose client gave up on them cuts
    /// the window at once, as one that gave up on `503`s does.
    #[tokio::test]
    async fn a_get_whose_client_gave_up_on_429s_cuts_the_window() {
        for answer in [ThrottleAnswer::SlowDown, ThrottleAnswer::TooManyRequests] {
            // One request a second, and a client that does not retry.
            let limit = RequestRateLimit::per_second(1).with_answer(answer);
            let config = SimulatedStoreConfig::none()
                .with_rate_limit(Some(limit))
                .with_retry(RetryModel {
                    max_retries: 0,
                    ..RetryModel::default()
                });
            let inner = SimulatedStore::new(InMemory::new(), config);
            let path = Path::from("data/a");
            inner
                .inner()
                .put(&path, PutPayload::from_static(b"footer"))
                .await
                .unwrap();
            let gate = Arc::new(RequestGate::new(8));
            let store = PacedStore::new(Arc::new(inner), Arc::clone(&gate));
            store.get(&path).await.unwrap().bytes().await.unwrap();
            let refused = store.get(&path).await.unwrap_err().to_string();
            let status = match answer {
                ThrottleAnswer::SlowDown => "503 Service Unavailable",
                ThrottleAnswer::TooManyRequests => "429 Too Many Requests",
            };
            assert!(refused.contains(status), "{refused}");
            let stats = gate.stats();
            assert_eq!(stats.counts.cuts_on_give_ups, 1, "{answer:?}: {refused}");
            assert!(stats.state.limit < 8, "{answer:?}: {:?}", stats.state);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_get_gives_its_room_back() {
        let gate = Arc::new(RequestGate::new(1));
        let store = PacedStore::new(Arc::new(InMemory::new()), Arc::clone(&gate));
        assert!(store.get(&Path::from("missing")).await.is_err());
        assert_eq!(gate.state().in_flight, 0);
    }
}
