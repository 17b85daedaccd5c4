//! What prefetching does before a scan exists: while a table's schema is
//! inferred, the footers of its files are read ahead, many at once, into
//! DataFusion's file-metadata cache (and under `auto`, a small file the
//! footer read reads whole is kept for its scan).
//!
//! - `read_plan.rs`: which footer next, how many at once, when to stop —
//!   pure;
//! - `read_ahead.rs`: carries the plan out with DataFusion's metadata
//!   reader, within the governor;
//! - `format.rs`: [`PrefetchingParquetFormat`], the `FileFormat` that does it.

mod format;
mod read_ahead;
mod read_plan;

pub use format::{PrefetchingParquetFormat, PrefetchingParquetFormatFactory};
