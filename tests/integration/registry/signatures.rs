//! An image's cosign signatures (issue 46), signed here with test keys (the `sigstore` crate's
//! signer, as `cosign sign --key` signs), pushed to the real test registry in cosign's tag
//! scheme, fetched through pinhook's own registry client (bearer tokens, bounded reads) and
//! judged against the digest pinned: signed by the right key, by another key, not signed, and
//! a signature of another digest; hostile signature manifests refused on one line.

use pinhook::reference::Digest;
use pinhook::signatures::simple_signing::{payload_for, SIGNATURE_ANNOTATION};
use pinhook::signatures::{judge, signature_tag, SignatureLayer, Trust, Verdict};
use serde_json::json;

use crate::common::images;
use crate::common::pinhook::registry_config;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::resolving::{reference, resolver};
use crate::common::signing::{key_pair, push_signatures, signed, OCI_MANIFEST};
use pinhook::registry::{Credential, FetchedLayer, OciResolver};

const USER: &str = "robot";
const PASS: &str = "s1gn-pass";

async fn verdict(resolver: &OciResolver, image: &str, digest: &str, trust: &Trust) -> Verdict {
    let digest: Digest = digest.parse().unwrap();
    let layers = resolver
        .signature_layers(&reference(image), &digest, &Credential::basic(USER, PASS))
        .await
        .expect("fetched");
    let layers: Vec<SignatureLayer<'_>> = layers.iter().map(FetchedLayer::as_layer).collect();
    judge(&layers, trust, &digest)
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
            signer: format!("key {}", key.fingerprint())
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
        let digest: Digest = digest.parse().unwrap();
        let error = resolver
            .signature_layers(&reference(image), &digest, &credential)
            .await
            .expect_err("refused");
        let text = pinhook::error::error_chain(&error);
        assert!(text.contains(want), "{text}");
        assert!(text.contains(&registry.host()), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
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
        )
        .await
        .expect("the second credential is let in");
    assert_eq!(layers.len(), 1);
    let error = resolver
        .signatures_of(&reference(&image.reference), &digest, &[wrong])
        .await
        .expect_err("no credential is let in");
    assert_eq!(error.kind(), "unauthorized", "{error}");
}
