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

    #[tokio::test(start_paused = true)]
    async fn a_failed_get_gives_its_room_back() {
        let gate = Arc::new(RequestGate::new(1));
        let store = PacedStore::new(Arc::new(InMemory::new()), Arc::clone(&gate));
        assert!(store.get(&Path::from("missing")).await.is_err());
        assert_eq!(gate.state().in_flight, 0);
    }
}
