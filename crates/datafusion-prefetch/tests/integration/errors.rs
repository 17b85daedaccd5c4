//! Shared helpers for tests that expect a query to fail: run it in its own
//! task (so that a panic shows as a panic, not as an error), classify the error so that
//! policies can be compared without comparing messages, and record panics
//! that a background task may have swallowed.

use std::sync::{Arc, Once};

use datafusion::common::DataFusionError;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use parking_lot::Mutex;
use parquet::errors::ParquetError;

/// What a query run in its own task came to.
#[derive(Debug)]
pub enum Outcome {
    /// It returned batches, pretty-printed.
    Rows(String),
    /// It failed: the error's class (see [`classify`]) and its message.
    Error { class: String, message: String },
    /// It panicked, with this message.
    Panic(String),
}

impl Outcome {
    /// The outcome without the message: what must agree across policies.
    pub fn class(&self) -> String {
        match self {
            Outcome::Rows(rows) => format!("rows:\n{rows}"),
            Outcome::Error { class, .. } => format!("error: {class}"),
            Outcome::Panic(message) => format!("panic: {message}"),
        }
    }
}

/// Execute `plan` to completion in a spawned task, so that a panic is seen as one.
pub async fn run_in_task(ctx: &SessionContext, plan: Arc<dyn ExecutionPlan>) -> Outcome {
    let task_ctx = ctx.task_ctx();
    let joined = tokio::spawn(async move {
        let batches = datafusion::physical_plan::collect(plan, task_ctx).await?;
        datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .map(|t| t.to_string())
            .map_err(DataFusionError::from)
    })
    .await;
    match joined {
        Ok(Ok(rows)) => Outcome::Rows(rows),
        Ok(Err(e)) => Outcome::Error {
            class: classify(&e),
            message: e.to_string(),
        },
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Panic(message)
        }
        Err(e) => panic!("the query task was cancelled: {e}"),
    }
}

/// A policy-independent name for the kind of an error: the innermost
/// DataFusion variant and, for Parquet and Arrow errors, their variant, with
/// context, sharing and boxing looked through. Messages are not compared.
pub fn classify(error: &DataFusionError) -> String {
    match error {
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            classify(inner)
        }
        DataFusionError::Shared(inner) => classify(inner),
        DataFusionError::Collection(errors) => errors
            .first()
            .map(classify)
            .unwrap_or_else(|| "Collection".into()),
        DataFusionError::ParquetError(e) => format!("Parquet::{}", parquet_kind(e)),
        DataFusionError::ArrowError(e, _) => format!("Arrow::{}", variant(e)),
        DataFusionError::ObjectStore(e) => format!("ObjectStore::{}", variant(e)),
        DataFusionError::External(e) => external(e.as_ref()),
        other => variant(other),
    }
}

fn external(e: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    if let Some(e) = e.downcast_ref::<DataFusionError>() {
        classify(e)
    } else if let Some(e) = e.downcast_ref::<ParquetError>() {
        format!("Parquet::{}", parquet_kind(e))
    } else if let Some(e) = e.downcast_ref::<datafusion::arrow::error::ArrowError>() {
        format!("Arrow::{}", variant(e))
    } else if let Some(e) = e.downcast_ref::<object_store::Error>() {
        format!("ObjectStore::{}", variant(e))
    } else {
        "External".into()
    }
}

fn parquet_kind(e: &ParquetError) -> String {
    match e {
        ParquetError::External(inner) => format!("External({})", external(inner.as_ref())),
        other => variant(other),
    }
}

/// The name of an enum value's variant, from its `Debug` form.
fn variant(value: &impl std::fmt::Debug) -> String {
    let debug = format!("{value:?}");
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or_default()
        .to_string()
}

static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Run `future` on a runtime of its own whose threads are named `name`, and
/// record every panic raised on them (in the query or in a background task
/// that may have swallowed it) for [`panics_on`]. The previous panic hook
/// still runs, so panics are printed as usual.
pub fn run_on_named_runtime<F: Future>(name: &str, future: F) -> F::Output {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current()
                .name()
                .unwrap_or_default()
                .to_string();
            PANICS.lock().push((thread, info.to_string()));
            previous(info);
        }));
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Panics recorded on the threads of the runtime named `name`.
pub fn panics_on(name: &str) -> Vec<String> {
    PANICS
        .lock()
        .iter()
        .filter(|(thread, _)| thread == name)
        .map(|(_, message)| message.clone())
        .collect()
}
