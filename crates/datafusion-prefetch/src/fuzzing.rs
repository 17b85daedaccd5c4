//! Fuzz target bodies for the pure core: the `cargo fuzz` targets in `fuzz/`
//! call them, and so does a bounded test in `tests/integration/fuzz_targets.rs`,
//! so the stable CI runs the same code on a seeded sample of inputs.
//!
//! Each body takes raw bytes, decodes from them whatever it needs (missing bytes
//! read as zero, so every input is valid) and panics when an invariant breaks.
//! Not part of the public API.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion_datasource::FileRange;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};

use crate::config::PrefetchPolicy;
use crate::io::{layout_from_metadata, offset_index_fits};
use crate::scheduler::{
    Action, ChunkPages, CoreConfig, Event, FetchId, FileLayout, PageSpan, Part, ReadPlan, ScanCore,
    SliceSizing, plan_slices,
};

/// Bytes a body decodes its choices from; past the end, every read is zero.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number in `0..=max`, from as few bytes as `max` needs.
    fn upto(&mut self, max: u64) -> u64 {
        let mut value = 0u64;
        let mut span = max;
        while span > 0 {
            value = (value << 8) | u64::from(self.byte());
            span >>= 8;
        }
        if max == u64::MAX {
            value
        } else {
            value % (max + 1)
        }
    }

    /// A size from 0 to about `2^max_log2`, spread evenly over magnitudes
    /// (so small windows meet large chunks as often as the reverse).
    fn size(&mut self, max_log2: u64) -> u64 {
        let magnitude = self.upto(max_log2);
        (1u64 << magnitude) - 1 + self.upto((1u64 << magnitude) - 1)
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// Take the next `len` bytes (fewer at the end).
    fn take(&mut self, len: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// A column chunk layout as `FileLayout::from_metadata` can produce it from a
/// corrupt footer: chunks anywhere (overlapping, empty, out of order), pages
/// inside their chunk but in any order, with any first rows, row counts and
/// row selections unrelated to the pages.
fn layout(input: &mut Input) -> FileLayout {
    let columns = 1 + input.upto(3) as usize;
    let row_groups = input.upto(4) as usize;
    let paths: Vec<String> = (0..columns)
        .map(|c| match input.upto(3) {
            // A nested leaf, so a top-level column can have several.
            0 => format!("s.c{c}"),
            _ => format!("c{c}"),
        })
        .collect();
    let mut offset = 4u64;
    let mut chunks = vec![];
    let mut pages = vec![];
    for _ in 0..row_groups {
        let mut group = vec![];
        let mut group_pages = vec![];
        for _ in 0..columns {
            let start = if input.upto(7) == 0 {
                input.upto(1 << 16)
            } else {
                offset
            };
            let len = input.size(14);
            let chunk = start..start + len;
            offset = offset.max(chunk.end);
            let count = input.upto(4);
            let mut spans = vec![];
            for _ in 0..count {
                let from = chunk.start + input.upto(len);
                let to = from + input.upto(chunk.end - from);
                spans.push(PageSpan {
                    bytes: from..to,
                    first_row: input.upto(2000),
                });
            }
            let dictionary = spans
                .first()
                .filter(|p| p.bytes.start != chunk.start)
                .map(|p| chunk.start..p.bytes.start);
            group_pages.push(ChunkPages {
                dictionary,
                pages: spans,
            });
            group.push(chunk);
        }
        chunks.push(group);
        pages.push(group_pages);
    }
    let row_counts: Vec<u64> = (0..row_groups).map(|_| input.upto(2000)).collect();
    let mut layout = FileLayout::new(paths, chunks);
    if input.bool() {
        layout = layout.with_pages(row_counts, pages);
    } else {
        layout.row_counts = row_counts;
    }
    layout.scanned_row_groups = (0..row_groups).filter(|_| input.upto(3) != 0).collect();
    layout.pruned_row_groups = (0..row_groups).filter(|_| input.upto(4) == 0).collect();
    layout.selections = (0..row_groups)
        .map(|_| {
            input.bool().then(|| {
                let mut at = 0;
                (0..input.upto(3))
                    .filter_map(|_| {
                        let start = at + input.upto(700);
                        let end = start + input.upto(700);
                        at = end;
                        (start < end).then_some(start..end)
                    })
                    .collect()
            })
        })
        .collect();
    layout
}

/// Check what [`plan_slices`] returns against the layout it was planned from.
fn check_slices(layout: &FileLayout, columns: &[usize], sizing: &SliceSizing) {
    let Some(plan) = plan_slices(layout, columns, sizing) else {
        return;
    };
    assert_eq!(plan.slices.len(), plan.pieces.len());
    assert!(!plan.slices.is_empty(), "an empty plan instead of None");
    for (i, (slice, pieces)) in plan.slices.iter().zip(&plan.pieces).enumerate() {
        assert!(layout.scanned_row_groups.contains(&slice.row_group));
        let rows = layout.row_counts[slice.row_group];
        assert!(slice.rows.start < slice.rows.end && slice.rows.end <= rows);
        assert!(!slice.selected.is_empty());
        for r in &slice.selected {
            assert!(r.start < r.end && slice.rows.start <= r.start && r.end <= slice.rows.end);
        }
        for piece in pieces {
            let chunk = layout
                .chunk(slice.row_group, piece.column)
                .expect("a piece of a column of the row group");
            assert!(
                chunk.start <= piece.bytes.start && piece.bytes.end <= chunk.end,
                "piece {:?} outside its chunk {chunk:?}",
                piece.bytes
            );
            assert!(piece.last_slice >= i && piece.last_slice < plan.slices.len());
        }
        let _ = plan.slice_bytes(i);
    }
}

/// Drive a [`ScanCore`] over `layouts` with events decoded from `input`,
/// checking after each that staged bytes stay within the budget and every
/// window, that each read is answered part for part with staged parts inside
/// the fetches that hold them, and that shutdown releases everything.
fn drive(input: &mut Input, layouts: Vec<Arc<FileLayout>>) {
    let policy = match input.upto(3) {
        0 => PrefetchPolicy::Batched,
        1 => PrefetchPolicy::Pipelined,
        2 => PrefetchPolicy::Streaming,
        _ => PrefetchPolicy::Auto,
    };
    let window = 1 + input.size(17);
    let budget = window + input.size(17);
    // Above the window, as when `auto` is left to size its own lead.
    let auto_stream_limit = window.max(budget / 2);
    let config = CoreConfig {
        policy,
        read_ahead_window: window,
        memory_budget: budget,
        file_open_depth: input.upto(3) as usize,
        auto_stream_limit,
        eager_first_read_cap: input.size(17),
        hedge_after: crate::config::HedgeAfter::Auto,
        slice_target_bytes: 1 + input.size(16),
        slice_min_column_bytes: input.size(12),
        owns_demand_reads: input.bool(),
    };
    let files = layouts.len();
    let partitions = 1 + input.upto(2) as usize;
    let order: Vec<Vec<usize>> = (0..partitions)
        .map(|_| {
            (0..input.upto(files as u64))
                .map(|_| input.upto(files as u64 - 1) as usize)
                .collect()
        })
        .collect();
    let projection = input.bool().then(|| {
        (0..input.upto(2))
            .map(|c| {
                if c == 0 {
                    "s".to_string()
                } else {
                    format!("c{c}")
                }
            })
            .collect()
    });
    let mut core = ScanCore::new(config, files, order)
        .with_projection(projection)
        .with_predicate(input.bool());
    // The ranges of every fetch issued and not yet forgotten, by id.
    let mut fetches: BTreeMap<FetchId, Vec<Range<u64>>> = BTreeMap::new();
    // The fetches the last answer admitted: the pool or the governor refuses
    // a fetch in the answer that admits it, before its requests go out
    // (ranges widening a demand read: only the pool, as the driver reports
    // either refusal of them). `(id, widened)`.
    let mut just_admitted: Vec<(FetchId, bool)> = vec![];
    // Background fetches admitted whose tasks have not started (a task
    // released before it starts never sends).
    let mut unsent: Vec<FetchId> = vec![];
    let mut open = vec![0usize; files];
    let mut clock = Duration::ZERO;
    let mut steps = 0;
    while !input.is_empty() && steps < 512 {
        steps += 1;
        let file = input.upto(files as u64 - 1) as usize;
        let layout = &layouts[file];
        // Reads most often: they are what moves a scan along.
        let event = match input.upto(15) {
            0 | 1 => {
                let partition = input.upto(partitions as u64 - 1) as usize;
                if input.bool() {
                    Event::PartitionStarted { partition }
                } else {
                    open[file] += 1;
                    Event::ReaderOpened { file, partition }
                }
            }
            2 if open[file] > 0 => {
                open[file] -= 1;
                Event::ReaderClosed { file }
            }
            3 | 4 => Event::FooterKnown {
                file,
                layout: Arc::clone(layout),
            },
            5 => match core.slice_plan(file) {
                Some(plan) => {
                    let slice = input.upto(plan.slices.len() as u64 - 1) as usize;
                    Event::SliceStarted { file, slice }
                }
                None => continue,
            },
            // `auto`'s measurements (ignored by the other policies), with
            // times from a clock that only moves forward.
            7 => {
                clock += Duration::from_micros(input.size(22));
                match input.upto(2) {
                    0 => Event::RequestTimed {
                        bytes: input.size(26),
                        took: Duration::from_micros(input.size(22)),
                    },
                    1 => Event::ReadStarted { file, at: clock },
                    _ => Event::ReadFinished {
                        file,
                        bytes: input.size(26),
                        at: clock,
                    },
                }
            }
            8 => Event::DecodersStarting { file },
            // A task starts, most often right after its answer: its
            // fetch's requests go out.
            10 | 11 => match unsent.pop() {
                Some(id) => {
                    just_admitted.retain(|(admitted, _)| *admitted != id);
                    Event::FetchSent { id }
                }
                None => continue,
            },
            6 => match input.upto(2) {
                // A fetch may fail whenever, also after its pieces went, and
                // a range planned from it may be read on demand instead.
                0 => match fetches.keys().nth(input.upto(7) as usize).copied() {
                    Some(id) if input.bool() => Event::FetchFailed { id },
                    Some(id) => Event::FallbackRead {
                        id,
                        bytes: input.size(20),
                    },
                    None => continue,
                },
                refusal => match just_admitted.pop() {
                    Some((id, widened)) => {
                        unsent.retain(|u| *u != id);
                        if widened || refusal == 1 {
                            Event::PoolRefused { id }
                        } else {
                            Event::GovernorRefused { id }
                        }
                    }
                    None => continue,
                },
            },
            // The process-wide governor's notices.
            9 => match input.upto(1) {
                0 => Event::RoomFreed,
                _ => Event::ShedAsked {
                    bytes: input.size(26),
                },
            },
            _ => {
                let ranges: Vec<Range<u64>> = (0..1 + input.upto(3))
                    .map(|_| read_range(input, layout))
                    .collect();
                Event::ReadAsked { file, ranges }
            }
        };
        let asked = match &event {
            Event::ReadAsked { ranges, .. } => Some(ranges.clone()),
            _ => None,
        };
        let actions = core.handle(event);
        for action in &actions {
            if let Action::Serve(plan) = action {
                let ranges = asked.as_deref().expect("Serve answers a read");
                check_served(plan, ranges, &mut fetches);
            }
        }
        assert_eq!(
            actions
                .iter()
                .filter(|a| matches!(a, Action::Serve(_)))
                .count(),
            usize::from(asked.is_some()),
            "a read, and only a read, is answered with one Serve"
        );
        just_admitted.clear();
        for action in &actions {
            match action {
                Action::Fetch { id, ranges, .. } => {
                    fetches.insert(*id, ranges.clone());
                    just_admitted.push((*id, false));
                    unsent.push(*id);
                }
                Action::Serve(plan) => {
                    if let Some((id, _)) = &plan.widened {
                        just_admitted.push((*id, true));
                    }
                }
                _ => {}
            }
        }
        let stats = core.stats();
        assert!(stats.staged_bytes <= budget, "{stats:?} over {budget}");
        assert!(stats.peak_staged_bytes <= budget);
        let stream_limit = match policy {
            PrefetchPolicy::Auto => auto_stream_limit,
            _ => window,
        };
        for (partition, staged) in core.partition_staged() {
            assert!(
                staged <= stream_limit,
                "partition {partition}: {staged} > {stream_limit}"
            );
        }
    }
    core.handle(Event::ScanEnded);
    let stats = core.stats();
    assert_eq!(stats.staged_bytes, 0, "staged after shutdown");
    // Every byte requested was handed to a decoder or wasted, never both.
    assert_eq!(
        stats.bytes_requested,
        stats.bytes_used + stats.bytes_wasted,
        "{stats:?}"
    );
}

/// Check a read's answer part for part: demand parts point at their range,
/// staged parts inside the fetches that hold them; and note the fetches it
/// adds (widened, retained).
fn check_served(
    plan: &ReadPlan,
    ranges: &[Range<u64>],
    fetches: &mut BTreeMap<FetchId, Vec<Range<u64>>>,
) {
    assert_eq!(plan.parts.len(), ranges.len());
    for (range, part) in ranges.iter().zip(&plan.parts) {
        match part {
            Part::Demand { index } => {
                assert_eq!(plan.demand.get(*index), Some(range));
            }
            Part::Staged {
                id,
                index,
                offset,
                len,
            } => {
                assert_eq!(*len, range.end - range.start);
                let held = fetches
                    .get(id)
                    .and_then(|r| r.get(*index))
                    .unwrap_or_else(|| panic!("served from unknown fetch {id:?}"));
                assert_eq!(held.start + offset, range.start);
                assert!(offset + len <= held.end - held.start);
            }
        }
    }
    if let Some((id, widened)) = &plan.widened {
        assert!(!widened.is_empty());
        fetches.insert(*id, widened.clone());
    }
    if let Some((id, positions)) = &plan.retained {
        assert!(positions.iter().all(|p| *p < plan.demand.len()));
        let kept = positions.iter().map(|p| plan.demand[*p].clone()).collect();
        fetches.insert(*id, kept);
    }
}

/// A range a decoder could ask for: a chunk, a page, a dictionary page, or
/// anything at all (its metadata need not be the layout's).
fn read_range(input: &mut Input, layout: &FileLayout) -> Range<u64> {
    let rg = input.upto(layout.row_groups.len().saturating_sub(1) as u64) as usize;
    let column = input.upto(layout.column_paths.len() as u64 - 1) as usize;
    let page = layout
        .pages
        .as_ref()
        .and_then(|p| p.get(rg)?.get(column))
        .and_then(|chunk| match input.upto(1) {
            0 => chunk.dictionary.clone(),
            _ => {
                let i = input.upto(chunk.pages.len().saturating_sub(1) as u64) as usize;
                chunk.pages.get(i).map(|p| p.bytes.clone())
            }
        });
    match input.upto(7) {
        0 => {
            let start = input.upto(1 << 16);
            start..start + input.size(12)
        }
        1..=3 => page.unwrap_or(0..0),
        _ => layout.chunk(rg, column).unwrap_or(0..0),
    }
}

/// Fuzz target `scan_core`: arbitrary layouts (as a corrupt footer can make
/// them) and event sequences through [`plan_slices`] and [`ScanCore`].
pub fn scan_core(data: &[u8]) {
    let mut input = Input::new(data);
    let layouts: Vec<Arc<FileLayout>> = (0..1 + input.upto(2))
        .map(|_| Arc::new(layout(&mut input)))
        .collect();
    for layout in &layouts {
        let columns: Vec<usize> = (0..input.upto(3)).map(|_| input.upto(4) as usize).collect();
        let sizing = SliceSizing {
            target_bytes: input.size(16),
            stage_limit: input.size(18),
            min_column_bytes: input.size(12),
        };
        check_slices(layout, &columns, &sizing);
    }
    drive(&mut input, layouts);
}

/// Fuzz target `footer`: the first byte says how many bytes after it choose
/// the scan unit, the plan's parameters and the scheduler's events; the rest
/// is a Parquet file (a mutated real one, in practice). Its metadata and offset
/// index, if they parse, go through the footer's conversion to a [`FileLayout`],
/// [`plan_slices`] and a [`ScanCore`].
pub fn footer(data: &[u8]) {
    let mut input = Input::new(data);
    let params = input.byte() as usize;
    let mut params = Input::new(input.take(params));
    let file = Bytes::copy_from_slice(input.data);
    let reader = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Optional);
    let Ok(metadata) = reader.parse_and_finish(&file) else {
        return;
    };
    let size = file.len() as u64;
    let fits = offset_index_fits(&metadata, size);
    let range = params.bool().then(|| {
        let start = params.upto(size) as i64;
        FileRange {
            start,
            end: start + params.upto(size) as i64,
        }
    });
    let with_pages = params.bool();
    let layout = layout_from_metadata(&metadata, size, range.as_ref(), None, with_pages);
    assert_eq!(layout.row_groups.len(), metadata.num_row_groups());
    assert_eq!(layout.row_counts.len(), layout.row_groups.len());
    for chunk in layout.row_groups.iter().flatten() {
        assert!(chunk.start <= chunk.end && chunk.end <= size.max(chunk.start));
        assert!(chunk.start == chunk.end || chunk.end <= size);
    }
    assert!(layout.scanned_row_groups.windows(2).all(|w| w[0] < w[1]));
    if let Some(pages) = &layout.pages {
        assert!(fits, "pages kept from an offset index that does not fit");
        for (rg, chunks) in pages.iter().enumerate() {
            for (column, chunk) in chunks.iter().enumerate() {
                let bounds = layout.chunk(rg, column).expect("a chunk per page list");
                for span in chunk
                    .pages
                    .iter()
                    .map(|p| &p.bytes)
                    .chain(&chunk.dictionary)
                {
                    assert!(bounds.start <= span.start && span.end <= bounds.end);
                }
            }
        }
    }
    let columns: Vec<usize> = (0..1 + params.upto(3))
        .map(|_| params.upto(layout.column_paths.len() as u64) as usize)
        .collect();
    let sizing = SliceSizing {
        target_bytes: params.upto(1 << 16),
        stage_limit: params.upto(1 << 20),
        min_column_bytes: params.upto(1 << 10),
    };
    check_slices(&layout, &columns, &sizing);
    drive(&mut params, vec![Arc::new(layout)]);
}
