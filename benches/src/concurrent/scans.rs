//! What the prefetching scans of a query did, read from its plan's metrics
//! (the figures `EXPLAIN ANALYZE` prints): every `prefetch_*` counter,
//! summed over the plan's scans.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::MetricValue;

/// `prefetch_*` counters by name.
pub(super) type ScanCounters = BTreeMap<String, u64>;

/// The counters of every node of `plan`, summed by name.
pub(super) fn scan_counters(plan: &Arc<dyn ExecutionPlan>) -> ScanCounters {
    let mut counters = ScanCounters::new();
    add_plan(plan, &mut counters);
    counters
}

fn add_plan(plan: &Arc<dyn ExecutionPlan>, counters: &mut ScanCounters) {
    for metric in plan.metrics().iter().flat_map(|set| set.iter()) {
        if let MetricValue::Count { name, count } = metric.value()
            && name.starts_with("prefetch_")
        {
            *counters.entry(name.to_string()).or_default() += count.value() as u64;
        }
    }
    for child in plan.children() {
        add_plan(child, counters);
    }
}

/// `from`'s counts added to `into`'s.
pub(super) fn add(into: &mut ScanCounters, from: &ScanCounters) {
    for (name, count) in from {
        *into.entry(name.clone()).or_default() += count;
    }
}
