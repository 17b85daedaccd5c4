//! The `prefetch.*` settings: from SQL, from Rust, and what a bad value says.
//!
//! ```text
//! cargo run -p datafusion-prefetch --example settings
//! ```

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{
    ByteSize, PrefetchGovernor, PrefetchOptions, PrefetchPolicy, prefetching_context,
};

#[tokio::main]
async fn main() -> datafusion::common::Result<()> {
    // From Rust: options given to the session's config are its starting
    // values (here `pipelined` instead of the default `auto`).
    let options = PrefetchOptions::default()
        .with_policy(PrefetchPolicy::Pipelined)
        .with_window_and_budget(ByteSize::mib(32), ByteSize::mib(256))?;
    let ctx = prefetching_context(SessionConfig::new().with_option_extension(options));

    // From SQL: every key, with the values it accepts.
    for statement in [
        "SET prefetch.policy = 'streaming'", // auto | off | batched | pipelined | streaming
        "SET prefetch.read_ahead_window = '64MiB'", // per stream, or 'auto'
        "SET prefetch.memory_budget = '512MiB'", // per scan, all partitions
        "SET prefetch.file_open_depth = 16", // upcoming files opened ahead, or 'auto'
        "SET prefetch.eager_first_read_cap = '8MiB'", // of each upcoming file, or 'auto'
        "SET prefetch.hedge_after = 'off'",  // a slow GET sent again after: 'auto', '250ms', 'off'
        "SET prefetch.request_timeout = '30s'", // a GET given up after: 'off', '500ms', '2min'
    ] {
        run(&ctx, statement).await?;
    }
    show(&ctx, "SHOW prefetch.policy").await?;
    show(
        &ctx,
        "SELECT name, value FROM information_schema.df_settings \
         WHERE name LIKE 'prefetch.%' ORDER BY name",
    )
    .await?;

    // A bad value fails at SET, naming the key and what it accepts; the
    // setting keeps its value.
    for statement in [
        "SET prefetch.policy = 'fast'",
        "SET prefetch.read_ahead_window = '1GiB'", // more than the budget
        "SET prefetch.file_open_depth = 100000",
    ] {
        match ctx.sql(statement).await {
            Ok(_) => {
                return Err(datafusion::error::DataFusionError::Plan(format!(
                    "{statement} was accepted"
                )));
            }
            Err(error) => println!("{statement}\n  -> {error}"),
        }
    }

    // One limit for every prefetching scan of the process (the runtime): set
    // it on the governor, or with `prefetch.memory_limit` in the config the
    // context is built with.
    let governor = PrefetchGovernor::of(&ctx.runtime_env());
    governor.set_limit(ByteSize::mib(768));
    show(&ctx, "SHOW prefetch.memory_limit").await?;

    // A session without the helper has no `prefetch.*` settings at all.
    let plain = SessionContext::new();
    if let Err(error) = plain.sql("SET prefetch.policy = 'auto'").await {
        println!("without prefetching_context / enable_prefetch: {error}");
    }
    Ok(())
}

async fn run(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<()> {
    ctx.sql(sql).await?.collect().await?;
    println!("{sql}");
    Ok(())
}

async fn show(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<()> {
    let batches = ctx.sql(sql).await?.collect().await?;
    println!("{sql}\n{}", pretty_format_batches(&batches)?);
    Ok(())
}
