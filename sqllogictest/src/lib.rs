//! sqllogictest suites for datafusion-prefetch.
//!
//! The suites live in `suites/*.slt` beside this crate; `runner.rs` (the
//! `sqllogictests` test target, `harness = false`) generates the datasets
//! (`datagen.rs`) and runs every suite under every prefetch policy:
//!
//! ```text
//! cargo test -p datafusion-prefetch-sqllogictest [-- [--complete] [FILTER...]]
//! ```
//!
//! See the module documentation of `runner.rs` for the options.
