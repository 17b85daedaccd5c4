//! The `streaming` policy's plan of a file: each row group cut into row
//! slices at page boundaries, and the pages each slice's decoder will ask for.
//!
//! A slice is decoded by its own Parquet decoder with a row selection over its
//! rows. With the offset index in the metadata, that decoder requests, for every
//! projected column, the dictionary page (if the chunk has one) and each data
//! page holding at least one selected row — nothing else. The plan lists exactly
//! those byte ranges, so the scheduler can fetch slice *k+1…* while slice *k*
//! decodes, and knows when each page is no longer needed.

use std::collections::BTreeMap;
use std::ops::Range;

use super::layout::FileLayout;

/// Rows of one row group that one decoder reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The row group.
    pub row_group: usize,
    /// The rows the slice spans, relative to the row group.
    pub rows: Range<u64>,
    /// The rows it selects within `rows` (the access plan's selection, if the
    /// scan has one), ascending and non-empty.
    pub selected: Vec<Range<u64>>,
}

/// One byte range a slice's decoder requests: a data page or a dictionary page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePiece {
    /// The leaf column.
    pub column: usize,
    /// The page's bytes.
    pub bytes: Range<u64>,
    /// The last slice that requests these bytes (a dictionary page is asked for
    /// by every slice of its row group, a page cut by a slice boundary by two).
    pub last_slice: usize,
}

/// The slices of one scan unit, in decode order, and what each one reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlicePlan {
    /// The slices, in decode order.
    pub slices: Vec<Slice>,
    /// For each slice, the pages its decoder requests, column by column.
    pub pieces: Vec<Vec<SlicePiece>>,
    /// Rows of every row group of the file.
    pub row_counts: Vec<u64>,
}

impl SlicePlan {
    /// Bytes slice `slice` reads (pages shared with other slices included).
    pub fn slice_bytes(&self, slice: usize) -> u64 {
        self.pieces[slice]
            .iter()
            .map(|p| p.bytes.end - p.bytes.start)
            .sum()
    }
}

/// The least a slice should read of each projected column: each column's pages
/// of a slice are one request, and on an object store a request costs a round
/// trip whatever its size.
pub const MIN_COLUMN_SLICE_BYTES: u64 = 1 << 20;

/// How big `streaming`'s slices are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceSizing {
    /// About how many bytes of the projected columns a slice reads.
    pub target_bytes: u64,
    /// The most one stream may stage (the window, or the budget if smaller).
    pub stage_limit: u64,
    /// The least a slice reads of each column (see [`MIN_COLUMN_SLICE_BYTES`]).
    pub min_column_bytes: u64,
}

