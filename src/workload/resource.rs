//! Images in custom resources the policy names (`customResources`): the fields an operator reads
//! the image of its Pods from, such as CloudNativePG `Cluster` `/spec/imageName` or Prometheus
//! Operator `Prometheus` `/spec/image`. Pinning there, not in the Pods, is how pinhook avoids
//! fighting an operator that compares its Pods' images with its own resource's (see
//! [`crate::owners`]): the operator then creates Pods that are already pinned.
//!
//! A path is an RFC 6901 JSON pointer in which a segment `*` stands for every item of a list
//! (`/spec/containers/*/image`). A field that is absent, or a list that is empty, holds no image;
//! a field that is present but not a string, or a `*` over something that is not a list, is an
//! error naming the pointer, as for a PodSpec. Pure.

use serde_json::Value;

use super::{child, present, step, unexpected, ImageField, ImageSite, WorkloadError};

/// One configured image path, split into unescaped segments (`*` for every list item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePath {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    EveryItem,
}

// === impl ImagePath ===

impl ImagePath {
    /// Parses `/spec/containers/*/image`. A literal `*` key can be written `~2` (never needed by
    /// any operator we know; it keeps the wildcard unambiguous).
    pub fn parse(text: &str) -> Result<ImagePath, WorkloadError> {
        let invalid = |reason: &str| WorkloadError::InvalidPointer {
            pointer: text.to_string(),
            reason: reason.to_string(),
        };
        let rest = text
            .strip_prefix('/')
            .ok_or_else(|| invalid("it must start with '/'"))?;
        let mut segments = Vec::new();
        for raw in rest.split('/') {
            if raw == "*" {
                segments.push(Segment::EveryItem);
                continue;
            }
            if raw.is_empty() {
                return Err(invalid("a segment is empty"));
            }
            let mut key = String::new();
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => key.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        Some('2') => key.push('*'),
                        _ => return Err(invalid("'~' must be followed by 0, 1 or 2")),
                    },
                }
            }
            segments.push(Segment::Key(key));
        }
        Ok(ImagePath {
            text: text.to_string(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Every image the `paths` find in `object`, in path order then list order. An image is new
/// unless `old_object` holds the same string at the same pointer.
pub fn resource_sites(
    paths: &[ImagePath],
    object: &Value,
    old_object: Option<&Value>,
) -> Result<Vec<ImageSite>, WorkloadError> {
    let mut sites = Vec::new();
    for path in paths {
        let mut found = Vec::new();
        expand(object, &path.segments, String::new(), &mut found)?;
        for (pointer, image) in found {
            let old = old_object
                .and_then(|old| super::lookup(old, &pointer))
                .and_then(Value::as_str);
            sites.push(ImageSite {
                is_new: old != Some(image.as_str()),
                field: ImageField::Resource,
                name: path.as_str().to_string(),
                pointer,
                image,
            });
        }
    }
    Ok(sites)
}

/// Walks `segments` from `value` (found at `at`), collecting (pointer, image) of each string
/// reached.
fn expand(
    value: &Value,
    segments: &[Segment],
    at: String,
    found: &mut Vec<(String, String)>,
) -> Result<(), WorkloadError> {
    let Some((first, rest)) = segments.split_first() else {
        return match value {
            Value::String(image) if !image.is_empty() => {
                found.push((at, image.clone()));
                Ok(())
            }
            Value::String(_) => Ok(()),
            _ => Err(unexpected(&at, "a string")),
        };
    };
    match first {
        Segment::Key(key) => match present(step(value, key)) {
            Some(next) => expand(next, rest, child(&at, key), found),
            None => Ok(()),
        },
        Segment::EveryItem => {
            let Some(items) = value.as_array() else {
                return Err(unexpected(&at, "a list"));
            };
            for (i, item) in items.iter().enumerate() {
                expand(item, rest, format!("{at}/{i}"), found)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(texts: &[&str]) -> Vec<ImagePath> {
        texts
            .iter()
            .map(|t| ImagePath::parse(t).unwrap_or_else(|e| panic!("{t}: {e}")))
            .collect()
    }

    fn found(sites: &[ImageSite]) -> Vec<(&str, &str, bool)> {
        sites
            .iter()
            .map(|s| (s.pointer.as_str(), s.image.as_str(), s.is_new))
            .collect()
    }

    #[test]
    fn a_cloudnative_pg_cluster_has_its_image_at_spec_image_name() -> Result<(), WorkloadError> {
        let cluster = json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "spec": {"instances": 3, "imageName": "ghcr.io/cloudnative-pg/postgresql:16.4"}});
        let sites = resource_sites(&paths(&["/spec/imageName"]), &cluster, None)?;
        assert_eq!(
            found(&sites),
            [(
                "/spec/imageName",
                "ghcr.io/cloudnative-pg/postgresql:16.4",
                true
            )]
        );
        assert_eq!(sites[0].field, ImageField::Resource);
        assert_eq!(sites[0].name, "/spec/imageName");
        Ok(())
    }

    #[test]
    fn a_wildcard_takes_every_item_of_a_list() -> Result<(), WorkloadError> {
        let prometheus = json!({"spec": {
        "image": "quay.io/prometheus/prometheus:v2.54.1",
        "containers": [
            {"name": "sidecar", "image": "registry.example/sidecar:1"},
            {"name": "no-image"},
            {"name": "proxy", "image": "registry.example/proxy:2"}
        ]}});
        let sites = resource_sites(
            &paths(&["/spec/image", "/spec/containers/*/image"]),
            &prometheus,
            None,
        )?;
        assert_eq!(
            found(&sites),
            [
                ("/spec/image", "quay.io/prometheus/prometheus:v2.54.1", true),
                (
                    "/spec/containers/0/image",
                    "registry.example/sidecar:1",
                    true
                ),
                ("/spec/containers/2/image", "registry.example/proxy:2", true),
            ]
        );
        Ok(())
    }

    #[test]
    fn missing_fields_hold_no_image_and_wrong_types_are_errors() -> Result<(), WorkloadError> {
        let paths = paths(&["/spec/imageName", "/spec/containers/*/image"]);
        for empty in [
            json!({}),
            json!({"spec": null}),
            json!({"spec": {"imageName": null, "containers": []}}),
            json!({"spec": {"imageName": ""}}),
        ] {
            assert!(resource_sites(&paths, &empty, None)?.is_empty(), "{empty}");
        }
        let not_a_string = json!({"spec": {"imageName": 5}});
        assert_eq!(
            resource_sites(&paths, &not_a_string, None)
                .map_err(|e| e.to_string())
                .err(),
            Some("/spec/imageName is not a string".to_string())
        );
        let not_a_list = json!({"spec": {"containers": {"image": "x"}}});
        assert_eq!(
            resource_sites(&paths, &not_a_list, None)
                .map_err(|e| e.to_string())
                .err(),
            Some("/spec/containers is not a list".to_string())
        );
        Ok(())
    }

    #[test]
    fn an_update_makes_new_only_the_images_it_changed() -> Result<(), WorkloadError> {
        let paths = paths(&["/spec/image", "/spec/containers/*/image"]);
        let old = json!({"spec": {"image": "a:1", "containers": [{"image": "b:1"}]}});
        let new =
            json!({"spec": {"image": "a:1", "containers": [{"image": "b:2"}, {"image": "c:1"}]}});
        let sites = resource_sites(&paths, &new, Some(&old))?;
        assert_eq!(
            found(&sites),
            [
                ("/spec/image", "a:1", false),
                ("/spec/containers/0/image", "b:2", true),
                ("/spec/containers/1/image", "c:1", true),
            ]
        );
        Ok(())
    }

    #[test]
    fn paths_are_pointers_with_escapes() -> Result<(), WorkloadError> {
        let path = ImagePath::parse("/metadata/annotations/example.dev~1image/~2")?;
        let object = json!({"metadata": {"annotations": {"example.dev/image": {"*": "x:1"}}}});
        let sites = resource_sites(&[path], &object, None)?;
        assert_eq!(
            found(&sites),
            [("/metadata/annotations/example.dev~1image/*", "x:1", true)]
        );
        for bad in ["spec/image", "", "/spec//image", "/spec/~3"] {
            assert!(ImagePath::parse(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }
}
