//! Bad input: broken, truncated, foreign and mismatched files. Under every
//! policy a query over them must end the way it ends under `off` (the same
//! class of DataFusion error, or the same rows where stock DataFusion skips
//! the file), never panic — neither in the query nor in a background task —
//! and leave nothing staged, reserved or running.
//!
//! Each table has four files of ids 0..16000; file 2 (ids 8000..12000) is the
//! bad one, so read-ahead is running (footers opened ahead, row groups
//! staged) when the scan reaches it. The table is registered with an explicit
//! schema and no statistics, so the bad file fails the scan, not the
//! registration.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{ListArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion_prefetch::{PrefetchPolicy, prefetch_stats};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader, ParquetMetaDataWriter};
use parquet::file::writer::TrackedWrite;

use crate::errors::{Outcome, panics_on, run_in_task, run_on_named_runtime};
use crate::support::{FixtureOptions, assert_released, fixture, parquet_file_with};

const ROWS_PER_FILE: u64 = 4000;
const BAD_FILE: u64 = 2;

/// The queries run against every bad table: a full scan that reads every
/// column chunk, and a selective one that uses the page index of the bad file
/// (its pages hold 250 rows; ids 8100..8200 are in its first row group).
const QUERIES: [&str; 2] = [
    "SELECT count(*), sum(payload), max(tag) FROM t",
    "SELECT id, payload FROM t WHERE id >= 8100 AND id < 8200 ORDER BY id",
];

/// A valid file of the table's schema with a page index: two row groups of
/// 2000 rows, pages of 250 rows.
fn good_file(index: u64) -> Bytes {
    parquet_file_with(
        index * ROWS_PER_FILE,
        ROWS_PER_FILE as usize,
        2000,
        |props| {
            props
                .set_data_page_row_count_limit(250)
                .set_write_batch_size(250)
        },
    )
}

/// Length of the Thrift-encoded footer (the 4 bytes before the closing magic).
fn footer_len(file: &[u8]) -> usize {
    let n = file.len();
    u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize
}

/// Where the footer starts.
fn footer_start(file: &[u8]) -> usize {
    file.len() - 8 - footer_len(file)
}

/// The footer's Thrift bytes overwritten; its length and both magics intact.
fn corrupt_footer(file: &Bytes) -> Bytes {
    let mut out = file.to_vec();
    let end = out.len() - 8;
    let start = footer_start(&out);
    out[start..end].fill(0xA5);
    Bytes::from(out)
}

/// The second half of the file (and with it the footer) missing.
fn truncated(file: &Bytes) -> Bytes {
    file.slice(..file.len() / 2)
}

/// A CSV file under a `.parquet` name.
fn not_parquet() -> Bytes {
    Bytes::from("id,payload,tag\n8000,1,tag0\n".repeat(200))
}

