//! The fields of a text log line: [`PlainFields`] writes them exactly as tracing-subscriber's
//! `DefaultFields` does (`message name=value …`, strings quoted and escaped as `{:?}` does,
//! `%`-values as their `Display`, a message's terminal escape sequences escaped) but without
//! the colour wrappers `DefaultFields` puts around every name and `=` even when colours are off,
//! and with plain ASCII strings and integers copied straight into the line. Anything less
//! common (errors, floats, strings that need escaping, a coloured writer) is handed to
//! `DefaultFields`' own visitor, so the text is the same byte for byte; the tests below hold
//! the two side by side. One difference, on purpose: one event is one line. A control
//! character (a line break, `ESC`, C1) or a Unicode line separator that `DefaultFields` would
//! write raw, in a `%`-value, an error's text or a formatted message, is written escaped as
//! `{:?}` escapes it ([`write_escaped`]; where tracing's own sanitising of messages and errors
//! got there first, as it writes it: `\x1b`), with colours or without, so no value from outside
//! (a review's `uid`, an owner's kind, a registry's error) can forge a line or carry terminal
//! codes. Only the text format uses it: `--log-format json` keeps tracing's JSON fields, in
//! which JSON escapes line breaks and C0 controls, and `log::json` the rest.

use crate::text::{escaped_text, left_raw, printable, write_escaped};

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::FormatFields;

/// The text format's field formatter: `DefaultFields`' output, cheaper to produce.
#[derive(Debug, Default)]
pub struct PlainFields;

impl PlainFields {
    pub fn new() -> Self {
        Self
    }
}

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            // Colours: `DefaultFields`' own visitor writes every field, styles and all; a value
            // it would write with a raw control character is escaped first.
            let guarded = writer.sanitizes_ansi_escapes();
            let mut visitor = Coloured {
                visitor: DefaultVisitor::new(writer, true),
                guarded,
            };
            fields.record(&mut visitor);
            return visitor.visitor.finish();
        }
        let mut one_line = OneLine(writer);
        let mut visitor = PlainVisitor {
            writer: Writer::new(&mut one_line),
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: the next field needs no separating space.
    is_empty: bool,
    result: fmt::Result,
}

/// Printable ASCII without `"` or `\`: what `{:?}` writes unchanged between its quotes.
fn quotes_unchanged(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// A string field's value as `{:?}` writes it, quoted and escaped; plain ASCII is copied
/// between the quotes as it is. Also `log::line`'s.
pub(crate) fn write_quoted(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    if quotes_unchanged(value) {
        out.write_char('"')?;
        out.write_str(value)?;
        out.write_char('"')
    } else {
        write!(out, "{value:?}")
    }
}

/// A writer that passes text on with [`write_escaped`]: what `PlainFields` and `log::line`'s
/// `%`-values write through.
pub(crate) struct OneLine<W>(pub(crate) W);

impl<W: fmt::Write> fmt::Write for OneLine<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_escaped(&mut self.0, text)
    }
}

/// `DefaultFields`' visitor for the coloured format. Each value is formatted once, here, and
/// its text handed on ([`Saved`]), escaped ([`write_escaped`]) when `DefaultFields` would write it
/// with a raw control character or line separator; a value that needs nothing is written as
/// `DefaultFields` writes it, byte for byte. Formatting once means a value whose text changes
/// from call to call cannot pass the check and then be written differently. The cost (a
/// `String` per value) is a terminal's: colours are never the server's log under load. Numbers
/// reach `record_debug` (`Visit`'s defaults), as they do in `DefaultVisitor`.
struct Coloured<'a> {
    visitor: DefaultVisitor<'a>,
    /// Whether tracing escapes ESC, BEL, BS, FF, DEL and C1 in messages and errors itself (its
    /// terminal-escape sanitising, on unless a subscriber turns it off).
    guarded: bool,
}

/// Text already formatted, written as it is wherever `{:?}` or `{}` writes it.
struct Saved<'a>(&'a str);

