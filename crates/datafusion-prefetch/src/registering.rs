//! Registering several Parquet tables at once.
//!
//! Registering a Parquet table lists its location and reads its footers to
//! infer its schema: two or three round trips to an object store, before
//! any query can be planned. Registered one after another, as a loop of
//! `register_parquet(..).await` does, a query over five tables waits ten or
//! more round trips first: on the S3 wire at S3's latency, 0.8–0.9 s of
//! TPC-H q2's 1.1 s went there, against 0.2 s for the query itself
//! (docs/benchmarks.md). Polars opens the tables of a lazy query together.

use datafusion::common::{Result, TableReference};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use futures::future::try_join_all;

/// Register each `(name, location)` of `tables` in `ctx` as a Parquet table
/// read with `options`, all at once: each lists its location and reads its
/// footers while the others do, so registering many tables over a remote
/// store takes about as long as registering the slowest of them.
///
/// Each table is registered exactly as
/// [`SessionContext::register_parquet`] registers it (through the session's
/// object stores, file-metadata cache and settings). If one fails, its
/// error is returned and the registrations still in flight are dropped;
/// the tables already registered stay.
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
    let registrations = tables.into_iter().map(|(name, location)| {
        let options = options.clone();
        async move { ctx.register_parquet(name, location.as_ref(), options).await }
    });
    try_join_all(registrations).await?;
    Ok(())
}
