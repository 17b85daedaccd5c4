//! The async side of planning-time footer read-ahead: carries out a
//! [`FooterReadPlan`] with DataFusion's own metadata reader, so each footer
//! lands in the runtime's file-metadata cache exactly as schema inference
//! would put it there, and reserves the reads beyond DataFusion's own in the
//! [`PrefetchGovernor`].

use std::sync::{Arc, Weak};

use bytes::Bytes;
use datafusion::catalog::Session;
use datafusion::common::{Result, exec_err};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion_datasource_parquet::metadata::DFParquetMetadata;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use object_store::memory::InMemory;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};
use parquet::file::metadata::ParquetMetaData;

use super::read_plan::{FooterReadLimits, FooterReadPlan, FooterStep};
use crate::config::{PrefetchOptions, PrefetchPolicy, planning_footer_depth};
use crate::governor::{Hold, Notice, PrefetchGovernor, Tenant};
use crate::pacing::PacedStore;
use crate::sharing::KeptKey;

/// What one read-ahead did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FootersRead {
    /// Footers read from the store into the metadata cache.
    pub landed: usize,
    /// Reads that failed (left for DataFusion's own read to report).
    pub failed: usize,
    /// Objects whose footer was cached already.
    pub already_cached: usize,
    /// Objects read whole and kept for the scan, under `auto`.
    pub kept: Vec<KeptKey>,
}

/// Read the footers of `objects` into `state`'s file-metadata cache, more at
/// once than DataFusion would, before DataFusion infers their schema from
/// that cache. Does nothing under policy `off`, for encrypted tables (whose
/// footers DataFusion does not cache), or when the depth allowed
/// (`prefetch.file_open_depth`) is no more than DataFusion's own
/// `meta_fetch_concurrency`. Never fails: at the first footer that cannot be
/// read it stops, and DataFusion reads that footer again and reports why.
pub(crate) async fn read_footers_ahead(
    state: &dyn Session,
    store: &Arc<dyn ObjectStore>,
    objects: &[ObjectMeta],
    format: &ParquetFormat,
) -> FootersRead {
    let options = PrefetchOptions::of(state.config_options());
    let crypto = &format.options().crypto;
    if options.policy() == PrefetchPolicy::Off
        || crypto.file_decryption.is_some()
        || crypto.factory_id.is_some()
    {
        return FootersRead::default();
    }
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let (cached, to_read): (Vec<&ObjectMeta>, Vec<&ObjectMeta>) =
        objects.iter().partition(|object| {
            cache
                .get(&object.location)
                .is_some_and(|entry| entry.is_valid_for(object))
        });
    let sizes: Vec<u64> = to_read.iter().map(|object| object.size).collect();
    let size_hint = format.metadata_size_hint().map(|hint| hint as u64);
    let limits = FooterReadLimits {
        depth: planning_footer_depth(&options),
        unreserved: state
            .config_options()
            .execution
            .meta_fetch_concurrency
            .get(),
        cache_room: cache_room(cache.cache_limit() as u64),
    };
    let mut plan = FooterReadPlan::new(&sizes, size_hint, limits);
    let mut done = FootersRead {
        already_cached: cached.len(),
        ..FootersRead::default()
    };
    if !plan.is_worthwhile() {
        return done;
    }
    let governor = PrefetchGovernor::of(state.runtime_env());
    // Under `auto` the footers go through the store's window of requests in
    // flight, the one its scans share, so planning backs off a throttling
    // store too.
    let paced: Arc<dyn ObjectStore> = match options.policy() {
        PrefetchPolicy::Auto => Arc::new(PacedStore::new(
            Arc::clone(store),
            governor.request_gate(store),
        )),
        _ => Arc::clone(store),
    };
    // Under `auto` an object the footer read reads whole is kept for the
    // scan (known by the store planning was given, as the scan knows it).
    let keeps = options.policy() == PrefetchPolicy::Auto;
    let origin = store;
    let store = &paced;
    // Holds end with their reads, so the share is never asked to shed.
    let share = governor.join(Weak::<Unnotified>::new());
    let governor = &governor;
    let read = |object: &ObjectMeta, hold: Option<Hold>| {
        let cache = Arc::clone(&cache);
        let object = object.clone();
        async move {
            let whole = keeps && object.size > 0 && size_hint.is_some_and(|h| object.size <= h);
            let landed = if whole {
                let read = read_whole(store.as_ref(), &object, size_hint, cache).await;
                read.map(|(metadata, body)| {
                    let key = KeptKey::new(
                        origin,
                        object.location.clone(),
                        object.size,
                        object.last_modified.timestamp_micros(),
                    );
                    let kept = governor.keep_whole(key.clone(), origin, body);
                    (metadata, kept.then_some(key))
                })
            } else {
                DFParquetMetadata::new(store.as_ref(), &object)
                    .with_metadata_size_hint(size_hint.map(|hint| hint as usize))
                    .with_file_metadata_cache(Some(cache))
                    .fetch_metadata()
                    .await
                    .map(|metadata| (metadata, None))
            };
            drop(hold);
            // The cache counts its key as well as the footer.
            let key_bytes = object.location.as_ref().len();
            landed.map(|(metadata, kept)| ((metadata.memory_size() + key_bytes) as u64, kept))
        }
    };
    let mut in_flight = FuturesUnordered::new();
    loop {
        match plan.step() {
            FooterStep::Read { index, reserve } => {
                let hold = match reserve {
                    None => None,
                    Some(bytes) => {
                        share.read_asked();
                        match share.try_reserve(bytes, 0) {
                            Some(hold) => Some(hold),
                            None => {
                                plan.refused(index);
                                continue;
                            }
                        }
                    }
                };
                in_flight.push(read(to_read[index], hold));
            }
            FooterStep::Wait | FooterStep::Done => match in_flight.next().await {
                Some(Ok((cache_bytes, kept))) => {
                    plan.landed(cache_bytes);
                    done.landed += 1;
                    done.kept.extend(kept);
                }
                Some(Err(error)) => {
                    log::debug!("footer read ahead at planning failed: {error}");
                    plan.failed();
                    done.failed += 1;
                }
                None => return done,
            },
        }
    }
}

