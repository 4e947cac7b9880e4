//! Glob patterns for image and namespace exemptions and registry lists: `*` matches any run of
//! characters (including `/` and `:`), `?` exactly one. Everything else is literal.

/// True when `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    // ASCII (every registry host and image name) is matched in place; otherwise by `char`, so
    // `?` stands for one character, not one byte.
    if pattern.is_ascii() && text.is_ascii() {
        return matches_units(pattern.as_bytes(), text.as_bytes(), b'*', b'?');
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    matches_units(&pattern, &text, '*', '?')
}

/// Classic linear-time wildcard matching with one backtrack point.
fn matches_units<T: Copy + PartialEq>(pattern: &[T], text: &[T], any_run: T, any_one: T) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(&c) if c == any_run => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == any_one || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..]
        .iter()
        .all(|&c| c == any_run)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards() {
        assert!(matches(
            "registry.k8s.io/pause:*",
            "registry.k8s.io/pause:3.9"
        ));
        assert!(matches("*", ""));
        assert!(matches(
            "docker.io/library/*",
            "docker.io/library/nginx:1.25"
        ));
        assert!(!matches("docker.io/library/*", "docker.io/bitnami/nginx:1"));
        assert!(matches("*.example.com", "a.b.example.com"));
        assert!(matches("kube-?", "kube-a"));
        assert!(!matches("kube-?", "kube-ab"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
    }

    /// Outside ASCII `?` is one character, not one byte, and a literal matches only itself.
    #[test]
    fn non_ascii_is_matched_by_character() {
        assert!(matches("kube-?", "kube-é"));
        assert!(!matches("kube-??", "kube-é"));
        assert!(matches("ns-*", "ns-日本"));
        assert!(matches("ns-日?", "ns-日本"));
        assert!(!matches("ns-日", "ns-本"));
    }
}
