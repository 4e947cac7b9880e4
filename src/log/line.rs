//! Log lines written straight to the log's writer, for the one line every warm review logs
//! (its summary, `server/observe.rs`), and the text format they copy ([`text_format`], the
//! subscriber `main` sets up). [`Line`] builds the bytes that format writes for an event
//! (tracing-subscriber's `Full` format with [`PlainFields`], colours off: `2026-11-27T10:47:23.040763Z
//!  INFO target: message name=value …`), byte for byte, in one pass: no dispatch through the
//! subscriber's layers, no field visitor, and the timestamp's date and time of day formatted
//! once per second per thread. Under load that dispatch and formatting cost a warm review more
//! than the rest of its line (issue 30, `docs/performance.md`). The tests hold its lines beside
//! the text format's.
//!
//! It is used only where it cannot differ from `tracing`: once `main` has [`install`]ed the
//! writer (only for the text format without colours; in tests, with `--log-format json` and
//! on a terminal there is no [`sink`]), when the caller's `tracing::event_enabled!` with the
//! line's level, target and field names says the filter lets the line through, and when
//! [`Line::start`] agrees (no span entered: at `debug` the review's span is, and `Full`
//! prefixes the line with it; a printable message; a clock between 1970 and 9999). Anywhere
//! else the caller logs through `tracing`.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::Level;
use tracing_subscriber::fmt::format::Format;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::log::fields::{write_quoted, OneLine, PlainFields};
use crate::text::printable;

/// Where finished lines go: the same writer as every other log line, so they stay in order.
pub type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends lines built by [`Line`] to `sink` from now on. Once per process; a second call is
/// ignored (returns false).
pub fn install(sink: Sink) -> bool {
    SINK.set(sink).is_ok()
}

/// [`install`]s `writer` (the writer [`text_format`] got, so that every line keeps its order).
pub fn install_writer<W>(writer: W) -> bool
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    install(Box::new(move |line| {
        // As tracing's own lines: nowhere to report a failed log write.
        let _ = writer.make_writer().write_all(line);
    }))
}

/// The text format's subscriber as `pinhook serve` sets it up: `Full` lines with
/// [`PlainFields`], `filter`, colours when `ansi`, written to `writer`.
pub fn text_format<W>(
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> tracing_subscriber::fmt::Subscriber<PlainFields, Format, EnvFilter, W>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer)
        .fmt_fields(PlainFields::new())
        .finish()
}

/// The installed writer, if `main` installed one.
pub fn sink() -> Option<&'static Sink> {
    SINK.get()
}

thread_local! {
    /// Each thread's line buffer, reused from line to line.
    static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
    /// The last second this thread formatted, and its text up to the `.` before the
    /// microseconds.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// One line being built; [`Line::end`] hands it to the sink.
pub struct Line {
    text: String,
}

impl Line {
    /// Starts a line of `level` and `target` with `message`, or says no (`None`) when `tracing`
    /// must write it: a span is entered, the message needs escaping, or the clock is before
    /// 1970 or after 9999.
    pub fn start(level: Level, target: &str, message: &str) -> Option<Self> {
        if !tracing::Span::current().is_none() {
            return None;
        }
        Self::at(SystemTime::now(), level, target, message)
    }

    fn at(now: SystemTime, level: Level, target: &str, message: &str) -> Option<Self> {
        if !printable(message) {
            return None;
        }
        let mut text = BUFFER.with(|buffer| std::mem::take(&mut *buffer.borrow_mut()));
        text.clear();
        write_timestamp(&mut text, now)?;
        text.push_str(match level {
            Level::TRACE => "TRACE ",
            Level::DEBUG => "DEBUG ",
            Level::INFO => " INFO ",
            Level::WARN => " WARN ",
            Level::ERROR => "ERROR ",
        });
        text.push_str(target);
        text.push_str(": ");
        text.push_str(message);
        Some(Self { text })
    }

    fn name(&mut self, name: &str) {
        self.text.push(' ');
        self.text.push_str(name);
        self.text.push('=');
    }

    /// A `%value` field: its `Display`, unquoted, as the text format writes it (a control
    /// character or line separator in it escaped through `log::fields`' `OneLine`, as
    /// `PlainFields` does).
    pub fn display(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.name(name);
        // Writing to a String cannot fail.
        let _ = write!(OneLine(&mut self.text), "{value}");
        self
    }

    /// A string field: quoted and escaped as `{:?}` does.
    pub fn str(mut self, name: &str, value: &str) -> Self {
        self.name(name);
        let _ = write_quoted(&mut self.text, value);
        self
    }

    pub fn u64(mut self, name: &str, value: u64) -> Self {
        self.name(name);
        let _ = write!(self.text, "{value}");
        self
    }

    pub fn bool(mut self, name: &str, value: bool) -> Self {
        self.name(name);
        self.text.push_str(if value { "true" } else { "false" });
        self
    }

    /// Ends the line and writes it to `sink`.
    pub fn end(mut self, sink: &Sink) {
        self.text.push('\n');
        sink(self.text.as_bytes());
        BUFFER.with(|buffer| *buffer.borrow_mut() = self.text);
    }
}

/// The latest second whose year has four digits: 9999-12-31T23:59:59Z.
const LAST_FOUR_DIGIT_SECOND: u64 = 253_402_300_799;

/// Writes `now` as the text format's timer (`SystemTime`) does, `YYYY-MM-DDTHH:MM:SS.ffffffZ`
/// and a space; `None` before 1970 or after 9999 (a clock gone wrong: `tracing` writes those).
fn write_timestamp(text: &mut String, now: SystemTime) -> Option<()> {
    let since = now.duration_since(UNIX_EPOCH).ok()?;
    let second = since.as_secs();
    if second > LAST_FOUR_DIGIT_SECOND {
        return None;
    }
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            cached.1.clear();
            write_second(&mut cached.1, second);
            cached.0 = second;
        }
        text.push_str(&cached.1);
    });
    let _ = write!(text, "{:06}Z ", since.subsec_micros());
    Some(())
}

