//! A Parquet footer, as the scheduler sees it: the byte ranges of its column
//! chunks and pages ([`FileLayout`]), read from DataFusion's and parquet's
//! types here so the scheduler deals in plain data only.

use std::ops::Range;

use datafusion_datasource::{FileRange, PartitionedFile};
use datafusion_datasource_parquet::{ParquetAccessPlan, ParquetRowSelection, RowGroupAccess};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};

use super::pruning::StatisticsPruning;
use crate::scheduler::{ChunkPages, FileLayout, PageSpan};

/// The layout of `file` as its scan unit decodes it (its byte range and
/// access plan), with page locations when the scan reads files in slices
/// (`slicing`) and the file may be cut: a whole-file row selection cannot be
/// split into slices (the extension cannot be replaced), so such files keep
/// row groups whole. With `pruning`, the scanned row groups its opener will
/// prune by their statistics are named.
pub(crate) fn layout_of(
    metadata: &ParquetMetaData,
    file: &PartitionedFile,
    slicing: bool,
    pruning: Option<&StatisticsPruning>,
) -> FileLayout {
    let with_pages = slicing && !file.extensions.contains::<ParquetRowSelection>();
    let mut layout = layout_from_metadata(
        metadata,
        file.object_meta.size,
        file.range.as_ref(),
        file.extensions.get::<ParquetAccessPlan>(),
        with_pages,
    );
    if let Some(pruning) = pruning {
        let pruned = pruning.pruned_row_groups(metadata, file);
        layout.pruned_row_groups = layout
            .scanned_row_groups
            .iter()
            .copied()
            .filter(|rg| pruned.binary_search(rg).is_ok())
            .collect();
    }
    layout
}

/// Read the layout from a file's metadata, limited to the row groups that a
/// scan unit with `range` and `access_plan` decodes (the same rule
/// DataFusion's opener applies, so prediction matches what is read).
///
/// With `with_pages`, the page locations of the offset index are kept too
/// (when the metadata has one for every column chunk).
///
/// Byte ranges the footer places past `file_size` (a corrupt footer) are
/// never predicted: their chunks become empty and such pages disable
/// slicing, so the decoder meets the corruption exactly as without
/// prefetching.
pub(crate) fn layout_from_metadata(
    metadata: &ParquetMetaData,
    file_size: u64,
    range: Option<&FileRange>,
    access_plan: Option<&ParquetAccessPlan>,
    with_pages: bool,
) -> FileLayout {
    let schema = metadata.file_metadata().schema_descr();
    let column_paths = schema.columns().iter().map(|c| c.path().string()).collect();
    let column_roots = schema
        .columns()
        .iter()
        .map(|c| c.path().parts().first().cloned().unwrap_or_default())
        .collect();
    let row_counts = metadata
        .row_groups()
        .iter()
        .map(|rg| rg.num_rows().max(0) as u64)
        .collect();
    let selections = (0..metadata.num_row_groups())
        .map(|idx| match access_plan.and_then(|p| p.inner().get(idx)) {
            Some(RowGroupAccess::Selection(selection)) => {
                let mut ranges = vec![];
                let mut row = 0u64;
                for selector in selection.iter() {
                    let end = row + selector.row_count as u64;
                    if !selector.skip && end > row {
                        ranges.push(row..end);
                    }
                    row = end;
                }
                Some(ranges)
            }
            _ => None,
        })
        .collect();
    let pages = if with_pages {
        page_locations(metadata, file_size)
    } else {
        None
    };
    let row_groups: Vec<Vec<Range<u64>>> = metadata
        .row_groups()
        .iter()
        .map(|rg| {
            rg.columns()
                .iter()
                .map(|c| match byte_range(c) {
                    Some((start, len)) => match start.checked_add(len) {
                        Some(end) if end <= file_size => start..end,
                        _ => start..start,
                    },
                    None => 0..0,
                })
                .collect()
        })
        .collect();
    let scanned_row_groups = metadata
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(idx, rg)| {
            let in_range = match (range, rg.columns().first()) {
                (Some(range), Some(col)) => {
                    let offset = col
                        .dictionary_page_offset()
                        .unwrap_or_else(|| col.data_page_offset());
                    range.contains(offset)
                }
                _ => true,
            };
            let planned =
                access_plan.is_none_or(|plan| *idx < plan.len() && plan.should_scan(*idx));
            in_range && planned
        })
        .map(|(idx, _)| idx)
        .collect();
    FileLayout {
        column_paths,
        row_groups,
        scanned_row_groups,
        pruned_row_groups: vec![],
        column_roots,
        row_counts,
        selections,
        pages,
    }
}

