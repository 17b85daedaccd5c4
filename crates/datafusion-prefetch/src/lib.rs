//! Read-ahead for Apache DataFusion Parquet scans over object stores.
//!
//! DataFusion 55 keeps one request in flight per scan partition and decodes a
//! row group only after all of it has landed, so on a store with 30–200 ms per
//! request a scan mostly waits. This crate adds [`PrefetchingParquetSource`], a
//! `FileSource` that wraps DataFusion's `ParquetSource` and puts an I/O scheduler
//! underneath it: the next row groups and the next files are fetched while the
//! current ones decode, within a per-stream read-ahead window and a scan-wide
//! memory budget that is also reserved from the session's memory pool.
//!
//! The quickest way in is one call that makes every Parquet scan of a session
//! prefetching, tuned with SQL `SET prefetch.*`; [`prefetch_stats`] finds the
//! prefetching scans of a plan and reads what they did:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> datafusion::common::Result<()> {
//! use datafusion::physical_plan::collect;
//! use datafusion::prelude::{ParquetReadOptions, SessionConfig};
//! use datafusion_prefetch::{prefetch_stats, prefetching_context};
//!
//! let ctx = prefetching_context(SessionConfig::new());
//! ctx.sql("SET prefetch.policy = 'pipelined'").await?.collect().await?;
//! ctx.sql("SET prefetch.read_ahead_window = '64MiB'").await?.collect().await?;
//!
//! // A local folder here; register an object store for s3://, gs://, az://
//! // or http(s):// URLs with `ctx.register_object_store` as usual.
//! # let dir = tempfile::tempdir()?;
//! # let folder = format!("{}/t/", dir.path().display());
//! # ctx.sql(&format!("COPY (VALUES (1, 'a'), (2, 'b')) TO '{folder}' STORED AS PARQUET"))
//! #     .await?.collect().await?;
//! ctx.register_parquet("t", &folder, ParquetReadOptions::default()).await?;
//!
//! let plan = ctx.sql("SELECT sum(column1) FROM t").await?.create_physical_plan().await?;
//! let scans = prefetch_stats(&plan);
//! let batches = collect(plan, ctx.task_ctx()).await?;
//! assert_eq!(batches[0].num_rows(), 1);
//! assert_eq!(scans.len(), 1);
//! println!("{} bytes fetched in {} requests", scans[0].bytes_fetched(), scans[0].requests());
//! # Ok(())
//! # }
//! ```
//!
//! The public API is what this page lists: [`PrefetchingParquetSource`] (the
//! `FileSource`), [`PrefetchingParquetTable`] (a `TableProvider`) with its
//! [`PrefetchingParquetFormat`], the session
//! helpers [`enable_prefetch`] and [`prefetching_context`] with
//! [`PrefetchScanRule`] and [`PrefetchLateScanRule`],
//! [`register_parquet_tables`] to register many tables at once, the settings
//! [`PrefetchOptions`], the process-wide
//! [`PrefetchGovernor`], [`PrefetchStats`] / [`prefetch_stats`] to watch
//! scans, [`prefetching_scan`] to find them in a plan, and [`attempts`] to
//! count what the store was sent for them. How it works:
//! [the design](https://github.com/datafusion-prefetch/datafusion-prefetch/blob/main/docs/design.md),
//! which opens with a map of the (private) modules:
//! - `config`: the `prefetch.*` settings;
//! - `scheduler`: the pure, deterministic scheduler — what to fetch, what to
//!   release, what the budget allows — as one event/action protocol. No
//!   tokio, no store, no clock;
//! - `governor`: the one limit on what every prefetching scan of a runtime
//!   holds, and whose turn it is when they want more (its decisions pure);
//! - `io`: the thin async driver that carries out the scheduler's actions
//!   and serves the Parquet decoder's reads;
//! - `planning`: footers read ahead while a table's schema is inferred
//!   ([`PrefetchingParquetFormat`]);
//! - `sharing`: reads of the same bytes by scans running at once, sent once;
//! - `source`, `running`, `session`, `late_scans`, `plan_scans`, `table`,
//!   `profiles`, `registering`: how it plugs into DataFusion (`running`: one
//!   driver per execution of a plan);
//! - `metrics`: what `EXPLAIN ANALYZE` and [`PrefetchStats`] report;
//! - [`attempts`] (public): what the wire saw of a scan's reads, counted by
//!   the layer that makes the attempts (for object_store's HTTP stores,
//!   `attempts::AttemptCountingConnector`, feature `http-attempts`).

#![warn(missing_docs)]

pub mod attempts;
mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod governor;
mod io;
mod late_scans;
mod metrics;
mod pacing;
mod plan_scans;
mod planning;
mod profiles;
mod registering;
mod running;
mod scheduler;
mod session;
mod sharing;
mod source;
mod table;

pub use config::{
    AUTO_MAX_FILE_OPEN_DEPTH, ByteSize, ByteSizeError, DEFAULT_HEDGE_SHARE_PERCENT,
    FIXED_POLICY_EAGER_FIRST_READ_CAP, FIXED_POLICY_FILE_OPEN_DEPTH, FIXED_POLICY_WINDOW,
    HedgeAfter, MAX_FILE_OPEN_DEPTH, POOL_SHARE_DIVISOR, PrefetchOptions, PrefetchPolicy,
    RequestPrice, RequestTimeout,
};
pub use governor::{DEFAULT_MEMORY_LIMIT, POOL_LIMIT_DIVISOR, PrefetchGovernor};
pub use late_scans::PrefetchLateScanRule;
pub use metrics::PrefetchStats;
pub use pacing::RequestWindowStats;
pub use plan_scans::{prefetch_stats, prefetching_scan};
pub use planning::{PrefetchingParquetFormat, PrefetchingParquetFormatFactory};
pub use profiles::StoreProfiles;
pub use registering::register_parquet_tables;
pub use session::{PrefetchScanRule, enable_prefetch, prefetching_context};
pub use source::PrefetchingParquetSource;
pub use table::{PrefetchingParquetTable, PrefetchingParquetTableBuilder};
