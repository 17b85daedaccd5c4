//! Ballista standalone (a scheduler and two executors in this process, over
//! loopback gRPC): every policy returns what local DataFusion `off` returns,
//! and a `SET` on the client reaches the executors' scans.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_prefetch::{
    PrefetchOptions, PrefetchPolicy, PrefetchingParquetSource, prefetching_context,
};
use datafusion_prefetch_ballista::{
    ObjectStores, PrefetchPhysicalCodec, ballista_prefetching_context, start_standalone_cluster,
};
use datafusion_prefetch_simstore::SimulatedStoreConfig;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow,
    RecordBatchIterator, RegionArrow, SupplierArrow,
};

/// TPC-H scale of the differential test: lineitem has 60K rows.
const SCALE: f64 = 0.01;

const TABLES: [&str; 8] = [
    "lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region",
];

macro_rules! tpch_queries {
    ($($n:literal),*) => {
        [$((concat!("q", $n), include_str!(concat!("../../../benches/queries/tpch/q", $n, ".sql")))),*]
    };
}

/// The 22 TPC-H queries of the benchmark suite.
const QUERIES: [(&str, &str); 22] = tpch_queries!(
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22
);

fn generator(table: &str, part: i32, parts: i32) -> Box<dyn RecordBatchIterator> {
    match table {
        "lineitem" => Box::new(LineItemArrow::new(LineItemGenerator::new(
            SCALE, part, parts,
        ))),
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(SCALE, part, parts))),
        "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(
            SCALE, part, parts,
        ))),
        "part" => Box::new(PartArrow::new(PartGenerator::new(SCALE, part, parts))),
        "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(
            SCALE, part, parts,
        ))),
        "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(
            SCALE, part, parts,
        ))),
        "nation" => Box::new(NationArrow::new(NationGenerator::new(SCALE, part, parts))),
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(SCALE, part, parts))),
        other => unreachable!("not a TPC-H table: {other}"),
    }
}

/// TPC-H at [`SCALE`] in `dir/<table>/part-N.parquet`: lineitem and orders in
/// 4 files of small row groups, so that tasks have several files and files
/// several row groups to read ahead.
fn write_tpch(dir: &Path) {
    for table in TABLES {
        let parts = if matches!(table, "lineitem" | "orders") {
            4
        } else {
            1
        };
        fs::create_dir_all(dir.join(table)).unwrap();
        for part in 1..=parts {
            let mut batches = generator(table, part, parts);
            let props = WriterProperties::builder()
                .set_max_row_group_row_count(Some(4_000))
                .build();
            let file = fs::File::create(dir.join(table).join(format!("part-{part}.parquet")));
            let mut writer =
                ArrowWriter::try_new(file.unwrap(), batches.schema().clone(), Some(props)).unwrap();
            for batch in &mut batches {
                writer.write(&batch).unwrap();
            }
            writer.close().unwrap();
        }
    }
}

fn stores(dir: &Path) -> ObjectStores {
    ObjectStores::new()
        .with_simulated_dir(
            ObjectStoreUrl::parse("sim://tpch").unwrap(),
            dir,
            SimulatedStoreConfig::fixed(Duration::from_millis(1)),
        )
        .unwrap()
}

async fn register_tpch(ctx: &SessionContext) {
    for table in TABLES {
        ctx.register_parquet(
            table,
            format!("sim://tpch/{table}/"),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
    }
}

async fn sql(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    match ctx.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The rows of a result, sorted, one string each: floating-point values to 12
/// significant digits, so sums added up in another order agree.
fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let floats: Vec<Option<_>> = batch
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                    let c = cast(c, &DataType::Float64).unwrap();
                    Some(c.as_primitive::<Float64Type>().clone())
                }
                _ => None,
            })
            .collect();
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = (0..batch.num_columns())
                .map(|i| match &floats[i] {
                    Some(f) if f.is_null(row) => "NULL".to_string(),
                    Some(f) => format!("{:.11e}", f.value(row)),
                    None => formatters[i].value(row).to_string(),
                })
                .collect();
            rows.push(cells.join(" | "));
        }
    }
    rows.sort();
    rows
}

