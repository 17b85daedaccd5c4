//! sqllogictest suites for datafusion-prefetch live in the .slt files beside this crate; runner.rs drives them.
