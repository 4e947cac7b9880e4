//! The I/O half of admission, shared by `/mutate`, `/validate`, the dry-run endpoint and
//! `pinhook check`: [`Pinner`] reads the namespace's mode label, the pod's pull secrets and the
//! registry (each distinct tag once, all concurrently, within the review's deadline; a tag the
//! policy routes through mirrors at those mirrors, `registry::mirrored`), memoises
//! the digest each owner revision got, verifies the signatures of the digests admitted that the
//! policy's `verify` entries cover (each once, all at once, after the tags are resolved), and
//! hands everything to the pure core ([`super::plan`]), which decides.
//!
//! Never: decides what happens to an image (that is `plan`), or renders an answer.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::debug;

use super::loops::ledger::{LocalLedger, LoopLedger};
use super::plan::{self, Object, Plan, Resolutions};
use super::revision_pods::{sibling_digest, NoRevisionPods, RevisionPods, Sibling};
use crate::cluster::{read_mode_label, NamespaceLabels};
use crate::policy::{CompiledPolicy, Mode, PolicyHandle};
use crate::reference::{Digest, Reference};
use crate::registry::keyring::Keyring;
use crate::registry::mirrored::{self, MirrorKeyrings, RoutedCall};
use crate::registry::pull_secrets::{PodContext, PodKeyring, PullSecrets};
use crate::registry::{
    Origin, RegistryError, Resolution, ResolutionSource, Resolver, SignatureVerifier,
};
use crate::weight::weight;
use crate::workload::WorkloadError;

mod notices;
mod signatures;
mod verified_pods;

pub use self::verified_pods::VERIFIED_PODS_RSS_BYTES;

pub use self::notices::{
    DeniedPod, LoopTrip, OwnerHandler, OwnerNotice, DENIED_NOTICES_PER_NAMESPACE,
    DENIED_NOTICE_EVERY, NOTICE_BYTES,
};

/// One object to admit: what the pure core judges, and how pinhook may resolve for it.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub view: Object<'a>,
    /// The object's name (empty for `generateName` creations).
    pub name: &'a str,
    /// A CREATE (what the loop breaker counts).
    pub creating: bool,
    /// Nothing may be recorded (cache entries, tag moves).
    pub dry_run: bool,
    /// Resolve through this instead of pinhook's own resolvers (a dry run's memo).
    pub resolver: Option<&'a dyn Resolver>,
}

/// Why the pipeline could not plan at all (as opposed to denying single images).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot read the object's images")]
    Workload(#[from] WorkloadError),
}

/// The environment the pipeline runs in.
pub struct Pinner {
    policy: PolicyHandle,
    resolver: Arc<dyn Resolver>,
    /// Answers dry runs without recording anything.
    dry_run_resolver: Arc<dyn Resolver>,
    secrets: Arc<dyn PullSecrets>,
    namespaces: Arc<dyn NamespaceLabels>,
    /// The digest each owner revision got (a ReplicaSet's `pod-template-hash`, a StatefulSet's
    /// `controller-revision-hash`), so all the Pods of one revision run the same bytes even
    /// when the tag moves between their creations. For a revision the cluster can tell
    /// ([`Object::revision`]) what its stored Pods say replaces what this replica resolved, so
    /// replicas that raced on its first Pods agree from the next one on.
    owners: moka::sync::Cache<(String, String), Remembered>,
    /// The stored Pods of a revision: where every replica finds the digest its first Pods got.
    revision_pods: Arc<dyn RevisionPods>,
    /// The policy's per-mirror credentials files (`registries.resolveThrough`).
    mirror_keyrings: MirrorKeyrings,
    /// Pods created per listed operator, to stop pinning one that recreates them: counted in
    /// the cluster, so every replica counts every creation.
    loops: Arc<dyn LoopLedger>,
    /// Told once per trip of the loop breaker, and of an operator's denied Pods (metric, log,
    /// Event).
    on_owner: Option<OwnerHandler>,
    /// The operators told of a denied Pod lately (namespace, owner uid): one notice per owner
    /// per [`DENIED_NOTICE_EVERY`], however often it retries.
    told_denied: moka::sync::Cache<(String, String), ()>,
    /// Notices per namespace in the last [`DENIED_NOTICE_EVERY`].
    told_namespaces: moka::sync::Cache<String, u32>,
    /// The signature verdicts (`verify`).
    signatures: Option<Arc<dyn SignatureVerifier>>,
    /// Pods whose verification this replica remembers, for the next Pod of the same shape.
    verified_pods: verified_pods::VerifiedPods,
}

