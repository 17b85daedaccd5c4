//! First-byte latency models and their sampling.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

/// How long a simulated request waits before its first byte (or, for LIST,
/// before its response) arrives.
///
/// Every draw comes from a caller-supplied RNG so that a
/// [`SimulatedStore`](crate::SimulatedStore) seeded with
/// [`SimulatedStoreConfig::seed`](crate::SimulatedStoreConfig::seed) replays
/// the same sequence of delays run after run.
///
/// The textual form (see the [`FromStr`] and [`Display`](fmt::Display)
/// impls) is meant for command-line flags:
///
/// | text                    | model                          |
/// |-------------------------|--------------------------------|
/// | `none`                  | [`LatencyModel::None`]         |
/// | `fixed:100`, `fixed:2.5`| [`LatencyModel::Fixed`] (ms)   |
/// | `50ms`, `1.5s`, `800us` | [`LatencyModel::Fixed`]        |
/// | `s3`                    | [`LatencyModel::S3`]           |
/// | `s3-list`               | [`LatencyModel::S3List`]       |
///
/// ```
/// use std::time::Duration;
/// use datafusion_prefetch_simstore::LatencyModel;
///
/// assert_eq!("fixed:100".parse::<LatencyModel>().unwrap(), LatencyModel::Fixed(Duration::from_millis(100)));
/// assert_eq!("50ms".parse::<LatencyModel>().unwrap(), LatencyModel::Fixed(Duration::from_millis(50)));
/// assert_eq!("s3".parse::<LatencyModel>().unwrap(), LatencyModel::S3);
/// assert!("fast".parse::<LatencyModel>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatencyModel {
    /// No delay at all.
    #[default]
    None,
    /// The same delay for every request.
    Fixed(Duration),
    /// Time-to-first-byte of an S3 GET from within the same region:
    /// P50 ≈ 32 ms, P90 ≈ 110 ms, P99 ≈ 200 ms.
    ///
    /// # The fit
    ///
    /// A plain log-normal cannot hit all three targets: with
    /// `mu = ln(32 ms)` and `sigma = ln(110/32) / z(0.90) ≈ 0.963` (so that
    /// P50 and P90 are exact) its P99 is ≈ 301 ms, a tail far heavier than
    /// S3's. The model is therefore defined through its quantile function,
    /// a log-normal whose log-space slope changes at P90:
    ///
    /// ```text
    /// z ~ Normal(0, 1)
    /// ln(t / 32 ms) = 0.963 * z                        for z <= z(0.90)
    ///               = ln(110/32) + 0.572 * (z - z(0.90)) for z >  z(0.90)
    /// ```
    ///
    /// where `0.572 = ln(200/110) / (z(0.99) - z(0.90))`. P50, P90 and P99
    /// are exact by construction; below P90 the distribution is exactly the
    /// log-normal above. Draws are finally clamped to `[5 ms, 1 s]`: a GET
    /// never completes a round trip in under a few milliseconds, and the cap
    /// keeps a one-in-ten-million draw from stalling a benchmark (it only
    /// affects draws beyond P99.99999). Draws are rounded to whole
    /// milliseconds.
    S3,
    /// Latency of an S3 LIST page: the [`S3`](Self::S3) shape scaled by
    /// 65/32, i.e. P50 ≈ 65 ms, P90 ≈ 223 ms, P99 ≈ 406 ms (LIST requests
    /// do more server-side work than a GET's first byte).
    S3List,
}

/// z-scores of the 90th and 99th percentiles of the standard normal.
const Z_P90: f64 = 1.281_551_565_544_600_5;
const Z_P99: f64 = 2.326_347_874_040_840_8;

/// Anchors of the S3 GET fit, in milliseconds (see [`LatencyModel::S3`]).
const S3_P50_MS: f64 = 32.0;
const S3_P90_MS: f64 = 110.0;
const S3_P99_MS: f64 = 200.0;
const S3_FLOOR_MS: f64 = 5.0;
const S3_CAP_MS: f64 = 1_000.0;