/// A valid Parquet file whose `payload` is a list, which cannot be cast to
/// the table's Int64.
fn schema_differs() -> Bytes {
    let item = Arc::new(Field::new("item", DataType::Int64, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("payload", DataType::List(item), true),
        Field::new("tag", DataType::Utf8, true),
    ]));
    let ids: Vec<u64> = (BAD_FILE * ROWS_PER_FILE..(BAD_FILE + 1) * ROWS_PER_FILE).collect();
    let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(
        ids.iter().map(|i| Some(vec![Some(*i as i64)])),
    );
    let tags = StringArray::from_iter_values(ids.iter().map(|i| format!("tag{}", i % 7)));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(UInt64Array::from(ids)),
            Arc::new(lists),
            Arc::new(tags),
        ],
    )
    .unwrap();
    let mut out = vec![];
    let mut writer = ArrowWriter::try_new(&mut out, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

/// Every column chunk's pointer to its offset index moved 1000 bytes past the
/// end of the file (the footer rewritten; data and page index untouched).
fn offset_index_pointer_past_eof(file: &Bytes) -> Bytes {
    let metadata = ParquetMetaDataReader::new().parse_and_finish(file).unwrap();
    let past_end = file.len() as i64 + 1000;
    let mut builder = metadata.into_builder();
    let row_groups = builder
        .take_row_groups()
        .into_iter()
        .map(|rg| {
            let columns = rg
                .columns()
                .iter()
                .map(|c| {
                    c.clone()
                        .into_builder()
                        .set_offset_index_offset(Some(past_end))
                        .build()
                        .unwrap()
                })
                .collect();
            rg.into_builder()
                .set_column_metadata(columns)
                .build()
                .unwrap()
        })
        .collect();
    let metadata = builder.set_row_groups(row_groups).build();
    let mut out = file[..footer_start(file)].to_vec();
    ParquetMetaDataWriter::new(&mut out, &metadata)
        .finish()
        .unwrap();
    let patched = Bytes::from(out);
    let check = ParquetMetaDataReader::new()
        .parse_and_finish(&patched)
        .unwrap();
    assert!(
        check
            .row_groups()
            .iter()
            .flat_map(|rg| rg.columns())
            .all(|c| c.offset_index_offset() == Some(past_end))
    );
    patched
}

/// The offset index rewritten so that every page location lies 1 GiB past
/// its page (far beyond the end of the file); data untouched.
fn page_locations_past_eof(file: &Bytes) -> Bytes {
    let with_index = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Required);
    let metadata = with_index.parse_and_finish(file).unwrap();
    // The page indexes are written after the last column chunk.
    let data_end = metadata
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .filter_map(|c| c.column_index_offset().or(c.offset_index_offset()))
        .min()
        .unwrap() as usize;
    let mut builder = metadata.into_builder();
    let mut offsets = builder.take_offset_index().unwrap();
    for page in offsets
        .iter_mut()
        .flatten()
        .flat_map(|c| &mut c.page_locations)
    {
        page.offset += 1 << 30;
    }
    let metadata = builder.set_offset_index(Some(offsets)).build();
    let mut out = vec![];
    let mut tracked = TrackedWrite::new(&mut out);
    std::io::Write::write_all(&mut tracked, &file[..data_end]).unwrap();
    ParquetMetaDataWriter::new_with_tracked(tracked, &metadata)
        .finish()
        .unwrap();
    let patched = Bytes::from(out);
    let with_index = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Required);
    let check = with_index.parse_and_finish(&patched).unwrap();
    let first = &check.offset_index().unwrap()[0][0].page_locations[0];
    assert!(first.offset as usize > patched.len());
    patched
}

/// A quarter of the file's data cut out of its middle, footer intact: the
/// column chunks of the later row group point at the wrong bytes or past the
/// end (a botched copy or multipart upload).
fn data_cut_out(file: &Bytes) -> Bytes {
    let mut out = file[..file.len() / 4].to_vec();
    out.extend_from_slice(&file[file.len() / 2..]);
    Bytes::from(out)
}

/// Scan a table whose file 2 is `bad` with every query under every policy:
/// compare each outcome's class with `off`'s, and check that nothing panicked
/// and nothing is left staged, reserved or running. `off_fails` says, per
/// query, whether stock DataFusion fails it (so the case tests what it means
/// to: it skips a zero-length file, and reads the offset index only for the
/// selective query).
fn check_bad_file(case: &str, bad: Bytes, off_fails: [bool; 2]) {
    let runtime = format!("bad-input-{case}");
    run_on_named_runtime(&runtime, async {
        let mut files: Vec<Bytes> = (0..4).map(good_file).collect();
        files[BAD_FILE as usize] = bad;
        let fx = fixture(
            files,
            FixtureOptions {
                partitions: 2,
                cold_footers: true,
                ..Default::default()
            },
        )
        .await;
        for (q, sql) in QUERIES.iter().enumerate() {
            let mut expected: Option<Outcome> = None;
            for policy in PrefetchPolicy::ALL {
                fx.set("policy", policy.name()).await;
                let plan = fx.plan(sql).await;
                let stats = prefetch_stats(&plan);
                let outcome = run_in_task(&fx.ctx, plan).await;
                assert!(
                    !matches!(outcome, Outcome::Panic(_)),
                    "{case}, {policy}: {sql} panicked: {outcome:?}"
                );
                let what = format!("{case}, {policy}: {sql}");
                assert_released(&stats, fx.pool.as_ref(), &what).await;
                match &expected {
                    None => {
                        assert_eq!(policy, PrefetchPolicy::Off, "off comes first");
                        assert_eq!(
                            matches!(outcome, Outcome::Error { .. }),
                            off_fails[q],
                            "{case}: stock DataFusion's outcome of {sql} changed: {outcome:?}"
                        );
                        expected = Some(outcome);
                    }
                    Some(expected) => assert_eq!(
                        outcome.class(),
                        expected.class(),
                        "{case}, {policy}: {sql}\n{policy}: {outcome:?}\noff: {expected:?}"
                    ),
                }
            }
        }
    });
    let panics = panics_on(&runtime);
    assert!(panics.is_empty(), "{case}: panics: {panics:#?}");
}

