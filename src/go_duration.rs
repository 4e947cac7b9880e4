//! Go's `time.ParseDuration`, the one reading of a Go duration in pinhook: kubelet's
//! `defaultCacheDuration` and a credential plugin's `cacheDuration` (metav1.Duration), and the
//! `?timeout=` the apiserver puts on a webhook call (`time.Duration.String()`). Each reader says
//! what a negative or invalid one means to it.

use std::time::Duration;

/// What a Go duration is: kubelet refuses a negative `defaultCacheDuration` by name, and Go
/// refuses one past `i64` nanoseconds (about 292 years), which a reader that clamps may still
/// take as its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoDuration {
    NonNegative(Duration),
    Negative,
    /// Longer than Go reads (`time.ParseDuration` says "invalid duration"), but a `Duration`.
    PastGoLimit(Duration),
}

/// Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers each with a
/// unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), such as `300ms`, `1.5h` or `2h45m`; `0`
/// alone is zero. `None` for anything else, and for a length no `Duration` holds.
pub fn parse(text: &str) -> Option<GoDuration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(GoDuration::NonNegative(Duration::ZERO));
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        nanos += value * scale;
        rest = &rest[unit_end..];
    }
    if !nanos.is_finite() {
        return None;
    }
    // Go refuses durations past ~292 years.
    if nanos > i64::MAX as f64 {
        let duration = Duration::try_from_secs_f64(nanos / 1e9).ok()?;
        return Some(match negative {
            true => GoDuration::Negative,
            false => GoDuration::PastGoLimit(duration),
        });
    }
    Some(match negative && nanos > 0.0 {
        true => GoDuration::Negative,
        false => GoDuration::NonNegative(Duration::from_nanos(nanos as u64)),
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("0", Some(GoDuration::NonNegative(Duration::ZERO)))]
    #[case("0s", Some(GoDuration::NonNegative(Duration::ZERO)))]
    #[case("12h", Some(GoDuration::NonNegative(Duration::from_secs(43_200))))]
    #[case("1h30m", Some(GoDuration::NonNegative(Duration::from_secs(5_400))))]
    #[case("5m0s", Some(GoDuration::NonNegative(Duration::from_secs(300))))]
    #[case("1.5s", Some(GoDuration::NonNegative(Duration::from_millis(1_500))))]
    #[case("300ms", Some(GoDuration::NonNegative(Duration::from_millis(300))))]
    #[case("-1s", Some(GoDuration::Negative))]
    #[case("", None)]
    #[case("1", None)]
    #[case("1d", None)]
    #[case("s", None)]
    #[case("1..5s", None)]
    fn go_durations(#[case] text: &str, #[case] expected: Option<GoDuration>) {
        assert_eq!(parse(text), expected, "{text:?}");
    }

    /// A sign is allowed; an exponent, or a length no `Duration` holds, is not.
    #[rstest]
    #[case("+10s", Some(GoDuration::NonNegative(Duration::from_secs(10))))]
    #[case("10000000000000000000s10000000000000000000s", None)]
    #[case("1e400s", None)]
    fn past_go_limits(#[case] text: &str, #[case] expected: Option<GoDuration>) {
        assert_eq!(parse(text), expected, "{text:?}");
    }

    /// Past Go's limit but a `Duration`: Go refuses it, a reader that clamps may take it; past
    /// what a `Duration` holds, nothing is.
    #[test]
    fn past_go_limit_is_named() {
        match parse("3000000000000000h") {
            Some(GoDuration::PastGoLimit(duration)) => {
                assert!(duration > Duration::from_secs(10_000_000_000_000_000_000))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse("-3000000000000000h"), Some(GoDuration::Negative));
        assert_eq!(parse("300000000000000000h"), None);
    }
}
