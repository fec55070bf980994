//! What the simulated wire does to frames, and the text form used on
//! command lines.
//!
//! The text form of a [`FaultSpec`] is a comma-separated list of
//! `KEY=VALUE` items, every key optional:
//!
//! ```text
//! loss=0.1,reorder=0.05,dup=0.01,corrupt=0.001,seed=7,delay=10us,jitter=2us,rate=1gbit
//! ```
//!
//! | key | value |
//! |---|---|
//! | `loss`, `reorder`, `dup` (or `duplicate`), `corrupt` | probability per frame in `[0, 1]` |
//! | `seed` | `u64` seed of the fabric's random number generator (decimal or `0x` hex) |
//! | `delay`, `jitter` | duration: a decimal number and a unit `ns`, `us` (or `µs`), `ms`, `s`; `0` needs no unit |
//! | `rate` | bandwidth of each directed link: a decimal number and `bit`, `kbit`, `mbit`, `gbit`, `tbit` (bits per second, any case) or `B`, `KB`, `MB`, `GB`, `TB` (bytes per second), optionally followed by `/s`; prefixes are powers of 1000 |

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What the wire does to frames on one directed link.
///
/// Probabilities are per frame, in `[0, 1]`; a value at or below 0 never
/// happens and a value at or above 1 always does. The default profile is a
/// perfect wire: no loss, no delay, unlimited rate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultProfile {
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is delivered twice (the copy is subject to
    /// delay, jitter, reordering and corruption on its own).
    pub duplicate: f64,
    /// Probability that a frame is held back by an extra delay, so frames
    /// sent after it overtake it. This is the only source of reordering:
    /// jitter alone never reorders the frames of one directed link.
    pub reorder: f64,
    /// Probability that 1 to 3 distinct random bits of a frame are flipped.
    pub corrupt: f64,
    /// Fixed one-way latency added to every frame.
    pub delay: Duration,
    /// Extra latency drawn uniformly from `[0, jitter]` for every frame.
    pub jitter: Duration,
    /// Bandwidth of the directed link in bytes per second (`None`:
    /// unlimited). A frame occupies the wire for `len / rate`; frames queue
    /// behind each other.
    pub rate_bytes_per_sec: Option<u64>,
}

impl FaultProfile {
    /// A perfect wire (the same as [`Default`]).
    pub fn perfect() -> Self {
        Self::default()
    }

    /// True if this profile does nothing to frames.
    pub fn is_perfect(&self) -> bool {
        *self == Self::default()
    }
}

/// A [`FaultProfile`] plus the seed of the fabric's random number
/// generator: what a command line says about the simulated wire.
///
/// Parsed from and printed as the text form described in the
/// [module documentation](self); printing and parsing again gives an equal
/// value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSpec {
    /// What the wire does.
    pub profile: FaultProfile,
    /// Seed of the random number generator.
    pub seed: u64,
}

/// What is wrong with one item of a fault spec.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultSpecProblem {
    /// The key is not one of the known keys.
    UnknownKey,
    /// The item has no `=VALUE`.
    MissingValue,
    /// The key appears more than once.
    Repeated,
    /// The value (or its numeric part) is not a number.
    NotANumber(String),
    /// A probability outside `[0, 1]`.
    ProbabilityOutOfRange(f64),
    /// The unit of a duration or rate is not known.
    UnknownUnit(String),
    /// A duration or rate without a unit.
    MissingUnit,
    /// A number that is too large, not a whole number of nanoseconds or
    /// bytes per second, or a rate of zero.
    BadMagnitude(String),
}

impl fmt::Display for FaultSpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultSpecProblem::UnknownKey => write!(
                f,
                "unknown key (expected loss, reorder, dup, corrupt, seed, delay, jitter or rate)"
            ),
            FaultSpecProblem::MissingValue => write!(f, "missing value (expected KEY=VALUE)"),
            FaultSpecProblem::Repeated => write!(f, "given more than once"),
            FaultSpecProblem::NotANumber(v) => write!(f, "{v:?} is not a number"),
            FaultSpecProblem::ProbabilityOutOfRange(p) => {
                write!(f, "probability {p} is outside [0, 1]")
            }
            FaultSpecProblem::UnknownUnit(u) => write!(f, "unknown unit {u:?}"),
            FaultSpecProblem::MissingUnit => write!(f, "missing unit"),
            FaultSpecProblem::BadMagnitude(why) => write!(f, "{why}"),
        }
    }
}

