//! Integration tests of datafusion-prefetch against a simulated object store.
//! One test binary, so DataFusion is linked once.

mod bad_input;
mod concurrency;
mod differential;
mod errors;
mod fault_matrix;
mod faults;
mod mechanism;
mod memory_pressure;
mod pools;
mod sql;
mod support;
mod timeline;
