//! Deterministic Parquet datasets for the sqllogictest suites.
//!
//! Every value is a pure function of the row number (and a per-column seed fed
//! through splitmix64), so the files and therefore the expected results are the
//! same on every run and every machine. Floating-point columns only hold
//! multiples of 0.25, so sums are exact whatever order partitions add them in.
//!
//! Layout under the data directory (each dataset is one table location):
//!
//! | folder                          | files | rows   | notes                                   |
//! |---------------------------------|-------|--------|-----------------------------------------|
//! | `many_files/`                   | 12    | 36 000 | 3 row groups each, half with small pages |
//! | `many_row_groups/`              | 2     | 24 000 | 24 row groups of 500 each, sorted by `k` |
//! | `hive/year=Y/month=M/`          | 16    | 6 400  | hive partitions, 3 years x 4 months       |
//! | `types/`                        | 2     | 2 000  | dictionary, list, struct, decimal, ts    |
//! | `joins/customers/`              | 3     | 300    | customers 1..=300                        |
//! | `joins/orders/`                 | 6     | 9 000  | orders, some without a known customer    |

use std::error::Error;
use std::fs::{self, File};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array,
    Int32Array, Int32Builder, Int64Array, ListBuilder, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion_prefetch_testdata::mix;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

type Result<T = ()> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Write every dataset below `dir`.
pub fn generate(dir: &Path) -> Result {
    many_files(&dir.join("many_files"))?;
    many_row_groups(&dir.join("many_row_groups"))?;
    hive(&dir.join("hive"))?;
    types(&dir.join("types"))?;
    joins(&dir.join("joins"))?;
    Ok(())
}

/// A pseudo-random value for row `row` of the column identified by `seed`.
fn rnd(seed: u64, row: u64) -> u64 {
    mix(mix(seed) ^ row)
}

/// Writer settings used by the datasets.
struct Props {
    row_group_rows: usize,
    /// `Some(n)`: data pages of at most `n` rows, so the page index can prune.
    page_rows: Option<usize>,
    compression: Compression,
    bloom_filter_on: Option<&'static str>,
    sorted_by_first_column: bool,
}

impl Props {
    fn new(row_group_rows: usize) -> Self {
        Self {
            row_group_rows,
            page_rows: None,
            compression: Compression::SNAPPY,
            bloom_filter_on: None,
            sorted_by_first_column: false,
        }
    }

    fn small_pages(mut self, rows: usize) -> Self {
        self.page_rows = Some(rows);
        self
    }

    fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    fn bloom_filter_on(mut self, column: &'static str) -> Self {
        self.bloom_filter_on = Some(column);
        self
    }

    fn sorted(mut self) -> Self {
        self.sorted_by_first_column = true;
        self
    }

    fn build(&self) -> WriterProperties {
        // Column and page statistics (the page index) are written by default;
        // spelled out because several suites rely on them for pruning.
        let mut builder = WriterProperties::builder()
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_compression(self.compression);
        if let Some(rows) = self.page_rows {
            // The row-count limit is checked per write batch, so shrink both.
            builder = builder
                .set_data_page_row_count_limit(rows)
                .set_write_batch_size(rows);
        }
        if let Some(column) = self.bloom_filter_on {
            builder = builder.set_column_bloom_filter_enabled(ColumnPath::from(column), true);
        }
        if self.sorted_by_first_column {
            builder = builder.set_sorting_columns(Some(vec![SortingColumn {
                column_idx: 0,
                descending: false,
                nulls_first: false,
            }]));
        }
        builder.build()
    }
}

fn write(path: &Path, schema: &SchemaRef, batches: &[RecordBatch], props: &Props) -> Result {
    fs::create_dir_all(path.parent().expect("file has a parent folder"))?;
    let mut writer =
        ArrowWriter::try_new(File::create(path)?, Arc::clone(schema), Some(props.build()))?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.close()?;
    Ok(())
}

/// Split `rows` into batches of at most `size` rows built by `make(start..end)`.
fn batches(
    rows: std::ops::Range<u64>,
    size: u64,
    mut make: impl FnMut(std::ops::Range<u64>) -> Result<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
    let mut out = vec![];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + size).min(rows.end);
        out.push(make(start..end)?);
        start = end;
    }
    Ok(out)
}

const WORDS: [&str; 5] = ["alpha", "beta", "gamma", "delta", "epsilon"];
const CATEGORIES: [&str; 8] = [
    "books", "games", "garden", "music", "outdoor", "sports", "tools", "toys",
];

