//! [`PrefetchingParquetSource`]: DataFusion's `ParquetSource` with an I/O
//! scheduler underneath.

use std::fmt::{self, Formatter};
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, UnboundedMemoryPool};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_expr::projection::ProjectionExprs;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalExpr};
use datafusion::physical_expr_common::sort_expr::PhysicalSortExpr;
use datafusion::physical_plan::filter_pushdown::FilterPushdownPropagation;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::{DisplayFormatType, SortOrderPushdownResult};
use datafusion_datasource::PartitionedFile;
use datafusion_datasource::TableSchema;
use datafusion_datasource::file::FileSource;
use datafusion_datasource::file_scan_config::FileScanConfig;
use datafusion_datasource::file_stream::FileOpener;
use datafusion_datasource::morsel::Morselizer;
use datafusion_datasource_parquet::ParquetFileReaderFactory;
use datafusion_datasource_parquet::source::ParquetSource;
use object_store::ObjectStore;
use parking_lot::Mutex;

use crate::config::{PrefetchOptions, PrefetchPolicy, StreamLimits, pool_bounded_budget};
use crate::governor::PrefetchGovernor;
use crate::io::{
    DriverParts, ObservedMorselizer, PrefetchingReaderFactory, ScanDriver, ScanUnits,
    SlicingMorselizer, StatisticsPruning, reads_plain_store, wrapped_reader_factory,
};
use crate::metrics::{PrefetchStats, ScanMetrics};
use crate::pacing::{PacedStore, Pacing};
use crate::profiles::StoreProfiles;
use crate::running::{LateScan, RunningScan, StartsEarly};
use crate::scheduler::{CoreConfig, FileId, MIN_COLUMN_SLICE_BYTES, ScanCore};

/// A Parquet [`FileSource`] whose scans fetch bytes ahead of the decoder.
///
/// It wraps DataFusion's [`ParquetSource`] and delegates everything that source
/// does — pruning, projection and filter pushdown, page index, bloom filters,
/// dynamic filters, schema adaptation, statistics, repartitioning — and replaces
/// only the reader underneath: each scan gets one I/O scheduler, shared by its
/// partitions, that keeps upcoming row groups and files in flight within the
/// read-ahead window and the memory budget of its [`PrefetchOptions`]. With policy
/// [`PrefetchPolicy::Off`] the wrapped source runs untouched.
///
/// Most users never build one: [`crate::enable_prefetch`] swaps it in for every
/// Parquet scan of a session. To build a scan by hand:
///
/// ```
/// # use std::sync::Arc;
/// # use datafusion::arrow::datatypes::{DataType, Field, Schema};
/// # use datafusion::datasource::physical_plan::FileScanConfigBuilder;
/// # use datafusion::execution::object_store::ObjectStoreUrl;
/// # use datafusion::datasource::source::DataSourceExec;
/// use datafusion::datasource::physical_plan::ParquetSource;
/// use datafusion_prefetch::{PrefetchOptions, PrefetchPolicy, PrefetchingParquetSource};
///
/// let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
/// let source = PrefetchingParquetSource::new(
///     ParquetSource::new(schema),
///     PrefetchOptions::default().with_policy(PrefetchPolicy::Pipelined),
/// );
/// let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
///     .build();
/// let scan = DataSourceExec::from_data_source(config);
/// ```
#[derive(Clone)]
pub struct PrefetchingParquetSource {
    inner: ParquetSource,
    options: PrefetchOptions,
    memory_pool: Option<Arc<dyn MemoryPool>>,
    /// The runtime's governor (`None`: the one of sources without a runtime).
    governor: Option<Arc<PrefetchGovernor>>,
    metadata_cache: Option<Arc<FileMetadataCache>>,
    work_stealing: bool,
    stats: Arc<PrefetchStats>,
    /// The running scans, one per execution, each shared by its partitions
    /// (and by every clone of this source): see `running.rs`.
    running: Arc<Mutex<RunningScan>>,
    /// Scans DataFusion creates only after this one has finished, started
    /// with this scan's first stream ([`crate::PrefetchLateScanRule`]).
    late_scans: Arc<[LateScan]>,
    /// `auto`: what was measured of each store, shared with the session's
    /// other scans when the session's rule made this source.
    profiles: Arc<StoreProfiles>,
    /// Whether the decoder reads each file's row groups in file order.
    row_group_order: RowGroupOrder,
}

