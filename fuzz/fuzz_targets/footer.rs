//! Mutated Parquet files: footer and offset index through `FileLayout`, the
//! slice planner and the scheduler core (body:
//! `datafusion_prefetch::fuzzing::footer`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| datafusion_prefetch::fuzzing::footer(data));
