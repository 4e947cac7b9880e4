//! Duration flags: whole seconds, fractional seconds, timeouts and `<n>s|m|h|d` lifetimes, each
//! bounded so that no flag can overflow the clock arithmetic it feeds.

use std::time::Duration;

/// The longest any seconds-valued flag may be (100 years): longer values would overflow the
/// clock arithmetic they feed, and mean "forever" anyway.
pub const MAX_SECONDS: u64 = 100 * 365 * 86_400;
/// The longest connection or request timeout (a day).
const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;
/// The longest lifetime (about ten years).
const MAX_LIFETIME_SECONDS: u64 = 10 * 366 * 86_400;

/// Why a duration flag's value is refused (clap prints it after the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("'{0}' is not a number of seconds")]
    NotSeconds(String),
    #[error("must be from 0 to {MAX_SECONDS} seconds")]
    SecondsOutOfRange,
    #[error("must be more than 0 and at most {MAX_TIMEOUT_SECONDS} seconds")]
    TimeoutOutOfRange,
    #[error("empty duration")]
    Empty,
    #[error("{0:?}: give a number then s, m, h or d")]
    NotLifetime(String),
    #[error("{0:?}: must be at least 1s and at most 3660d")]
    LifetimeOutOfRange(String),
}

/// Whole seconds, at most [`MAX_SECONDS`].
pub fn seconds_flag() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(..=MAX_SECONDS)
}

/// A duration in (fractional) seconds, e.g. `2.5`, at most [`MAX_SECONDS`].
pub fn parse_seconds(text: &str) -> Result<Duration, DurationError> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| DurationError::NotSeconds(text.to_string()))?;
    if !(0.0..=MAX_SECONDS as f64).contains(&seconds) {
        return Err(DurationError::SecondsOutOfRange);
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| DurationError::SecondsOutOfRange)
}

/// A connection or request timeout: more than 0, at most a day.
pub fn parse_timeout(text: &str) -> Result<Duration, DurationError> {
    let duration = parse_seconds(text)?;
    if duration.is_zero() || duration.as_secs_f64() > MAX_TIMEOUT_SECONDS {
        return Err(DurationError::TimeoutOutOfRange);
    }
    Ok(duration)
}

/// `<n>s`, `<n>m`, `<n>h` or `<n>d`: at least a second, at most ten years.
pub fn parse_lifetime(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let unit = text.chars().last().ok_or(DurationError::Empty)?;
    let seconds_per = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(DurationError::NotLifetime(text.to_string())),
    };
    let count: u64 = text[..text.len() - 1]
        .parse()
        .map_err(|_| DurationError::NotLifetime(text.to_string()))?;
    let seconds = count.saturating_mul(seconds_per);
    if seconds == 0 || seconds > MAX_LIFETIME_SECONDS {
        return Err(DurationError::LifetimeOutOfRange(text.to_string()));
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_timeouts_are_bounded() {
        assert_eq!(parse_seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(
            parse_seconds("soon"),
            Err(DurationError::NotSeconds("soon".to_string()))
        );
        assert_eq!(parse_seconds("-1"), Err(DurationError::SecondsOutOfRange));
        assert_eq!(parse_seconds("NaN"), Err(DurationError::SecondsOutOfRange));
        assert_eq!(parse_timeout("0"), Err(DurationError::TimeoutOutOfRange));
        assert_eq!(
            parse_timeout("86401"),
            Err(DurationError::TimeoutOutOfRange)
        );
        assert_eq!(parse_timeout("70"), Ok(Duration::from_secs(70)));
        assert_eq!(
            parse_lifetime("").map_err(|e| e.to_string()),
            Err("empty duration".to_string())
        );
    }
}
