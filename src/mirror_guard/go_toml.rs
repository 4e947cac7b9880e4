//! Reading a parsed TOML tree the way the Go decoders on the node do: which key a struct field
//! takes, and which value types it accepts.
//!
//! Two decoders matter. containers/image (CRI-O, podman) decodes registries.conf with
//! BurntSushi/toml, whose `unifyStruct` takes a key for a field when it is the field's name
//! exactly, **or else when `strings.EqualFold` says so** (Unicode simple folding: `Registry`,
//! `PREFIX`, `ſhort-name-mode` with a long s, a Kelvin sign for `k`). containerd decodes
//! hosts.toml with pelletier/go-toml v2, whose `structFieldPath` tries the key exactly and then
//! `strings.ToLower(key)` (so `Server` and a Kelvin sign count, a long s does not).
//!
//! Owns: those two matching rules for ASCII field names, a table view that returns the value(s)
//! a field takes with their byte offsets, and BurntSushi's type checks for the value kinds
//! registries.conf uses (string, bool, array of strings, table, array of tables, map of
//! strings). Unknown keys are skipped, as both decoders skip them. When two keys of one table
//! fold to the same field (`prefix` and `Prefix`), BurntSushi assigns them in Go map order,
//! which is random: [`Table::get`] refuses that, since CRI-O could read either.
//!
//! Pure: never does I/O.

use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

/// Which Go decoder's key matching to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keys {
    /// BurntSushi/toml: exact, else `strings.EqualFold`.
    BurntSushi,
    /// pelletier/go-toml v2: exact, else `strings.ToLower(key)` equals the field.
    GoToml,
}

/// A value containers/image's decoder would refuse, with the byte offset of the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DecodeError {
    pub(super) offset: usize,
    pub(super) message: String,
}

/// One entry of a map of strings: key as written, value, offset of the key.
pub(super) type MapEntry<'t> = (&'t str, &'t str, usize);

/// One key/value pair of a table.
pub(super) type Entry<'t, 'i> = (&'t Spanned<DeString<'i>>, &'t Spanned<DeValue<'i>>);

/// A table of the document and its dotted path (`registry[0]`), for messages.
#[derive(Debug, Clone)]
pub(super) struct Table<'t, 'i> {
    table: &'t DeTable<'i>,
    path: String,
}

/// Go's `strings.EqualFold(key, field)` for an ASCII `field`: rune by rune, each rune of `key`
/// must be in the simple case-folding orbit of the field's rune. The only non-ASCII runes whose
/// orbit holds an ASCII letter are U+017F (ſ, with `s`) and U+212A (Kelvin sign, with `k`).
pub(super) fn equal_fold(key: &str, field: &str) -> bool {
    let mut key = key.chars();
    for f in field.chars() {
        let Some(k) = key.next() else {
            return false;
        };
        let same = k.eq_ignore_ascii_case(&f)
            || (k == '\u{17f}' && f.eq_ignore_ascii_case(&'s'))
            || (k == '\u{212a}' && f.eq_ignore_ascii_case(&'k'));
        if !same {
            return false;
        }
    }
    key.next().is_none()
}

/// go-toml v2's fallback: `strings.ToLower(key) == field` for a lowercase ASCII `field`. Go's
/// `unicode.ToLower` maps U+212A (Kelvin sign) to `k` and U+0130 (dotted capital I) to `i`;
/// no other non-ASCII rune lowers to ASCII.
pub(super) fn lower_eq(key: &str, field: &str) -> bool {
    let mut key = key.chars();
    for f in field.chars() {
        let Some(k) = key.next() else {
            return false;
        };
        let lowered = match k {
            '\u{212a}' => 'k',
            '\u{130}' => 'i',
            k => k.to_ascii_lowercase(),
        };
        if lowered != f {
            return false;
        }
    }
    key.next().is_none()
}

/// Whether the decoder takes `key` for `field`.
pub(super) fn takes(keys: Keys, key: &str, field: &str) -> bool {
    key == field
        || match keys {
            Keys::BurntSushi => equal_fold(key, field),
            Keys::GoToml => lower_eq(key, field),
        }
}

/// The name a TOML value has in messages (`string`, `array` …).
pub(super) fn type_name(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "string",
        DeValue::Integer(_) => "integer",
        DeValue::Float(_) => "float",
        DeValue::Boolean(_) => "boolean",
        DeValue::Datetime(_) => "datetime",
        DeValue::Array(_) => "array",
        DeValue::Table(_) => "table",
    }
}

