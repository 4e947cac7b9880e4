//! A bundle's transparency log entries as its verification material carries them (`tlogEntries`,
//! `timestampVerificationData`), read into what the log's word on each is ([`Vouched`]): an
//! entry with a SET as a Rekor v1 entry, one with an inclusion proof as a Rekor v2 entry with the
//! bundle's RFC 3161 timestamps; at most [`MAX_ENTRIES`] entries and [`MAX_TIMESTAMPS`]
//! timestamps, each entry tried in turn ([`first_that_holds`]).
//!
//! Owns: reading the entries and trying each. Never: verifies one (`tlog`, `checkpoint` and
//! `timestamp` do), or judges the bundle (its parent).

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;

use super::Material;
use crate::signatures::checkpoint::InclusionProof;
use crate::signatures::tlog::{LogEntry, ProvenEntry, Vouched, MAX_TIMESTAMPS};
use crate::signatures::trusted_root::hex;

/// Log entries of one bundle read.
const MAX_ENTRIES: usize = 4;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TimestampData {
    #[serde(default)]
    rfc3161_timestamps: Vec<SignedTimestamp>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignedTimestamp {
    signed_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TlogEntry {
    log_index: Int,
    log_id: LogId,
    /// Absent (zero, so no time) in a Rekor v2 entry.
    #[serde(default)]
    integrated_time: Option<Int>,
    #[serde(default)]
    inclusion_promise: Option<Promise>,
    #[serde(default)]
    inclusion_proof: Option<ProofFile>,
    canonicalized_body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProofFile {
    log_index: Int,
    tree_size: Int,
    #[serde(default)]
    hashes: Vec<String>,
    checkpoint: CheckpointFile,
}

#[derive(Deserialize)]
struct CheckpointFile {
    envelope: String,
}

/// A protobuf int64 in JSON: a string, or a number from a lenient writer.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int {
    Number(i64),
    Text(String),
}

impl Int {
    fn value(&self) -> Option<i64> {
        match self {
            Int::Number(n) => Some(*n),
            Int::Text(t) => t.parse().ok(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogId {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Promise {
    signed_entry_timestamp: String,
}

/// A bundle's log entry, owned: the first with a SET (Rekor v1), or else the first with an
/// inclusion proof (Rekor v2), with the bundle's RFC 3161 timestamps.
pub(super) enum BundleEntry {
    Promised {
        body: String,
        integrated_time: i64,
        log_index: i64,
        log_id: String,
        set: String,
    },
    Proven {
        body: String,
        log_id: String,
        log_index: u64,
        tree_size: u64,
        hashes: Vec<Vec<u8>>,
        checkpoint: String,
        timestamps: Vec<Vec<u8>>,
    },
}

impl BundleEntry {
    /// The log entries of `material` (at most [`MAX_ENTRIES`]), each read or why not: one with
    /// a SET as a Rekor v1 entry (its proof, if any, not read), one with an inclusion proof as a
    /// Rekor v2 entry with the bundle's timestamps; each is tried in turn, as sigstore-go
    /// passes over the entries the root cannot verify.
    pub(super) fn all(
        material: &Material,
    ) -> Result<Vec<Result<BundleEntry, &'static str>>, &'static str> {
        if material.tlog_entries.len() > MAX_ENTRIES {
            return Err("it carries more log entries than pinhook reads");
        }
        let entries: Vec<_> = material
            .tlog_entries
            .iter()
            .filter(|e| e.inclusion_promise.is_some() || e.inclusion_proof.is_some())
            .map(|entry| BundleEntry::of(material, entry))
            .collect();
        if entries.is_empty() {
            return Err(
                "it carries no log entry with a signed entry timestamp or an inclusion proof",
            );
        }
        Ok(entries)
    }

    /// `entry` of `material`, read.
    fn of(material: &Material, entry: &TlogEntry) -> Result<BundleEntry, &'static str> {
        let key_id = STANDARD
            .decode(entry.log_id.key_id.trim())
            .map_err(|_| "its log ID is not base64")?;
        let log_id = hex(&key_id);
        let log_index = entry
            .log_index
            .value()
            .ok_or("its logIndex is not a number")?;
        if let Some(promise) = &entry.inclusion_promise {
            return Ok(BundleEntry::Promised {
                body: entry.canonicalized_body.clone(),
                integrated_time: entry
                    .integrated_time
                    .as_ref()
                    .and_then(Int::value)
                    .ok_or("its integratedTime is not a number")?,
                log_index,
                log_id,
                set: promise.signed_entry_timestamp.clone(),
            });
        }
        let proof = entry
            .inclusion_proof
            .as_ref()
            .ok_or("its log entry has neither a signed entry timestamp nor an inclusion proof")?;
        let number = |n: &Int| n.value().and_then(|n| u64::try_from(n).ok());
        let proof_index =
            number(&proof.log_index).ok_or("its inclusion proof's logIndex is not a number")?;
        if u64::try_from(log_index).ok() != Some(proof_index) {
            return Err("its inclusion proof is of another index than its log entry");
        }
        if proof.hashes.len() > 64 {
            return Err("its inclusion proof is longer than pinhook reads");
        }
        let timestamps = material
            .timestamp_verification_data
            .as_ref()
            .map(|data| &data.rfc3161_timestamps[..])
            .unwrap_or_default();
        if timestamps.len() > MAX_TIMESTAMPS {
            return Err("it carries more RFC 3161 timestamps than pinhook reads");
        }
        Ok(BundleEntry::Proven {
            body: entry.canonicalized_body.clone(),
            log_id,
            log_index: proof_index,
            tree_size: number(&proof.tree_size)
                .ok_or("its inclusion proof's treeSize is not a number")?,
            hashes: proof
                .hashes
                .iter()
                .map(|h| STANDARD.decode(h.trim()))
                .collect::<Result<_, _>>()
                .map_err(|_| "its inclusion proof's hashes are not base64")?,
            checkpoint: proof.checkpoint.envelope.clone(),
            timestamps: timestamps
                .iter()
                .map(|t| STANDARD.decode(t.signed_timestamp.trim()))
                .collect::<Result<_, _>>()
                .map_err(|_| "its RFC 3161 timestamp is not base64")?,
        })
    }

    /// The log's word on this entry, for `signature` (raw), the signature it logs.
    pub(super) fn vouched<'a>(&'a self, signature: &'a [u8]) -> Vouched<'a> {
        match self {
            BundleEntry::Promised {
                body,
                integrated_time,
                log_index,
                log_id,
                set,
            } => Vouched::Promised(LogEntry {
                body,
                integrated_time: *integrated_time,
                log_index: *log_index,
                log_id,
                set,
            }),
            BundleEntry::Proven {
                body,
                log_id,
                log_index,
                tree_size,
                hashes,
                checkpoint,
                timestamps,
            } => Vouched::Proven(ProvenEntry {
                body,
                log_id,
                proof: InclusionProof {
                    log_index: *log_index,
                    tree_size: *tree_size,
                    hashes: hashes.clone(),
                    checkpoint,
                },
                timestamps,
                signature,
            }),
        }
    }
}

/// The first of `entries` for which `holds` holds, its answer; else the first entry's reason.
pub(super) fn first_that_holds<T>(
    entries: &[Result<BundleEntry, &'static str>],
    holds: impl Fn(&BundleEntry) -> Result<T, Cow<'static, str>>,
) -> Result<T, Cow<'static, str>> {
    let mut first = None;
    for entry in entries {
        match entry
            .as_ref()
            .map_err(|why| Cow::Borrowed(*why))
            .and_then(&holds)
        {
            Ok(answer) => return Ok(answer),
            Err(why) => {
                first.get_or_insert(why);
            }
        }
    }
    Err(first.unwrap_or(Cow::Borrowed("it carries no log entry")))
}
