//! What a review leaves behind besides its answer: its debug span, one summary log line for a
//! planned review (and a
//! line per violation, up to [`LOGGED_VIOLATIONS`]), and the review, duration and violation
//! metrics. Shared by `/mutate`, `/validate` and the answers to bodies that are not reviews;
//! public so that `examples/warm_path` can time it beside the decision.

use std::time::Instant;

use tracing::{debug, info, warn, Level};

use crate::admission;
use crate::log;
use crate::metrics::{
    EndpointLabels, LeftAloneLabels, Metrics, MirrorLabels, ReviewLabels, ViolationLabels,
};

/// The review's span, at debug: with `PINHOOK_LOG=debug` every line logged while deciding a
/// review (registry, pull secrets, each image) names it. At info it is disabled and costs
/// nothing (it was created, formatted and entered on every poll of every review, issue
/// 13): the summary and violation lines carry the review's identity themselves.
pub fn review_span(request: &admission::AdmissionRequest) -> tracing::Span {
    tracing::debug_span!(
        "review",
        uid = %request.uid,
        namespace = %request.namespace,
        kind = %request.kind.kind,
        operation = %request.operation,
        dry_run = request.is_dry_run(),
        result = tracing::field::Empty,
    )
}

/// Logs one summary line per planned review (none for a review skipped or answered with a
/// failure), naming the endpoint (counts at info, or warn when anything
/// broke the policy), the first [`LOGGED_VIOLATIONS`] violations one line each at warn, every
/// image's outcome at debug; and counts policy violations. A dry-run request (e.g. `kubectl apply
/// --dry-run=server` in CI) is logged but not counted: it changed nothing.
pub fn observe_decision(
    metrics: &Metrics,
    endpoint: &'static str,
    request: &admission::AdmissionRequest,
    decision: &admission::Decision,
) {
    let dry_run = request.is_dry_run();
    let (uid, namespace, kind) = (&request.uid, &request.namespace, &request.kind.kind);
    let result = decision.result.as_str();
    let Some(plan) = &decision.plan else { return };
    if let Some(left) = &plan.left_alone {
        let reason = left.reason.as_str();
        if !dry_run {
            metrics
                .left_alone
                .get_or_create(&LeftAloneLabels { reason })
                .inc();
        }
        let operation = &request.operation;
        // The same fields as every other summary line (nothing pinned, nothing would be), so a
        // count of the reviews that pinned something reads one shape.
        let (mode, pinned, would_pin) = (plan.mode.as_str(), 0usize, 0usize);
        info!(%endpoint, %uid, %namespace, %kind, %operation, dry_run, result, mode = %mode, pinned, would_pin, left_alone = reason, why = %left.message, "review");
        return;
    }
    let mode = plan.mode.as_str();
    let mut tally = Tally::default();
    let mut violation_lines = 0usize;
    // True for the first LOGGED_VIOLATIONS violations of the review: those get a line each.
    let mut log_this = || {
        violation_lines += 1;
        violation_lines <= LOGGED_VIOLATIONS
    };
    for outcome in &plan.outcomes {
        let reason = outcome.reason.as_deref().unwrap_or("");
        let (pointer, image) = (&outcome.site.pointer, &outcome.site.image);
        match outcome.action {
            admission::Action::Pinned => {
                tally.pinned += 1;
                debug!(%pointer, %image, pinned = %outcome.result, "pinned image");
            }
            admission::Action::Denied | admission::Action::Violation => {
                tally.violations += 1;
                if log_this() {
                    warn!(
                        %uid,
                        %namespace,
                        %kind,
                        mode = %mode,
                        violation = outcome.violation.map(|r| r.as_str()).unwrap_or(""),
                        admitted = outcome.action == admission::Action::Violation,
                        %pointer,
                        %image,
                        reason,
                        "policy violation"
                    );
                }
            }
            // Audit mode resolved the tag and left it: say what enforce would have written.
            admission::Action::Unchanged
                if plan.mode == crate::policy::Mode::Audit && outcome.digest.is_some() =>
            {
                tally.would_pin += 1;
                let digest = outcome.digest.as_ref().map(ToString::to_string);
                debug!(%pointer, %image, digest = digest.as_deref().unwrap_or(""), "audit: would pin image");
            }
            admission::Action::Unchanged => tally.unchanged += 1,
            admission::Action::Exempt => tally.exempt += 1,
        }
        if let (Some(violation), false) = (outcome.violation, dry_run) {
            count_violation(metrics, mode, violation);
        }
        if let Some(origin) = &outcome.origin {
            tally.through_mirror += 1;
            if !tally.origins.contains(&origin.mirror) {
                tally.origins.push(origin.mirror.clone());
            }
            if !dry_run {
                metrics
                    .mirror_resolutions
                    .get_or_create(&MirrorLabels {
                        mirror: origin.mirror.clone(),
                        source_check: origin.source_check.as_str(),
                    })
                    .inc();
            }
        }
    }
    for finding in &plan.findings {
        tally.violations += 1;
        if log_this() {
            warn!(
                %uid,
                %namespace,
                %kind,
                mode = %mode,
                violation = finding.reason.as_str(),
                admitted = finding.action == admission::Action::Violation,
                reason = %finding.message,
                "policy violation"
            );
        }
        if !dry_run {
            count_violation(metrics, mode, finding.reason);
        }
    }
    if violation_lines > LOGGED_VIOLATIONS {
        warn!(
            %uid,
            mode = %mode,
            omitted = violation_lines - LOGGED_VIOLATIONS,
            "more policy violations in this review, not logged one by one"
        );
    }
    let Tally {
        pinned,
        would_pin,
        unchanged,
        exempt,
        violations,
        through_mirror,
        origins,
    } = tally;
    let operation = &request.operation;
    // Where routed tags were resolved (`registries.resolveThrough`): empty when none was.
    let origins = origins.join(",");
    Summary {
        endpoint,
        uid,
        namespace,
        kind,
        operation,
        dry_run,
        result,
        mode,
        pinned,
        would_pin,
        unchanged,
        exempt,
        violations,
        through_mirror,
        origins: &origins,
    }
    .log(log::line::sink());
}

