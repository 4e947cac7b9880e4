//! `pinhook check --server`: the manifests sent to a pinhook's `/v1/dry-run`, the report it
//! answers renamed after the user's own files and documents.

use std::time::Duration;

use super::{CheckError, Remote};
use crate::admission::dry_run::{DocumentError, Report};
use crate::documents::{self, Document};

/// Asks `remote.server` to check the documents that parsed; documents that did not parse are
/// reported locally.
pub(super) async fn check(
    remote: &Remote,
    namespace: &str,
    timeout: Duration,
    documents: &[Document],
) -> Result<Report, CheckError> {
    let objects: Vec<&serde_json::Value> = documents
        .iter()
        .filter_map(|d| d.object.as_ref().ok())
        .collect();
    let client = client(remote, timeout)?;
    let url = format!("{}/v1/dry-run", remote.server.trim_end_matches('/'));
    let body = serde_json::to_vec(&objects).map_err(CheckError::Encode)?;
    let mut request = client
        .post(&url)
        .query(&[("namespace", namespace)])
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(path) = &remote.token_file {
        let token = std::fs::read_to_string(path).map_err(|source| CheckError::ReadToken {
            path: path.clone(),
            source,
        })?;
        request = request.bearer_auth(token.trim());
    }
    let response = request
        .send()
        .await
        .map_err(|source| CheckError::Unreachable {
            url: url.clone(),
            source,
        })?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|source| CheckError::ReadAnswer {
            url: url.clone(),
            source,
        })?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        return Err(CheckError::Refused {
            url,
            status,
            message,
        });
    }
    let mut report: Report = serde_json::from_slice(&body)
        .map_err(|source| CheckError::UnreadableReport { url, source })?;
    rename(&mut report, documents);
    Ok(report)
}

/// The HTTPS client, trusting `--server-ca` alone when given.
fn client(remote: &Remote, timeout: Duration) -> Result<reqwest::Client, CheckError> {
    let mut client = reqwest::Client::builder().timeout(timeout);
    if let Some(path) = &remote.server_ca {
        let pem = std::fs::read(path).map_err(|source| CheckError::Read {
            path: path.clone(),
            source,
        })?;
        let certificates =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| CheckError::ServerCa {
                path: path.clone(),
                source,
            })?;
        client = client.tls_certs_only(certificates);
    }
    client.build().map_err(CheckError::HttpClient)
}

/// The server numbers the array it got (`0[3]`); name the user's files and documents again,
/// and add the documents that did not parse (they never left this machine).
fn rename(report: &mut Report, documents: &[Document]) {
    let sent: Vec<&Document> = documents.iter().filter(|d| d.object.is_ok()).collect();
    let local = |index: &str| sent.get(documents::array_position(index)?).copied();
    for object in &mut report.objects {
        if let Some(document) = local(&object.index) {
            object.index = document.index.clone();
            object.source = document.source.clone();
        }
    }
    for error in &mut report.errors {
        if let Some(document) = local(&error.index) {
            error.index = document.index.clone();
            error.source = document.source.clone();
        }
    }
    for document in documents {
        if let Err(error) = &document.object {
            report.errors.push(DocumentError {
                index: document.index.clone(),
                source: document.source.clone(),
                error: error.to_string(),
            });
        }
    }
    report.summary.errors = report.errors.len();
}