impl fmt::Debug for Saved<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// An error's text and its sources' texts, saved, for `DefaultVisitor::record_error`.
#[derive(Debug)]
struct SavedError {
    text: String,
    source: Option<Box<SavedError>>,
}

impl fmt::Display for SavedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for SavedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl Visit for Coloured<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Any other string is written as `{:?}`, which escapes it.
        if field.name() == "message" && left_raw(value, self.guarded) {
            self.visitor
                .record_debug(field, &Saved(&escaped_text(value)));
        } else {
            self.visitor.record_str(field, value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Not `format!`, which panics when an implementation returns an error.
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        if left_raw(&text, field.name() == "message" && self.guarded) {
            text = escaped_text(&text);
        }
        self.visitor.record_debug(field, &Saved(&text));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut texts = Vec::new();
        let mut next = Some(value);
        while let Some(error) = next {
            let mut text = String::new();
            let _ = write!(text, "{error}");
            texts.push(text);
            next = error.source();
        }
        if texts.iter().any(|text| left_raw(text, self.guarded)) {
            texts = texts.iter().map(|text| escaped_text(text)).collect();
        }
        let saved = texts.into_iter().rev().fold(None, |source, text| {
            Some(Box::new(SavedError { text, source }))
        });
        if let Some(saved) = saved {
            self.visitor.record_error(field, saved.as_ref());
        }
    }
}

