//! Certificates pinhook makes: a CA and a serving certificate for the webhook's Service
//! (`<service>.<namespace>.svc`), the caBundle to put in the webhook configurations, and
//! `pinhook certs`, which issues and writes them ([`issue`]). [`rotation`] decides when
//! self-managed certificates change, [`managed`] keeps them in a Secret and the webhook
//! configurations through the Kubernetes API, with one writer elected by a [`crate::lease`].
//! Clusters may use cert-manager instead (see `manifests/` and the chart).

pub mod managed;
pub mod rotation;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("failed to generate certificates")]
    Generate(#[from] rcgen::Error),
    #[error("a certificate just generated does not parse")]
    Unparsable,
    #[error("failed to write '{path}'")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing to write through '{path}': it is a link or not a regular file")]
    NotAFile { path: PathBuf },
}

/// What to issue.
#[derive(Debug, Clone)]
pub struct CertRequest {
    pub service: String,
    pub namespace: String,
    /// Extra DNS names or IP addresses (e.g. `127.0.0.1` for a local apiserver).
    pub extra_sans: Vec<String>,
    pub validity_days: u32,
}

/// A CA and a serving certificate it signed, all PEM.
pub struct GeneratedCerts {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// `pinhook certs`: what to issue and where to write it.
#[derive(Debug, Clone)]
pub struct CertsConfig {
    pub request: CertRequest,
    /// Directory for `ca.crt`, `ca.key`, `tls.crt` and `tls.key`.
    pub out: PathBuf,
}

/// What [`issue`] wrote.
#[derive(Debug, Clone)]
pub struct Issued {
    pub files: CertFiles,
    /// The `caBundle` value for webhook configurations.
    pub ca_bundle: String,
    /// Every name the serving certificate is valid for.
    pub names: Vec<String>,
}

/// The files [`GeneratedCerts::write`] wrote.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

// === impl CertRequest ===

impl CertRequest {
    /// DNS names a Service is reached by, then the extras.
    pub fn subject_alt_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        let mut names = vec![
            svc.clone(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ];
        names.extend(self.extra_sans.iter().cloned());
        names
    }
}

/// A CA certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct CaPem {
    pub cert: String,
    pub key: String,
}

/// Issues a fresh CA and a serving certificate for `request`.
pub fn generate(request: &CertRequest) -> Result<GeneratedCerts, CertError> {
    let now = time::OffsetDateTime::now_utc();
    // A little back-dating tolerates clock skew between nodes.
    let not_before = now - time::Duration::minutes(5);
    let not_after = now + time::Duration::days(i64::from(request.validity_days));
    let ca = new_ca(not_before, not_after)?;
    let common_name = format!("{}.{}.svc", request.service, request.namespace);
    let (cert_pem, key_pem) = new_leaf(
        &ca,
        &request.subject_alt_names(),
        &common_name,
        not_before,
        not_after,
    )?;
    Ok(GeneratedCerts {
        ca_cert_pem: ca.cert,
        ca_key_pem: ca.key,
        cert_pem,
        key_pem,
    })
}

