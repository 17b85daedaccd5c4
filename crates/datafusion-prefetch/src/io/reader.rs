//! The decoder's view of the driver: a [`ParquetFileReaderFactory`] whose
//! readers are served by the scan's [`ScanDriver`].

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricCategory, MetricType,
};
use datafusion_datasource::PartitionedFile;
use datafusion_datasource_parquet::ParquetFileReaderFactory;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;

use super::driver::ScanDriver;
use crate::scheduler::FileId;

/// Creates readers that go through the scan's driver. Wraps the factory the
/// `ParquetSource` would have used, so footers, metadata caching and the
/// per-file metrics stay exactly DataFusion's.
#[derive(Debug)]
pub(crate) struct PrefetchingReaderFactory {
    pub(crate) inner: Arc<dyn ParquetFileReaderFactory>,
    pub(crate) driver: Arc<ScanDriver>,
}

impl ParquetFileReaderFactory for PrefetchingReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::common::Result<Box<dyn AsyncFileReader + Send>> {
        let file = self.driver.file_id(&partitioned_file);
        // DataFusion's reader counts the bytes the decoder asks for in its
        // file's `bytes_scanned`; reads the driver sends itself count in the
        // same metric (same name and labels: `EXPLAIN ANALYZE` sums them).
        let bytes_scanned = self.driver.owns_demand_reads().then(|| {
            MetricBuilder::new(metrics)
                .with_new_label(
                    "filename",
                    partitioned_file.object_meta.location.to_string(),
                )
                .with_type(MetricType::Summary)
                .with_category(MetricCategory::Bytes)
                .counter("bytes_scanned", partition_index)
        });
        let inner = self.inner.create_reader(
            partition_index,
            partitioned_file,
            metadata_size_hint,
            metrics,
        )?;
        // A file the scan was not planned with cannot be scheduled; read it as stock.
        let Some(file) = file else {
            return Ok(inner);
        };
        self.driver.reader_opened(file, partition_index);
        Ok(Box::new(PrefetchingReader {
            inner,
            file,
            driver: Arc::clone(&self.driver),
            bytes_scanned,
        }))
    }
}

/// An [`AsyncFileReader`] whose reads are planned by the scan's scheduler.
struct PrefetchingReader {
    inner: Box<dyn AsyncFileReader + Send>,
    file: FileId,
    driver: Arc<ScanDriver>,
    /// The file's `bytes_scanned`, when the driver reads data itself.
    bytes_scanned: Option<Count>,
}

impl AsyncFileReader for PrefetchingReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let mut bytes = self.get_byte_ranges(vec![range]).await?;
            Ok(bytes.pop().expect("one range requested"))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let read = self.driver.read(
                self.file,
                self.inner.as_mut(),
                ranges,
                self.bytes_scanned.as_ref(),
            );
            self.driver.attempts().counting(read).await
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let read = self
                .driver
                .metadata(self.file, self.inner.as_mut(), options);
            self.driver.attempts().counting(read).await
        }
        .boxed()
    }
}

impl Drop for PrefetchingReader {
    fn drop(&mut self) {
        self.driver.reader_closed(self.file);
    }
}
