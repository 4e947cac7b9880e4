//! Why a tag could not be resolved: [`RegistryError`], with the transport and answer errors
//! under it, its fixed-vocabulary metric label ([`RegistryError::kind`]) and the two questions
//! every layer asks of it (might another credential succeed; may a last known digest stand in).

use std::time::Duration;

use crate::policy::HostRefusal;

/// Why pinhook will not ask the token realm a registry named for a token.
#[derive(Debug, thiserror::Error)]
pub enum RealmRefusal {
    #[error("registry {registry} named an invalid token realm {realm:?}")]
    Invalid {
        registry: String,
        realm: String,
        #[source]
        problem: UrlError,
    },
    #[error("registry {registry} named a token realm that is not http(s): {realm}")]
    NotHttp { registry: String, realm: String },
    #[error(
        "registry {registry} named a clear-text token realm {realm}; pinhook sends credentials \
         over plain HTTP only to hosts marked insecure"
    )]
    ClearText { registry: String, realm: String },
    #[error("token realm {realm} has no host")]
    NoHost { realm: String },
    /// The internal-address guard refused the realm's host or an address it resolves to.
    #[error("token realm of registry {registry}: {reason}")]
    Refused {
        registry: String,
        reason: HostRefusal,
    },
    /// A registry on public addresses named a realm on a private network.
    #[error(
        "registry {registry} is on public addresses but named a token realm on a private \
         network ({host}); pinhook asks such a realm only for a registry on a private network \
         itself, or when registries.allowPrivate names the realm's host"
    )]
    PrivateForPublic { registry: String, host: String },
    /// The realm's host name did not resolve, so its addresses could not be checked.
    #[error("token realm of registry {registry}: cannot reach registry {host}")]
    Unresolvable {
        registry: String,
        host: String,
        #[source]
        source: std::io::Error,
    },
}

/// What [`reqwest::Url::parse`] fails with.
type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// A redirect pinhook does not follow; the origins only, never a path or query (a signed
/// storage URL carries credentials in its query).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefusal {
    #[error(
        "redirected from {from} to {to}, a downgrade to clear text; pinhook never follows \
         https to http"
    )]
    Downgrade { from: String, to: String },
    #[error(
        "redirected from {from} to another origin, {to}; pinhook follows redirects only within \
         one scheme, host and port"
    )]
    OtherOrigin {
        from: String,
        to: String,
        /// Where the redirect pointed, whole: for the one caller that may follow it (a
        /// signature blob to its storage host), never shown (a signed storage URL carries
        /// credentials in its query).
        location: Location,
    },
    #[error("redirected from {from} to {to}, a host pinhook may not contact: {why}")]
    HostRefused {
        from: String,
        to: String,
        why: String,
    },
    #[error("redirected more than {max} times in a row from {from}")]
    TooMany { from: String, max: usize },
}

/// A redirect's whole target URL, held but never printed, not even by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Location(pub String);

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Location(…)")
    }
}