/// A self-signed CA valid from `not_before` to `not_after`.
pub fn new_ca(
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<CaPem, CertError> {
    let ca_key = KeyPair::generate()?;
    let key = ca_key.serialize_pem();
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    // The start time in the name makes each CA's subject distinct, so a bundle holding two
    // CAs never leaves a verifier choosing between same-named issuers.
    params.distinguished_name = name(&format!(
        "pinhook webhook CA {}",
        not_before.unix_timestamp()
    ));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = not_before;
    params.not_after = not_after;
    let ca = CertifiedIssuer::self_signed(params, ca_key)?;
    Ok(CaPem {
        cert: ca.pem(),
        key,
    })
}

/// A serving certificate for `names` signed by `ca`: (certificate PEM, key PEM).
pub fn new_leaf(
    ca: &CaPem,
    names: &[String],
    common_name: &str,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<(String, String), CertError> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert, KeyPair::from_pem(&ca.key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = name(common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Issues a fresh CA and serving certificate and writes them into `config.out`.
pub fn issue(config: &CertsConfig) -> Result<Issued, CertError> {
    let generated = generate(&config.request)?;
    let files = generated.write(&config.out)?;
    Ok(Issued {
        files,
        ca_bundle: generated.ca_bundle(),
        names: config.request.subject_alt_names(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

// === impl GeneratedCerts ===

impl GeneratedCerts {
    /// The `caBundle` value for webhook configurations (base64 of the CA PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_cert_pem.as_bytes())
    }

    /// Writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` (the names of a `kubernetes.io/tls`
    /// Secret) into `dir`, keys readable by the owner only.
    pub fn write(&self, dir: &Path) -> Result<CertFiles, CertError> {
        std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        write_file(&dir.join("ca.crt"), &self.ca_cert_pem, false)?;
        write_file(&dir.join("ca.key"), &self.ca_key_pem, true)?;
        // Write the key before the certificate: a watcher reloading on the certificate's
        // change then never sees a new certificate with the old key.
        write_file(&dir.join("tls.key"), &self.key_pem, true)?;
        write_file(&dir.join("tls.crt"), &self.cert_pem, false)?;
        Ok(CertFiles {
            ca_cert: dir.join("ca.crt"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        })
    }
}

// === impl Issued ===

impl Issued {
    /// One line saying what was written, for whom.
    pub fn summary(&self) -> String {
        format!(
            "wrote {}, {} and {} for {}",
            self.files.ca_cert.display(),
            self.files.cert.display(),
            self.files.key.display(),
            self.names.join(", ")
        )
    }
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    use std::io::Write as _;
    let err = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    // Write to a temporary name and rename, so a reader never sees half a file. The temporary
    // file is created afresh (never opened through a link someone left there) and with its final
    // mode from the start, so the key is never readable by others, not even for a moment.
    let tmp = path.with_extension("tmp");
    let mut file = create_fresh(&tmp, private)?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(err)?;
    drop(file);
    // rename(2) replaces a link at `path` itself; it never writes through it.
    std::fs::rename(&tmp, path).map_err(err)
}

/// `tmp` created new (`O_CREAT|O_EXCL`: a link there, even a dangling one, is never followed),
/// mode 0600 when `private`. A regular file left by an earlier interrupted run is removed first;
/// anything else at that name is refused.
fn create_fresh(tmp: &Path, private: bool) -> Result<std::fs::File, CertError> {
    let err = |source| CertError::Write {
        path: tmp.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    match options.open(tmp) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let kind = std::fs::symlink_metadata(tmp).map_err(err)?.file_type();
            if !kind.is_file() {
                return Err(CertError::NotAFile {
                    path: tmp.to_path_buf(),
                });
            }
            std::fs::remove_file(tmp).map_err(err)?;
            options.open(tmp).map_err(err)
        }
        other => other.map_err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_names_the_service_and_extras() {
        let request = CertRequest {
            service: "pinhook".into(),
            namespace: "pinhook-system".into(),
            extra_sans: vec!["127.0.0.1".into()],
            validity_days: 30,
        };
        let certs = generate(&request).expect("generates");
        assert!(certs.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(request
            .subject_alt_names()
            .contains(&"pinhook.pinhook-system.svc".to_string()));
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(certs.ca_bundle())
            .expect("base64");
        assert_eq!(bundle, certs.ca_cert_pem.as_bytes());
        let dir = tempfile::tempdir().expect("tempdir");
        let files = certs.write(dir.path()).expect("writes");
        assert!(files.cert.is_file() && files.key.is_file() && files.ca_cert.is_file());
    }

    #[test]
    fn issue_writes_the_files_and_names_them_in_its_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("certs");
        let config = CertsConfig {
            request: CertRequest {
                service: "hook".into(),
                namespace: "ns".into(),
                extra_sans: vec![],
                validity_days: 1,
            },
            out: out.clone(),
        };
        let issued = issue(&config).expect("issues");
        let ca = std::fs::read_to_string(out.join("ca.crt")).expect("ca.crt");
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(&issued.ca_bundle)
            .expect("base64");
        assert_eq!(bundle, ca.as_bytes());
        assert_eq!(
            issued.summary(),
            format!(
                "wrote {}, {} and {} for hook, hook.ns, hook.ns.svc, hook.ns.svc.cluster.local",
                out.join("ca.crt").display(),
                out.join("tls.crt").display(),
                out.join("tls.key").display()
            )
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_temporary_name_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "theirs").expect("write target");
        let key = dir.path().join("tls.key");
        std::os::unix::fs::symlink(&target, dir.path().join("tls.tmp")).expect("symlink");
        let refused = write_file(&key, "SECRET KEY", true);
        assert!(
            matches!(refused, Err(CertError::NotAFile { .. })),
            "{refused:?}"
        );
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "theirs");
        assert!(!key.exists());
        // A dangling link: never created through either.
        let dangling = dir.path().join("nowhere");
        let ca = dir.path().join("ca.crt");
        std::os::unix::fs::symlink(&dangling, dir.path().join("ca.tmp")).expect("symlink");
        assert!(write_file(&ca, "CA", false).is_err());
        assert!(!dangling.exists());
    }

    #[cfg(unix)]
    #[test]
    fn the_key_is_0600_from_creation_and_a_stale_temporary_file_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let stale = dir.path().join("tls.tmp");
        std::fs::write(&stale, "left by an interrupted run").expect("stale");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let key = dir.path().join("tls.key");
        write_file(&key, "SECRET KEY", true).expect("writes");
        let meta = std::fs::metadata(&key).expect("key");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&key).expect("key"), "SECRET KEY");
        assert!(!stale.exists());
    }
}
