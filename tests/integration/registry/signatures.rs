//! An image's cosign signatures (issue 46), signed here with test keys (the `sigstore` crate's
//! signer, as `cosign sign --key` signs), pushed to the real test registry in cosign's tag
//! scheme, fetched through pinhook's own registry client (bearer tokens, bounded reads) and
//! judged against the digest pinned: signed by the right key, by another key, not signed, and
//! a signature of another digest; hostile signature manifests refused on one line. cosign 3's
//! bundles, found through the referrers tag of the real registry (it has no referrers API) and
//! through the referrers API of a scripted stand-in, keyed and keyless.

use pinhook::reference::Digest;
use pinhook::signatures::simple_signing::{payload_for, SIGNATURE_ANNOTATION};
use pinhook::signatures::{judge_all, signature_tag, SignatureLayer, Trust, Verdict};
use serde_json::json;

use crate::common::images;
use crate::common::pinhook::registry_config;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::resolving::{reference, resolver};
use crate::common::signing::{
    key_pair, push_referrers, push_signatures, signed, Referrer, BUNDLE, COSIGN_SIGN, OCI_MANIFEST,
};
use crate::common::sigstore_authority::{key_bundle, statement, TestSigstore};
use crate::common::stand_in::{guarded_resolver, StandIn};
use crate::common::tls::TestCa;
use axum::http::{header, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::Router;
use pinhook::registry::{Credential, FetchedLayer, OciResolver};
use pinhook::signatures::{Identity, Keyless, Matcher, PublicKey, TrustedRoot};
use std::sync::Arc;

const USER: &str = "robot";
const PASS: &str = "s1gn-pass";

async fn verdict(resolver: &OciResolver, image: &str, digest: &str, trust: &Trust) -> Verdict {
    let digest: Digest = digest.parse().unwrap();
    let found = resolver
        .signatures_with(
            &reference(image),
            &digest,
            &Credential::basic(USER, PASS),
            &|_| false,
        )
        .await
        .expect("fetched");
    let layers: Vec<SignatureLayer<'_>> = found.layers.iter().map(FetchedLayer::as_layer).collect();
    let bundles: Vec<&[u8]> = found.bundles.iter().map(Vec::as_slice).collect();
    judge_all(&layers, &bundles, trust, &digest)
}

#[tokio::test]
async fn signatures_are_fetched_with_the_images_credentials_and_bound_to_its_digest() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let signed_image = images::push_multi_arch(&registry, "team/app", "1.0", "sig-1").await;
    let unsigned = images::push_multi_arch(&registry, "team/app", "2.0", "sig-2").await;
    let moved = images::push_multi_arch(&registry, "team/app", "3.0", "sig-3").await;
    let (signer, key) = key_pair();
    let (_, other_key) = key_pair();
    let repository = format!("{}/team/app", registry.host());

    // 1.0: signed by our key, for its index digest (what pinhook pins).
    let payload = payload_for(&repository, &signed_image.index_digest.parse().unwrap());
    let signature = signed(&signer, &payload);
    push_signatures(
        &registry,
        "team/app",
        &signed_image.index_digest,
        &[(payload.clone(), signature.clone())],
    )
    .await;
    // 3.0: its signature manifest holds 1.0's signature (a signature copied to another digest,
    // or a tag moved after it was signed).
    push_signatures(
        &registry,
        "team/app",
        &moved.index_digest,
        &[(payload, signature)],
    )
    .await;

    let resolver = resolver(registry_config(&registry));
    let keys = &Trust::of_keys(vec![key.clone()]);
    assert_eq!(
        verdict(
            &resolver,
            &signed_image.reference,
            &signed_image.index_digest,
            keys
        )
        .await,
        Verdict::Verified {
            signer: format!("key {}", key.fingerprint()).into()
        }
    );
    assert_eq!(
        verdict(
            &resolver,
            &signed_image.reference,
            &signed_image.index_digest,
            &Trust::of_keys(vec![other_key])
        )
        .await,
        Verdict::OtherKey
    );
    assert_eq!(
        verdict(&resolver, &unsigned.reference, &unsigned.index_digest, keys).await,
        Verdict::NoSignature
    );
    assert_eq!(
        verdict(&resolver, &moved.reference, &moved.index_digest, keys).await,
        Verdict::OtherDigest {
            signed: signed_image.index_digest.clone()
        }
    );
}

