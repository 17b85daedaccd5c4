//! Prefetching Parquet scans on [Apache DataFusion Ballista](https://datafusion.apache.org/ballista/) 55.
//!
//! The scheduler plans every query, so it is the scheduler's session that swaps
//! each Parquet scan for a [`PrefetchingParquetSource`](datafusion_prefetch::PrefetchingParquetSource)
//! (with the `prefetch.*` settings of the client's session); the plan then
//! travels to the executors through [`PrefetchPhysicalCodec`], which carries the
//! scan's settings, and each executor scans with its own runtime and object
//! stores. Plain `ListingTable` Parquet tables (`register_parquet`,
//! `CREATE EXTERNAL TABLE … STORED AS PARQUET`) are all it takes.
//!
//! What each process needs, and the piece of this crate that provides it:
//!
//! | process | needs | here |
//! |---|---|---|
//! | client | `prefetch.*` registered for `SET`, the codec, its object stores | [`ballista_prefetching_context`] |
//! | scheduler | config producer with `prefetch.*`, session builder with the scan rule and the stores, the codec | [`scheduler_config`], binary `dfprefetch-ballista-scheduler` |
//! | executor | config producer with `prefetch.*`, runtime producer with the stores, the codec | [`executor_config`], binary `dfprefetch-ballista-executor` |
//!
//! Ballista ships session settings to the scheduler and executors as key–value
//! pairs and drops keys whose prefix is not registered there; the config
//! producers register them with [`ReceivedPrefetchOptions`], which accepts
//! the pairs in any order.
//!
//! Ballista hands each task its own file groups, so DataFusion's file-stream
//! work stealing is turned off in every process
//! (`datafusion.execution.enable_file_stream_work_stealing = false`), as
//! DataFusion recommends for such engines: each task reads its own file
//! groups, and the cross-file read-ahead works within them.
//!
//! ```no_run
//! # async fn example() -> datafusion::common::Result<()> {
//! use datafusion::prelude::{ParquetReadOptions, SessionConfig};
//! use datafusion_prefetch_ballista::{ObjectStores, ballista_prefetching_context};
//!
//! let stores = ObjectStores::new();
//! let ctx = ballista_prefetching_context("df://localhost:50050", SessionConfig::new(), &stores).await?;
//! ctx.register_parquet("t", "/data/t/", ParquetReadOptions::default()).await?;
//! ctx.sql("SET prefetch.policy = 'pipelined'").await?.collect().await?;
//! ctx.sql("SELECT count(*) FROM t").await?.show().await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod codec;
pub mod session;
pub mod settings;
pub mod stores;

pub use codec::PrefetchPhysicalCodec;
pub use session::{
    ballista_prefetching_context, client_state, config_producer, executor_config, physical_codec,
    runtime_producer, scheduler_config, server_config, session_builder, start_standalone_cluster,
};
pub use settings::ReceivedPrefetchOptions;
pub use stores::ObjectStores;
