//! Where a file's column chunks live: the part of the Parquet footer the
//! scheduler needs to predict the decoder's next requests.

use std::ops::Range;

use datafusion_datasource::FileRange;
use datafusion_datasource_parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};

/// One data page of a column chunk, from the offset index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSpan {
    /// Where the page lies in the file (header included).
    pub bytes: Range<u64>,
    /// Index of the page's first row within its row group.
    pub first_row: u64,
}

/// The pages of one column chunk, from the offset index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkPages {
    /// The dictionary page (the bytes before the first data page), if any.
    pub dictionary: Option<Range<u64>>,
    /// The data pages, in row order.
    pub pages: Vec<PageSpan>,
}

/// The byte layout of one Parquet file, reduced to what read-ahead decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// Dotted path of every leaf column, by leaf index (`a.b.c`).
    pub column_paths: Vec<String>,
    /// For each row group, the byte range of every leaf column chunk (dictionary
    /// page included), by leaf index.
    pub row_groups: Vec<Vec<Range<u64>>>,
    /// Row groups this scan unit will decode, ascending: those whose first page
    /// lies in the unit's byte range and that its access plan does not skip.
    pub scanned_row_groups: Vec<usize>,
    /// Top-level column (root field) of every leaf, by leaf index.
    pub column_roots: Vec<String>,
    /// Rows in each row group.
    pub row_counts: Vec<u64>,
    /// Rows the access plan selects in each row group, as ascending ranges
    /// relative to the row group; `None` when the whole row group is read.
    pub selections: Vec<Option<Vec<Range<u64>>>>,
    /// For each row group, the pages of every leaf column chunk, when the file
    /// has an offset index and the layout was read with pages.
    pub pages: Option<Vec<Vec<ChunkPages>>>,
}

impl FileLayout {
    /// A layout in which every row group is scanned.
    pub fn new(column_paths: Vec<String>, row_groups: Vec<Vec<Range<u64>>>) -> Self {
        let scanned_row_groups = (0..row_groups.len()).collect();
        let column_roots = column_paths
            .iter()
            .map(|p| p.split('.').next().unwrap_or_default().to_string())
            .collect();
        Self {
            column_roots,
            row_counts: vec![0; row_groups.len()],
            selections: vec![None; row_groups.len()],
            pages: None,
            column_paths,
            row_groups,
            scanned_row_groups,
        }
    }

    /// Attach page locations and row counts (hand-built layouts in tests).
    pub fn with_pages(mut self, row_counts: Vec<u64>, pages: Vec<Vec<ChunkPages>>) -> Self {
        self.row_counts = row_counts;
        self.pages = Some(pages);
        self
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
    pub fn from_metadata(
        metadata: &ParquetMetaData,
        file_size: u64,
        range: Option<&FileRange>,
        access_plan: Option<&ParquetAccessPlan>,
        with_pages: bool,
    ) -> Self {
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
        Self {
            column_paths,
            row_groups,
            scanned_row_groups,
            column_roots,
            row_counts,
            selections,
            pages,
        }
    }

    /// The leaf columns under the given top-level columns.
    pub fn leaves_of(&self, roots: &[String]) -> Vec<usize> {
        (0..self.column_roots.len())
            .filter(|&leaf| roots.contains(&self.column_roots[leaf]))
            .collect()
    }

    /// The (row group, leaf column) whose chunk contains `range`, if any.
    pub fn locate(&self, range: &Range<u64>) -> Option<(usize, usize)> {
        self.row_groups.iter().enumerate().find_map(|(rg, cols)| {
            cols.iter()
                .position(|c| c.start <= range.start && range.end <= c.end)
                .map(|col| (rg, col))
        })
    }

    /// The leaf index of a dotted column path.
    pub fn column_index(&self, path: &str) -> Option<usize> {
        self.column_paths.iter().position(|p| p == path)
    }

    /// The byte range of a column chunk.
    pub fn chunk(&self, row_group: usize, column: usize) -> Option<Range<u64>> {
        self.row_groups.get(row_group)?.get(column).cloned()
    }

    /// Bytes of `columns`' chunks in `row_group`.
    pub fn row_group_bytes(&self, row_group: usize, columns: &[usize]) -> u64 {
        columns
            .iter()
            .filter_map(|&c| self.chunk(row_group, c))
            .map(|r| r.end - r.start)
            .sum()
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
pub fn offset_index_fits(metadata: &ParquetMetaData, file_size: u64) -> bool {
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

    fn layout() -> FileLayout {
        FileLayout::new(
            vec!["id".into(), "payload".into()],
            vec![vec![4..104, 104..304], vec![304..404, 404..604]],
        )
    }

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
        let layout = FileLayout::from_metadata(&metadata, 1000, None, None, true);
        assert_eq!(layout.row_groups, vec![vec![4..104, 0..0]]);
        assert!(offset_index_fits(&metadata, 1000));
    }

    #[test]
    fn locates_chunk_and_page_ranges() {
        let layout = layout();
        assert_eq!(layout.locate(&(104..304)), Some((0, 1)));
        assert_eq!(layout.locate(&(410..420)), Some((1, 1)));
        assert_eq!(layout.locate(&(300..310)), None, "spans two chunks");
        assert_eq!(layout.locate(&(0..4)), None, "magic bytes are no chunk");
        assert_eq!(layout.column_index("payload"), Some(1));
        assert_eq!(layout.chunk(1, 0), Some(304..404));
    }
}
