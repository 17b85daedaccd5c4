//! Time to the first batch of the plan's Parquet scans, measured the same way
//! for every policy (stock `off` included): each `DataSourceExec` is wrapped in
//! a pass-through node that notes when it first produced rows.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

/// When the first scan batch with rows came out, if one did.
pub type FirstScanBatch = Arc<OnceLock<Instant>>;

/// Wrap every `DataSourceExec` of `plan`; the returned cell is set when the
/// first of them produces a batch with rows.
pub fn observe_scans(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<(Arc<dyn ExecutionPlan>, FirstScanBatch)> {
    let first: FirstScanBatch = Arc::default();
    let plan = plan
        .transform_up(|node| {
            if node.downcast_ref::<DataSourceExec>().is_some() {
                let wrapped: Arc<dyn ExecutionPlan> = Arc::new(FirstBatchExec {
                    properties: Arc::new(node.properties().as_ref().clone()),
                    input: node,
                    first: Arc::clone(&first),
                });
                Ok(Transformed::yes(wrapped))
            } else {
                Ok(Transformed::no(node))
            }
        })?
        .data;
    Ok((plan, first))
}

#[derive(Debug)]
struct FirstBatchExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    first: FirstScanBatch,
}

impl DisplayAs for FirstBatchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FirstBatchExec")
    }
}

impl ExecutionPlan for FirstBatchExec {
    fn name(&self) -> &str {
        "FirstBatchExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            input: Arc::clone(&children[0]),
            properties: Arc::clone(&self.properties),
            first: Arc::clone(&self.first),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = self.input.execute(partition, context)?;
        let schema = stream.schema();
        let first = Arc::clone(&self.first);
        let observed = stream.inspect(move |batch| {
            if batch.as_ref().is_ok_and(|b| b.num_rows() > 0) {
                let _ = first.set(Instant::now());
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, observed)))
    }
}
