//! Rendering a check report: an aligned table (coloured on a terminal), the endpoint's JSON,
//! or the pinned manifests as YAML, plus the one-line problems a YAML run prints on stderr.

use std::fmt::Write as _;

use super::Output;
use crate::admission::dry_run::{ObjectReport, Report};
use crate::text::{into_one_line, one_line};

/// Why a report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("as JSON")]
    Json(#[source] serde_json::Error),
    #[error("as YAML")]
    Yaml(#[source] serde_saphyr::ser::Error),
}

/// Renders the report in `output`; `colour` only for a terminal.
pub fn render(report: &Report, output: Output, colour: bool) -> Result<String, RenderError> {
    match output {
        Output::Json => serde_json::to_string_pretty(report).map_err(RenderError::Json),
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
fn render_yaml(report: &Report) -> Result<String, RenderError> {
    let mut out = String::new();
    // Long single-line strings (pinned references) stay plain scalars, not folded `>-` blocks;
    // multi-line strings keep literal `|` blocks.
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    for object in &report.objects {
        let yaml = serde_saphyr::to_string_with_options(&object.object, options.clone())
            .map_err(RenderError::Yaml)?;
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
            let mut result = match image.action.as_str() {
                "pinned" => image.digest.clone().unwrap_or_default(),
                _ => image.reason.clone().unwrap_or_default(),
            };
            // A verified signature is said beside the digest; an unverified one is the reason.
            if let (Some(signature), "pinned" | "unchanged") =
                (&image.signature, image.action.as_str())
            {
                result.push_str(&format!(" ({signature})"));
            }
            // Text from the manifests and the registries: one line each, nothing raw.
            rows.push([
                into_one_line(object_name(object)),
                into_one_line(image.container.clone()),
                image.action.clone(),
                into_one_line(image.original.clone()),
                into_one_line(result),
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
        let line = format!("error: {source} document {}: {}", error.index, error.error);
        let _ = writeln!(out, "{}", one_line(&line));
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