/// `bytes` for a message: `4 MiB`, `64 KiB`, or bytes when not a whole number of either.
pub(crate) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Why a tag could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tag {tag} not found in {repository}")]
    NotFound { repository: String, tag: String },
    #[error("registry {registry} refused the credentials (unauthorized)")]
    Unauthorized { registry: String },
    #[error("registry {registry} denied access to {repository}")]
    Denied {
        registry: String,
        repository: String,
    },
    #[error("registry {registry} is rate limiting (429 Too Many Requests)")]
    RateLimited { registry: String },
    #[error("registry {registry} answered HTTP {status}: {message}")]
    Status {
        registry: String,
        status: u16,
        message: String,
    },
    #[error("cannot reach registry {registry}")]
    Unreachable {
        registry: String,
        #[source]
        source: TransportError,
    },
    #[error("registry {registry} sent an invalid answer")]
    InvalidResponse {
        registry: String,
        #[source]
        source: AnswerError,
    },
    /// A manifest, token answer or error body over what pinhook reads of it.
    #[error("registry {registry} sent {what} larger than {}, pinhook's limit", size(*.limit))]
    TooLarge {
        registry: String,
        what: &'static str,
        limit: u64,
    },
    #[error("registry {registry} did not answer within {timeout:?}")]
    Timeout { registry: String, timeout: Duration },
    /// pinhook's own bound on what it holds of registries' answers at once was met (not the
    /// registry's failure: nothing is remembered of it).
    #[error("{}", reads_full(registry, *.short))]
    ReadsFull {
        registry: String,
        short: crate::shares::Short,
    },
    #[error("cannot build a registry client for {registry}")]
    ClientConfig {
        registry: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("no system CA bundle found (looked for {looked_at}); install ca-certificates or set SSL_CERT_FILE")]
    NoSystemRoots { looked_at: String },
    /// The registry failed with `last` a moment ago: pinhook waits before asking it again.
    #[error("registry {registry} is failing; not retrying for {retry_in:?}")]
    BackingOff {
        registry: String,
        retry_in: Duration,
        #[source]
        last: std::sync::Arc<RegistryError>,
    },
    /// The registry's breaker is open: it did not answer `silent` calls in a row.
    #[error("registry {registry} did not answer {silent} times in a row; pinhook asks it again in {retry_in:.1?}")]
    NotAnswering {
        registry: String,
        silent: u32,
        retry_in: Duration,
    },
    /// The address guard refused the registry host, or an address its name resolves to.
    #[error("{reason}")]
    Refused { host: String, reason: HostRefusal },
    /// The address guard refused the token realm the registry's challenge named.
    #[error(transparent)]
    RealmRefused(RealmRefusal),
    /// The registry or its token realm redirected a request where pinhook does not follow.
    #[error("registry {registry} {refusal}")]
    Redirected {
        registry: String,
        refusal: RedirectRefusal,
    },
    /// One failure shared by every admission that waited on the same registry call.
    #[error(transparent)]
    Shared(std::sync::Arc<RegistryError>),
    /// Every mirror the policy routes this tag through failed (each failure on one line).
    #[error("no mirror answered for {image}: {failures}")]
    MirrorsFailed { image: String, failures: String },
    /// `verifySource`: the source answered another digest than the mirror.
    #[error("mirror {mirror} says {image} is {mirror_digest} but its source says {source_digest}")]
    MirrorDisagrees {
        image: String,
        mirror: String,
        mirror_digest: String,
        source_digest: String,
    },
    /// `verifySource`: the source answered that the tag or manifest the mirror resolved does
    /// not exist (404, 403, `MANIFEST_UNKNOWN`).
    #[error("mirror {mirror} says {image} is {mirror_digest} but its source says: {source_says}")]
    SourceRefutes {
        image: String,
        mirror: String,
        mirror_digest: String,
        source_says: String,
    },
    /// `verifySource: required`: the source did not confirm the mirror's digest.
    #[error("mirror {mirror} says {image} is {mirror_digest} but its source did not confirm it (verifySource: required): {why}")]
    SourceUnconfirmed {
        image: String,
        mirror: String,
        mirror_digest: String,
        why: String,
    },
    /// The task that called the registry panicked or was cancelled (a bug, never an answer).
    #[error("the registry call for {registry} did not finish")]
    TaskFailed {
        registry: String,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a request got no answer: the HTTP client's error, or the guard's name lookup.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Http(reqwest::Error),
    #[error(transparent)]
    Lookup(std::io::Error),
}

/// Why an answer that arrived cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the token endpoint's answer is not token JSON")]
    TokenJson(#[source] serde_json::Error),
    #[error("the manifest's digest is {computed}, not the {announced} its Docker-Content-Digest header announces")]
    DigestMismatch { announced: String, computed: String },
    #[error("its Docker-Content-Digest header {0:?} is not a digest")]
    DigestHeader(String),
    #[error("the manifest GET answered HTTP {0} instead of 200")]
    UnexpectedStatus(u16),
    /// A signature manifest or payload pinhook does not read (issue 46): named, one line.
    #[error("its signature {0}")]
    Signature(String),
}

/// The words of [`RegistryError::ReadsFull`].
fn reads_full(registry: &str, short: crate::shares::Short) -> String {
    match short {
        crate::shares::Short::Key(bytes) => format!(
            "pinhook holds {} of answers from registry {registry} already; retry",
            size(bytes as u64)
        ),
        crate::shares::Short::Total(bytes) => format!(
            "pinhook holds {} of answers from registries already (reading from {registry}); retry",
            size(bytes as u64)
        ),
    }
}

