//! Integration tests of datafusion-prefetch against a simulated object store,
//! and over the real wire against an S3-compatible server (`s3_wire`).
//! One test binary, so DataFusion is linked once.

mod accounting;
mod auto;
mod bad_input;
mod concurrency;
mod differential;
mod errors;
mod fault_matrix;
mod faults;
mod fuzz_targets;
mod governor;
mod mechanism;
mod memory_pressure;
mod pools;
mod s3_wire;
mod sql;
mod streaming;
mod support;
mod timeline;
