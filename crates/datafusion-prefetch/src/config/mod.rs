//! Settings: the `prefetch.*` session options and the sizes they take.

mod byte_size;
mod options;

pub use byte_size::{ByteSize, ByteSizeError};
pub use options::{MAX_FILE_OPEN_DEPTH, PrefetchOptions, PrefetchPolicy};
