//! Serving the decoder: its footer (read ahead, or through the wrapped
//! reader), the slices it reads a file in, and its byte ranges — from staged
//! buffers where the scheduler says so, with one demand request for the
//! rest. A read-ahead that failed or stalled never fails a read: its bytes
//! are fetched on demand instead.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use datafusion::physical_plan::metrics::Count;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};

use super::driver::{ScanDriver, Served};
use super::fetch::{ShortBodies, Target, cut_all_kept, fetch_planned};
use super::fetches::Buffers;
use super::footer_layout::layout_of;
use super::read_error;
use super::sink::EventSink;
use super::tasks::SharedResult;
use crate::governor::Hold;
use crate::scheduler::{
    Event, FetchId, FileId, Part, PartitionId, ReadPlan, SlicePlan, starts_past_the_end,
};

type ReadResult<T> = parquet::errors::Result<T>;

impl ScanDriver {
    /// The footer of `file`, from a read-ahead if one ran, else from `reader`.
    pub(crate) async fn metadata(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        options: Option<&ArrowReaderOptions>,
    ) -> ReadResult<Arc<ParquetMetaData>> {
        let ahead = match self.footers.get(file) {
            Some(ahead) => self.await_ahead(ahead).await,
            None => None,
        };
        let wants_page_index = options
            .map(|o| o.column_index_policy() != PageIndexPolicy::Skip)
            .unwrap_or(false);
        if let Some(metadata) = ahead
            && (!wants_page_index
                || (metadata.column_index().is_some() && metadata.offset_index().is_some()))
        {
            return Ok(metadata);
        }
        let metadata = reader.get_metadata(options).await?;
        if !self.view(|core| core.reads_like_off(file)) {
            let layout = Arc::new(layout_of(
                &metadata,
                self.units.file(file),
                self.slicing,
                self.footers.pruning(),
            ));
            self.apply([Event::FooterKnown { file, layout }]);
        }
        Ok(metadata)
    }

    /// The slices `file` is read in, once its footer and offset index are
    /// known; `None` reads it at row-group granularity (no offset index, the
    /// footer read failed or stalled — the decoder then reads the footer
    /// itself and reports any error as DataFusion would).
    pub(crate) async fn slices(
        &self,
        file: FileId,
        partition: PartitionId,
    ) -> Option<Arc<SlicePlan>> {
        if !self.slicing {
            return None;
        }
        self.probe_store(file).await;
        if self.view(|core| core.slices_files()) {
            let footer = match self.footers.get(file) {
                Some(footer) => footer,
                None => {
                    // The decoder waits on this one.
                    self.open_ahead(file, partition, true);
                    self.footers.get(file)?
                }
            };
            self.await_ahead(footer).await?;
        }
        self.apply([Event::DecodersStarting { file }]);
        self.slice_plan(file)
    }

    /// Serve a decoder's request: staged buffers where they cover it, one
    /// demand read (widened under `batched`) for the rest. `bytes_scanned`:
    /// the file's DataFusion metric, counted here when the wrapped reader,
    /// which counts it otherwise, is not asked.
    pub(crate) async fn read(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        ranges: Vec<Range<u64>>,
        bytes_scanned: Option<&Count>,
    ) -> ReadResult<Vec<Bytes>> {
        if self.view(|core| core.reads_like_off(file)) {
            return self
                .read_like_off(file, reader, ranges, bytes_scanned)
                .await;
        }
        if let Some(scanned) = bytes_scanned {
            scanned.add(total(&ranges) as usize);
        }
        let started = Instant::now();
        let at = self.started.elapsed();
        let asked = [
            Event::ReadStarted { file, at },
            Event::ReadAsked {
                file,
                ranges: ranges.clone(),
            },
        ];
        self.reservation.read_asked();
        let Served {
            plan,
            staged,
            widened_hold,
            retained_hold,
        } = self.apply(asked).expect("a read is served");
        let mut ridden = Ridden {
            driver: self,
            widened: plan.widened.as_ref().map(|w| w.0).zip(widened_hold),
            retained: plan.retained.as_ref().map(|r| r.0).zip(retained_hold),
        };
        // Failed or dropped midway, `ridden` reports the widened and retained
        // ranges failed before their holds go.
        let demanded = match self.fetch_demand(file, reader, &plan, &mut ridden).await {
            Ok(demanded) => demanded,
            Err(e) => {
                drop(ridden);
                self.metrics.io_wait(started.elapsed());
                return Err(self.read_error(file, &plan.demand, e));
            }
        };
        let out = self
            .assemble(file, reader, &ranges, &plan, &staged, &demanded)
            .await?;
        self.metrics.io_wait(started.elapsed());
        let bytes: u64 = out.iter().map(|b| b.len() as u64).sum();
        let at = self.started.elapsed();
        self.apply([Event::ReadFinished { file, bytes, at }]);
        Ok(out)
    }

