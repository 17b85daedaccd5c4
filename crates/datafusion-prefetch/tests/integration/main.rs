//! Integration tests of datafusion-prefetch against a simulated object store.
//! One test binary, so DataFusion is linked once.

mod faults;
mod mechanism;
mod sql;
mod streaming;
mod support;
mod timeline;
