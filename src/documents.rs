//! Reading Kubernetes manifests as people hand them over: multi-document YAML (`kustomize
//! build`, `helm template`), a JSON object, a JSON array, or a `v1/List`. A malformed document
//! is reported with its index while the others are still read. [`parse_within`] reads input
//! from a caller pinhook does not trust (the dry-run endpoint) within [`ParseLimits`] for the
//! whole input: documents; values and scalar bytes (what the parsed input holds in memory,
//! alias replays included), spent document by document; and YAML events and alias expansions
//! shared out among the documents, so that a thousand documents cannot each spend a budget
//! meant for one.

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

/// Bounds on one input as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Documents and List items, in all.
    pub max_documents: usize,
    /// Values (mappings, sequences, scalars; YAML alias replays included) held by all the
    /// documents together. JSON counts its values before parsing: over the limit, the input is
    /// refused; a YAML document parses within what the documents before it left, or is
    /// unreadable.
    pub max_values: usize,
    /// Bytes of YAML scalars (alias replays included) held by all the documents together; a
    /// JSON input's strings are within its own length.
    pub max_scalar_bytes: usize,
    /// YAML events (nodes, scalars, collection starts and ends), shared out among the documents.
    pub max_events: usize,
    /// Events replayed by YAML aliases, shared out among the documents.
    pub max_replayed_events: usize,
}

/// Why an input is refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("the input holds {count} documents and list items; at most {limit} are read")]
    Documents { count: usize, limit: usize },
    #[error("the JSON input holds up to {count} values; at most {limit} are read")]
    Values { count: usize, limit: usize },
}

/// Each document's share of the events is at least this (a short document always parses).
const MIN_EVENTS_PER_DOCUMENT: usize = 4_096;

// === impl ParseLimits ===

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_documents: 1_000,
            max_values: 250_000,
            max_scalar_bytes: 64 << 20,
            max_events: 2_000_000,
            max_replayed_events: 1_000_000,
        }
    }
}

/// Splits and parses `text` (from `source`, a file name, for messages): input the user hands
/// pinhook itself (`pinhook check`), each YAML document within the parser's own budget.
pub fn parse(text: &str, source: Option<&str>) -> Vec<Document> {
    read(text, source, None)
}

/// [`parse`] within `limits` for the whole of `text`: each YAML document gets an equal share of
/// the events and alias expansions (at least [`MIN_EVENTS_PER_DOCUMENT`]) and what the
/// documents before it left of the values and scalar bytes; a JSON input with more values than
/// `limits.max_values`, or more documents than `limits.max_documents`, refuses the input.
pub fn parse_within(
    text: &str,
    source: Option<&str>,
    limits: &ParseLimits,
) -> Result<Vec<Document>, LimitError> {
    let too_many = |count| LimitError::Documents {
        count,
        limit: limits.max_documents,
    };
    let documents = split_yaml(text).len();
    if documents > limits.max_documents {
        return Err(too_many(documents));
    }
    if let Some(json) = as_json(text) {
        let count = json_values_at_most(json);
        if count > limits.max_values {
            return Err(LimitError::Values {
                count,
                limit: limits.max_values,
            });
        }
    }
    let read = read(text, source, Some(limits));
    match read.len() > limits.max_documents {
        true => Err(too_many(read.len())),
        false => Ok(read),
    }
}

/// `text` without a byte-order mark and leading space, when it is JSON (an object or array).
fn as_json(text: &str) -> Option<&str> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    (trimmed.starts_with('{') || trimmed.starts_with('[')).then_some(trimmed)
}

/// At least as many values as the JSON `text` holds: every value but a container's first
/// follows a `,`, and a first one follows a `[` or `{`.
fn json_values_at_most(text: &str) -> usize {
    let shape = JsonShape::of(text.as_bytes());
    1usize
        .saturating_add(shape.commas)
        .saturating_add(shape.objects)
        .saturating_add(shape.arrays)
}

/// What a JSON text is made of, counted outside strings (a `{` or `,` inside one, JSON in an
/// annotation, is text), in one pass over its bytes and without parsing it: what bounds and
/// estimates of its parsed size read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsonShape {
    pub objects: usize,
    pub arrays: usize,
    pub commas: usize,
    pub strings: usize,
}