/// Error from parsing a [`FaultSpec`]: which key, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("bad fault spec item {key:?}: {problem}")]
pub struct FaultSpecError {
    /// The key of the offending item (the whole item if it has no `=`).
    pub key: String,
    /// What is wrong.
    pub problem: FaultSpecProblem,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A non-negative decimal number `digits[.digits]`, kept exact as
/// `mantissa / 10^scale`.
struct Decimal {
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let (int, frac) = match text.split_once('.') {
            Some((i, f)) => (i, f),
            None => (text, ""),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // More than 30 fractional digits cannot matter and would overflow.
        if frac.len() > 30 {
            return None;
        }
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(u128::from(b - b'0'))?;
        }
        Some(Decimal {
            mantissa,
            // Bounded by 30 above.
            scale: u32::try_from(frac.len()).ok()?,
        })
    }

    /// `self * factor / divisor`, if it is a whole number that fits in u128.
    fn times_exact(&self, factor: u128, divisor: u128) -> Result<u128, &'static str> {
        let num = self
            .mantissa
            .checked_mul(factor)
            .ok_or("value is too large")?;
        let den = 10u128
            .checked_pow(self.scale)
            .and_then(|p| p.checked_mul(divisor))
            .ok_or("too many decimal places")?;
        if !num.is_multiple_of(den) {
            return Err("value is not a whole number of the base unit");
        }
        Ok(num / den)
    }
}

/// Splits `12.5us` into `("12.5", "us")`.
fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

fn parse_probability(key: &str, value: &str) -> Result<f64, FaultSpecError> {
    let err = |problem| FaultSpecError {
        key: key.to_string(),
        problem,
    };
    let p: f64 = value
        .parse()
        .map_err(|_| err(FaultSpecProblem::NotANumber(value.to_string())))?;
    if !p.is_finite() {
        return Err(err(FaultSpecProblem::NotANumber(value.to_string())));
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(err(FaultSpecProblem::ProbabilityOutOfRange(p)));
    }
    Ok(p)
}

fn parse_seed(key: &str, value: &str) -> Result<u64, FaultSpecError> {
    let parsed = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    parsed.map_err(|_| FaultSpecError {
        key: key.to_string(),
        problem: FaultSpecProblem::NotANumber(value.to_string()),
    })
}

fn parse_duration(key: &str, value: &str) -> Result<Duration, FaultSpecError> {
    let err = |problem| FaultSpecError {
        key: key.to_string(),
        problem,
    };
    let (number, unit) = split_number(value);
    let dec =
        Decimal::parse(number).ok_or_else(|| err(FaultSpecProblem::NotANumber(value.into())))?;
    let per_unit: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "" if dec.mantissa == 0 => 1,
        "" => return Err(err(FaultSpecProblem::MissingUnit)),
        other => return Err(err(FaultSpecProblem::UnknownUnit(other.into()))),
    };
    let nanos = dec
        .times_exact(per_unit, 1)
        .map_err(|why| err(FaultSpecProblem::BadMagnitude(why.into())))?;
    let nanos = u64::try_from(nanos)
        .map_err(|_| err(FaultSpecProblem::BadMagnitude("value is too large".into())))?;
    Ok(Duration::from_nanos(nanos))
}

