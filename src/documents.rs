//! Reading Kubernetes manifests as people hand them over: multi-document YAML (`kustomize
//! build`, `helm template`), a JSON object, a JSON array, or a `v1/List`. A malformed document
//! is reported with its index while the others are still read.

use serde_json::Value;

/// One object read from the input, or why its document could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Position in the input: `3`, or `3.items[2]` inside a List.
    pub index: String,
    pub source: Option<String>,
    pub object: Result<Value, ReadError>,
}

/// Why a document (or a list item) is not an object pinhook can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The parser's message, on one line (serde_json's error is neither `Clone` nor `Eq`).
    #[error("invalid JSON: {0}")]
    Json(String),
    /// The parser's message on one line, without its source snippet.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    #[error("document is not an object")]
    NotAnObject,
    #[error("list item is not an object")]
    ItemNotAnObject,
}

/// Splits and parses `text` (from `source`, a file name, for messages).
pub fn parse(text: &str, source: Option<&str>) -> Vec<Document> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    let documents: Vec<(usize, Result<Value, ReadError>)> =
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            vec![(
                0,
                serde_json::from_str(trimmed).map_err(|e| ReadError::Json(e.to_string())),
            )]
        } else {
            split_yaml(text)
                .into_iter()
                .enumerate()
                .filter(|(_, doc)| !is_blank(doc))
                .map(|(i, doc)| (i, parse_yaml(doc)))
                .collect()
        };
    let mut out = Vec::new();
    for (i, parsed) in documents {
        match parsed {
            Ok(Value::Null) => {}
            Ok(Value::Array(items)) => expand(&mut out, &i.to_string(), items, source),
            Ok(value) if is_list(&value) => {
                let items = value
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                expand(&mut out, &format!("{i}.items"), items, source);
            }
            Ok(value) if value.is_object() => out.push(document(i.to_string(), source, Ok(value))),
            Ok(_) => out.push(document(i.to_string(), source, Err(ReadError::NotAnObject))),
            Err(e) => out.push(document(i.to_string(), source, Err(e))),
        }
    }
    out
}

/// The position of an item of a top-level JSON array (`0[3]` → 3), as [`expand`] names it.
pub fn array_position(index: &str) -> Option<usize> {
    index.strip_prefix("0[")?.strip_suffix(']')?.parse().ok()
}

fn expand(out: &mut Vec<Document>, prefix: &str, items: Vec<Value>, source: Option<&str>) {
    for (j, item) in items.into_iter().enumerate() {
        let object = if item.is_object() {
            Ok(item)
        } else {
            Err(ReadError::ItemNotAnObject)
        };
        out.push(document(format!("{prefix}[{j}]"), source, object));
    }
}

fn document(index: String, source: Option<&str>, object: Result<Value, ReadError>) -> Document {
    Document {
        index,
        source: source.map(str::to_string),
        object,
    }
}

fn is_list(value: &Value) -> bool {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.ends_with("List") && value.get("items").is_some_and(Value::is_array)
}

/// Splits a YAML stream on document separators (`---` at the start of a line), as kubectl's
/// reader does, so one broken document does not hide the others.
fn split_yaml(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        let is_separator =
            bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t") || bare == "...";
        if is_separator {
            documents.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    documents.push(&text[start..]);
    documents
}

fn is_blank(document: &str) -> bool {
    document
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
}

fn parse_yaml(document: &str) -> Result<Value, ReadError> {
    serde_saphyr::from_str::<Value>(document).map_err(|e| {
        let text = e.to_string();
        let text = text.split(" --> ").next().unwrap_or(&text);
        let text = text.trim_start_matches("error: ");
        ReadError::Yaml(text.split_whitespace().collect::<Vec<_>>().join(" "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(docs: &[Document]) -> Vec<String> {
        docs.iter()
            .map(|d| match &d.object {
                Ok(v) => v["kind"].as_str().unwrap_or("?").to_string(),
                Err(e) => format!("error: {e}"),
            })
            .collect()
    }

    #[test]
    fn multi_document_yaml_with_a_broken_document() {
        let text = "# rendered\n---\napiVersion: v1\nkind: ConfigMap\n---\nkind: [oops\n---\n\n---\napiVersion: apps/v1\nkind: Deployment\n...\n";
        let docs = parse(text, Some("all.yaml"));
        let kinds = kinds(&docs);
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        assert_eq!(kinds[0], "ConfigMap");
        assert!(kinds[1].starts_with("error: invalid YAML"), "{kinds:?}");
        assert_eq!(kinds[2], "Deployment");
        assert_eq!(docs[1].index, "2");
        assert_eq!(docs[2].index, "4");
    }

    #[test]
    fn json_object_array_and_list() {
        assert_eq!(kinds(&parse(r#"{"kind":"Pod"}"#, None)), ["Pod"]);
        let array = parse(r#"[{"kind":"Pod"},{"kind":"Job"}]"#, None);
        assert_eq!(kinds(&array), ["Pod", "Job"]);
        assert_eq!(array[1].index, "0[1]");
        let list = parse(
            "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n- kind: Service\n",
            None,
        );
        assert_eq!(kinds(&list), ["Pod", "Service"]);
        assert_eq!(list[1].index, "0.items[1]");
        assert_eq!(array_position(&array[1].index), Some(1));
        assert_eq!(
            array_position(&list[1].index),
            None,
            "a List item is not an array item"
        );
        assert!(parse("{broken", None)[0].object.is_err());
    }

    #[test]
    fn scalars_and_empty_input() {
        assert!(parse("", None).is_empty());
        assert!(parse("---\n---\n# only a comment\n", None).is_empty());
        assert_eq!(
            parse("just a string\n", None)[0].object,
            Err(ReadError::NotAnObject)
        );
    }
}
