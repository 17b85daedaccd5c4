//! Over the real wire: object_store's own clients — `AmazonS3`,
//! `GoogleCloudStorage`, `MicrosoftAzure` and `HttpStore`, with their HTTP
//! stacks, connection pools and retries — against real servers started on
//! loopback (`servers.rs`), under every policy of `PrefetchPolicy::ALL`. The
//! same tests run against each server (one module per server, below).
//!
//! Requests are counted by wrapping the client in a pass-through
//! `SimulatedStore` (no latency): every GET it logs is one HTTP request.

mod servers;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::{collect, execute_stream};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchPolicy, PrefetchStats, enable_prefetch, prefetch_stats};
use datafusion_prefetch_simstore::{
    RequestRecord, RequestState, SimulatedStore, SimulatedStoreConfig, StoreStats,
};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;

use crate::support::{metadata, parquet_file, prefetching_session_at, settle};
use servers::Server;

const REGIONS: [&str; 3] = ["north", "south", "west"];
const FILES_PER_REGION: usize = 4;
const ROWS: usize = 20_000;
const ROW_GROUP_ROWS: usize = 5_000;
/// Column indexes in the files (`id, payload, tag`).
const ALL_COLUMNS: [usize; 3] = [0, 1, 2];
const PAYLOAD: usize = 1;
/// A query over the wire that has not ended after this hangs. (Generous: the
/// emulators are slower than s3s-fs, rclone's WebDAV server the slowest, and
/// a test scans the table in 128 KiB steps on a busy 2-core machine.)
const HANG: Duration = Duration::from_secs(120);

/// A server holding table `t`: 12 files of 4 row groups in 3 hive partitions
/// (`t/region=<r>/file_<n>.parquet`).
struct Wire<S: Server> {
    server: S,
    files: Vec<(Path, Bytes)>,
}

async fn wire<S: Server>() -> Wire<S> {
    let server = S::start();
    let mut files = vec![];
    for (r, region) in REGIONS.iter().enumerate() {
        for n in 0..FILES_PER_REGION {
            let i = r * FILES_PER_REGION + n;
            let bytes = parquet_file((i * ROWS) as u64, ROWS, ROW_GROUP_ROWS);
            let path = server.path(&format!("t/region={region}/file_{i:02}.parquet"));
            server.put(&path, bytes.clone()).await;
            files.push((path, bytes));
        }
    }
    Wire { server, files }
}

/// A prefetching session reading `t` from the server through a counting wrapper.
struct Session {
    ctx: SessionContext,
    requests: Arc<StoreStats>,
    pool: Arc<dyn MemoryPool>,
}

impl Session {
    async fn new<S: Server>(server: &S, partitions: usize, collect_statistics: bool) -> Self {
        let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
        let pool = Arc::clone(&runtime.memory_pool);
        let mut config = SessionConfig::new()
            .with_target_partitions(partitions)
            .with_information_schema(true);
        config.options_mut().execution.collect_statistics = collect_statistics;
        let counted = SimulatedStore::new(server.client(false), SimulatedStoreConfig::none());
        let requests = counted.stats();
        let ctx = prefetching_session_at(config, runtime, &server.store_url(), Arc::new(counted));
        let mut options = ParquetReadOptions::default()
            .table_partition_cols(vec![("region".to_string(), DataType::Utf8)]);
        let schema = crate::support::schema();
        if !collect_statistics {
            // Nothing read at planning: the scan reads every footer itself.
            options = options.schema(&schema);
        }
        ctx.register_parquet("t", server.url("t/"), options)
            .await
            .unwrap();
        Self {
            ctx,
            requests,
            pool,
        }
    }