/// Bytes the owner-revision memo (this replica's own answers) may hold, keys and mirrors
/// included; at most 100,000 entries within it.
pub const OWNER_MEMO_BYTES: u64 = 4 << 20;
/// The parts a [`Pinner`] is built from.
pub struct PinnerParts {
    pub policy: PolicyHandle,
    pub resolver: Arc<dyn Resolver>,
    pub dry_run_resolver: Arc<dyn Resolver>,
    pub secrets: Arc<dyn PullSecrets>,
    pub namespaces: Arc<dyn NamespaceLabels>,
    /// How long an owner revision keeps its digests (`--owner-revision-ttl`).
    pub owner_ttl: Duration,
    /// Told of loop-breaker trips and operators' denied Pods (`None`: nothing but the plan's
    /// reason).
    pub on_owner: Option<OwnerHandler>,
    /// Where the loop breaker counts (`None`: this process's memory).
    pub loop_ledger: Option<Arc<dyn LoopLedger>>,
    /// The stored Pods of a revision (`None`: none, each replica's memory answers).
    pub revision_pods: Option<Arc<dyn RevisionPods>>,
    /// Verifies signatures for the policy's `verify` entries (`None`: nothing is verified, and
    /// every image such an entry covers is refused).
    pub signatures: Option<Arc<dyn SignatureVerifier>>,
}

type Resolved = Result<Resolution, RegistryError>;

/// A digest the owner-revision memo holds: what this replica resolved, or what the revision's
/// stored Pods carry (`from_cluster`), which every replica reads alike.
#[derive(Debug, Clone)]
struct Remembered {
    digest: Digest,
    origin: Option<Origin>,
    from_cluster: bool,
}

/// How long the namespace's mode label may take to read (it is cached after that).
const NAMESPACE_READ_TIMEOUT: Duration = Duration::from_secs(2);

// === impl Pinner ===

impl Pinner {
    pub fn new(parts: PinnerParts) -> Pinner {
        Pinner {
            policy: parts.policy,
            resolver: parts.resolver,
            dry_run_resolver: parts.dry_run_resolver,
            secrets: parts.secrets,
            namespaces: parts.namespaces,
            owners: moka::sync::Cache::builder()
                .max_capacity(OWNER_MEMO_BYTES)
                .time_to_live(parts.owner_ttl)
                .weigher(|key: &(String, String), remembered: &Remembered| {
                    let origin = remembered.origin.as_ref().map_or(0, |o| o.mirror.len());
                    weight(
                        key.0.len() + key.1.len() + origin + 256,
                        OWNER_MEMO_BYTES,
                        100_000,
                    )
                })
                .build(),
            mirror_keyrings: MirrorKeyrings::new(),
            loops: parts
                .loop_ledger
                .unwrap_or_else(|| Arc::new(LocalLedger::default())),
            revision_pods: parts
                .revision_pods
                .unwrap_or_else(|| Arc::new(NoRevisionPods)),
            on_owner: parts.on_owner,
            signatures: parts.signatures,
            verified_pods: verified_pods::VerifiedPods::new(),
            told_denied: moka::sync::Cache::builder()
                .max_capacity(NOTICE_BYTES)
                .time_to_live(DENIED_NOTICE_EVERY)
                .weigher(|key: &(String, String), _: &()| {
                    weight(key.0.len() + key.1.len() + 128, NOTICE_BYTES, 10_000)
                })
                .build(),
            told_namespaces: moka::sync::Cache::builder()
                .max_capacity(NOTICE_BYTES)
                .time_to_live(DENIED_NOTICE_EVERY)
                .weigher(|key: &String, _: &u32| weight(key.len() + 128, NOTICE_BYTES, 10_000))
                .build(),
        }
    }

    pub fn policy(&self) -> &PolicyHandle {
        &self.policy
    }

    /// The resolver that records nothing, for dry runs to wrap.
    pub fn dry_run_resolver(&self) -> Arc<dyn Resolver> {
        self.dry_run_resolver.clone()
    }

