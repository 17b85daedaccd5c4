//! [`PrefetchingParquetTable`]: a Parquet table whose scans prefetch, whatever
//! the session's optimizer rules.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{Result, plan_err};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::planning::PrefetchingParquetFormat;
use crate::session::PrefetchScanRule;

/// A Parquet table over a URL prefix or a list of files whose scans use
/// [`PrefetchingParquetSource`](crate::PrefetchingParquetSource).
///
/// Listing, schema inference, hive-style partition columns and partition pruning
/// are DataFusion's `ListingTable`; this type makes its scans prefetch with
/// the querying session's `prefetch.*` settings, and reads the files' footers
/// ahead while it infers the schema ([`PrefetchingParquetFormat`]).
///
/// ```no_run
/// # async fn example() -> datafusion::common::Result<()> {
/// use std::sync::Arc;
/// use datafusion::prelude::{SessionConfig, SessionContext};
/// use datafusion_prefetch::{PrefetchOptions, PrefetchingParquetTable};
///
/// let ctx = SessionContext::new_with_config(
///     SessionConfig::new().with_option_extension(PrefetchOptions::default()),
/// );
/// let table = PrefetchingParquetTable::builder("s3://bucket/events/")
///     .with_hive_partitions()
///     .build(&ctx.state())
///     .await?;
/// ctx.register_table("events", Arc::new(table))?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PrefetchingParquetTable {
    listing: ListingTable,
}

/// Builds a [`PrefetchingParquetTable`].
#[derive(Debug, Clone)]
pub struct PrefetchingParquetTableBuilder {
    urls: Vec<String>,
    schema: Option<SchemaRef>,
    partition_columns: Option<Vec<(String, DataType)>>,
    infer_partitions: bool,
    file_extension: String,
}

impl PrefetchingParquetTable {
    /// A table over everything under `url` (a folder / prefix, or one file).
    pub fn builder(url: impl Into<String>) -> PrefetchingParquetTableBuilder {
        Self::builder_for_files([url])
    }

    /// A table over an explicit list of files or prefixes.
    pub fn builder_for_files(
        urls: impl IntoIterator<Item = impl Into<String>>,
    ) -> PrefetchingParquetTableBuilder {
        PrefetchingParquetTableBuilder {
            urls: urls.into_iter().map(Into::into).collect(),
            schema: None,
            partition_columns: None,
            infer_partitions: false,
            file_extension: ".parquet".into(),
        }
    }

    /// The wrapped listing table.
    pub fn listing_table(&self) -> &ListingTable {
        &self.listing
    }
}

impl PrefetchingParquetTableBuilder {
    /// Use this schema instead of inferring one from the first file.
    pub fn with_schema(mut self, schema: SchemaRef) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Declare hive-style partition columns (`year=2024/…`) and their types.
    pub fn with_partition_columns(mut self, columns: Vec<(String, DataType)>) -> Self {
        self.partition_columns = Some(columns);
        self
    }

    /// Infer hive-style partition columns from the paths under the first URL.
    pub fn with_hive_partitions(mut self) -> Self {
        self.infer_partitions = true;
        self
    }

    /// Only list files ending in `extension` (default `.parquet`; `""` for all).
    pub fn with_file_extension(mut self, extension: impl Into<String>) -> Self {
        self.file_extension = extension.into();
        self
    }

    /// List the files and infer what was not given, using `state`'s object stores.
    pub async fn build(self, state: &dyn Session) -> Result<PrefetchingParquetTable> {
        if self.urls.is_empty() {
            return plan_err!("a PrefetchingParquetTable needs at least one URL");
        }
        let urls = self
            .urls
            .iter()
            .map(ListingTableUrl::parse)
            .collect::<Result<Vec<_>>>()?;
        let format = PrefetchingParquetFormat::new(
            ParquetFormat::default().with_options(state.table_options().parquet.clone()),
        );
        let mut options =
            ListingOptions::new(Arc::new(format)).with_file_extension(self.file_extension);
        if let Some(columns) = self.partition_columns {
            options = options.with_table_partition_cols(columns);
        }
        let mut config =
            ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options);
        if self.infer_partitions {
            config = config.infer_partitions_from_path(state).await?;
        }
        config = match self.schema {
            Some(schema) => config.with_schema(schema),
            None => config.infer_schema(state).await?,
        };
        Ok(PrefetchingParquetTable {
            listing: ListingTable::try_new(config)?,
        })
    }
}

#[async_trait]
impl TableProvider for PrefetchingParquetTable {
    fn schema(&self) -> SchemaRef {
        self.listing.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.listing.scan(state, projection, filters, limit).await?;
        // Wrap now so the scan prefetches even in sessions without the rule;
        // the rule leaves an already-wrapped scan alone.
        PrefetchScanRule::new(Arc::clone(state.runtime_env()))
            .optimize(plan, state.config_options())
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.listing.supports_filters_pushdown(filters)
    }
}