/// LIST is modelled as the GET shape stretched so its median is 65 ms.
const S3_LIST_SCALE: f64 = 65.0 / S3_P50_MS;

impl LatencyModel {
    /// Draws one delay from this model.
    ///
    /// Random models return whole milliseconds, the resolution of tokio's
    /// timer. A sub-millisecond [`Fixed`](Self::Fixed) delay is returned as
    /// is, but tokio will round the actual sleep up to the next millisecond.
    ///
    /// [`None`](Self::None) and [`Fixed`](Self::Fixed) do not touch `rng`,
    /// so switching models does not shift the random sequence seen by other
    /// consumers of the same RNG.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match self {
            Self::None => Duration::ZERO,
            Self::Fixed(d) => *d,
            // Whole milliseconds because tokio's timer cannot sleep any finer:
            // rounding here keeps the logged latency equal to the delay
            // actually served.
            Self::S3 => millis(s3_quantile_ms(standard_normal(rng)).round()),
            Self::S3List => millis((S3_LIST_SCALE * s3_quantile_ms(standard_normal(rng))).round()),
        }
    }

    /// The least delay this model ever draws: a lower bound on one round
    /// trip through a store using it.
    pub fn minimum(&self) -> Duration {
        match self {
            Self::None => Duration::ZERO,
            Self::Fixed(d) => *d,
            Self::S3 => millis(S3_FLOOR_MS),
            Self::S3List => millis((S3_LIST_SCALE * S3_FLOOR_MS).round()),
        }
    }

    /// Returns `true` if this model never delays a request.
    pub fn is_zero(&self) -> bool {
        match self {
            Self::None => true,
            Self::Fixed(d) => d.is_zero(),
            Self::S3 | Self::S3List => false,
        }
    }
}

/// The S3 GET quantile function, mapping a standard-normal z to milliseconds.
fn s3_quantile_ms(z: f64) -> f64 {
    let body_sigma = (S3_P90_MS / S3_P50_MS).ln() / Z_P90;
    let tail_sigma = (S3_P99_MS / S3_P90_MS).ln() / (Z_P99 - Z_P90);
    let log_ratio = if z <= Z_P90 {
        body_sigma * z
    } else {
        (S3_P90_MS / S3_P50_MS).ln() + tail_sigma * (z - Z_P90)
    };
    (S3_P50_MS * log_ratio.exp()).clamp(S3_FLOOR_MS, S3_CAP_MS)
}

/// One standard-normal draw via Box–Muller.
///
/// Hand-rolled because it is a few lines and avoids pulling `rand_distr`
/// into every crate that depends on the simulator. Only the cosine branch is
/// used, so each draw consumes exactly two uniforms and the sequence of
/// delays depends only on the seed and the number of draws.
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // `random::<f64>()` is in [0, 1); flip it to (0, 1] so `ln` stays finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn millis(ms: f64) -> Duration {
    Duration::from_nanos((ms * 1e6).round() as u64)
}

impl fmt::Display for LatencyModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            // Milliseconds as the shortest decimal that parses back to the
            // same nanosecond count, so `to_string().parse()` round-trips.
            Self::Fixed(d) => write!(f, "fixed:{}", d.as_nanos() as f64 / 1e6),
            Self::S3 => f.write_str("s3"),
            Self::S3List => f.write_str("s3-list"),
        }
    }
}

/// Error returned when a string is not a valid [`LatencyModel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLatencyModelError {
    input: String,
    reason: String,
}