/// `a` or `an` for a type name.
fn article(name: &str) -> &'static str {
    if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    line_column(text, offset).0
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

// === impl Table ===

impl<'t, 'i> Table<'t, 'i> {
    pub(super) fn new(table: &'t DeTable<'i>, path: impl Into<String>) -> Self {
        Table {
            table,
            path: path.into(),
        }
    }

    /// Every entry the decoder gives to `field`, in document order.
    pub(super) fn entries(&self, keys: Keys, field: &str) -> Vec<Entry<'t, 'i>> {
        let mut found: Vec<Entry<'t, 'i>> = self
            .table
            .iter()
            .filter(|(k, _)| takes(keys, k.get_ref(), field))
            .collect();
        found.sort_by_key(|(k, _)| k.span().start);
        found
    }

    /// The one entry BurntSushi/toml gives to `field`. Two keys that both fold to it are
    /// refused: BurntSushi assigns them in random (Go map) order.
    pub(super) fn get(&self, field: &str) -> Result<Option<Entry<'t, 'i>>, DecodeError> {
        let found = self.entries(Keys::BurntSushi, field);
        match found.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            [first, second, ..] => Err(DecodeError {
                offset: second.0.span().start,
                message: format!(
                    "keys {:?} and {:?} of {} both set {field}: BurntSushi/toml matches keys \
                     case-insensitively and applies them in random order, so CRI-O could read \
                     either; keep one",
                    first.0.get_ref().as_ref(),
                    second.0.get_ref().as_ref(),
                    self.describe(),
                ),
            }),
        }
    }

    /// A string field.
    pub(super) fn string(&self, field: &str) -> Result<Option<(&'t str, usize)>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        match value.get_ref() {
            DeValue::String(s) => Ok(Some((s.as_ref(), value.span().start))),
            other => Err(self.mismatch(key, value, other, "a string")),
        }
    }

    /// A boolean field.
    pub(super) fn bool(&self, field: &str) -> Result<Option<bool>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        match value.get_ref() {
            DeValue::Boolean(b) => Ok(Some(*b)),
            other => Err(self.mismatch(key, value, other, "a boolean")),
        }
    }

    /// An array of strings, each with its offset. `Some(empty)` for `[]`: the field is set.
    pub(super) fn strings(
        &self,
        field: &str,
    ) -> Result<Option<Vec<(&'t str, usize)>>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.mismatch(key, value, value.get_ref(), "an array of strings"));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push((s.as_ref(), item.span().start)),
                other => return Err(self.mismatch(key, item, other, "an array of strings")),
            }
        }
        Ok(Some(out))
    }

    /// A table field (`[registries]`, `aliases = {…}`).
    pub(super) fn table(&self, field: &str) -> Result<Option<(Table<'t, 'i>, usize)>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        match value.get_ref() {
            DeValue::Table(t) => Ok(Some((
                Table::new(t, self.child(key.get_ref())),
                key.span().start,
            ))),
            other => Err(self.mismatch(key, value, other, "a table")),
        }
    }

    /// An array of tables (`[[registry]]`), each with the offset of its header.
    pub(super) fn tables(
        &self,
        field: &str,
    ) -> Result<Option<Vec<(Table<'t, 'i>, usize)>>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.mismatch(key, value, value.get_ref(), "an array of tables"));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item.get_ref() {
                DeValue::Table(t) => out.push((
                    Table::new(t, format!("{}[{i}]", self.child(key.get_ref()))),
                    item.span().start,
                )),
                other => return Err(self.mismatch(key, item, other, "an array of tables")),
            }
        }
        Ok(Some(out))
    }

    /// A map of strings (`[aliases]`): keys as written (maps do no folding), values with their
    /// offsets, in document order.
    pub(super) fn string_map(&self, field: &str) -> Result<Option<Vec<MapEntry<'t>>>, DecodeError> {
        let Some((key, value)) = self.get(field)? else {
            return Ok(None);
        };
        let DeValue::Table(t) = value.get_ref() else {
            return Err(self.mismatch(key, value, value.get_ref(), "a table of strings"));
        };
        let mut out = Vec::with_capacity(t.len());
        for (k, v) in t.iter() {
            match v.get_ref() {
                DeValue::String(s) => out.push((k.get_ref().as_ref(), s.as_ref(), k.span().start)),
                other => return Err(self.mismatch(key, v, other, "a table of strings")),
            }
        }
        out.sort_by_key(|&(_, _, offset)| offset);
        Ok(Some(out))
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn describe(&self) -> String {
        if self.path.is_empty() {
            "the top level".to_string()
        } else {
            self.path.clone()
        }
    }

    fn mismatch(
        &self,
        key: &Spanned<DeString<'_>>,
        at: &Spanned<DeValue<'_>>,
        found: &DeValue<'_>,
        expected: &str,
    ) -> DecodeError {
        DecodeError {
            offset: at.span().start,
            message: format!(
                "{} must be {expected}, not {} {} (BurntSushi/toml refuses to decode it)",
                self.child(key.get_ref()),
                article(type_name(found)),
                type_name(found),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::exact("registry", "registry", true)]
    #[case::upper("REGISTRY", "registry", true)]
    #[case::mixed("Mirror-By-Digest-Only", "mirror-by-digest-only", true)]
    #[case::long_s("\u{17f}hort-name-mode", "short-name-mode", true)]
    #[case::long_s_upper_field("PREFIX", "prefix", true)]
    #[case::kelvin("bloc\u{212a}ed", "blocked", true)]
    #[case::dotted_capital_i_is_not_in_the_orbit("\u{130}nsecure", "insecure", false)]
    #[case::dotless_i_is_not_in_the_orbit("\u{131}nsecure", "insecure", false)]
    #[case::shorter("registr", "registry", false)]
    #[case::longer("registrys", "registry", false)]
    #[case::dash_is_literal("mirror_by_digest_only", "mirror-by-digest-only", false)]
    fn equal_fold_is_go_strings_equal_fold(
        #[case] key: &str,
        #[case] field: &str,
        #[case] want: bool,
    ) {
        assert_eq!(equal_fold(key, field), want, "{key:?} vs {field:?}");
    }

    #[rstest]
    #[case::exact("server", "server", true)]
    #[case::upper("SERVER", "server", true)]
    #[case::kelvin("s\u{212a}ip_verify", "skip_verify", true)]
    #[case::dotted_capital_i("capab\u{130}lities", "capabilities", true)]
    #[case::long_s_is_already_lowercase("\u{17f}erver", "server", false)]
    fn lower_eq_is_go_toml_v2_to_lower(#[case] key: &str, #[case] field: &str, #[case] want: bool) {
        assert_eq!(lower_eq(key, field), want, "{key:?} vs {field:?}");
    }

    fn with_table<T>(text: &str, f: impl FnOnce(Table<'_, '_>) -> T) -> T {
        let doc = DeTable::parse(text).expect("valid TOML");
        f(Table::new(doc.get_ref(), ""))
    }

    #[test]
    fn a_folded_key_is_the_field() {
        with_table("Short-Name-Mode = \"enforcing\"\n", |t| {
            assert_eq!(
                t.string("short-name-mode").expect("string"),
                Some(("enforcing", 18))
            );
        });
    }

    #[test]
    fn two_keys_for_one_field_are_refused_naming_both() {
        with_table("prefix = \"a\"\nPrefix = \"b\"\n", |t| {
            let err = t.string("prefix").expect_err("ambiguous");
            assert_eq!(line_of("prefix = \"a\"\nPrefix = \"b\"\n", err.offset), 2);
            assert_eq!(
                err.message,
                "keys \"prefix\" and \"Prefix\" of the top level both set prefix: BurntSushi/toml \
                 matches keys case-insensitively and applies them in random order, so CRI-O \
                 could read either; keep one"
            );
        });
    }

    #[rstest]
    #[case::bool_as_string("blocked = \"yes\"\n", "blocked must be a boolean, not a string")]
    #[case::array_of_tables_as_table(
        "[registry]\nx = 1\n",
        "registry must be an array of tables, not a table"
    )]
    #[case::string_array_with_int(
        "credential-helpers = [\"a\", 1]\n",
        "credential-helpers must be an array of strings, not an integer"
    )]
    fn type_mismatches_name_the_key(#[case] text: &str, #[case] want: &str) {
        with_table(text, |t| {
            let err = match want.split(' ').next() {
                Some("blocked") => t.bool("blocked").map(|_| ()),
                Some("registry") => t.tables("registry").map(|_| ()),
                _ => t.strings("credential-helpers").map(|_| ()),
            }
            .expect_err("type mismatch");
            assert_eq!(
                err.message,
                format!("{want} (BurntSushi/toml refuses to decode it)")
            );
        });
    }
}
