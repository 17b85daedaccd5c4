//! The reader factory a scan's wrapped `ParquetSource` would use, and
//! whether its readers read the store plainly.

use std::fmt;
use std::sync::Arc;

use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion_datasource_parquet::{
    CachedParquetFileReaderFactory, DefaultParquetFileReaderFactory, ParquetFileReaderFactory,
};
use object_store::ObjectStore;

/// The factory whose readers read `store` as a `ParquetSource` would: the
/// factory it was `given`, else DataFusion's (through the metadata `cache`
/// when the runtime has one).
pub(crate) fn wrapped_reader_factory(
    given: Option<&Arc<dyn ParquetFileReaderFactory>>,
    cache: Option<&Arc<FileMetadataCache>>,
    store: &Arc<dyn ObjectStore>,
) -> Arc<dyn ParquetFileReaderFactory> {
    match (given, cache) {
        (Some(factory), _) => Arc::clone(factory),
        (None, Some(cache)) => Arc::new(CachedParquetFileReaderFactory::new(
            Arc::clone(store),
            Arc::clone(cache),
        )),
        (None, None) => Arc::new(DefaultParquetFileReaderFactory::new(Arc::clone(store))),
    }
}

/// Whether `factory` is one of DataFusion's own, whose readers fetch data
/// with plain store reads (`DefaultParquetFileReaderFactory`, and
/// `CachedParquetFileReaderFactory`, which `ParquetFormat` sets on every
/// scan of a listing table to cache footers): a scan may then fetch its
/// data itself, keeping the factory for footers. The trait offers no
/// downcast, so its type is told by the start of its `Debug` text (only
/// that much is formatted); `a_normal_table_owns_its_demand_reads` in the
/// integration tests fails if DataFusion renames them.
pub(crate) fn reads_plain_store(factory: &dyn ParquetFileReaderFactory) -> bool {
    const OWN: [&str; 2] = [
        "CachedParquetFileReaderFactory ",
        "DefaultParquetFileReaderFactory ",
    ];
    let mut name = Prefix(String::new());
    // The writer refuses everything past the longest name: `Err` is expected.
    let _ = fmt::write(&mut name, format_args!("{factory:?}"));
    OWN.iter().any(|own| name.0.starts_with(own))
}

/// A `fmt::Write` that keeps the first few characters and refuses the rest.
struct Prefix(String);

impl fmt::Write for Prefix {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = 40usize.saturating_sub(self.0.len());
        let taken: String = s.chars().take(room).collect();
        self.0.push_str(&taken);
        if taken.len() < s.len() {
            return Err(fmt::Error);
        }
        Ok(())
    }
}
