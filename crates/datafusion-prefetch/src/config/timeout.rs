//! [`RequestTimeout`]: how long a demand read may take, as `SET` spells it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `prefetch.request_timeout`: the longest a decoder's own (demand) read may
/// take before the query fails with an error naming the file and byte ranges.
/// `off` (the default) waits as long as the store does, as stock DataFusion.
///
/// Accepts `off` (or `0`) and a whole number with a unit: `ms`, `s` or `min`.
///
/// ```
/// use std::time::Duration;
/// use datafusion_prefetch::RequestTimeout;
///
/// let t: RequestTimeout = "30s".parse().unwrap();
/// assert_eq!(t.duration(), Some(Duration::from_secs(30)));
/// assert_eq!("250ms".parse::<RequestTimeout>().unwrap().to_string(), "250ms");
/// assert_eq!("off".parse::<RequestTimeout>().unwrap().duration(), None);
/// assert!("soon".parse::<RequestTimeout>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestTimeout(Option<Duration>);

impl RequestTimeout {
    /// No timeout.
    pub const OFF: Self = Self(None);

    /// A timeout of `duration` (a zero duration means no timeout).
    pub fn new(duration: Duration) -> Self {
        Self((!duration.is_zero()).then_some(duration))
    }

    /// The timeout, if one is set.
    pub fn duration(self) -> Option<Duration> {
        self.0
    }
}

impl fmt::Display for RequestTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(d) if d.as_millis() % 60_000 == 0 => write!(f, "{}min", d.as_millis() / 60_000),
            Some(d) if d.as_millis() % 1000 == 0 => write!(f, "{}s", d.as_millis() / 1000),
            Some(d) => write!(f, "{}ms", d.as_millis()),
        }
    }
}

impl FromStr for RequestTimeout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let text = s.trim().to_ascii_lowercase();
        if text == "off" || text == "0" {
            return Ok(Self::OFF);
        }
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let number: u64 = number.parse().map_err(|_| {
            format!("'{s}' is not a duration: expected off or e.g. 500ms, 30s, 2min")
        })?;
        let millis = match unit.trim() {
            "ms" => Some(number),
            "s" => number.checked_mul(1000),
            "min" => number.checked_mul(60_000),
            _ => None,
        }
        .ok_or_else(|| format!("'{s}' is not a duration: expected off or e.g. 500ms, 30s, 2min"))?;
        Ok(Self::new(Duration::from_millis(millis)))
    }
}
