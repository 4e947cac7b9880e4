//! Per-image credential sources: what kubelet's credential provider plugins and docker's
//! credential helpers are to a keyring. A [`CredentialSource`] is asked for one image at a time
//! and answers with docker-config-shaped entries (registry key → credential), which the keyring
//! then matches to that image with kubelet's rules, as kubelet's `providersDockerKeyring`
//! (`externalCredentialProviderKeyring` since 1.33) adds each provider's `DockerConfig` to a
//! fresh `BasicDockerKeyring` per lookup.
//!
//! Owns: the trait, [`Provided`], and [`Keyring::for_images`] / [`Keyring::for_pod`], which ask
//! every source of a keyring about every image concurrently (yielding to the scheduler as its
//! budget runs out), for one [`Puller`] (the Pod's ServiceAccount, for plugins handed its token). Never: decides how long an answer is good for (each
//! source caches as its protocol says) or waits without bound (each source bounds itself).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::join_all;

use super::{Basic, Keyring, Layer};
use crate::registry::credentials::service_account_tokens::Puller;
use crate::registry::credentials::Credential;

/// Credentials that depend on the image being pulled.
#[async_trait]
pub trait CredentialSource: Send + Sync {
    /// A short name for debugging output (never a credential).
    fn name(&self) -> &str;

    /// The entries for `image`, a normalised repository without tag (`docker.io/library/nginx`,
    /// kubelet's `repoToPull`), and what the user should hear (a plugin that failed).
    async fn provide(&self, image: &str) -> Provided;

    /// The entries for `image` when `puller` pulls it: what [`CredentialSource::provide`]
    /// gives, unless the source hands the Pod's ServiceAccount token to a plugin.
    async fn provide_for(&self, image: &str, puller: &Puller<'_>) -> Provided {
        let _ = puller;
        self.provide(image).await
    }

    /// The ServiceAccount annotation keys this source hands a plugin with the account's token
    /// (KEP-4412); `None` when it hands no token.
    fn account_annotations(&self) -> Option<Vec<String>> {
        None
    }
}

/// A source's answer for one image.
#[derive(Debug, Default, Clone)]
pub struct Provided {
    /// (registry key as a docker config writes it, credential), in the order to add them.
    pub entries: Vec<(String, Credential)>,
    /// One line each, for the admission review's warnings.
    pub warnings: Vec<String>,
}

// === impl Keyring ===

impl Keyring {
    /// This keyring with every source asked about every one of `images` (normalised
    /// repositories): the sources' layers replaced by their answers, so that
    /// [`Keyring::lookup`] of one of those images sees what the source gave for it (and of
    /// any other image, nothing from the source). Also the sources' warnings, each once.
    pub async fn for_images(&self, images: &[String]) -> (Keyring, Vec<String>) {
        self.for_pod(images, &Puller::NONE).await
    }

    /// [`Keyring::for_images`] for the images `puller` pulls.
    pub async fn for_pod(&self, images: &[String], puller: &Puller<'_>) -> (Keyring, Vec<String>) {
        let images: BTreeSet<&String> = images.iter().collect();
        let asks = self.layers.iter().map(|layer| {
            let images = &images;
            async move {
                let Layer::Source(source) = layer else {
                    return (layer.clone(), Vec::new());
                };
                let answers = join_all(images.iter().map(|image| async move {
                    // A review names as many images as it likes, and cached answers come at
                    // once: let deadlines and health checks in between.
                    tokio::task::consume_budget().await;
                    ((*image).clone(), source.provide_for(image, puller).await)
                }))
                .await;
                let mut warnings = Vec::new();
                let per_image: BTreeMap<String, Basic> = answers
                    .into_iter()
                    .map(|(image, provided)| {
                        warnings.extend(provided.warnings);
                        (image, Basic::from_entries(provided.entries))
                    })
                    .collect();
                (Layer::Answered(Arc::new(per_image)), warnings)
            }
        });
        let mut warnings: Vec<String> = Vec::new();
        let mut layers = Vec::new();
        for (layer, said) in join_all(asks).await {
            layers.push(layer);
            for line in said {
                if !warnings.contains(&line) {
                    warnings.push(line);
                }
            }
        }
        (Keyring { layers }, warnings)
    }

    /// The ServiceAccount annotation keys its sources hand plugins with a token; `None` when
    /// none hands a token.
    pub fn account_annotations(&self) -> Option<BTreeSet<String>> {
        let mut wanted: Option<BTreeSet<String>> = None;
        for layer in &self.layers {
            if let Layer::Source(source) = layer {
                if let Some(keys) = source.account_annotations() {
                    wanted.get_or_insert_with(BTreeSet::new).extend(keys);
                }
            }
        }
        wanted
    }

    /// True when some layer is a source still to be asked ([`Keyring::for_images`]).
    pub fn has_sources(&self) -> bool {
        self.layers.iter().any(|l| matches!(l, Layer::Source(_)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::reference::Reference;

    /// Answers `registry.example/team` for images under it, with one credential per call.
    struct Counting {
        calls: AtomicUsize,
    }

    #[async_trait]
    impl CredentialSource for Counting {
        fn name(&self) -> &str {
            "counting"
        }

        async fn provide(&self, image: &str) -> Provided {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let entries = match image.starts_with("registry.example/") {
                true => vec![(
                    "registry.example/team".to_string(),
                    Credential::basic("plugin", format!("p{n}")),
                )],
                false => Vec::new(),
            };
            Provided {
                entries,
                warnings: vec!["said once".to_string()],
            }
        }
    }

    /// 20,000 images whose answers come at once, on a one-thread runtime: another task runs
    /// while they are asked (before, the whole join held the thread).
    #[tokio::test(flavor = "current_thread")]
    async fn asking_a_reviews_images_lets_other_tasks_run() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            }
        });
        let mut keyring = Keyring::new();
        keyring.push_source(Arc::new(Counting {
            calls: AtomicUsize::new(0),
        }));
        let images: Vec<String> = (0..20_000)
            .map(|i| format!("registry.example/team/app-{i}"))
            .collect();
        let (_, warnings) = keyring.for_images(&images).await;
        let ran = ticks.load(Ordering::SeqCst);
        ticker.abort();
        assert_eq!(warnings, vec!["said once".to_string()]);
        assert!(ran > 10, "the other task ran {ran} times");
    }

    fn reference(image: &str) -> Reference {
        Reference::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"))
    }

    #[tokio::test]
    async fn a_source_answers_only_for_the_images_it_was_asked_about_after_the_static_layers() {
        let source = Arc::new(Counting {
            calls: AtomicUsize::new(0),
        });
        let mut keyring = Keyring::new();
        keyring.add("registry.example", Credential::basic("node", "n"));
        keyring.push_source(source.clone());
        assert!(keyring.has_sources());
        let team = reference("registry.example/team/app:1");
        assert_eq!(keyring.lookup(&team), vec![Credential::basic("node", "n")]);

        let images = vec![
            team.repository(),
            team.repository(),
            "docker.io/library/x".into(),
        ];
        let (asked, warnings) = keyring.for_images(&images).await;
        assert_eq!(source.calls.load(Ordering::SeqCst), 2, "each image once");
        assert_eq!(warnings, vec!["said once".to_string()]);
        assert!(!asked.has_sources());
        let found = asked.lookup(&team);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0], Credential::basic("node", "n"));
        assert!(matches!(&found[1], Credential::Basic { username, .. } if username == "plugin"));
        let other = reference("registry.example/team/other:1");
        assert_eq!(asked.lookup(&other), vec![Credential::basic("node", "n")]);
    }
}
