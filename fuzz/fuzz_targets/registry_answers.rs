//! What a hostile registry and its token realm answer: the input is a sequence of raw HTTP/1.1
//! responses separated by `\n=====\n` lines, served in order by a listener on 127.0.0.1 (one
//! per connection, then the connection is closed; `404` once they run out), while pinhook's
//! registry resolver (`registry::OciResolver`, plain HTTP, no address guard) resolves
//! `127.0.0.1:<port>/team/app:1` with a Basic credential and then anonymously. That runs the
//! manifest HEAD's judgement, the WWW-Authenticate challenge parser, the token answer, the
//! manifest GET with its digest check and bounded body reads, and the error-body parser, none of
//! which is public on its own (`registry::{head, token, get, body}` are private modules). The
//! answers left then go to the signature fetch of a fixed digest (`signatures_with`: the
//! signature manifest, at most 16 layers, each payload checked against its descriptor; the
//! referrers API or the referrers tag, at most 16 bundles, each manifest and bundle checked
//! against its descriptor) and the verdict on what it returns for a fixed key
//! (`signatures::judge_all`).
//! `@HOST@` in an answer becomes `127.0.0.1:<port>`, so a challenge's realm can point back here.
#![no_main]

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pinhook::reference::Reference;
use pinhook::registry::{Credential, FetchedLayer, OciResolver, RegistryConfig, Resolver};
use pinhook::signatures::{judge_all, PublicKey, SignatureLayer, Trust};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

const SEPARATOR: &str = "\n=====\n";
const USER: &str = "fuzz-user";
const PASSWORD: &str = "pw-7Qz3xK9";
/// base64 of `fuzz-user:pw-7Qz3xK9`, the Basic authorization's payload.
const BASIC: &str = "ZnV6ei11c2VyOnB3LTdRejN4Szk=";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

struct Registry {
    runtime: Runtime,
    host: String,
    answers: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        pinhook::install_crypto_provider();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback listener");
        let host = format!("127.0.0.1:{}", listener.local_addr().expect("bound").port());
        let answers: Arc<Mutex<VecDeque<Vec<u8>>>> = Arc::default();
        let queue = answers.clone();
        runtime.spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let queue = queue.clone();
                tokio::spawn(async move {
                    // Read the request head (GET and HEAD carry no body), then answer.
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    // A TLS ClientHello (an `https://` realm) or a stalled client is dropped
                    // at once rather than left to pinhook's request timeout.
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65536 {
                        let read = stream.read(&mut buf);
                        match tokio::time::timeout(Duration::from_millis(200), read).await {
                            Ok(Ok(n)) if n > 0 => request.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                        if request.first() == Some(&0x16) {
                            return;
                        }
                    }
                    let answer = queue.lock().expect("not poisoned").pop_front();
                    let answer = answer.unwrap_or_else(|| NOT_FOUND.to_vec());
                    let _ = stream.write_all(&answer).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Registry {
            runtime,
            host,
            answers,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let registry = registry();
    let text = String::from_utf8_lossy(data).replace("@HOST@", &registry.host);
    {
        let mut answers = registry.answers.lock().expect("not poisoned");
        answers.clear();
        answers.extend(
            text.split(SEPARATOR)
                .take(12)
                .map(|a| a.as_bytes().to_vec()),
        );
    }
    let config = RegistryConfig {
        insecure_hosts: HashSet::from([registry.host.clone()]),
        request_timeout: Duration::from_secs(2),
        only_configured_cas: true,
        ..RegistryConfig::default()
    };
    let resolver = OciResolver::new(config).expect("a resolver without system roots");
    let reference =
        Reference::parse(&format!("{}/team/app:1", registry.host)).expect("a valid reference");
    let credentials = [Credential::basic(USER, PASSWORD)];
    let result = registry.runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(8),
            resolver.resolve(&reference, &credentials),
        )
        .await
    });
    match result {
        Ok(Ok(resolution)) => {
            let _ = resolution.digest.to_string();
        }
        Ok(Err(e)) => {
            let message = pinhook::error::error_chain(&e);
            // Never: a password in an error message (token.rs, client.rs), unless the registry
            // itself wrote it into its answer.
            for secret in [PASSWORD, BASIC] {
                if !text.contains(secret) {
                    assert!(!message.contains(secret), "credential in error: {message}");
                }
            }
            let _ = (e.kind(), e.is_unavailable(), e.is_auth_or_not_found());
        }
        Err(_) => panic!("resolution took more than 8 s against a registry that always answers"),
    }
    // Then the answers left, to the signature fetch of a digest (issue 46): the manifest at
    // `sha256-<hex>.sig`, its layers' payloads, and the verdict on them for a fixed key.
    let digest = pinhook::reference::Digest::sha256_of(b"fuzz");
    let signatures = registry.runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(8),
            resolver.signatures_with(&reference, &digest, &credentials[0], &|_| false),
        )
        .await
    });
    match signatures {
        Ok(Ok(found)) => {
            assert!(found.layers.len() <= 16, "more signature layers than pinhook reads");
            assert!(found.bundles.len() <= 16, "more signature bundles than pinhook reads");
            let layers: Vec<SignatureLayer<'_>> =
                found.layers.iter().map(FetchedLayer::as_layer).collect();
            let bundles: Vec<&[u8]> = found.bundles.iter().map(Vec::as_slice).collect();
            let verdict = judge_all(&layers, &bundles, &Trust::of_keys(vec![key().clone()]), &digest);
            assert!(!verdict.describe().contains('\n'), "{verdict:?}");
        }
        Ok(Err(e)) => {
            let message = pinhook::error::error_chain(&e);
            assert!(!message.contains('\n') || text.contains('\n'), "{message}");
        }
        Err(_) => panic!("signature fetch took more than 8 s against a registry that always answers"),
    }
});

/// A fixed P-256 public key the verdicts are judged against.
fn key() -> &'static PublicKey {
    static KEY: OnceLock<PublicKey> = OnceLock::new();
    KEY.get_or_init(|| {
        PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu\nOSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==\n-----END PUBLIC KEY-----\n",
        )
        .expect("sigstore-rs's test key parses")
    })
}