impl JsonShape {
    pub fn of(bytes: &[u8]) -> JsonShape {
        let mut shape = JsonShape::default();
        let (mut in_string, mut escaped) = (false, false);
        for &byte in bytes {
            if in_string {
                match byte {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => {
                    in_string = true;
                    shape.strings += 1;
                }
                b'{' => shape.objects += 1,
                b'[' => shape.arrays += 1,
                b',' => shape.commas += 1,
                _ => {}
            }
        }
        shape
    }
}

/// What the documents read so far left of the values and scalar bytes.
#[derive(Debug, Clone, Copy)]
struct Left {
    values: usize,
    scalar_bytes: usize,
}

/// Limits of one YAML document.
#[derive(Debug, Clone, Copy)]
struct Share {
    events: usize,
    replayed: usize,
    left: Left,
}

fn read(text: &str, source: Option<&str>, limits: Option<&ParseLimits>) -> Vec<Document> {
    let documents: Vec<(usize, Result<Value, ReadError>)> = if let Some(json) = as_json(text) {
        vec![(
            0,
            serde_json::from_str(json).map_err(|e| ReadError::Json(e.to_string())),
        )]
    } else {
        let split: Vec<&str> = split_yaml(text);
        let n = split.iter().filter(|doc| !is_blank(doc)).count().max(1);
        let mut left = limits.map(|l| Left {
            values: l.max_values,
            scalar_bytes: l.max_scalar_bytes,
        });
        let mut parsed = Vec::new();
        for (i, doc) in split.into_iter().enumerate() {
            if is_blank(doc) {
                continue;
            }
            let share = limits.zip(left).map(|(l, left)| Share {
                events: (l.max_events / n).max(MIN_EVENTS_PER_DOCUMENT),
                replayed: (l.max_replayed_events / n).max(MIN_EVENTS_PER_DOCUMENT),
                left,
            });
            let document = parse_yaml(doc, share);
            if let (Some(left), Ok(value)) = (left.as_mut(), &document) {
                let (values, scalar_bytes) = held(value);
                left.values = left.values.saturating_sub(values);
                left.scalar_bytes = left.scalar_bytes.saturating_sub(scalar_bytes);
            }
            parsed.push((i, document));
        }
        parsed
    };
    let mut out = Vec::new();
    for (i, parsed) in documents {
        match parsed {
            Ok(Value::Null) => {}
            Ok(Value::Array(items)) => expand(&mut out, &i.to_string(), items, source),
            Ok(Value::Object(mut list)) if is_list(&list) => {
                // (taken, not copied: a List's items are most of what the input holds)
                let items = match list.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                expand(&mut out, &format!("{i}.items"), items, source);
            }
            Ok(value) if value.is_object() => out.push(document(i.to_string(), source, Ok(value))),
            Ok(_) => out.push(document(i.to_string(), source, Err(ReadError::NotAnObject))),
            Err(e) => out.push(document(i.to_string(), source, Err(e))),
        }
    }
    out
}

/// The values and scalar bytes (keys and strings) `value` holds.
fn held(value: &Value) -> (usize, usize) {
    match value {
        Value::Array(items) => items.iter().map(held).fold((1, 0), add),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| add((1, key.len()), held(value)))
            .fold((1, 0), add),
        Value::String(text) => (1, text.len()),
        _ => (1, 0),
    }
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
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

fn is_list(object: &serde_json::Map<String, Value>) -> bool {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.ends_with("List") && object.get("items").is_some_and(Value::is_array)
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

/// One YAML document; `share` bounds it below the parser's own defaults: its events and
/// replayed events, and what is left of the values and scalar bytes (alias replays and what
/// anchors record included).
fn parse_yaml(document: &str, share: Option<Share>) -> Result<Value, ReadError> {
    let parsed = match share {
        None => serde_saphyr::from_str::<Value>(document),
        Some(share) => {
            let values = share.left.values.max(1);
            let scalar_bytes = share.left.scalar_bytes;
            let mut budget = serde_saphyr::Budget::default();
            budget.max_events = budget.max_events.min(share.events);
            budget.max_nodes = budget.max_nodes.min(share.events).min(values);
            budget.max_recorded_anchor_events = budget
                .max_recorded_anchor_events
                .min(share.events)
                .min(values);
            budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.min(scalar_bytes);
            budget.max_recorded_anchor_bytes = budget.max_recorded_anchor_bytes.min(scalar_bytes);
            let mut options = serde_saphyr::Options::default();
            options.budget = Some(budget);
            options.alias_limits.max_total_replayed_events = share.replayed;
            serde_saphyr::from_str_with_options::<Value>(document, options)
        }
    };
    parsed.map_err(|e| {
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

    /// A document whose aliases replay about 11,000 events: fine alone, within the parser's own
    /// budget.
    fn alias_bomb() -> String {
        let mut text = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\n");
        text.push_str("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, from) in [("b", "a"), ("c", "b"), ("d", "c")] {
            let items = vec![format!("*{from}"); 10].join(", ");
            text.push_str(&format!("{name}: &{name} [{items}]\n"));
        }
        text
    }

    /// Issue 44: the dry run's YAML budget is the whole body's. One expensive document parses;
    /// twenty of them in one body each get a twentieth of the budget and are refused, so the
    /// body costs about one budget, not twenty. (The budget is a tenth of the default here, so
    /// that the test parses little.)
    #[test]
    fn alias_expansion_is_bounded_over_the_whole_input() {
        let limits = ParseLimits {
            max_documents: 1_000,
            max_events: 200_000,
            max_replayed_events: 100_000,
            ..ParseLimits::default()
        };
        let one = parse_within(&alias_bomb(), None, &limits).expect("within the limits");
        assert!(one[0].object.is_ok(), "{:?}", one[0].object);
        let twenty = vec![alias_bomb(); 20].join("---\n");
        assert!(
            parse(&twenty, None).iter().all(|d| d.object.is_ok()),
            "each within the parser's own budget"
        );
        let bounded = parse_within(&twenty, None, &limits).expect("20 documents");
        assert_eq!(bounded.len(), 20);
        for document in &bounded {
            match &document.object {
                Err(ReadError::Yaml(text)) => {
                    assert!(text.contains("limit") || text.contains("budget"), "{text}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn more_documents_than_the_limit_refuse_the_input() {
        let limits = ParseLimits {
            max_documents: 3,
            ..ParseLimits::default()
        };
        let text = "kind: A\n---\nkind: B\n---\nkind: C\n---\nkind: D\n";
        assert_eq!(
            parse_within(text, None, &limits).map(|d| d.len()),
            Err(LimitError::Documents { count: 4, limit: 3 })
        );
        let list = r#"[{"kind":"A"},{"kind":"B"},{"kind":"C"},{"kind":"D"},{"kind":"E"}]"#;
        assert_eq!(
            parse_within(list, None, &limits).map(|d| d.len()),
            Err(LimitError::Documents { count: 5, limit: 3 })
        );
    }

    /// Issue 44: what the documents hold is bounded over the whole input. A JSON body with more
    /// values than the limit is refused before it is parsed; YAML documents spend one budget of
    /// values, so the second of two documents that each fit alone is unreadable; an alias
    /// bomb of a few hundred bytes is refused within the values, and anchored scalars replayed
    /// past the scalar bytes are refused too.
    #[test]
    fn values_and_scalar_bytes_are_bounded_over_the_whole_input() {
        let limits = ParseLimits {
            max_values: 1_000,
            max_scalar_bytes: 64 << 10,
            ..ParseLimits::default()
        };
        let zeros = vec!["0"; 2_000].join(",");
        let json = format!(r#"{{"kind":"Pod","x":[{zeros}]}}"#);
        assert!(parse(&json, None)[0].object.is_ok(), "fine without limits");
        match parse_within(&json, None, &limits) {
            Err(LimitError::Values { count, limit }) => {
                assert!(count >= 2_003, "{count}");
                assert_eq!(limit, 1_000);
            }
            other => panic!("{other:?}"),
        }
        let fits = format!(r#"{{"kind":"Pod","x":[{}]}}"#, vec!["0"; 900].join(","));
        assert!(parse_within(&fits, None, &limits).expect("fits")[0]
            .object
            .is_ok());

        let document = format!("kind: Pod\nx: [{}]\n", vec!["a"; 600].join(","));
        let one = parse_within(&document, None, &limits).expect("one document");
        assert!(one[0].object.is_ok(), "{:?}", one[0].object);
        let two = parse_within(&format!("{document}---\n{document}"), None, &limits)
            .expect("two documents");
        assert!(two[0].object.is_ok(), "{:?}", two[0].object);
        match &two[1].object {
            Err(ReadError::Yaml(text)) => assert!(text.contains("budget"), "{text}"),
            other => panic!("the second document spends what the first left: {other:?}"),
        }

        let mut laughs = String::from("kind: Pod\nl0: &l0 [a,a,a,a,a,a,a,a,a,a]\n");
        for i in 1..6 {
            let items = vec![format!("*l{}", i - 1); 10].join(",");
            laughs.push_str(&format!("l{i}: &l{i} [{items}]\n"));
        }
        assert!(laughs.len() < 400, "{}", laughs.len());
        match &parse_within(&laughs, None, &limits).expect("one document")[0].object {
            Err(ReadError::Yaml(text)) => assert!(text.contains("budget"), "{text}"),
            other => panic!("{other:?}"),
        }

        let big = "x".repeat(16 << 10);
        let mut replayed = format!("kind: Pod\na: &a {big}\nitems: [");
        replayed.push_str(&["*a"; 8].join(","));
        replayed.push_str("]\n");
        assert!(
            parse(&replayed, None)[0].object.is_ok(),
            "fine without limits"
        );
        match &parse_within(&replayed, None, &limits).expect("one document")[0].object {
            Err(ReadError::Yaml(text)) => assert!(text.contains("ScalarBytes"), "{text}"),
            other => panic!("128 KiB of replayed scalars past 64 KiB: {other:?}"),
        }
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