// === impl RegistryError ===

impl RegistryError {
    /// True when another credential might succeed where this one failed.
    pub fn is_auth_or_not_found(&self) -> bool {
        if let RegistryError::Shared(inner) = self {
            return inner.is_auth_or_not_found();
        }
        matches!(
            self,
            RegistryError::NotFound { .. }
                | RegistryError::Unauthorized { .. }
                | RegistryError::Denied { .. }
        )
    }

    /// A fixed-vocabulary label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::Denied { .. } => "denied",
            RegistryError::RateLimited { .. } => "rate_limited",
            RegistryError::Status { .. } => "status",
            RegistryError::Unreachable { .. } => "unreachable",
            RegistryError::InvalidResponse { .. } => "invalid_response",
            RegistryError::TooLarge { .. } => "too_large",
            RegistryError::Timeout { .. } => "timeout",
            RegistryError::ReadsFull { .. } => "reads_full",
            RegistryError::ClientConfig { .. } | RegistryError::NoSystemRoots { .. } => "config",
            RegistryError::BackingOff { .. } => "backing_off",
            RegistryError::NotAnswering { .. } => "not_answering",
            RegistryError::Refused { .. }
            | RegistryError::RealmRefused(_)
            | RegistryError::Redirected { .. } => "refused",
            RegistryError::Shared(inner) => inner.kind(),
            RegistryError::TaskFailed { .. } => "internal",
            RegistryError::MirrorsFailed { .. } => "mirrors_failed",
            RegistryError::MirrorDisagrees { .. } | RegistryError::SourceRefutes { .. } => {
                "mirror_disagrees"
            }
            RegistryError::SourceUnconfirmed { .. } => "source_unconfirmed",
        }
    }

    /// True when the registry answered that the tag or manifest does not exist, or denied it
    /// (404, `MANIFEST_UNKNOWN`, 403, `DENIED`): an answer, unlike a 401, which may only mean
    /// that pinhook holds no credential for it.
    pub fn says_absent(&self) -> bool {
        match self {
            RegistryError::Shared(inner) => inner.says_absent(),
            RegistryError::NotFound { .. } | RegistryError::Denied { .. } => true,
            RegistryError::Status { status, .. } => *status == 404 || *status == 403,
            _ => false,
        }
    }

    /// True when the registry could not give any answer (down, 5xx, timeout, rate limited):
    /// the cases where a last known digest may be served.
    pub fn is_unavailable(&self) -> bool {
        match self {
            RegistryError::Shared(inner) => inner.is_unavailable(),
            RegistryError::Unreachable { .. }
            | RegistryError::Timeout { .. }
            | RegistryError::RateLimited { .. }
            | RegistryError::BackingOff { .. }
            | RegistryError::NotAnswering { .. } => true,
            RegistryError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::error_chain;

    /// Each new failure reads as one line naming the registry, every cause once.
    #[test]
    fn outbound_failures_name_the_registry_on_one_line() {
        let not_json =
            serde_json::from_slice::<serde_json::Value>(b"<html>").expect_err("not JSON");
        let errors = [
            RegistryError::InvalidResponse {
                registry: "reg.example".into(),
                source: AnswerError::TokenJson(not_json),
            },
            RegistryError::Redirected {
                registry: "reg.example".into(),
                refusal: RedirectRefusal::TooMany {
                    from: "https://reg.example".into(),
                    max: 5,
                },
            },
            RegistryError::TooLarge {
                registry: "reg.example".into(),
                what: "a manifest",
                limit: 4 << 20,
            },
        ];
        let chains: Vec<String> = errors.iter().map(|e| error_chain(e)).collect();
        assert_eq!(
            chains,
            [
                "registry reg.example sent an invalid answer: the token endpoint's answer is not \
                 token JSON: expected value at line 1 column 1",
                "registry reg.example redirected more than 5 times in a row from \
                 https://reg.example",
                "registry reg.example sent a manifest larger than 4 MiB, pinhook's limit",
            ]
        );
    }
}