    /// Fetch what the plan demands (and widens), as the scheduler planned
    /// the requests or in one request through the wrapped reader; keep the
    /// widened and retained buffers it brings.
    async fn fetch_demand(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        plan: &ReadPlan,
        ridden: &mut Ridden<'_>,
    ) -> ReadResult<Vec<Bytes>> {
        let mut request = plan.demand.clone();
        if let Some((_, widened)) = &plan.widened {
            request.extend(widened.iter().cloned());
        }
        if request.is_empty() {
            return Ok(vec![]);
        }
        if let Some(range) = &plan.refused {
            return Err(self.refusal(file, range));
        }
        if plan.demand_requests.is_none() {
            // Planned requests are counted as they go out.
            self.metrics.request(total(&request));
        }
        // Planned requests bring every range they were planned for, widened
        // ranges the pool then refused included (dropped below).
        let lengths: Vec<u64> = match &plan.demand_requests {
            Some(requests) => requests
                .sources
                .iter()
                .map(|s| s.pieces.iter().map(|(_, w)| w.end - w.start).sum())
                .collect(),
            None => request.iter().map(|r| r.end - r.start).collect(),
        };
        let mut fetched = match &plan.demand_requests {
            Some(requests) => {
                let kept = self.kept(file);
                let target = Target {
                    location: &self.units.file(file).object_meta.location,
                    kept: kept.as_ref(),
                    // Not shared: see `SharedObject`.
                    shared: None,
                };
                let sink = self.sink();
                let sending = self.sending().demand();
                let planned = fetch_planned(
                    self.store.as_ref(),
                    target,
                    requests,
                    ShortBodies::Clamp,
                    sending,
                    &sink,
                );
                self.demand(async {
                    planned
                        .await
                        .map_err(|e| ParquetError::External(Box::new(e)))
                })
                .await?
            }
            None => {
                let asked = Instant::now();
                let fetched = self.demand(reader.get_byte_ranges(request)).await?;
                // Ranges of one demand read travel in parallel: the largest
                // one sets its time.
                let bytes = lengths.iter().copied().max().unwrap_or(0);
                let took = asked.elapsed();
                self.report(Event::RequestTimed { bytes, took });
                fetched
            }
        };
        let whole = fetched.len() == lengths.len()
            && fetched
                .iter()
                .zip(&lengths)
                .all(|(b, l)| b.len() as u64 == *l);
        if !whole {
            return Err(ParquetError::General(format!(
                "the store returned {} buffers of {:?} bytes for ranges of {lengths:?} bytes",
                fetched.len(),
                fetched.iter().map(Bytes::len).collect::<Vec<_>>()
            )));
        }
        let widened = fetched.split_off(plan.demand.len());
        if let Some((id, hold)) = ridden.widened.take()
            && self.fetches.rides(id)
        {
            let kept = self.copied(widened.iter());
            self.fetches.insert_ready(id, kept, hold);
        }
        if let (Some((_, positions)), Some((id, hold))) = (&plan.retained, ridden.retained.take()) {
            self.retain(id, positions, &fetched, hold);
        }
        Ok(fetched)
    }

