//! Requests to the store: carrying out a [`RequestPlan`] — one GET per
//! planned request, each timed for `auto`'s tuner and, under `auto`, sent
//! once its store's window of requests in flight has room and sent again
//! beside itself when it has not answered in time — and cutting the bodies
//! back into the ranges the plan was made for.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore};

use super::hedge::{Answered, first_of_two};
use super::sink::{Reports, report};
use crate::metrics::ScanMetrics;
use crate::pacing::{Outcome, Pacing, Wanted};
use crate::scheduler::{Event, RequestPlan};
use crate::sharing::{ObjectKey, ReadSharing};

/// How a body shorter than its request is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShortBodies {
    /// An error: a read-ahead that fails is read again on demand.
    Fail,
    /// Cut as object_store's `get_ranges` cuts them, each range's buffer
    /// clamped to what came back: a demand read hands the decoder what a
    /// stock read would (a range past the end of the file), and the decoder
    /// or the length check fails as it would.
    Clamp,
}

/// How long a GET may wait for its first byte before it is hedged, as the
/// scheduler last decided (`ScanCore::hedge_after`, published by the driver
/// after every event). Read while a GET waits, so a GET sent before the store
/// was measured is hedged once it has been.
#[derive(Debug, Clone, Default)]
pub(crate) struct HedgeDelay(Arc<AtomicU64>);

impl HedgeDelay {
    pub(crate) fn set(&self, after: Option<Duration>) {
        let micros = after.map_or(0, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        self.0.store(micros, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

/// How a scan's GETs go out: when they may, whether and when one is sent
/// again beside itself, and where they are counted.
#[derive(Clone, Copy)]
pub(crate) struct Sending<'a> {
    /// `None`: never hedged (the fixed policies).
    pub after: Option<&'a HedgeDelay>,
    pub metrics: &'a ScanMetrics,
    /// `auto`: the store's window of requests in flight, which a GET waits
    /// for room in and a hedge needs room in (`None`: unpaced).
    pub pacing: Option<&'a Pacing>,
    /// The GETs are a read a decoder waits on: they do not wait for room
    /// (they count in flight all the same).
    pub demand: bool,
    /// Told when a decoder comes to wait on these GETs (a read ahead).
    pub wanted: Option<&'a Wanted>,
}

impl Sending<'_> {
    /// The same, for a read a decoder waits on.
    pub(crate) fn demand(self) -> Self {
        Self {
            demand: true,
            ..self
        }
    }
}

/// How a fetch's requests are shared with other scans reading the same
/// bytes at the same time: this scan's side, and the object version read.
/// Only background fetches share: a task of its own drives each of their
/// requests, so a scan waiting for one never waits on a stream nobody polls
/// (a demand read progresses only while its decoder is polled, and an
/// operator may stop polling one input until another, which could be the
/// waiter, is done), and a decoder that gave up on a stalled read-ahead
/// reads from the store, not from it again.
#[derive(Clone, Copy)]
pub(crate) struct SharedObject<'a> {
    pub sharing: &'a ReadSharing,
    pub object: &'a ObjectKey,
}

/// The object a fetch reads, and where else than the store its bytes may
/// come from.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub location: &'a Path,
    /// The whole object, kept at planning.
    pub kept: Option<&'a Bytes>,
    /// Other scans' reads of it (background fetches only).
    pub shared: Option<SharedObject<'a>>,
}

/// Fetch the plan's requests in parallel and return one buffer per range the
/// plan was made for, in order. Each request is counted in the metrics as
/// it goes out; a request within `kept` (the whole object, kept at
/// planning) is cut from it instead, and what other scans are reading of a
/// request's range at the time is not asked again but waited for (both
/// counted, neither timed: they say nothing about the store).
pub(crate) async fn fetch_planned(
    store: &dyn ObjectStore,
    Target {
        location,
        kept,
        shared,
    }: Target<'_>,
    plan: &RequestPlan,
    short: ShortBodies,
    sending: Sending<'_>,
    sink: &Reports,
) -> object_store::Result<Vec<Bytes>> {
    let fetch = |range: Range<u64>| async move {
        let expected = range.end - range.start;
        // Counted once, however often pacing withdraws and sends it again.
        sending.metrics.request(expected);
        let options = GetOptions::new().with_range(Some(range.clone()));
        let send = || first_answer(store, location, options.clone(), sending);
        let (permit, started, answered) = match sending.pacing {
            Some(pacing) => {
                let sent = pacing.request(sending.demand, sending.wanted, send).await;
                if sent.withdrawn > 0 {
                    sending.metrics.requests_withdrawn(sent.withdrawn);
                }
                (Some(sent.permit), sent.at, sent.answer)
            }
            None => (None, Instant::now(), send().await),
        };
        let answer = match answered {
            Ok(answer) => answer,
            Err(e) => {
                if let Some(permit) = permit {
                    permit.ended(Outcome::of_error(&e));
                }
                return Err(e);
            }
        };
        let first_byte = started.elapsed();
        // The request holds its room in the window until its body is in.
        let body = answer.bytes().await?;
        // A slow answer from a throttling store timed the client's retries.
        let throttled = permit.is_some_and(|permit| permit.ended(Outcome::Answered(first_byte)));
        if body.len() as u64 != expected && short == ShortBodies::Fail {
            return Err(object_store::Error::Generic {
                store: "prefetch",
                source: format!(
                    "{location}: {} bytes returned for range {}..{} ({expected} bytes)",
                    body.len(),
                    range.start,
                    range.end
                )
                .into(),
            });
        }
        if !throttled {
            report(
                sink,
                Event::TransferTimed {
                    bytes: expected,
                    first_byte,
                    took: started.elapsed(),
                },
            );
        }
        Ok(body)
    };
    let bodies = try_join_all(plan.requests.iter().map(|request| async move {
        if let Some(body) = kept.and_then(|body| cut_kept(body, request)) {
            sending.metrics.read_kept(body.len() as u64);
            sending.metrics.copied(body.len() as u64);
            return Ok(body);
        }
        let Some(SharedObject { sharing, object }) = shared else {
            return fetch(request.clone()).await;
        };
        let read = sharing.read(object, request.clone(), fetch).await?;
        if read.waited > 0 {
            sending.metrics.reads_shared(read.waited, read.shared);
        }
        if read.copied > 0 {
            sending.metrics.copied(read.copied);
        }
        Ok::<_, object_store::Error>(read.bytes)
    }))
    .await?;
    Ok(assemble(plan, &bodies))
}

