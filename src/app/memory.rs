//! The memory model of `pinhook serve`: every budget that holds what callers, registries and
//! the cluster send, read from the constants the code bounds itself with, added up against the
//! chart's memory limit. docs/security.md ("Memory: what adds up") shows the same rows; the
//! tests here fail when a budget grows past 80 % of the chart's default limit or when the doc's
//! table stops saying what the code does.

use crate::admission::{loops, pipeline};
use crate::cluster;
use crate::registry::cache;
use crate::registry::credentials::{docker_helpers, exec, provider, pull_secrets, secret_budget};
use crate::registry::TOKEN_CACHE_BYTES;
use crate::registry::{identity_token, verified};
use crate::server::{answers, body_budget, connections, parsed_reviews, plain};

/// `pinhook serve` with nothing in flight and empty caches: measured at 32 MiB resident
/// (release build, benches/body-flood.py's "RSS before"), with room for the Kubernetes
/// clients, the TLS reloader and the policy watcher.
pub const BASELINE_BYTES: u64 = 48 << 20;

/// One row of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// What holds the memory.
    pub what: &'static str,
    /// The most bytes it holds.
    pub bytes: u64,
    /// Where the bound is set.
    pub constant: &'static str,
}

fn mib(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The process with nothing in flight and empty caches: a row of both models.
fn baseline() -> Budget {
    Budget {
        what: "the process itself, idle",
        bytes: BASELINE_BYTES,
        constant: "app::memory::BASELINE_BYTES",
    }
}

/// The cached answers of credential plugins and helpers: a row of both models.
fn credential_answers() -> Budget {
    Budget {
        what: "credential plugin and helper answers",
        bytes: provider::Settings::default().cache_bytes + docker_helpers::HELPER_CACHE_BYTES,
        constant: "provider::Settings::cache_bytes, docker_helpers::HELPER_CACHE_BYTES",
    }
}

/// Every budget of `pinhook serve` at its defaults, the chart's: no credential plugins
/// configured (each configured one adds its runs, see [`plugin_run_bytes`]).
pub fn model() -> Vec<Budget> {
    vec![
        baseline(),
        Budget {
            what: "request bodies in flight",
            bytes: mib(
                body_budget::BODY_BUDGET + body_budget::SMALL_RESERVE + body_budget::FLOOR_RESERVE,
            ),
            constant: "server::body_budget::{BODY_BUDGET, SMALL_RESERVE, FLOOR_RESERVE}",
        },
        Budget {
            what: "parsed reviews",
            bytes: mib(parsed_reviews::SMALL_BUDGET + parsed_reviews::LARGE_BUDGET),
            constant: "server::parsed_reviews::{SMALL_BUDGET, LARGE_BUDGET}",
        },
        Budget {
            what: "dry runs' documents",
            bytes: mib(parsed_reviews::DRY_RUN_BUDGET),
            constant: "server::parsed_reviews::DRY_RUN_BUDGET",
        },
        Budget {
            what: "open connections",
            bytes: mib(connections::MAX_CONNECTIONS * connections::CONNECTION_BYTES),
            constant: "server::connections::{MAX_CONNECTIONS, CONNECTION_BYTES}",
        },
        Budget {
            what: "answers being written",
            bytes: mib(answers::ANSWER_BYTES + answers::ANSWER_RESERVE_BYTES),
            constant: "server::answers::{ANSWER_BYTES, ANSWER_RESERVE_BYTES}",
        },
        Budget {
            what: "plain-HTTP metrics listener's connections",
            bytes: mib(plain::PLAIN_CONNECTIONS * connections::CONNECTION_BYTES),
            constant: "server::plain::PLAIN_CONNECTIONS, server::connections::CONNECTION_BYTES",
        },
        Budget {
            what: "registry bearer and access tokens",
            bytes: TOKEN_CACHE_BYTES + identity_token::ACCESS_CACHE_BYTES,
            constant: "registry::TOKEN_CACHE_BYTES, identity_token::ACCESS_CACHE_BYTES",
        },
        Budget {
            what: "registry cache and signature verdicts",
            bytes: cache::DIGEST_BYTES
                + cache::FAILURE_BYTES
                + cache::BACKOFF_BYTES
                + verified::VERIFICATION_RSS_BYTES,
            constant: "registry::cache::{DIGEST_BYTES, FAILURE_BYTES, BACKOFF_BYTES}, registry::verified::VERIFICATION_RSS_BYTES",
        },
        Budget {
            what: "pull Secrets and ServiceAccounts",
            bytes: pull_secrets::SECRET_CACHE_BYTES + pull_secrets::ACCOUNT_CACHE_BYTES,
            constant: "registry::credentials::pull_secrets::{SECRET_CACHE_BYTES, ACCOUNT_CACHE_BYTES}",
        },
        Budget {
            what: "answers being read from registries",
            bytes: mib(crate::registry::READ_BYTES_IN_FLIGHT + crate::registry::READ_RESERVE_BYTES),
            constant: "registry::http::body::{READ_BYTES_IN_FLIGHT, READ_RESERVE_BYTES}",
        },
        Budget {
            what: "idle connections to registries",
            bytes: mib(
                crate::registry::POOLED_HOSTS
                    * crate::registry::IDLE_PER_HOST
                    * crate::registry::IDLE_CONNECTION_BYTES,
            ),
            constant: "registry::http::outbound::{POOLED_HOSTS, IDLE_PER_HOST, IDLE_CONNECTION_BYTES}",
        },
        Budget {
            what: "pull Secrets kept by reviews in flight",
            bytes: mib(secret_budget::SECRET_BYTES_IN_FLIGHT + secret_budget::SECRET_RESERVE_BYTES),
            constant: "registry::credentials::secret_budget::{SECRET_BYTES_IN_FLIGHT, SECRET_RESERVE_BYTES}",
        },
        Budget {
            what: "namespace labels and TokenReview answers",
            bytes: 2 * cluster::NAMESPACE_CACHE_BYTES + cluster::TOKEN_REVIEW_CACHE_BYTES,
            constant: "cluster::{NAMESPACE_CACHE_BYTES (2 caches), TOKEN_REVIEW_CACHE_BYTES}",
        },
        credential_answers(),
        Budget {
            what: "owner-revision memo, PodsDenied memos, loop breaker, verified Pods",
            bytes: pipeline::OWNER_MEMO_BYTES
                + 2 * pipeline::NOTICE_BYTES
                + loops::LOOP_BREAKER_BYTES
                + pipeline::VERIFIED_PODS_RSS_BYTES,
            constant: "admission::pipeline::{OWNER_MEMO_BYTES, NOTICE_BYTES, VERIFIED_PODS_RSS_BYTES}, admission::loops::LOOP_BREAKER_BYTES",
        },
    ]
}

/// What one credential program's run adds while it runs, for each process it is: its output
/// (stdout and stderr, each read up to `max_output`) and its process, whose data memory the
/// launcher caps (`exec::PROGRAM_DATA_BYTES`) and whose stack is the system's 8 MiB.
pub fn plugin_run_bytes() -> u64 {
    2 * mib(provider::Settings::default().max_output) + exec::PROGRAM_DATA_BYTES + (8 << 20)
}

/// The sum of [`model`].
pub fn total() -> u64 {
    model().iter().map(|b| b.bytes).sum()
}

/// What `pinhook watch` holds per running image site (one container's image in one Pod) at a
/// recheck's peak, the process's own share of it included: 147.1 MiB peak resident at 50,000
/// Pods of one image each (3,085 B a site, release build, `benches/watch-scale.sh`,
/// docs/performance.md), and 95 B a site for what runs (its `imageID` and node), rounded up.
pub const WATCH_SITE_BYTES: u64 = 3_328;
/// The inventory's JSON per site (`/inventory`, written once a cycle and shared by every
/// caller): a workload entry of the longest names (63 + 253 bytes and its kind), pretty-printed.
pub const WATCH_INVENTORY_SITE_BYTES: u64 = 512;
/// The running image sites the watch's default memory limit holds within 80 %: the
/// `PinhookWatchNearCapacity` alert fires at 90 % of it.
pub const WATCH_SITES: u64 = 70_000;

/// Every budget of `pinhook watch` at its defaults with `sites` running image sites. The sites
/// are the cluster's, bounded by its quotas and nodes, not pinhook's: this says what the chart's
/// limit holds.
pub fn watch_model(sites: u64) -> Vec<Budget> {
    use crate::watch::controller::cycle::REPORT_WRITE_CONCURRENCY;
    use crate::watch::report::budget::MAX_REPORT_BYTES;
    vec![
        baseline(),
        Budget {
            what: "running image sites, kept and at a recheck's peak",
            bytes: sites * WATCH_SITE_BYTES,
            constant: "app::memory::WATCH_SITE_BYTES",
        },
        Budget {
            what: "the inventory's JSON",
            bytes: sites * WATCH_INVENTORY_SITE_BYTES,
            constant: "app::memory::WATCH_INVENTORY_SITE_BYTES",
        },
        Budget {
            what: "reports being written, and their JSON",
            bytes: 2 * mib(REPORT_WRITE_CONCURRENCY * MAX_REPORT_BYTES),
            constant: "watch::controller::cycle::REPORT_WRITE_CONCURRENCY, watch::report::budget::MAX_REPORT_BYTES",
        },
        Budget {
            what: "registry cache, signature verdicts, tokens, answers being read, idle connections",
            bytes: cache::DIGEST_BYTES
                + cache::FAILURE_BYTES
                + cache::BACKOFF_BYTES
                + verified::VERIFICATION_RSS_BYTES
                + TOKEN_CACHE_BYTES
                + identity_token::ACCESS_CACHE_BYTES
                + mib(crate::registry::READ_BYTES_IN_FLIGHT + crate::registry::READ_RESERVE_BYTES)
                + mib(
                    crate::registry::POOLED_HOSTS
                        * crate::registry::IDLE_PER_HOST
                        * crate::registry::IDLE_CONNECTION_BYTES,
                ),
            constant: "the constants of pinhook serve's registry rows",
        },
        Budget {
            what: "pull Secrets, ServiceAccounts and namespace labels",
            bytes: pull_secrets::SECRET_CACHE_BYTES
                + pull_secrets::ACCOUNT_CACHE_BYTES
                + cluster::NAMESPACE_CACHE_BYTES,
            constant: "pull_secrets::{SECRET_CACHE_BYTES, ACCOUNT_CACHE_BYTES}, cluster::NAMESPACE_CACHE_BYTES",
        },
        credential_answers(),
        Budget {
            what: "its two plain-HTTP listeners' connections",
            bytes: 2 * mib(plain::PLAIN_CONNECTIONS * connections::CONNECTION_BYTES),
            constant: "server::plain::PLAIN_CONNECTIONS, server::connections::CONNECTION_BYTES",
        },
    ]
}

/// The sum of [`watch_model`].
pub fn watch_total(sites: u64) -> u64 {
    watch_model(sites).iter().map(|b| b.bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `resources.limits.memory` of the webhook in charts/pinhook/values.yaml, in bytes.
    fn chart_limit() -> u64 {
        limit_at(&["resources"])
    }

    /// `watch.resources.limits.memory`, in bytes.
    fn watch_limit() -> u64 {
        limit_at(&["watch", "resources"])
    }

    fn limit_at(path: &[&str]) -> u64 {
        let values = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/charts/pinhook/values.yaml"
        ))
        .unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(&values).unwrap();
        let resources = path.iter().fold(&doc, |value, key| &value[key]);
        let limit = resources["limits"]["memory"].as_str().unwrap();
        let mebibytes: u64 = limit.strip_suffix("Mi").unwrap().parse().unwrap();
        mebibytes << 20
    }

    /// The watch's budgets at its stated capacity add up under 80 % of its chart limit; the
    /// capacity is what the alert and the docs say.
    #[test]
    fn the_watch_holds_its_stated_sites_under_80_percent_of_its_limit() {
        let limit = watch_limit();
        assert_eq!(limit, 512 << 20);
        let total = watch_total(WATCH_SITES);
        assert!(
            total * 5 <= limit * 4,
            "{} MiB at {WATCH_SITES} sites, past 80 % of {} MiB: {:#?}",
            total >> 20,
            limit >> 20,
            watch_model(WATCH_SITES)
        );
        // And not far under: the capacity is the most that fits, in steps of 5,000.
        assert!(watch_total(WATCH_SITES + 5_000) * 5 > limit * 4);
        let rules = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/charts/pinhook/files/pinhook-rules.yaml"
        ))
        .unwrap();
        let threshold = WATCH_SITES * 9 / 10;
        assert!(
            rules.contains(&format!(") > {threshold}\n")),
            "PinhookWatchNearCapacity fires at {threshold}"
        );
    }

    /// A plugin run is bounded: its output and its capped process.
    #[test]
    fn a_credential_program_run_is_bounded() {
        assert_eq!(plugin_run_bytes(), (2 << 20) + (128 << 20) + (8 << 20));
    }

    #[test]
    fn the_budgets_add_up_under_80_percent_of_the_charts_limit() {
        let limit = chart_limit();
        assert_eq!(limit, 448 << 20);
        let total = total();
        assert!(
            total * 5 <= limit * 4,
            "the budgets add up to {} MiB, past 80 % of the chart's {} MiB: {:#?}",
            total >> 20,
            limit >> 20,
            model()
        );
    }

    /// The rows docs/security.md shows for `model` and its sum (`sum` names the sum's row).
    fn rows(model: &[Budget], sum: &str, limit: u64) -> Vec<String> {
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        let total: u64 = model.iter().map(|b| b.bytes).sum();
        let mut rows: Vec<String> = model
            .iter()
            .map(|b| {
                format!(
                    "| {} | {:.1} MiB | `{}` |",
                    b.what,
                    mib(b.bytes),
                    b.constant
                )
            })
            .collect();
        rows.push(format!(
            "| **{sum}** | **{:.1} MiB** of the chart's {} MiB | {:.0} % |",
            mib(total),
            limit >> 20,
            total as f64 * 100.0 / limit as f64
        ));
        rows
    }

    /// The table of docs/security.md under `heading`.
    fn table_under(heading: &str) -> Vec<String> {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md"))
            .unwrap();
        doc.lines()
            .skip_while(|line| *line != heading)
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(str::to_string)
            .collect()
    }

    /// docs/security.md's tables are exactly the models: a row per budget, with its MiB and
    /// its constant, in order, and the sum; no other row. The watch's at its capacity.
    #[test]
    fn the_docs_tables_say_what_the_code_does() {
        for (heading, want) in [
            (
                "| what | bound | constant |",
                rows(&model(), "sum", chart_limit()),
            ),
            (
                "| what the watch holds | bound | constant |",
                rows(
                    &watch_model(WATCH_SITES),
                    &format!("sum at {WATCH_SITES} sites"),
                    watch_limit(),
                ),
            ),
        ] {
            assert_eq!(
                table_under(heading),
                want,
                "docs/security.md's table under {heading}, expected:\n{}",
                want.join("\n")
            );
        }
    }
}
