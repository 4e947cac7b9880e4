//! `pinhook check`: the dry run for CI pipelines and people. Reads manifests from files,
//! directories or stdin ([`read_inputs`]), runs them through the admission pipeline locally
//! with the user's docker credentials (`local`) or asks a cluster's `/v1/dry-run` (`remote`),
//! and renders the report as an aligned table, the endpoint's JSON, or the pinned manifests as
//! YAML ([`render`]).
//!
//! Exit codes are the report's ([`exit_code`]): 0 all good, 1 findings, 2 input errors; a
//! [`CheckError`] (the check could not run) is the caller's 2.

mod inputs;
mod local;
mod progress;
mod remote;
mod render;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

pub use inputs::read_inputs;
pub use render::{problems, render, RenderError};

use crate::admission::dry_run::Report;
use crate::app::AppError;
use crate::registry::RegistryConfig;
use crate::text::one_line;
use progress::Progress;

/// Why a check could not run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("failed to read '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read standard input")]
    Stdin(#[source] std::io::Error),
    #[error("no manifests found in '{0}' (looked for *.yaml, *.yml, *.json)")]
    EmptyDirectory(PathBuf),
    /// The local pipeline could not be set up (policy, registry client, docker config).
    #[error(transparent)]
    Setup(#[from] AppError),
    #[error("'{path}' is not a PEM bundle")]
    ServerCa {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("failed to build the HTTPS client")]
    HttpClient(#[source] reqwest::Error),
    #[error("failed to encode the manifests as JSON")]
    Encode(#[source] serde_json::Error),
    #[error("failed to read token file '{path}'")]
    ReadToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot read the answer of {url}")]
    ReadAnswer {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered {status}: {message}")]
    Refused {
        url: String,
        status: reqwest::StatusCode,
        message: String,
    },
    #[error("{url} sent an unreadable report")]
    UnreadableReport {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to render the report")]
    Render(#[source] RenderError),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// What to check, where, and how to show it.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Files, directories or `-` for stdin.
    pub inputs: Vec<String>,
    pub output: Output,
    /// Namespace for objects that name none.
    pub namespace: String,
    /// Bound on the whole check.
    pub timeout: Duration,
    pub target: Target,
    /// Fail (1) unless every image resolved to a digest (`--require-digest`).
    pub require_digest: bool,
}

/// Where the admission pipeline runs.
#[derive(Debug, Clone)]
pub enum Target {
    /// Here, with this policy file (or the defaults) and the user's docker credentials.
    Local {
        policy: Option<PathBuf>,
        registry: RegistryConfig,
    },
    /// In a pinhook, through its `/v1/dry-run`.
    Remote(Remote),
}

/// How to reach a pinhook's `/v1/dry-run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// e.g. `https://pinhook.example:8443`
    pub server: String,
    /// File holding the bearer token (e.g. a ServiceAccount token).
    pub token_file: Option<PathBuf>,
    /// PEM CA bundle to trust instead of the system roots.
    pub server_ca: Option<PathBuf>,
}

/// Runs the check: prints the report on stdout (and, for YAML, its problems on stderr) and
/// returns the report's exit code.
pub async fn run(config: CheckConfig) -> Result<u8, CheckError> {
    let documents = read_inputs(&config.inputs)?;
    let progress = Progress::start(documents.len());
    let report = match &config.target {
        Target::Remote(remote) => {
            remote::check(remote, &config.namespace, config.timeout, &documents).await
        }
        Target::Local { policy, registry } => {
            local::check(
                policy.as_deref(),
                registry,
                documents,
                &config.namespace,
                config.timeout,
            )
            .await
        }
    };
    progress.stop().await;
    let report = report?;
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = render(&report, config.output, colour).map_err(CheckError::Render)?;
    print!("{text}");
    if config.output == Output::Yaml {
        // The manifests go to stdout (often into a file); what kept them from being pinned
        // goes to stderr, so a broken document or a denial is never silent.
        for line in problems(&report) {
            eprintln!("pinhook: {}", one_line(&line));
        }
    }
    let undigested = if config.require_digest {
        without_digest(&report)
    } else {
        Vec::new()
    };
    for line in &undigested {
        eprintln!("pinhook: --require-digest: {}", one_line(line));
    }
    let code = exit_code(&report);
    Ok(if code == 0 && !undigested.is_empty() {
        1
    } else {
        code
    })
}

/// What `--require-digest` refuses: each image that did not resolve to a digest, or a note
/// that no image was checked at all (a check that saw nothing proves nothing).
pub fn without_digest(report: &Report) -> Vec<String> {
    let images: Vec<_> = report
        .objects
        .iter()
        .flat_map(|o| o.images.iter().map(move |i| (o, i)))
        .collect();
    if images.is_empty() {
        return vec![
            "no image was checked (none in the input, or the namespace's mode is off)".to_string(),
        ];
    }
    images
        .into_iter()
        .filter(|(_, image)| image.digest.is_none())
        .map(|(object, image)| {
            format!(
                "{} {}/{} container {}: {} has no digest ({})",
                object.kind,
                object.namespace,
                object.name,
                image.container,
                image.original,
                image.reason.as_deref().unwrap_or(&image.action)
            )
        })
        .collect()
}

/// 0 all good, 1 violations or unresolvable images, 2 input errors.
pub fn exit_code(report: &Report) -> u8 {
    if report.summary.errors > 0 {
        2
    } else if report.summary.has_findings() {
        1
    } else {
        0
    }
}