#[test]
fn a_corrupt_footer_fails_like_off() {
    check_bad_file(
        "corrupt-footer",
        corrupt_footer(&good_file(BAD_FILE)),
        [true; 2],
    );
}

#[test]
fn a_truncated_file_fails_like_off() {
    check_bad_file("truncated", truncated(&good_file(BAD_FILE)), [true; 2]);
}

/// Stock DataFusion skips an empty file; every policy must too.
#[test]
fn a_zero_length_file_is_skipped_like_off() {
    check_bad_file("zero-length", Bytes::new(), [false; 2]);
}

#[test]
fn a_file_that_is_not_parquet_fails_like_off() {
    check_bad_file("not-parquet", not_parquet(), [true; 2]);
}

#[test]
fn a_file_whose_schema_differs_fails_like_off() {
    check_bad_file("schema-differs", schema_differs(), [true; 2]);
}

/// The full scan does not read the offset index; the selective query loads
/// it and fails.
#[test]
fn an_offset_index_pointer_past_the_end_fails_like_off() {
    let bad = offset_index_pointer_past_eof(&good_file(BAD_FILE));
    check_bad_file("offset-index-pointer", bad, [false, true]);
}

/// Page locations past the end of the file: the decoder asks for ranges that
/// start past the end together with one that starts inside the file.
/// object_store 0.13.2's default `get_ranges` (used by S3, GCS, Azure and
/// HTTP) panics slicing the clamped response (`coalesce_ranges`); the
/// simulated store answers with an error, as `LocalFileSystem` does, and
/// every policy must fail as `off` does. See docs/reliability.md.
#[test]
fn page_locations_past_the_end_fail_like_off() {
    let bad = page_locations_past_eof(&good_file(BAD_FILE));
    check_bad_file("page-locations", bad, [false, true]);
}

/// Column chunks pointing at the wrong bytes or past the end. `off` fails
/// with a decode error, and the selective query with the store's error
/// (`ParquetError::External`); every policy must fail the same way: chunks
/// the footer places past the end are never read ahead or widened into a
/// demand read, and a demand-read error keeps the store error's kind. See
/// docs/reliability.md.
#[test]
fn data_cut_out_of_the_middle_fails_like_off() {
    check_bad_file(
        "data-cut-out",
        data_cut_out(&good_file(BAD_FILE)),
        [true; 2],
    );
}

/// The table of four files, file 2 `bad`, in a folder on disk, read through
/// `LocalFileSystem` itself (`latency: None`: what `dfprefetch` does without
/// `--simulate-latency`) or through a [`SimulatedStore`] over it.
async fn local_table(
    dir: &std::path::Path,
    bad: &Bytes,
    latency: Option<std::time::Duration>,
) -> datafusion::prelude::SessionContext {
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
    use datafusion_prefetch::enable_prefetch;
    use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
    use object_store::ObjectStore;
    use object_store::local::LocalFileSystem;

    let data = dir.join("data");
    if !data.exists() {
        std::fs::create_dir_all(&data).unwrap();
        for i in 0..4 {
            let bytes = if i == BAD_FILE {
                bad.clone()
            } else {
                good_file(i)
            };
            std::fs::write(data.join(format!("file_{i:03}.parquet")), bytes).unwrap();
        }
    }
    let local = LocalFileSystem::new_with_prefix(dir).unwrap();
    let store: Arc<dyn ObjectStore> = match latency {
        None => Arc::new(local),
        Some(latency) => Arc::new(SimulatedStore::new(
            local,
            SimulatedStoreConfig::fixed(latency),
        )),
    };
    let mut config = SessionConfig::new().with_target_partitions(2);
    config.options_mut().execution.collect_statistics = false;
    let ctx = SessionContext::new_with_state(enable_prefetch(
        SessionContext::new_with_config(config).state(),
    ));
    ctx.register_object_store(&url::Url::parse("local://bucket").unwrap(), store);
    let schema = crate::support::schema();
    let read = ParquetReadOptions::default().schema(&schema);
    ctx.register_parquet("t", "local://bucket/data/", read)
        .await
        .unwrap();
    ctx
}

