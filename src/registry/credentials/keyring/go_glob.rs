//! Go's `path/filepath.Match` on Unix, byte for byte: kubelet matches each label of a keyring
//! key's host against the image's with it (`*.example.com`), so its quirks decide which key
//! matches which image.
//!
//! Pure: no I/O; a malformed pattern is an error value, never a panic.

/// `filepath.Match` was handed a malformed pattern.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct BadPattern;

const SEPARATOR: u8 = b'/';
const RUNE_ERROR: u32 = 0xFFFD;

/// Go's `filepath.Match(pattern, name)` on Unix: `*` (any run of non-`/` bytes), `?` (one
/// character), `[...]` / `[^...]` classes with ranges, `\` escapes. Works on bytes, decoding
/// UTF-8 where Go decodes runes; like Go, reports a malformed pattern only when it gets that far.
pub(super) fn go_filepath_match(mut pattern: &[u8], mut name: &[u8]) -> Result<bool, BadPattern> {
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing * matches the rest of the name unless it has a separator.
            return Ok(!name.contains(&SEPARATOR));
        }
        // Look for a match at the current position.
        match match_chunk(chunk, name) {
            // The last chunk must use up the name; otherwise a star may still do it.
            Ok(Some(t)) if t.is_empty() || !pattern.is_empty() => {
                name = t;
                continue;
            }
            Err(err) => return Err(err),
            _ => {}
        }
        if star {
            // Look for a match skipping i+1 bytes; the star cannot skip a separator.
            let mut i = 0;
            while i < name.len() && name[i] != SEPARATOR {
                match match_chunk(chunk, &name[i + 1..]) {
                    Ok(Some(t)) => {
                        if pattern.is_empty() && !t.is_empty() {
                            i += 1;
                            continue;
                        }
                        name = t;
                        continue 'pattern;
                    }
                    Err(err) => return Err(err),
                    Ok(None) => {}
                }
                i += 1;
            }
        }
        // Before reporting no match, check the rest of the pattern is well formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// `scanChunk`: leading stars, then everything up to the next star outside a class.