/// The order the decoder reads a file's row groups in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowGroupOrder {
    /// First to last, as the file lays them out.
    InFile,
    /// A sort was pushed into the scan: `ParquetSource` may reverse the row
    /// groups or order them by their statistics (`try_pushdown_sort`).
    MaybeReordered,
}

impl fmt::Debug for PrefetchingParquetSource {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefetchingParquetSource")
            .field("options", &self.options)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl PrefetchingParquetSource {
    /// Wrap `inner` with the given settings. Without [`Self::with_runtime`] the
    /// staged bytes are reserved from a private unbounded pool.
    pub fn new(inner: ParquetSource, options: PrefetchOptions) -> Self {
        Self {
            inner,
            options,
            memory_pool: None,
            governor: None,
            metadata_cache: None,
            work_stealing: true,
            stats: Arc::default(),
            running: Arc::default(),
            late_scans: Arc::new([]),
            profiles: Arc::default(),
            row_group_order: RowGroupOrder::InFile,
        }
    }

    /// Share `auto`'s store measurements with every source given the same
    /// `profiles` (the one-call session setup gives all of a session's scans
    /// one), so a scan starts from what earlier scans measured of its store.
    pub fn with_store_profiles(mut self, profiles: Arc<StoreProfiles>) -> Self {
        self.profiles = profiles;
        self
    }

    /// Reserve staged bytes from `runtime`'s memory pool, count everything
    /// read-ahead holds against `runtime`'s [`PrefetchGovernor`], and read
    /// footers through its file-metadata cache, so read-ahead counts against
    /// the session's memory limit and no footer is fetched twice. Without a
    /// runtime, scans reserve from a private unbounded pool and share one
    /// governor with every other source built without one.
    pub fn with_runtime(mut self, runtime: &RuntimeEnv) -> Self {
        self.memory_pool = Some(Arc::clone(&runtime.memory_pool));
        self.governor = Some(PrefetchGovernor::of(runtime));
        self.metadata_cache = Some(runtime.cache_manager.get_file_metadata_cache());
        self
    }

    /// Whether the session lets partitions steal each other's files
    /// (`datafusion.execution.enable_file_stream_work_stealing`); decides the
    /// order in which upcoming files are opened ahead.
    pub fn with_work_stealing(mut self, enabled: bool) -> Self {
        self.work_stealing = enabled;
        self
    }

    /// The settings this source scans with.
    pub fn options(&self) -> &PrefetchOptions {
        &self.options
    }

    /// Replace the settings.
    pub fn with_options(mut self, options: PrefetchOptions) -> Self {
        self.options = options;
        self
    }

    /// The wrapped `ParquetSource`.
    pub fn inner(&self) -> &ParquetSource {
        &self.inner
    }

    /// Live counters over every scan of this source (staged bytes, waste, tasks).
    pub fn stats(&self) -> Arc<PrefetchStats> {
        Arc::clone(&self.stats)
    }

    /// The same prefetching around a new inner source (after a pushdown).
    fn rewrap(&self, inner: Arc<dyn FileSource>) -> Arc<dyn FileSource> {
        match inner.downcast_ref::<ParquetSource>() {
            Some(parquet) => Arc::new(Self {
                inner: parquet.clone(),
                ..self.clone()
            }),
            None => inner,
        }
    }

    /// The driver for a stream of `partition`: its execution's, or a new one
    /// for `config`'s files (`true`) when this stream starts an execution.
    fn driver(
        &self,
        object_store: &Arc<dyn ObjectStore>,
        config: &FileScanConfig,
        partition: usize,
    ) -> (Arc<ScanDriver>, bool) {
        self.running
            .lock()
            .for_stream(partition, || self.new_driver(object_store, config))
    }

    /// A new driver for `config`'s files.
    fn new_driver(
        &self,
        object_store: &Arc<dyn ObjectStore>,
        config: &FileScanConfig,
    ) -> Arc<ScanDriver> {
        let units = ScanUnits::new(
            config.object_store_url.as_str(),
            config
                .file_groups
                .iter()
                .flat_map(|g| g.iter().cloned())
                .collect(),
        );
        let id_of = |file: &PartitionedFile| units.id(file);
        // Mirror how the file stream hands out files, so "the next files" are
        // the ones a partition will really open next.
        let shared_queue =
            self.work_stealing && !config.preserve_order && config.output_partitioning.is_none();
        let order: Vec<Vec<FileId>> = if shared_queue {
            let queue: Vec<FileId> = self
                .inner
                .reorder_files(units.files().to_vec())
                .iter()
                .filter_map(id_of)
                .collect();
            vec![queue; config.file_groups.len()]
        } else {
            config
                .file_groups
                .iter()
                .map(|g| g.iter().filter_map(id_of).collect())
                .collect()
        };
        let budget = pool_bounded_budget(
            self.options.memory_budget().as_u64(),
            self.memory_pool.as_deref(),
        );
        let limits = StreamLimits::new(&self.options, budget, order.len());
        let window = limits.window;
        let policy = self.options.policy();
        let core = ScanCore::new(
            CoreConfig {
                policy,
                read_ahead_window: window,
                memory_budget: budget,
                file_open_depth: limits.file_open_depth,
                auto_stream_limit: limits.auto_stream_limit,
                eager_first_read_cap: limits.eager_first_read_cap,
                hedge_after: self.options.hedge_after(),
                slice_target_bytes: CoreConfig::default_slice_target(window, budget),
                // Small windows (tests, tight budgets) still slice narrow scans.
                slice_min_column_bytes: MIN_COLUMN_SLICE_BYTES.min(window.min(budget) / 16),
                // With DataFusion's own reader factory, demand reads go to
                // the store as the scheduler plans them (every byte known;
                // under `auto` split when one connection's bandwidth is the
                // limit). A custom factory keeps its reads.
                owns_demand_reads: self
                    .inner
                    .parquet_file_reader_factory()
                    .is_none_or(|factory| reads_plain_store(factory.as_ref())),
            },
            units.len(),
            order,
        )
        .with_file_sizes(units.files().iter().map(|f| f.object_meta.size))
        .with_projection(self.read_columns())
        .with_predicate(self.inner.filter().is_some());
        let store_key = config.object_store_url.as_str().to_string();
        let core = core.with_auto_tuner(self.profiles.tuner_for(&store_key));
        let pool = self
            .memory_pool
            .clone()
            .unwrap_or_else(|| Arc::new(UnboundedMemoryPool::default()));
        let reservation = MemoryConsumer::new("PrefetchingParquetSource").register(&pool);
        let governor = self
            .governor
            .clone()
            .unwrap_or_else(PrefetchGovernor::detached);
        let pacing = (policy == PrefetchPolicy::Auto).then(|| {
            Pacing::new(
                governor.request_gate(object_store),
                self.options.hedge_share(),
            )
        });
        let inner_factory = self.reader_factory(object_store);
        // Under `auto` the footers the scan reads ahead are paced as its
        // reads ahead are (a custom factory reads through its own store).
        let footer_factory = match &pacing {
            Some(pacing) if self.inner.parquet_file_reader_factory().is_none() => self
                .reader_factory(
                    &(Arc::new(PacedStore::new(Arc::clone(object_store), pacing.gate()))
                        as Arc<dyn ObjectStore>),
                ),
            _ => Arc::clone(&inner_factory),
        };
        ScanDriver::new(DriverParts {
            core,
            units,
            store: Arc::clone(object_store),
            inner_factory,
            footer_factory,
            metadata_size_hint: self.inner_metadata_size_hint(),
            plan_metrics: self.inner.metrics().clone(),
            reservation,
            governor,
            pacing,
            metrics: ScanMetrics::new(
                self.inner.metrics(),
                Arc::clone(&self.stats),
                policy == PrefetchPolicy::Auto,
                self.options.price_per_1000_requests(),
            ),
            slicing: self.slicing(),
            pruning: StatisticsPruning::new(
                self.inner.filter(),
                self.inner.table_schema(),
                config.expr_adapter_factory.clone(),
                self.inner.table_parquet_options().global.pruning,
                self.inner.max_in_list_size(),
            ),
            request_timeout: self.options.request_timeout().duration(),
            metadata_cache: self.metadata_cache.clone(),
            profiles: Some((Arc::clone(&self.profiles), store_key)),
        })
    }

    /// The same source, starting `late` with its first stream.
    pub(crate) fn with_late_scans(mut self, late: &Arc<[LateScan]>) -> Self {
        self.late_scans = self.late_scans.iter().chain(late.iter()).cloned().collect();
        self
    }

    /// Whether `streaming` (or `auto`) may cut files into slices. A scan
    /// that may read row groups out of file order (a sort pushed into it)
    /// keeps them whole: slices are decoded in file order.
    fn slicing(&self) -> bool {
        matches!(
            self.options.policy(),
            PrefetchPolicy::Streaming | PrefetchPolicy::Auto
        ) && self.row_group_order == RowGroupOrder::InFile
    }

    /// The top-level columns the decoder reads: the projection's, plus the
    /// filter's when filters are evaluated during the scan. `None` when every
    /// column may be read.
    fn read_columns(&self) -> Option<Vec<String>> {
        let projection = self.inner.projection()?;
        let mut columns: Vec<String> = vec![];
        let mut add = |expr: &Arc<dyn PhysicalExpr>| {
            for column in collect_columns(expr) {
                if !columns.iter().any(|c| c == column.name()) {
                    columns.push(column.name().to_string());
                }
            }
        };
        for expr in projection.expr_iter() {
            add(&expr);
        }
        if self.inner.table_parquet_options().global.pushdown_filters
            && let Some(filter) = self.inner.filter()
        {
            add(&filter);
        }
        Some(columns)
    }

    /// The factory whose readers read `store` as the wrapped `ParquetSource`
    /// would ([`wrapped_reader_factory`]).
    fn reader_factory(&self, store: &Arc<dyn ObjectStore>) -> Arc<dyn ParquetFileReaderFactory> {
        wrapped_reader_factory(
            self.inner.parquet_file_reader_factory(),
            self.metadata_cache.as_ref(),
            store,
        )
    }

    fn inner_metadata_size_hint(&self) -> Option<usize> {
        self.inner.table_parquet_options().global.metadata_size_hint
    }
}

impl StartsEarly for PrefetchingParquetSource {
    /// Start a new execution of this scan before DataFusion creates its
    /// streams: every partition starts as when its stream is created (a
    /// scalar subquery's main input runs all its partitions in this
    /// process), and the driver is held until the first stream takes it.
    /// Nothing happens under `off`, nor when another scan of `starter`'s
    /// execution started it already.
    fn start_early(
        &self,
        starter: &Arc<ScanDriver>,
        object_store: &Arc<dyn ObjectStore>,
        config: &FileScanConfig,
    ) {
        if self.options.policy() == PrefetchPolicy::Off {
            return;
        }
        let started = self
            .running
            .lock()
            .start_early(starter, || self.new_driver(object_store, config));
        let Some(driver) = started else {
            return;
        };
        for partition in 0..config.file_groups.len() {
            driver.partition_started(partition);
        }
    }
}

impl FileSource for PrefetchingParquetSource {
    fn create_file_opener(
        &self,
        object_store: Arc<dyn ObjectStore>,
        base_config: &FileScanConfig,
        partition: usize,
    ) -> Result<Arc<dyn FileOpener>> {
        self.inner
            .create_file_opener(object_store, base_config, partition)
    }

