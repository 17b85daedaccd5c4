//! Footers read ahead: an upcoming file's metadata read in the background,
//! through the wrapped reader factory exactly as its decoder would (so it
//! lands in DataFusion's metadata cache), kept for the decoder, and told to
//! the scheduler as a [`FileLayout`](crate::scheduler::FileLayout).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use datafusion_datasource::PartitionedFile;
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};

use super::footer_layout::{layout_of, offset_index_fits};
use super::pruning::StatisticsPruning;
use super::sink::{Reports, report};
use super::tasks::{ScanTask, SharedResult, Slot};
use crate::scheduler::{Event, FileId};

/// A footer read ahead, as the decoder gets it.
pub(crate) type Footer = Arc<ParquetMetaData>;

/// The footers a scan reads ahead.
pub(crate) struct Footers {
    slots: Mutex<HashMap<FileId, Slot<Footer>>>,
    /// The scan reads files with an offset index in slices: footers are read
    /// with it.
    slicing: bool,
    /// The row groups each file's opener will prune, predicted from its footer.
    pruning: Option<Arc<StatisticsPruning>>,
}

impl Footers {
    pub(crate) fn new(slicing: bool, pruning: Option<Arc<StatisticsPruning>>) -> Self {
        Self {
            slots: Mutex::default(),
            slicing,
            pruning,
        }
    }

    /// Read `file`'s footer with `reader` in the background. `timed`: it is
    /// not in the metadata cache and goes out unpaced, so the read is
    /// (mostly) one small request — a round trip, reported to `sink` for
    /// `auto`.
    pub(crate) fn read_ahead(
        &self,
        id: FileId,
        file: PartitionedFile,
        mut reader: Box<dyn AsyncFileReader + Send>,
        timed: bool,
        task: ScanTask,
        sink: Reports,
    ) {
        let slicing = self.slicing;
        let pruning = self.pruning.clone();
        // Slicing needs the offset index; otherwise the decoder loads the
        // page index itself when a predicate can use it.
        let page_index = if slicing {
            PageIndexPolicy::Optional
        } else {
            PageIndexPolicy::Skip
        };
        let slot = task.spawn_slot("footer read", async move {
            let options = ArrowReaderOptions::new().with_page_index_policy(page_index);
            let started = Instant::now();
            let mut metadata = reader
                .get_metadata(Some(&options))
                .await
                .map_err(|e| Arc::new(e.to_string()))?;
            if timed {
                let took = started.elapsed();
                report(&sink, Event::RequestTimed { bytes: 0, took });
            }
            if !offset_index_fits(&metadata, file.object_meta.size) {
                // Loaded for slicing only: a decoder must meet a corrupt offset
                // index only if it loads the page index itself, as without us.
                metadata = Arc::new(
                    ParquetMetaData::clone(&metadata)
                        .into_builder()
                        .set_column_index(None)
                        .set_offset_index(None)
                        .build(),
                );
            }
            let layout = Arc::new(layout_of(&metadata, &file, slicing, pruning.as_deref()));
            report(&sink, Event::FooterKnown { file: id, layout });
            Ok(metadata)
        });
        self.slots.lock().insert(id, slot);
    }

    /// How the scan predicts its openers' pruning, if it has a predicate.
    pub(crate) fn pruning(&self) -> Option<&StatisticsPruning> {
        self.pruning.as_deref()
    }

    /// The footer read ahead for `file`, to await, if one was started.
    pub(crate) fn get(&self, file: FileId) -> Option<SharedResult<Footer>> {
        self.slots.lock().get(&file).map(|s| s.result.clone())
    }

    /// The footer read of a finished file is no longer useful to anyone.
    pub(crate) fn forget(&self, file: FileId) {
        if let Some(slot) = self.slots.lock().remove(&file) {
            slot.stop();
        }
    }

    /// Stop every footer read (the scan is over).
    pub(crate) fn stop_all(&self) {
        for (_, slot) in self.slots.lock().drain() {
            slot.stop();
        }
    }
}
