//! What the project's tests, benchmarks, sqllogictest data and demo share so
//! that their data and their comparisons mean the same thing everywhere:
//!
//! - [`mix`] and [`SplitMix64`]: one seeded, dependency-free generator of
//!   pseudo-random bits (SplitMix64), so generated files are identical on
//!   every machine and every run;
//! - [`checksum`]: one result checksum that ignores row order and is stable
//!   across Rust releases (FNV-1a 64, not `DefaultHasher`).
//!
//! Published so that `dfprefetch`'s demo can be installed; it is not part of
//! datafusion-prefetch's API and follows the workspace's version.

#![warn(missing_docs)]

mod checksum;
mod rng;

pub use checksum::{Numbers, canonical_lines, checksum};
pub use rng::{GOLDEN_GAMMA, SplitMix64, finalize, mix};
