//! One result checksum for every comparison of query results: the rows as
//! canonical text lines, sorted (so row order does not matter), hashed with
//! FNV-1a 64, whose output is fixed by its definition (unlike `DefaultHasher`,
//! which may change between Rust releases).

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// How numbers are written before they are hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbers {
    /// Integers and decimals as Arrow formats them, floats to 12 significant
    /// digits: for comparing DataFusion with DataFusion (any policy with
    /// `off`), where only float summation order may differ.
    Exact,
    /// Every number (integer, decimal or float) as a float to this many
    /// significant digits, `0` as `0`: what another engine reproduces (a
    /// decimal average DataFusion rounds to six places agrees with another
    /// engine's float). `benches/peers/peers.py` implements the same rule.
    Significant(usize),
}

/// Row count and checksum (16 hex digits) of `batches`.
pub fn checksum(batches: &[RecordBatch], numbers: Numbers) -> Result<(usize, String), ArrowError> {
    let lines = canonical_lines(batches, numbers)?;
    let hash = fnv1a64(lines.join("\n").as_bytes());
    Ok((lines.len(), format!("{hash:016x}")))
}

/// The rows of `batches` as sorted text lines, cells joined by U+001F and
/// nulls written `NULL`: what [`checksum`] hashes.
pub fn canonical_lines(
    batches: &[RecordBatch],
    numbers: Numbers,
) -> Result<Vec<String>, ArrowError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut lines = vec![];
    for batch in batches {
        let cells = batch
            .columns()
            .iter()
            .map(|column| Cells::new(column.as_ref(), numbers, &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let line: Vec<String> = cells.iter().map(|c| c.cell(row)).collect();
            lines.push(line.join("\u{1f}"));
        }
    }
    lines.sort();
    Ok(lines)
}

/// How one column's cells are written.
enum Cells<'a> {
    Formatted(ArrayFormatter<'a>),
    /// Floats to `digits` significant digits; `zero` is how 0 is written, if
    /// specially.
    Float {
        values: arrow::array::Float64Array,
        digits: usize,
        zero: Option<&'static str>,
    },
}

impl<'a> Cells<'a> {
    fn new(
        column: &'a dyn Array,
        numbers: Numbers,
        options: &'a FormatOptions<'a>,
    ) -> Result<Self, ArrowError> {
        let float = matches!(
            column.data_type(),
            DataType::Float16 | DataType::Float32 | DataType::Float64
        );
        let as_floats = |column: &dyn Array| -> Result<_, ArrowError> {
            Ok(cast(column, &DataType::Float64)?
                .as_primitive::<Float64Type>()
                .clone())
        };
        Ok(match numbers {
            Numbers::Exact if float => Cells::Float {
                values: as_floats(column)?,
                digits: 12,
                zero: None,
            },
            Numbers::Significant(digits) if column.data_type().is_numeric() => Cells::Float {
                values: as_floats(column)?,
                digits: digits.max(1),
                zero: Some("0"),
            },
            _ => Cells::Formatted(ArrayFormatter::try_new(column, options)?),
        })
    }

    fn cell(&self, row: usize) -> String {
        match self {
            Cells::Formatted(f) => f.value(row).to_string(),
            Cells::Float { values, .. } if values.is_null(row) => "NULL".to_string(),
            Cells::Float {
                values,
                digits,
                zero,
            } => match (values.value(row), zero) {
                (0.0, Some(zero)) => zero.to_string(),
                (x, _) => format!("{x:.*e}", digits - 1),
            },
        }
    }
}

/// FNV-1a, 64 bits.
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, Decimal128Array, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(ids: Vec<i64>, names: Vec<Option<&str>>, values: Vec<f64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("value", DataType::Float64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
                Arc::new(Float64Array::from(values)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn fnv1a64_matches_its_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xCBF2_9CE4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xAF63_DC4C_8601_EC8C);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_F739_67E8);
    }

    #[test]
    fn row_order_and_batching_do_not_matter() {
        let one = batch(
            vec![1, 2, 3],
            vec![Some("a"), None, Some("c")],
            vec![0.5, 1.5, 2.5],
        );
        let split = [
            batch(vec![3], vec![Some("c")], vec![2.5]),
            batch(vec![2, 1], vec![None, Some("a")], vec![1.5, 0.5]),
        ];
        for numbers in [Numbers::Exact, Numbers::Significant(5)] {
            assert_eq!(
                checksum(std::slice::from_ref(&one), numbers).unwrap(),
                checksum(&split, numbers).unwrap()
            );
        }
    }

    #[test]
    fn a_changed_cell_changes_the_checksum() {
        let a = batch(vec![1, 2], vec![Some("a"), None], vec![0.5, 1.5]);
        let changed = [
            batch(vec![1, 3], vec![Some("a"), None], vec![0.5, 1.5]),
            batch(vec![1, 2], vec![Some("a"), Some("NULL ")], vec![0.5, 1.5]),
            batch(vec![1, 2], vec![Some("a"), None], vec![0.5, 1.500_000_001]),
        ];
        let base = checksum(&[a], Numbers::Exact).unwrap();
        for b in changed {
            assert_ne!(checksum(&[b], Numbers::Exact).unwrap(), base);
        }
    }

    #[test]
    fn significant_digits_write_every_number_as_a_float() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("d", DataType::Decimal128(10, 2), false),
            Field::new("i", DataType::Int64, false),
            Field::new("b", DataType::Boolean, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(
                    Decimal128Array::from(vec![123_456, 0])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(Int64Array::from(vec![7, 0])),
                Arc::new(BooleanArray::from(vec![Some(true), None])),
            ],
        )
        .unwrap();
        let lines = canonical_lines(&[batch], Numbers::Significant(5)).unwrap();
        assert_eq!(
            lines,
            vec!["0\u{1f}0\u{1f}NULL", "1.2346e3\u{1f}7.0000e0\u{1f}true"]
        );
    }
}
