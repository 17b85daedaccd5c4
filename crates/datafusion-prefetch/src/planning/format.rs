//! [`PrefetchingParquetFormat`]: DataFusion's `ParquetFormat`, with the
//! footers it reads at planning time read ahead.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::{GetExt, Result, Statistics, internal_err};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::parquet::{ParquetFormat, ParquetFormatFactory};
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSinkConfig, FileSource};
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_expr_common::sort_expr::LexRequirement;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_datasource::TableSchema;
use datafusion_datasource::file_format::FileMeta;
use object_store::{ObjectMeta, ObjectStore};

use super::read_ahead::read_footers_ahead;
use crate::PrefetchGovernor;

/// A `FileFormat` that is DataFusion's [`ParquetFormat`] in everything but
/// one: before it infers a table's schema — which reads the footer of every
/// file — it reads those footers into the runtime's file-metadata cache
/// with up to `prefetch.file_open_depth` requests at once (`auto`: 256 under
/// the `auto` policy) instead of DataFusion's `meta_fetch_concurrency` (32).
/// Schema inference, and the statistics DataFusion collects from the same
/// footers when it plans a scan, then find them cached. On a store with 20 ms
/// per request that takes planning over 10,000 files from 7.0 s to 1.2 s
/// ([benchmarks](https://github.com/datafusion-prefetch/datafusion-prefetch/blob/main/docs/benchmarks.md), `many_files`).
///
/// Under `auto` the reads also wait for room in the store's window of
/// requests in flight, the one its scans share, which narrows when the
/// store throttles (`503 SlowDown`); and a file no larger than the
/// `metadata_size_hint`, which the footer read reads whole, is kept (under
/// the governor) for the scan, which then cuts its data from it instead of
/// asking the store a second time.
/// The reads beyond DataFusion's own are reserved in the runtime's
/// [`PrefetchGovernor`](crate::PrefetchGovernor) while in flight; reading
/// stops where the metadata cache would start evicting footers read ahead.
/// Under policy `off`, and for encrypted files, it is `ParquetFormat`
/// exactly. At a footer that cannot be read ahead the read-ahead stops;
/// DataFusion reads it again and reports its error as it would have.
///
/// [`PrefetchingParquetTable`](crate::PrefetchingParquetTable) uses it; a
/// `ListingTable` built by hand can too:
///
/// ```
/// use std::sync::Arc;
/// use datafusion::datasource::file_format::parquet::ParquetFormat;
/// use datafusion::datasource::listing::ListingOptions;
/// use datafusion_prefetch::PrefetchingParquetFormat;
///
/// let format = PrefetchingParquetFormat::new(ParquetFormat::default());
/// let options = ListingOptions::new(Arc::new(format)).with_file_extension(".parquet");
/// ```
///
/// `CREATE EXTERNAL TABLE … STORED AS PARQUET` gets it once
/// [`PrefetchingParquetFormatFactory`] is registered in the session.
/// `SessionContext::register_parquet` and `read_parquet` build their
/// `ParquetFormat` themselves, so their planning reads footers as stock
/// DataFusion does; their scans still prefetch.
#[derive(Debug, Clone, Default)]
pub struct PrefetchingParquetFormat {
    inner: Arc<ParquetFormat>,
}

impl PrefetchingParquetFormat {
    /// Wrap `format`, whose options (size hint, schema handling, …) apply.
    pub fn new(format: ParquetFormat) -> Self {
        Self {
            inner: Arc::new(format),
        }
    }

    /// The wrapped format.
    pub fn parquet_format(&self) -> &ParquetFormat {
        &self.inner
    }
}

/// The `parquet` [`FileFormatFactory`] of a session whose `CREATE EXTERNAL
/// TABLE … STORED AS PARQUET` (and `COPY … STORED AS PARQUET`) should make
/// [`PrefetchingParquetFormat`]s: DataFusion's `ParquetFormatFactory`, with
/// footers read ahead at planning.
///
/// Not registered by [`enable_prefetch`](crate::enable_prefetch): DataFusion's
/// protobuf codec serializes only its own Parquet format, so a session whose
/// logical plans are sent elsewhere (Ballista) must keep it. Elsewhere:
///
/// ```
/// use std::sync::Arc;
/// use datafusion::prelude::SessionContext;
/// use datafusion_prefetch::{PrefetchingParquetFormatFactory, enable_prefetch};
///
/// let ctx = SessionContext::new_with_state(enable_prefetch(SessionContext::new().state()));
/// ctx.state_ref()
///     .write()
///     .register_file_format(Arc::new(PrefetchingParquetFormatFactory::default()), true)
///     .unwrap();
/// ```
#[derive(Debug, Default)]
pub struct PrefetchingParquetFormatFactory {
    inner: ParquetFormatFactory,
}

impl GetExt for PrefetchingParquetFormatFactory {
    fn get_ext(&self) -> String {
        self.inner.get_ext()
    }
}

impl FileFormatFactory for PrefetchingParquetFormatFactory {
    fn create(
        &self,
        state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        let format: Arc<dyn Any + Send + Sync> = self.inner.create(state, format_options)?;
        match format.downcast::<ParquetFormat>() {
            Ok(parquet) => Ok(Arc::new(PrefetchingParquetFormat { inner: parquet })),
            Err(_) => internal_err!("ParquetFormatFactory made a format other than ParquetFormat"),
        }
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        Arc::new(PrefetchingParquetFormat::default())
    }
}

#[async_trait]
impl FileFormat for PrefetchingParquetFormat {
    fn get_ext(&self) -> String {
        self.inner.get_ext()
    }

    fn get_ext_with_compression(&self, compression: &FileCompressionType) -> Result<String> {
        self.inner.get_ext_with_compression(compression)
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        self.inner.compression_type()
    }

    async fn infer_schema(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        let read = read_footers_ahead(state, store, objects, &self.inner).await;
        log::debug!(
            "footers read ahead for schema inference: {} landed, {} failed, {} cached, {} kept",
            read.landed,
            read.failed,
            read.already_cached,
            read.kept.len()
        );
        let inferred = self.inner.infer_schema(state, store, objects).await;
        if inferred.is_err() {
            // No table, no scan: what was kept for it waits for no one.
            PrefetchGovernor::of(state.runtime_env()).forget_kept(read.kept);
        }
        inferred
    }

    async fn infer_stats(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Statistics> {
        self.inner
            .infer_stats(state, store, table_schema, object)
            .await
    }

    async fn infer_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Option<LexOrdering>> {
        self.inner
            .infer_ordering(state, store, table_schema, object)
            .await
    }

    async fn infer_stats_and_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<FileMeta> {
        self.inner
            .infer_stats_and_ordering(state, store, table_schema, object)
            .await
    }

    async fn create_physical_plan(
        &self,
        state: &dyn Session,
        conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.create_physical_plan(state, conf).await
    }

    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        state: &dyn Session,
        conf: FileSinkConfig,
        order_requirements: Option<LexRequirement>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner
            .create_writer_physical_plan(input, state, conf, order_requirements)
            .await
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        self.inner.file_source(table_schema)
    }
}