/// `many_files/part-NN.parquet`: 12 files x 3000 rows, ids 0..36000.
///
/// Columns: `id` BIGINT NOT NULL, `qty` INT (null every 17th id), `price`
/// DOUBLE (multiples of 0.25, null every 19th), `name` VARCHAR (null every
/// 23rd), `flag` BOOLEAN (null every 11th), `category` VARCHAR NOT NULL.
/// Even files have 100-row pages and a bloom filter on `name`; the compression
/// rotates through snappy, zstd and none.
fn many_files(dir: &Path) -> Result {
    const FILES: u64 = 12;
    const ROWS: u64 = 3000;
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("qty", DataType::Int32, true),
        Field::new("price", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("category", DataType::Utf8, false),
    ]));
    for file in 0..FILES {
        let first = file * ROWS;
        let data = batches(first..first + ROWS, 1024, |ids| {
            let ids: Vec<u64> = ids.collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
                Arc::new(Int32Array::from_iter(ids.iter().map(|&i| {
                    (i % 17 != 0).then(|| (rnd(1, i) % 2001) as i32 - 1000)
                }))),
                Arc::new(Float64Array::from_iter(ids.iter().map(|&i| {
                    (i % 19 != 0).then(|| ((rnd(2, i) % 40_001) as f64 - 20_000.0) * 0.25)
                }))),
                Arc::new(StringArray::from_iter(ids.iter().map(|&i| {
                    (i % 23 != 0).then(|| {
                        format!("{}-{:03}", WORDS[(rnd(3, i) % 5) as usize], rnd(4, i) % 400)
                    })
                }))),
                Arc::new(BooleanArray::from_iter(
                    ids.iter()
                        .map(|&i| (i % 11 != 0).then(|| rnd(5, i).is_multiple_of(3))),
                )),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|&i| CATEGORIES[(rnd(6, i) % 8) as usize]),
                )),
            ];
            Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
        })?;
        let compression = match file % 3 {
            0 => Compression::SNAPPY,
            1 => Compression::ZSTD(ZstdLevel::default()),
            _ => Compression::UNCOMPRESSED,
        };
        let mut props = Props::new(1000).compression(compression);
        if file % 2 == 0 {
            props = props.small_pages(100).bloom_filter_on("name");
        }
        write(
            &dir.join(format!("part-{file:02}.parquet")),
            &schema,
            &data,
            &props,
        )?;
    }
    Ok(())
}

/// `many_row_groups/part-N.parquet`: 2 files x 12 000 rows in row groups of
/// 500 rows (24 per file) and 50-row pages, sorted by `k`.
///
/// Columns: `k` BIGINT NOT NULL = 2 * row (0, 2, ..., 47998; file 0 holds
/// k < 24000), `v` BIGINT (null when row % 7 == 0), `s` VARCHAR = 's' + k/100
/// zero-padded (sorted too), `bucket` INT = k / 1000.
fn many_row_groups(dir: &Path) -> Result {
    const FILES: u64 = 2;
    const ROWS: u64 = 12_000;
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, false),
        Field::new("bucket", DataType::Int32, false),
    ]));
    for file in 0..FILES {
        let first = file * ROWS;
        let data = batches(first..first + ROWS, 2000, |rows| {
            let rows: Vec<u64> = rows.collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|&r| 2 * r as i64),
                )),
                Arc::new(Int64Array::from_iter(
                    rows.iter()
                        .map(|&r| (r % 7 != 0).then(|| (rnd(10, r) % 1_000_000) as i64)),
                )),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|&r| format!("s{:05}", 2 * r / 100)),
                )),
                Arc::new(Int32Array::from_iter_values(
                    rows.iter().map(|&r| (2 * r / 1000) as i32),
                )),
            ];
            Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
        })?;
        let props = Props::new(500).small_pages(50).sorted();
        write(
            &dir.join(format!("part-{file}.parquet")),
            &schema,
            &data,
            &props,
        )?;
    }
    Ok(())
}

const CITIES: [&str; 6] = ["Berlin", "Lima", "Oslo", "Pune", "Quito", "Tokyo"];

