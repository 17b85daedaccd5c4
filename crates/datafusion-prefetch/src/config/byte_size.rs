//! Human-readable byte sizes for `prefetch.*` settings (`16MiB`, `512KiB`, `1GB`, `1048576`).

use std::fmt;
use std::str::FromStr;

/// A number of bytes, parsed from and displayed as a human-readable size.
///
/// Binary units (`KiB`, `MiB`, `GiB`, `TiB`) are powers of 1024, decimal units
/// (`KB`, `MB`, `GB`, `TB`) powers of 1000, and a bare number is bytes. Units are
/// case-insensitive, a fractional value is accepted when it names a whole number
/// of bytes (`1.5MiB`), and negative values are refused.
///
/// ```
/// use datafusion_prefetch::ByteSize;
/// assert_eq!("16MiB".parse::<ByteSize>().unwrap().as_u64(), 16 * 1024 * 1024);
/// assert_eq!("1GB".parse::<ByteSize>().unwrap().as_u64(), 1_000_000_000);
/// assert_eq!(ByteSize::new(512 * 1024).to_string(), "512KiB");
/// assert!("-1".parse::<ByteSize>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(u64);

impl ByteSize {
    /// `n` bytes.
    pub const fn new(bytes: u64) -> Self {
        Self(bytes)
    }

    /// `n` mebibytes.
    pub const fn mib(n: u64) -> Self {
        Self(n * 1024 * 1024)
    }

    /// The number of bytes.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The number of bytes as `usize` (saturating on 32-bit targets).
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// Why a size could not be parsed; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSizeError(String);

impl fmt::Display for ByteSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ByteSizeError {}

const ACCEPTED: &str = "a non-negative size such as 16MiB, 512KiB, 1GB or a plain number of bytes";

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let fail = || ByteSizeError(format!("invalid size '{s}': expected {ACCEPTED}"));
        if text.is_empty() || text.starts_with('-') {
            return Err(fail());
        }
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return Err(fail()),
        };
        if number.is_empty() {
            return Err(fail());
        }
        if let Ok(whole) = number.parse::<u64>() {
            return whole.checked_mul(multiplier).map(Self).ok_or_else(fail);
        }
        // Fractions only make sense with a unit that turns them into whole bytes.
        let value: f64 = number.parse().map_err(|_| fail())?;
        let bytes = value * multiplier as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
            return Err(fail());
        }
        Ok(Self(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        for (unit, name) in UNITS {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return write!(f, "{}{name}", self.0 / unit);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<u64, ByteSizeError> {
        s.parse::<ByteSize>().map(ByteSize::as_u64)
    }

    #[test]
    fn parses_binary_decimal_and_plain_sizes() {
        assert_eq!(parse("16MiB"), Ok(16 << 20));
        assert_eq!(parse("512KiB"), Ok(512 << 10));
        assert_eq!(parse("1GB"), Ok(1_000_000_000));
        assert_eq!(parse("1gib"), Ok(1 << 30));
        assert_eq!(parse(" 4096 "), Ok(4096));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse("10 MB"), Ok(10_000_000));
    }

    #[test]
    fn refuses_negative_fractional_bytes_and_garbage() {
        for bad in [
            "-1",
            "-1MiB",
            "",
            "MiB",
            "1.5",
            "abc",
            "12XB",
            "1..2MiB",
            "99999999999TiB",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("16MiB"), "{bad}: {err}");
        }
    }

    #[test]
    fn displays_the_largest_exact_unit() {
        assert_eq!(ByteSize::mib(16).to_string(), "16MiB");
        assert_eq!(ByteSize::new(1 << 30).to_string(), "1GiB");
        assert_eq!(ByteSize::new(1_000_000_000).to_string(), "1000000000");
        assert_eq!(ByteSize::new(1536).to_string(), "1536");
        assert_eq!(ByteSize::new(0).to_string(), "0");
        for s in ["16MiB", "512KiB", "1GB", "12345"] {
            let size: ByteSize = s.parse().unwrap();
            assert_eq!(size.to_string().parse::<ByteSize>().unwrap(), size);
        }
    }
}