/// A Ballista client over a fresh standalone cluster reading `dir`, with
/// `partitions` scan partitions (several file groups per scan).
async fn ballista(dir: &Path, partitions: usize) -> SessionContext {
    let url = start_standalone_cluster(stores(dir), 2, 2).await.unwrap();
    let config = SessionConfig::new().with_target_partitions(partitions);
    let ctx = ballista_prefetching_context(&url, config, &stores(dir))
        .await
        .unwrap();
    register_tpch(&ctx).await;
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tpch_on_ballista_returns_what_local_off_returns_under_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    write_tpch(dir.path());
    let local = prefetching_context(SessionConfig::new().with_target_partitions(3));
    stores(dir.path()).register(local.runtime_env().as_ref());
    register_tpch(&local).await;
    sql(&local, "SET prefetch.policy = 'off'").await;
    let ctx = ballista(dir.path(), 3).await;
    // Small windows, so read-ahead crosses row groups and files.
    sql(&ctx, "SET prefetch.read_ahead_window = '256KiB'").await;
    sql(&ctx, "SET prefetch.memory_budget = '1MiB'").await;

    for (name, query) in QUERIES {
        let expected = rows(&sql(&local, query).await);
        assert!(
            !expected.is_empty() || name == "q15",
            "{name} returned nothing"
        );
        for policy in PrefetchPolicy::ALL {
            sql(&ctx, &format!("SET prefetch.policy = '{policy}'")).await;
            let got = rows(&sql(&ctx, query).await);
            assert_eq!(got, expected, "{name} under {policy} on Ballista");
        }
    }
}

/// `EXPLAIN ANALYZE` on Ballista: the plan with the metrics the executors
/// reported for the job.
async fn explain_analyze(ctx: &SessionContext, query: &str) -> String {
    let batches = sql(ctx, &format!("EXPLAIN ANALYZE {query}")).await;
    pretty_format_batches(&batches).unwrap().to_string()
}