/// A planned review's summary line: at warn when anything broke the policy, else at info.
struct Summary<'a> {
    endpoint: &'static str,
    uid: &'a str,
    namespace: &'a str,
    kind: &'a str,
    operation: &'a str,
    dry_run: bool,
    result: &'static str,
    mode: &'static str,
    pinned: usize,
    would_pin: usize,
    unchanged: usize,
    exempt: usize,
    violations: usize,
    through_mirror: usize,
    origins: &'a str,
}

impl Summary<'_> {
    /// Logs the line: an info line through `sink` ([`log::line`], the same bytes) when there is
    /// one and it may, else through `tracing`.
    fn log(&self, sink: Option<&log::line::Sink>) {
        let Summary {
            endpoint,
            uid,
            namespace,
            kind,
            operation,
            dry_run,
            result,
            mode,
            pinned,
            would_pin,
            unchanged,
            exempt,
            violations,
            through_mirror,
            origins,
        } = *self;
        if violations > 0 {
            warn!(%endpoint, %uid, %namespace, %kind, %operation, dry_run, result, mode = %mode, pinned, would_pin, unchanged, exempt, violations, through_mirror, %origins, "review");
            return;
        }
        // The same level, target and field names as the `info!` below: a filter may name fields.
        let enabled = || {
            tracing::event_enabled!(
                Level::INFO,
                message,
                endpoint,
                uid,
                namespace,
                kind,
                operation,
                dry_run,
                result,
                mode,
                pinned,
                would_pin,
                unchanged,
                exempt,
                violations,
                through_mirror,
                origins
            )
        };
        if let Some(sink) = sink.filter(|_| enabled()) {
            if let Some(line) = log::line::Line::start(Level::INFO, module_path!(), "review") {
                line.display("endpoint", endpoint)
                    .display("uid", uid)
                    .display("namespace", namespace)
                    .display("kind", kind)
                    .display("operation", operation)
                    .bool("dry_run", dry_run)
                    .str("result", result)
                    .display("mode", mode)
                    .u64("pinned", pinned as u64)
                    .u64("would_pin", would_pin as u64)
                    .u64("unchanged", unchanged as u64)
                    .u64("exempt", exempt as u64)
                    .u64("violations", violations as u64)
                    .u64("through_mirror", through_mirror as u64)
                    .display("origins", origins)
                    .end(sink);
                return;
            }
        }
        info!(%endpoint, %uid, %namespace, %kind, %operation, dry_run, result, mode = %mode, pinned, would_pin, unchanged, exempt, violations, through_mirror, %origins, "review");
    }
}