impl ParseLatencyModelError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        Self {
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ParseLatencyModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid latency model {:?}: {} (expected one of `none`, `s3`, `s3-list`, \
             `fixed:<ms>` such as `fixed:100`, or a duration such as `50ms`, `1.5s`, `800us`)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for ParseLatencyModelError {}

impl FromStr for LatencyModel {
    type Err = ParseLatencyModelError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim().to_ascii_lowercase();
        match s.as_str() {
            "" => Err(ParseLatencyModelError::new(input, "empty string")),
            "none" => Ok(Self::None),
            "s3" => Ok(Self::S3),
            "s3-list" | "s3_list" | "s3list" => Ok(Self::S3List),
            _ => {
                if let Some(rest) = s.strip_prefix("fixed:") {
                    // A bare number after `fixed:` is milliseconds; a unit is
                    // accepted too because people will type `fixed:100ms`.
                    let rest = rest.trim();
                    let d = match parse_number(rest) {
                        Some(ms) => checked_millis(input, ms)?,
                        None if rest.ends_with('s') => parse_duration(input, rest)?,
                        None => {
                            return Err(ParseLatencyModelError::new(
                                input,
                                format!("{rest:?} after `fixed:` is not a number"),
                            ));
                        }
                    };
                    Ok(Self::Fixed(d))
                } else {
                    parse_duration(input, &s).map(Self::Fixed)
                }
            }
        }
    }
}

/// Parses `<number><unit>` with unit `ms`, `s`, `us` or `µs`.
fn parse_duration(input: &str, s: &str) -> Result<Duration, ParseLatencyModelError> {
    let s = s.trim();
    // Check `ms`/`us` before `s`, which is a suffix of both.
    let (number, ms_per_unit) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else if parse_number(s).is_some() {
        return Err(ParseLatencyModelError::new(
            input,
            "a bare number needs a unit (`ms`, `s`, `us`) or the `fixed:` prefix",
        ));
    } else {
        return Err(ParseLatencyModelError::new(input, "unknown model"));
    };
    let value = parse_number(number).ok_or_else(|| {
        ParseLatencyModelError::new(input, format!("{:?} is not a number", number.trim()))
    })?;
    checked_millis(input, value * ms_per_unit)
}

fn parse_number(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok()
}

