//! One call to make every Parquet scan of a session prefetching.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionState;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::config::PrefetchOptions;
use crate::governor::PrefetchGovernor;
use crate::late_scans::PrefetchLateScanRule;
use crate::profiles::StoreProfiles;
use crate::source::PrefetchingParquetSource;

/// A physical optimizer rule that swaps every `ParquetSource` scan for a
/// [`PrefetchingParquetSource`] configured from the query's `prefetch.*`
/// settings.
///
/// [`enable_prefetch`] places it right before DataFusion's `PushdownSort`:
/// projection and filter pushdown have shaped the `ParquetSource` it wraps,
/// and the sort pushdown that follows goes through the wrapper, which is how
/// it knows a scan may read row groups out of file order (reversed, or by
/// statistics) and keeps such files whole rather than slicing them. Added
/// after `PushdownSort` it still wraps every scan, but cannot know that.
/// Settings are read per query: a `SET` between two queries changes the
/// second.
#[derive(Debug, Clone)]
pub struct PrefetchScanRule {
    runtime: Arc<RuntimeEnv>,
    /// `auto`'s store measurements, shared by every scan this rule wraps.
    profiles: Arc<StoreProfiles>,
}

impl PrefetchScanRule {
    /// A rule whose scans reserve memory from, and cache footers in, `runtime`.
    pub fn new(runtime: Arc<RuntimeEnv>) -> Self {
        Self {
            runtime,
            profiles: Arc::default(),
        }
    }

    fn wrap(
        &self,
        exec: &DataSourceExec,
        options: &PrefetchOptions,
        config: &ConfigOptions,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let scan = exec.data_source().downcast_ref::<FileScanConfig>()?;
        let parquet = scan.file_source().downcast_ref::<ParquetSource>()?;
        let source = PrefetchingParquetSource::new(parquet.clone(), options.clone())
            .with_runtime(&self.runtime)
            .with_store_profiles(Arc::clone(&self.profiles))
            .with_work_stealing(config.execution.enable_file_stream_work_stealing);
        let scan = FileScanConfigBuilder::from(scan.clone())
            .with_source(Arc::new(source))
            .build();
        Some(Arc::new(exec.clone().with_data_source(Arc::new(scan))))
    }
}

impl PhysicalOptimizerRule for PrefetchScanRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = PrefetchOptions::of(config);
        plan.transform_up(|node| {
            let wrapped = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|exec| self.wrap(exec, &options, config));
            Ok(match wrapped {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "prefetch_parquet_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Make every Parquet scan of `state` prefetching: registers [`PrefetchOptions`]
/// (unless already registered) so `SET prefetch.*` works, and adds
/// [`PrefetchScanRule`] to the physical optimizer, before DataFusion's sort
/// pushdown (at the end when the optimizer has no `PushdownSort`), and
/// [`PrefetchLateScanRule`] at the end, so a scalar subquery's scans start
/// those of the main input DataFusion holds back until they are done. `register_parquet`,
/// `read_parquet`, `CREATE EXTERNAL TABLE … STORED AS PARQUET` and
/// [`crate::PrefetchingParquetTable`] all benefit.
///
/// Every prefetching scan of every session on `state`'s runtime counts
/// against the runtime's [`PrefetchGovernor`]; a `prefetch.memory_limit` set
/// in `state`'s config becomes its limit.
///
/// ```
/// use datafusion::prelude::SessionContext;
/// use datafusion_prefetch::enable_prefetch;
///
/// let ctx = SessionContext::new_with_state(enable_prefetch(SessionContext::new().state()));
/// ```
pub fn enable_prefetch(state: SessionState) -> SessionState {
    let runtime = Arc::clone(state.runtime_env());
    let config = state.config().clone();
    let mut options = PrefetchOptions::of(config.options());
    let governor = PrefetchGovernor::of(&runtime);
    if let Some(limit) = options.memory_limit() {
        governor.set_limit(limit);
    }
    options.attach(governor);
    let config = config.with_option_extension(options);
    let mut rules = state.physical_optimizers().to_vec();
    let before_sort_pushdown = rules
        .iter()
        .position(|rule| rule.name() == SORT_PUSHDOWN_RULE)
        .unwrap_or(rules.len());
    rules.insert(
        before_sort_pushdown,
        Arc::new(PrefetchScanRule::new(runtime)),
    );
    // Last: no later rule replaces a scan it links.
    rules.push(Arc::new(PrefetchLateScanRule::new()));
    SessionStateBuilder::new_from_existing(state)
        .with_config(config)
        .with_physical_optimizer_rules(rules)
        .build()
}

/// The name of DataFusion's sort pushdown rule, which [`PrefetchScanRule`]
/// must precede to see a sort pushed into a scan.
const SORT_PUSHDOWN_RULE: &str = "PushdownSort";

/// A [`SessionContext`] with default features whose Parquet scans prefetch.
///
/// It also enables the information schema, which `SHOW prefetch.<key>` needs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> datafusion::common::Result<()> {
/// use datafusion::prelude::SessionConfig;
/// use datafusion_prefetch::prefetching_context;
///
/// let ctx = prefetching_context(SessionConfig::new());
/// ctx.sql("SET prefetch.policy = 'pipelined'").await?.collect().await?;
/// let shown = ctx.sql("SHOW prefetch.policy").await?.collect().await?;
/// assert_eq!(shown[0].num_rows(), 1);
/// # Ok(())
/// # }
/// ```
pub fn prefetching_context(config: SessionConfig) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(config.with_information_schema(true))
        .with_default_features()
        .build();
    SessionContext::new_with_state(enable_prefetch(state))
}
