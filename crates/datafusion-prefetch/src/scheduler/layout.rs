//! Where a file's column chunks live: the part of the Parquet footer the
//! scheduler needs to predict the decoder's next requests.

use std::ops::Range;

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
    /// Scanned row groups whose statistics rule out every row the scan's
    /// predicate could keep, ascending: DataFusion's opener prunes them
    /// before it reads anything, so nothing of them is worth fetching ahead.
    /// A prediction only: which row groups are decoded is still the opener's
    /// decision (`scanned_row_groups` bounds what a slice plan may cover).
    pub pruned_row_groups: Vec<usize>,
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
    /// A layout in which every row group is scanned (hand-built layouts in
    /// tests and fuzz bodies; `io::footer_layout` builds the real ones).
    #[cfg(any(test, feature = "fuzzing"))]
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
            pruned_row_groups: vec![],
        }
    }

    /// Predict that the opener prunes `row_groups` (hand-built layouts in tests).
    #[cfg(test)]
    pub fn with_pruned(mut self, row_groups: Vec<usize>) -> Self {
        self.pruned_row_groups = row_groups;
        self
    }

    /// Attach page locations and row counts (hand-built layouts in tests).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn with_pages(mut self, row_counts: Vec<u64>, pages: Vec<Vec<ChunkPages>>) -> Self {
        self.row_counts = row_counts;
        self.pages = Some(pages);
        self
    }

    /// Whether the opener is expected to prune `row_group` by its statistics.
    pub fn is_pruned(&self, row_group: usize) -> bool {
        self.pruned_row_groups.binary_search(&row_group).is_ok()
    }

    /// The scanned row groups the decoder is expected to read, ascending:
    /// those the opener will not prune by their statistics.
    pub fn expected_row_groups(&self) -> impl Iterator<Item = usize> + '_ {
        self.scanned_row_groups
            .iter()
            .copied()
            .filter(|&rg| !self.is_pruned(rg))
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