fn parse_rate(key: &str, value: &str) -> Result<u64, FaultSpecError> {
    let err = |problem| FaultSpecError {
        key: key.to_string(),
        problem,
    };
    let (number, unit) = split_number(value);
    let dec =
        Decimal::parse(number).ok_or_else(|| err(FaultSpecProblem::NotANumber(value.into())))?;
    let unit = unit.strip_suffix("/s").unwrap_or(unit);
    if unit.is_empty() {
        return Err(err(FaultSpecProblem::MissingUnit));
    }
    let prefix = |p: &str| -> Option<u128> {
        match p {
            "" => Some(1),
            "k" | "K" => Some(1_000),
            "m" | "M" => Some(1_000_000),
            "g" | "G" => Some(1_000_000_000),
            "t" | "T" => Some(1_000_000_000_000),
            _ => None,
        }
    };
    let lower = unit.to_ascii_lowercase();
    // (factor, divisor) from the number to bytes per second.
    let (factor, divisor) = if let Some(p) = lower.strip_suffix("bit") {
        (prefix(p), 8)
    } else if let Some(p) = unit.strip_suffix('B') {
        (prefix(p), 1)
    } else {
        (None, 1)
    };
    let factor = factor.ok_or_else(|| err(FaultSpecProblem::UnknownUnit(unit.into())))?;
    let bytes = dec.times_exact(factor, divisor).map_err(|_| {
        err(FaultSpecProblem::BadMagnitude(
            "rate must be a whole number of bytes per second".into(),
        ))
    })?;
    if bytes == 0 {
        return Err(err(FaultSpecProblem::BadMagnitude(
            "rate must be positive".into(),
        )));
    }
    u64::try_from(bytes)
        .map_err(|_| err(FaultSpecProblem::BadMagnitude("rate is too large".into())))
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KEYS: [&str; 8] = [
            "loss", "reorder", "dup", "corrupt", "seed", "delay", "jitter", "rate",
        ];
        let mut spec = FaultSpec::default();
        let mut seen = [false; KEYS.len()];
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(FaultSpecError {
                    key: item.to_string(),
                    problem: FaultSpecProblem::MissingValue,
                });
            };
            let (key, value) = (key.trim(), value.trim());
            let canonical = if key == "duplicate" { "dup" } else { key };
            let Some(index) = KEYS.iter().position(|k| *k == canonical) else {
                return Err(FaultSpecError {
                    key: key.to_string(),
                    problem: FaultSpecProblem::UnknownKey,
                });
            };
            if std::mem::replace(&mut seen[index], true) {
                return Err(FaultSpecError {
                    key: key.to_string(),
                    problem: FaultSpecProblem::Repeated,
                });
            }
            if value.is_empty() {
                return Err(FaultSpecError {
                    key: key.to_string(),
                    problem: FaultSpecProblem::MissingValue,
                });
            }
            let p = &mut spec.profile;
            match canonical {
                "loss" => p.loss = parse_probability(key, value)?,
                "reorder" => p.reorder = parse_probability(key, value)?,
                "dup" => p.duplicate = parse_probability(key, value)?,
                "corrupt" => p.corrupt = parse_probability(key, value)?,
                "seed" => spec.seed = parse_seed(key, value)?,
                "delay" => p.delay = parse_duration(key, value)?,
                "jitter" => p.jitter = parse_duration(key, value)?,
                _ => p.rate_bytes_per_sec = Some(parse_rate(key, value)?),
            }
        }
        Ok(spec)
    }
}

/// A duration in the largest unit that shows it exactly.
struct DurationText(Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        let units: [(u128, &str); 3] = [(NANOS_PER_SEC, "s"), (1_000_000, "ms"), (1_000, "us")];
        for (per, name) in units {
            if ns != 0 && ns.is_multiple_of(per) {
                return write!(f, "{}{name}", ns / per);
            }
        }
        write!(f, "{ns}ns")
    }
}

/// A rate in bytes per second, in bits when that is exact and tidy.
struct RateText(u64);

