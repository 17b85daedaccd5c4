//! Registering several Parquet tables at once.
//!
//! Registering a Parquet table lists its location and reads its footers to
//! infer its schema: two or three round trips to an object store, before
//! any query can be planned. Registered one after another, as a loop of
//! `register_parquet(..).await` does, a query over five tables waits ten or
//! more round trips first: on the S3 wire at S3's latency, 0.8–0.9 s of
//! TPC-H q2's 1.1 s went there, against 0.2 s for the query itself
//! (docs/benchmarks.md). Polars opens the tables of a lazy query together.
//!
//! Those round trips are a chain (a table's footers wait for its listing),
//! and a chain waits for its slowest link: on S3 one request in ten takes
//! over three times the median. Under a policy whose scans hedge their GETs
//! the registration hedges its LISTs and footer reads the same way
//! (`hedges.rs` decides, `hedged_store.rs` sends).

mod hedged_store;
mod hedges;

use std::sync::Arc;

use datafusion::common::{Result, TableReference};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use futures::future::try_join_all;

use self::hedged_store::HedgedRegistry;
use self::hedges::MetadataHedges;
use crate::config::PrefetchOptions;

/// Register each `(name, location)` of `tables` in `ctx` as a Parquet table
/// read with `options`, all at once: each lists its location and reads its
/// footers while the others do, so registering many tables over a remote
/// store takes about as long as registering the slowest of them.
///
/// Each table is registered as [`SessionContext::register_parquet`]
/// registers it (through the session's object stores, caches and settings),
/// with one difference under a policy whose scans hedge their GETs
/// (`prefetch.hedge_after`; by default `auto`): a LIST or footer read still
/// unanswered after two median round trips of the store's answers so far (at
/// least 50 ms; a LIST before any has answered, 120 ms) is sent again beside
/// itself, and the first answer is read. Under `off` the registration is
/// stock DataFusion's. If one table fails, its error is returned and the
/// registrations still in flight are dropped; the tables already registered
/// stay.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> datafusion::common::Result<()> {
/// use datafusion::prelude::{ParquetReadOptions, SessionConfig};
/// use datafusion_prefetch::{prefetching_context, register_parquet_tables};
///
/// let ctx = prefetching_context(SessionConfig::new());
/// # let dir = tempfile::tempdir()?;
/// # let root = dir.path().display().to_string();
/// # for t in ["orders", "lineitem"] {
/// #     ctx.sql(&format!("COPY (VALUES (1, 'a')) TO '{root}/{t}/' STORED AS PARQUET"))
/// #         .await?.collect().await?;
/// # }
/// // s3://bucket/tpch/orders/ and so on, with the store registered as usual.
/// let tables = [
///     ("orders", format!("{root}/orders/")),
///     ("lineitem", format!("{root}/lineitem/")),
/// ];
/// register_parquet_tables(&ctx, tables, ParquetReadOptions::default()).await?;
/// let counted = ctx.sql("SELECT count(*) FROM orders JOIN lineitem USING (column1)")
///     .await?.collect().await?;
/// assert_eq!(counted[0].num_rows(), 1);
/// # Ok(())
/// # }
/// ```
pub async fn register_parquet_tables<N, L>(
    ctx: &SessionContext,
    tables: impl IntoIterator<Item = (N, L)>,
    options: ParquetReadOptions<'_>,
) -> Result<()>
where
    N: Into<TableReference>,
    L: AsRef<str>,
{
    let state = ctx.state();
    let hedges = MetadataHedges::new(&PrefetchOptions::of(state.config().options()));
    if !hedges.enabled() {
        return register_all(ctx, tables, options).await;
    }
    // The registrations read through a copy of the session whose stores are
    // wrapped: its catalogs and caches (listings, footers, statistics) are
    // the session's own, so the tables and what their registration read are
    // the session's, and its scans read through the stores unwrapped.
    let runtime = Arc::clone(state.runtime_env());
    let registry = Arc::new(HedgedRegistry::new(
        Arc::clone(&runtime.object_store_registry),
        hedges,
    ));
    let hedged_runtime = RuntimeEnvBuilder::from_runtime_env(&runtime)
        .with_object_store_registry(registry)
        .build_arc()?;
    let state = SessionStateBuilder::new_from_existing(state)
        .with_runtime_env(hedged_runtime)
        .build();
    register_all(&SessionContext::new_with_state(state), tables, options).await
}

async fn register_all<N, L>(
    ctx: &SessionContext,
    tables: impl IntoIterator<Item = (N, L)>,
    options: ParquetReadOptions<'_>,
) -> Result<()>
where
    N: Into<TableReference>,
    L: AsRef<str>,
{
    let registrations = tables.into_iter().map(|(name, location)| {
        let options = options.clone();
        async move { ctx.register_parquet(name, location.as_ref(), options).await }
    });
    try_join_all(registrations).await?;
    Ok(())
}
