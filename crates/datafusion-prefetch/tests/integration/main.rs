//! Integration tests of datafusion-prefetch against a simulated object store,
//! and over the real wire against S3, GCS, Azure Blob and HTTP servers (`wire`).
//! One test binary, so DataFusion is linked once.

// Tests spawn on the runtime `#[tokio::test]` gives them; the library may
// not (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod accounting;
mod auto;
mod bad_input;
mod concurrency;
mod differential;
mod dropping;
mod errors;
mod executions;
mod fault_matrix;
mod faults;
mod fuzz_targets;
mod governor;
mod ledger;
mod mechanism;
mod memory_pressure;
mod planning;
mod pools;
mod registering;
mod sql;
mod stand_in;
mod streaming;
mod support;
mod throttling;
mod timeline;
mod wire;
