//! Setting up a client, a scheduler and executors whose Parquet scans prefetch.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use ballista::prelude::SessionContextExt;
use ballista_core::extension::SessionConfigExt;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::BallistaCodec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::utils::default_session_builder;
use ballista_core::{ConfigProducer, RuntimeProducer};
use ballista_executor::executor_process::ExecutorProcessConfig;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use ballista_scheduler::scheduler_server::SessionBuilder;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchOptions, PrefetchScanRule, enable_prefetch};
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};

use crate::codec::PrefetchPhysicalCodec;
use crate::settings::{into_prefetch_options, with_received_prefetch_options};
use crate::stores::{ObjectStores, SharedRuntime};

fn ballista_error(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Ballista assigns each task its file groups when it plans a stage (and cuts
/// the task's scan down to them), and DataFusion asks engines that do so to
/// turn file-stream work stealing off: each partition then reads exactly the
/// files it was given, in order, and the cross-file read-ahead opens those.
fn without_work_stealing(mut config: SessionConfig) -> SessionConfig {
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    config
}

/// The physical codec of every process: prefetching scans, then Ballista's.
/// One codec per process, so an executor's scans share what `auto` measured
/// of each store.
pub fn physical_codec() -> Arc<dyn PhysicalExtensionCodec> {
    Arc::new(PrefetchPhysicalCodec::default())
}

/// The session config a scheduler or an executor starts every session from:
/// Ballista's, with the `prefetch.*` keys registered (so the client's settings
/// are not dropped on arrival) and work stealing off.
pub fn server_config() -> SessionConfig {
    without_work_stealing(with_received_prefetch_options(
        SessionConfig::new_with_ballista(),
    ))
}

/// [`server_config`] as Ballista's config producer, for the scheduler and the
/// executors.
pub fn config_producer() -> ConfigProducer {
    Arc::new(server_config)
}

/// Plans like DataFusion's default planner, then makes every Parquet scan
/// prefetching.
///
/// The scheduler's adaptive planner (AQE, on by default in Ballista 55)
/// replaces the session's physical optimizer rules with its own list, so
/// [`PrefetchScanRule`] as a rule would never run there; the query planner is
/// kept, so the scans are wrapped here, once, before the adaptive rules shape
/// the stages (the wrapped source follows their pushdowns and repartitioning).
#[derive(Debug)]
struct PrefetchQueryPlanner;

#[async_trait]
impl QueryPlanner for PrefetchQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session)
            .await?;
        PrefetchScanRule::new(Arc::clone(session.runtime_env()))
            .optimize(plan, session.config_options())
    }
}

/// The scheduler's session builder: Ballista's default session, over a runtime
/// with `stores`, with the received `prefetch.*` settings and with every
/// Parquet scan made prefetching (the scheduler plans the physical plan, with
/// or without Ballista's adaptive planner).
pub fn session_builder(stores: ObjectStores) -> SessionBuilder {
    // One runtime for every session the scheduler plans, so it lists and
    // reads a table's footers once rather than once per client session.
    let runtime = SharedRuntime::new(stores);
    Arc::new(move |config: SessionConfig| {
        let config = without_work_stealing(into_prefetch_options(config));
        let state = SessionStateBuilder::new_from_existing(default_session_builder(config)?)
            .with_runtime_env(runtime.get()?)
            .with_query_planner(Arc::new(PrefetchQueryPlanner))
            .build();
        Ok(enable_prefetch(state))
    })
}

/// The executors' runtime producer: one runtime per executor process, with
/// `stores` registered, shared by its tasks — so a footer one task read is in
/// the metadata cache for the next (Ballista's default builds a runtime, and
/// so an empty cache, per task).
pub fn runtime_producer(stores: ObjectStores) -> RuntimeProducer {
    let runtime = SharedRuntime::new(stores);
    Arc::new(move |_: &SessionConfig| runtime.get())
}

/// A scheduler configuration whose config producer, session builder and
/// physical codec know prefetching and `stores`. Set its address and policy,
/// then start it with Ballista's `scheduler_process::start_server`.
pub fn scheduler_config(stores: ObjectStores) -> SchedulerConfig {
    let mut config = SchedulerConfig::default()
        .with_override_config_producer(config_producer())
        .with_override_session_builder(session_builder(stores));
    config.override_physical_codec = Some(physical_codec());
    config
}

