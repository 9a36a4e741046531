//! Physical quantities as exact integer newtypes: `Bytes`, `Time` (picoseconds)
//! and `Bandwidth` (bytes per second), parsed from and printed as people write
//! them ("128MiB", "2.5us", "450GB/s"). SI prefixes are powers of 10, binary
//! prefixes (KiB, MiB, ...) powers of 2, everywhere. Knows nothing of hardware.

use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, Sub};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A unit string that could not be read, with what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {input:?} as {what}: {reason}; write it like {examples}")]
pub struct ParseUnitError {
    input: String,
    what: &'static str,
    reason: String,
    examples: &'static str,
}

const BYTES_EXAMPLES: &str = "\"8B\", \"4KiB\", \"128MiB\", \"4GiB\", \"1.5GB\" (KB/MB/GB/TB are 10^3, KiB/MiB/GiB/TiB 2^10)";
const TIME_EXAMPLES: &str = "\"500ps\", \"10ns\", \"2.5us\", \"1ms\", \"3s\"";
const BANDWIDTH_EXAMPLES: &str = "\"450GB/s\", \"55.3 GB/s\", \"64GiB/s\", \"1.8TB/s\"";

/// A non-negative decimal number read exactly: `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy)]
struct Decimal {
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    /// The number `text` writes, or why it is none.
    fn parse(text: &str) -> Result<Decimal, &'static str> {
        let (whole, frac) = match text.split_once('.') {
            Some((w, f)) => (w, f),
            None => (text, ""),
        };
        if (whole.is_empty() && frac.is_empty()) || !whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
            return Err("no number");
        }
        if frac.len() > 12 {
            return Err("more than 12 digits after the point");
        }
        let mut mantissa: u128 = 0;
        for c in whole.chars().chain(frac.chars()) {
            mantissa = mantissa.checked_mul(10).and_then(|m| m.checked_add(u128::from(c as u8 - b'0'))).ok_or("too large")?;
        }
        Ok(Decimal { mantissa, scale: frac.len() as u32 })
    }

    /// `self * unit`, rounded to the nearest integer; `None` on overflow.
    fn times_rounded(self, unit: u128) -> Option<u128> {
        let denominator = 10u128.pow(self.scale);
        let numerator = self.mantissa.checked_mul(unit)?;
        Some((numerator + denominator / 2) / denominator)
    }

    /// `self * unit` when it is a whole number.
    fn times_exact(self, unit: u128) -> Option<u128> {
        let denominator = 10u128.pow(self.scale);
        let numerator = self.mantissa.checked_mul(unit)?;
        (numerator % denominator == 0).then_some(numerator / denominator)
    }
}

/// "1e30GiB" is a number in scientific notation, not a unit "e30GiB", and
/// "-1us" a negative quantity, not a unit "-1us": both are refused as such.
fn refuse_notation(text: &str, suffix: &str) -> Result<(), String> {
    if text.trim_start().starts_with('-') {
        return Err("must not be negative".into());
    }
    let mut chars = suffix.chars();
    let exponent = matches!(chars.next(), Some('e' | 'E')) && chars.next().is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+');
    if exponent { Err("no exponents (1e9): write the number out with a unit prefix instead".into()) } else { Ok(()) }
}

/// Splits "12.5 GiB" into ("12.5", "GiB").
fn split_number(text: &str) -> (&str, &str) {
    let text = text.trim();
    let end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    (&text[..end], text[end..].trim())
}

fn byte_unit(suffix: &str) -> Option<u128> {
    Some(match suffix {
        "B" | "" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    })
}

