//! Arbitrary layouts and event sequences through the slice planner and the
//! scheduler core (body: `datafusion_prefetch::fuzzing::scan_core`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| datafusion_prefetch::fuzzing::scan_core(data));