    /// The mode for a namespace (its label, else the policy's), with a warning when the label
    /// cannot be read (within `wait`) or is not a mode: [`CompiledPolicy::namespace_mode`]
    /// judges what [`read_mode_label`] read.
    pub async fn mode_for(
        &self,
        policy: &CompiledPolicy,
        namespace: &str,
        wait: Duration,
        warnings: &mut Vec<String>,
    ) -> Mode {
        if namespace.is_empty() {
            return policy.policy.mode;
        }
        let label = read_mode_label(self.namespaces.as_ref(), namespace, Some(wait)).await;
        let mode = policy.namespace_mode(namespace, label);
        warnings.extend(mode.warning);
        mode.mode
    }

    /// Plans the mutation of one object: pin what policy says, deny or report the rest.
    /// Resolution of all distinct tags runs concurrently, bounded by `budget` as a whole.
    pub async fn plan(&self, target: &Target<'_>, budget: Duration) -> Result<Plan, PipelineError> {
        let deadline = Instant::now() + budget;
        let policy = self.policy.current();
        if let Some(left) = self.break_loop(&policy, target).await {
            return Ok(left);
        }
        let mutation = plan::mutation(&policy, target.view);
        let mut warnings = Vec::new();
        // The label read gets a quarter of the budget at most: pull secrets and the registry
        // calls need the rest.
        let label_wait = NAMESPACE_READ_TIMEOUT.min(budget / 4);
        let mode = self
            .mode_if(
                mutation.reads_mode(),
                &policy,
                target,
                label_wait,
                &mut warnings,
            )
            .await;
        let triaged = mutation.triage(mode)?;
        let wanted = triaged.wanted();
        let mut resolutions = Resolutions::new();
        let mut refused = Vec::new();
        let mut keyring = None;
        if !wanted.is_empty() {
            let pod = self.keyring_for(&policy, target, &wanted, deadline).await;
            warnings.extend(pod.warnings);
            refused = pod.refused;
            resolutions = self
                .resolve_all(
                    &policy,
                    &wanted,
                    target,
                    &pod.keyring,
                    deadline,
                    &mut warnings,
                )
                .await;
            keyring = Some(pod.keyring);
        }
        let plan = triaged
            .finish(&resolutions, warnings)
            .with_refused_pull_secrets(refused);
        Ok(self
            .verify_signatures(&policy, target, plan, keyring, deadline)
            .await)
    }

    /// Checks without resolving any tag that every image new in this request is pinned (and that
    /// mirror configuration lets no mirror answer tag pulls), and that every digest a `verify`
    /// entry covers is signed: what `/validate` enforces after all mutating webhooks (sidecar
    /// injectors included) have run, within `budget`.
    ///
    /// It never asks the loop breaker: a Pod `/mutate` left as written because its owner kept
    /// recreating pinned Pods is checked like any other (denied in enforce), so every replica
    /// answers the same whatever the breaker of the replica that mutated remembers (issue 43).
    pub async fn check_pinned(
        &self,
        target: &Target<'_>,
        budget: Duration,
    ) -> Result<Plan, PipelineError> {
        let deadline = Instant::now() + budget;
        let policy = self.policy.current();
        let validation = plan::validation(&policy, target.view);
        let mut warnings = Vec::new();
        let mode = self
            .mode_if(
                validation.reads_mode(),
                &policy,
                target,
                NAMESPACE_READ_TIMEOUT,
                &mut warnings,
            )
            .await;
        let plan = validation.finish(mode, warnings)?;
        let plan = self
            .verify_signatures(&policy, target, plan, None, deadline)
            .await;
        self.tell_denied(&policy, target, &plan);
        Ok(plan)
    }

    /// The namespace's mode when the core says it matters; otherwise the policy's, which the
    /// core then ignores (the label is not worth an API call).
    async fn mode_if(
        &self,
        matters: bool,
        policy: &CompiledPolicy,
        target: &Target<'_>,
        wait: Duration,
        warnings: &mut Vec<String>,
    ) -> Mode {
        match matters {
            true => {
                self.mode_for(policy, target.view.namespace, wait, warnings)
                    .await
            }
            false => policy.policy.mode,
        }
    }

