//! A table provider that plans and executes on this module's own runtime and
//! stores, whatever session asks: across datafusion-python's FFI the host
//! polls `scan` on its own tokio runtime and hands `execute` a default
//! `RuntimeEnv`, neither of which knows our object stores or governor.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, config_err, internal_err};
use datafusion::config::{ConfigOptions, ExtensionOptions};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionConfig;
use datafusion_ffi::config::extension_options::FFI_ExtensionOptions;
use datafusion_prefetch::{
    PrefetchOptions, PrefetchStats, PrefetchingParquetTable, prefetch_stats,
};

use crate::environment::environment;
use crate::settings::{Settings, with_settings};

/// How many scans' stats a table keeps (a long-lived table would otherwise
/// keep every scan's).
pub const KEPT_SCANS: usize = 256;

/// A [`PrefetchingParquetTable`] planned with its own settings on its own
/// runtime and the module's tokio runtime; the [`PrefetchStats`] of its last
/// [`KEPT_SCANS`] scans are kept for Python.
#[derive(Debug)]
pub struct HostedTable {
    table: Arc<PrefetchingParquetTable>,
    /// The settings given to the table, over the session's.
    settings: Settings,
    runtime: Arc<RuntimeEnv>,
    scans: Arc<Mutex<Vec<Arc<PrefetchStats>>>>,
}

impl HostedTable {
    /// `table` scanned with `settings` (over the session's) on `runtime`
    /// (its object store).
    pub fn new(
        table: PrefetchingParquetTable,
        settings: Settings,
        runtime: Arc<RuntimeEnv>,
    ) -> Self {
        Self {
            table: Arc::new(table),
            settings,
            runtime,
            scans: Arc::default(),
        }
    }

    /// The stats of the last [`KEPT_SCANS`] scans planned, oldest first.
    pub fn scans(&self) -> Vec<Arc<PrefetchStats>> {
        self.scans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The host's execution settings (batch size, partitions, …) and
    /// `prefetch.*` settings (through `PrefetchConfig`, if the session has
    /// it) with the table's own over them, on the table's runtime.
    fn session(&self, host: &ConfigOptions) -> Result<SessionState> {
        let options = with_settings(session_settings(host)?, &self.settings)?;
        let mut host = host.clone();
        host.extensions = Default::default();
        let config = SessionConfig::from(host);
        Ok(session_state(config, options, &self.runtime))
    }
}

/// A session with DataFusion's default features, `options` as its
/// `prefetch.*` settings, on `runtime`.
pub fn session_state(
    config: SessionConfig,
    options: PrefetchOptions,
    runtime: &Arc<RuntimeEnv>,
) -> SessionState {
    SessionStateBuilder::new()
        .with_config(config.with_option_extension(options))
        .with_runtime_env(Arc::clone(runtime))
        .with_default_features()
        .build()
}

/// The `prefetch.*` entries of the host's FFI extension options, the budget
/// first (a window is checked against the budget as it is set; the entries
/// come in no particular order).
fn from_ffi(ffi: &FFI_ExtensionOptions) -> Result<PrefetchOptions> {
    let mut entries: Vec<(String, String)> = ffi
        .entries()
        .into_iter()
        .filter_map(|entry| {
            let key = entry.key.strip_prefix("prefetch.")?.to_string();
            Some((key, entry.value?))
        })
        .collect();
    entries.sort_by_key(|(key, _)| key != "memory_budget");
    let mut options = PrefetchOptions::default();
    for (key, value) in entries {
        options.set_key(&key, &value)?;
    }
    Ok(options)
}

/// The session's `prefetch.*` settings: ours when the session is local, the
/// FFI extension's (strings, checked here) when datafusion-python passes
/// them, else the defaults.
fn session_settings(host: &ConfigOptions) -> Result<PrefetchOptions> {
    let options = match host.extensions.get::<PrefetchOptions>() {
        Some(options) => options.clone(),
        None => match host.extensions.get::<FFI_ExtensionOptions>() {
            Some(ffi) => from_ffi(ffi)?,
            None => PrefetchOptions::default(),
        },
    };
    if options.memory_limit().is_some() {
        return config_err!(
            "prefetch.memory_limit is process-wide in Python: call \
             datafusion_prefetch.set_memory_limit(...) instead"
        );
    }
    Ok(options)
}

#[async_trait]
impl TableProvider for HostedTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = self.session(session.config_options())?;
        let task_ctx = state.task_ctx();
        let table = Arc::clone(&self.table);
        let projection = projection.cloned();
        let filters = filters.to_vec();
        // Listing reads the store: on our runtime, whose reactor the store's
        // client needs.
        let planning = environment().tokio().spawn(async move {
            table
                .scan(&state, projection.as_ref(), &filters, limit)
                .await
        });
        let plan = planning
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        let mut scans = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        scans.extend(prefetch_stats(&plan));
        let excess = scans.len().saturating_sub(KEPT_SCANS);
        scans.drain(..excess);
        drop(scans);
        Ok(Arc::new(OwnContextExec::new(plan, task_ctx)))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.table.supports_filters_pushdown(filters)
    }
}

/// A plan executed with the task context it was planned for (the table's
/// runtime: its object store, the shared pool and governor), not the one the
/// host passes. A leaf to the host, so no host rule rewrites inside it.
pub struct OwnContextExec {
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
}

impl OwnContextExec {
    fn new(plan: Arc<dyn ExecutionPlan>, task_ctx: Arc<TaskContext>) -> Self {
        Self { plan, task_ctx }
    }
}

impl fmt::Debug for OwnContextExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnContextExec")
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl DisplayAs for OwnContextExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DataFusionPrefetchScan: ")?;
        self.plan.fmt_as(t, f)
    }
}

impl ExecutionPlan for OwnContextExec {
    fn name(&self) -> &str {
        "DataFusionPrefetchScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.plan.properties()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            internal_err!("DataFusionPrefetchScan has no children")
        }
    }

    fn execute(
        &self,
        partition: usize,
        _host: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.plan.execute(partition, Arc::clone(&self.task_ctx))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.plan.metrics()
    }
}