    fn create_morselizer(
        &self,
        object_store: Arc<dyn ObjectStore>,
        base_config: &FileScanConfig,
        partition: usize,
    ) -> Result<Box<dyn Morselizer>> {
        if self.options.policy() == PrefetchPolicy::Off {
            return self
                .inner
                .create_morselizer(object_store, base_config, partition);
        }
        let (driver, new_execution) = self.driver(&object_store, base_config, partition);
        driver.partition_started(partition);
        if new_execution {
            let store_url = base_config.object_store_url.as_str();
            for late in self.late_scans.iter() {
                late.start(&driver, store_url, &object_store);
            }
        }
        let reader_factory = Arc::new(PrefetchingReaderFactory {
            inner: driver.inner_factory(),
            driver: Arc::clone(&driver),
        });
        let inner = self
            .inner
            .clone()
            .with_parquet_file_reader_factory(reader_factory)
            .create_morselizer(object_store, base_config, partition)?;
        let observed = ObservedMorselizer {
            inner,
            driver: Arc::clone(&driver),
        };
        if self.slicing() {
            return Ok(Box::new(SlicingMorselizer {
                inner: Arc::new(observed),
                driver,
                partition,
            }));
        }
        Ok(Box::new(observed))
    }

    fn table_schema(&self) -> &TableSchema {
        self.inner.table_schema()
    }