/// Cut the scanned row groups of `layout` into slices of about `sizing.target_bytes`
/// of the given leaf `columns`, at page boundaries of the widest column (so the
/// largest pages are never decoded twice).
///
/// `None` when the layout has no page locations, `columns` is empty or names no
/// column of the file, nothing would be read, or a row group's dictionary pages
/// (of the projected columns) take more than half of the stage limit (the most
/// one stream may stage): every slice of the row group asks for them, so they
/// could not stay staged beside the slices' data and each slice would fetch
/// them again; or slices of [`MIN_COLUMN_SLICE_BYTES`] per column would not fit
/// twice in the stage limit (a wide projection). The file is then read at
/// row-group granularity.
pub fn plan_slices(
    layout: &FileLayout,
    columns: &[usize],
    sizing: &SliceSizing,
) -> Option<SlicePlan> {
    let stage_limit = sizing.stage_limit;
    let pages = layout.pages.as_ref()?;
    let columns: Vec<usize> = columns
        .iter()
        .copied()
        .filter(|c| *c < layout.column_paths.len())
        .collect();
    if columns.is_empty() {
        return None;
    }
    // Each slice costs a request per column: keep every column's share of a
    // slice worth a request, and leave wide projections whole.
    let column_floor = columns.len() as u64 * sizing.min_column_bytes;
    if column_floor.saturating_mul(2) > stage_limit {
        return None;
    }
    let target_bytes = sizing.target_bytes.max(1).max(column_floor);
    let mut plan = SlicePlan {
        row_counts: layout.row_counts.clone(),
        ..SlicePlan::default()
    };
    for &row_group in &layout.scanned_row_groups {
        let rows = *layout.row_counts.get(row_group)?;
        let chunks = pages.get(row_group)?;
        if rows == 0 {
            continue;
        }
        let chunk_bytes = |c: usize| {
            layout
                .chunk(row_group, c)
                .map(|r| r.end - r.start)
                .unwrap_or(0)
        };
        let dictionary_bytes: u64 = columns
            .iter()
            .filter_map(|&c| chunks.get(c)?.dictionary.as_ref())
            .map(|d| d.end - d.start)
            .sum();
        if dictionary_bytes.saturating_mul(2) > stage_limit {
            return None;
        }
        let bytes: u64 = columns.iter().map(|&c| chunk_bytes(c)).sum();
        let widest = *columns.iter().max_by_key(|&&c| chunk_bytes(c))?;
        // The file's first slice is smaller, so its first batch comes sooner.
        let first_target = plan.slices.is_empty().then(|| (target_bytes / 8).max(1));
        let boundaries = cut_points(
            &chunks.get(widest)?.pages,
            rows,
            bytes,
            target_bytes,
            first_target,
        );
        let selection = layout
            .selections
            .get(row_group)
            .cloned()
            .flatten()
            .unwrap_or_else(|| std::iter::once(0..rows).collect());
        for window in boundaries.windows(2) {
            let span = window[0]..window[1];
            let selected: Vec<Range<u64>> = selection
                .iter()
                .filter_map(|r| {
                    let (start, end) = (r.start.max(span.start), r.end.min(span.end));
                    (start < end).then_some(start..end)
                })
                .collect();
            if selected.is_empty() {
                continue;
            }
            let mut pieces = vec![];
            // A decoder whose selection takes a whole row group drops the
            // selection and reads whole column chunks.
            let whole_row_group = selected.len() == 1 && selected[0] == (0..rows);
            for &column in &columns {
                if whole_row_group {
                    pieces.push((column, layout.chunk(row_group, column)?));
                    continue;
                }
                let chunk = chunks.get(column)?;
                if let Some(dictionary) = &chunk.dictionary {
                    pieces.push((column, dictionary.clone()));
                }
                for (i, page) in chunk.pages.iter().enumerate() {
                    let page_end = chunk.pages.get(i + 1).map_or(rows, |next| next.first_row);
                    let holds_selected = selected
                        .iter()
                        .any(|r| r.start < page_end && page.first_row < r.end);
                    if holds_selected {
                        pieces.push((column, page.bytes.clone()));
                    }
                }
            }
            plan.slices.push(Slice {
                row_group,
                rows: span,
                selected,
            });
            plan.pieces.push(
                pieces
                    .into_iter()
                    .map(|(column, bytes)| SlicePiece {
                        column,
                        bytes,
                        last_slice: 0,
                    })
                    .collect(),
            );
        }
    }
    if plan.slices.is_empty() {
        return None;
    }
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    for (slice, pieces) in plan.pieces.iter().enumerate() {
        for piece in pieces {
            last.insert(piece.bytes.start, slice);
        }
    }
    for pieces in &mut plan.pieces {
        for piece in pieces {
            piece.last_slice = last[&piece.bytes.start];
        }
    }
    Some(plan)
}

