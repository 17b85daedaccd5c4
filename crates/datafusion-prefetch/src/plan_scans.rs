//! Finding prefetching scans in a physical plan: for rules, codecs and
//! tools that watch or rebuild them.

use std::sync::Arc;

use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_datasource::file_scan_config::FileScanConfig;

use crate::metrics::PrefetchStats;
use crate::source::PrefetchingParquetSource;

/// `node` as a prefetching scan: a `DataSourceExec` over a `FileScanConfig`
/// whose source is a [`PrefetchingParquetSource`], with those two; `None`
/// for any other node. For rules and codecs that find or rebuild such scans.
pub fn prefetching_scan(
    node: &dyn ExecutionPlan,
) -> Option<(&DataSourceExec, &FileScanConfig, &PrefetchingParquetSource)> {
    let exec = node.downcast_ref::<DataSourceExec>()?;
    let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
    let source = config
        .file_source()
        .downcast_ref::<PrefetchingParquetSource>()?;
    Some((exec, config, source))
}

/// The live statistics of every [`PrefetchingParquetSource`] scan in a
/// physical plan, in plan order.
///
/// Take them after planning and before executing to watch a query's scans: staged
/// bytes while it runs, peak, waste and requests when it is done.
pub fn prefetch_stats(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<PrefetchStats>> {
    let mut out = vec![];
    if let Some((_, _, source)) = prefetching_scan(plan.as_ref()) {
        out.push(source.stats());
    }
    for child in plan.children() {
        out.extend(prefetch_stats(child));
    }
    out
}