impl fmt::Display for RateText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = u128::from(self.0) * 8;
        let units: [(u128, &str); 3] = [
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
        ];
        for (per, name) in units {
            if bits.is_multiple_of(per) {
                return write!(f, "{}{name}", bits / per);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl fmt::Display for FaultSpec {
    /// The text form: the non-default settings in a fixed order, and the
    /// seed always, e.g. `loss=0.1,dup=0.01,seed=7,delay=10us`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.profile;
        let probabilities = [
            ("loss", p.loss),
            ("reorder", p.reorder),
            ("dup", p.duplicate),
            ("corrupt", p.corrupt),
        ];
        for (key, value) in probabilities {
            // Written with `!=` so that NaN (which no parse produces) shows.
            if value != 0.0 {
                write!(f, "{key}={value},")?;
            }
        }
        write!(f, "seed={}", self.seed)?;
        if !p.delay.is_zero() {
            write!(f, ",delay={}", DurationText(p.delay))?;
        }
        if !p.jitter.is_zero() {
            write!(f, ",jitter={}", DurationText(p.jitter))?;
        }
        if let Some(rate) = p.rate_bytes_per_sec {
            write!(f, ",rate={}", RateText(rate))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> FaultSpec {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn parse_err(s: &str) -> FaultSpecError {
        match s.parse::<FaultSpec>() {
            Ok(spec) => panic!("{s:?} parsed as {spec:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn parses_the_full_example() {
        let spec = parse(
            "loss=0.1,reorder=0.05,dup=0.01,corrupt=0.001,seed=7,delay=10us,jitter=2us,rate=1gbit",
        );
        assert_eq!(
            spec,
            FaultSpec {
                profile: FaultProfile {
                    loss: 0.1,
                    duplicate: 0.01,
                    reorder: 0.05,
                    corrupt: 0.001,
                    delay: Duration::from_micros(10),
                    jitter: Duration::from_micros(2),
                    rate_bytes_per_sec: Some(125_000_000),
                },
                seed: 7,
            }
        );
    }

    #[test]
    fn every_key_is_optional() {
        assert_eq!(parse(""), FaultSpec::default());
        assert_eq!(parse("seed=3").seed, 3);
        assert_eq!(parse("seed=0x10").seed, 16);
        assert_eq!(parse("loss=1").profile.loss, 1.0);
        assert_eq!(parse("duplicate=0.5").profile.duplicate, 0.5);
        assert_eq!(parse(" loss = 0.5 , ").profile.loss, 0.5);
        assert!(parse("seed=1").profile.is_perfect());
    }

    #[test]
    fn durations_accept_every_unit() {
        let d = |s: &str| parse(&format!("delay={s}")).profile.delay;
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("7ns"), Duration::from_nanos(7));
        assert_eq!(d("10us"), Duration::from_micros(10));
        assert_eq!(d("10µs"), Duration::from_micros(10));
        assert_eq!(d("1.5ms"), Duration::from_micros(1500));
        assert_eq!(d("2s"), Duration::from_secs(2));
        assert_eq!(d(".5us"), Duration::from_nanos(500));
    }

    #[test]
    fn rates_accept_bits_and_bytes() {
        let r = |s: &str| parse(&format!("rate={s}")).profile.rate_bytes_per_sec;
        assert_eq!(r("10gbit"), Some(1_250_000_000));
        assert_eq!(r("10Gbit/s"), Some(1_250_000_000));
        assert_eq!(r("100mbit"), Some(12_500_000));
        assert_eq!(r("8kbit"), Some(1_000));
        assert_eq!(r("800bit"), Some(100));
        assert_eq!(r("2.5gbit"), Some(312_500_000));
        assert_eq!(r("500MB"), Some(500_000_000));
        assert_eq!(r("500MB/s"), Some(500_000_000));
        assert_eq!(r("1GB"), Some(1_000_000_000));
        assert_eq!(r("3KB"), Some(3_000));
        assert_eq!(r("42B"), Some(42));
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "",
            "seed=7",
            "loss=0.1,reorder=0.05,dup=0.01,corrupt=0.001,seed=7,delay=10us,jitter=2us,rate=1gbit",
            "delay=1.5ms,jitter=3ns,rate=42B",
            "rate=500MB,seed=18446744073709551615",
            "loss=1,dup=1,delay=2s",
        ] {
            let spec = parse(text);
            let shown = spec.to_string();
            assert_eq!(parse(&shown), spec, "{text:?} shown as {shown:?}");
        }
        assert_eq!(
            parse("jitter=2us,seed=7,loss=0.1,rate=1gbit,delay=10us").to_string(),
            "loss=0.1,seed=7,delay=10us,jitter=2us,rate=1gbit"
        );
    }

    #[test]
    fn errors_name_the_key_and_the_problem() {
        let e = parse_err("loss=0.1,bogus=3");
        assert_eq!(e.key, "bogus");
        assert_eq!(e.problem, FaultSpecProblem::UnknownKey);
        assert!(e.to_string().contains("bogus"), "{e}");

        let e = parse_err("loss=abc");
        assert_eq!(e.key, "loss");
        assert_eq!(e.problem, FaultSpecProblem::NotANumber("abc".into()));
        assert!(e.to_string().contains("loss") && e.to_string().contains("abc"));

        let e = parse_err("dup=1.5");
        assert_eq!(e.key, "dup");
        assert_eq!(e.problem, FaultSpecProblem::ProbabilityOutOfRange(1.5));
        assert!(e.to_string().contains("dup"));

        let e = parse_err("corrupt=-0.1");
        assert_eq!(e.key, "corrupt");
        assert_eq!(e.problem, FaultSpecProblem::ProbabilityOutOfRange(-0.1));

        let e = parse_err("reorder=NaN");
        assert_eq!(e.key, "reorder");
        assert!(matches!(e.problem, FaultSpecProblem::NotANumber(_)));

        let e = parse_err("delay=10xs");
        assert_eq!(e.key, "delay");
        assert_eq!(e.problem, FaultSpecProblem::UnknownUnit("xs".into()));
        assert!(e.to_string().contains("delay") && e.to_string().contains("xs"));

        let e = parse_err("jitter=10");
        assert_eq!(e.key, "jitter");
        assert_eq!(e.problem, FaultSpecProblem::MissingUnit);

        let e = parse_err("jitter=fast");
        assert_eq!(e.key, "jitter");
        assert!(matches!(e.problem, FaultSpecProblem::NotANumber(_)));

        let e = parse_err("delay=0.5ns");
        assert_eq!(e.key, "delay");
        assert!(matches!(e.problem, FaultSpecProblem::BadMagnitude(_)));

        let e = parse_err("rate=10furlongs");
        assert_eq!(e.key, "rate");
        assert_eq!(e.problem, FaultSpecProblem::UnknownUnit("furlongs".into()));

        let e = parse_err("rate=10mb");
        assert_eq!(e.key, "rate");
        assert_eq!(e.problem, FaultSpecProblem::UnknownUnit("mb".into()));

        let e = parse_err("rate=0gbit");
        assert_eq!(e.key, "rate");
        assert!(matches!(e.problem, FaultSpecProblem::BadMagnitude(_)));

        let e = parse_err("seed=-1");
        assert_eq!(e.key, "seed");
        assert!(matches!(e.problem, FaultSpecProblem::NotANumber(_)));

        let e = parse_err("loss");
        assert_eq!(e.key, "loss");
        assert_eq!(e.problem, FaultSpecProblem::MissingValue);

        let e = parse_err("loss=");
        assert_eq!(e.key, "loss");
        assert_eq!(e.problem, FaultSpecProblem::MissingValue);

        let e = parse_err("loss=0.1,loss=0.2");
        assert_eq!(e.key, "loss");
        assert_eq!(e.problem, FaultSpecProblem::Repeated);

        let e = parse_err("delay=99999999999999999999999999999999999999999s");
        assert_eq!(e.key, "delay");
        assert!(matches!(
            e.problem,
            FaultSpecProblem::NotANumber(_) | FaultSpecProblem::BadMagnitude(_)
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,60}") {
            let _ = s.parse::<FaultSpec>();
        }

        #[test]
        fn arbitrary_specs_round_trip(
            loss in 0.0f64..=1.0,
            dup in 0.0f64..=1.0,
            reorder in 0.0f64..=1.0,
            corrupt in 0.0f64..=1.0,
            seed: u64,
            delay in 0u64..10_000_000_000,
            jitter in 0u64..10_000_000_000,
            rate in proptest::option::of(1u64..u64::MAX),
        ) {
            let spec = FaultSpec {
                profile: FaultProfile {
                    loss,
                    duplicate: dup,
                    reorder,
                    corrupt,
                    delay: Duration::from_nanos(delay),
                    jitter: Duration::from_nanos(jitter),
                    rate_bytes_per_sec: rate,
                },
                seed,
            };
            let shown = spec.to_string();
            prop_assert_eq!(shown.parse::<FaultSpec>(), Ok(spec), "{}", shown);
        }
    }
}