/// An amount of data in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    pub const ZERO: Bytes = Bytes(0);
    pub const fn kib(n: u64) -> Bytes {
        Bytes(n << 10)
    }
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n << 20)
    }
    pub const fn gib(n: u64) -> Bytes {
        Bytes(n << 30)
    }
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
    /// Splits `self` into `parts` pieces whose sizes differ by at most one
    /// byte and add up to `self` exactly (the larger pieces first).
    pub fn split_even(self, parts: u64) -> impl Iterator<Item = Bytes> {
        (0..parts).map(move |i| self.even_part(parts, i))
    }
    /// Piece `index` of these bytes cut into whole pieces of `piece` bytes
    /// and the remainder last, as NCCL's loops cut a channel's data into
    /// chunks (empty past the end).
    pub fn chunk_part(self, piece: Bytes, index: u64) -> Bytes {
        assert!(piece.0 > 0, "cannot cut bytes into empty pieces");
        Bytes(self.0.saturating_sub(index.saturating_mul(piece.0)).min(piece.0))
    }
    /// Piece `index` of [`Bytes::split_even`] into `parts`, on its own.
    pub fn even_part(self, parts: u64, index: u64) -> Bytes {
        assert!(parts > 0, "cannot split bytes into zero parts");
        assert!(index < parts, "piece {index} of {parts}");
        Bytes(self.0 / parts + u64::from(index < self.0 % parts))
    }
    /// Human-readable with a decimal fraction ("1.50 GiB"), for tables.
    pub fn human(self) -> String {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < UNITS.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 { format!("{} B", self.0) } else { format!("{value:.2} {}", UNITS[unit]) }
    }
}

impl FromStr for Bytes {
    type Err = ParseUnitError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason: &str| ParseUnitError {
            input: text.to_string(),
            what: "a size in bytes",
            reason: reason.to_string(),
            examples: BYTES_EXAMPLES,
        };
        let (number, suffix) = split_number(text);
        refuse_notation(text, suffix).map_err(|reason| error(&reason))?;
        let unit = byte_unit(suffix).ok_or_else(|| error(&format!("unknown unit {suffix:?}")))?;
        let decimal = Decimal::parse(number).map_err(error)?;
        let value = decimal.times_exact(unit).ok_or_else(|| error("not a whole number of bytes"))?;
        u64::try_from(value).map(Bytes).map_err(|_| error("too large"))
    }
}

/// Prints the shortest exact form: "128MiB", "1000B" stays "1000B".
impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{name}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, other: Bytes) -> Bytes {
        Bytes(self.0 + other.0)
    }
}
impl AddAssign for Bytes {
    fn add_assign(&mut self, other: Bytes) {
        self.0 += other.0;
    }
}
impl Sub for Bytes {
    type Output = Bytes;
    fn sub(self, other: Bytes) -> Bytes {
        Bytes(self.0 - other.0)
    }
}
impl Mul<u64> for Bytes {
    type Output = Bytes;
    fn mul(self, factor: u64) -> Bytes {
        Bytes(self.0 * factor)
    }
}
impl std::iter::Sum for Bytes {
    fn sum<I: Iterator<Item = Bytes>>(iter: I) -> Bytes {
        Bytes(iter.map(|b| b.0).sum())
    }
}

const PS_PER_NS: u64 = 1_000;
const PS_PER_US: u64 = 1_000_000;
const PS_PER_MS: u64 = 1_000_000_000;
const PS_PER_S: u64 = 1_000_000_000_000;

/// A point in simulated time or a span of it, in integer picoseconds.
///
/// The clock ends at [`Time::END`], about 213 days: sums and products that
/// would pass it stop there instead of wrapping around, so that a time
/// beyond the clock's range is never mistaken for a short one. A result
/// that reached the end is not a time: callers refuse it
/// ([`Time::is_end`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    /// The last instant the clock can hold (u64 picoseconds, about 213 days).
    pub const END: Time = Time(u64::MAX);

    /// Whether this time reached the end of the clock: the real time is
    /// at least that long and unknown.
    pub fn is_end(self) -> bool {
        self == Time::END
    }
    pub const fn from_us(us: u64) -> Time {
        Time(us * PS_PER_US)
    }
    /// Microseconds as a float, rounded to the nearest picosecond on input.
    pub fn from_us_f64(us: f64) -> Time {
        assert!(us.is_finite() && us >= 0.0, "time must be finite and non-negative, got {us} us");
        Time((us * PS_PER_US as f64).round() as u64)
    }
    pub fn as_us(self) -> f64 {
        self.0 as f64 / PS_PER_US as f64
    }
    pub fn as_ms(self) -> f64 {
        self.0 as f64 / PS_PER_MS as f64
    }
    pub fn as_secs(self) -> f64 {
        self.0 as f64 / PS_PER_S as f64
    }
}