/// `hive/year=Y/month=M/*.parquet` for years 2022..=2024 and months 1, 2, 6,
/// 12; the year=2023 folders hold two files each, the others one; 400 rows per
/// file.
///
/// File columns (partition values are not stored in the files): `id` BIGINT
/// NOT NULL (unique over the dataset), `amount` BIGINT NOT NULL, `city`
/// VARCHAR (null every 13th id).
fn hive(dir: &Path) -> Result {
    const ROWS: u64 = 400;
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    let mut next_id = 0;
    for year in [2022, 2023, 2024] {
        for month in [1, 2, 6, 12] {
            let files = if year == 2023 { 2 } else { 1 };
            for file in 0..files {
                let first = next_id;
                next_id += ROWS;
                let data = batches(first..first + ROWS, ROWS, |ids| {
                    let ids: Vec<u64> = ids.collect();
                    let columns: Vec<ArrayRef> = vec![
                        Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
                        Arc::new(Int64Array::from_iter_values(
                            ids.iter().map(|&i| (rnd(20, i) % 10_000) as i64),
                        )),
                        Arc::new(StringArray::from_iter(ids.iter().map(|&i| {
                            (i % 13 != 0).then(|| CITIES[(rnd(21, i) % 6) as usize])
                        }))),
                    ];
                    Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
                })?;
                let path = dir
                    .join(format!("year={year}"))
                    .join(format!("month={month}"))
                    .join(format!("part-{file}.parquet"));
                write(&path, &schema, &data, &Props::new(200).small_pages(50))?;
            }
        }
    }
    Ok(())
}

const COLORS: [&str; 4] = ["red", "green", "blue", "yellow"];

/// `types/part-N.parquet`: 2 files x 1000 rows, row groups of 250.
///
/// Columns (all but `id` nullable):
/// - `id` BIGINT NOT NULL, 0..2000;
/// - `s` VARCHAR: 'str-<id>', empty when id % 29 == 0, null when id % 31 == 0;
/// - `color` Dictionary(Int32, Utf8): red/green/blue/yellow, null when id % 9 == 0;
/// - `tags` List<Int32>: 0..=3 elements, null when id % 13 == 0, element null
///   when (id + position) % 10 == 0;
/// - `st` Struct<a: Int32, b: Utf8>: null when id % 15 == 0, `a` null when
///   id % 7 == 0, `b` = 'b<id % 10>';
/// - `dec` Decimal(12, 2) in -10000.00..=9999.99, null when id % 8 == 0;
/// - `ts` Timestamp(us): 2024-01-01 + id hours + (0..59) s, null when id % 21 == 0;
/// - `d` Date32: 2024-01-01 + id / 10 days.
fn types(dir: &Path) -> Result {
    const FILES: u64 = 2;
    const ROWS: u64 = 1000;
    const JAN_1_2024_DAYS: i32 = 19_723;
    const JAN_1_2024_MICROS: i64 = 1_704_067_200_000_000;
    let struct_fields = Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new(
            "color",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true))),
            true,
        ),
        Field::new("st", DataType::Struct(struct_fields.clone()), true),
        Field::new("dec", DataType::Decimal128(12, 2), true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("d", DataType::Date32, true),
    ]));
    for file in 0..FILES {
        let first = file * ROWS;
        let data = batches(first..first + ROWS, 300, |ids| {
            let ids: Vec<u64> = ids.collect();
            let color: DictionaryArray<Int32Type> = ids
                .iter()
                .map(|&i| (i % 9 != 0).then(|| COLORS[(rnd(30, i) % 4) as usize]))
                .collect();
            let mut tags = ListBuilder::new(Int32Builder::new());
            for &i in &ids {
                if i % 13 == 0 {
                    tags.append_null();
                    continue;
                }
                for position in 0..rnd(31, i) % 4 {
                    let value = ((rnd(32, i * 4 + position) % 100) as i32) - 20;
                    tags.values()
                        .append_option(((i + position) % 10 != 0).then_some(value));
                }
                tags.append(true);
            }
            let st = StructArray::try_new(
                struct_fields.clone(),
                vec![
                    Arc::new(Int32Array::from_iter(
                        ids.iter()
                            .map(|&i| (i % 7 != 0).then(|| (rnd(33, i) % 1000) as i32)),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        ids.iter().map(|&i| format!("b{}", i % 10)),
                    )),
                ],
                Some(ids.iter().map(|&i| i % 15 != 0).collect()),
            )?;
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
                Arc::new(StringArray::from_iter(ids.iter().map(|&i| {
                    if i % 31 == 0 {
                        None
                    } else if i % 29 == 0 {
                        Some(String::new())
                    } else {
                        Some(format!("str-{i}"))
                    }
                }))),
                Arc::new(color),
                Arc::new(tags.finish()),
                Arc::new(st),
                Arc::new(
                    Decimal128Array::from_iter(ids.iter().map(|&i| {
                        (i % 8 != 0).then(|| (rnd(34, i) % 2_000_000) as i128 - 1_000_000)
                    }))
                    .with_precision_and_scale(12, 2)?,
                ),
                Arc::new(TimestampMicrosecondArray::from_iter(ids.iter().map(|&i| {
                    (i % 21 != 0).then(|| {
                        JAN_1_2024_MICROS
                            + i as i64 * 3_600_000_000
                            + (rnd(35, i) % 60) as i64 * 1_000_000
                    })
                }))),
                Arc::new(Date32Array::from_iter_values(
                    ids.iter().map(|&i| JAN_1_2024_DAYS + (i / 10) as i32),
                )),
            ];
            Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
        })?;
        let props = Props::new(250).small_pages(100);
        write(
            &dir.join(format!("part-{file}.parquet")),
            &schema,
            &data,
            &props,
        )?;
    }
    Ok(())
}