/// Hostile signature manifests: more layers than pinhook reads, a payload that is not the blob
/// its descriptor names. Each is refused with one line naming the registry and what is wrong.
#[tokio::test]
async fn hostile_signature_manifests_are_refused_on_one_line() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let many = images::push_multi_arch(&registry, "team/app", "1.0", "hostile-1").await;
    let lying = images::push_multi_arch(&registry, "team/app", "2.0", "hostile-2").await;
    let (signer, _) = key_pair();
    let layers: Vec<(Vec<u8>, String)> = (0..17)
        .map(|i| {
            let payload = format!("{{\"n\":{i}}}").into_bytes();
            let signature = signed(&signer, &payload);
            (payload, signature)
        })
        .collect();
    push_signatures(&registry, "team/app", &many.index_digest, &layers).await;

    // A descriptor whose size is not its blob's.
    let blob = images::push_blob(&registry, "team/app", b"payload").await;
    let config = images::push_blob(&registry, "team/app", b"{}").await;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": blob, "size": 3, "annotations": {SIGNATURE_ANNOTATION: "c2ln"}}],
    });
    let digest: Digest = lying.index_digest.parse().unwrap();
    images::put_manifest(
        &registry,
        "team/app",
        &signature_tag(&digest),
        OCI_MANIFEST,
        manifest.to_string().as_bytes(),
    )
    .await;

    let resolver = resolver(registry_config(&registry));
    let credential = Credential::basic(USER, PASS);
    for (image, digest, want) in [
        (
            &many.reference,
            &many.index_digest,
            "manifest has 17 layers, more than pinhook reads (16)",
        ),
        (
            &lying.reference,
            &lying.index_digest,
            "payload is not the blob its descriptor names",
        ),
    ] {
        assert_refused(&resolver, &registry, image, digest, &credential, want).await;
    }
}

/// The signatures of `digest` of `image` are refused on one line naming the registry and `want`.
async fn assert_refused(
    resolver: &OciResolver,
    registry: &TestRegistry,
    image: &str,
    digest: &str,
    credential: &Credential,
    want: &str,
) {
    let digest: Digest = digest.parse().unwrap();
    let error = resolver
        .signatures_with(&reference(image), &digest, credential, &|_| false)
        .await
        .expect_err("refused");
    let text = pinhook::error::error_chain(&error);
    assert!(text.contains(want), "{text}");
    assert!(text.contains(&registry.host()), "{text}");
    assert!(!text.contains('\n'), "{text}");
}

/// The pod's credentials are tried in kubelet's order, then anonymously, until one finds the
/// signatures: a credential the registry refuses is passed over; with none it lets in, the fetch
/// fails (never "no signature").
#[tokio::test]
async fn each_credential_is_tried_until_one_finds_the_signatures() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let image = images::push_multi_arch(&registry, "team/app", "1.0", "creds-1").await;
    let (signer, _) = key_pair();
    crate::common::signing::sign(&registry, "team/app", &image.index_digest, &signer).await;
    let resolver = resolver(registry_config(&registry));
    let digest: Digest = image.index_digest.parse().unwrap();
    let wrong = Credential::basic(USER, "wrong");
    let layers = resolver
        .signatures_of(
            &reference(&image.reference),
            &digest,
            &[wrong.clone(), Credential::basic(USER, PASS)],
            &|_| false,
        )
        .await
        .expect("the second credential is let in");
    assert_eq!(layers.layers.len(), 1);
    let error = resolver
        .signatures_of(&reference(&image.reference), &digest, &[wrong], &|_| false)
        .await
        .expect_err("no credential is let in");
    assert_eq!(error.kind(), "unauthorized", "{error}");
}

const ISSUER: &str = "https://token.actions.githubusercontent.com";
const RELEASE: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1";