    async fn keyring_for(
        &self,
        policy: &CompiledPolicy,
        target: &Target<'_>,
        wanted: &[&Reference],
        deadline: Instant,
    ) -> PodKeyring {
        // A routed tag is resolved at its mirrors: plugins and helpers are asked for them too.
        let images: Vec<String> = wanted
            .iter()
            .flat_map(|r| {
                let mirrors =
                    policy.routes.route(r).into_iter().flat_map(|route| {
                        route.mirrors.into_iter().map(|m| m.reference.repository())
                    });
                std::iter::once(r.repository()).chain(mirrors)
            })
            .collect();
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        let pod = PodContext {
            namespace: target.view.namespace,
            secrets: target.view.secret_names(policy, target.name),
            images: &images,
            // Plugins and helpers must answer within 3/8 of what is left, the pod's secrets and
            // ServiceAccounts within half: the registry calls keep the other half, and a slow
            // plugin costs only its own answer.
            sources_deadline: Some(now + left * 3 / 8),
            // (the spec's own, or the stored Pod's)
            service_account: None,
        };
        match tokio::time::timeout_at(now + left / 2, self.secrets.keyring_for(&pod)).await {
            Ok(keyring) => keyring,
            Err(_) => PodKeyring {
                keyring: Keyring::new(),
                warnings: vec![
                    "pinhook: reading pull secrets timed out; resolved without them".to_string(),
                ],
                refused: Vec::new(),
                held: Default::default(),
            },
        }
    }

    /// Resolves every wanted tag at once; the answers are keyed by `tag_reference()`.
    async fn resolve_all(
        &self,
        policy: &CompiledPolicy,
        wanted: &[&Reference],
        target: &Target<'_>,
        keyring: &Keyring,
        deadline: Instant,
        warnings: &mut Vec<String>,
    ) -> Resolutions {
        let owner = target.view.owner_revision();
        // Read at most once per review, by the first tag the memo does not answer.
        let siblings = tokio::sync::OnceCell::new();
        let siblings = &siblings;
        // Routed tags (`registries.resolveThrough`) get each mirror's credentials up front.
        let mut unusable = Vec::new();
        let routed: Vec<Option<RoutedCall>> = wanted
            .iter()
            .map(|reference| {
                let route = policy.routes.route(reference)?;
                Some(RoutedCall::new(
                    reference,
                    &route,
                    keyring,
                    &self.mirror_keyrings,
                    &mut unusable,
                ))
            })
            .collect();
        // One warning per unusable credentials file, however many tags go through its mirror.
        unusable.sort();
        unusable.dedup();
        warnings.extend(unusable);
        let calls = wanted.iter().zip(&routed).map(|(reference, routed)| {
            let owner = owner.clone();
            async move {
                // A review may name thousands of images, and cached answers come at once: let
                // deadlines and health checks in between.
                tokio::task::consume_budget().await;
                let result = self
                    .resolve_one(
                        reference,
                        routed.as_ref(),
                        target,
                        (owner, siblings),
                        keyring,
                        deadline,
                    )
                    .await;
                (reference.tag_reference(), result)
            }
        });
        join_all(calls).await.into_iter().collect()
    }

