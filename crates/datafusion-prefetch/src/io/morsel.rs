//! Wraps DataFusion's Parquet morselizer so the driver sees the scan's output:
//! it timestamps the first batch and keeps the driver alive for the stream.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion_datasource::PartitionedFile;
use datafusion_datasource::morsel::{Morsel, MorselPlan, MorselPlanner, Morselizer};
use futures::StreamExt;
use futures::stream::BoxStream;

use super::driver::ScanDriver;

/// A [`Morselizer`] that reports batches to the scan's driver.
pub(crate) struct ObservedMorselizer {
    pub(crate) inner: Box<dyn Morselizer>,
    pub(crate) driver: Arc<ScanDriver>,
}

impl fmt::Debug for ObservedMorselizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObservedMorselizer")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Morselizer for ObservedMorselizer {
    fn plan_file(&self, file: PartitionedFile) -> Result<Box<dyn MorselPlanner>> {
        Ok(Box::new(ObservedPlanner {
            inner: self.inner.plan_file(file)?,
            driver: Arc::clone(&self.driver),
        }))
    }
}

struct ObservedPlanner {
    inner: Box<dyn MorselPlanner>,
    driver: Arc<ScanDriver>,
}

impl fmt::Debug for ObservedPlanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

fn observe_planner(
    planner: Box<dyn MorselPlanner>,
    driver: &Arc<ScanDriver>,
) -> Box<dyn MorselPlanner> {
    Box::new(ObservedPlanner {
        inner: planner,
        driver: Arc::clone(driver),
    })
}

impl MorselPlanner for ObservedPlanner {
    fn plan(self: Box<Self>) -> Result<Option<MorselPlan>> {
        let driver = self.driver;
        let Some(mut plan) = self.inner.plan()? else {
            return Ok(None);
        };
        let morsels = plan
            .take_morsels()
            .into_iter()
            .map(|morsel| {
                Box::new(ObservedMorsel {
                    inner: morsel,
                    driver: Arc::clone(&driver),
                }) as Box<dyn Morsel>
            })
            .collect();
        let planners = plan
            .take_ready_planners()
            .into_iter()
            .map(|p| observe_planner(p, &driver))
            .collect();
        let mut observed = MorselPlan::new()
            .with_morsels(morsels)
            .with_planners(planners);
        if let Some(pending) = plan.take_pending_planner() {
            let driver = Arc::clone(&driver);
            observed.set_pending_planner(async move {
                let planner = pending.await?;
                Ok(observe_planner(planner, &driver))
            });
        }
        Ok(Some(observed))
    }
}

struct ObservedMorsel {
    inner: Box<dyn Morsel>,
    driver: Arc<ScanDriver>,
}

impl fmt::Debug for ObservedMorsel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Morsel for ObservedMorsel {
    fn into_stream(self: Box<Self>) -> BoxStream<'static, Result<RecordBatch>> {
        let driver = self.driver;
        self.inner
            .into_stream()
            .inspect(move |batch| {
                if batch.is_ok() {
                    driver.batch_produced();
                }
            })
            .boxed()
    }
}
