//! `prefetch.price_per_1000_requests`: what a store bills per request, for
//! the request cost a scan reports.

use std::fmt;
use std::str::FromStr;

/// Picodollars in a dollar: prices are kept as whole picodollars per
/// request, so that costs add up exactly.
const PICOS_PER_DOLLAR: u64 = 1_000_000_000_000;

/// The highest price accepted, in dollars per 1,000 requests: far above any
/// store's (S3 Standard charges $0.005 for 1,000 LISTs).
const MAX_DOLLARS_PER_1000: f64 = 1_000.0;

/// What a store charges per 1,000 requests, in dollars: the price the
/// request cost a scan reports (`prefetch_request_cost_nanodollars`) is
/// estimated at.
/// Each attempt counts — each retry and hedge included — as the store bills
/// them. The default is S3 Standard's for GETs, $0.0004 per 1,000.
///
/// Written as dollars, with or without a `$`:
///
/// ```
/// use datafusion_prefetch::RequestPrice;
///
/// let price: RequestPrice = "$0.0004".parse().unwrap();
/// assert_eq!(price, RequestPrice::default());
/// assert_eq!(price.cost_of(1_000_000), 0.4);
/// assert_eq!(price.to_string(), "$0.0004");
/// assert!("-1".parse::<RequestPrice>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestPrice {
    picos_per_request: u64,
}

impl RequestPrice {
    /// S3 Standard's price of GET requests: $0.0004 per 1,000.
    pub const S3_STANDARD_GET: Self = Self {
        picos_per_request: 400_000,
    };

    /// The price of one request, in picodollars (10⁻¹² dollars).
    pub fn picodollars_per_request(self) -> u64 {
        self.picos_per_request
    }

    /// What `requests` requests cost, in dollars.
    pub fn cost_of(self, requests: u64) -> f64 {
        dollars(self.picos_per_request.saturating_mul(requests))
    }
}

impl Default for RequestPrice {
    fn default() -> Self {
        Self::S3_STANDARD_GET
    }
}

/// `picos` picodollars in dollars.
pub(crate) fn dollars(picos: u64) -> f64 {
    picos as f64 / PICOS_PER_DOLLAR as f64
}

/// `picos` picodollars written as dollars, without trailing zeros: `$0.0004`.
fn format_dollars(picos: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let whole = picos / PICOS_PER_DOLLAR;
    let fraction = format!("{:012}", picos % PICOS_PER_DOLLAR);
    let fraction = fraction.trim_end_matches('0');
    match fraction {
        "" => write!(f, "${whole}"),
        digits => write!(f, "${whole}.{digits}"),
    }
}

impl fmt::Display for RequestPrice {
    /// The price per 1,000 requests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_dollars(self.picos_per_request * 1_000, f)
    }
}

impl FromStr for RequestPrice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let trimmed = s.trim();
        let number = trimmed.strip_prefix('$').unwrap_or(trimmed).trim();
        let per_1000 = number
            .parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && (0.0..=MAX_DOLLARS_PER_1000).contains(d))
            .ok_or_else(|| {
                format!(
                    "'{s}' is not a price: expected dollars per 1,000 requests from 0 to \
                     {MAX_DOLLARS_PER_1000}, e.g. 0.0004 (S3 Standard GETs) or $0.0004"
                )
            })?;
        // Whole picodollars per request: exact for prices given to 9 decimals.
        let picos = (per_1000 * (PICOS_PER_DOLLAR / 1_000) as f64).round() as u64;
        Ok(Self {
            picos_per_request: picos,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_read_and_print_as_dollars_per_1000_requests() {
        for (text, picos, shown) in [
            ("0.0004", 400_000, "$0.0004"),
            (" $0.005 ", 5_000_000, "$0.005"),
            ("0", 0, "$0"),
            ("1.5", 1_500_000_000, "$1.5"),
            ("0.000000001", 1, "$0.000000001"),
        ] {
            let price: RequestPrice = text.parse().unwrap();
            assert_eq!(price.picodollars_per_request(), picos, "{text}");
            assert_eq!(price.to_string(), shown, "{text}");
            assert_eq!(price.to_string().parse::<RequestPrice>(), Ok(price));
        }
        for bad in ["", "-0.1", "free", "NaN", "inf", "1001", "$"] {
            let error = bad.parse::<RequestPrice>().unwrap_err();
            assert!(
                error.contains("dollars per 1,000 requests"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn costs_add_up_exactly() {
        let price = RequestPrice::default();
        assert_eq!(price.cost_of(22_980), 0.009192);
        assert_eq!(price.cost_of(0), 0.0);
        assert_eq!(RequestPrice::default().to_string(), "$0.0004");
    }
}