/// Files whose column chunks, offset index or page locations point past
/// their end: through the simulated store, at every latency and under every
/// policy, each query fails where it fails on the local store itself
/// without simulation (`off`), with a clean error of the same kind as `off`
/// through the simulated store — never a panic, which is what
/// object_store's default `get_ranges` gives for a range starting past the
/// end of a clamped body.
#[test]
fn files_pointing_past_their_end_fail_through_the_simulated_store_as_without_it() {
    let cases = [
        ("data-cut-out", data_cut_out(&good_file(BAD_FILE))),
        (
            "offset-index-pointer",
            offset_index_pointer_past_eof(&good_file(BAD_FILE)),
        ),
        (
            "page-locations",
            page_locations_past_eof(&good_file(BAD_FILE)),
        ),
    ];
    let runtime = "bad-input-local";
    run_on_named_runtime(runtime, async {
        for (case, bad) in &cases {
            let dir = tempfile::tempdir().unwrap();
            for (q, sql) in QUERIES.iter().enumerate() {
                let local = local_table(dir.path(), bad, None).await;
                local.sql("SET prefetch.policy = 'off'").await.unwrap();
                let frame = local.sql(sql).await.unwrap();
                let plan = frame.create_physical_plan().await.unwrap();
                let unsimulated = run_in_task(&local, plan).await;
                assert!(
                    !matches!(unsimulated, Outcome::Panic(_)),
                    "{case}: {sql} panicked without simulation: {unsimulated:?}"
                );
                let latencies = [
                    None,
                    Some(std::time::Duration::ZERO),
                    Some(std::time::Duration::from_millis(5)),
                ];
                for latency in latencies {
                    let ctx = local_table(dir.path(), bad, latency).await;
                    let mut simulated_off: Option<String> = None;
                    for policy in PrefetchPolicy::ALL {
                        let what = format!("{case}, q{q}, {policy}, latency {latency:?}");
                        ctx.sql(&format!("SET prefetch.policy = '{}'", policy.name()))
                            .await
                            .unwrap();
                        let frame = ctx.sql(sql).await.unwrap();
                        let plan = frame.create_physical_plan().await.unwrap();
                        let stats = prefetch_stats(&plan);
                        let outcome = run_in_task(&ctx, plan).await;
                        assert!(
                            !matches!(outcome, Outcome::Panic(_)),
                            "{what}: panicked: {outcome:?}"
                        );
                        assert_eq!(
                            matches!(outcome, Outcome::Error { .. }),
                            matches!(unsimulated, Outcome::Error { .. }),
                            "{what}: {outcome:?}\nwithout simulation: {unsimulated:?}"
                        );
                        // Through the simulated store every policy fails as
                        // `off` does. (`LocalFileSystem` itself answers
                        // `get_range` and `get_ranges` past the end
                        // differently — a short body, an error — so there
                        // the error's kind may differ by policy.)
                        if latency.is_some() {
                            let expected = simulated_off.get_or_insert_with(|| outcome.class());
                            assert_eq!(&outcome.class(), expected, "{what}: {outcome:?}");
                        }
                        let pool = ctx.runtime_env().memory_pool.clone();
                        assert_released(&stats, pool.as_ref(), &what).await;
                    }
                }
            }
        }
    });
    let panics = panics_on(runtime);
    assert!(panics.is_empty(), "panics: {panics:#?}");
}
