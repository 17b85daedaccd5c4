//! `PrefetchPolicy`: how a scan fetches Parquet bytes ahead of its decoder.

use std::fmt;
use std::str::FromStr;

use datafusion::common::{DataFusionError, Result};

/// How a scan fetches Parquet bytes ahead of its decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PrefetchPolicy {
    /// Exactly stock DataFusion: one request at a time, no read-ahead. The baseline.
    Off,
    /// Each demand fetch is widened with the next row groups' projected column
    /// chunks, up to the window. I/O and decode still alternate, but with fewer
    /// round trips.
    Batched,
    /// While row group *k* decodes, row groups *k+1…* are fetched in the
    /// background up to the window, and upcoming files are opened ahead.
    Pipelined,
    /// Page-granular: each row group is read as a sequence of row slices whose
    /// pages (found through the offset index) are fetched ahead in decode order,
    /// so decoding starts when the first slice lands and staged memory follows
    /// the window rather than the row-group size. Files without an offset index
    /// are read like `pipelined`.
    Streaming,
    /// Adapts to what the scan measures (the default). On a local store
    /// (round trip under 5 ms) it reads exactly like `off`. On a remote one it
    /// reads files with an offset index slice by slice and others row group by
    /// row group, keeps as many bytes ahead as the decoder consumes while a
    /// request is answered (within the budget, and the window and file-open
    /// depth when they are set), and merges or splits requests by the
    /// measured round trip and bandwidth.
    #[default]
    Auto,
}

impl PrefetchPolicy {
    /// Every policy this build accepts, in the order they are documented.
    pub const ALL: [PrefetchPolicy; 5] = [
        Self::Off,
        Self::Batched,
        Self::Pipelined,
        Self::Streaming,
        Self::Auto,
    ];

    /// The name used by `SET prefetch.policy`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Batched => "batched",
            Self::Pipelined => "pipelined",
            Self::Streaming => "streaming",
            Self::Auto => "auto",
        }
    }

    /// Whether the scan may fetch ahead in the background (and open files
    /// ahead); `auto` does so only where it measures a remote store.
    pub fn reads_ahead(self) -> bool {
        matches!(self, Self::Pipelined | Self::Streaming | Self::Auto)
    }

    fn accepted() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl fmt::Display for PrefetchPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PrefetchPolicy {
    type Err = DataFusionError;

    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        if let Some(policy) = Self::ALL.into_iter().find(|p| p.name() == wanted) {
            return Ok(policy);
        }
        Err(DataFusionError::Configuration(format!(
            "invalid value '{s}' for prefetch.policy; accepted values: {}",
            Self::accepted()
        )))
    }
}