    /// The stored Pods of the target's revision, within a quarter of what is left of the
    /// review's budget; `None` when the cluster cannot tell (no cluster, an error, no answer in
    /// time): the registry answers, and this replica remembers, as without a cluster.
    async fn siblings(&self, target: &Target<'_>, deadline: Instant) -> Option<Vec<Sibling>> {
        let revision = target.view.revision()?;
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left / 4, self.revision_pods.siblings(&revision)).await {
            Ok(Ok(siblings)) => siblings,
            Ok(Err(e)) => {
                debug!(error = %crate::error::error_chain(&e), "cannot read the revision's stored Pods");
                None
            }
            Err(_) => None,
        }
    }

    async fn resolve_one(
        &self,
        reference: &Reference,
        routed: Option<&RoutedCall>,
        target: &Target<'_>,
        (owner, siblings): (Option<String>, &tokio::sync::OnceCell<Option<Vec<Sibling>>>),
        keyring: &Keyring,
        deadline: Instant,
    ) -> Resolved {
        let credentials = match routed {
            // The owner memo is keyed by every credential the mirrors may use.
            Some(call) => call
                .mirrors
                .iter()
                .flat_map(|m| m.credentials.iter().cloned())
                .collect(),
            None => keyring.lookup(reference),
        };
        let owner_key = owner.map(|o| target.view.memo_key(&o, reference, &credentials));
        let remembered = owner_key.as_ref().and_then(|k| self.owners.get(k));
        if let Some(hit) = remembered.as_ref().filter(|r| r.from_cluster) {
            return Ok(memo_resolution(hit));
        }
        // What the revision's oldest stored Pod carries: what every replica reads alike. Asked
        // while this replica holds no digest the cluster told it (never for a dry run, nor under
        // `form: digest`, whose pins name no tag to match).
        let ask_cluster = target.view.revision().is_some()
            && !target.dry_run
            && policy_names_tags(&self.policy.current());
        let read = match (ask_cluster, &owner_key) {
            (true, Some(_)) => siblings
                .get_or_init(|| self.siblings(target, deadline))
                .await
                .as_deref(),
            _ => None,
        };
        let found = read.and_then(|siblings| sibling_digest(siblings, reference));
        if let (Some(digest), Some(key)) = (found, &owner_key) {
            let hit = Remembered {
                digest,
                origin: None,
                from_cluster: true,
            };
            self.owners.insert(key.clone(), hit.clone());
            return Ok(memo_resolution(&hit));
        }
        if let Some(hit) = remembered {
            return Ok(memo_resolution(&hit));
        }
        let resolver: &dyn Resolver = match (target.resolver, target.dry_run) {
            (Some(resolver), _) => resolver,
            (None, true) => self.dry_run_resolver.as_ref(),
            (None, false) => self.resolver.as_ref(),
        };
        let started = Instant::now();
        let result = match routed {
            Some(call) => {
                // The source check gets three quarters of what is left: a source that does not
                // answer (a disconnected cluster) leaves the mirror's digest unverified in time.
                let now = Instant::now();
                let verify_by = now + deadline.saturating_duration_since(now) * 3 / 4;
                let routed_call = mirrored::resolve_routed(resolver, call, Some(verify_by));
                match tokio::time::timeout_at(deadline, routed_call).await {
                    Ok(result) => result,
                    Err(_) => mirrored::last_known_routed(resolver, call).ok_or_else(|| {
                        RegistryError::Timeout {
                            registry: call
                                .mirrors
                                .first()
                                .map_or(reference.domain(), |m| m.reference.domain())
                                .to_string(),
                            timeout: Duration::from_millis(started.elapsed().as_millis() as u64),
                        }
                    }),
                }
            }
            None => {
                let call = resolver.resolve(reference, &credentials);
                match tokio::time::timeout_at(deadline, call).await {
                    Ok(result) => result,
                    // Out of time: the last known digest beats a denial, as when the registry is
                    // down.
                    Err(_) => resolver.last_known(reference, &credentials).ok_or_else(|| {
                        RegistryError::Timeout {
                            registry: reference.domain().to_string(),
                            timeout: Duration::from_millis(started.elapsed().as_millis() as u64),
                        }
                    }),
                }
            }
        };
        // A revision the cluster can tell is remembered from its stored Pods only, so that two
        // replicas that raced on its first Pods agree from the next one on.
        if let (Ok(resolution), Some(key), false) = (&result, owner_key, target.dry_run) {
            self.owners.insert(
                key,
                Remembered {
                    digest: resolution.digest.clone(),
                    origin: resolution.origin.clone(),
                    from_cluster: false,
                },
            );
        }
        result
    }
}

/// What the memo answers with.
fn memo_resolution(hit: &Remembered) -> Resolution {
    Resolution {
        digest: hit.digest.clone(),
        credential: crate::registry::Fingerprint::anonymous(),
        source: ResolutionSource::Cache,
        moved_from: None,
        age: Duration::ZERO,
        origin: hit.origin.clone(),
        verified: None,
    }
}