/// The sum of `metric=N` over the text (every scan, every task).
fn metric_sum(text: &str, metric: &str) -> Option<u64> {
    let pattern = format!("{metric}=");
    let values: Vec<u64> = text
        .match_indices(&pattern)
        .map(|(at, _)| {
            let digits: String = text[at + pattern.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().unwrap()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_on_the_client_changes_the_executors_scan_metrics() {
    let dir = tempfile::tempdir().unwrap();
    write_tpch(dir.path());
    // One partition: each lineitem task reads four files one after another.
    let ctx = ballista(dir.path(), 1).await;
    let query = "SELECT sum(l_quantity) FROM lineitem";

    sql(&ctx, "SET prefetch.policy = 'off'").await;
    let off = explain_analyze(&ctx, query).await;
    assert_eq!(metric_sum(&off, "prefetch_requests"), None, "{off}");

    sql(&ctx, "SET prefetch.policy = 'pipelined'").await;
    let pipelined = explain_analyze(&ctx, query).await;
    assert!(
        metric_sum(&pipelined, "prefetch_requests").unwrap_or(0) > 0,
        "{pipelined}"
    );
    assert!(
        metric_sum(&pipelined, "prefetch_files_opened_ahead").unwrap_or(0) > 0,
        "{pipelined}"
    );

    // A key other than the policy: no file is opened ahead any more.
    sql(&ctx, "SET prefetch.file_open_depth = 0").await;
    let no_open_ahead = explain_analyze(&ctx, query).await;
    assert_eq!(
        metric_sum(&no_open_ahead, "prefetch_files_opened_ahead"),
        Some(0),
        "{no_open_ahead}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn settings_that_must_arrive_together_reach_the_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    write_tpch(dir.path());
    let ctx = ballista(dir.path(), 1).await;
    // Ballista ships these as separate pairs, the window first: against the
    // default budget (256MiB) the window alone would be refused.
    sql(&ctx, "SET prefetch.memory_budget = '2GiB'").await;
    sql(&ctx, "SET prefetch.read_ahead_window = '1GiB'").await;
    sql(&ctx, "SET prefetch.policy = 'batched'").await;
    let text = explain_analyze(&ctx, "SELECT count(*) FROM orders WHERE o_orderkey > 5").await;
    assert!(
        text.contains("prefetch=batched(read_ahead_window=1GiB, memory_budget=2GiB"),
        "{text}"
    );
}

#[tokio::test]
async fn the_codec_round_trips_a_scan_and_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    write_tpch(dir.path());
    let ctx = prefetching_context(SessionConfig::new().with_target_partitions(2));
    stores(dir.path()).register(ctx.runtime_env().as_ref());
    register_tpch(&ctx).await;
    for (key, value) in [
        ("policy", "streaming"),
        ("memory_budget", "1GiB"),
        ("read_ahead_window", "300MiB"),
        ("file_open_depth", "3"),
        ("eager_first_read_cap", "0"),
        ("request_timeout", "30s"),
    ] {
        sql(&ctx, &format!("SET prefetch.{key} = '{value}'")).await;
    }
    let plan = ctx
        .sql("SELECT l_orderkey, l_quantity FROM lineitem WHERE l_quantity > 45")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let codec = PrefetchPhysicalCodec::default();
    let node = PhysicalPlanNode::try_from_physical_plan(Arc::clone(&plan), &codec).unwrap();
    let decoded = node
        .try_into_physical_plan(ctx.task_ctx().as_ref(), &codec)
        .unwrap();
    let text = |plan: &Arc<dyn ExecutionPlan>| displayable(plan.as_ref()).indent(true).to_string();
    assert_eq!(text(&decoded), text(&plan));
    assert!(text(&decoded).contains("prefetch=streaming(read_ahead_window=300MiB, memory_budget=1GiB, file_open_depth=3, eager_first_read_cap=0, request_timeout=30s, hedge_after=auto, hedge_share=25%)"), "{}", text(&decoded));

    // The decoded plan scans (through this context's stores) what the original does.
    let run = |plan: Arc<dyn ExecutionPlan>| {
        let task = ctx.task_ctx();
        async move {
            rows(
                &datafusion::physical_plan::collect(plan, task)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(run(decoded).await, run(plan).await);
}

#[tokio::test]
async fn the_codec_hands_other_nodes_to_the_wrapped_codec() {
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
        datafusion::arrow::datatypes::Field::new("v", DataType::Int64, false),
    ]));
    // A stock Parquet scan is not an extension node at all.
    let stock = DataSourceExec::from_data_source(
        FileScanConfigBuilder::new(
            ObjectStoreUrl::local_filesystem(),
            Arc::new(ParquetSource::new(Arc::clone(&schema))),
        )
        .build(),
    );
    let codec = PrefetchPhysicalCodec::default();
    let mut buf = vec![];
    use datafusion_proto::physical_plan::{DefaultPhysicalProtoConverter, PhysicalExtensionCodec};
    let err = codec
        .try_encode(stock, &mut buf, &DefaultPhysicalProtoConverter {})
        .unwrap_err();
    assert!(err.to_string().contains("Unsupported plan node"), "{err}");
    let err = codec
        .try_decode(
            b"\x0a\x00garbage",
            &[],
            SessionContext::new().task_ctx().as_ref(),
            &DefaultPhysicalProtoConverter {},
        )
        .unwrap_err();
    assert!(!err.to_string().contains("prefetching"), "{err}");

    // A prefetching one is, and a truncated one fails cleanly.
    let source = PrefetchingParquetSource::new(
        ParquetSource::new(schema),
        PrefetchOptions::default().with_policy(PrefetchPolicy::Batched),
    );
    let scan = DataSourceExec::from_data_source(
        FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source)).build(),
    );
    codec
        .try_encode(scan, &mut buf, &DefaultPhysicalProtoConverter {})
        .unwrap();
    let err = codec
        .try_decode(
            &buf[..buf.len() - 3],
            &[],
            SessionContext::new().task_ctx().as_ref(),
            &DefaultPhysicalProtoConverter {},
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("prefetching Parquet scan"),
        "{err}"
    );
}
