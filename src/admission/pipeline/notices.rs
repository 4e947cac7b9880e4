//! What the pipeline tells about owners of Pods (an [`OwnerNotice`] to the handler `serve`
//! installs, which writes an Event): the loop breaker's trip of an owner that keeps recreating
//! its pinned Pods, and an operator whose Pods `/validate` denies, each rate limited here.
//!
//! Owns: [`OwnerNotice`] and its rates ([`DENIED_NOTICE_EVERY`],
//! [`DENIED_NOTICES_PER_NAMESPACE`], [`NOTICE_BYTES`]); `Pinner::break_loop` and
//! `Pinner::tell_denied`. Never: words the Event (the handler does).

use std::sync::Arc;
use std::time::Duration;

use super::super::loops::LoopVerdict;
use super::super::plan::{self, LeftAlone, LeftAloneReason, Plan};
use super::{Pinner, Target};
use crate::policy::CompiledPolicy;

/// What the loop breaker found: an owner listed as safe to pin that recreates its Pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopTrip {
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub image: String,
    pub count: usize,
    pub window: Duration,
    pub pause: Duration,
}

/// An operator's Pod `/validate` denied in enforce: pinhook leaves its Pods as the operator
/// writes them, and the operator wrote an unpinned image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedPod {
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// The first unpinned image, as written.
    pub image: String,
}

/// What pinhook tells about an owner of Pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerNotice {
    Loop(LoopTrip),
    Denied(DeniedPod),
}

/// Called once per trip of the loop breaker, and at most once per [`DENIED_NOTICE_EVERY`] per
/// operator whose Pods `/validate` denies.
pub type OwnerHandler = Arc<dyn Fn(OwnerNotice) + Send + Sync>;

/// How often an operator whose Pods are denied is told again (it retries all the while).
pub const DENIED_NOTICE_EVERY: Duration = Duration::from_secs(60);
/// Bytes each of the two PodsDenied rate memos (owners told, namespaces told) may hold; at
/// most 10,000 entries each within it.
pub const NOTICE_BYTES: u64 = 1 << 20;
/// Owners of one namespace told within [`DENIED_NOTICE_EVERY`] at most.
pub const DENIED_NOTICES_PER_NAMESPACE: u32 = 10;

// === impl Pinner ===

impl Pinner {
    /// Tells the handler of an operator's Pod this plan denies (not on a dry run), at most once
    /// per owner per [`DENIED_NOTICE_EVERY`].
    pub(super) fn tell_denied(&self, policy: &CompiledPolicy, target: &Target<'_>, plan: &Plan) {
        let (Some(on_owner), false) = (&self.on_owner, target.dry_run) else {
            return;
        };
        // Only an image denied as not pinned: what the notice says, and what pinning the
        // operator's resource fixes.
        let Some(denied) = plan
            .denials()
            .find(|o| o.violation == Some(plan::Reason::Unpinned))
        else {
            return;
        };
        let Some(owner) = target.view.operator(policy) else {
            return;
        };
        // One notice per owner a minute, and at most DENIED_NOTICES_PER_NAMESPACE owners of one
        // namespace a minute: the owner's kind, name and uid are the Pod author's to write.
        let namespace = target.view.namespace.to_string();
        let key = (namespace.clone(), owner.uid.to_string());
        if self.told_denied.contains_key(&key) {
            return;
        }
        let told_here = self.told_namespaces.get(&namespace).unwrap_or(0);
        if told_here >= DENIED_NOTICES_PER_NAMESPACE {
            return;
        }
        self.told_namespaces.insert(namespace, told_here + 1);
        self.told_denied.insert(key, ());
        on_owner(OwnerNotice::Denied(DeniedPod {
            namespace: target.view.namespace.to_string(),
            api_version: owner.api_version.to_string(),
            kind: owner.kind.to_string(),
            name: owner.name.to_string(),
            uid: owner.uid.to_string(),
            image: denied.site.image.clone(),
        }));
    }

    /// `/mutate`'s plan of a Pod whose owner the loop breaker paused (see [`super::loops`]):
    /// left as written (and checked by `/validate` like any Pod). Only a CREATE counts as a
    /// creation, never a dry run; an UPDATE or a dry run only asks whether the owner is paused.
    pub(super) async fn break_loop(
        &self,
        policy: &CompiledPolicy,
        target: &Target<'_>,
    ) -> Option<Plan> {
        let owner = target.view.listed_operator(policy)?;
        let settings = &policy.policy.owners.loop_breaker;
        let key = (target.view.namespace, owner.uid);
        let verdict = match target.creating && !target.dry_run {
            true => {
                self.loops
                    .created(settings, key, &target.view.pod_images())
                    .await
            }
            false => match self.loops.paused(key).await {
                Some(left) => LoopVerdict::Paused { left },
                None => LoopVerdict::Pin,
            },
        };
        let pause = Duration::from_secs(settings.pause_seconds);
        let message = match verdict {
            LoopVerdict::Pin => return None,
            LoopVerdict::Tripped { image, count } => {
                if let Some(on_owner) = &self.on_owner {
                    on_owner(OwnerNotice::Loop(LoopTrip {
                        namespace: target.view.namespace.to_string(),
                        api_version: owner.api_version.to_string(),
                        kind: owner.kind.to_string(),
                        name: owner.name.to_string(),
                        uid: owner.uid.to_string(),
                        image: image.clone(),
                        count,
                        window: Duration::from_secs(settings.window_seconds),
                        pause,
                    }));
                }
                format!(
                    "Pod left to its controller {} ({}): it created {count} Pods of {image} within {} s; pinhook stops pinning its Pods for {} s",
                    owner.describe(),
                    owner.api_version,
                    settings.window_seconds,
                    settings.pause_seconds
                )
            }
            LoopVerdict::Paused { left } => format!(
                "Pod left to its controller {} ({}): pinning its Pods is paused for {} s more (it kept recreating them)",
                owner.describe(),
                owner.api_version,
                left.as_secs()
            ),
        };
        Some(Plan {
            left_alone: Some(LeftAlone {
                reason: LeftAloneReason::OwnerLoop,
                message,
            }),
            ..Plan::default()
        })
    }
}