/// Whether pins keep their tag (`name:tag@digest`), so a stored Pod's image says which tag its
/// digest answers for.
fn policy_names_tags(policy: &CompiledPolicy) -> bool {
    policy.form() == crate::reference::PinForm::TagAndDigest
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use serde_json::{json, Value};

    use super::*;
    use crate::admission::plan::{Action, LeftAloneReason};
    use crate::cluster::NoNamespaces;
    use crate::policy::Policy;
    use crate::registry::pull_secrets::NodeOnly;
    use crate::registry::testing::{Answer, Scripted};

    fn pinner(resolver: Arc<Scripted>) -> Result<Pinner, crate::policy::PolicyError> {
        Ok(pinner_with(Policy::default().compile()?, resolver, None))
    }

    fn pinner_with(
        policy: CompiledPolicy,
        resolver: Arc<Scripted>,
        on_owner: Option<OwnerHandler>,
    ) -> Pinner {
        Pinner::new(PinnerParts {
            policy: PolicyHandle::new(policy),
            on_owner,
            ..parts(resolver)
        })
    }

    /// A pinner's parts under the default policy, resolving with `resolver`.
    pub(super) fn parts(resolver: Arc<Scripted>) -> PinnerParts {
        PinnerParts {
            policy: PolicyHandle::new(
                Policy::parse("mode: enforce\n")
                    .unwrap_or_else(|e| panic!("the test policy parses: {e}")),
            ),
            resolver: resolver.clone(),
            dry_run_resolver: resolver,
            secrets: Arc::new(NodeOnly {
                node: Keyring::new(),
            }),
            namespaces: Arc::new(NoNamespaces),
            owner_ttl: Duration::from_secs(60),
            on_owner: None,
            loop_ledger: None,
            revision_pods: None,
            signatures: None,
        }
    }

    /// The CREATE of Pod `p` in namespace `team`.
    pub(super) fn created_pod(pod: &Value) -> Target<'_> {
        Target {
            view: Object {
                group: "",
                kind: "Pod",
                subresource: "",
                namespace: "team",
                object: pod,
                old_object: None,
                user: "",
            },
            name: "p",
            creating: true,
            dry_run: false,
            resolver: None,
        }
    }

    /// A registry's error text reaches the user (kubectl prints a denial's message, warnings and
    /// audit annotations) with its terminal codes, line breaks and bidirectional controls
    /// escaped: shown as what they are, never obeyed or reordering what the user reads.
    #[tokio::test]
    async fn a_registry_error_reaches_the_user_escaped() -> Result<(), Box<dyn std::error::Error>> {
        const HOSTILE: &str =
            "boom\x1b[2J\u{9b}31m\nforged line\u{202e}txt.exe\u{2066}\u{200b}\u{feff}\u{061c} end";
        let raw = |text: &str| {
            text.chars()
                .any(|c| c.is_control() || crate::text::hides_text(c))
        };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/team/app:1.0"}]}});
        let target = created_pod(&pod);
        for mode in ["enforce", "audit"] {
            let policy = Policy::parse(&format!("mode: {mode}\n"))?;
            let pinner = pinner_with(policy, Scripted::new(&[Answer::Failing(HOSTILE)]), None);
            let plan = pinner.plan(&target, Duration::from_secs(5)).await?;
            let response = crate::admission::render::decide("uid", plan).response;
            let mut shown: Vec<String> = response.warnings.clone();
            shown.extend(response.audit_annotations.values().cloned());
            shown.extend(response.status.as_ref().map(|s| s.message.clone()));
            assert!(!shown.is_empty(), "{mode}: {response:?}");
            assert!(
                shown.iter().any(|text| text.contains("boom")),
                "{mode}: the registry's words are shown: {shown:?}"
            );
            for text in &shown {
                assert!(!raw(text), "{mode}: {text:?}");
            }
            let whole = shown.join(" ");
            assert!(
                whole.contains(r"\u{202e}txt.exe") && whole.contains(r"\u{1b}[2J"),
                "{mode}: escaped, not dropped: {shown:?}"
            );
            if mode == "enforce" {
                let message = response.status.map(|s| s.message).unwrap_or_default();
                assert!(
                    message.contains(r"\u{1b}[2J\u{9b}31m\nforged line\u{202e}txt.exe\u{2066}\u{200b}\u{feff}\u{61c} end"),
                    "{message}"
                );
            }
        }
        Ok(())
    }

    /// Ten containers naming five distinct tags: five registry calls, all at once, so the
    /// admission costs one registry round trip, not five.
    #[tokio::test]
    async fn distinct_tags_resolve_once_each_and_concurrently(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let slow = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(200));
        let pinner = pinner(slow.clone())?;
        let containers: Vec<Value> = (0..10)
            .map(|i| json!({"name": format!("c{i}"), "image": format!("registry.example/team/svc{}:1.0", i % 5)}))
            .collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
        let target = created_pod(&pod);
        let started = std::time::Instant::now();
        let plan = pinner.plan(&target, Duration::from_secs(5)).await?;
        let took = started.elapsed();
        assert_eq!(plan.outcomes.len(), 10);
        assert!(plan.outcomes.iter().all(|o| o.action == Action::Pinned));
        assert_eq!(slow.calls(), 5);
        assert_eq!(slow.most_at_once.load(Ordering::SeqCst), 5);
        assert!(took < Duration::from_millis(600), "took {took:?}");
        Ok(())
    }

    /// Issue 43: an operator's unpinned Pod is denied by /validate in enforce, and its owner is
    /// told once (the `PodsDenied` Event), however often the operator retries; dry runs tell
    /// nothing, and audit denies nothing.
    #[tokio::test]
    async fn an_operators_denied_pod_is_told_to_its_owner_once(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = told.clone();
        let record: OwnerHandler = Arc::new(move |notice: OwnerNotice| {
            if let (Ok(mut told), OwnerNotice::Denied(pod)) = (seen.lock(), notice) {
                told.push(pod);
            }
        });
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "db-", "ownerReferences": [{"apiVersion": "example.dev/v1",
                "kind": "Widget", "name": "db", "uid": "w1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "registry.example/team/db:1.0"}]}});
        let target = |dry_run: bool| Target {
            dry_run,
            ..created_pod(&pod)
        };
        let pinner = pinner_with(
            Policy::parse("mode: enforce\n")?,
            Scripted::new(&[Answer::Digest('a')]),
            Some(record.clone()),
        );
        let mutated = pinner.plan(&target(false), Duration::from_secs(5)).await?;
        assert_eq!(
            mutated.left_alone.map(|l| l.reason),
            Some(LeftAloneReason::Operator)
        );
        assert_eq!(
            pinner
                .check_pinned(&target(true), Duration::from_secs(5))
                .await?
                .denials()
                .count(),
            1
        );
        assert!(
            told.lock().map(|t| t.is_empty()).unwrap_or(false),
            "dry run"
        );
        for _ in 0..3 {
            let checked = pinner
                .check_pinned(&target(false), Duration::from_secs(5))
                .await?;
            assert_eq!(checked.denials().count(), 1);
        }
        let told = told.lock().map(|t| t.clone()).unwrap_or_default();
        assert_eq!(
            told,
            [DeniedPod {
                namespace: "team".to_string(),
                api_version: "example.dev/v1".to_string(),
                kind: "Widget".to_string(),
                name: "db".to_string(),
                uid: "w1".to_string(),
                image: "registry.example/team/db:1.0".to_string(),
            }]
        );
        let audit = pinner_with(
            Policy::parse("mode: audit\n")?,
            Scripted::new(&[Answer::Digest('a')]),
            Some(record),
        );
        let checked = audit
            .check_pinned(&target(false), Duration::from_secs(5))
            .await?;
        assert_eq!(
            (checked.denials().count(), checked.violations().count()),
            (0, 1)
        );
        Ok(())
    }

    /// The stored Pods of the cluster (by revision label value), shared by the "replicas" of a
    /// test.
    #[derive(Default)]
    struct Stored(std::sync::Mutex<Vec<(String, Sibling)>>);

    #[async_trait::async_trait]
    impl RevisionPods for Stored {
        async fn siblings(
            &self,
            revision: &crate::admission::revision_pods::Revision<'_>,
        ) -> Result<Option<Vec<Sibling>>, kube::Error> {
            let stored = self.0.lock().map(|s| s.clone()).unwrap_or_default();
            Ok(Some(
                stored
                    .into_iter()
                    .filter(|(value, _)| value == revision.value)
                    .map(|(_, sibling)| sibling)
                    .collect(),
            ))
        }
    }

    /// Issue 43: every replica gives a revision's Pods the digest its first Pod got. Replica A
    /// resolves the tag to `a` for the first Pod of a ReplicaSet revision; the tag then moves,
    /// and replica B's registry answers `b`. B still pins the next Pod of that revision to `a`,
    /// the digest the stored Pod carries (before, B's own memory knew nothing of A's and it
    /// pinned `b`). A Pod of another revision gets `b`.
    #[tokio::test]
    async fn replicas_pin_one_revision_to_the_digest_its_stored_pods_carry(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let stored = Arc::new(Stored::default());
        let replica = |answer: char| {
            Pinner::new(PinnerParts {
                revision_pods: Some(stored.clone() as Arc<dyn RevisionPods>),
                ..parts(Scripted::new(&[Answer::Digest(answer)]))
            })
        };
        let (a, b) = (replica('a'), replica('b'));
        let pod = |revision: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-", "labels": {"pod-template-hash": revision},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": "web-1", "uid": "rs-1", "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "registry.example/team/app:1.0"}]}})
        };
        let first = pod("r1");
        let plan = a.plan(&created_pod(&first), Duration::from_secs(5)).await?;
        assert_eq!(
            plan.outcomes[0].digest,
            Some(crate::registry::testing::digest('a'))
        );
        // The apiserver stores it, pinned.
        if let Ok(mut pods) = stored.0.lock() {
            pods.push((
                "r1".to_string(),
                Sibling {
                    created: "2026-11-29T10:00:00Z".to_string(),
                    name: "web-x1".to_string(),
                    images: vec![plan.outcomes[0].result.clone()],
                },
            ));
        }
        let second = pod("r1");
        let plan = b
            .plan(&created_pod(&second), Duration::from_secs(5))
            .await?;
        assert_eq!(
            plan.outcomes[0].digest,
            Some(crate::registry::testing::digest('a')),
            "the stored Pod's digest, not replica B's own answer"
        );
        let other = pod("r2");
        let plan = b.plan(&created_pod(&other), Duration::from_secs(5)).await?;
        assert_eq!(
            plan.outcomes[0].digest,
            Some(crate::registry::testing::digest('b'))
        );
        Ok(())
    }

    /// An operator wrongly listed as safe to pin, recreating its Pod each time it is pinned:
    /// pinned up to `maxPods` times, then left as written by /mutate for the pause (and denied
    /// by /validate in enforce), the handler told once.
    #[tokio::test]
    async fn the_loop_breaker_stops_pinning_an_owner_that_recreates_its_pods(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let policy = Policy::parse(
            "mode: enforce\nowners:\n  pinPodsOf:\n  - group: example.dev\n    kind: Widget\n  loopBreaker:\n    maxPods: 3\n",
        )?;
        let trips = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = trips.clone();
        let record: OwnerHandler = Arc::new(move |notice: OwnerNotice| {
            if let (Ok(mut trips), OwnerNotice::Loop(trip)) = (seen.lock(), notice) {
                trips.push(trip);
            }
        });
        let pinner = pinner_with(policy, Scripted::new(&[Answer::Digest('a')]), Some(record));
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "db-", "ownerReferences": [{"apiVersion": "example.dev/v1",
                "kind": "Widget", "name": "db", "uid": "w1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "registry.example/team/db:1.0"}]}});
        let target = |creating: bool, dry_run: bool| Target {
            view: Object {
                group: "",
                kind: "Pod",
                subresource: "",
                namespace: "team",
                object: &pod,
                old_object: None,
                user: "",
            },
            name: "",
            creating,
            dry_run,
            resolver: None,
        };
        let mut actions = Vec::new();
        for _ in 0..5 {
            let plan = pinner
                .plan(&target(true, false), Duration::from_secs(5))
                .await?;
            actions.push(match &plan.left_alone {
                Some(left) => left.reason.as_str().to_string(),
                None => format!("{:?}", plan.outcomes[0].action),
            });
        }
        assert_eq!(
            actions,
            ["Pinned", "Pinned", "Pinned", "owner_loop", "owner_loop"]
        );
        let trips = trips.lock().map(|t| t.clone()).unwrap_or_default();
        assert_eq!(trips.len(), 1, "told once per trip");
        assert_eq!(
            (
                trips[0].kind.as_str(),
                trips[0].name.as_str(),
                trips[0].count
            ),
            ("Widget", "db", 4)
        );
        // /validate never asks the breaker (issue 43): what /mutate left as written is checked
        // like any Pod, denied in enforce, so another replica, whose breaker did not trip,
        // answers the same.
        let checked = pinner
            .check_pinned(&target(true, false), Duration::from_secs(5))
            .await?;
        assert_eq!(checked.denials().count(), 1);
        assert_eq!(checked.left_alone, None);
        let fresh = pinner_with(
            Policy::parse("mode: enforce\n")?,
            Scripted::new(&[Answer::Digest('a')]),
            None,
        );
        let elsewhere = fresh
            .check_pinned(&target(true, false), Duration::from_secs(5))
            .await?;
        assert_eq!(
            (elsewhere.denials().count(), elsewhere.left_alone),
            (1, None)
        );
        // Dry runs and updates never count: another owner's dry runs keep being pinned.
        let mut other = pod.clone();
        other["metadata"]["ownerReferences"][0]["uid"] = json!("w2");
        for _ in 0..6 {
            let view = Object {
                object: &other,
                ..target(true, true).view
            };
            let dry = Target {
                view,
                ..target(true, true)
            };
            let plan = pinner.plan(&dry, Duration::from_secs(5)).await?;
            assert!(plan.left_alone.is_none());
        }
        Ok(())
    }
}