    fn with_batch_size(&self, batch_size: usize) -> Arc<dyn FileSource> {
        self.rewrap(self.inner.with_batch_size(batch_size))
    }

    fn filter(&self) -> Option<Arc<dyn PhysicalExpr>> {
        self.inner.filter()
    }

    fn projection(&self) -> Option<&ProjectionExprs> {
        self.inner.projection()
    }

    fn metrics(&self) -> &ExecutionPlanMetricsSet {
        self.inner.metrics()
    }

    fn file_type(&self) -> &str {
        self.inner.file_type()
    }

    fn fmt_extra(&self, t: DisplayFormatType, f: &mut Formatter) -> fmt::Result {
        self.inner.fmt_extra(t, f)?;
        let settings = format!("prefetch={}", self.options.scan_settings());
        match t {
            DisplayFormatType::TreeRender => writeln!(f, "{settings}"),
            _ => write!(f, ", {settings}"),
        }
    }

    fn supports_repartitioning(&self) -> bool {
        self.inner.supports_repartitioning()
    }

    fn repartitioned(
        &self,
        target_partitions: usize,
        repartition_file_min_size: usize,
        output_ordering: Option<LexOrdering>,
        config: &FileScanConfig,
    ) -> Result<Option<FileScanConfig>> {
        self.inner.repartitioned(
            target_partitions,
            repartition_file_min_size,
            output_ordering,
            config,
        )
    }