/// Slice boundaries of a row group of `rows` rows and `bytes` projected bytes:
/// `0`, then page starts of the widest column wherever the slice so far holds
/// about `target_bytes` (`first_target` for the first slice, if given), then
/// `rows`.
fn cut_points(
    widest_pages: &[super::layout::PageSpan],
    rows: u64,
    bytes: u64,
    target_bytes: u64,
    first_target: Option<u64>,
) -> Vec<u64> {
    let mut points = vec![0];
    let mut start = 0u64;
    for page in widest_pages.iter().skip(1) {
        let target_bytes = match first_target {
            Some(first) if points.len() == 1 => first,
            _ => target_bytes,
        };
        let boundary = page.first_row;
        if boundary <= start || boundary >= rows {
            continue;
        }
        // Bytes of every projected column in rows start..boundary, assuming
        // they spread evenly over the row group's rows.
        let estimate = (u128::from(boundary - start) * u128::from(bytes)) / u128::from(rows);
        if estimate >= u128::from(target_bytes) {
            points.push(boundary);
            start = boundary;
        }
    }
    points.push(rows);
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{ChunkPages, PageSpan};

    /// A column chunk starting at `start`: an optional dictionary page of
    /// `dictionary` bytes, then pages of the given (rows, bytes).
    fn chunk(start: u64, dictionary: u64, pages: &[(u64, u64)]) -> (Range<u64>, ChunkPages) {
        let mut offset = start + dictionary;
        let mut first_row = 0;
        let mut spans = vec![];
        for &(rows, bytes) in pages {
            spans.push(PageSpan {
                bytes: offset..offset + bytes,
                first_row,
            });
            offset += bytes;
            first_row += rows;
        }
        let chunk_pages = ChunkPages {
            dictionary: (dictionary > 0).then(|| start..start + dictionary),
            pages: spans,
        };
        (start..offset, chunk_pages)
    }

    /// One row group of `rows` rows with the given column chunks.
    fn layout(rows: u64, chunks: Vec<(Range<u64>, ChunkPages)>) -> FileLayout {
        let paths = (0..chunks.len()).map(|i| format!("c{i}")).collect();
        let (ranges, pages): (Vec<_>, Vec<_>) = chunks.into_iter().unzip();
        FileLayout::new(paths, vec![ranges]).with_pages(vec![rows], vec![pages])
    }

    /// What the decoder requests for a slice: parquet's own rule, run on the
    /// same pages (the dictionary page, then every page with a selected row).
    fn decoder_requests(layout: &FileLayout, columns: &[usize], slice: &Slice) -> Vec<Range<u64>> {
        use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
        use parquet::file::page_index::offset_index::PageLocation;
        let rows = layout.row_counts[slice.row_group];
        let mut selectors = vec![];
        let mut at = 0;
        for r in &slice.selected {
            if r.start > at {
                selectors.push(RowSelector::skip((r.start - at) as usize));
            }
            selectors.push(RowSelector::select((r.end - r.start) as usize));
            at = r.end;
        }
        if at < rows {
            selectors.push(RowSelector::skip((rows - at) as usize));
        }
        let selection = RowSelection::from(selectors);
        let pages = &layout.pages.as_ref().unwrap()[slice.row_group];
        let mut out = vec![];
        if selection.row_count() == rows as usize {
            // parquet's push decoder drops a selection of every row.
            return columns
                .iter()
                .map(|&c| layout.chunk(slice.row_group, c).unwrap())
                .collect();
        }
        for &c in columns {
            let chunk = &pages[c];
            if let Some(d) = &chunk.dictionary {
                out.push(d.clone());
            }
            let locations: Vec<PageLocation> = chunk
                .pages
                .iter()
                .map(|p| PageLocation {
                    offset: p.bytes.start as i64,
                    compressed_page_size: (p.bytes.end - p.bytes.start) as i32,
                    first_row_index: p.first_row as i64,
                })
                .collect();
            out.extend(selection.scan_ranges(&locations));
        }
        out
    }

    fn sizing(target_bytes: u64, stage_limit: u64) -> SliceSizing {
        SliceSizing {
            target_bytes,
            stage_limit,
            min_column_bytes: 0,
        }
    }

    #[test]
    fn wide_projections_get_a_request_worth_of_each_column_or_stay_whole() {
        let chunks: Vec<_> = (0..4)
            .map(|c| chunk(4 + c * 4000, 0, &[(10, 1000); 4]))
            .collect();
        let layout = layout(40, chunks);
        let wide = SliceSizing {
            target_bytes: 100,
            stage_limit: 1 << 20,
            min_column_bytes: 1000,
        };
        // At least 1,000 bytes of each of 4 columns: 4,000-byte slices, one page
        // (10 rows) of each column.
        let plan = plan_slices(&layout, &[0, 1, 2, 3], &wide).unwrap();
        assert!(plan.slices.iter().all(|s| s.rows.end - s.rows.start >= 10));
        assert_eq!(plan.slices.len(), 4);
        // Slices of 4,000 bytes do not fit twice in 7,999 bytes: whole row groups.
        let tight = SliceSizing {
            stage_limit: 7999,
            ..wide
        };
        assert_eq!(plan_slices(&layout, &[0, 1, 2, 3], &tight), None);
    }

    fn ranges(plan: &SlicePlan, slice: usize) -> Vec<Range<u64>> {
        plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect()
    }

    #[test]
    fn cuts_at_the_widest_columns_page_boundaries() {
        // Column 1 is ten times wider; its pages hold 100 rows each.
        let narrow = chunk(4, 0, &[(500, 500), (500, 500)]);
        let wide = chunk(1004, 0, &[(100, 1000); 10]);
        let layout = layout(1000, vec![narrow, wide]);
        // 11,000 bytes over 1,000 rows: 11 bytes a row, so 300 rows ≈ 3,300 bytes.
        // The file's first slice aims at an eighth of that: one page.
        let plan = plan_slices(&layout, &[0, 1], &sizing(3000, u64::MAX)).unwrap();
        let spans: Vec<_> = plan.slices.iter().map(|s| s.rows.clone()).collect();
        assert_eq!(spans, vec![0..100, 100..400, 400..700, 700..1000]);
        // The narrow column's first page (rows 0..500) is read by slices 0 to 2.
        assert_eq!(plan.pieces[0][0].bytes, 4..504);
        assert_eq!(plan.pieces[0][0].last_slice, 2);
        assert_eq!(plan.pieces[2][0].bytes, 4..504);
        assert_eq!(plan.pieces[2][1].bytes, 504..1004, "rows 500..700");
        for (i, slice) in plan.slices.iter().enumerate() {
            assert_eq!(ranges(&plan, i), decoder_requests(&layout, &[0, 1], slice));
        }
    }

    #[test]
    fn dictionary_pages_are_read_by_every_slice_of_the_row_group() {
        let dict = chunk(4, 50, &[(10, 100); 4]);
        let layout = layout(40, vec![dict]);
        let plan = plan_slices(&layout, &[0], &sizing(100, u64::MAX)).unwrap();
        assert_eq!(plan.slices.len(), 4);
        for pieces in &plan.pieces {
            assert_eq!(pieces[0].bytes, 4..54, "dictionary first");
            assert_eq!(pieces[0].last_slice, 3, "kept until the last slice");
        }
        assert_eq!(plan.pieces[2][1].last_slice, 2);
    }

    #[test]
    fn only_projected_columns_and_selected_rows_are_planned() {
        let a = chunk(4, 0, &[(10, 100); 4]);
        let b = chunk(404, 0, &[(10, 100); 4]);
        let mut layout = layout(40, vec![a, b]);
        // The access plan selects rows 12..18 and 35..40.
        layout.selections = vec![Some(vec![12..18, 35..40])];
        let plan = plan_slices(&layout, &[1], &sizing(100, u64::MAX)).unwrap();
        let spans: Vec<_> = plan.slices.iter().map(|s| s.rows.clone()).collect();
        assert_eq!(
            spans,
            vec![10..20, 30..40],
            "slices without selected rows are dropped"
        );
        assert_eq!(plan.slices[1].selected, vec![35..40]);
        assert_eq!(ranges(&plan, 0), vec![504..604]);
        for (i, slice) in plan.slices.iter().enumerate() {
            assert_eq!(ranges(&plan, i), decoder_requests(&layout, &[1], slice));
        }
    }

    #[test]
    fn a_slice_of_a_whole_row_group_reads_whole_chunks() {
        let a = chunk(4, 20, &[(10, 100); 2]);
        let b = chunk(224, 0, &[(10, 100); 2]);
        let layout = layout(20, vec![a, b]);
        let plan = plan_slices(&layout, &[0, 1], &sizing(1 << 20, u64::MAX)).unwrap();
        assert_eq!(plan.slices.len(), 1);
        assert_eq!(ranges(&plan, 0), vec![4..224, 224..424]);
    }

    #[test]
    fn dictionary_pages_that_cannot_stay_staged_keep_the_row_group_whole() {
        let a = chunk(4, 600, &[(10, 100); 4]);
        let b = chunk(1004, 300, &[(10, 100); 4]);
        let layout = layout(40, vec![a, b]);
        assert!(plan_slices(&layout, &[0], &sizing(100, 1200)).is_some());
        assert_eq!(plan_slices(&layout, &[0], &sizing(100, 1199)), None);
        // Both columns' dictionaries count: 900 bytes.
        assert!(plan_slices(&layout, &[0, 1], &sizing(100, 1800)).is_some());
        assert_eq!(plan_slices(&layout, &[0, 1], &sizing(100, 1799)), None);
    }

    #[test]
    fn a_page_larger_than_the_target_is_a_slice_of_its_own() {
        let big = chunk(4, 0, &[(10, 100), (10, 5000), (10, 100)]);
        let layout = layout(30, vec![big]);
        let plan = plan_slices(&layout, &[0], &sizing(100, u64::MAX)).unwrap();
        let spans: Vec<_> = plan.slices.iter().map(|s| s.rows.clone()).collect();
        assert_eq!(spans, vec![0..10, 10..20, 20..30]);
        assert_eq!(plan.slice_bytes(1), 5000);
    }

    #[test]
    fn no_pages_no_columns_or_nothing_selected_means_row_group_granularity() {
        let plain = FileLayout::new(vec!["a".into()], vec![vec![4..104]]);
        assert_eq!(
            plan_slices(&plain, &[0], &sizing(10, u64::MAX)),
            None,
            "no offset index"
        );
        let paged = layout(10, vec![chunk(4, 0, &[(10, 100)])]);
        assert_eq!(
            plan_slices(&paged, &[], &sizing(10, u64::MAX)),
            None,
            "no projected column"
        );
        assert_eq!(
            plan_slices(&paged, &[7], &sizing(10, u64::MAX)),
            None,
            "unknown column"
        );
        let mut skipped = paged.clone();
        skipped.scanned_row_groups = vec![];
        assert_eq!(
            plan_slices(&skipped, &[0], &sizing(10, u64::MAX)),
            None,
            "nothing scanned"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Columns of random page sizes and row counts over one row group,
        /// with a random selection.
        fn layouts() -> impl Strategy<Value = (FileLayout, Vec<usize>, u64)> {
            (1u64..400, 1usize..4)
                .prop_flat_map(|(rows, columns)| {
                    let column = (
                        prop::bool::ANY,
                        prop::collection::vec((1u64..50, 1u64..2000), 1..20),
                    );
                    (
                        Just(rows),
                        prop::collection::vec(column, columns),
                        prop::collection::vec((0u64..400, 0u64..100), 0..4),
                        prop::collection::vec(0usize..4, 1..4),
                        1u64..20_000,
                    )
                })
                .prop_map(|(rows, columns, picks, projection, target)| {
                    let mut offset = 4;
                    let mut chunks = vec![];
                    for (dictionary, pages) in columns {
                        // Page row counts that add up to `rows`.
                        let mut spans = vec![];
                        let mut left = rows;
                        for (page_rows, bytes) in pages {
                            if left == 0 {
                                break;
                            }
                            let take = page_rows.min(left);
                            spans.push((take, bytes));
                            left -= take;
                        }
                        if left > 0 {
                            spans.push((left, 100));
                        }
                        let c = chunk(offset, if dictionary { 30 } else { 0 }, &spans);
                        offset = c.0.end;
                        chunks.push(c);
                    }
                    let width = chunks.len();
                    let mut layout = layout(rows, chunks);
                    if !picks.is_empty() {
                        let mut selected: Vec<Range<u64>> = picks
                            .iter()
                            .map(|&(start, len)| {
                                let start = start % rows;
                                start..(start + len + 1).min(rows)
                            })
                            .collect();
                        selected.sort_by_key(|r| r.start);
                        let mut merged: Vec<Range<u64>> = vec![];
                        for r in selected {
                            match merged.last_mut() {
                                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                                _ => merged.push(r),
                            }
                        }
                        layout.selections = vec![Some(merged)];
                    }
                    let projection = projection.into_iter().filter(|c| *c < width).collect();
                    (layout, projection, target)
                })
        }

        proptest! {
            /// Every slice plans exactly the ranges its decoder requests, the
            /// slices cover the selected rows once, in order, and a piece's last
            /// slice is the last one that requests it.
            #[test]
            fn planned_ranges_are_what_the_decoder_requests((layout, columns, target) in layouts()) {
                let Some(plan) = plan_slices(&layout, &columns, &sizing(target, u64::MAX)) else {
                    prop_assert!(columns.is_empty());
                    return Ok(());
                };
                let mut covered = vec![];
                for (i, slice) in plan.slices.iter().enumerate() {
                    prop_assert_eq!(ranges(&plan, i), decoder_requests(&layout, &columns, slice));
                    covered.extend(slice.selected.iter().cloned());
                    for piece in &plan.pieces[i] {
                        prop_assert!(piece.last_slice >= i);
                        let later = &plan.pieces[piece.last_slice];
                        prop_assert!(later.iter().any(|p| p.bytes == piece.bytes));
                    }
                }
                let rows = layout.row_counts[0];
                let wanted = layout.selections[0]
                    .clone()
                    .unwrap_or_else(|| std::iter::once(0..rows).collect());
                let flatten = |ranges: &[Range<u64>]| ranges.iter().flat_map(|r| r.clone()).collect::<Vec<_>>();
                prop_assert_eq!(flatten(&covered), flatten(&wanted));
            }
        }
    }
}
