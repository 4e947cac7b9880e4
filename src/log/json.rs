//! The JSON log format's writer (`--log-format json`, the chart's default). JSON escapes line
//! breaks and the C0 controls in a string, but leaves DEL, the C1 controls (U+0080–U+009F,
//! among them CSI, U+009B, which some terminals obey), the Unicode line and paragraph
//! separators (which some log viewers break lines at) and the bidirectional controls and
//! invisible characters ([`hides_text`]: a viewer shows the text reordered, or two names
//! alike) as they are. [`JsonEscaping`] writes those as `\u` escapes, which a JSON reader reads
//! back as the same characters, so a value from outside (a review's `uid`, an image, a
//! registry's error) reaches neither a terminal nor a viewer raw. serde_json writes these bytes
//! only inside strings, where the escape means the same; a line without them (nearly every
//! line) is passed on as it is, after a scan of its bytes for the lead bytes of those characters
//! (`text::ESCAPE_LEADS`). [`json_format`] is the
//! subscriber `main` sets up with it, and the one the tests hold.

use std::io;

use tracing_subscriber::fmt::format::{Format, Json, JsonFields};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::text::{has_escape_lead, hides_text, ESCAPE_LEADS};

/// The JSON format's subscriber as `pinhook serve` sets it up: tracing's JSON lines, `filter`,
/// written to `writer` through [`JsonEscaping`].
pub fn json_format<W>(
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> tracing_subscriber::fmt::Subscriber<JsonFields, Format<Json>, EnvFilter, JsonEscaping<W>>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(JsonEscaping(writer))
        .json()
        .finish()
}

/// A [`MakeWriter`] whose writers escape what JSON leaves raw before the bytes reach `M`'s.
#[derive(Debug, Clone)]
pub struct JsonEscaping<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for JsonEscaping<M> {
    type Writer = Escaping<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaping(self.0.make_writer())
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Escaping(self.0.make_writer_for(meta))
    }
}

/// One writer of [`JsonEscaping`]. tracing hands it each formatted line whole.
#[derive(Debug)]
pub struct Escaping<W>(W);

