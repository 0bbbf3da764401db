//! The duration flags (`exec --wait --lease --fixed-lease --kill-after`, `top --interval`,
//! `bench --hold`): one parser, and each flag's range.
//!
//! A value that is malformed, negative, not a number, or outside its flag's range is a bad
//! command line: clap prints `invalid value 'V' for '--flag <DURATION>': why` and `lockkit`
//! exits 2. Nothing here panics, whatever the value (`1e30`, `NaN`, `-1`, `99999999999y`).

use std::time::Duration;

/// The longest duration any flag takes: 365 days, lockkit's longest lease. A longer one is no
/// deadline anyone means (leave `--wait` out to wait forever), and this bound keeps every
/// `now + duration` far from the end of the clock.
pub(crate) const MAX: Duration = lockkit::MAX_LEASE;

/// The shortest `top --interval`.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `--wait`, `--kill-after`, `--hold`: 0 up to [`MAX`].
pub(crate) fn any(s: &str) -> Result<Duration, String> {
    within(s, Duration::ZERO, MAX, "a duration")
}

/// `--lease`, `--fixed-lease`: a lease lockkit takes (100ms up to 365 days).
pub(crate) fn lease(s: &str) -> Result<Duration, String> {
    within(s, lockkit::MIN_LEASE, lockkit::MAX_LEASE, "a lease")
}

/// `top --interval`: [`MIN_INTERVAL`] up to [`MAX`].
pub(crate) fn interval(s: &str) -> Result<Duration, String> {
    within(s, MIN_INTERVAL, MAX, "the interval")
}

fn within(s: &str, min: Duration, max: Duration, what: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < min {
        Err(format!(
            "{s:?} is too short: {what} is at least {}",
            show(min)
        ))
    } else if d > max {
        Err(format!(
            "{s:?} is out of range: {what} is at most {}",
            show(max)
        ))
    } else {
        Ok(d)
    }
}

/// `10s`, `500ms`, `2m`, `1h 30m` (humantime's units), or a bare number of seconds (`1.5`,
/// `0`). Any size, ranges are the callers'; only what no `Duration` holds is out of range.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    // Before the number parse: `-0` and `-0.0` are no durations either.
    if s.trim_start().starts_with('-') {
        return Err(format!("{s:?} is negative: a duration is 0 or more"));
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_nan() {
            return Err(format!("{s:?} is not a number"));
        }
        // Infinite, or more seconds than a Duration holds (`from_secs_f64` would panic).
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is out of range: a duration is at most {}", show(MAX)));
    }
    humantime::parse_duration(s).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            format!("{s:?} is out of range: a duration is at most {}", show(MAX))
        }
        e => format!("{s:?} is not a duration (like 10s, 500ms, 2m or 1.5): {e}"),
    })
}

/// `d` for messages, to the millisecond (`666ms`, not `666ms 666us 666ns`).
pub(crate) fn human(d: Duration) -> String {
    let ms = Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    show(ms)
}

/// A bound as people write it (`100ms`, `365 days`; humantime would say `11months 30days…`).
fn show(d: Duration) -> String {
    const DAY: u64 = 24 * 3600;
    if d.subsec_nanos() == 0 && d.as_secs() >= DAY && d.as_secs().is_multiple_of(DAY) {
        format!("{} days", d.as_secs() / DAY)
    } else {
        humantime::format_duration(d).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn accepted_values() {
        let table: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("1", MS(1000)),
            ("1.5", MS(1500)),
            (".25", MS(250)),
            ("+2", MS(2000)),
            ("1e2", MS(100_000)),
            ("500ms", MS(500)),
            ("10s", MS(10_000)),
            ("2m", MS(120_000)),
            ("1h 30m", MS(5_400_000)),
            ("365days", MAX),
            ("31536000", MAX),
        ];
        for (s, want) in table {
            assert_eq!(any(s), Ok(*want), "{s:?}");
        }
        assert_eq!(lease("100ms"), Ok(lockkit::MIN_LEASE));
        assert_eq!(lease("365 days"), Ok(lockkit::MAX_LEASE));
        assert_eq!(interval("100ms"), Ok(MIN_INTERVAL));
    }

    /// Every bad value is an `Err` with a reason, never a panic: out of range (as a number of
    /// seconds and with units), negative, not a number, malformed.
    #[test]
    fn refused_values() {
        type Parser = fn(&str) -> Result<Duration, String>;
        let parsers: [(&str, Parser); 3] = [("any", any), ("lease", lease), ("interval", interval)];
        let table: &[(&str, &str)] = &[
            ("1e30", "out of range"),
            ("1.8446744073709552e19", "out of range"),
            ("18446744073709551616", "out of range"),
            ("1e308", "out of range"),
            ("inf", "out of range"),
            ("+infinity", "out of range"),
            ("31536000.001", "out of range"),
            ("366days", "out of range"),
            ("500000000y", "out of range"),
            ("99999999999999999999999s", "out of range"),
            ("-1", "negative"),
            ("-0", "negative"),
            ("-0.0", "negative"),
            ("-1s", "negative"),
            ("-inf", "negative"),
            (" -5", "negative"),
            ("NaN", "not a number"),
            ("nan", "not a number"),
            ("", "not a duration"),
            ("abc", "not a duration"),
            ("10 parsecs", "not a duration"),
            ("1s 2", "not a duration"),
            ("0x10", "not a duration"),
            ("1,5", "not a duration"),
        ];
        for (name, parse) in parsers {
            for (s, why) in table {
                match parse(s) {
                    Err(e) => assert!(e.contains(why), "{name}({s:?}): {e:?}, wanted {why:?}"),
                    Ok(d) => panic!("{name}({s:?}) accepted {d:?}"),
                }
            }
        }
    }

    #[test]
    fn each_flag_has_its_range() {
        assert!(any("0").is_ok());
        let short = lease("99ms").unwrap_err();
        assert!(
            short.contains("too short") && short.contains("100ms"),
            "{short}"
        );
        assert!(lease("0").unwrap_err().contains("too short"));
        let long = lease("366days").unwrap_err();
        assert!(long.contains("at most 365 days"), "{long}");
        assert!(interval("99ms").unwrap_err().contains("at least 100ms"));
        assert!(interval("0").is_err());
    }
}