    /// Each requested range's bytes, in order: a slice of a staged buffer or
    /// of the demand read. A staged buffer that failed, was cancelled or
    /// stalled is fetched on demand instead.
    async fn assemble(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        ranges: &[Range<u64>],
        plan: &ReadPlan,
        staged: &HashMap<FetchId, SharedResult<Buffers>>,
        demanded: &[Bytes],
    ) -> ReadResult<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ranges.len());
        for (range, part) in ranges.iter().zip(&plan.parts) {
            let bytes = match part {
                Part::Demand { index } => demanded[*index].clone(),
                Part::Staged {
                    id,
                    index,
                    offset,
                    len,
                } => {
                    let landed = match staged.get(id) {
                        Some(fetch) => self.await_ahead(fetch.clone()).await,
                        None => None,
                    };
                    // A buffer shorter than its range (a misbehaving store) is
                    // treated like a failed prefetch rather than sliced out of bounds.
                    let (start, end) = (*offset as usize, (*offset + *len) as usize);
                    let slice = landed
                        .as_ref()
                        .and_then(|buffers| buffers.get(*index))
                        .filter(|buffer| buffer.len() >= end)
                        .map(|buffer| buffer.slice(start..end));
                    match slice {
                        Some(bytes) => bytes,
                        None => {
                            // Its pieces are dropped before its hold goes.
                            let bytes = range.end - range.start;
                            self.apply([
                                Event::FetchFailed { id: *id },
                                Event::FallbackRead { id: *id, bytes },
                            ]);
                            self.fetches.abandon(*id);
                            self.metrics.request(bytes);
                            self.demand(reader.get_bytes(range.clone()))
                                .await
                                .map_err(|e| {
                                    self.read_error(file, std::slice::from_ref(range), e)
                                })?
                        }
                    }
                }
            };
            out.push(bytes);
        }
        Ok(out)
    }

    /// `auto` on a local store: the decoder's own read, untouched, only timed
    /// (so a store that turns slow is noticed) — or cut from the file's
    /// body, if planning kept it (before the scan has timed its store, its
    /// first reads come here).
    async fn read_like_off(
        &self,
        file: FileId,
        reader: &mut (dyn AsyncFileReader + Send),
        ranges: Vec<Range<u64>>,
        bytes_scanned: Option<&Count>,
    ) -> ReadResult<Vec<Bytes>> {
        let size = self.units.file(file).object_meta.size;
        if let Some(range) = starts_past_the_end(size, &ranges) {
            return Err(self.read_error(file, &ranges, self.refusal(file, &range)));
        }
        if let Some(cut) = self
            .kept(file)
            .and_then(|body| cut_all_kept(&body, &ranges))
        {
            // Counted as the store's read below is: one request for all
            // of the decoder's ranges.
            self.metrics.read_kept(total(&ranges));
            for bytes in &cut {
                self.metrics.copied(bytes.len() as u64);
            }
            self.metrics.unplanned_read(total(&ranges), true);
            if let Some(scanned) = bytes_scanned {
                scanned.add(total(&ranges) as usize);
            }
            return Ok(cut);
        }
        let bytes = ranges.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        self.metrics.request(total(&ranges));
        let asked = Instant::now();
        let read = self.demand(reader.get_byte_ranges(ranges.clone())).await;
        self.metrics.unplanned_read(total(&ranges), read.is_ok());
        match read {
            Ok(fetched) => {
                let took = asked.elapsed();
                self.report(Event::RequestTimed { bytes, took });
                self.metrics.io_wait(took);
                Ok(fetched)
            }
            Err(e) => Err(self.read_error(file, &ranges, e)),
        }
    }

    /// Keep demanded pages a later slice reads staged under `id` (the
    /// scheduler has admitted them, the governor holds them), once the pool
    /// agrees.
    fn retain(&self, id: FetchId, positions: &[usize], fetched: &[Bytes], hold: Hold) {
        if !self.fetches.rides(id) {
            // Released while the read was in flight: nothing to keep (the
            // hold goes with this frame, staged was lowered at the release).
            return;
        }
        let bytes: u64 = positions.iter().map(|&i| fetched[i].len() as u64).sum();
        if !self.reservation.try_reserve_pool(bytes) {
            self.fetches.unride(id);
            // Unstaged before the hold goes (with this frame).
            self.apply([Event::PoolRefused { id }]);
            return;
        }
        let kept = self.copied(positions.iter().map(|&i| &fetched[i]));
        self.fetches.insert_ready(id, kept, hold);
    }

    /// Copies of `buffers`, to be kept staged: a demand read's buffers are
    /// slices of its request bodies, and a slice keeps its whole body alive
    /// (a small page could keep a merged multi-MiB body, that no hold counts,
    /// for as long as it stays staged). A copy holds exactly its own bytes.
    fn copied<'a>(&self, buffers: impl Iterator<Item = &'a Bytes>) -> Vec<Bytes> {
        let kept: Vec<Bytes> = buffers.map(|b| Bytes::copy_from_slice(b)).collect();
        self.metrics
            .copied(kept.iter().map(|b| b.len() as u64).sum());
        kept
    }

    /// Wait for a read-ahead, but not forever: after the fetches' patience
    /// the reader gives up on it and reads the bytes itself. `None` if it
    /// failed or stalled.
    async fn await_ahead<T: Clone>(&self, ahead: SharedResult<T>) -> Option<T> {
        match tokio::time::timeout(self.fetches.patience(), ahead).await {
            Ok(result) => result.ok(),
            Err(_) => {
                self.metrics.stalled_read_ahead();
                None
            }
        }
    }

    /// A demand read, within `prefetch.request_timeout` if one is set.
    async fn demand<T>(&self, read: impl Future<Output = ReadResult<T>>) -> ReadResult<T> {
        match self.request_timeout {
            None => read.await,
            Some(limit) => tokio::time::timeout(limit, read).await.unwrap_or_else(|_| {
                Err(ParquetError::General(format!(
                    "no answer within prefetch.request_timeout ({limit:?})"
                )))
            }),
        }
    }

    /// A demand read failed: say which file and bytes, whatever the store said.
    fn read_error(&self, file: FileId, ranges: &[Range<u64>], error: ParquetError) -> ParquetError {
        let location = self.units.display(file);
        let ranges: Vec<String> = ranges
            .iter()
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        read_error::reading(
            format!("reading {location} bytes [{}]", ranges.join(", ")),
            error,
        )
    }

    /// A range that starts past the end of `file` (a corrupt footer),
    /// refused as a store refuses it rather than asked for.
    fn refusal(&self, file: FileId, range: &Range<u64>) -> ParquetError {
        let size = self.units.file(file).object_meta.size;
        read_error::refused(format!(
            "range {}..{} starts past the end of the file ({size} bytes)",
            range.start, range.end
        ))
    }
}

/// The holds of a read's widened and retained ranges until its demand read
/// lands. Dropped before that (the read failed, or its future was dropped:
/// a cancelled query), it tells the scheduler the ranges failed — so they are
/// no longer staged — and only then lets their holds go.
struct Ridden<'a> {
    driver: &'a ScanDriver,
    widened: Option<(FetchId, Hold)>,
    retained: Option<(FetchId, Hold)>,
}

impl Drop for Ridden<'_> {
    fn drop(&mut self) {
        let ids: Vec<FetchId> = [&self.widened, &self.retained]
            .into_iter()
            .flatten()
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return;
        }
        for &id in &ids {
            self.driver.fetches.unride(id);
        }
        self.driver
            .apply(ids.into_iter().map(|id| Event::FetchFailed { id }));
        // The holds go with the fields, after this.
    }
}

/// Bytes of `ranges`, each counted as asked.
fn total(ranges: &[Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}