    async fn set(&self, key: &str, value: &str) {
        self.ctx
            .sql(&format!("SET {key} = '{value}'"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }

    async fn policy(&self, policy: PrefetchPolicy) {
        self.set("prefetch.policy", policy.name()).await;
    }

    /// Run `sql`: its pretty-printed result (or error) and its scans' stats.
    async fn run(&self, sql: &str) -> (Result<String, String>, Vec<Arc<PrefetchStats>>) {
        let plan = self
            .ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let stats = prefetch_stats(&plan);
        let result = collect(plan, self.ctx.task_ctx())
            .await
            .map(|batches| pretty_format_batches(&batches).unwrap().to_string())
            .map_err(|e| e.to_string());
        (result, stats)
    }

    /// After a query: nothing staged, no task running, nothing reserved.
    async fn assert_clean(&self, stats: &[Arc<PrefetchStats>], what: &str) {
        for scan in stats {
            settle(scan).await;
            assert_eq!(scan.staged_bytes(), 0, "{what}: bytes left staged");
            assert_eq!(scan.live_tasks(), 0, "{what}: tasks left running");
        }
        assert_eq!(self.pool.reserved(), 0, "{what}: memory left reserved");
    }
}

fn chunk_range(file: &Bytes, row_group: usize, column: usize) -> Range<u64> {
    let (start, len) = metadata(file)
        .row_group(row_group)
        .column(column)
        .byte_range();
    start..start + len
}

/// What the GETs of one file did.
#[derive(Debug)]
struct FileRequests {
    /// GETs whose range ends at the end of the file: footer reads.
    footer_gets: usize,
    /// All other GETs.
    data_gets: usize,
    bytes: u64,
    /// Bytes of data GETs sent and then dropped before any of their body
    /// was read: a read-ahead the reader stopped waiting for (after
    /// `patience`, on a machine too busy to answer in time) and read itself.
    unanswered_bytes: u64,
}

/// Check the GETs `records` made for `files`: no byte of a non-footer GET
/// fetched twice, every chunk of `columns` covered, and per file the counts.
/// A GET dropped before any of its body was read (under `auto`, the slower
/// of a request and the hedge sent beside it) fetched nothing and is left
/// out.
fn check_requests(
    records: &[RequestRecord],
    files: &[(Path, Bytes)],
    columns: &[usize],
    what: &str,
) -> Vec<FileRequests> {
    files
        .iter()
        .map(|(path, bytes)| {
            let size = bytes.len() as u64;
            let ranges: Vec<Range<u64>> = records
                .iter()
                .filter(|r| r.path == path.as_ref())
                .filter(|r| !(r.state == RequestState::Cancelled && r.bytes_transferred == 0))
                .map(|r| {
                    r.range
                        .clone()
                        .unwrap_or_else(|| panic!("{what}: {path}: a GET failed: {r:?}"))
                })
                .collect();
            let (footers, mut data): (Vec<_>, Vec<_>) =
                ranges.iter().cloned().partition(|r| r.end == size);
            data.sort_by_key(|r| r.start);
            for pair in data.windows(2) {
                assert!(
                    pair[0].end <= pair[1].start,
                    "{what}: {path}: bytes fetched twice: {:?} and {:?} (all: {ranges:?})",
                    pair[0],
                    pair[1]
                );
            }
            for row_group in 0..metadata(bytes).num_row_groups() {
                for &column in columns {
                    let chunk = chunk_range(bytes, row_group, column);
                    let mut covered = chunk.start;
                    let mut sorted = ranges.clone();
                    sorted.sort_by_key(|r| r.start);
                    for r in &sorted {
                        if r.start <= covered && r.end > covered {
                            covered = r.end;
                        }
                    }
                    assert!(
                        covered >= chunk.end,
                        "{what}: {path}: row group {row_group} column {column} ({chunk:?}) \
                         not fetched: {ranges:?}"
                    );
                }
            }
            let unanswered_bytes = records
                .iter()
                .filter(|r| r.path == path.as_ref())
                .filter(|r| r.state == RequestState::Cancelled && r.bytes_transferred == 0)
                .filter_map(|r| r.range.clone())
                .filter(|r| r.end != size)
                .map(|r| r.end - r.start)
                .sum();
            FileRequests {
                footer_gets: footers.len(),
                data_gets: data.len(),
                bytes: ranges.iter().map(|r| r.end - r.start).sum(),
                unanswered_bytes,
            }
        })
        .collect()
}

const QUERIES: [&str; 5] = [
    "SELECT region, count(*), sum(payload), min(id), max(tag) FROM t GROUP BY region ORDER BY region",
    "SELECT id, payload, region FROM t WHERE payload > 995000 ORDER BY id",
    "SELECT tag, count(*), sum(payload) FROM t WHERE region = 'south' GROUP BY tag ORDER BY tag",
    "SELECT id, tag FROM t ORDER BY payload DESC, id LIMIT 5",
    "SELECT count(*), sum(id), sum(payload), count(tag) FROM t",
];

async fn every_policy_returns_what_off_returns_over_the_wire<S: Server>() {
    let wire = wire::<S>().await;
    for partitions in [1, 3] {
        let session = Session::new(&wire.server, partitions, true).await;
        for sql in QUERIES {
            session.policy(PrefetchPolicy::Off).await;
            let (expected, _) = session.run(sql).await;
            let expected = expected.unwrap_or_else(|e| panic!("off: {sql}: {e}"));
            assert!(expected.lines().count() > 4, "{sql} returned nothing");
            for policy in PrefetchPolicy::ALL {
                session.policy(policy).await;
                let (result, stats) = session.run(sql).await;
                let what = format!("{}, {policy}, {partitions} partition(s): {sql}", S::NAME);
                assert_eq!(result.as_ref(), Ok(&expected), "{what}");
                if policy != PrefetchPolicy::Off && sql.starts_with("SELECT region") {
                    // The scan really ran under the policy, over HTTP.
                    assert!(!stats.is_empty(), "{what}: not a prefetching scan");
                    assert!(stats[0].requests() > 0, "{what}: no request counted");
                }
                session.assert_clean(&stats, &what).await;
            }
        }
    }
}

async fn every_range_is_fetched_once_and_no_footer_twice<S: Server>() {
    let wire = wire::<S>().await;
    let full = "SELECT count(*), sum(id), sum(payload), count(tag) FROM t";
    let payload_only = "SELECT sum(payload) FROM t";
    let row_groups = ROWS.div_ceil(ROW_GROUP_ROWS);
    let mut off_bytes = None;
    for policy in PrefetchPolicy::ALL {
        // Footers read at planning (statistics collected), once per file.
        let session = Session::new(&wire.server, 3, true).await;
        let planning = check_requests(&session.requests.records(), &wire.files, &[], "planning");
        for (file, (path, _)) in planning.iter().zip(&wire.files) {
            assert_eq!(
                file.footer_gets, 1,
                "{policy}: planning read {path}'s footer: {file:?}"
            );
        }
        session.policy(policy).await;

        session.requests.reset();
        let (result, stats) = session.run(full).await;
        result.unwrap_or_else(|e| panic!("{policy}: {e}"));
        let what = format!("{}, {policy}, all columns", S::NAME);
        let scan = check_requests(
            &session.requests.records(),
            &wire.files,
            &ALL_COLUMNS,
            &what,
        );
        for (file, (path, _)) in scan.iter().zip(&wire.files) {
            // The footer came from the metadata cache, also when opened ahead.
            assert_eq!(
                file.footer_gets, 0,
                "{what}: {path}'s footer read again: {file:?}"
            );
            if policy == PrefetchPolicy::Off {
                // Stock DataFusion: one GET per row group (its chunks coalesced).
                assert_eq!(file.data_gets, row_groups, "{what}: {path}: {file:?}");
            }
        }
        let bytes: u64 = scan.iter().map(|f| f.bytes).sum();
        let off_bytes = *off_bytes.get_or_insert(bytes);
        assert_eq!(bytes, off_bytes, "{what}: bytes fetched differ from off");
        match policy {
            PrefetchPolicy::Off => {}
            // The server on loopback answers in well under 5 ms: auto reads
            // like off once it has timed it (a first read may go ahead before
            // that if the machine is busy), so whether it read ahead is not
            // asserted; its bytes and results are, above.
            PrefetchPolicy::Auto => {}
            _ => {
                assert!(
                    stats[0].bytes_fetched_ahead() > 0,
                    "{what}: nothing read ahead"
                );
                // A full scan wastes nothing, but for read-ahead a busy
                // machine did not answer in time (read again on demand).
                let unanswered: u64 = scan.iter().map(|f| f.unanswered_bytes).sum();
                assert_eq!(
                    stats[0].bytes_wasted(),
                    unanswered,
                    "{what}: waste on a full scan beyond unanswered read-ahead"
                );
            }
        }
        session.assert_clean(&stats, &what).await;

        session.requests.reset();
        let (result, stats) = session.run(payload_only).await;
        result.unwrap_or_else(|e| panic!("{policy}: {e}"));
        let what = format!("{}, {policy}, payload only", S::NAME);
        let scan = check_requests(&session.requests.records(), &wire.files, &[PAYLOAD], &what);
        assert!(scan.iter().all(|f| f.footer_gets == 0), "{what}: {scan:?}");
        session.assert_clean(&stats, &what).await;

        // Footers not read at planning: the scan reads each once, also when the
        // scheduler opens files ahead. (One partition: with several, stock
        // DataFusion 55 itself now and then reads a footer twice.)
        let cold = Session::new(&wire.server, 1, false).await;
        assert_eq!(
            cold.requests.get_requests(),
            0,
            "{policy}: planning read data"
        );
        cold.policy(policy).await;
        let (result, stats) = cold.run(payload_only).await;
        result.unwrap_or_else(|e| panic!("{policy}: {e}"));
        let what = format!("{}, {policy}, footers read by the scan", S::NAME);
        let scan = check_requests(&cold.requests.records(), &wire.files, &[PAYLOAD], &what);
        for (file, (path, _)) in scan.iter().zip(&wire.files) {
            assert_eq!(file.footer_gets, 1, "{what}: {path}: {file:?}");
        }
        cold.assert_clean(&stats, &what).await;
    }
}

/// The error of `sql`, which must fail, once the query left nothing behind.
async fn failure(session: &Session, sql: &str, what: &str) -> String {
    let (result, stats) = tokio::time::timeout(HANG, session.run(sql))
        .await
        .unwrap_or_else(|_| panic!("{what}: the query hangs"));
    let err = result.expect_err(what);
    session.assert_clean(&stats, what).await;
    err
}

/// Start `SELECT id, payload, tag FROM t` on one partition with a small
/// read-ahead, so that most of the table is still on the server after its
/// first batch; return the stream, its scans' stats and the first batch's rows.
async fn start_scan(
    session: &Session,
) -> (
    datafusion::execution::SendableRecordBatchStream,
    Vec<Arc<PrefetchStats>>,
    usize,
) {
    session.set("prefetch.read_ahead_window", "128KiB").await;
    session.set("prefetch.memory_budget", "256KiB").await;
    session.set("prefetch.file_open_depth", "1").await;
    session.set("prefetch.eager_first_read_cap", "64KiB").await;
    let plan = session
        .ctx
        .sql("SELECT id, payload, tag FROM t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let stats = prefetch_stats(&plan);
    let mut stream = execute_stream(plan, session.ctx.task_ctx()).unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    (stream, stats, first.num_rows())
}

/// Drain a started scan, which must fail; its error, once nothing is left behind.
async fn scan_failure(
    session: &Session,
    mut stream: datafusion::execution::SendableRecordBatchStream,
    stats: &[Arc<PrefetchStats>],
    what: &str,
) -> String {
    let drained = tokio::time::timeout(HANG, async {
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            match batch {
                Ok(batch) => rows += batch.num_rows(),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(rows)
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: the scan hangs"));
    drop(stream);
    let err = drained.expect_err(what);
    session.assert_clean(stats, what).await;
    err
}

async fn an_object_deleted_mid_scan_fails_the_query_with_its_name<S: Server>() {
    let wire = wire::<S>().await;
    let client = wire.server.client(false);
    // Listed and its footer cached at planning; the scan reaches it last.
    let (gone, bytes) = wire.files.last().unwrap();
    for policy in PrefetchPolicy::ALL {
        let session = Session::new(&wire.server, 1, true).await;
        session.policy(policy).await;
        let (stream, stats, _) = start_scan(&session).await;
        client.delete(gone).await.unwrap();
        let what = format!("{}, {policy}: object deleted mid-scan", S::NAME);
        let err = scan_failure(&session, stream, &stats, &what).await;
        assert!(err.contains(gone.as_ref()), "{what}: {err}");
        assert!(err.to_lowercase().contains(S::NOT_FOUND), "{what}: {err}");
        wire.server.put(gone, bytes.clone()).await;
    }
}

async fn wrong_credentials_fail_with_the_servers_refusal<S: Server>() {
    let wire = wire::<S>().await;
    let refused = |err: &str| S::REFUSED.iter().all(|part| err.contains(part));

    // Listing with wrong credentials: the server refuses to list.
    let ctx = SessionContext::new_with_state(enable_prefetch(SessionContext::new().state()));
    ctx.register_object_store(&wire.server.store_url(), wire.server.client(true));
    let err = ctx
        .register_parquet("t", wire.server.url("t/"), ParquetReadOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused(&err), "{}: {err}", S::NAME);

    // Planned with good credentials, scanned with wrong ones.
    for policy in PrefetchPolicy::ALL {
        let session = Session::new(&wire.server, 2, true).await;
        session.policy(policy).await;
        session
            .ctx
            .register_object_store(&wire.server.store_url(), wire.server.client(true));
        let what = format!("{}, {policy}: wrong credentials", S::NAME);
        let err = failure(&session, "SELECT sum(payload) FROM t", &what).await;
        assert!(refused(&err), "{what}: {err}");
        assert!(S::names_a_file(&err), "{what}: names no file: {err}");
    }
}

async fn a_server_killed_mid_scan_fails_the_query_and_leaves_nothing_staged<S: Server>() {
    for policy in PrefetchPolicy::ALL {
        let mut wire = wire::<S>().await;
        let session = Session::new(&wire.server, 1, true).await;
        session.policy(policy).await;
        let (stream, stats, _) = start_scan(&session).await;
        wire.server.kill();
        let what = format!("{}, {policy}: server killed", S::NAME);
        let err = scan_failure(&session, stream, &stats, &what).await;
        assert!(err.contains(S::GONE), "{what}: {err}");
        assert!(S::names_a_file(&err), "{what}: names no file: {err}");
    }
}

/// The tests above, against one server each.
macro_rules! against {
    ($module:ident, $server:ty) => {
        mod $module {
            use super::servers::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_policy_returns_what_off_returns_over_the_wire() {
                super::every_policy_returns_what_off_returns_over_the_wire::<$server>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_range_is_fetched_once_and_no_footer_twice() {
                super::every_range_is_fetched_once_and_no_footer_twice::<$server>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_object_deleted_mid_scan_fails_the_query_with_its_name() {
                super::an_object_deleted_mid_scan_fails_the_query_with_its_name::<$server>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_server_killed_mid_scan_fails_the_query_and_leaves_nothing_staged() {
                type Wire = $server;
                super::a_server_killed_mid_scan_fails_the_query_and_leaves_nothing_staged::<Wire>()
                    .await;
            }
        }
    };
}

against!(s3, S3);
against!(gcs, Gcs);
against!(azure, Azure);
against!(http, Http);

// The servers that check credentials (fake-gcs-server and a plain HTTP
// server check none).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_wrong_credentials_fail_with_the_servers_refusal() {
    wrong_credentials_fail_with_the_servers_refusal::<servers::S3>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_wrong_credentials_fail_with_the_servers_refusal() {
    wrong_credentials_fail_with_the_servers_refusal::<servers::Azure>().await;
}