const REGIONS: [&str; 4] = ["north", "east", "south", "west"];
const STATUSES: [&str; 3] = ["open", "shipped", "returned"];

/// `joins/customers/part-N.parquet` (3 x 100 rows) and
/// `joins/orders/part-N.parquet` (6 x 1500 rows).
///
/// customers: `c_id` BIGINT NOT NULL 1..=300, `c_name` VARCHAR NOT NULL
/// 'customer-NNN', `region` VARCHAR NOT NULL = REGIONS[c_id % 4], `tier` INT
/// = c_id % 3 (null when c_id % 37 == 0).
///
/// orders: `o_id` BIGINT NOT NULL 1..=9000, `c_id` BIGINT in 1..=331 but
/// never a multiple of 25 (so some orders have no customer and customers 25,
/// 50, ..., 300 have no order; null when o_id % 50 == 0), `amount`
/// Decimal(10, 2) NOT NULL, `status` VARCHAR NOT NULL.
fn joins(dir: &Path) -> Result {
    let customers: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("c_id", DataType::Int64, false),
        Field::new("c_name", DataType::Utf8, false),
        Field::new("region", DataType::Utf8, false),
        Field::new("tier", DataType::Int32, true),
    ]));
    for file in 0..3u64 {
        let first = 1 + file * 100;
        let data = batches(first..first + 100, 100, |ids| {
            let ids: Vec<u64> = ids.collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|&i| format!("customer-{i:03}")),
                )),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|&i| REGIONS[(i % 4) as usize]),
                )),
                Arc::new(Int32Array::from_iter(
                    ids.iter().map(|&i| (i % 37 != 0).then_some((i % 3) as i32)),
                )),
            ];
            Ok(RecordBatch::try_new(Arc::clone(&customers), columns)?)
        })?;
        let path = dir.join("customers").join(format!("part-{file}.parquet"));
        write(&path, &customers, &data, &Props::new(50))?;
    }

    let orders: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("o_id", DataType::Int64, false),
        Field::new("c_id", DataType::Int64, true),
        Field::new("amount", DataType::Decimal128(10, 2), false),
        Field::new("status", DataType::Utf8, false),
    ]));
    for file in 0..6u64 {
        let first = 1 + file * 1500;
        let data = batches(first..first + 1500, 700, |ids| {
            let ids: Vec<u64> = ids.collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
                Arc::new(Int64Array::from_iter(ids.iter().map(|&i| {
                    // Customers 25, 50, ..., 300 never order.
                    let c_id = rnd(40, i) % 330 + 1;
                    let c_id = if c_id.is_multiple_of(25) {
                        c_id + 1
                    } else {
                        c_id
                    };
                    (i % 50 != 0).then_some(c_id as i64)
                }))),
                Arc::new(
                    Decimal128Array::from_iter_values(
                        ids.iter().map(|&i| (rnd(41, i) % 100_000) as i128 + 100),
                    )
                    .with_precision_and_scale(10, 2)?,
                ),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|&i| STATUSES[(rnd(42, i) % 3) as usize]),
                )),
            ];
            Ok(RecordBatch::try_new(Arc::clone(&orders), columns)?)
        })?;
        let path = dir.join("orders").join(format!("part-{file}.parquet"));
        write(&path, &orders, &data, &Props::new(500).small_pages(100))?;
    }
    Ok(())
}
