//! Differential property test: random tables (schemas with nulls,
//! dictionaries, lists and structs; row-group and page sizes; page index on or
//! off; file counts), random session settings (partitions, filter pushdown,
//! file splitting, window, budget, open depth) and random queries
//! (projections, predicates, ORDER BY … LIMIT, counted LIMITs). Every policy
//! must return exactly what `off` returns — or fail the same way — never
//! stage more than its budget, and leave nothing behind.
//!
//! `cargo test` runs 256 cases (each case runs every policy); set
//! `PREFETCH_PROPTEST_CASES` to run more, e.g. for the long run described in
//! docs/reliability.md. The usual `PROPTEST_*` variables (such as
//! `PROPTEST_RNG_SEED`) apply too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, Int32Builder, Int64Array, ListBuilder,
    RecordBatch, StringArray, StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema, SchemaRef};
use datafusion_prefetch::{PrefetchPolicy, prefetch_stats};
use datafusion_prefetch_testdata::{GOLDEN_GAMMA, finalize};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use crate::errors::{Outcome, run_in_task};
use crate::support::{FixtureOptions, assert_released, fixture};

/// Cases per `cargo test` run, unless `PREFETCH_PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 256;

fn config() -> ProptestConfig {
    let cases = std::env::var("PREFETCH_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        // Shrinking re-runs whole queries; a few hundred steps find a small case.
        max_shrink_iters: 512,
        // Failing cases are saved next to this file (as proptest! does) and
        // replayed first on the next run.
        source_file: Some(file!()),
        ..ProptestConfig::default()
    }
}

/// One runtime for every case (building one per case costs more than a case).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// The type of a generated column.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int32,
    Int64,
    Float64,
    Utf8,
    /// Dictionary(Int32, Utf8).
    Dictionary,
    /// List<Int32>.
    List,
    /// Struct { a: Int32, b: Utf8 }.
    Struct,
}

#[derive(Debug, Clone)]
struct Column {
    kind: Kind,
    /// Share of null values, in percent.
    nulls: u8,
}

/// How the files are written.
#[derive(Debug, Clone)]
struct Layout {
    rows_per_file: Vec<usize>,
    row_group_rows: usize,
    page_rows: usize,
    /// 0: no statistics, 1: chunk statistics, 2: page statistics (page index).
    statistics: u8,
    dictionary: bool,
    seed: u64,
}

/// The session's settings.
#[derive(Debug, Clone)]
struct Session {
    partitions: usize,
    pushdown_filters: bool,
    /// Let DataFusion split files into byte ranges across partitions.
    split_files: bool,
    window: u64,
    budget_factor: u64,
    file_open_depth: usize,
    eager_first_read_cap: u64,
    /// A store answering in 6 ms rather than at once: `auto` measures it as
    /// remote and reads ahead, slices and plans requests; on an instant store
    /// it reads like `off`.
    slow_store: bool,
}

/// A predicate, resolved against the columns when the SQL is written.
#[derive(Debug, Clone)]
enum Predicate {
    /// `id < k`, with `k` taken modulo the table's rows (+1).
    IdBelow(i64),
    /// `id % m = r`.
    IdModulo(i64, i64),
    /// `id BETWEEN a AND a + n`, with `a` taken modulo the table's rows (+1).
    IdBetween(i64, i64),
    /// On column `index % columns`, with a value that suits its type.
    Column { index: usize, op: u8, value: i64 },
}

#[derive(Debug, Clone)]
enum Shape {
    /// No defined order: compared as a multiset of rows.
    Unordered,
    /// `ORDER BY id [DESC] LIMIT n`: compared exactly.
    TopN { descending: bool, limit: usize },
    /// `count(*)` of a `LIMIT n` without an order: which rows is undefined,
    /// how many is not.
    CountOfLimit(usize),
}

#[derive(Debug, Clone)]
struct Query {
    /// Bit i set: column i is projected (the id when no bit is).
    projection: u8,
    /// Project a struct's field `a` instead of the whole struct.
    struct_field: bool,
    with_id: bool,
    predicate: Option<Predicate>,
    shape: Shape,
}

#[derive(Debug, Clone)]
struct Case {
    columns: Vec<Column>,
    layout: Layout,
    session: Session,
    query: Query,
}