impl FromStr for Time {
    type Err = ParseUnitError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error =
            |reason: &str| ParseUnitError { input: text.to_string(), what: "a time", reason: reason.to_string(), examples: TIME_EXAMPLES };
        let (number, suffix) = split_number(text);
        refuse_notation(text, suffix).map_err(|reason| error(&reason))?;
        let unit: u128 = match suffix {
            "ps" => 1,
            "ns" => PS_PER_NS.into(),
            "us" | "µs" => PS_PER_US.into(),
            "ms" => PS_PER_MS.into(),
            "s" => PS_PER_S.into(),
            "" => return Err(error("no unit")),
            other => return Err(error(&format!("unknown unit {other:?}"))),
        };
        let decimal = Decimal::parse(number).map_err(error)?;
        let value = decimal.times_rounded(unit).ok_or_else(|| error("too large"))?;
        u64::try_from(value).map(Time).map_err(|_| error("too large"))
    }
}

/// Prints in the largest unit that keeps the value at least 1, with up to
/// three decimals and no trailing zeros: "2.5us", "10ns", "1.234ms".
impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, scale) = match self.0 {
            t if t >= PS_PER_S => ("s", PS_PER_S),
            t if t >= PS_PER_MS => ("ms", PS_PER_MS),
            t if t >= PS_PER_US => ("us", PS_PER_US),
            t if t >= PS_PER_NS => ("ns", PS_PER_NS),
            _ => ("ps", 1),
        };
        write!(f, "{}{unit}", trim_decimals(self.0 as f64 / scale as f64))
    }
}

fn trim_decimals(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

impl Add for Time {
    type Output = Time;
    /// Saturates at [`Time::END`].
    fn add(self, other: Time) -> Time {
        Time(self.0.saturating_add(other.0))
    }
}
impl AddAssign for Time {
    fn add_assign(&mut self, other: Time) {
        *self = *self + other;
    }
}
impl Sub for Time {
    type Output = Time;
    fn sub(self, other: Time) -> Time {
        Time(self.0 - other.0)
    }
}
impl Mul<u64> for Time {
    type Output = Time;
    /// Saturates at [`Time::END`].
    fn mul(self, factor: u64) -> Time {
        Time(self.0.saturating_mul(factor))
    }
}

/// A data rate in bytes per second (one direction of a link, unless said).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth(pub u64);

impl Bandwidth {
    pub const fn gbps(gb_per_s: u64) -> Bandwidth {
        Bandwidth(gb_per_s * 1_000_000_000)
    }
    /// From GB/s (10^9 bytes per second) as a float.
    pub fn from_gbps_f64(gb_per_s: f64) -> Bandwidth {
        assert!(gb_per_s.is_finite() && gb_per_s >= 0.0, "bandwidth must be finite and non-negative, got {gb_per_s} GB/s");
        Bandwidth((gb_per_s * 1e9).round() as u64)
    }
    /// From bytes per second as a float (a rate the model computed); never
    /// zero, so that a transfer at it always ends.
    pub fn from_bytes_per_sec_f64(bytes_per_sec: f64) -> Bandwidth {
        assert!(bytes_per_sec.is_finite() && bytes_per_sec >= 0.0, "bandwidth must be finite and non-negative, got {bytes_per_sec} B/s");
        Bandwidth((bytes_per_sec.round() as u64).max(1))
    }
    pub fn as_gbps(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64
    }
    /// `self * factor`, for efficiencies and link counts.
    pub fn scaled(self, factor: f64) -> Bandwidth {
        assert!(factor.is_finite() && factor >= 0.0, "bandwidth factor must be finite and non-negative, got {factor}");
        Bandwidth((self.0 as f64 * factor).round() as u64)
    }
}

impl FromStr for Bandwidth {
    type Err = ParseUnitError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason: &str| ParseUnitError {
            input: text.to_string(),
            what: "a bandwidth",
            reason: reason.to_string(),
            examples: BANDWIDTH_EXAMPLES,
        };
        let (number, suffix) = split_number(text);
        refuse_notation(text, suffix).map_err(|reason| error(&reason))?;
        let per_second = suffix.strip_suffix("/s").ok_or_else(|| error("missing \"/s\""))?.trim();
        let unit = match per_second {
            "" => None,
            s => byte_unit(s),
        }
        .ok_or_else(|| error(&format!("unknown unit {per_second:?}")))?;
        let decimal = Decimal::parse(number).map_err(error)?;
        let value = decimal.times_rounded(unit).ok_or_else(|| error("too large"))?;
        u64::try_from(value).map(Bandwidth).map_err(|_| error("too large"))
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, scale) = match self.0 {
            b if b >= 1_000_000_000_000 => ("TB/s", 1e12),
            b if b >= 1_000_000_000 => ("GB/s", 1e9),
            b if b >= 1_000_000 => ("MB/s", 1e6),
            _ => ("B/s", 1.0),
        };
        write!(f, "{}{unit}", trim_decimals(self.0 as f64 / scale))
    }
}