fn checked_millis(input: &str, ms: f64) -> Result<Duration, ParseLatencyModelError> {
    if !ms.is_finite() {
        return Err(ParseLatencyModelError::new(input, "duration is not finite"));
    }
    if ms < 0.0 {
        return Err(ParseLatencyModelError::new(input, "duration is negative"));
    }
    // One day is far beyond any sensible simulated latency and keeps the
    // nanosecond conversion well inside u64.
    if ms > 86_400_000.0 {
        return Err(ParseLatencyModelError::new(
            input,
            "duration exceeds one day",
        ));
    }
    Ok(millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// Nearest-rank percentile of sorted millisecond samples.
    fn percentile(sorted: &[f64], p: f64) -> f64 {
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn sorted_draws(model: LatencyModel, seed: u64, n: usize) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut v: Vec<f64> = (0..n)
            .map(|_| model.sample(&mut rng).as_secs_f64() * 1e3)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn assert_within(actual: f64, target: f64, tolerance: f64, what: &str) {
        let lo = target * (1.0 - tolerance);
        let hi = target * (1.0 + tolerance);
        assert!(
            (lo..=hi).contains(&actual),
            "{what}: {actual:.1} ms not within ±{:.0}% of {target} ms",
            tolerance * 100.0
        );
    }

    #[test]
    fn s3_percentiles_match_fit() {
        let v = sorted_draws(LatencyModel::S3, 0x5EED, 20_000);
        assert_within(percentile(&v, 0.50), 32.0, 0.15, "P50");
        assert_within(percentile(&v, 0.90), 110.0, 0.15, "P90");
        assert_within(percentile(&v, 0.99), 200.0, 0.15, "P99");
        assert!(v[0] >= S3_FLOOR_MS && *v.last().unwrap() <= S3_CAP_MS);
    }

    #[test]
    fn no_draw_is_below_the_minimum() {
        for model in [
            LatencyModel::S3,
            LatencyModel::S3List,
            LatencyModel::Fixed(Duration::from_millis(7)),
            LatencyModel::None,
        ] {
            let least = sorted_draws(model, 0x5EED, 20_000)[0];
            let minimum = model.minimum().as_secs_f64() * 1e3;
            assert!(
                least >= minimum,
                "{model}: drew {least} ms under {minimum} ms"
            );
        }
    }

    #[test]
    fn s3_list_percentiles_are_scaled() {
        let v = sorted_draws(LatencyModel::S3List, 0x5EED, 20_000);
        assert_within(percentile(&v, 0.50), 65.0, 0.15, "LIST P50");
        assert_within(
            percentile(&v, 0.99),
            200.0 * S3_LIST_SCALE,
            0.15,
            "LIST P99",
        );
    }

    #[test]
    fn s3_quantile_anchors_are_exact() {
        assert!((s3_quantile_ms(0.0) - 32.0).abs() < 1e-9);
        assert!((s3_quantile_ms(Z_P90) - 110.0).abs() < 1e-9);
        assert!((s3_quantile_ms(Z_P99) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn sampling_is_deterministic_per_seed() {
        let a = sorted_draws(LatencyModel::S3, 7, 100);
        let b = sorted_draws(LatencyModel::S3, 7, 100);
        let c = sorted_draws(LatencyModel::S3, 8, 100);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn fixed_and_none_do_not_consume_randomness() {
        let mut rng = StdRng::seed_from_u64(1);
        let d = Duration::from_millis(3);
        assert_eq!(LatencyModel::Fixed(d).sample(&mut rng), d);
        assert_eq!(LatencyModel::None.sample(&mut rng), Duration::ZERO);
        let after = rng.random::<u64>();
        assert_eq!(after, StdRng::seed_from_u64(1).random::<u64>());
    }

    #[test]
    fn parse_accepts_documented_forms() {
        let ms = |n| LatencyModel::Fixed(Duration::from_millis(n));
        assert_eq!("none".parse(), Ok(LatencyModel::None));
        assert_eq!(" S3 ".parse(), Ok(LatencyModel::S3));
        assert_eq!("s3-list".parse(), Ok(LatencyModel::S3List));
        assert_eq!("fixed:100".parse(), Ok(ms(100)));
        assert_eq!("fixed:100ms".parse(), Ok(ms(100)));
        assert_eq!("fixed:0".parse(), Ok(ms(0)));
        assert_eq!("50ms".parse(), Ok(ms(50)));
        assert_eq!("2s".parse(), Ok(ms(2000)));
        assert_eq!("1.5s".parse(), Ok(ms(1500)));
        assert_eq!(
            "800us".parse(),
            Ok(LatencyModel::Fixed(Duration::from_micros(800)))
        );
        assert_eq!(
            "fixed:2.5".parse(),
            Ok(LatencyModel::Fixed(Duration::from_micros(2500)))
        );
    }

    #[test]
    fn parse_rejects_garbage_with_clear_errors() {
        for (input, needle) in [
            ("", "empty"),
            ("fast", "unknown model"),
            ("100", "needs a unit"),
            ("fixed:", "not a number"),
            ("fixed:abc", "not a number"),
            ("fixed:-5", "negative"),
            ("-5ms", "negative"),
            ("fixed:inf", "not finite"),
            ("xms", "not a number"),
            ("1000000000s", "one day"),
        ] {
            let err = input.parse::<LatencyModel>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
            assert!(err.contains("fixed:<ms>"), "{input:?}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for model in [
            LatencyModel::None,
            LatencyModel::S3,
            LatencyModel::S3List,
            LatencyModel::Fixed(Duration::from_millis(100)),
            LatencyModel::Fixed(Duration::from_micros(2500)),
            LatencyModel::Fixed(Duration::from_nanos(123_456_789)),
        ] {
            assert_eq!(model.to_string().parse::<LatencyModel>(), Ok(model));
        }
        assert_eq!(
            LatencyModel::Fixed(Duration::from_millis(100)).to_string(),
            "fixed:100"
        );
    }
}