/// The answer to a GET, hedged as `sending` says ([`first_of_two`]): under
/// `auto`, a hedge waits for room in the window, is not sent while the
/// store throttles, nor beside a read ahead no decoder waits on yet.
async fn first_answer(
    store: &dyn ObjectStore,
    location: &Path,
    options: GetOptions,
    sending: Sending<'_>,
) -> object_store::Result<GetResult> {
    let Some(after) = sending.after else {
        return store.get_opts(location, options).await;
    };
    let hedge = || {
        let permit = match sending.pacing {
            Some(pacing) => Some(pacing.try_hedge()?),
            None => None,
        };
        sending.metrics.request_hedged();
        Some(permit)
    };
    // Under `auto` a read ahead is hedged only once a decoder waits on it:
    // a hedge buys latency, which a read ahead nobody waits on yet does not
    // need, and every hedge is one more request and more work for a process
    // that may be busy enough decoding already.
    let needed = async {
        match (sending.pacing, sending.wanted) {
            (Some(_), Some(wanted)) if !sending.demand => wanted.wanted().await,
            _ => {}
        }
    };
    let (answer, answered) = first_of_two(
        || store.get_opts(location, options.clone()),
        needed,
        || after.get(),
        hedge,
    )
    .await?;
    if answered == Answered::Hedge {
        sending.metrics.hedge_won();
    }
    Ok(answer)
}

/// The bytes of `range` of an object kept whole, if it lies within it (a
/// range past its end goes to the store, which answers it as it would
/// without keeping). A copy: the kept body is let go when its scan is done
/// with the object, and a slice would keep all of it alive uncounted.
fn cut_kept(body: &Bytes, range: &Range<u64>) -> Option<Bytes> {
    let within = range.start <= range.end && range.end <= body.len() as u64;
    within.then(|| Bytes::copy_from_slice(&body[range.start as usize..range.end as usize]))
}

/// The bytes of each of `ranges` of an object kept whole, if they all lie
/// within it (see [`cut_kept`]).
pub(super) fn cut_all_kept(body: &Bytes, ranges: &[Range<u64>]) -> Option<Vec<Bytes>> {
    ranges.iter().map(|range| cut_kept(body, range)).collect()
}

/// Each range's bytes from the bodies of the plan's requests: a slice of one
/// body when the range lies in one request, a copy when a split cut it. A
/// body shorter than its request gives what it has of each range.
fn assemble(plan: &RequestPlan, bodies: &[Bytes]) -> Vec<Bytes> {
    let cut = |request: usize, within: &Range<u64>| {
        let body = &bodies[request];
        let end = (within.end as usize).min(body.len());
        body.slice((within.start as usize).min(end)..end)
    };
    plan.sources
        .iter()
        .map(|source| match source.pieces.as_slice() {
            [] => Bytes::new(),
            [(request, within)] => cut(*request, within),
            pieces => {
                let len: u64 = pieces.iter().map(|(_, w)| w.end - w.start).sum();
                let mut joined = BytesMut::with_capacity(len as usize);
                for (request, within) in pieces {
                    joined.extend_from_slice(&cut(*request, within));
                }
                joined.freeze()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::plan_requests;

    /// The fixed policies' fetches merge as object_store's `get_ranges`
    /// does on S3, GCS, Azure and HTTP.
    #[test]
    fn the_scheduler_merges_across_the_gap_object_store_coalesces() {
        assert_eq!(
            crate::scheduler::STORE_MERGE_GAP,
            object_store::OBJECT_STORE_COALESCE_DEFAULT
        );
    }

    #[test]
    fn a_kept_body_serves_ranges_within_it_as_copies() {
        let body = Bytes::from((0..100u8).collect::<Vec<_>>());
        let cut = cut_kept(&body, &(10..20)).expect("within");
        assert_eq!(&cut[..], &body[10..20]);
        assert_ne!(cut.as_ptr(), body[10..].as_ptr(), "a copy, not a slice");
        assert_eq!(cut_kept(&body, &(90..100)).map(|b| b.len()), Some(10));
        assert!(
            cut_kept(&body, &(90..101)).is_none(),
            "past the end: the store's"
        );
    }

    #[test]
    fn split_and_merged_ranges_come_back_whole() {
        let file: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let ranges = vec![0..10, 12..20, 100..700, 900..1000];
        let plan = plan_requests(&ranges, 4, |len| (len > 250).then_some(250));
        assert!(plan.merged >= 1 && plan.split >= 2, "{plan:?}");
        let bodies: Vec<Bytes> = plan
            .requests
            .iter()
            .map(|r| Bytes::copy_from_slice(&file[r.start as usize..r.end as usize]))
            .collect();
        let out = assemble(&plan, &bodies);
        for (range, bytes) in ranges.iter().zip(out) {
            assert_eq!(&bytes[..], &file[range.start as usize..range.end as usize]);
        }
    }
}