/// Time to move `bytes` at `bandwidth`, rounded up to the next picosecond:
/// never zero for a non-zero amount.
impl Div<Bandwidth> for Bytes {
    type Output = Time;
    fn div(self, bandwidth: Bandwidth) -> Time {
        assert!(bandwidth.0 > 0, "division of {self} by a zero bandwidth");
        let numerator = u128::from(self.0) * u128::from(PS_PER_S);
        let ps = numerator.div_ceil(u128::from(bandwidth.0));
        Time(u64::try_from(ps).unwrap_or(u64::MAX))
    }
}

/// Average rate of moving `bytes` in `time`.
impl Div<Time> for Bytes {
    type Output = Bandwidth;
    fn div(self, time: Time) -> Bandwidth {
        assert!(time.0 > 0, "rate of {self} over zero time");
        let rate = u128::from(self.0) * u128::from(PS_PER_S) / u128::from(time.0);
        Bandwidth(u64::try_from(rate).unwrap_or(u64::MAX))
    }
}

macro_rules! serde_as_text {
    ($type:ty, $expecting:expr) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                /// Takes only a string, and says what one looks like when given a bare number.
                struct Text;
                impl serde::de::Visitor<'_> for Text {
                    type Value = $type;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        write!(f, "a string with a unit, such as {}", $expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<$type, E> {
                        text.parse().map_err(E::custom)
                    }
                }
                deserializer.deserialize_str(Text)
            }
        }
    };
}
serde_as_text!(Bytes, BYTES_EXAMPLES);
serde_as_text!(Time, TIME_EXAMPLES);
serde_as_text!(Bandwidth, BANDWIDTH_EXAMPLES);

