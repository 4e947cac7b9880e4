//! The fields of a text log line: [`PlainFields`] writes them exactly as tracing-subscriber's
//! `DefaultFields` does (`message name=value …`, strings quoted and escaped as `{:?}` does,
//! `%`-values as their `Display`, a message's terminal escape sequences escaped) but without
//! the colour wrappers `DefaultFields` puts around every name and `=` even when colours are off,
//! and with plain ASCII strings and integers copied straight into the line. Anything less
//! common (errors, floats, strings that need escaping, a coloured writer) is handed to
//! `DefaultFields`' own visitor, so the text is the same byte for byte; the tests below hold
//! the two side by side. Only the text format uses it: `--log-format json` keeps tracing's
//! JSON fields.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};
use tracing_subscriber::fmt::FormatFields;

/// The text format's field formatter: `DefaultFields`' output, cheaper to produce.
#[derive(Debug, Default)]
pub struct PlainFields {
    default: DefaultFields,
}

impl PlainFields {
    pub fn new() -> Self {
        Self::default()
    }
}

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            return self.default.format_fields(writer, fields);
        }
        let mut visitor = PlainVisitor {
            writer,
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
/// between the quotes as it is. Also `log_line`'s.
pub(crate) fn write_quoted(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    if quotes_unchanged(value) {
        out.write_char('"')?;
        out.write_str(value)?;
        out.write_char('"')
    } else {
        write!(out, "{value:?}")
    }
}

/// Printable ASCII: a message the terminal-escape sanitising leaves unchanged. Also
/// `log_line`'s.
pub(crate) fn printable(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b))
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
    use crate::log_line::testing::Captured;

    use super::*;

    #[derive(Debug)]
    struct Broken;
    impl fmt::Display for Broken {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the registry answered 500")
        }
    }
    impl std::error::Error for Broken {}

    #[derive(Debug)]
    struct Outer(Broken);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot resolve \x1b[31mred\x1b[0m")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

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
        let error = Outer(Broken);
        tracing::warn!(
            error = &error as &(dyn std::error::Error + 'static),
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
        assert_eq!(default.lines().count(), 14, "{default}");
        for (d, p) in default.lines().zip(plain.lines()) {
            assert_eq!(d, p);
        }
        assert_eq!(default, plain);
        assert!(
            plain.contains(r#"review endpoint=mutate uid=39f9b946-537c-4e57-992d-0eddda10c503 namespace=team-a dry_run=false result="pinned" pinned=3 would_pin=0 offset=-4 origins="#),
            "{plain}"
        );
    }

    #[test]
    fn with_colours_the_fields_are_default_fields_own() {
        assert_eq!(
            lines(DefaultFields::new(), true),
            lines(PlainFields::new(), true)
        );
    }
}
