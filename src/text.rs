//! Text from outside, made safe to show a person: one line, with every character that could
//! forge a line, carry terminal codes or make text show other than it reads escaped
//! ([`one_line`], [`write_escaped`], [`hides_text`]). The one sanitiser of outside text: logs
//! (`log::fields`, `log::line`, `log::json`), the CLI's output, the messages, warnings and audit
//! annotations pinhook answers the apiserver with, its Events and its reports.
//!
//! Owns: what is escaped and how. Never: writes a log line (that is `log::fields`).

use std::fmt;

/// Whether `text` may hold a character [`write_escaped`] escapes: a byte below 0x20, DEL, or
/// the first byte of U+0080–U+00BF (C1 controls), of U+0600–U+063F (U+061C), of U+2000–U+2FFF
/// (the line and paragraph separators, the bidirectional controls and zero-width characters)
/// or of U+F000–U+FFFF (U+FEFF). A scan of bytes, so plain text costs one pass and no
/// decoding. Also `log::line`'s.
pub(crate) fn may_escape(text: &str) -> bool {
    text.bytes().any(|b| MAY_START_ESCAPE[usize::from(b)])
}

/// C0 and [`ESCAPE_LEADS`], as a table: one load per byte on the path every value takes.
const MAY_START_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    let mut i = 0;
    while i < ESCAPE_LEADS.len() {
        table[ESCAPE_LEADS[i] as usize] = true;
        i += 1;
    }
    table
};

/// Whether `bytes` hold a byte of [`ESCAPE_LEADS`] (C0 aside): `memchr`'s vector scan, for
/// whole lines.
pub(crate) fn has_escape_lead(bytes: &[u8]) -> bool {
    let [a, b, c, d, e, f, g, h, i, j, k, l] = ESCAPE_LEADS;
    memchr::memchr3(a, b, c, bytes).is_some()
        || memchr::memchr3(d, e, f, bytes).is_some()
        || memchr::memchr3(g, h, i, bytes).is_some()
        || memchr::memchr3(j, k, l, bytes).is_some()
}

/// The bytes that start the UTF-8 of every character [`escapes`] besides C0 controls: DEL;
/// `C2` (C1, U+00AD); `D8`, `DB`, `DC` (the Arabic and Syriac format characters); `E0`, `E1`
/// (U+0890–U+08E2, the Hangul fillers U+115F/U+1160, the Mongolian selectors and separator);
/// `E2` (U+2000–U+2FFF); `E3` (U+3164); `EF` (the variation selectors, U+FEFF, U+FFA0,
/// U+FFF9–U+FFFB); `F0` (the format characters of planes 1–3); `F3` (the tags and the
/// supplementary variation selectors of plane 14).
pub(crate) const ESCAPE_LEADS: [u8; 12] = [
    0x7f, 0xc2, 0xd8, 0xdb, 0xdc, 0xe0, 0xe1, 0xe2, 0xe3, 0xef, 0xf0, 0xf3,
];

/// Whether [`write_escaped`] escapes `c`: a control character (C0, DEL, C1), a Unicode line
/// or paragraph separator, or a character that [`hides_text`].
pub(crate) fn escapes(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}' || hides_text(c)
}

/// Whether `c` makes text show other than it reads: every format character (Unicode's
/// general category Cf, as of Unicode 15.1: the bidirectional controls U+061C, U+200E–U+200F,
/// U+202A–U+202E and U+2066–U+2069, which reorder what follows them on screen, the "Trojan
/// Source" trick, CVE-2021-42574; the zero-width characters; U+00AD; the tag characters
/// U+E0001 and U+E0020–U+E007F, which hide a whole string in one visible one), the Hangul
/// fillers that show as blank (U+115F, U+1160, U+3164, U+FFA0) and the variation selectors
/// (U+180B–U+180D, U+180F, U+FE00–U+FE0F, U+E0100–U+E01EF): each makes two different strings
/// look the same, or one look like another. Escaped wherever pinhook shows text from outside
/// to a person: its logs, the CLI, the messages, warnings and audit annotations it answers the
/// apiserver with (which kubectl prints), and its Events and reports.
pub(crate) fn hides_text(c: char) -> bool {
    matches!(
        c,
        // Cf, every one (Unicode 15.1)
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
            // the Hangul fillers
            | '\u{115f}'
            | '\u{1160}'
            | '\u{3164}'
            | '\u{ffa0}'
            // the variation selectors
            | '\u{180b}'..='\u{180d}'
            | '\u{180f}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{e0100}'..='\u{e01ef}'
    )
}

/// Writes `c` escaped: as `{:?}` escapes it (`\n`, `\u{1b}`, `\u{202e}`), or as `\u{…}` where
/// `{:?}` would leave it as it is (a Hangul filler is a printable letter to Rust).
pub(crate) fn write_char_escaped(out: &mut impl fmt::Write, c: char) -> fmt::Result {
    let mut debug = c.escape_debug();
    match (debug.next(), debug.next()) {
        (Some(only), None) if only == c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        _ => write!(out, "{}", c.escape_debug()),
    }
}

/// `text` with its control characters (C0, DEL, C1), the Unicode line and paragraph
/// separators and the characters that [`hides_text`] escaped as `{:?}` escapes them (`\n`,
/// `\u{1b}`, `\u{2028}`, `\u{202e}`); everything else, quotes included, as it is. Also
/// `log::line`'s.
pub(crate) fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    if !may_escape(text) {
        return out.write_str(text);
    }
    for c in text.chars() {
        if escapes(c) {
            write_char_escaped(out, c)?;
        } else {
            out.write_char(c)?;
        }
    }
    Ok(())
}

/// What `DefaultVisitor` leaves raw in a value: a character [`write_escaped`] escapes, except,
/// in a message or an error's text (`guarded`), the ones tracing's own terminal-escape
/// sanitising already writes escaped (ESC, BEL, BS, FF, DEL, C1).
pub(crate) fn left_raw(text: &str, guarded: bool) -> bool {
    may_escape(text)
        && text.chars().any(|c| {
            let escaped = escapes(c);
            let by_tracing = matches!(c, '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f')
                || ('\u{80}'..='\u{9f}').contains(&c);
            escaped && !(guarded && by_tracing)
        })
}

/// `text` through [`write_escaped`], in a `String`.
pub(crate) fn escaped_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let _ = write_escaped(&mut out, text);
    out
}

/// `text` as one line: its control characters, line separators and characters that
/// [`hides_text`] escaped ([`write_escaped`]), borrowed as it is when it has none. For text from
/// outside that a person reads: what the CLI prints to a terminal (its errors, `pinhook check`'s
/// table and problems, `pinhook inventory`'s table) and what pinhook answers the apiserver with
/// (a denial's message, warnings, audit annotations), which kubectl prints.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if left_raw(text, false) {
        std::borrow::Cow::Owned(escaped_text(text))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// [`one_line`] of an owned `text`, kept as it is (no copy) when it needs nothing: for the
/// cells of the CLI's tables.
pub fn into_one_line(text: String) -> String {
    match one_line(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

/// Printable ASCII: a message the terminal-escape sanitising leaves unchanged. Also
/// `log::line`'s.
pub(crate) fn printable(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b))
}