/// How many images each outcome had in one review, for its summary line.
#[derive(Default)]
struct Tally {
    pinned: usize,
    would_pin: usize,
    unchanged: usize,
    exempt: usize,
    violations: usize,
    /// Outcomes whose tag was resolved at a policy-named mirror, and those mirrors.
    through_mirror: usize,
    origins: Vec<String>,
}

/// Violations logged one line each per review; the rest are counted in one line.
const LOGGED_VIOLATIONS: usize = 10;

fn count_violation(metrics: &Metrics, mode: &'static str, reason: admission::Reason) {
    metrics
        .policy_violations
        .get_or_create(&ViolationLabels {
            mode,
            reason: reason.as_str(),
        })
        .inc();
}

pub fn record_review(
    metrics: &Metrics,
    endpoint: &'static str,
    operation: &str,
    result: &'static str,
    started: Instant,
) {
    // Operations come from the apiserver's fixed set; anything else is folded into "other".
    let operation = match operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        _ => "other",
    };
    metrics
        .reviews
        .get_or_create(&ReviewLabels {
            endpoint,
            operation,
            result,
        })
        .inc();
    metrics
        .review_duration
        .get_or_create(&EndpointLabels { endpoint })
        .observe(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use crate::log::line::testing::{self, untimed};

    use super::*;

    fn summary<'a>(uid: &'a str, violations: usize, origins: &'a str) -> Summary<'a> {
        Summary {
            endpoint: "mutate",
            uid,
            namespace: "team-a",
            kind: "Pod",
            operation: "CREATE",
            dry_run: false,
            result: "pinned",
            mode: "enforce",
            pinned: 3,
            would_pin: 0,
            unchanged: 1,
            exempt: 0,
            violations,
            through_mirror: 2,
            origins,
        }
    }

    /// The summary line through `log::line` is the line `tracing` writes, and it is written only
    /// where `tracing` would write one: not below the filter's level, and never for a review
    /// with violations (a warn line, through `tracing`).
    #[test]
    fn the_direct_summary_line_is_the_tracing_line() {
        let uids = ["39f9b946-537c-4e57-992d-0eddda10c503", "odd \"uid\"\nnext"];
        let mirrors = "mirror.example:5000,other.example";
        let through_tracing = testing::text_format("info", || {
            for uid in uids {
                summary(uid, 0, mirrors).log(None);
            }
        });
        let (sink, got) = testing::sink();
        let tracing_too = testing::text_format("info", || {
            for uid in uids {
                summary(uid, 0, mirrors).log(Some(&sink));
            }
        });
        assert_eq!(tracing_too, "", "a line went through tracing");
        let direct = got.text();
        assert_eq!(untimed(&direct), untimed(&through_tracing));
        assert!(
            direct.contains("  INFO pinhook::server::observe: review endpoint=mutate uid=39f9b946-537c-4e57-992d-0eddda10c503 namespace=team-a kind=Pod operation=CREATE dry_run=false result=\"pinned\" mode=enforce pinned=3 would_pin=0 unchanged=1 exempt=0 violations=0 through_mirror=2 origins=mirror.example:5000,other.example\n"),
            "{direct}"
        );
        // A uid from outside stays on its line.
        assert_eq!(direct.lines().count(), uids.len(), "{direct}");
        assert!(
            direct.contains(r#" review endpoint=mutate uid=odd "uid"\nnext namespace=team-a "#),
            "{direct}"
        );

        for filter in [
            "warn,pinhook::server::observe=warn",
            // Directives naming a field: only events with that field are at info.
            "warn,pinhook[{image}]=info",
            "warn,[{error}]=info",
        ] {
            let filtered = testing::text_format(filter, || {
                summary(uids[0], 0, "").log(Some(&sink));
            });
            assert_eq!(filtered, "", "{filter}");
        }
        let (field_sink, field_got) = testing::sink();
        let by_field = testing::text_format("warn,pinhook[{uid}]=info", || {
            summary(uids[0], 0, "").log(Some(&field_sink));
            summary(uids[0], 0, "").log(None);
        });
        assert_eq!(untimed(&field_got.text()), untimed(&by_field), "{{uid}}");
        let warned = testing::text_format("info", || {
            summary(uids[0], 1, "").log(Some(&sink));
        });
        assert!(
            warned.contains(" WARN pinhook::server::observe: review "),
            "{warned}"
        );
        assert_eq!(untimed(&got.text()), untimed(&direct), "the sink got more");
    }
}
