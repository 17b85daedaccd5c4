//! Settings: the `prefetch.*` session options and the sizes they take.

mod byte_size;
mod hedge;
mod limits;
mod options;
mod policy;
mod price;
mod timeout;

pub use byte_size::{ByteSize, ByteSizeError};
pub use hedge::HedgeAfter;
pub use limits::POOL_SHARE_DIVISOR;
pub(crate) use limits::{StreamLimits, planning_footer_depth, pool_bounded_budget};
pub(crate) use options::LimitSource;
pub use options::{
    AUTO_MAX_FILE_OPEN_DEPTH, DEFAULT_HEDGE_SHARE_PERCENT, FIXED_POLICY_EAGER_FIRST_READ_CAP,
    FIXED_POLICY_FILE_OPEN_DEPTH, FIXED_POLICY_WINDOW, MAX_FILE_OPEN_DEPTH, PrefetchOptions,
};
pub use policy::PrefetchPolicy;
pub use price::RequestPrice;
pub(crate) use price::dollars;
pub use timeout::RequestTimeout;