/// A trust of `key` and the release workflow's identity under `sigstore`.
fn key_and_release(key: &rcgen::KeyPair, sigstore: &TestSigstore) -> Trust {
    let root = TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap();
    let identity = Identity {
        issuer: Matcher::Exact(ISSUER.to_string()),
        subject: Matcher::Exact(RELEASE.to_string()),
    };
    Trust::new(
        vec![PublicKey::from_pem(&key.public_key_pem()).unwrap()],
        Some(Keyless::new(Arc::new(root), vec![identity])),
    )
}

fn referrer(bundle: String) -> Referrer {
    Referrer {
        bundle,
        predicate: COSIGN_SIGN,
    }
}

/// cosign 3 (issue 46): bundles attached as OCI referrers, found on the real `docker-registry`
/// (no referrers API: a 404) through the referrers tag `sha256-<hex>`. A key's bundle and a
/// trusted identity's keyless bundle verify their digests; a bundle whose statement names
/// another digest is `other_digest`; an attestation (another predicate) is no signature.
#[tokio::test]
async fn cosign_3_bundles_are_found_by_the_referrers_tag_and_bound_to_the_digest() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let repo = "team/app";
    let by_key = images::push_multi_arch(&registry, repo, "1.0", "bundle-1").await;
    let keyless = images::push_multi_arch(&registry, repo, "2.0", "bundle-2").await;
    let copied = images::push_multi_arch(&registry, repo, "3.0", "bundle-3").await;
    let attested = images::push_multi_arch(&registry, repo, "4.0", "bundle-4").await;
    let repository = format!("{}/{repo}", registry.host());
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let sigstore = TestSigstore::new();
    let of = |digest: &str| statement(&repository, digest);

    let first = key_bundle(&key, &of(&by_key.index_digest));
    push_referrers(
        &registry,
        repo,
        &by_key.index_digest,
        &[referrer(first.clone())],
    )
    .await;
    let signed = sigstore.keyless_bundle(&of(&keyless.index_digest), ISSUER, RELEASE);
    push_referrers(&registry, repo, &keyless.index_digest, &[referrer(signed)]).await;
    push_referrers(&registry, repo, &copied.index_digest, &[referrer(first)]).await;
    let mut provenance: serde_json::Value =
        serde_json::from_slice(&of(&attested.index_digest)).unwrap();
    provenance["predicateType"] = "https://slsa.dev/provenance/v1".into();
    let attestation = Referrer {
        bundle: key_bundle(&key, provenance.to_string().as_bytes()),
        predicate: "https://slsa.dev/provenance/v1",
    };
    push_referrers(&registry, repo, &attested.index_digest, &[attestation]).await;

    let resolver = resolver(registry_config(&registry));
    let trust = key_and_release(&key, &sigstore);
    let fingerprint = PublicKey::from_pem(&key.public_key_pem()).unwrap();
    assert_eq!(
        verdict(&resolver, &by_key.reference, &by_key.index_digest, &trust).await,
        Verdict::Verified {
            signer: format!("key {}", fingerprint.fingerprint()).into()
        }
    );
    assert_eq!(
        verdict(&resolver, &keyless.reference, &keyless.index_digest, &trust).await,
        Verdict::Verified {
            signer: format!("{RELEASE} ({ISSUER})").into()
        }
    );
    assert_eq!(
        verdict(&resolver, &copied.reference, &copied.index_digest, &trust).await,
        Verdict::OtherDigest {
            signed: by_key.index_digest.clone()
        }
    );
    assert_eq!(
        verdict(
            &resolver,
            &attested.reference,
            &attested.index_digest,
            &trust
        )
        .await,
        Verdict::NoSignature
    );
}

