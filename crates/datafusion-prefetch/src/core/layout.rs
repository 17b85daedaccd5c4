//! Where a file's column chunks live: the part of the Parquet footer the
//! scheduler needs to predict the decoder's next requests.

use std::ops::Range;

use datafusion_datasource::FileRange;
use datafusion_datasource_parquet::ParquetAccessPlan;
use parquet::file::metadata::ParquetMetaData;

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
}

impl FileLayout {
    /// A layout in which every row group is scanned.
    pub fn new(column_paths: Vec<String>, row_groups: Vec<Vec<Range<u64>>>) -> Self {
        let scanned_row_groups = (0..row_groups.len()).collect();
        Self {
            column_paths,
            row_groups,
            scanned_row_groups,
        }
    }

    /// Read the layout from a file's metadata, limited to the row groups that a
    /// scan unit with `range` and `access_plan` decodes (the same rule
    /// DataFusion's opener applies, so prediction matches what is read).
    pub fn from_metadata(
        metadata: &ParquetMetaData,
        range: Option<&FileRange>,
        access_plan: Option<&ParquetAccessPlan>,
    ) -> Self {
        let schema = metadata.file_metadata().schema_descr();
        let column_paths = schema.columns().iter().map(|c| c.path().string()).collect();
        let row_groups: Vec<Vec<Range<u64>>> = metadata
            .row_groups()
            .iter()
            .map(|rg| {
                rg.columns()
                    .iter()
                    .map(|c| {
                        let (start, len) = c.byte_range();
                        start..start + len
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
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> FileLayout {
        FileLayout::new(
            vec!["id".into(), "payload".into()],
            vec![vec![4..104, 104..304], vec![304..404, 404..604]],
        )
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