/// The footer of `object`, no larger than `size_hint`, into `cache` — read
/// as DataFusion's metadata reader would read it, in one GET of the whole
/// object — and the object's body, to keep for the scan.
async fn read_whole(
    store: &dyn ObjectStore,
    object: &ObjectMeta,
    size_hint: Option<u64>,
    cache: Arc<FileMetadataCache>,
) -> Result<(Arc<ParquetMetaData>, Bytes)> {
    let body = store.get_range(&object.location, 0..object.size).await?;
    if body.len() as u64 != object.size {
        return exec_err!(
            "{}: {} bytes read of an object listed at {}",
            object.location,
            body.len(),
            object.size
        );
    }
    // The metadata reader reads the body as it would read the store.
    let local = InMemory::new();
    local
        .put(&object.location, PutPayload::from_bytes(body.clone()))
        .await?;
    let metadata = DFParquetMetadata::new(&local, object)
        .with_metadata_size_hint(size_hint.map(|hint| hint as usize))
        .with_file_metadata_cache(Some(cache))
        .fetch_metadata()
        .await?;
    Ok((metadata, body))
}

/// How much of a metadata cache of `limit` bytes footers read ahead may
/// fill. Never all of it: once the cache is full, DataFusion's first miss
/// evicts the least recently used footer — one read ahead that it has not
/// asked for yet — and each miss after it the next, so a cache filled to the
/// byte would have every footer read ahead read again. The tenth left free
/// absorbs footers larger than the mean the plan projects with.
fn cache_room(limit: u64) -> u64 {
    limit - limit / 10
}

/// The read-ahead's share in the governor takes no notices: its holds end
/// as its reads land, and a refused read waits for a landing instead.
struct Unnotified;

impl Tenant for Unnotified {
    fn notify(&self, _: Notice) {}
}