/// `YYYY-MM-DDTHH:MM:SS.` of a second since the epoch, in UTC.
fn write_second(text: &mut String, second: u64) {
    let of_day = second % 86_400;
    let (year, month, day) = civil_from_days(second / 86_400);
    let _ = write!(
        text,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    );
}

/// The proleptic Gregorian date of a day since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Captures for tests here and in `server/observe.rs`: what the text format writes, and what a
/// sink gets.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::Write as _;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::EnvFilter;

    use super::Sink;

    /// Lines written into memory.
    #[derive(Clone, Default)]
    pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        pub(crate) fn text(&self) -> String {
            let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    /// What `emit` logs through the text format as `main` sets it up (no colours, `filter`).
    pub(crate) fn text_format(filter: &str, emit: impl FnOnce()) -> String {
        let captured = Captured::default();
        let subscriber = super::text_format(EnvFilter::new(filter), false, captured.clone());
        tracing::subscriber::with_default(subscriber, emit);
        captured.text()
    }

    /// A sink and what it got.
    pub(crate) fn sink() -> (Sink, Captured) {
        let got = Captured::default();
        let into = got.clone();
        let sink: Sink = Box::new(move |line| {
            let _ = into.clone().write_all(line);
        });
        (sink, got)
    }

    /// The lines with their timestamps (`YYYY-MM-DDTHH:MM:SS.ffffffZ `) cut off; a line that
    /// does not start with one (the rest of a value with a line break in it) is kept whole.
    pub(crate) fn untimed(text: &str) -> Vec<String> {
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                let shape: String = line
                    .chars()
                    .take(28)
                    .map(|c| if c.is_ascii_digit() { '9' } else { c })
                    .collect();
                if shape == "9999-99-99T99:99:99.999999Z " {
                    line[28..].to_string()
                } else {
                    line.to_string()
                }
            })
            .collect();
        assert!(
            text.is_empty() || lines[0] != text.lines().next().unwrap_or(""),
            "{text}"
        );
        lines
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime as _;

    use super::testing::{self, untimed};
    use super::*;

    const TARGET: &str = module_path!();

    /// Strings as pinhook's lines carry them, and the ones that need escaping or are odd.
    const STRINGS: [&str; 8] = [
        "pinned",
        "",
        "quote \" and backslash \\ and tab \t",
        "é/ü:1 … ©",
        "terminal \x1b[2J and \u{9b} C1",
        "multi\nline",
        "forged\r\n2026-11-27T00:00:00.000000Z  INFO pinhook: review\u{2028}\u{85}\0\x7f",
        "ünïcode\nthen a break",
    ];

    /// Lines with every kind of field `Line` writes, through `tracing` and through `Line`, are
    /// the same bytes after their timestamps.
    #[test]
    fn lines_are_what_the_text_format_writes() {
        let through_tracing = testing::text_format("trace", || {
            for s in STRINGS {
                tracing::info!(endpoint = %"mutate", uid = %s, dry_run = true, result = s, pinned = 0u64, big = u64::MAX, origins = %"", "review");
                tracing::warn!(kind = %s, bad = false, "violation");
                tracing::error!(result = s, "e");
                tracing::debug!(n = 7u64, "debug");
                tracing::trace!("trace");
            }
        });
        let (sink, got) = testing::sink();
        for s in STRINGS {
            let now = SystemTime::now();
            let line = |level, message| Line::at(now, level, TARGET, message);
            line(Level::INFO, "review")
                .map(|l| {
                    l.display("endpoint", "mutate")
                        .display("uid", s)
                        .bool("dry_run", true)
                        .str("result", s)
                        .u64("pinned", 0)
                        .u64("big", u64::MAX)
                        .display("origins", "")
                        .end(&sink)
                })
                .unwrap();
            line(Level::WARN, "violation")
                .map(|l| l.display("kind", s).bool("bad", false).end(&sink))
                .unwrap();
            line(Level::ERROR, "e")
                .map(|l| l.str("result", s).end(&sink))
                .unwrap();
            line(Level::DEBUG, "debug")
                .map(|l| l.u64("n", 7).end(&sink))
                .unwrap();
            line(Level::TRACE, "trace").map(|l| l.end(&sink)).unwrap();
        }
        let direct = got.text();
        // Five lines per string: a line break in a `Display` value is escaped, as the text
        // format escapes it.
        assert_eq!(direct.lines().count(), 5 * STRINGS.len(), "{direct}");
        assert_eq!(untimed(&through_tracing), untimed(&direct));
        assert!(
            direct.contains(r"review endpoint=mutate uid=forged\r\n2026-11-27T00:00:00.000000Z  INFO pinhook: review\u{2028}\u{85}\0\u{7f} dry_run=true"),
            "{direct}"
        );
        assert!(
            direct.contains(r#"  INFO pinhook::log::line::tests: review endpoint=mutate uid=pinned dry_run=true result="pinned" pinned=0 big=18446744073709551615 origins="#),
            "{direct}"
        );
    }

    /// A message the text format would escape, or a span entered (which it would print before
    /// the target), leaves the line to `tracing`.
    #[test]
    fn escaped_messages_and_spans_are_left_to_tracing() {
        let now = SystemTime::now();
        assert!(Line::at(now, Level::INFO, TARGET, "plain message").is_some());
        assert!(Line::at(now, Level::INFO, TARGET, "a \x1b[31mred\x1b[0m message").is_none());
        assert!(Line::at(now, Level::INFO, TARGET, "two\nlines").is_none());
        assert!(Line::start(Level::INFO, TARGET, "no span").is_some());
        testing::text_format("debug", || {
            assert!(Line::start(Level::INFO, TARGET, "no span yet").is_some());
            let _review = tracing::debug_span!("review", uid = "u").entered();
            assert!(Line::start(Level::INFO, TARGET, "in a span").is_none());
        });
    }

    fn stamp(second: u64, micros: u32) -> Option<String> {
        let mut text = String::new();
        let at = UNIX_EPOCH + Duration::from_secs(second) + Duration::from_micros(micros.into());
        write_timestamp(&mut text, at).map(|()| text)
    }

    /// The timestamp is the timer's: known instants, every day's date against the `time`
    /// crate's calendar, and the clock read now beside `tracing`'s own timer.
    #[test]
    fn timestamps_are_the_text_formats() {
        let known = [
            (0, 0, "1970-01-01T00:00:00.000000Z "),
            (951_782_400, 7, "2000-02-29T00:00:00.000007Z "),
            (1_709_251_199, 999_999, "2024-02-29T23:59:59.999999Z "),
            (4_107_542_399, 120_000, "2100-02-28T23:59:59.120000Z "),
            (1_795_776_443, 40_763, "2026-11-27T10:47:23.040763Z "),
            (LAST_FOUR_DIGIT_SECOND, 1, "9999-12-31T23:59:59.000001Z "),
        ];
        for (second, micros, expected) in known {
            assert_eq!(stamp(second, micros).as_deref(), Some(expected));
            // Again, from the cached second.
            assert_eq!(stamp(second, micros).as_deref(), Some(expected));
        }
        assert_eq!(stamp(LAST_FOUR_DIGIT_SECOND + 1, 0), None);
        assert_eq!(
            write_timestamp(&mut String::new(), UNIX_EPOCH - Duration::from_secs(1)),
            None
        );
        for day in (0..2_932_897u64).step_by(997) {
            let second = day * 86_400 + day % 86_400;
            let date = time::OffsetDateTime::from_unix_timestamp(second as i64).unwrap();
            let expected = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.000000Z ",
                date.year(),
                u8::from(date.month()),
                date.day(),
                date.hour(),
                date.minute(),
                date.second()
            );
            assert_eq!(stamp(second, 0), Some(expected), "day {day}");
        }
        // The clock itself, beside tracing's timer: the same second (read again if a second
        // turned in between).
        let same_second = (0..5).any(|_| {
            let mut timer = String::new();
            tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut Writer::new(&mut timer))
                .unwrap();
            let mut ours = String::new();
            write_timestamp(&mut ours, SystemTime::now()).unwrap();
            timer[..20] == ours[..20] && timer.len() + 1 == ours.len()
        });
        assert!(same_second);
    }
}
