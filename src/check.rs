//! `pinhook check`: the dry run for CI pipelines and people. Reads manifests from files,
//! directories or stdin, runs them through the admission pipeline locally (with the user's
//! docker credentials) or asks a cluster's `/v1/dry-run`, and renders the report as an aligned
//! table, the endpoint's JSON, or the pinned manifests as YAML.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::admission::dry_run::{ObjectReport, Report};
use crate::documents::{self, Document};

/// Why inputs could not be read.
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
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// Reads every input: `-` is stdin, a directory is searched recursively for `*.yaml`,
/// `*.yml` and `*.json` (in name order), anything else is a file.
pub fn read_inputs(inputs: &[String]) -> Result<Vec<Document>, CheckError> {
    let mut documents = Vec::new();
    for input in inputs {
        if input == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(CheckError::Stdin)?;
            documents.extend(documents::parse(&text, Some("-")));
            continue;
        }
        let path = Path::new(input);
        let files = if path.is_dir() {
            let files = manifest_files(path)?;
            if files.is_empty() {
                return Err(CheckError::EmptyDirectory(path.to_path_buf()));
            }
            files
        } else {
            vec![path.to_path_buf()]
        };
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| CheckError::Read {
                path: file.clone(),
                source,
            })?;
            let name = file.display().to_string();
            documents.extend(documents::parse(&text, Some(&name)));
        }
    }
    Ok(documents)
}

fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, CheckError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|source| CheckError::Read {
            path: current.clone(),
            source,
        })?;
        for entry in entries {
            let path = entry
                .map_err(|source| CheckError::Read {
                    path: current.clone(),
                    source,
                })?
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
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

/// Renders the report in `output`; `colour` only for a terminal.
pub fn render(report: &Report, output: Output, colour: bool) -> Result<String, String> {
    match output {
        Output::Json => serde_json::to_string_pretty(report).map_err(|e| e.to_string()),
        Output::Yaml => render_yaml(report),
        Output::Table => Ok(render_table(report, colour)),
    }
}

/// One line per input error and per denied or violating image: what a YAML run reports on
/// stderr next to the manifests.
pub fn problems(report: &Report) -> Vec<String> {
    let errors = report.errors.iter().map(|e| match &e.source {
        Some(source) => format!("{source}: document {}: {}", e.index, e.error),
        None => format!("document {}: {}", e.index, e.error),
    });
    let images = report.objects.iter().flat_map(|object| {
        object
            .images
            .iter()
            .filter(|i| i.action == "denied" || i.action == "violation")
            .map(move |i| {
                let site = match i.container.is_empty() {
                    true => String::new(),
                    false => format!(" container {}", i.container),
                };
                format!(
                    "{}{site}: {}: {}",
                    object_name(object),
                    i.action,
                    i.reason.as_deref().unwrap_or("")
                )
            })
    });
    errors.chain(images).collect()
}

/// The pinned manifests, ready to commit: one YAML document per object, in input order.
fn render_yaml(report: &Report) -> Result<String, String> {
    let mut out = String::new();
    // Long single-line strings (pinned references) stay plain scalars, not folded `>-` blocks;
    // multi-line strings keep literal `|` blocks.
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    for object in &report.objects {
        let yaml = serde_saphyr::to_string_with_options(&object.object, options.clone())
            .map_err(|e| e.to_string())?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

fn render_table(report: &Report, colour: bool) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "OBJECT".into(),
        "CONTAINER".into(),
        "ACTION".into(),
        "IMAGE".into(),
        "RESULT".into(),
    ]];
    for object in &report.objects {
        for image in &object.images {
            let result = match image.action.as_str() {
                "pinned" => image.digest.clone().unwrap_or_default(),
                _ => image.reason.clone().unwrap_or_default(),
            };
            rows.push([
                object_name(object),
                image.container.clone(),
                image.action.clone(),
                image.original.clone(),
                result,
            ]);
        }
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c < 4 {
                let padding = widths[c].saturating_sub(cell.chars().count());
                let text = if c == 2 && colour {
                    paint(cell)
                } else {
                    cell.clone()
                };
                let _ = write!(line, "{text}{}  ", " ".repeat(padding));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for error in &report.errors {
        let source = error.source.as_deref().unwrap_or("input");
        let _ = writeln!(
            out,
            "error: {source} document {}: {}",
            error.index, error.error
        );
    }
    let s = &report.summary;
    let _ = writeln!(
        out,
        "{} objects: {} pinned, {} unchanged, {} exempt, {} denied, {} violations, {} errors",
        s.objects, s.pinned, s.unchanged, s.exempt, s.denied, s.violation, s.errors
    );
    out
}

fn object_name(object: &ObjectReport) -> String {
    let name = if object.name.is_empty() {
        "-"
    } else {
        &object.name
    };
    format!("{}/{}/{name}", object.kind, object.namespace)
}

fn paint(action: &str) -> String {
    let code = match action {
        "pinned" => "32",
        "denied" => "31",
        "violation" => "33",
        _ => "2",
    };
    format!("\u{1b}[{code}m{action}\u{1b}[0m")
}
