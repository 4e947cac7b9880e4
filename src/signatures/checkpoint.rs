//! A transparency log's proof that it holds an entry, as a Rekor v2 entry carries it (a Rekor v2
//! log signs no entry timestamp): an RFC 9162 inclusion proof, the audit path from the entry's
//! leaf hash (SHA-256 of 0x00 and its canonical body) up to a tree root, and a **checkpoint**
//! (C2SP `tlog-checkpoint`, a signed note) in which a log the trusted root names signed that
//! root and the tree's size. The root is taken from the verified checkpoint, never from the
//! proof's own `rootHash`. The checkpoint's signature is verified over its note text, byte for
//! byte; signature lines of other keys (witnesses, cosigners) are passed over.
//!
//! Owns: reading a checkpoint and an inclusion proof, and both checks. Never: decides whether
//! the entry is of a given signature (`tlog`), or when it was logged (a Rekor v2 entry's time
//! comes from an RFC 3161 timestamp, `timestamp`).

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use sigstore::crypto::Signature;

use super::trusted_root::{ed25519_raw, note_key_hash, Log, TrustedRoot};

/// The largest checkpoint read (a log's note and a few witnesses' lines are under 1 KiB).
const MAX_CHECKPOINT_BYTES: usize = 8 << 10;
/// Signature lines of one checkpoint read.
const MAX_SIGNATURE_LINES: usize = 16;
/// Hashes of one audit path read: a tree of 2^64 entries needs 64.
const MAX_PATH: usize = 64;
/// How a signed note's signature line starts: an em dash and a space.
const SIGNATURE_LINE: &str = "\u{2014} ";

/// An inclusion proof as a bundle carries it: the leaf's index, the tree's size, the audit path
/// (hashes, raw) and the checkpoint's text.
pub(crate) struct InclusionProof<'a> {
    pub log_index: u64,
    pub tree_size: u64,
    pub hashes: Vec<Vec<u8>>,
    pub checkpoint: &'a str,
}

/// Why an entry is not proven to be in a log.
const NOT_INCLUDED: &str =
    "its inclusion proof does not lead to the root its log's checkpoint signed";

/// Whether the log `log_id` (hex) of `root`, trusted at each of `times`, holds an entry of
/// canonical `body`: the checkpoint is signed by that log's key and `proof` leads from the
/// body's leaf up to the checkpoint's root, for a tree of the checkpoint's size.
pub(crate) fn included(
    root: &TrustedRoot,
    log_id: &str,
    times: &[i64],
    body: &[u8],
    proof: &InclusionProof<'_>,
) -> Result<(), Cow<'static, str>> {
    const UNNAMED: &str = "it was logged in no log the trusted root names, trusted at its time";
    let first = *times.first().ok_or(UNNAMED)?;
    let log = root.log(log_id, first).ok_or(UNNAMED)?;
    if !times.iter().all(|time| log.valid.contains(*time)) {
        return Err(Cow::Borrowed(UNNAMED));
    }
    let (size, tree_root) = checkpoint(log, proof.checkpoint)?;
    if size != proof.tree_size {
        return Err(Cow::Borrowed(
            "its inclusion proof is of another tree size than its log's checkpoint",
        ));
    }
    let leaf = hash_leaf(body);
    let computed = root_from_path(proof.log_index, proof.tree_size, leaf, &proof.hashes)?;
    if computed == tree_root {
        Ok(())
    } else {
        Err(Cow::Borrowed(NOT_INCLUDED))
    }
}

