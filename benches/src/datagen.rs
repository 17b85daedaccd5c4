//! Writing generated data: the `id`/`payload` files of the synthetic suites,
//! and running generator jobs on every core. The TPC-H and ClickBench
//! generators (`tpch.rs`, `clickbench.rs`) use it; `suites.rs` says which
//! suite writes what.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result;
use datafusion_prefetch_testdata::mix;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// `id`, then `payload` and `payload_2 … payload_n` for `payload_columns` = n.
fn id_payload_schema(payload_columns: usize) -> SchemaRef {
    let mut fields = vec![Field::new("id", DataType::UInt64, false)];
    for column in 1..=payload_columns {
        let name = match column {
            1 => "payload".to_string(),
            n => format!("payload_{n}"),
        };
        fields.push(Field::new(name, DataType::Int64, false));
    }
    Arc::new(Schema::new(fields))
}

/// Write `files` files of `rows` rows each, `row_group_rows` rows per row
/// group: `id` counts rows across the files, payloads are [`mix`]ed from it
/// (incompressible).
pub fn write_id_payload(
    dir: &Path,
    files: usize,
    rows: usize,
    row_group_rows: usize,
    payload_columns: usize,
) -> Result<()> {
    let schema = id_payload_schema(payload_columns);
    fs::create_dir_all(dir)?;
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_max_row_group_bytes(None)
        .build();
    for file in 0..files {
        let path = dir.join(format!("part-{file:05}.parquet"));
        let tmp = path.with_extension("parquet.tmp");
        let mut writer = ArrowWriter::try_new(
            fs::File::create(&tmp)?,
            Arc::clone(&schema),
            Some(props.clone()),
        )?;
        let first = (file * rows) as u64;
        let chunk = 1 << 20;
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let ids: Vec<u64> = (first + start as u64..first + (start + n) as u64).collect();
            let mut columns: Vec<ArrayRef> = vec![];
            for column in 1..=payload_columns as u64 {
                let payload: Int64Array = ids
                    .iter()
                    .map(|i| (mix(i.wrapping_mul(column)) >> 1) as i64)
                    .collect();
                columns.push(Arc::new(payload));
            }
            columns.insert(0, Arc::new(UInt64Array::from(ids)));
            let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
            writer.write(&batch)?;
            start += n;
        }
        writer.close()?;
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// Run `work` on every job, on as many threads as there are cores.
pub fn parallel<T: Sync>(jobs: &[T], work: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::SeqCst)) {
                        if let Err(e) = work(job) {
                            // Let the other workers stop at their next job.
                            next.store(jobs.len(), Ordering::SeqCst);
                            return Err(e);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a generator thread panicked"))
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}