/// More bundle referrers than pinhook reads, and a referrer whose manifest is not the one its
/// descriptor names: refused on one line naming the registry.
#[tokio::test]
async fn hostile_referrers_are_refused_on_one_line() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let repo = "team/app";
    let many = images::push_multi_arch(&registry, repo, "1.0", "referrers-1").await;
    let lying = images::push_multi_arch(&registry, repo, "2.0", "referrers-2").await;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let bundles: Vec<Referrer> = (0..17)
        .map(|i| referrer(key_bundle(&key, format!("{{\"n\":{i}}}").as_bytes())))
        .collect();
    push_referrers(&registry, repo, &many.index_digest, &bundles).await;
    // The referrers tag names a manifest with another size.
    let pushed = push_referrers(
        &registry,
        repo,
        &lying.index_digest,
        &[referrer("{}".into())],
    )
    .await;
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": pushed[0], "size": 3, "artifactType": BUNDLE}],
    });
    images::put_manifest(
        &registry,
        repo,
        &lying.index_digest.replacen(':', "-", 1),
        "application/vnd.oci.image.index.v1+json",
        index.to_string().as_bytes(),
    )
    .await;
    let resolver = resolver(registry_config(&registry));
    for (image, digest, want) in [
        (
            &many.reference,
            &many.index_digest,
            "17 signature bundles refer to the digest, more than pinhook reads (16)",
        ),
        (
            &lying.reference,
            &lying.index_digest,
            "bundle manifest is not the one its descriptor names",
        ),
    ] {
        let credential = Credential::basic(USER, PASS);
        assert_refused(&resolver, &registry, image, digest, &credential, want).await;
    }
}

