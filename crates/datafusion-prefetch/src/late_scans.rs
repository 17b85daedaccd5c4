//! Scans DataFusion creates late, started with the ones it creates first.
//!
//! `ScalarSubqueryExec` executes its main input only once every subquery has
//! produced its value, so the input's scans — created only then — would send
//! their first requests after the subqueries' last batch: one more round
//! trip in TPC-H q11, q15 and q22, each. [`PrefetchLateScanRule`] hands each
//! scan of a subquery the prefetching scans of the main input. When a
//! subquery scan's first stream is created, those scans start as their own
//! streams would have: their first files are opened and their first reads
//! fetched, within their window, budget and the governor. The streams
//! DataFusion creates later find them running and read what has landed.

use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use object_store::ObjectStore;

use crate::source::{PrefetchingParquetSource, prefetching_scan};

/// A physical optimizer rule that lets the scans of a scalar subquery start
/// the scans of the main input it holds back (see the module docs).
///
/// [`crate::enable_prefetch`] adds it last, after every rule that may still
/// replace a scan. It changes no plan's shape or results: a linked scan reads
/// as before, and a plan without a prefetching scan under a
/// `ScalarSubqueryExec` is returned as it came.
#[derive(Debug, Default, Clone)]
pub struct PrefetchLateScanRule;

impl PrefetchLateScanRule {
    /// The rule.
    pub fn new() -> Self {
        Self
    }
}

impl PhysicalOptimizerRule for PrefetchLateScanRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(exec) = node.downcast_ref::<ScalarSubqueryExec>() else {
                return Ok(Transformed::no(node));
            };
            let late: Arc<[LateScan]> = prefetching_scans(exec.input())?.into();
            if late.is_empty() {
                return Ok(Transformed::no(node));
            }
            let mut children: Vec<Arc<dyn ExecutionPlan>> =
                node.children().into_iter().cloned().collect();
            // Child 0 is the main input; the rest are the subqueries.
            for subquery in &mut children[1..] {
                *subquery = Arc::clone(subquery)
                    .transform_up(|scan| link(scan, &late))
                    .data()?;
            }
            // A linked scan is the same scan: its properties are unchanged.
            let keep = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep);
            Ok(Transformed::yes(node.replace_children(children, keep)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "prefetch_late_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A prefetching scan DataFusion creates late, as another scan can start it.
#[derive(Clone)]
pub(crate) struct LateScan {
    /// Shares its running scan with the plan's source (clones of a source
    /// share one), so the streams created later find what this started.
    source: PrefetchingParquetSource,
    config: FileScanConfig,
}

impl fmt::Debug for LateScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LateScan")
            .field("object_store_url", &self.config.object_store_url)
            .field(
                "files",
                &self
                    .config
                    .file_groups
                    .iter()
                    .map(|g| g.len())
                    .sum::<usize>(),
            )
            .finish()
    }
}

impl LateScan {
    /// Start the scan, if it reads from `store_url` (the one store the caller
    /// has at hand) and is not running yet.
    pub(crate) fn start(&self, store_url: &str, store: &Arc<dyn ObjectStore>) {
        if self.config.object_store_url.as_str() == store_url {
            self.source.start_early(store, &self.config);
        }
    }
}

/// The prefetching scans under `plan`.
fn prefetching_scans(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<LateScan>> {
    let mut scans = vec![];
    plan.apply(|node| {
        if let Some((_, config, source)) = prefetching_scan(node.as_ref()) {
            scans.push(LateScan {
                source: source.clone(),
                config: config.clone(),
            });
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(scans)
}

/// `node`, if a prefetching scan, made to start `late` with its first stream.
fn link(
    node: Arc<dyn ExecutionPlan>,
    late: &Arc<[LateScan]>,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let Some((exec, config, source)) = prefetching_scan(node.as_ref()) else {
        return Ok(Transformed::no(node));
    };
    let config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source.clone().with_late_scans(late)))
        .build();
    let linked = exec.clone().with_data_source(Arc::new(config));
    Ok(Transformed::yes(Arc::new(linked)))
}
