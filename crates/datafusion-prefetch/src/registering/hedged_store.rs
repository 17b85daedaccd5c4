//! The stores a registration reads through: each LIST's first page and each
//! GET hedged as [`MetadataHedges`] decide, everything else passed on.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result as DataFusionResult;
use datafusion::execution::object_store::ObjectStoreRegistry;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use parking_lot::Mutex;
use tokio::time::Instant;
use url::Url;

use super::hedges::MetadataHedges;
use crate::io::first_of_two;

/// An [`ObjectStore`] whose GETs and LISTs are sent again beside themselves
/// when slow to answer (a LIST only until its first page: the pages after
/// it follow the one that answered). Writes, deletes, copies and
/// `list_with_delimiter` are passed on as they are.
pub(crate) struct HedgedStore {
    inner: Arc<dyn ObjectStore>,
    hedges: Arc<Mutex<MetadataHedges>>,
}

impl HedgedStore {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, hedges: Arc<Mutex<MetadataHedges>>) -> Self {
        Self { inner, hedges }
    }
}

impl fmt::Display for HedgedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HedgedStore({})", self.inner)
    }
}

impl fmt::Debug for HedgedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HedgedStore({:?})", self.inner)
    }
}

/// The first page of `listing` (its first entry, or its end) and the rest of
/// it; a first page that is an error is the listing's error.
async fn first_page(
    mut listing: BoxStream<'static, Result<ObjectMeta>>,
) -> Result<(Option<ObjectMeta>, BoxStream<'static, Result<ObjectMeta>>)> {
    match listing.next().await {
        Some(Err(e)) => Err(e),
        first => Ok((first.transpose()?, listing)),
    }
}

#[async_trait]
impl ObjectStore for HedgedStore {
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
        let started = Instant::now();
        let (answer, _) = first_of_two(
            || self.inner.get_opts(location, options.clone()),
            std::future::ready(()),
            || self.hedges.lock().get_after(),
            || Some(()),
        )
        .await?;
        self.hedges.lock().observe_get(started.elapsed());
        Ok(answer)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = Arc::clone(&self.inner);
        let hedges = Arc::clone(&self.hedges);
        let prefix = prefix.cloned();
        stream::once(async move {
            let started = Instant::now();
            let answer = first_of_two(
                || first_page(inner.list(prefix.as_ref())),
                std::future::ready(()),
                || hedges.lock().list_after(),
                || Some(()),
            )
            .await;
            match answer {
                Ok(((first, rest), _)) => {
                    hedges.lock().observe_list(started.elapsed());
                    stream::iter(first.map(Ok)).chain(rest).boxed()
                }
                Err(e) => stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
        .boxed()
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

/// A session's [`ObjectStoreRegistry`] as a registration sees it: each store
/// wrapped in one [`HedgedStore`] (so every table on it shares what it
/// measures), registrations passed on to the session's registry.
pub(crate) struct HedgedRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    /// A store's hedges before it has measured anything.
    unmeasured: MetadataHedges,
    /// Each store's hedges, by its URL (`s3://bucket`).
    stores: Mutex<HashMap<String, Arc<Mutex<MetadataHedges>>>>,
}

impl fmt::Debug for HedgedRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgedRegistry")
            .field("inner", &self.inner)
            .field("stores", &self.stores.lock().keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The part of a table URL that names its store (`s3://bucket`).
fn store_key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

impl HedgedRegistry {
    pub(crate) fn new(inner: Arc<dyn ObjectStoreRegistry>, unmeasured: MetadataHedges) -> Self {
        Self {
            inner,
            unmeasured,
            stores: Mutex::default(),
        }
    }
}

impl ObjectStoreRegistry for HedgedRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> DataFusionResult<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> DataFusionResult<Arc<dyn ObjectStore>> {
        let store = self.inner.get_store(url)?;
        let hedges = Arc::clone(
            self.stores
                .lock()
                .entry(store_key(url))
                .or_insert_with(|| Arc::new(Mutex::new(self.unmeasured.clone()))),
        );
        Ok(Arc::new(HedgedStore::new(store, hedges)))
    }
}