/// A registry with the OCI 1.1 referrers API (a scripted stand-in over TLS): pinhook asks
/// `/v2/<name>/referrers/<digest>` filtered to bundles, reads the bundle it lists, verifies
/// it, and never asks for the referrers tag.
#[tokio::test]
async fn the_referrers_api_is_asked_first_where_the_registry_has_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let image_digest = Digest::sha256_of(b"image");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let sigstore = TestSigstore::new();
    let bundle = Arc::new(std::sync::OnceLock::<String>::new());
    let bundle_at = bundle.clone();
    let digest_text = image_digest.to_string();
    let routes = Router::new().fallback(move |uri: Uri| {
        let (bundle, digest_text) = (bundle_at.clone(), digest_text.clone());
        async move {
            let bundle = bundle.get().cloned().unwrap_or_default();
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": BUNDLE,
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": images::sha256_digest(b"{}"), "size": 2},
                "layers": [{"mediaType": BUNDLE, "digest": images::sha256_digest(bundle.as_bytes()), "size": bundle.len()}],
            })
            .to_string();
            let manifest_digest = images::sha256_digest(manifest.as_bytes());
            match uri.path() {
                p if p == format!("/v2/team/app/referrers/{digest_text}")
                    && uri.query() == Some("artifactType=application%2Fvnd.dev.sigstore.bundle.v0.3%2Bjson") =>
                {
                    let index = json!({
                        "schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [{"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": manifest.len(), "artifactType": BUNDLE}],
                    });
                    ([(header::CONTENT_TYPE, "application/vnd.oci.image.index.v1+json")], index.to_string()).into_response()
                }
                p if p == format!("/v2/team/app/manifests/{manifest_digest}") => {
                    ([(header::CONTENT_TYPE, OCI_MANIFEST)], manifest).into_response()
                }
                p if p == format!("/v2/team/app/blobs/{}", images::sha256_digest(bundle.as_bytes())) => {
                    bundle.into_response()
                }
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let stand_in = StandIn::start(&ca, routes).await;
    let repository = format!("{}/team/app", stand_in.host());
    let _ = bundle.set(sigstore.keyless_bundle(
        &statement(&repository, &image_digest.to_string()),
        ISSUER,
        RELEASE,
    ));
    let resolver = guarded_resolver(&ca, vec![stand_in.host()]);
    let found = resolver
        .signatures_with(
            &reference(&format!("{repository}:1.0")),
            &image_digest,
            &Credential::Anonymous,
            &|_| false,
        )
        .await
        .expect("fetched");
    assert_eq!(found.bundles.len(), 1);
    let bundles: Vec<&[u8]> = found.bundles.iter().map(Vec::as_slice).collect();
    let trust = key_and_release(&key, &sigstore);
    assert_eq!(
        judge_all(&[], &bundles, &trust, &image_digest).reason(),
        "verified"
    );
    let asked: Vec<String> = stand_in.requests().into_iter().map(|r| r.path).collect();
    assert!(
        !asked
            .iter()
            .any(|p| p.ends_with(&image_digest.to_string().replacen(':', "-", 1))),
        "the referrers tag was asked though the API answered: {asked:?}"
    );
    // Layers that settle the verdict: the bundles are not looked for.
    let before = stand_in.requests().len();
    resolver
        .signatures_with(
            &reference(&format!("{repository}:1.0")),
            &image_digest,
            &Credential::Anonymous,
            &|_| true,
        )
        .await
        .expect("fetched");
    let asked: Vec<String> = stand_in.requests()[before..]
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert!(
        !asked.is_empty() && asked.iter().all(|p| p.ends_with(".sig")),
        "asked beyond the tag scheme: {asked:?}"
    );
}

/// Registries serve blobs from storage on another host (Docker Hub, GHCR, ECR, Quay: a
/// redirect to S3, GCS or a CDN). A signature payload redirected so is followed once, to a
/// host that passes the rules a token realm passes, with no credential; to a host the rules
/// refuse it is not, and nothing is sent there; the signed query never shows.
#[tokio::test]
async fn a_signature_blob_redirected_to_its_storage_host_is_followed_there_only_if_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let digest = Digest::sha256_of(b"image");
    let (signer, key) = key_pair();
    let payload =
        pinhook::signatures::simple_signing::payload_for("registry.example/team/app", &digest);
    let signature = signed(&signer, &payload);
    let payload_digest = images::sha256_digest(&payload);

    let stored = payload.clone();
    let storage = StandIn::start(
        &ca,
        Router::new().fallback(move || {
            let stored = stored.clone();
            async move { stored.into_response() }
        }),
    )
    .await;
    let location = storage.url(&format!("/blobs/{payload_digest}?X-Amz-Signature=s3cr3t"));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": images::sha256_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "digest": payload_digest, "size": payload.len(),
            "annotations": {SIGNATURE_ANNOTATION: signature}}],
    })
    .to_string();
    let signature_path = format!("/v2/team/app/manifests/{}", signature_tag(&digest));
    let blob_path = format!("/v2/team/app/blobs/{payload_digest}");
    let registry = StandIn::start(
        &ca,
        Router::new().fallback(move |uri: Uri| {
            let (manifest, location) = (manifest.clone(), location.clone());
            let (signature_path, blob_path) = (signature_path.clone(), blob_path.clone());
            async move {
                match uri.path() {
                    p if p == signature_path => {
                        ([(header::CONTENT_TYPE, OCI_MANIFEST)], manifest).into_response()
                    }
                    p if p == blob_path => (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(header::LOCATION, location)],
                    )
                        .into_response(),
                    _ => StatusCode::NOT_FOUND.into_response(),
                }
            }
        }),
    )
    .await;
    let image = reference(&format!("{}/team/app:1.0", registry.host()));
    let credential = Credential::basic(USER, PASS);

    // The storage host allowed (both are on loopback, which only allowPrivate opens).
    let resolver = guarded_resolver(&ca, vec![registry.host(), storage.host()]);
    let found = resolver
        .signatures_with(&image, &digest, &credential, &|_| true)
        .await
        .expect("followed to the storage host");
    let layers: Vec<SignatureLayer<'_>> = found.layers.iter().map(FetchedLayer::as_layer).collect();
    assert_eq!(
        judge_all(&layers, &[], &Trust::of_keys(vec![key]), &digest).reason(),
        "verified"
    );
    assert!(registry
        .requests()
        .iter()
        .all(|r| r.authorization.is_some()));
    let at_storage = storage.requests();
    assert_eq!(at_storage.len(), 1, "{at_storage:?}");
    assert_eq!(
        at_storage[0].authorization, None,
        "no credential to the storage host"
    );

    // The storage host not allowed: refused before anything is sent to it.
    let resolver = guarded_resolver(&ca, vec![registry.host()]);
    let error = resolver
        .signatures_with(&image, &digest, &credential, &|_| true)
        .await
        .expect_err("refused");
    let text = pinhook::error::error_chain(&error);
    assert!(text.contains("a host pinhook may not contact"), "{text}");
    assert!(text.contains(&storage.host()), "{text}");
    assert!(
        !text.contains("s3cr3t") && !format!("{error:?}").contains("s3cr3t"),
        "{text}"
    );
    assert_eq!(
        storage.requests().len(),
        1,
        "nothing more sent to the storage host"
    );
}
