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

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::datasource::physical_plan::FileScanConfigBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};

use crate::plan_scans::prefetching_scan;
use crate::running::LateScan;

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

/// The prefetching scans under `plan`.
fn prefetching_scans(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<LateScan>> {
    let mut scans = vec![];
    plan.apply(|node| {
        if let Some((_, config, source)) = prefetching_scan(node.as_ref()) {
            scans.push(LateScan {
                source: Arc::new(source.clone()),
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