fn column() -> impl Strategy<Value = Column> {
    let kind = prop_oneof![
        Just(Kind::Int32),
        Just(Kind::Int64),
        Just(Kind::Float64),
        Just(Kind::Utf8),
        Just(Kind::Dictionary),
        Just(Kind::List),
        Just(Kind::Struct),
    ];
    (kind, prop_oneof![Just(0u8), 1u8..60, Just(100u8)])
        .prop_map(|(kind, nulls)| Column { kind, nulls })
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        proptest::collection::vec(0usize..500, 1..=5),
        1usize..=200,
        1usize..=64,
        0u8..=2,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(rows_per_file, row_group_rows, page_rows, statistics, dictionary, seed)| Layout {
                rows_per_file,
                row_group_rows,
                page_rows,
                statistics,
                dictionary,
                seed,
            },
        )
}

fn session() -> impl Strategy<Value = Session> {
    (
        1usize..=4,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just(1u64),
            Just(256),
            Just(2 << 10),
            Just(16 << 10),
            Just(64 << 20)
        ],
        1u64..=4,
        0usize..=3,
        prop_oneof![Just(0u64), Just(1 << 10), Just(16 << 20)],
        prop::bool::weighted(0.25),
    )
        .prop_map(
            |(
                partitions,
                pushdown_filters,
                split_files,
                window,
                budget_factor,
                file_open_depth,
                eager_first_read_cap,
                slow_store,
            )| Session {
                partitions,
                pushdown_filters,
                split_files,
                window,
                budget_factor,
                file_open_depth,
                eager_first_read_cap,
                slow_store,
            },
        )
}

fn predicate() -> impl Strategy<Value = Predicate> {
    prop_oneof![
        (0i64..1200).prop_map(Predicate::IdBelow),
        (2i64..7, 0i64..7).prop_map(|(m, r)| Predicate::IdModulo(m, r % m)),
        (0i64..1200, 0i64..200).prop_map(|(a, n)| Predicate::IdBetween(a, n)),
        (0usize..8, 0u8..4, -600i64..600).prop_map(|(index, op, value)| Predicate::Column {
            index,
            op,
            value
        }),
    ]
}

fn query() -> impl Strategy<Value = Query> {
    let shape = prop_oneof![
        2 => Just(Shape::Unordered),
        1 => (any::<bool>(), 0usize..40)
            .prop_map(|(descending, limit)| Shape::TopN { descending, limit }),
        1 => (0usize..100).prop_map(Shape::CountOfLimit),
    ];
    (
        any::<u8>(),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(predicate()),
        shape,
    )
        .prop_map(
            |(projection, struct_field, with_id, predicate, shape)| Query {
                projection,
                struct_field,
                with_id,
                predicate,
                shape,
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(column(), 1..=4),
        layout(),
        session(),
        query(),
    )
        .prop_map(|(columns, layout, session, query)| Case {
            columns,
            layout,
            session,
            query,
        })
}

/// Deterministic pseudo-random numbers from (seed, column, row).
fn mix(seed: u64, column: usize, row: i64) -> u64 {
    finalize(
        seed.wrapping_add((column as u64).wrapping_mul(GOLDEN_GAMMA))
            .wrapping_add((row as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)),
    )
}

fn struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ])
}

fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Int32 => DataType::Int32,
        Kind::Int64 => DataType::Int64,
        Kind::Float64 => DataType::Float64,
        Kind::Utf8 => DataType::Utf8,
        Kind::Dictionary => {
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
        }
        Kind::List => DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
        Kind::Struct => DataType::Struct(struct_fields()),
    }
}

fn table_schema(columns: &[Column]) -> SchemaRef {
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    for (i, c) in columns.iter().enumerate() {
        fields.push(Field::new(format!("c{i}"), data_type(c.kind), true));
    }
    Arc::new(Schema::new(fields))
}

