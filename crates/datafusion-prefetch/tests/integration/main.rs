//! Integration tests of datafusion-prefetch against a simulated object store.
//! One test binary, so DataFusion is linked once.

mod bad_input;
mod errors;
mod faults;
mod mechanism;
mod sql;
mod support;
mod timeline;