/// A column chunk's start and length, or `None` when the footer gives a
/// negative one (parquet's `ColumnChunkMetaData::byte_range` panics on those;
/// the decoder meets them only if it reads the column, so must we).
fn byte_range(chunk: &ColumnChunkMetaData) -> Option<(u64, u64)> {
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or_else(|| chunk.data_page_offset());
    Some((
        u64::try_from(start).ok()?,
        u64::try_from(chunk.compressed_size()).ok()?,
    ))
}

/// Whether `metadata`'s offset index, if it has one, places every page inside
/// its column chunk and the file: a decoder given an offset index that does not
/// would read out of bounds.
pub(crate) fn offset_index_fits(metadata: &ParquetMetaData, file_size: u64) -> bool {
    metadata.offset_index().is_none_or(|index| {
        index.iter().all(|columns| columns.is_empty())
            || page_locations(metadata, file_size).is_some()
    })
}

/// Every column chunk's pages, or `None` unless the offset index covers all
/// and places every page inside its column chunk, inside the file.
fn page_locations(metadata: &ParquetMetaData, file_size: u64) -> Option<Vec<Vec<ChunkPages>>> {
    let offset_index = metadata.offset_index()?;
    metadata
        .row_groups()
        .iter()
        .zip(offset_index)
        .map(|(rg, columns)| {
            if columns.len() != rg.columns().len() {
                return None;
            }
            rg.columns()
                .iter()
                .zip(columns)
                .map(|(chunk, index)| {
                    let (start, len) = byte_range(chunk)?;
                    let end = start.checked_add(len).filter(|end| *end <= file_size)?;
                    let locations = index.page_locations();
                    let first = locations.first()?;
                    let first_offset = u64::try_from(first.offset).ok()?;
                    // The same rule as the decoder: bytes before the first data
                    // page are the dictionary page.
                    let dictionary = (first_offset != start).then_some(start..first_offset);
                    let pages = locations
                        .iter()
                        .map(|page| {
                            let offset = u64::try_from(page.offset).ok()?;
                            let len = u64::try_from(page.compressed_page_size).ok()?;
                            let first_row = u64::try_from(page.first_row_index).ok()?;
                            if offset < start || offset.checked_add(len)? > end {
                                return None;
                            }
                            Some(PageSpan {
                                bytes: offset..offset + len,
                                first_row,
                            })
                        })
                        .collect::<Option<Vec<_>>>()?;
                    Some(ChunkPages { dictionary, pages })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Found by the `footer` fuzz target: a footer with a negative column
    /// chunk offset made `from_metadata` panic (in parquet's `byte_range`),
    /// even for a column the scan never reads. Such a chunk is never predicted.
    #[test]
    fn a_negative_chunk_offset_is_never_predicted_and_does_not_panic() {
        use parquet::file::metadata::{FileMetaData, RowGroupMetaData};
        use parquet::schema::parser::parse_message_type;
        use parquet::schema::types::SchemaDescriptor;

        let schema = parse_message_type("message m { required int64 a; required int64 b; }");
        let schema = Arc::new(SchemaDescriptor::new(Arc::new(schema.unwrap())));
        let column = |i: usize, offset: i64, size: i64| {
            ColumnChunkMetaData::builder(schema.column(i))
                .set_data_page_offset(offset)
                .set_total_compressed_size(size)
                .build()
                .unwrap()
        };
        let row_group = RowGroupMetaData::builder(Arc::clone(&schema))
            .set_num_rows(10)
            .set_column_metadata(vec![column(0, 4, 100), column(1, -7, 100)])
            .build()
            .unwrap();
        let file = FileMetaData::new(1, 10, None, None, Arc::clone(&schema), None);
        let metadata = ParquetMetaData::new(file, vec![row_group]);
        let layout = layout_from_metadata(&metadata, 1000, None, None, true);
        assert_eq!(layout.row_groups, vec![vec![4..104, 0..0]]);
        assert!(offset_index_fits(&metadata, 1000));
    }
}