/// The tree size and root `log` signed in the checkpoint `text`.
fn checkpoint(log: &Log, text: &str) -> Result<(u64, [u8; 32]), Cow<'static, str>> {
    const MALFORMED: &str = "its log's checkpoint is malformed";
    if text.len() > MAX_CHECKPOINT_BYTES {
        return Err(Cow::Borrowed(
            "its log's checkpoint is larger than pinhook reads",
        ));
    }
    // The note text runs to the last blank line, its own last newline included (as Go's
    // `note.Open` splits it); no control character but its newlines.
    let split = text.rfind("\n\n").ok_or(MALFORMED)?;
    let (note, signatures) = (&text[..=split], &text[split + 2..]);
    if text.chars().any(|c| c.is_control() && c != '\n') {
        return Err(Cow::Borrowed(MALFORMED));
    }
    let mut lines = note.split('\n');
    let origin = lines.next().ok_or(MALFORMED)?;
    // A decimal size: digits only, no leading zero (C2SP tlog-checkpoint).
    let size: u64 = lines
        .next()
        .filter(|line| {
            line.bytes().all(|b| b.is_ascii_digit()) && (*line == "0" || !line.starts_with('0'))
        })
        .and_then(|line| line.parse().ok())
        .ok_or(MALFORMED)?;
    let tree_root: [u8; 32] = lines
        .next()
        .and_then(|line| STANDARD.decode(line).ok())
        .and_then(|raw| raw.try_into().ok())
        .ok_or(MALFORMED)?;
    // A v2 log's origin is its host, exactly; a v1 log's (ECDSA) adds its tree's ID
    // (`rekor.sigstore.dev - 1193…`).
    let v1 = ed25519_raw(&log.der).is_none();
    let named = !log.origin.is_empty()
        && (origin == log.origin
            || v1
                && origin
                    .strip_prefix(log.origin.as_str())
                    .is_some_and(|rest| rest.starts_with(" - ")));
    if !named {
        return Err(Cow::Borrowed(
            "its log's checkpoint is of another log than the trusted root names",
        ));
    }
    let hint = key_hint(log);
    let mut read = 0;
    for line in signatures.lines() {
        if line.is_empty() {
            continue;
        }
        read += 1;
        if read > MAX_SIGNATURE_LINES {
            return Err(Cow::Borrowed(
                "its log's checkpoint carries too many signatures",
            ));
        }
        let Some((name, signature)) = line
            .strip_prefix(SIGNATURE_LINE)
            .and_then(|rest| rest.split_once(' '))
        else {
            return Err(Cow::Borrowed(MALFORMED));
        };
        let Ok(signature) = STANDARD.decode(signature) else {
            return Err(Cow::Borrowed(MALFORMED));
        };
        // Another key's line (a witness, a cosigner): not the log's word.
        if name != log.origin || signature.len() < 5 || signature[..4] != hint {
            continue;
        }
        if log
            .key
            .verify_signature(Signature::Raw(&signature[4..]), note.as_bytes())
            .is_ok()
        {
            return Ok((size, tree_root));
        }
        return Err(Cow::Borrowed(
            "its log's checkpoint signature does not verify with the log's key",
        ));
    }
    Err(Cow::Borrowed(
        "its log's checkpoint carries no signature of the log's key",
    ))
}

/// The 4-byte key hint a signed note's signature line names `log`'s key by: the head of its
/// signed-note key hash ([`note_key_hash`]).
fn key_hint(log: &Log) -> [u8; 4] {
    let hash = note_key_hash(&log.der, &log.origin);
    [hash[0], hash[1], hash[2], hash[3]]
}

/// RFC 9162 §2.1.1: a leaf's hash.
fn hash_leaf(body: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update([0x00]);
    hash.update(body);
    hash.finalize().into()
}

/// RFC 9162 §2.1.1: an inner node's hash.
fn hash_children(left: &[u8], right: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update([0x01]);
    hash.update(left);
    hash.update(right);
    hash.finalize().into()
}

