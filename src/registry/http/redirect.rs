//! Which redirects pinhook's HTTP client follows: only within the origin (scheme, host and
//! port) the request was sent to, at most [`MAX_REDIRECTS`] in a row. Every other hop is
//! refused before anything is sent to it, with a [`RedirectRefusal`] naming both origins.
//!
//! Why so strict: a redirect is the registry's choice of where pinhook goes next. Within the
//! origin, nothing changes: the host already passed the allow and deny lists and the address
//! guard, the connection's addresses pass the resolver ([`super::dns`]), and the credentials
//! are the ones meant for that host. Another origin would need all of that judged again, and
//! credentials stripped (reqwest drops `Authorization` when scheme, host or port change; a
//! refused hop is never sent at all, so nothing depends on that). HTTPS → HTTP is a
//! downgrade to clear text and never followed.
//!
//! The cost: a registry that answers the manifest GET with a redirect to blob storage on
//! another host (the S3 or GCS pattern, common for blobs, rare for manifests) cannot be
//! resolved through the GET. That GET is only the fallback for a HEAD that lacked a digest;
//! such registries are refused with a clear error rather than followed blindly. A HEAD that
//! is redirected elsewhere falls back to that GET, as any 3xx did before. Redirects of the
//! token request are held to the same rule. The one exception is made above this policy, by
//! the caller: a signature blob redirected to its storage host is followed once, that host
//! judged first as a token realm is, and sent no credential (`client::signatures`); the refusal
//! carries the whole target for it ([`RedirectRefusal::OtherOrigin`]'s `location`, never
//! printed).

use crate::registry::error::Location;
use crate::registry::RedirectRefusal;
use reqwest::redirect::{Attempt, Policy};
use reqwest::Url;

/// How many redirects in a row are followed within one origin.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// The client's redirect policy: [`judge`] on every hop.
pub(crate) fn policy() -> Policy {
    Policy::custom(
        |attempt: Attempt| match judge(attempt.url(), attempt.previous()) {
            Ok(()) => attempt.follow(),
            Err(refusal) => attempt.error(refusal),
        },
    )
}

/// Whether to follow a redirect to `next` after visiting `previous` (the first is the URL the
/// request was sent to, the last the one that answered with the redirect).
fn judge(next: &Url, previous: &[Url]) -> Result<(), RedirectRefusal> {
    let Some(last) = previous.last() else {
        return Ok(());
    };
    let from = origin(last);
    if previous.len() > MAX_REDIRECTS {
        return Err(RedirectRefusal::TooMany {
            from,
            max: MAX_REDIRECTS,
        });
    }
    let to = origin(next);
    if last.scheme() == "https" && next.scheme() != "https" {
        return Err(RedirectRefusal::Downgrade { from, to });
    }
    if from != to {
        return Err(RedirectRefusal::OtherOrigin {
            from,
            to,
            location: Location(next.to_string()),
        });
    }
    Ok(())
}

/// `scheme://host[:port]`, the port only when it is not the scheme's default.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("a URL")
    }

    #[rstest]
    #[case::same_path("https://reg.example/v2/a/manifests/1", "https://reg.example/v2/b/x")]
    #[case::explicit_default_port("https://reg.example/v2/a", "https://reg.example:443/v2/b")]
    #[case::plain_same_origin("http://reg.example:5000/v2/a", "http://reg.example:5000/v2/b")]
    fn redirects_within_the_origin_are_followed(#[case] from: &str, #[case] to: &str) {
        assert_eq!(judge(&url(to), &[url(from)]), Ok(()));
    }

    #[rstest]
    #[case::other_host(
        "https://reg.example/v2/a",
        "https://storage.example/blob?X-Amz-Signature=secret",
        "redirected from https://reg.example to another origin, https://storage.example; \
         pinhook follows redirects only within one scheme, host and port"
    )]
    #[case::other_port(
        "https://127.0.0.1:5000/v2/a",
        "https://127.0.0.1:5001/v2/a",
        "redirected from https://127.0.0.1:5000 to another origin, https://127.0.0.1:5001; \
         pinhook follows redirects only within one scheme, host and port"
    )]
    #[case::downgrade(
        "https://reg.example/v2/a",
        "http://reg.example/v2/a",
        "redirected from https://reg.example to http://reg.example, a downgrade to clear text; \
         pinhook never follows https to http"
    )]
    #[case::upgrade_is_another_origin(
        "http://reg.example/v2/a",
        "https://reg.example/v2/a",
        "redirected from http://reg.example to another origin, https://reg.example; pinhook \
         follows redirects only within one scheme, host and port"
    )]
    fn redirects_elsewhere_are_refused_naming_origins_only(
        #[case] from: &str,
        #[case] to: &str,
        #[case] message: &str,
    ) {
        let refusal = judge(&url(to), &[url(from)]).expect_err("refused");
        assert_eq!(refusal.to_string(), message);
        assert!(!message.contains("secret"));
    }

    #[test]
    fn a_redirect_loop_within_the_origin_stops() {
        let hop = url("https://reg.example/v2/a");
        let visited = vec![hop.clone(); MAX_REDIRECTS];
        assert_eq!(judge(&hop, &visited), Ok(()));
        let visited = vec![hop.clone(); MAX_REDIRECTS + 1];
        assert!(matches!(
            judge(&hop, &visited),
            Err(RedirectRefusal::TooMany { .. })
        ));
    }
}
