//! [`HedgeAfter`]: when a GET that has not answered is sent again, as `SET`
//! spells it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::timeout::RequestTimeout;

/// `prefetch.hedge_after`: how long a GET the scheduler planned may wait for
/// its first byte before an identical GET is sent beside it. The first of the
/// two to answer is read; the other is dropped before any of its body is
/// read, so a hedge costs one more request and no more bytes.
///
/// ```
/// use std::time::Duration;
/// use datafusion_prefetch::HedgeAfter;
///
/// assert_eq!("auto".parse::<HedgeAfter>().unwrap(), HedgeAfter::Auto);
/// assert_eq!("off".parse::<HedgeAfter>().unwrap(), HedgeAfter::Off);
/// let after: HedgeAfter = "80ms".parse().unwrap();
/// assert_eq!(after, HedgeAfter::After(Duration::from_millis(80)));
/// assert_eq!(after.to_string(), "80ms");
/// assert!("soon".parse::<HedgeAfter>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HedgeAfter {
    /// The policy decides: under `auto`, two median round trips of the store
    /// (at least 50 ms) once one has been measured on a remote store; the
    /// fixed policies never hedge.
    #[default]
    Auto,
    /// Never: every GET is sent once.
    Off,
    /// After this long, under every policy that reads ahead.
    After(Duration),
}

impl fmt::Display for HedgeAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Off => f.write_str("off"),
            Self::After(after) => RequestTimeout::new(*after).fmt(f),
        }
    }
}

impl FromStr for HedgeAfter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        let duration: RequestTimeout = s.parse().map_err(|_| {
            format!("'{s}' is not a hedge delay: expected auto, off or e.g. 80ms, 1s")
        })?;
        Ok(duration.duration().map_or(Self::Off, Self::After))
    }
}