/// RFC 9162 §2.1.3.2: the root the audit path `path` leads to from leaf `leaf` at `index` of a
/// tree of `size`, if the path is one of that tree.
fn root_from_path(
    index: u64,
    size: u64,
    leaf: [u8; 32],
    path: &[Vec<u8>],
) -> Result<[u8; 32], Cow<'static, str>> {
    if index >= size {
        return Err(Cow::Borrowed(
            "its inclusion proof's index is outside its tree",
        ));
    }
    if path.len() > MAX_PATH || path.iter().any(|hash| hash.len() != 32) {
        return Err(Cow::Borrowed("its inclusion proof is malformed"));
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut hash = leaf;
    for sibling in path {
        if sn == 0 {
            return Err(Cow::Borrowed(NOT_INCLUDED));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            hash = hash_children(sibling, &hash);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            hash = hash_children(&hash, sibling);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn == 0 {
        Ok(hash)
    } else {
        Err(Cow::Borrowed(NOT_INCLUDED))
    }
}

/// The tests' own log: a Merkle tree, its audit paths and checkpoints signed by an Ed25519 or
/// an ECDSA P-256 key, as Rekor v2 and v1 sign them.
#[cfg(test)]
pub(crate) mod test_log {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use rcgen::{KeyPair, PublicKeyData as _, SignatureAlgorithm, SigningKey as _};
    use sha2::{Digest as _, Sha256};

    use super::{hash_children, hash_leaf, SIGNATURE_LINE};
    use crate::signatures::trusted_root::note_key_hash;

    pub struct TestLog {
        pub origin: String,
        pub key: KeyPair,
        pub leaves: Vec<[u8; 32]>,
    }

    impl TestLog {
        /// A log named `origin` whose key is of `algorithm` (`rcgen::PKCS_ED25519` for v2).
        pub fn new(origin: &str, algorithm: &'static SignatureAlgorithm) -> TestLog {
            TestLog {
                origin: origin.to_string(),
                key: KeyPair::generate_for(algorithm).unwrap(),
                leaves: Vec::new(),
            }
        }

        /// The log's key, SubjectPublicKeyInfo DER.
        pub fn der(&self) -> Vec<u8> {
            self.key.subject_public_key_info()
        }

        /// The log's ID as a trusted root names it (hex).
        pub fn id(&self) -> String {
            crate::signatures::trusted_root::hex(&note_key_hash(&self.der(), &self.origin))
        }

        /// The log's ID, raw.
        pub fn raw_id(&self) -> Vec<u8> {
            note_key_hash(&self.der(), &self.origin).to_vec()
        }

        /// Appends `body`; its index.
        pub fn append(&mut self, body: &[u8]) -> u64 {
            self.leaves.push(hash_leaf(body));
            self.leaves.len() as u64 - 1
        }

        /// The root of the first `size` leaves (RFC 9162 §2.1.1).
        pub fn root(&self, size: usize) -> [u8; 32] {
            subtree(&self.leaves[..size])
        }

        /// The audit path of leaf `index` in the tree of the first `size` leaves (RFC 9162
        /// §2.1.3.1).
        pub fn path(&self, index: usize, size: usize) -> Vec<Vec<u8>> {
            fn path(index: usize, leaves: &[[u8; 32]]) -> Vec<Vec<u8>> {
                if leaves.len() <= 1 {
                    return Vec::new();
                }
                let k = split(leaves.len());
                if index < k {
                    let mut out = path(index, &leaves[..k]);
                    out.push(subtree(&leaves[k..]).to_vec());
                    out
                } else {
                    let mut out = path(index - k, &leaves[k..]);
                    out.push(subtree(&leaves[..k]).to_vec());
                    out
                }
            }
            path(index, &self.leaves[..size])
        }

        /// The note text of the tree of the first `size` leaves, with `extra` lines.
        pub fn note(&self, size: usize, extra: &str) -> String {
            format!(
                "{}\n{size}\n{}\n{extra}",
                self.origin,
                STANDARD.encode(self.root(size))
            )
        }

        /// `note` signed by this log as the line `name` names it, a witness's line after.
        pub fn sign_note(&self, note: &str, name: &str) -> String {
            let mut signature = note_key_hash(&self.der(), &self.origin)[..4].to_vec();
            signature.extend(self.key.sign(note.as_bytes()).unwrap());
            let witness = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
            let mut witnessed = vec![1, 2, 3, 4];
            witnessed.extend(witness.sign(note.as_bytes()).unwrap());
            format!(
                "{note}\n{SIGNATURE_LINE}witness.example {}\n{SIGNATURE_LINE}{name} {}\n",
                STANDARD.encode(witnessed),
                STANDARD.encode(signature)
            )
        }

        /// The checkpoint of the tree of the first `size` leaves.
        pub fn checkpoint(&self, size: usize) -> String {
            self.sign_note(&self.note(size, ""), &self.origin)
        }
    }

    fn split(n: usize) -> usize {
        let mut k = 1;
        while k << 1 < n {
            k <<= 1;
        }
        k
    }

    fn subtree(leaves: &[[u8; 32]]) -> [u8; 32] {
        match leaves.len() {
            0 => Sha256::digest([]).into(),
            1 => leaves[0],
            n => {
                let k = split(n);
                hash_children(&subtree(&leaves[..k]), &subtree(&leaves[k..]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::test_log::TestLog;
    use super::*;

    const STAGING_ROOT: &str =
        include_str!("../../tests/fixtures/sigstore-staging-rekor2/trusted_root.json");
    const STAGING_BUNDLE: &str =
        include_str!("../../tests/fixtures/sigstore-staging-rekor2/bundle.sigstore.json");
    /// The staging bundle's timestamp: 2025-07-25T19:53:04Z.
    const STAGED: i64 = 1_753_473_184;
    /// A time the test logs are trusted at.
    const NOW: i64 = 1_800_000_000;

    /// The staging bundle's entry: its log ID (hex), body and proof's parts.
    fn staging() -> (String, Vec<u8>, u64, u64, Vec<Vec<u8>>, String) {
        let bundle: Value = serde_json::from_str(STAGING_BUNDLE).unwrap();
        let entry = &bundle["verificationMaterial"]["tlogEntries"][0];
        let proof = &entry["inclusionProof"];
        let decode = |v: &Value| STANDARD.decode(v.as_str().unwrap()).unwrap();
        (
            crate::signatures::trusted_root::hex(&decode(&entry["logId"]["keyId"])),
            decode(&entry["canonicalizedBody"]),
            proof["logIndex"].as_str().unwrap().parse().unwrap(),
            proof["treeSize"].as_str().unwrap().parse().unwrap(),
            proof["hashes"]
                .as_array()
                .unwrap()
                .iter()
                .map(decode)
                .collect(),
            proof["checkpoint"]["envelope"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    }

    fn proof(index: u64, size: u64, hashes: Vec<Vec<u8>>, checkpoint: &str) -> InclusionProof<'_> {
        InclusionProof {
            log_index: index,
            tree_size: size,
            hashes,
            checkpoint,
        }
    }

    #[test]
    fn a_staging_rekor_v2_entry_is_in_the_log_its_checkpoint_names() {
        let root = TrustedRoot::parse(STAGING_ROOT.as_bytes()).unwrap();
        let (log_id, body, index, size, hashes, checkpoint) = staging();
        let ok = |body: &[u8], index, hashes: Vec<Vec<u8>>, checkpoint: &str, time| {
            included(
                &root,
                &log_id,
                &[time],
                body,
                &proof(index, size, hashes, checkpoint),
            )
        };
        ok(&body, index, hashes.clone(), &checkpoint, STAGED).unwrap();

        // Another body, another leaf, another path: none leads to the signed root.
        let mut other = body.clone();
        other[10] ^= 1;
        let why = ok(&other, index, hashes.clone(), &checkpoint, STAGED).unwrap_err();
        assert_eq!(why, NOT_INCLUDED);
        assert_eq!(
            ok(&body, index - 1, hashes.clone(), &checkpoint, STAGED).unwrap_err(),
            NOT_INCLUDED
        );
        let mut bent = hashes.clone();
        bent[3][0] ^= 1;
        assert_eq!(
            ok(&body, index, bent, &checkpoint, STAGED).unwrap_err(),
            NOT_INCLUDED
        );
        assert_eq!(
            ok(&body, index, hashes[..9].to_vec(), &checkpoint, STAGED).unwrap_err(),
            NOT_INCLUDED
        );
        // The checkpoint's root or size changed: its signature no longer holds.
        let forged = checkpoint.replace("\n7132\n", "\n7133\n");
        let why = included(
            &root,
            &log_id,
            &[STAGED],
            &body,
            &proof(index, 7133, hashes.clone(), &forged),
        );
        assert_eq!(
            why.unwrap_err(),
            "its log's checkpoint signature does not verify with the log's key"
        );
        // The log is trusted from 2025-04-16 to 2025-09-04 only.
        let why = ok(
            &body,
            index,
            hashes.clone(),
            &checkpoint,
            STAGED + 200 * 86_400,
        )
        .unwrap_err();
        assert!(why.contains("no log the trusted root names"), "{why}");
        // A log ID the root does not name.
        let why = included(
            &root,
            &"ab".repeat(32),
            &[STAGED],
            &body,
            &proof(index, size, hashes, &checkpoint),
        );
        assert!(why.unwrap_err().contains("no log the trusted root names"));
    }

    /// Hostile checkpoints in the small: every prefix of the staging checkpoint, and every one
    /// of its bytes changed, is refused without a panic (the note's text is signed byte for byte;
    /// a changed signature line no longer names or verifies with the log's key).
    #[test]
    fn every_prefix_and_every_changed_byte_of_a_real_checkpoint_is_refused() {
        let root = TrustedRoot::parse(STAGING_ROOT.as_bytes()).unwrap();
        let (log_id, body, index, size, hashes, checkpoint) = staging();
        let check = |text: &str| {
            included(
                &root,
                &log_id,
                &[STAGED],
                &body,
                &proof(index, size, hashes.clone(), text),
            )
        };
        check(&checkpoint).unwrap();
        let bytes = checkpoint.as_bytes();
        for end in 0..bytes.len() - 1 {
            if let Ok(prefix) = std::str::from_utf8(&bytes[..end]) {
                assert!(check(prefix).is_err(), "prefix of {end} bytes");
            }
        }
        for at in 0..bytes.len() {
            let mut changed = bytes.to_vec();
            changed[at] ^= 0x01;
            if let Ok(text) = std::str::from_utf8(&changed) {
                assert!(check(text).is_err(), "byte {at} changed: {text}");
            }
        }
    }

    /// A trusted root naming `log` only (and the test authority's CA, which a root must name).
    fn root_of(log: &TestLog) -> TrustedRoot {
        let sigstore = crate::signatures::keyless::test_authority::TestSigstore::new();
        let mut text: Value = serde_json::from_str(&sigstore.trusted_root()).unwrap();
        text["tlogs"] = serde_json::json!([{
            "baseUrl": format!("https://{}", log.origin),
            "hashAlgorithm": "SHA2_256",
            "publicKey": {"rawBytes": STANDARD.encode(log.der()), "validFor": {"start": "2020-01-01T00:00:00Z"}},
            "logId": {"keyId": STANDARD.encode(log.raw_id())},
        }]);
        TrustedRoot::parse(text.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn every_leaf_of_every_tree_size_is_proven_and_no_other() {
        for algorithm in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256] {
            let mut log = TestLog::new("log.test.example", algorithm);
            let root = root_of(&log);
            let bodies: Vec<Vec<u8>> = (0..13).map(|i| format!("entry {i}").into_bytes()).collect();
            for body in &bodies {
                log.append(body);
            }
            for size in 1..=bodies.len() {
                let checkpoint = log.checkpoint(size);
                for (index, body) in bodies[..size].iter().enumerate() {
                    let path = log.path(index, size);
                    let p = proof(index as u64, size as u64, path.clone(), &checkpoint);
                    included(&root, &log.id(), &[NOW], body, &p).unwrap();
                    let other = &bodies[(index + 1) % size];
                    if size > 1 {
                        assert!(included(&root, &log.id(), &[NOW], other, &p).is_err());
                    }
                    let p = proof(index as u64, size as u64 + 1, path, &checkpoint);
                    assert!(included(&root, &log.id(), &[NOW], body, &p).is_err());
                }
            }
        }
    }

    #[test]
    fn a_checkpoint_is_the_logs_own_and_hostile_ones_are_refused_in_bounds() {
        let mut log = TestLog::new("log.test.example", &rcgen::PKCS_ED25519);
        let root = root_of(&log);
        for i in 0..5 {
            log.append(format!("entry {i}").as_bytes());
        }
        let body = b"entry 2";
        let path = log.path(2, 5);
        let check = |checkpoint: &str| {
            included(
                &root,
                &log.id(),
                &[NOW],
                body,
                &proof(2, 5, path.clone(), checkpoint),
            )
        };
        check(&log.checkpoint(5)).unwrap();
        // Extension lines are part of the signed note.
        check(&log.sign_note(&log.note(5, "extension line\n"), &log.origin)).unwrap();

        let cases: Vec<(String, &str)> = vec![
            (
                log.sign_note(&log.note(5, ""), "another.example"),
                "its log's checkpoint carries no signature of the log's key",
            ),
            (
                log.sign_note(
                    &log.note(5, "")
                        .replacen("log.test.example", "evil.example", 1),
                    &log.origin,
                ),
                "its log's checkpoint is of another log than the trusted root names",
            ),
            (
                {
                    // Another key under the same name: the hint is not the log's.
                    let mut other = TestLog::new("log.test.example", &rcgen::PKCS_ED25519);
                    other.leaves = log.leaves.clone();
                    other.checkpoint(5)
                },
                "its log's checkpoint carries no signature of the log's key",
            ),
            (
                log.checkpoint(5).replace("\n\n", "\n"),
                "its log's checkpoint is malformed",
            ),
            (
                log.checkpoint(5).replacen("\n5\n", "\nfive\n", 1),
                "its log's checkpoint is malformed",
            ),
            (
                log.checkpoint(5).replacen(
                    "\n\n",
                    &format!("\n\n{}", "\u{2014} w AAAAAAAA\n".repeat(20)),
                    1,
                ),
                "its log's checkpoint carries too many signatures",
            ),
            (
                format!("{}{}", log.checkpoint(5), "x".repeat(9000)),
                "its log's checkpoint is larger than pinhook reads",
            ),
            (
                format!("{}junk\n", log.checkpoint(5)).replacen("\u{2014} witness", "junk", 1),
                "its log's checkpoint is malformed",
            ),
        ];
        for (checkpoint, why) in cases {
            assert_eq!(check(&checkpoint).unwrap_err(), why, "{checkpoint}");
        }
        // A signature of the log's key over another note.
        let signed = log.checkpoint(4);
        let (_, lines) = signed.split_once("\n\n").unwrap();
        let spliced = format!("{}\n{lines}", log.note(5, ""));
        assert_eq!(
            check(&spliced).unwrap_err(),
            "its log's checkpoint signature does not verify with the log's key"
        );
        // A line with the log's name and hint but a bad signature, before a good one: refused
        // (a known key's signature that does not verify is no signature to pass over).
        let good = log.checkpoint(5);
        let (note, lines) = good.split_once("\n\n").unwrap();
        let own = lines.lines().last().unwrap();
        let (head, signature) = own.rsplit_once(' ').unwrap();
        let mut bad = STANDARD.decode(signature).unwrap();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let forged = format!("{note}\n\n{head} {}\n{lines}", STANDARD.encode(bad));
        assert_eq!(
            check(&forged).unwrap_err(),
            "its log's checkpoint signature does not verify with the log's key"
        );
        // Sizes C2SP does not write, a carriage return, a v1-style origin on a v2 log.
        for note in [
            log.note(5, "").replacen("\n5\n", "\n+5\n", 1),
            log.note(5, "").replacen("\n5\n", "\n05\n", 1),
            log.note(5, "").replacen("\n5\n", "\n5\r\n", 1),
        ] {
            let signed = log.sign_note(&note, &log.origin);
            assert_eq!(
                check(&signed).unwrap_err(),
                "its log's checkpoint is malformed"
            );
        }
        let sharded = log
            .note(5, "")
            .replacen("log.test.example", "log.test.example - 7", 1);
        assert_eq!(
            check(&log.sign_note(&sharded, &log.origin)).unwrap_err(),
            "its log's checkpoint is of another log than the trusted root names"
        );
        // Paths and indexes out of bounds.
        assert!(root_from_path(5, 5, [0; 32], &[]).is_err());
        assert!(root_from_path(0, 2, [0; 32], &vec![vec![0; 32]; 65]).is_err());
        assert!(root_from_path(0, 2, [0; 32], &[vec![0; 31]]).is_err());
        assert!(root_from_path(0, u64::MAX, [0; 32], &[vec![0; 32]]).is_err());
    }
}
