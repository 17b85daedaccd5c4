//! The async side of planning-time footer read-ahead: carries out a
//! [`FooterReadPlan`] with DataFusion's own metadata reader, so each footer
//! lands in the runtime's file-metadata cache exactly as schema inference
//! would put it there, and reserves the reads beyond DataFusion's own in the
//! [`PrefetchGovernor`].

use std::sync::{Arc, Weak};

use datafusion::catalog::Session;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion_datasource_parquet::metadata::DFParquetMetadata;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use object_store::{ObjectMeta, ObjectStore};

use super::read_plan::{FooterReadLimits, FooterReadPlan, FooterStep};
use crate::config::{PrefetchOptions, PrefetchPolicy, planning_footer_depth};
use crate::governor::{Hold, Notice, PrefetchGovernor, Tenant};
use crate::pacing::PacedStore;

/// What one read-ahead did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FootersRead {
    /// Footers read from the store into the metadata cache.
    pub landed: usize,
    /// Reads that failed (left for DataFusion's own read to report).
    pub failed: usize,
    /// Objects whose footer was cached already.
    pub already_cached: usize,
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
    let store = &paced;
    // Holds end with their reads, so the share is never asked to shed.
    let share = governor.join(Weak::<Unnotified>::new());
    let read = |object: &ObjectMeta, hold: Option<Hold>| {
        let cache = Arc::clone(&cache);
        let object = object.clone();
        async move {
            let landed = DFParquetMetadata::new(store.as_ref(), &object)
                .with_metadata_size_hint(size_hint.map(|hint| hint as usize))
                .with_file_metadata_cache(Some(cache))
                .fetch_metadata()
                .await;
            drop(hold);
            // The cache counts its key as well as the footer.
            let key_bytes = object.location.as_ref().len();
            landed.map(|metadata| (metadata.memory_size() + key_bytes) as u64)
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
                Some(Ok(cache_bytes)) => {
                    plan.landed(cache_bytes);
                    done.landed += 1;
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