/// Parses a list of sizes: "1MiB,16MiB", a range doubling each step
/// ("8B..4GiB"), or a range with a factor ("1KiB..1GiB:x4").
pub fn parse_sizes(text: &str) -> Result<Vec<Bytes>, String> {
    let usage = "write sizes as a list (\"1MiB,16MiB\"), a doubling range (\"8B..4GiB\") or a range with a factor (\"1KiB..1GiB:x4\")";
    let mut sizes = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("{text:?} has an empty item (two commas, or a comma at an end); {usage}"));
        }
        let Some((low, rest)) = part.split_once("..") else {
            sizes.push(part.parse::<Bytes>().map_err(|e| e.to_string())?);
            continue;
        };
        let (high, factor) = match rest.split_once(':') {
            Some((high, factor)) => {
                let factor = factor
                    .trim()
                    .strip_prefix('x')
                    .and_then(|f| f.parse::<u64>().ok())
                    .filter(|&f| f >= 2)
                    .ok_or_else(|| format!("bad step {factor:?} in {part:?}: write it as x2, x4, ...; {usage}"))?;
                (high, factor)
            }
            None => (rest, 2),
        };
        let (low, high) =
            (low.trim().parse::<Bytes>().map_err(|e| e.to_string())?, high.trim().parse::<Bytes>().map_err(|e| e.to_string())?);
        if low.0 == 0 || low > high {
            return Err(format!("range {part:?} must start above zero and not end below its start; {usage}"));
        }
        let mut size = low.0;
        while size <= high.0 {
            sizes.push(Bytes(size));
            size = match size.checked_mul(factor) {
                Some(next) => next,
                None => break,
            };
        }
    }
    if sizes.is_empty() {
        return Err(format!("no sizes in {text:?}; {usage}"));
    }
    // A size twice is a typo, and would print one row twice.
    if let Some(twice) = crate::first_repeat(&sizes) {
        return Err(format!("{} appears twice in {text:?}: list each size once; {usage}", sizes[twice]));
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_parse_binary_and_decimal_prefixes() {
        assert_eq!("128MiB".parse::<Bytes>().unwrap(), Bytes(128 << 20));
        assert_eq!("4GiB".parse::<Bytes>().unwrap(), Bytes(4 << 30));
        assert_eq!("8B".parse::<Bytes>().unwrap(), Bytes(8));
        assert_eq!("1.5GB".parse::<Bytes>().unwrap(), Bytes(1_500_000_000));
        assert_eq!("2 KiB".parse::<Bytes>().unwrap(), Bytes(2048));
        assert_eq!("1000".parse::<Bytes>().unwrap(), Bytes(1000));
    }

    #[test]
    fn bad_units_say_what_is_accepted() {
        let error = "12 parsecs".parse::<Bytes>().unwrap_err().to_string();
        assert!(error.contains("parsecs") && error.contains("MiB"), "{error}");
        assert!("0.5B".parse::<Bytes>().is_err());
        assert!("10".parse::<Time>().unwrap_err().to_string().contains("no unit"));
        assert!("450GB".parse::<Bandwidth>().unwrap_err().to_string().contains("/s"));
        // A number with too many decimals is one, said so.
        assert!("6.6091530660167495ms".parse::<Time>().unwrap_err().to_string().contains("more than 12 digits after the point"));
        assert!("ms".parse::<Time>().unwrap_err().to_string().contains("no number"));
        assert_eq!("6.609153066016ms".parse::<Time>().unwrap(), Time(6_609_153_066));
    }

    #[test]
    fn bytes_print_in_the_shortest_exact_form() {
        assert_eq!(Bytes(128 << 20).to_string(), "128MiB");
        assert_eq!(Bytes(1000).to_string(), "1000B");
        assert_eq!(Bytes(1536).to_string(), "1536B");
        assert_eq!(Bytes(4 << 30).to_string(), "4GiB");
    }

    #[test]
    fn time_parses_and_prints() {
        assert_eq!("2.5us".parse::<Time>().unwrap(), Time(2_500_000));
        assert_eq!("10ns".parse::<Time>().unwrap(), Time(10_000));
        assert_eq!(Time(2_500_000).to_string(), "2.5us");
        assert_eq!(Time(1_234_000_000).to_string(), "1.234ms");
        assert_eq!(Time(7).to_string(), "7ps");
    }

    #[test]
    fn bandwidth_parses_and_prints() {
        assert_eq!("450GB/s".parse::<Bandwidth>().unwrap(), Bandwidth::gbps(450));
        assert_eq!("55.3 GB/s".parse::<Bandwidth>().unwrap(), Bandwidth(55_300_000_000));
        assert_eq!("1GiB/s".parse::<Bandwidth>().unwrap(), Bandwidth(1 << 30));
        assert_eq!(Bandwidth(26_562_000_000).to_string(), "26.562GB/s");
    }

    #[test]
    fn transfer_time_rounds_up_and_is_never_zero() {
        assert_eq!(Bytes(1) / Bandwidth::gbps(450), Time(3)); // 2.22 ps rounds up
        assert_eq!(Bytes(1_000_000_000) / Bandwidth::gbps(1), Time(PS_PER_S));
        assert_eq!(Bytes::gib(1) / (Bytes::gib(1) / Time(PS_PER_S)), Time(PS_PER_S));
    }

    #[test]
    fn times_past_the_end_of_the_clock_stay_there_instead_of_wrapping() {
        let slow = Bytes::mib(32) / Bandwidth(1);
        assert!(slow.is_end(), "32 MiB at 1 B/s is 388 days, past the clock's 213");
        assert!((slow + Time(5)).is_end());
        assert!((Time::from_us(1) * u64::MAX).is_end());
        let mut sum = Time(u64::MAX - 1);
        sum += Time(10);
        assert!(sum.is_end());
        assert!(!(Bytes::mib(32) / Bandwidth(1_000_000)).is_end());
    }

    #[test]
    fn exponents_and_signs_are_named_as_such() {
        for error in [
            "1e30GiB".parse::<Bytes>().unwrap_err().to_string(),
            "1e3us".parse::<Time>().unwrap_err().to_string(),
            "2E9B/s".parse::<Bandwidth>().unwrap_err().to_string(),
        ] {
            assert!(error.contains("no exponents") && !error.contains("unknown unit"), "{error}");
        }
        for error in [
            "-1us".parse::<Time>().unwrap_err().to_string(),
            " -4KiB".parse::<Bytes>().unwrap_err().to_string(),
            "-2GB/s".parse::<Bandwidth>().unwrap_err().to_string(),
        ] {
            assert!(error.contains("must not be negative") && !error.contains("unknown unit"), "{error}");
        }
    }

    #[test]
    fn split_even_conserves_bytes() {
        let parts: Vec<Bytes> = Bytes(10).split_even(3).collect();
        assert_eq!(parts, vec![Bytes(4), Bytes(3), Bytes(3)]);
        assert_eq!(parts.into_iter().sum::<Bytes>(), Bytes(10));
    }

    #[test]
    fn size_lists_and_ranges() {
        assert_eq!(parse_sizes("1MiB,16MiB").unwrap(), vec![Bytes::mib(1), Bytes::mib(16)]);
        assert_eq!(parse_sizes("8B..64B").unwrap(), vec![Bytes(8), Bytes(16), Bytes(32), Bytes(64)]);
        assert_eq!(parse_sizes("1KiB..64KiB:x4").unwrap(), vec![Bytes::kib(1), Bytes::kib(4), Bytes::kib(16), Bytes::kib(64)]);
        assert!(parse_sizes("1KiB..64KiB:x1").unwrap_err().contains("x2"));
        assert!(parse_sizes("4GiB..1GiB").is_err());
        assert!(parse_sizes("").is_err());
        assert!(parse_sizes("1MiB,,2MiB").unwrap_err().contains("empty item"));
        assert!(parse_sizes("1MiB,1MiB").unwrap_err().contains("1MiB appears twice"));
        assert!(parse_sizes("1MiB,1KiB..1MiB").unwrap_err().contains("1MiB appears twice"));
    }

    #[test]
    fn serde_round_trip_through_text() {
        let value: Bandwidth = serde_json::from_str("\"26.562GB/s\"").unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), "\"26.562GB/s\"");
    }
}
