//! Writing query results as a table, CSV or JSON.

use std::io::Write;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::csv::WriterBuilder as CsvWriterBuilder;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::json::{ArrayWriter, LineDelimitedWriter};
use datafusion::arrow::util::pretty::pretty_format_batches_with_schema;
use datafusion::common::{DataFusionError, Result};

use crate::cli::Format;

/// Write `batches` (all of one result, whose schema is `schema`) to `out`.
///
/// Statements without output columns (`SET`, `CREATE …`) print nothing.
pub fn write_batches(
    out: &mut dyn Write,
    format: Format,
    schema: &Schema,
    batches: &[RecordBatch],
) -> Result<()> {
    if schema.fields().is_empty() {
        return Ok(());
    }
    let batches: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
    match format {
        Format::Table => {
            let owned: Vec<RecordBatch> = batches.into_iter().cloned().collect();
            let table = pretty_format_batches_with_schema(schema.clone().into(), &owned)?;
            writeln!(out, "{table}").map_err(io_error)?;
        }
        Format::Csv => {
            let mut writer = CsvWriterBuilder::new().with_header(true).build(&mut *out);
            if batches.is_empty() {
                // Still name the columns.
                writer.write(&RecordBatch::new_empty(schema.clone().into()))?;
            }
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            if batches.is_empty() {
                out.write_all(b"[]").map_err(io_error)?;
            } else {
                let mut writer = ArrayWriter::new(&mut *out);
                writer.write_batches(&batches)?;
                writer.finish()?;
            }
            writeln!(out).map_err(io_error)?;
        }
        Format::Ndjson => {
            let mut writer = LineDelimitedWriter::new(&mut *out);
            writer.write_batches(&batches)?;
            writer.finish()?;
        }
    }
    out.flush().map_err(io_error)
}

fn io_error(e: std::io::Error) -> DataFusionError {
    DataFusionError::IoError(e)
}
