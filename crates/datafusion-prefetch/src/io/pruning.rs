//! Which row groups DataFusion's Parquet opener will prune by their
//! statistics, predicted from a footer as soon as it lands (read ahead, before
//! any opener runs on the file), so the scheduler does not fetch them ahead.
//!
//! The prediction repeats the opener's own steps with DataFusion's own types:
//! partition values become literals, the predicate is adapted to the file's
//! schema and simplified, and a [`PruningPredicate`] is evaluated on the row
//! groups' statistics. It decides nothing about the answer — the opener still
//! decides what is decoded — so anything it cannot repeat exactly (virtual
//! columns, an expression that fails to adapt) predicts nothing pruned.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::{Result, ScalarValue};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::simplifier::PhysicalExprSimplifier;
use datafusion::physical_expr_adapter::{
    DefaultPhysicalExprAdapterFactory, PhysicalExprAdapterFactory, replace_columns_with_literals,
};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_datasource::{PartitionedFile, TableSchema};
use datafusion_datasource_parquet::{
    ParquetAccessPlan, ParquetFileMetrics, RowGroupAccessPlanFilter,
    apply_file_schema_type_coercions,
};
use parquet::arrow::parquet_to_arrow_schema;
use parquet::file::metadata::ParquetMetaData;

/// A scan's predicate, ready to predict its opener's pruning by statistics.
#[derive(Debug)]
pub(crate) struct StatisticsPruning {
    predicate: Arc<dyn PhysicalExpr>,
    table_schema: TableSchema,
    adapter: Arc<dyn PhysicalExprAdapterFactory>,
    max_in_list_size: usize,
}

impl StatisticsPruning {
    /// The prediction for a scan with `predicate` over `table_schema`, as its
    /// opener sees them (`adapter`: the scan's expression adapter, if it sets
    /// one). `None` where the opener prunes nothing by statistics: no
    /// predicate, `datafusion.execution.parquet.pruning` off, or virtual
    /// columns the prediction does not model.
    pub(crate) fn new(
        predicate: Option<Arc<dyn PhysicalExpr>>,
        table_schema: &TableSchema,
        adapter: Option<Arc<dyn PhysicalExprAdapterFactory>>,
        pruning_enabled: bool,
        max_in_list_size: usize,
    ) -> Option<Self> {
        let predicate = predicate?;
        if !pruning_enabled || !table_schema.virtual_columns().is_empty() {
            return None;
        }
        Some(Self {
            predicate,
            table_schema: table_schema.clone(),
            adapter: adapter.unwrap_or_else(|| Arc::new(DefaultPhysicalExprAdapterFactory)),
            max_in_list_size,
        })
    }

    /// The row groups of `metadata` that `file`'s opener will prune by their
    /// statistics, ascending; none when the prediction cannot be made.
    pub(crate) fn pruned_row_groups(
        &self,
        metadata: &ParquetMetaData,
        file: &PartitionedFile,
    ) -> Vec<usize> {
        self.try_pruned_row_groups(metadata, file)
            .unwrap_or_default()
    }

