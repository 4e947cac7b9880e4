//! Reading `pinhook check`'s inputs: files, directories searched for manifests, and stdin.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::CheckError;
use crate::documents::{self, Document};

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