/// An executor configuration whose config producer, runtime producer and
/// physical codec know prefetching and `stores`. Set its addresses, then start
/// it with Ballista's `executor_process::start_executor_process`.
pub fn executor_config(stores: ObjectStores) -> ExecutorProcessConfig {
    ExecutorProcessConfig {
        override_config_producer: Some(config_producer()),
        override_runtime_producer: Some(runtime_producer(stores)),
        override_physical_codec: Some(physical_codec()),
        ..Default::default()
    }
}

/// The client's session: `config` with `prefetch.*` registered (a bad `SET`
/// fails on the client, as it does locally), the information schema on (for
/// `SHOW prefetch.<key>`), work stealing off, the prefetching codec installed,
/// and `stores` registered (registering a table reads its footers here).
pub fn client_state(config: SessionConfig, stores: &ObjectStores) -> Result<SessionState> {
    let mut config = config
        .with_information_schema(true)
        .with_ballista_physical_extension_codec(physical_codec());
    if config
        .options()
        .extensions
        .get::<PrefetchOptions>()
        .is_none()
    {
        config = config.with_option_extension(PrefetchOptions::default());
    }
    let state = SessionStateBuilder::new()
        .with_config(without_work_stealing(config.upgrade_for_ballista()))
        .with_default_features()
        .with_runtime_env(stores.runtime()?)
        .build();
    Ok(enable_prefetch(state))
}

/// One call to a Ballista session whose Parquet scans prefetch on the
/// executors: connects to the scheduler at `url` (`df://host:port`). The
/// scheduler and executors must run with [`scheduler_config`] and
/// [`executor_config`] (the `dfprefetch-ballista-scheduler` and
/// `dfprefetch-ballista-executor` binaries do). `SET prefetch.*` on the
/// returned context applies to the next query's scans on every executor.
pub async fn ballista_prefetching_context(
    url: &str,
    config: SessionConfig,
    stores: &ObjectStores,
) -> Result<SessionContext> {
    SessionContext::remote_with_state(url, client_state(config, stores)?).await
}

/// A scheduler and `executors` executors in this process, on loopback, set up
/// with [`scheduler_config`] and [`executor_config`] (each with `vcores` task
/// slots); returns the scheduler's `df://` URL for
/// [`ballista_prefetching_context`]. They run on the current tokio runtime
/// until it shuts down.
pub async fn start_standalone_cluster(
    stores: ObjectStores,
    executors: usize,
    vcores: usize,
) -> Result<String> {
    // The in-process executors poll for work.
    let config = scheduler_config(stores.clone())
        .with_scheduler_policy(ballista_core::config::TaskSchedulingPolicy::PullStaged);
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(ballista_error)?;
    let scheduler =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::new(config))
            .await
            .map_err(ballista_error)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        if let Err(e) = start_grpc_service_with_listener(listener, scheduler).await {
            log::error!("standalone scheduler stopped: {e}");
        }
    });

    let grpc_url = format!("http://127.0.0.1:{port}");
    let client = connect(&grpc_url).await?;
    let functions = session_builder(stores.clone())(server_config())?;
    for _ in 0..executors {
        ballista_executor::new_standalone_executor_from_builder(
            client.clone(),
            vcores,
            config_producer(),
            runtime_producer(stores.clone()),
            BallistaCodec::new(
                Arc::new(ballista_core::serde::BallistaLogicalExtensionCodec::default()),
                physical_codec(),
            ),
            BallistaFunctionRegistry::from(&functions),
        )
        .await
        .map_err(ballista_error)?;
    }
    Ok(format!("df://127.0.0.1:{port}"))
}

/// Connect to a scheduler that is starting up, for up to ten seconds.
async fn connect(url: &str) -> Result<SchedulerGrpcClient<tonic::transport::Channel>> {
    let mut last = None;
    for _ in 0..100 {
        match SchedulerGrpcClient::connect(url.to_string()).await {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(DataFusionError::Execution(format!(
        "the scheduler at {url} did not answer: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}
