//! One driver per execution: a physical plan run again (as it is, or reset
//! the way DataFusion resets a plan to run it again), run twice at once, or
//! run again after its scalar subquery failed gets what `off` gets in the
//! same scenario, and leaves nothing staged, running or reserved.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::collect;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion_prefetch_simstore::{Fault, FaultRule};

use crate::support::{Fixture, FixtureOptions, assert_nothing_left, chunk, fixture, parquet_file};

const POLICIES: [&str; 5] = ["off", "batched", "pipelined", "streaming", "auto"];

/// Twelve files of two row groups, 20,000 rows in all.
const ROWS: i64 = 12 * 2_000;

async fn twelve_files() -> Fixture {
    let files: Vec<_> = (0..12)
        .map(|i| parquet_file(i * 2_000, 2_000, 1_000))
        .collect();
    fixture(
        files,
        FixtureOptions {
            latency: Duration::from_millis(5),
            partitions: 2,
            ..Default::default()
        },
    )
    .await
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_run_again_gets_what_off_gets() {
    let fx = twelve_files().await;
    let sql = "SELECT count(*), sum(payload), min(tag) FROM t";
    let mut expected = None;
    for policy in POLICIES {
        fx.set("policy", policy).await;
        let plan = fx.plan(sql).await;
        // As it is (DataFusion 55 hands the files out once per plan: the
        // second run reads none), then reset as DataFusion resets a plan.
        let first = text(&collect(Arc::clone(&plan), fx.ctx.task_ctx()).await.unwrap());
        let again = text(&collect(Arc::clone(&plan), fx.ctx.task_ctx()).await.unwrap());
        let reset = reset_plan_states(Arc::clone(&plan)).unwrap();
        let after_reset = text(
            &collect(Arc::clone(&reset), fx.ctx.task_ctx())
                .await
                .unwrap(),
        );
        let runs = [first, again, after_reset];
        let expected = expected.get_or_insert_with(|| runs.clone());
        assert_eq!(&runs, expected, "{policy}");
        assert_nothing_left(&fx, &plan, policy).await;
    }
}

/// The count and sum of one result of `SELECT count(*), sum(payload)`.
fn count_and_sum(batches: &[RecordBatch]) -> (i64, i64) {
    let column = |i: usize| {
        let array = batches[0].column(i);
        let array = array.as_any().downcast_ref::<Int64Array>().unwrap();
        if array.is_null(0) { 0 } else { array.value(0) }
    };
    (column(0), column(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_run_twice_at_once_reads_every_row_once_as_off_does() {
    let fx = twelve_files().await;
    let sql = "SELECT count(*), sum(payload) FROM t";
    fx.set("policy", "off").await;
    let whole = count_and_sum(&fx.ctx.sql(sql).await.unwrap().collect().await.unwrap());
    assert_eq!(whole.0, ROWS);
    for policy in POLICIES {
        fx.set("policy", policy).await;
        let plan = fx.plan(sql).await;
        // Both executions take files from the plan's one work queue (as in
        // stock DataFusion): between them, every row once.
        let runs: Vec<_> = (0..2)
            .map(|_| tokio::spawn(collect(Arc::clone(&plan), fx.ctx.task_ctx())))
            .collect();
        let mut total = (0, 0);
        for run in runs {
            let (count, sum) = count_and_sum(&run.await.unwrap().unwrap());
            total = (total.0 + count, total.1 + sum);
        }
        assert_eq!(total, whole, "{policy}");
        assert_nothing_left(&fx, &plan, policy).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_run_again_after_its_subquery_failed_gets_what_off_gets() {
    let fx = twelve_files().await;
    let sql = "SELECT count(*), sum(payload) FROM t \
               WHERE payload > (SELECT avg(payload) FROM t WHERE id < 1000)";
    fx.set("policy", "off").await;
    let expected = text(&fx.ctx.sql(sql).await.unwrap().collect().await.unwrap());
    let (path, file) = fx.files[0].clone();
    for policy in POLICIES {
        fx.set("policy", policy).await;
        let plan = fx.plan(sql).await;
        // Every read of file 0's first payload chunk fails, ahead or on
        // demand: the subquery fails, after it started the main input's scan.
        fx.faults.set([FaultRule::new(Fault::Error)
            .path(path.as_ref())
            .overlapping(chunk(&file, 0, 1))]);
        let failed = collect(Arc::clone(&plan), fx.ctx.task_ctx()).await;
        assert!(failed.is_err(), "{policy}: the subquery fails");
        fx.faults.set([]);
        let reset = reset_plan_states(Arc::clone(&plan)).unwrap();
        let again = text(&collect(reset, fx.ctx.task_ctx()).await.unwrap());
        assert_eq!(again, expected, "{policy}");
        assert_nothing_left(&fx, &plan, policy).await;
    }
}