fn scan_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while let Some((&b'*', rest)) = pattern.split_first() {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            // An error check for a trailing backslash happens in match_chunk.
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// `matchChunk`: the rest of `s` after matching `chunk` at its start, `None` for no match. Goes
/// on checking the chunk's syntax after a mismatch, as Go does.
fn match_chunk<'a>(mut chunk: &[u8], mut s: &'a [u8]) -> Result<Option<&'a [u8]>, BadPattern> {
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            b'[' => {
                let mut r = 0;
                if !failed {
                    let (rune, n) = decode_rune(s);
                    r = rune;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let mut negated = false;
                if let Some((&b'^', rest)) = chunk.split_first() {
                    negated = true;
                    chunk = rest;
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if ranges > 0 {
                        if let Some((&b']', rest)) = chunk.split_first() {
                            chunk = rest;
                            break;
                        }
                    }
                    let (lo, rest) = get_esc(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let Some((&b'-', rest)) = chunk.split_first() {
                        let (h, rest) = get_esc(rest)?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s.first() == Some(&SEPARATOR) {
                        failed = true;
                    }
                    let (_, n) = decode_rune(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if c == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(BadPattern);
                    }
                }
                if !failed {
                    if chunk.first() != s.first() {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// `getEsc`: one possibly escaped character of a class, and what follows it (which must not be
/// empty: a class needs its `]`).
fn get_esc(chunk: &[u8]) -> Result<(u32, &[u8]), BadPattern> {
    let mut chunk = match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(_) => chunk,
    };
    if chunk[0] == b'\\' {
        chunk = &chunk[1..];
        if chunk.is_empty() {
            return Err(BadPattern);
        }
    }
    let (r, n) = decode_rune(chunk);
    let rest = &chunk[n..];
    if (r == RUNE_ERROR && n == 1) || rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}

/// Go's `utf8.DecodeRune`: the first character and its length; `(RuneError, 1)` for a byte that
/// starts no valid UTF-8 sequence, `(RuneError, 0)` for empty input.
fn decode_rune(s: &[u8]) -> (u32, usize) {
    if s.is_empty() {
        return (RUNE_ERROR, 0);
    }
    for len in 1..=s.len().min(4) {
        if let Ok(text) = std::str::from_utf8(&s[..len]) {
            if let Some(c) = text.chars().next() {
                return (u32::from(c), len);
            }
        }
    }
    (RUNE_ERROR, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    // Cases from Go's own tests.
    #[rstest]
    #[case("abc", "abc", Ok(true))]
    #[case("*", "abc", Ok(true))]
    #[case("*c", "abc", Ok(true))]
    #[case("a*", "a", Ok(true))]
    #[case("a*", "abc", Ok(true))]
    #[case("a*", "ab/c", Ok(false))]
    #[case("a*/b", "abc/b", Ok(true))]
    #[case("a*/b", "a/c/b", Ok(false))]
    #[case("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true))]
    #[case("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true))]
    #[case("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false))]
    #[case("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false))]
    #[case("a*b?c*x", "abxbbxdbxebxczzx", Ok(true))]
    #[case("a*b?c*x", "abxbbxdbxebxczzy", Ok(false))]
    #[case("ab[c]", "abc", Ok(true))]
    #[case("ab[b-d]", "abc", Ok(true))]
    #[case("ab[e-g]", "abc", Ok(false))]
    #[case("ab[^c]", "abc", Ok(false))]
    #[case("ab[^b-d]", "abc", Ok(false))]
    #[case("ab[^e-g]", "abc", Ok(true))]
    #[case("a\\*b", "a*b", Ok(true))]
    #[case("a\\*b", "ab", Ok(false))]
    #[case("a?b", "a☺b", Ok(true))]
    #[case("a[^a]b", "a☺b", Ok(true))]
    #[case("a???b", "a☺b", Ok(false))]
    #[case("a[^a][^a][^a]b", "a☺b", Ok(false))]
    #[case("[a-ζ]*", "α", Ok(true))]
    #[case("*[a-ζ]", "A", Ok(false))]
    #[case("a?b", "a/b", Ok(false))]
    #[case("a*b", "a/b", Ok(false))]
    #[case("[\\]a]", "]", Ok(true))]
    #[case("[\\-]", "-", Ok(true))]
    #[case("[x\\-]", "x", Ok(true))]
    #[case("[x\\-]", "-", Ok(true))]
    #[case("[x\\-]", "z", Ok(false))]
    #[case("[\\-x]", "x", Ok(true))]
    #[case("[\\-x]", "-", Ok(true))]
    #[case("[\\-x]", "a", Ok(false))]
    #[case("[]a]", "]", Err(BadPattern))]
    #[case("[-]", "-", Err(BadPattern))]
    #[case("[x-]", "x", Err(BadPattern))]
    #[case("[x-]", "-", Err(BadPattern))]
    #[case("[x-]", "z", Err(BadPattern))]
    #[case("[-x]", "x", Err(BadPattern))]
    #[case("[-x]", "-", Err(BadPattern))]
    #[case("[-x]", "a", Err(BadPattern))]
    #[case("\\", "a", Err(BadPattern))]
    #[case("[a-b-c]", "a", Err(BadPattern))]
    #[case("[", "a", Err(BadPattern))]
    #[case("[^", "a", Err(BadPattern))]
    #[case("[^bc", "a", Err(BadPattern))]
    #[case("a[", "a", Err(BadPattern))]
    #[case("a[", "ab", Err(BadPattern))]
    #[case("a[", "x", Err(BadPattern))]
    #[case("a/b[", "x", Err(BadPattern))]
    #[case("*x", "xxx", Ok(true))]
    fn filepath_match(
        #[case] pattern: &str,
        #[case] name: &str,
        #[case] expected: Result<bool, BadPattern>,
    ) {
        assert_eq!(
            go_filepath_match(pattern.as_bytes(), name.as_bytes()),
            expected
        );
    }
}