    fn try_pruned_row_groups(
        &self,
        metadata: &ParquetMetaData,
        file: &PartitionedFile,
    ) -> Result<Vec<usize>> {
        let logical: &SchemaRef = self.table_schema.file_schema();
        let parquet_schema = metadata.file_metadata().schema_descr();
        let mut physical: SchemaRef = Arc::new(parquet_to_arrow_schema(
            parquet_schema,
            metadata.file_metadata().key_value_metadata(),
        )?);
        if let Some(coerced) = apply_file_schema_type_coercions(logical, &physical) {
            physical = Arc::new(coerced);
        }
        let partition_values: HashMap<String, ScalarValue> = self
            .table_schema
            .table_partition_cols()
            .iter()
            .zip(&file.partition_values)
            .map(|(field, value)| (field.name().clone(), value.clone()))
            .collect();
        let mut predicate = Arc::clone(&self.predicate);
        if !partition_values.is_empty() {
            predicate = replace_columns_with_literals(predicate, &partition_values)?;
        }
        let rewriter = self
            .adapter
            .create(Arc::clone(logical), Arc::clone(&physical))?;
        let predicate =
            PhysicalExprSimplifier::new(&physical).simplify(rewriter.rewrite(predicate)?)?;
        let Some(pruning) = PruningPredicateBuilder::new()
            .with_file_schema(Arc::clone(&physical))
            .with_max_in_list_size(self.max_in_list_size)
            .build(predicate)
        else {
            return Ok(vec![]);
        };
        let row_groups = metadata.row_groups();
        let mut filter =
            RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(row_groups.len()));
        // The opener's metrics are its own; these are dropped.
        let metrics = ParquetFileMetrics::new(0, "", &ExecutionPlanMetricsSet::new());
        filter.prune_by_statistics(&physical, parquet_schema, row_groups, &pruning, &metrics);
        let kept: Vec<usize> = filter.row_group_indexes().collect();
        Ok((0..row_groups.len())
            .filter(|rg| kept.binary_search(rg).is_err())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{RecordBatch, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, lit};
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// Ids 0..20,000 in row groups of 5,000.
    fn metadata() -> ParquetMetaData {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::UInt64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(UInt64Array::from_iter_values(0..20_000))],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(5_000))
            .build();
        let mut out = vec![];
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(out))
            .unwrap()
    }

    /// A table of that file's `id` and a `part` partition column.
    fn table_schema() -> TableSchema {
        let file_schema = Arc::new(Schema::new(vec![Field::new("id", DataType::UInt64, false)]));
        TableSchema::builder(file_schema)
            .with_table_partition_cols(vec![Arc::new(Field::new("part", DataType::Utf8, false))])
            .build()
    }

    fn and(left: Arc<dyn PhysicalExpr>, right: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(left, Operator::And, right))
    }

    fn compare(
        column: &str,
        index: usize,
        op: Operator,
        value: ScalarValue,
    ) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(
            Arc::new(Column::new(column, index)),
            op,
            lit(value),
        ))
    }

    /// `part = 'a' AND id >= 12000`, over the table schema (part is column 1).
    fn predicate() -> Arc<dyn PhysicalExpr> {
        and(
            compare("part", 1, Operator::Eq, ScalarValue::from("a")),
            compare("id", 0, Operator::GtEq, ScalarValue::UInt64(Some(12_000))),
        )
    }

    fn file_in(part: &str) -> PartitionedFile {
        let mut file = PartitionedFile::new("part=x/f.parquet", 1);
        file.partition_values = vec![ScalarValue::from(part)];
        file
    }

    #[test]
    fn predicts_the_row_groups_statistics_rule_out_with_partition_values_as_literals() {
        let pruning =
            StatisticsPruning::new(Some(predicate()), &table_schema(), None, true, 20).unwrap();
        let metadata = metadata();
        // Ids 0-4,999 and 5,000-9,999 cannot reach 12,000.
        assert_eq!(
            pruning.pruned_row_groups(&metadata, &file_in("a")),
            vec![0, 1]
        );
        // In partition b, `part = 'a'` rules out every row group.
        assert_eq!(
            pruning.pruned_row_groups(&metadata, &file_in("b")),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn nothing_is_predicted_where_the_opener_prunes_nothing() {
        let schema = table_schema();
        assert!(StatisticsPruning::new(None, &schema, None, true, 20).is_none());
        assert!(StatisticsPruning::new(Some(predicate()), &schema, None, false, 20).is_none());
        // A predicate statistics cannot decide predicts nothing pruned.
        let undecidable = compare("part", 1, Operator::NotEq, ScalarValue::from("z"));
        let pruning = StatisticsPruning::new(Some(undecidable), &schema, None, true, 20).unwrap();
        assert!(
            pruning
                .pruned_row_groups(&metadata(), &file_in("a"))
                .is_empty()
        );
    }
}
