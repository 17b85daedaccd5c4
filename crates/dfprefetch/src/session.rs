//! A prefetching DataFusion session that runs SQL text and reports on it.

use std::io::Write;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParserBuilder, Statement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion_prefetch::{
    PrefetchOptions, PrefetchingParquetFormatFactory, prefetch_stats, prefetching_context,
};
use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};
use futures::StreamExt;
use futures::future::try_join_all;
use serde::Serialize;

use crate::cli::Format;
use crate::output::write_batches;
use crate::scan::ScanTotals;

use crate::stores::Stores;

/// How a [`Session`] is set up.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// DataFusion's `target_partitions`, or its default.
    pub partitions: Option<NonZeroUsize>,
    /// Simulated per-request latency for every store.
    pub simulate_latency: Option<LatencyModel>,
    /// Simulated per-connection bandwidth in MiB/s for every store.
    pub simulate_bandwidth: Option<f64>,
    /// How results are printed.
    pub format: Format,
    /// Whether to print a JSON metrics line per statement.
    pub metrics: bool,
}

/// A prefetching [`SessionContext`] plus the stores behind its tables.
pub struct Session {
    ctx: SessionContext,
    stores: Stores,
    format: Format,
    metrics: bool,
    /// Print a one-line summary after each result (for the shell).
    pub summaries: bool,
}

/// The `--metrics` line of one statement, fields in this order.
#[derive(Debug, Serialize)]
struct MetricsLine<'a> {
    /// The statement, as DataFusion's parser prints it back.
    sql: &'a str,
    /// Execution time, from the first poll to the last batch (planning excluded).
    wall_ms: f64,
    /// Time to the first non-empty batch; `null` when there was none.
    ttfb_ms: Option<f64>,
    /// Rows returned.
    rows: usize,
    /// GET requests (simulated stores) or data requests (prefetching scans).
    requests: Option<u64>,
    /// Bytes those requests returned.
    bytes_fetched: Option<u64>,
    /// Bytes fetched ahead and never used.
    bytes_wasted: u64,
    /// The most bytes any one scan had staged at once.
    peak_staged_bytes: u64,
    /// `prefetch.policy` in force after the statement.
    policy: Option<String>,
    /// Parsing, logical and physical planning.
    plan_ms: f64,
    /// Whether requests were counted by a simulated store.
    simulated: bool,
    /// The most GETs a simulated store had in flight at once (`null` when
    /// not simulating).
    max_in_flight: Option<u64>,
}

/// What running one statement measured.
struct Measured {
    rows: usize,
    plan: Duration,
    wall: Duration,
    ttfb: Option<Duration>,
}

impl Session {
    /// A new session; with a simulated latency or bandwidth, every store it
    /// registers (local files included) is wrapped in a `SimulatedStore`.
    pub fn new(options: SessionOptions) -> Result<Self> {
        let mut config = SessionConfig::new();
        if let Some(partitions) = options.partitions {
            config = config.with_target_partitions(partitions.get());
        }
        let ctx = prefetching_context(config);
        // `CREATE EXTERNAL TABLE … STORED AS PARQUET` (and `--table`) read
        // the table's footers ahead while inferring its schema.
        ctx.state_ref()
            .write()
            .register_file_format(Arc::new(PrefetchingParquetFormatFactory::default()), true)?;
        let mut stores = Stores::new(simulation(&options));
        stores.register_local(&ctx);
        Ok(Self {
            ctx,
            stores,
            format: options.format,
            metrics: options.metrics,
            summaries: false,
        })
    }

    /// Register the Parquet file or folder at each `(name, url)` as table
    /// `name`, first registering an object store for each URL's scheme and
    /// authority.
    ///
    /// A table is made as `CREATE EXTERNAL TABLE … STORED AS PARQUET
    /// LOCATION` makes it in the shell (and in datafusion-cli), so hive
    /// partition folders (`year=2024/`) become columns the same way. The
    /// tables are made all at once: each lists its location and reads its
    /// footers while the others do (one after another, every table would add
    /// its round trips to a remote store). The first error is returned.
    pub async fn register_tables(&mut self, tables: &[(&str, &str)]) -> Result<()> {
        let context = |name: &str, url: &str| {
            let (name, url) = (name.to_string(), url.to_string());
            move |e: DataFusionError| e.context(format!("cannot register table '{name}' at {url}"))
        };
        for &(name, url) in tables {
            let table_url = ListingTableUrl::parse(url).map_err(context(name, url))?;
            self.stores
                .register_for(&self.ctx, table_url.object_store().as_ref())
                .map_err(context(name, url))?;
        }
        let ctx = &self.ctx;
        try_join_all(tables.iter().map(|&(name, url)| async move {
            let ddl = format!(
                "CREATE EXTERNAL TABLE {} STORED AS PARQUET LOCATION '{}'",
                table_identifier(name),
                url.replace('\'', "''")
            );
            ctx.sql(&ddl).await.map_err(context(name, url))
        }))
        .await?;
        Ok(())
    }

    /// Split `sql` into statements and run them in order, printing each
    /// result to stdout; stops at the first error.
    pub async fn run_sql(&self, sql: &str) -> Result<()> {
        for statement in self.parse(sql)? {
            self.run_statement(statement).await?;
        }
        Ok(())
    }

    fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        let options = self.ctx.copied_config();
        let parser_options = &options.options().sql_parser;
        let name = parser_options.dialect.to_string();
        let dialect = dialect_from_str(&name).ok_or_else(|| {
            DataFusionError::Configuration(format!("unsupported SQL dialect '{name}'"))
        })?;
        let statements = DFParserBuilder::new(sql)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(parser_options.recursion_limit.get())
            .build()?
            .parse_statements()?;
        Ok(statements.into())
    }

    async fn run_statement(&self, statement: Statement) -> Result<()> {
        let text = statement.to_string();
        let planning = Instant::now();
        let logical = self.ctx.state().statement_to_plan(statement).await?;
        // Runs DDL and SET right away, like `SessionContext::sql`.
        let frame = self.ctx.execute_logical_plan(logical).await?;
        let schema = frame.schema().as_arrow().clone();
        let plan = frame.create_physical_plan().await?;
        let scans = prefetch_stats(&plan);
        let plan_time = planning.elapsed();

        self.stores.reset();
        let started = Instant::now();
        let mut stream = execute_stream(plan, self.ctx.task_ctx())?;
        let mut batches = vec![];
        let mut ttfb = None;
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            if ttfb.is_none() && batch.num_rows() > 0 {
                ttfb = Some(started.elapsed());
            }
            rows += batch.num_rows();
            batches.push(batch);
        }
        let wall = started.elapsed();
        drop(stream);

        let mut stdout = std::io::stdout().lock();
        write_batches(&mut stdout, self.format, &schema, &batches)?;
        let measured = Measured {
            rows,
            plan: plan_time,
            wall,
            ttfb,
        };
        if self.summaries && !schema.fields().is_empty() {
            let plural = if rows == 1 { "" } else { "s" };
            eprintln!("{rows} row{plural} in {:.1} ms", millis(wall));
        }
        if self.metrics {
            self.print_metrics(&text, &measured, ScanTotals::of(&scans));
        }
        Ok(())
    }

    /// One JSON line on stderr. Requests and bytes fetched come from the
    /// simulated stores when simulating (every GET, footers included), else
    /// from the prefetching scans, which do not count under policy `off`
    /// (then they are `null`).
    fn print_metrics(&self, sql: &str, measured: &Measured, scans: ScanTotals) {
        let policy = self.policy();
        let store = self.stores.counters();
        let (requests, bytes_fetched) = match store {
            Some(c) => (Some(c.requests), Some(c.bytes)),
            None if policy.as_deref() == Some("off") => (None, None),
            None => (Some(scans.requests), Some(scans.bytes_fetched)),
        };
        let line = MetricsLine {
            sql,
            wall_ms: round(millis(measured.wall)),
            ttfb_ms: measured.ttfb.map(|t| round(millis(t))),
            rows: measured.rows,
            requests,
            bytes_fetched,
            bytes_wasted: scans.bytes_wasted,
            peak_staged_bytes: scans.peak_staged_bytes,
            policy,
            plan_ms: round(millis(measured.plan)),
            simulated: store.is_some(),
            max_in_flight: store.map(|c| c.max_in_flight),
        };
        let line = serde_json::to_string(&line).expect("metrics serialize");
        let mut stderr = std::io::stderr().lock();
        // Metrics are best effort: a closed stderr must not fail the query.
        let _ = writeln!(stderr, "{line}");
    }

    /// The `prefetch.policy` now in force.
    fn policy(&self) -> Option<String> {
        self.ctx
            .state()
            .config_options()
            .extensions
            .get::<PrefetchOptions>()
            .map(|options| options.policy().to_string())
    }
}

/// The simulated store's settings, if any simulation was asked for.
fn simulation(options: &SessionOptions) -> Option<SimulatedStoreConfig> {
    if options.simulate_latency.is_none() && options.simulate_bandwidth.is_none() {
        return None;
    }
    let mut config = options
        .simulate_latency
        .map(SimulatedStoreConfig::from_latency)
        .unwrap_or_else(SimulatedStoreConfig::none);
    if let Some(mib) = options.simulate_bandwidth {
        let bytes = (mib * 1024.0 * 1024.0).round().max(1.0) as u64;
        config = config.with_bandwidth(Some(bytes));
    }
    Some(config)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Three decimals are plenty for milliseconds.
fn round(ms: f64) -> f64 {
    (ms * 1e3).round() / 1e3
}

/// `name` as an SQL identifier naming the same table `register_parquet(name)`
/// would: plain identifiers, dotted or not (`t`, `schema.t`), as they are
/// (folded to lower case, as `register_parquet` folds them), anything else
/// quoted.
fn table_identifier(name: &str) -> String {
    let plain = |part: &str| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if name.split('.').all(plain) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::table_identifier;

    #[test]
    fn table_names_are_quoted_only_when_they_must_be() {
        assert_eq!(table_identifier("hits"), "hits");
        assert_eq!(table_identifier("public.Hits"), "public.Hits");
        assert_eq!(table_identifier("my table"), "\"my table\"");
        assert_eq!(table_identifier("a\"b"), "\"a\"\"b\"");
    }
}