    fn try_pushdown_filters(
        &self,
        filters: Vec<Arc<dyn PhysicalExpr>>,
        config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn FileSource>>> {
        let mut propagation = self.inner.try_pushdown_filters(filters, config)?;
        propagation.updated_node = propagation.updated_node.map(|node| self.rewrap(node));
        Ok(propagation)
    }

    fn try_pushdown_sort(
        &self,
        order: &[PhysicalSortExpr],
        eq_properties: &EquivalenceProperties,
    ) -> Result<SortOrderPushdownResult<Arc<dyn FileSource>>> {
        // Whatever the inner source took on (reversed row groups, a reorder
        // by statistics), its row groups may no longer come in file order.
        let reordered = Self {
            row_group_order: RowGroupOrder::MaybeReordered,
            ..self.clone()
        };
        Ok(self
            .inner
            .try_pushdown_sort(order, eq_properties)?
            .map(|node| reordered.rewrap(node)))
    }

    fn reorder_files(&self, files: Vec<PartitionedFile>) -> Vec<PartitionedFile> {
        self.inner.reorder_files(files)
    }

    fn try_pushdown_projection(
        &self,
        projection: &ProjectionExprs,
    ) -> Result<Option<Arc<dyn FileSource>>> {
        Ok(self
            .inner
            .try_pushdown_projection(projection)?
            .map(|node| self.rewrap(node)))
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }
}