impl PlainVisitor<'_> {
    /// Hands a field to `DefaultFields`' visitor, which writes it (and its separating space)
    /// as it would in a line of its own.
    fn default_visitor(&mut self) -> DefaultVisitor<'_> {
        let is_empty = std::mem::replace(&mut self.is_empty, false);
        DefaultVisitor::new(self.writer.by_ref(), is_empty)
    }

    /// Fields `DefaultFields` treats specially by name: `log.*` (metadata of `log` records,
    /// skipped) and raw identifiers (`r#type`, written without `r#`).
    fn special(field: &Field) -> bool {
        let name = field.name();
        name.starts_with("log.") || name.starts_with("r#")
    }

    /// The separating space and `name=`.
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::replace(&mut self.is_empty, false) {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(field.name())?;
        self.writer.write_char('=')
    }

    fn record_with(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = self.name(field).and_then(|()| write(&mut self.writer));
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if field.name() == "message" && printable(value) {
            if !std::mem::replace(&mut self.is_empty, false) {
                self.result = self.writer.write_char(' ');
            }
            self.result = self.result.and_then(|()| self.writer.write_str(value));
        } else if field.name() != "message" && !Self::special(field) {
            self.record_with(field, |w| write_quoted(w, value));
        } else {
            self.default_visitor().record_str(field, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if Self::special(field) || field.name() == "message" {
            self.default_visitor().record_u64(field, value);
        } else {
            self.record_with(field, |w| write!(w, "{value}"));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if Self::special(field) || field.name() == "message" {
            self.default_visitor().record_i64(field, value);
        } else {
            self.record_with(field, |w| write!(w, "{value}"));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if Self::special(field) || field.name() == "message" {
            self.default_visitor().record_bool(field, value);
        } else {
            self.record_with(field, |w| w.write_str(if value { "true" } else { "false" }));
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.default_visitor().record_f64(field, value);
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.default_visitor().record_i128(field, value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.default_visitor().record_u128(field, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.default_visitor().record_error(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if Self::special(field) || field.name() == "message" {
            self.default_visitor().record_debug(field, value);
        } else {
            self.record_with(field, |w| write!(w, "{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::fmt::format::DefaultFields;

    use crate::log::line::testing::Captured;
    use crate::text::{escapes, may_escape, one_line};

    use super::*;

    /// An error of a fixed text, with a source or none.
    #[derive(Debug)]
    struct TextError(&'static str, Option<&'static TextError>);
    impl fmt::Display for TextError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for TextError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1
                .map(|source| source as &(dyn std::error::Error + 'static))
        }
    }

    static BROKEN: TextError = TextError("the registry answered 500", None);
    /// Terminal codes in an error's text, which tracing escapes itself.
    static OUTER: TextError = TextError("cannot resolve \x1b[31mred\x1b[0m", Some(&BROKEN));
    /// An error whose text forges a line.
    static HOSTILE: TextError = TextError(
        "denied\n2026-11-27T00:00:00.000000Z  INFO forged: line",
        None,
    );
    /// An error whose source's text (a registry's answer) breaks the line.
    static CHAIN: TextError = TextError(
        "cannot resolve",
        Some(&TextError("the registry\r\nanswered 500", None)),
    );

    /// Every kind of field pinhook's lines carry, and the ones that need escaping.
    fn emit() {
        let endpoint = "mutate";
        let uid = "39f9b946-537c-4e57-992d-0eddda10c503";
        let origins = String::new();
        tracing::info!(%endpoint, %uid, namespace = %"team-a", dry_run = false, result = "pinned", pinned = 3usize, would_pin = 0u64, offset = -4i64, %origins, "review");
        tracing::info!("a message only");
        tracing::info!(empty = "", "empty string");
        tracing::warn!(
            reason = "quote \" and backslash \\ and tab \t",
            image = "é/ü:1",
            "escaped"
        );
        tracing::warn!(
            reason = "terminal \x1b[2J and \u{9b} C1",
            "in a \x1b[31mmessage\x1b[0m too"
        );
        tracing::warn!(
            ratio = 1.5f64,
            big = 340282366920938463463374607431768211455u128,
            small = -170141183460469231731687303715884105728i128,
            "numbers"
        );
        tracing::warn!(
            error = &OUTER as &(dyn std::error::Error + 'static),
            "with an error"
        );
        tracing::info!(r#type = "Pod", debug = ?vec!["a", "b\"c"], display = %"x y", "raw identifier and Debug");
        tracing::info!(message = "a message given as a field", after = 1u64);
        tracing::info!(message = "control \x07 bell", after = true);
        tracing::info!(message = ?"debug message", log.target = "elsewhere", kept = 2u64);
        tracing::info!(first = 1u64);
        let line = "multi\nline";
        tracing::info!("{line} formatted {}", 3);
    }

    fn lines(fields: impl for<'w> FormatFields<'w> + Send + Sync + 'static, ansi: bool) -> String {
        lines_of(fields, ansi, emit)
    }

    /// What `emit` logs through `fields`, without timestamps.
    fn lines_of(
        fields: impl for<'w> FormatFields<'w> + Send + Sync + 'static,
        ansi: bool,
        emit: impl FnOnce(),
    ) -> String {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(ansi)
            .without_time()
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        captured.text()
    }

    #[test]
    fn plain_fields_write_what_default_fields_write() {
        let default = lines(DefaultFields::new(), false);
        let plain = lines(PlainFields::new(), false);
        // The one difference: the formatted message's line break, which PlainFields escapes.
        assert_eq!(default.lines().count(), 14, "{default}");
        let default = default.replace("multi\nline formatted", "multi\\nline formatted");
        assert_eq!(plain.lines().count(), 13, "{plain}");
        for (d, p) in default.lines().zip(plain.lines()) {
            assert_eq!(d, p);
        }
        assert_eq!(default, plain);
        assert!(
            plain.contains(r#"review endpoint=mutate uid=39f9b946-537c-4e57-992d-0eddda10c503 namespace=team-a dry_run=false result="pinned" pinned=3 would_pin=0 offset=-4 origins="#),
            "{plain}"
        );
    }

    /// Every control character and line separator class, and text that forges a line.
    const FORGED: &str = "a\nb\rc\td\x1b[2Je\u{85}f\u{9b}g\u{2028}h\u{2029}i\0j\x7fk";
    /// [`FORGED`] escaped.
    const ESCAPED: &str = r"a\nb\rc\td\u{1b}[2Je\u{85}f\u{9b}g\u{2028}h\u{2029}i\0j\u{7f}k";

    /// Text from outside in every place a value reaches the line: a span's field, a
    /// `%`-value, a `?`-value, a string, a message given as a field, an error's text and its
    /// source's, a formatted message.
    fn emit_hostile() {
        let span = tracing::info_span!("review", uid = %FORGED);
        let _entered = span.enter();
        tracing::info!(uid = %FORGED, kind = ?FORGED, quoted = FORGED, "review");
        tracing::info!(message = FORGED, uid = 1u64);
        for error in [&HOSTILE, &OUTER, &CHAIN] {
            tracing::warn!(
                error = error as &(dyn std::error::Error + 'static),
                "failed"
            );
        }
        tracing::warn!("formatted {FORGED} message");
    }

    /// What every hostile line must hold, with and without colours; `message` is how a
    /// message holding [`FORGED`] is written.
    fn hostile_lines(message: &str) -> Vec<String> {
        vec![
            format!("review{{uid={ESCAPED}}}"),
            format!("review uid={ESCAPED} kind=\"{ESCAPED}\" quoted=\"{ESCAPED}\"\n"),
            format!(" {message} uid=1\n"),
            r"failed error=denied\n2026-11-27T00:00:00.000000Z  INFO forged: line".to_string(),
            // Terminal codes in an error's text, as tracing's sanitising writes them.
            r"failed error=cannot resolve \x1b[31mred\x1b[0m error.sources=[the registry answered 500]".to_string(),
            r"failed error=cannot resolve error.sources=[the registry\r\nanswered 500]".to_string(),
            format!(" formatted {message} message\n"),
        ]
    }

    /// Text from outside (a review's uid, an error's text, an owner's kind) cannot break a
    /// line or carry terminal codes.
    #[test]
    fn one_event_is_one_line_whatever_its_values_hold() {
        let text = lines_of(PlainFields::new(), false, emit_hostile);
        assert_eq!(text.lines().count(), 6, "{text}");
        let raw = |c: char| c != '\n' && (c.is_control() || c == '\u{2028}' || c == '\u{2029}');
        assert!(!text.chars().any(raw), "{text:?}");
        // In a message, tracing escapes ESC and DEL itself (`\x1b`, `\x7f`), PlainFields the rest.
        let in_message = r"a\nb\rc\td\x1b[2Je\u{85}f\u{9b}g\u{2028}h\u{2029}i\0j\x7fk";
        for expected in hostile_lines(in_message) {
            assert!(text.contains(&expected), "{expected}\n{text}");
        }
        assert!(matches!(
            one_line("team/app:1 é …"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(one_line(FORGED), ESCAPED);
        // Plain text, and text that only looks like it might need escaping, is untouched.
        for plain in ["", "team-a", "é/ü:1 … – ©", "quote \" and backslash \\"] {
            let mut out = String::new();
            write_escaped(&mut out, plain).unwrap();
            assert_eq!(out, plain);
        }
    }

    /// The same, coloured: after the colours' own escape sequences, nothing of the values
    /// reaches the terminal raw.
    #[test]
    fn with_colours_one_event_is_one_line_too() {
        let text = lines_of(PlainFields::new(), true, emit_hostile);
        // Colours are `ESC [ digits ; … m`; anything else of ESC is a value's.
        let mut uncoloured = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("\x1b[") {
            uncoloured.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let end = after
                .find(|c: char| !(c.is_ascii_digit() || c == ';'))
                .unwrap_or(after.len());
            if after[end..].starts_with('m') {
                rest = &after[end + 1..];
            } else {
                uncoloured.push_str("\x1b[");
                rest = after;
            }
        }
        uncoloured.push_str(rest);
        assert_eq!(uncoloured.lines().count(), 6, "{uncoloured}");
        let raw = |c: char| c != '\n' && (c.is_control() || c == '\u{2028}' || c == '\u{2029}');
        assert!(!uncoloured.chars().any(raw), "{uncoloured:?}");
        for expected in hostile_lines(ESCAPED) {
            assert!(uncoloured.contains(&expected), "{expected}\n{uncoloured}");
        }
    }

    /// With colours the fields are `DefaultFields`' own, except the formatted message's line
    /// break, which it writes raw.
    #[test]
    fn with_colours_the_fields_are_default_fields_own() {
        let default = lines(DefaultFields::new(), true);
        assert_eq!(default.lines().count(), 14, "{default}");
        let default = default.replace("multi\nline formatted", "multi\\nline formatted");
        assert_eq!(default, lines(PlainFields::new(), true));
    }

    /// A value whose text changes from one formatting to the next (plain, then a forged line)
    /// is formatted once: what was checked is what is written.
    #[test]
    fn a_value_is_formatted_once() {
        struct Flips(std::cell::Cell<u32>);
        impl fmt::Display for Flips {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.set(self.0.get() + 1);
                match self.0.get() {
                    1 => f.write_str("x"),
                    _ => f.write_str("x\nFORGED"),
                }
            }
        }
        for ansi in [false, true] {
            let text = lines_of(PlainFields::new(), ansi, || {
                tracing::info!(flip = %Flips(std::cell::Cell::new(0)), "review");
            });
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(
                !text.lines().any(|line| line.starts_with("FORGED")),
                "{text}"
            );
        }
    }

    #[test]
    fn every_character_that_could_break_a_line_is_escaped() {
        for c in [
            '\0', '\n', '\r', '\t', '\x1b', '\x7f', '\u{80}', '\u{85}', '\u{9b}', '\u{9f}',
            '\u{2028}', '\u{2029}', '\u{061c}', '\u{200b}', '\u{200e}', '\u{200f}', '\u{202a}',
            '\u{202e}', '\u{2060}', '\u{2066}', '\u{2069}', '\u{feff}',
        ] {
            let text = format!("a{c}b");
            assert!(may_escape(&text), "{c:?}");
            let mut out = String::new();
            write_escaped(&mut out, &text).unwrap();
            assert_eq!(out, format!("a{}b", c.escape_debug()), "{c:?}");
            assert!(left_raw(&text, false), "{c:?}");
        }
        // Issue 44: every other format character (Cf), the Hangul fillers and the variation
        // selectors, one by one: escaped as `\u{…}`, never left raw.
        for c in [
            '\u{ad}',
            '\u{600}',
            '\u{605}',
            '\u{6dd}',
            '\u{70f}',
            '\u{890}',
            '\u{891}',
            '\u{8e2}',
            '\u{180e}',
            '\u{206a}',
            '\u{206f}',
            '\u{fff9}',
            '\u{fffb}',
            '\u{110bd}',
            '\u{110cd}',
            '\u{13430}',
            '\u{1343f}',
            '\u{1bca0}',
            '\u{1bca3}',
            '\u{1d173}',
            '\u{1d17a}',
            '\u{e0001}',
            '\u{e0020}',
            '\u{e0041}',
            '\u{e007f}',
            '\u{115f}',
            '\u{1160}',
            '\u{3164}',
            '\u{ffa0}',
            '\u{180b}',
            '\u{180d}',
            '\u{180f}',
            '\u{fe00}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{e01ef}',
        ] {
            let text = format!("a{c}b");
            assert!(may_escape(&text), "{c:?}");
            let mut out = String::new();
            write_escaped(&mut out, &text).unwrap();
            assert_eq!(out, format!("a\\u{{{:x}}}b", u32::from(c)), "{c:?}");
            assert_eq!(one_line(&text), out.as_str());
        }
        // Text that shares their lead bytes stays as it is.
        for plain in ["é", "日本語", "한국어", "🙂", "ẞ", "€", "ﬁ"] {
            assert_eq!(one_line(plain), plain);
        }
        // The scan that skips plain text misses no character the escaping would change.
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            if escapes(c) {
                assert!(may_escape(c.encode_utf8(&mut [0; 4])), "{c:?}");
            }
        }
    }
}