/// The values of column `index` for rows `ids`.
fn values(column: &Column, index: usize, seed: u64, ids: &[i64]) -> ArrayRef {
    let random = |id: i64, salt: usize| mix(seed, index * 8 + salt, id);
    let null = |id: i64| random(id, 7) % 100 < column.nulls as u64;
    let string = |id: i64| {
        let r = random(id, 1);
        // Mostly short and repeated, sometimes long, so pages differ in size.
        if r % 10 == 0 {
            format!("s{}-{}", r % 20, "x".repeat((r % 40) as usize))
        } else {
            format!("s{}", r % 20)
        }
    };
    match column.kind {
        Kind::Int32 => Arc::new(
            ids.iter()
                .map(|&id| (!null(id)).then(|| (random(id, 0) % 1000) as i32 - 500))
                .collect::<Int32Array>(),
        ),
        Kind::Int64 => Arc::new(
            ids.iter()
                .map(|&id| (!null(id)).then(|| (random(id, 0) % 1200) as i64 - 600))
                .collect::<Int64Array>(),
        ),
        Kind::Float64 => Arc::new(
            ids.iter()
                .map(|&id| (!null(id)).then(|| ((random(id, 0) % 12_000) as f64 - 6000.0) / 10.0))
                .collect::<Float64Array>(),
        ),
        Kind::Utf8 => Arc::new(
            ids.iter()
                .map(|&id| (!null(id)).then(|| string(id)))
                .collect::<StringArray>(),
        ),
        Kind::Dictionary => {
            const WORDS: [&str; 8] = ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"];
            Arc::new(
                ids.iter()
                    .map(|&id| (!null(id)).then(|| WORDS[(random(id, 0) % 8) as usize]))
                    .collect::<DictionaryArray<Int32Type>>(),
            )
        }
        Kind::List => {
            let mut builder = ListBuilder::new(Int32Builder::new());
            for &id in ids {
                if null(id) {
                    builder.append_null();
                    continue;
                }
                for k in 0..random(id, 0) % 4 {
                    let item = random(id, 2 + k as usize);
                    builder
                        .values()
                        .append_option((item % 5 != 0).then_some((item % 100) as i32));
                }
                builder.append(true);
            }
            Arc::new(builder.finish())
        }
        Kind::Struct => {
            let a: Int32Array = ids
                .iter()
                .map(|&id| (random(id, 3) % 9 != 0).then(|| (random(id, 0) % 1000) as i32 - 500))
                .collect();
            let b: StringArray = ids
                .iter()
                .map(|&id| (random(id, 4) % 9 != 0).then(|| string(id)))
                .collect();
            let nulls: Vec<bool> = ids.iter().map(|&id| !null(id)).collect();
            Arc::new(
                StructArray::try_new(
                    struct_fields(),
                    vec![Arc::new(a), Arc::new(b)],
                    Some(nulls.into()),
                )
                .unwrap(),
            )
        }
    }
}

fn write_files(columns: &[Column], layout: &Layout) -> Vec<Bytes> {
    let schema = table_schema(columns);
    let statistics = match layout.statistics {
        0 => EnabledStatistics::None,
        1 => EnabledStatistics::Chunk,
        _ => EnabledStatistics::Page,
    };
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(layout.row_group_rows))
        .set_data_page_row_count_limit(layout.page_rows)
        .set_write_batch_size(layout.page_rows)
        .set_dictionary_enabled(layout.dictionary)
        .set_statistics_enabled(statistics)
        .build();
    let mut first_id = 0i64;
    layout
        .rows_per_file
        .iter()
        .map(|&rows| {
            let ids: Vec<i64> = (first_id..first_id + rows as i64).collect();
            first_id += rows as i64;
            let mut arrays: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.clone()))];
            for (i, column) in columns.iter().enumerate() {
                arrays.push(values(column, i, layout.seed, &ids));
            }
            let batch = RecordBatch::try_new(Arc::clone(&schema), arrays).unwrap();
            let mut out = vec![];
            let mut writer =
                ArrowWriter::try_new(&mut out, Arc::clone(&schema), Some(props.clone())).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            Bytes::from(out)
        })
        .collect()
}

/// `rows`: how many rows the table has (ids are 0..rows).
fn predicate_sql(predicate: &Predicate, columns: &[Column], rows: i64) -> String {
    match predicate {
        Predicate::IdBelow(k) => format!("id < {}", k % (rows + 1)),
        Predicate::IdModulo(m, r) => format!("id % {m} = {r}"),
        Predicate::IdBetween(a, n) => {
            let a = a % (rows + 1);
            format!("id BETWEEN {a} AND {}", a + n)
        }
        Predicate::Column { index, op, value } => {
            let i = index % columns.len();
            let c = format!("c{i}");
            match (columns[i].kind, op) {
                (_, 0) => format!("{c} IS NULL"),
                (_, 1) => format!("{c} IS NOT NULL"),
                (Kind::Int32 | Kind::Int64, _) => format!("{c} > {value}"),
                (Kind::Float64, _) => format!("{c} <= {}.5", value),
                (Kind::Utf8, 2) => format!("{c} = 's{}'", value.rem_euclid(20)),
                (Kind::Utf8, _) => format!("{c} LIKE 's1%'"),
                (Kind::Dictionary, _) => format!("{c} = 'd{}'", value.rem_euclid(8)),
                (Kind::List, _) => format!("array_length({c}) > {}", value.rem_euclid(3)),
                (Kind::Struct, _) => format!("{c}['a'] > {value}"),
            }
        }
    }
}