impl<W: io::Write> io::Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !has_escape_lead(buf) {
            return self.0.write(buf);
        }
        self.0.write_all(&escaped(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `line` with DEL, C1 (U+0080–U+009F), U+2028/U+2029 and the characters that [`hides_text`]
/// written as `\u` escapes (a character past U+FFFF as its UTF-16 surrogate pair, as JSON
/// spells it); every other byte as it is. Only a byte of [`ESCAPE_LEADS`] can start one.
fn escaped(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut i = 0;
    while i < line.len() {
        let byte = line[i];
        if byte == 0x7f {
            out.extend_from_slice(b"\\u007f");
            i += 1;
            continue;
        }
        let width = match byte {
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 1,
        };
        let shown = (width > 1 && ESCAPE_LEADS.contains(&byte))
            .then(|| line.get(i..i + width))
            .flatten()
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| text.chars().next())
            .filter(|&c| {
                ('\u{80}'..='\u{9f}').contains(&c)
                    || c == '\u{2028}'
                    || c == '\u{2029}'
                    || hides_text(c)
            });
        match shown {
            Some(c) => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                }
                i += width;
            }
            None => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::log::line::testing::Captured;

    use super::*;

    /// Every character JSON leaves raw that a terminal or a viewer may obey, between text that
    /// must stay as it is (é is `C3 A9`, … is `E2 80 A6`: the same lead bytes).
    const HOSTILE: &str =
        "a\u{7f}b\u{80}c\u{85}d\u{9b}31me\u{9f}f\u{2028}g\u{2029}h é … \u{a0} \n\x1b \
         i\u{202e}j\u{2066}k\u{200b}l\u{feff}m\u{061c}n end";

    const ONE_BY_ONE: [char; 30] = [
        '\u{7f}',
        '\u{80}',
        '\u{85}',
        '\u{9f}',
        '\u{2028}',
        '\u{2029}',
        '\u{061c}',
        '\u{200b}',
        '\u{200f}',
        '\u{202a}',
        '\u{202e}',
        '\u{2060}',
        '\u{2064}',
        '\u{2066}',
        '\u{2069}',
        '\u{feff}',
        // issue 44: every format character, the Hangul fillers, the variation selectors
        '\u{ad}',
        '\u{6dd}',
        '\u{70f}',
        '\u{8e2}',
        '\u{180e}',
        '\u{3164}',
        '\u{ffa0}',
        '\u{fe0f}',
        '\u{fffb}',
        '\u{110bd}',
        '\u{1d173}',
        '\u{e0001}',
        '\u{e0041}',
        '\u{e0100}',
    ];

    fn json_lines(escaping: bool) -> String {
        let captured = Captured::default();
        let emit = || {
            tracing::info!(uid = HOSTILE, image = %HOSTILE, "review");
            tracing::warn!("message {HOSTILE}");
            // Each alone too, so that no one of them relies on another's escaping.
            for c in ONE_BY_ONE {
                tracing::info!(uid = %format!("a{c}b"), "one");
            }
        };
        if escaping {
            // As `main` sets it up.
            let subscriber = json_format(EnvFilter::new("trace"), false, captured.clone());
            tracing::subscriber::with_default(subscriber, emit);
        } else {
            let subscriber = tracing_subscriber::fmt()
                .json()
                .with_ansi(false)
                .with_writer(captured.clone())
                .finish();
            tracing::subscriber::with_default(subscriber, emit);
        }
        captured.text()
    }

    fn raw(text: &str) -> bool {
        text.chars().any(|c| {
            c == '\u{7f}'
                || ('\u{80}'..='\u{9f}').contains(&c)
                || c == '\u{2028}'
                || c == '\u{2029}'
                || hides_text(c)
        })
    }

    #[test]
    fn what_json_leaves_raw_is_escaped_and_reads_back_the_same() {
        // Without it, JSON writes them raw.
        assert!(raw(&json_lines(false)));
        let text = json_lines(true);
        assert!(!raw(&text), "{text:?}");
        assert_eq!(text.lines().count(), 2 + ONE_BY_ONE.len(), "{text}");
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines[0]["fields"]["uid"], HOSTILE);
        assert_eq!(lines[0]["fields"]["image"], HOSTILE);
        assert_eq!(lines[1]["fields"]["message"], format!("message {HOSTILE}"));
        assert!(
            text.contains(r"a\u007fb\u0080c\u0085d\u009b31me\u009ff\u2028g\u2029h é … "),
            "{text}"
        );
        assert!(
            text.contains(r"i\u202ej\u2066k\u200bl\ufeffm\u061cn end"),
            "{text}"
        );
        for (line, c) in lines[2..].iter().zip(ONE_BY_ONE) {
            assert_eq!(line["fields"]["uid"], format!("a{c}b"));
        }
        // Past U+FFFF as JSON spells it: a surrogate pair.
        assert!(text.contains(r#""a\udb40\udc41b""#), "{text}");
    }

    #[test]
    fn text_without_them_is_passed_on_as_it_is() {
        // Text sharing the lead bytes of what is escaped: Arabic (`D8`), … and ⁂ (`E2`), and
        // U+FFFD and fullwidth A (`EF`).
        for line in ["", "{\"a\":\"é … \u{a0} © ⁂ Â ؛ \u{fffd} Ａ\"}\n"] {
            let mut out = Vec::new();
            io::Write::write_all(&mut Escaping(&mut out), line.as_bytes()).unwrap();
            assert_eq!(out, line.as_bytes());
        }
        // A line cut inside a character (tracing writes whole lines) is passed on too.
        let mut out = Vec::new();
        io::Write::write_all(&mut Escaping(&mut out), &[b'a', 0xc2]).unwrap();
        assert_eq!(out, [b'a', 0xc2]);
        for cut in [&[b'a', 0xe2, 0x80][..], &[b'a', 0xd8], &[b'a', 0xef, 0xbb]] {
            let mut out = Vec::new();
            io::Write::write_all(&mut Escaping(&mut out), cut).unwrap();
            assert_eq!(out, cut);
        }
    }
}
