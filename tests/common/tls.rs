//! A throw-away certificate authority for integration tests.
//!
//! [`TestCa::generate`] makes a CA plus a server certificate valid for
//! `127.0.0.1`, `::1` (IP SANs) and `localhost` (DNS SAN), and writes
//! `ca.pem`, `server.pem` and `server-key.pem` into a directory. Clients built
//! from it trust only that CA.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Names every server certificate from [`TestCa`] is valid for.
pub const SERVER_SANS: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// Installs rustls' `ring` provider as the process default, once.
///
/// reqwest is built with `rustls-no-provider`, so this must run before any
/// client is built; every client helper here calls it.
pub fn init_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider is already installed: that is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A leaf certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct IssuedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A test CA, its server certificate, and where they were written.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    server: IssuedCert,
    ca_path: PathBuf,
    server_cert_path: PathBuf,
    server_key_path: PathBuf,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("ca_path", &self.ca_path)
            .field("server_cert_path", &self.server_cert_path)
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// Generates a CA and a server certificate for [`SERVER_SANS`] and writes
    /// `ca.pem`, `server.pem` and `server-key.pem` into `dir` (created if
    /// missing).
    pub fn generate(dir: &Path) -> TestCa {
        fs::create_dir_all(dir).expect("create the TLS directory");
        let (issuer, ca_pem) = new_ca();
        let server = issue_with(&issuer, &SERVER_SANS, None);
        let ca = TestCa {
            issuer,
            ca_pem,
            server,
            ca_path: dir.join("ca.pem"),
            server_cert_path: dir.join("server.pem"),
            server_key_path: dir.join("server-key.pem"),
        };
        write_file(&ca.ca_path, &ca.ca_pem);
        write_file(&ca.server_cert_path, &ca.server.cert_pem);
        write_file(&ca.server_key_path, &ca.server.key_pem);
        ca
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn ca_path(&self) -> &Path {
        &self.ca_path
    }

    pub fn server_cert_path(&self) -> &Path {
        &self.server_cert_path
    }

    pub fn server_key_path(&self) -> &Path {
        &self.server_key_path
    }

    /// Issues another server certificate from this CA (e.g. for the webhook's
    /// own listener). Entries that parse as IP addresses become IP SANs.
    pub fn issue(&self, sans: &[&str]) -> IssuedCert {
        issue_with(&self.issuer, sans, None)
    }

    /// [`issue`](Self::issue), valid until `not_after`.
    pub fn issue_until(&self, sans: &[&str], not_after: time::OffsetDateTime) -> IssuedCert {
        issue_with(&self.issuer, sans, Some(not_after))
    }

    /// A reqwest client trusting only this CA, never using a proxy.
    pub fn reqwest_client(&self) -> reqwest::Client {
        init_crypto();
        let ca = reqwest::Certificate::from_pem(self.ca_pem.as_bytes())
            .expect("the test CA PEM parses for reqwest");
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .expect("build a reqwest client trusting the test CA")
    }
}

fn new_ca() -> (Issuer<'static, KeyPair>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("empty SAN list is valid");
    params
        .distinguished_name
        .push(DnType::CommonName, "pinhook test CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("generate the CA key");
    let cert = params.self_signed(&key).expect("self-sign the test CA");
    let pem = cert.pem();
    (Issuer::new(params, key), pem)
}

fn issue_with(
    issuer: &Issuer<'static, KeyPair>,
    sans: &[&str],
    not_after: Option<time::OffsetDateTime>,
) -> IssuedCert {
    let names: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("SANs are valid DNS names or IPs");
    if let Some(not_after) = not_after {
        params.not_after = not_after;
    }
    let cn = sans.first().copied().unwrap_or("pinhook test server");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("generate a server key");
    let cert = params
        .signed_by(&key, issuer)
        .expect("sign the server certificate with the test CA");
    IssuedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn write_file(path: &Path, contents: &str) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