fn query_sql(query: &Query, columns: &[Column], rows: i64) -> String {
    let mut items = vec![];
    if query.with_id {
        items.push("id".to_string());
    }
    for (i, column) in columns.iter().enumerate() {
        if query.projection & (1 << i) != 0 {
            if column.kind == Kind::Struct && query.struct_field {
                items.push(format!("c{i}['a'] AS c{i}_a"));
            } else {
                items.push(format!("c{i}"));
            }
        }
    }
    if items.is_empty() {
        items.push("id".to_string());
    }
    let select = items.join(", ");
    let filter = query
        .predicate
        .as_ref()
        .map(|p| format!(" WHERE {}", predicate_sql(p, columns, rows)))
        .unwrap_or_default();
    match &query.shape {
        Shape::Unordered => format!("SELECT {select} FROM t{filter}"),
        Shape::TopN { descending, limit } => {
            let direction = if *descending { " DESC" } else { "" };
            format!("SELECT {select} FROM t{filter} ORDER BY id{direction} LIMIT {limit}")
        }
        Shape::CountOfLimit(limit) => {
            format!("SELECT count(*) FROM (SELECT {select} FROM t{filter} LIMIT {limit})")
        }
    }
}

/// An outcome in comparable form: the rows of an unordered query sorted.
fn comparable(outcome: &Outcome, ordered: bool) -> String {
    match outcome {
        Outcome::Rows(text) if !ordered => {
            let mut lines: Vec<&str> = text.lines().collect();
            lines.sort_unstable();
            lines.join("\n")
        }
        other => other.class(),
    }
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let files = write_files(&case.columns, &case.layout);
    let fx = fixture(
        files,
        FixtureOptions {
            latency: if case.session.slow_store {
                Duration::from_millis(6)
            } else {
                Duration::ZERO
            },
            partitions: case.session.partitions,
            ..Default::default()
        },
    )
    .await;
    let s = &case.session;
    let budget = s.window * s.budget_factor;
    for set in [
        format!(
            "SET datafusion.execution.parquet.pushdown_filters = {}",
            s.pushdown_filters
        ),
        format!(
            "SET datafusion.optimizer.repartition_file_min_size = {}",
            if s.split_files { 1 } else { 10 << 20 }
        ),
    ] {
        fx.ctx.sql(&set).await.unwrap().collect().await.unwrap();
    }
    fx.set("read_ahead_window", "1").await;
    fx.set("memory_budget", &budget.to_string()).await;
    fx.set("read_ahead_window", &s.window.to_string()).await;
    fx.set("file_open_depth", &s.file_open_depth.to_string())
        .await;
    fx.set("eager_first_read_cap", &s.eager_first_read_cap.to_string())
        .await;

    let rows = case.layout.rows_per_file.iter().sum::<usize>() as i64;
    let sql = query_sql(&case.query, &case.columns, rows);
    let ordered = !matches!(case.query.shape, Shape::Unordered);
    let mut expected = None;
    for policy in PrefetchPolicy::ALL {
        fx.set("policy", policy.name()).await;
        let plan = fx.plan(&sql).await;
        let stats = prefetch_stats(&plan);
        let outcome = run_in_task(&fx.ctx, plan).await;
        prop_assert!(
            !matches!(outcome, Outcome::Panic(_)),
            "{policy}: {sql} panicked: {outcome:?}"
        );
        for stats in &stats {
            prop_assert!(
                stats.peak_staged_bytes() <= budget,
                "{policy}: {sql}: peak staged {} over the budget {budget}",
                stats.peak_staged_bytes()
            );
        }
        assert_released(&stats, fx.pool.as_ref(), &format!("{policy}: {sql}")).await;
        let result = comparable(&outcome, ordered);
        match &expected {
            None => {
                if matches!(outcome, Outcome::Error { .. }) {
                    OFF_ERRORS.fetch_add(1, Ordering::SeqCst);
                }
                expected = Some(result)
            }
            Some(expected) => prop_assert_eq!(&result, expected, "{}: {}", policy, sql),
        }
    }
    Ok(())
}

/// Cases whose query failed under `off` (all policies must fail alike, but a
/// generator that mostly writes failing queries would test little).
static OFF_ERRORS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn every_policy_returns_exactly_what_off_returns() {
    let config = config();
    let cases = config.cases;
    let started = Instant::now();
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |case| runtime().block_on(check(case)));
    if let Err(e) = result {
        panic!("{e}");
    }
    let errors = OFF_ERRORS.load(Ordering::SeqCst);
    println!(
        "{cases} cases, each under {} policies, in {:.1?}; {errors} failed under off",
        PrefetchPolicy::ALL.len(),
        started.elapsed()
    );
    assert!(
        errors * 20 <= cases as usize,
        "{errors} of {cases} generated queries fail under off: fix the generator"
    );
}
