//! The plugin cache and single-flight, with `/bin/sh` scripts as plugins: which key an answer is
//! kept under, how long, and that an image no `matchImages` entry covers never runs anything.
//! The real protocol against a real registry is in `tests/integration/registry/credential_providers.rs`.

use std::path::Path;

use super::*;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

/// A provider whose binary is a shell script answering `body` and appending a line to `count`.
fn provider(dir: &Path, name: &str, body: &str, default_cache: Duration) -> ProviderSpec {
    let count = dir.join(format!("{name}.count"));
    let script = format!(
        "cat >/dev/null; echo x >> '{}'; cat <<'EOF'\n{body}\nEOF\n",
        count.display()
    );
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}")).expect("write plugin");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ProviderSpec {
        name: name.to_string(),
        match_images: vec!["*.example".to_string(), "*.example/*".to_string()],
        default_cache_duration: default_cache,
        api_version: V1.to_string(),
        args: Vec::new(),
        env: Vec::new(),
        path,
        token: None,
    }
}

fn execs(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.count")))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn answer(key_type: &str, duration: Option<&str>) -> String {
    let duration = duration
        .map(|d| format!(",\"cacheDuration\":\"{d}\""))
        .unwrap_or_default();
    format!(
        "{{\"apiVersion\":\"{V1}\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"{key_type}\"{duration},\"auth\":{{\"*.example\":{{\"username\":\"u\",\"password\":\"p\"}}}}}}"
    )
}

async fn ask(providers: &CredentialProviders, image: &str) -> Provided {
    providers.provide(image).await
}

#[tokio::test]
async fn answers_are_cached_under_their_key_type_and_unmatched_images_run_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hour = Duration::from_secs(3600);
    let specs = vec![
        provider(dir.path(), "image", &answer("Image", None), hour),
        provider(
            dir.path(),
            "registry",
            &answer("Registry", Some("1h")),
            Duration::ZERO,
        ),
        provider(
            dir.path(),
            "global",
            &answer("Global", Some("1h")),
            Duration::ZERO,
        ),
        provider(dir.path(), "uncached", &answer("Image", Some("0s")), hour),
    ];
    let providers = CredentialProviders::new(specs, Settings::default(), None);
    for image in [
        "a.example/one",
        "a.example/one",
        "a.example/two",
        "b.example/three",
    ] {
        let provided = ask(&providers, image).await;
        assert_eq!(
            provided.entries.len(),
            4,
            "{image}: {:?}",
            provided.warnings
        );
    }
    assert_eq!(execs(dir.path(), "image"), 3, "one per image");
    assert_eq!(execs(dir.path(), "registry"), 2, "one per registry");
    assert_eq!(execs(dir.path(), "global"), 1, "one for all");
    assert_eq!(
        execs(dir.path(), "uncached"),
        4,
        "cacheDuration 0s: every time"
    );

    let unmatched = ask(&providers, "docker.io/library/nginx").await;
    assert!(unmatched.entries.is_empty() && unmatched.warnings.is_empty());
    assert_eq!(execs(dir.path(), "uncached"), 4, "no match, no exec");
}

#[tokio::test]
async fn a_broken_plugin_is_a_warning_and_a_metric_naming_it_never_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = vec![provider(
        dir.path(),
        "broken",
        "s3cret-garbage",
        Duration::from_secs(60),
    )];
    let metrics = Arc::new(Metrics::new());
    let providers = CredentialProviders::new(specs, Settings::default(), Some(metrics.clone()));
    let provided = ask(&providers, "a.example/one").await;
    assert!(provided.entries.is_empty());
    let exposed = metrics.encode().expect("metrics encode");
    for line in [
        "pinhook_credential_provider_execs_total{provider=\"broken\"} 1",
        "pinhook_credential_provider_errors_total{provider=\"broken\",reason=\"invalid_response\"} 1",
    ] {
        assert!(exposed.contains(line), "{line} in {exposed}");
    }
    let [warning] = provided.warnings.as_slice() else {
        panic!("{:?}", provided.warnings)
    };
    assert!(warning.contains("credential provider broken"), "{warning}");
    assert!(!warning.contains("s3cret"), "{warning}");
}

/// A provider whose binary exits 3 after counting its run.
fn failing(dir: &Path, name: &str) -> ProviderSpec {
    let spec = provider(dir, name, "", Duration::from_secs(60));
    let script = std::fs::read_to_string(&spec.path).expect("read plugin");
    std::fs::write(&spec.path, format!("{script}exit 3\n")).expect("write plugin");
    spec
}

/// Issue 44: a review naming many images of one registry whose plugin fails ran it once per
/// image. The failure now stands for that tenant's images of that registry for `failure_ttl`,
/// and for nobody else's.
#[tokio::test]
async fn a_failure_stands_for_its_tenants_images_of_its_registry_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let providers = CredentialProviders::new(
        vec![failing(dir.path(), "fails")],
        Settings::default(),
        None,
    );
    let as_tenant = |tenant: &'static str, image: String| {
        let providers = &providers;
        async move { crate::tenant::scope(tenant, ask(providers, &image)).await }
    };
    let mut warnings = Vec::new();
    for i in 0..20 {
        let provided = as_tenant("team-a", format!("a.example/image-{i}")).await;
        assert!(provided.entries.is_empty());
        warnings.extend(provided.warnings);
    }
    assert_eq!(
        execs(dir.path(), "fails"),
        1,
        "one run for 20 images of a.example"
    );
    assert_eq!(warnings.len(), 20, "{warnings:?}");
    assert!(warnings[0].contains("exited with"), "{}", warnings[0]);
    assert!(
        warnings[19].contains("failed for this registry within 10s: exited with"),
        "{}",
        warnings[19]
    );

    as_tenant("team-a", "b.example/image".to_string()).await;
    assert_eq!(
        execs(dir.path(), "fails"),
        2,
        "another registry runs it again"
    );
    as_tenant("team-b", "a.example/image-0".to_string()).await;
    assert_eq!(
        execs(dir.path(), "fails"),
        3,
        "another tenant runs it again"
    );

    let unremembered = Settings {
        failure_ttl: Duration::ZERO,
        ..Settings::default()
    };
    let dir_before = tempfile::tempdir().expect("tempdir");
    let before =
        CredentialProviders::new(vec![failing(dir_before.path(), "old")], unremembered, None);
    for i in 0..5 {
        crate::tenant::scope("team-a", ask(&before, &format!("a.example/image-{i}"))).await;
    }
    assert_eq!(
        execs(dir_before.path(), "old"),
        5,
        "failure_ttl 0: a run per image, as before"
    );
}

#[test]
fn the_registry_is_everything_before_the_first_slash() {
    assert_eq!(registry_of("a.example:5000/team/app"), "a.example:5000");
    assert_eq!(registry_of("localhost"), "localhost");
}

/// A provider script that records its pid in `dir/<name>.pids`, then sleeps `secs`.
fn sleeper(dir: &Path, name: &str, secs: u32) -> ProviderSpec {
    let mut spec = provider(dir, name, &answer("Image", None), Duration::from_secs(60));
    let pids = dir.join(format!("{name}.pids"));
    let script = format!(
        "#!/bin/sh\ncat >/dev/null; echo $$ >> '{}'; exec sleep {secs}\n",
        pids.display()
    );
    std::fs::write(&spec.path, script).expect("write plugin");
    spec.name = name.to_string();
    spec
}

/// The pids `sleeper` recorded that are still alive (not zombies).
fn alive(dir: &Path, name: &str) -> usize {
    let pids = std::fs::read_to_string(dir.join(format!("{name}.pids"))).unwrap_or_default();
    pids.lines()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| !stat.contains(") Z "))
                .unwrap_or(false)
        })
        .count()
}

/// 40 images at once with 2 slots per provider and 3 in all: never more runs than the slots,
/// the images without one answer "busy" when the wait ends, and the runs are killed then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_wait_for_a_slot_and_die_with_their_last_waiter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = vec![sleeper(dir.path(), "a", 30), sleeper(dir.path(), "b", 30)];
    let settings = Settings {
        wait: Duration::from_millis(700),
        per_provider: 2,
        total: 3,
        ..Settings::default()
    };
    let providers = Arc::new(CredentialProviders::new(specs, settings, None));
    let asks = (0..40).map(|i| {
        let providers = providers.clone();
        tokio::spawn(async move { ask(&providers, &format!("a.example/image-{i}")).await })
    });
    let watch = async {
        let mut peak = (0, 0);
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = (alive(dir.path(), "a"), alive(dir.path(), "b"));
            peak = (peak.0.max(now.0), peak.1.max(now.1));
        }
        peak
    };
    let (answers, peak) = tokio::join!(futures::future::join_all(asks), watch);
    assert!(
        peak.0 <= 2 && peak.1 <= 2 && peak.0 + peak.1 <= 3,
        "{peak:?}"
    );
    assert!(peak.0 + peak.1 >= 2, "they did run: {peak:?}");
    let warnings: Vec<String> = answers
        .into_iter()
        .flat_map(|a| a.map(|p| p.warnings).unwrap_or_default())
        .collect();
    assert!(warnings.iter().any(|w| w.contains("busy")), "{warnings:?}");
    let gone = std::time::Instant::now();
    while alive(dir.path(), "a") + alive(dir.path(), "b") > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(2),
            "runs outlived their waiters"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An admission dropped while its run goes on (its deadline passed first) kills the run; one
/// still waiting keeps a shared run alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_run_is_killed_only_when_its_last_waiter_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = vec![sleeper(dir.path(), "s", 30)];
    let providers = Arc::new(CredentialProviders::new(specs, Settings::default(), None));
    let first = tokio::spawn({
        let providers = providers.clone();
        async move { ask(&providers, "a.example/shared").await }
    });
    let second = {
        let providers = providers.clone();
        tokio::spawn(async move { ask(&providers, "a.example/shared").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(alive(dir.path(), "s"), 1, "one run for both");
    first.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(alive(dir.path(), "s"), 1, "the second still waits");
    second.abort();
    let gone = std::time::Instant::now();
    while alive(dir.path(), "s") > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(2),
            "the run outlived its waiters"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 2,000 answers of 10 KiB each (distinct images, an hour each) stay under a 1 MiB cap.
#[test]
fn many_large_answers_stay_under_the_byte_cap() {
    let cap = 1024 * 1024;
    let answers = answers::Answers::new(cap);
    for i in 0..2_000 {
        let credential = Credential::basic("u", "p".repeat(10 * 1024));
        let answer = answers::Answer {
            entries: Arc::new(vec![("big.example".to_string(), credential)]),
            ttl: Duration::from_secs(3600),
        };
        answers.insert(format!("big.example/image-{i}"), answer);
    }
    let held = answers.weighed_size();
    assert!(held <= cap, "{held} bytes held, cap {cap}");
    assert!(answers.entry_count() > 50, "{}", answers.entry_count());
    assert!(answers.entry_count() < 110, "{}", answers.entry_count());
}

// === ServiceAccount tokens (KEP-4412) ===

use std::sync::atomic::AtomicUsize;

use super::super::service_account_tokens::{
    AccountFacts, MintedToken, ServiceAccounts, TokenError,
};

/// Accounts `team/builder` (UID `u1`, two annotations) and `team/bare` (none); every token
/// asked for is new (`tok-<n>`) unless `same_token`.
struct FakeAccounts {
    tokens: AtomicUsize,
    /// Reads of an account.
    asked: AtomicUsize,
    same_token: bool,
    uid: std::sync::Mutex<String>,
}

impl FakeAccounts {
    fn new(same_token: bool) -> FakeAccounts {
        FakeAccounts {
            tokens: AtomicUsize::new(0),
            asked: AtomicUsize::new(0),
            same_token,
            uid: std::sync::Mutex::new("u1".to_string()),
        }
    }
}

#[async_trait]
impl ServiceAccounts for FakeAccounts {
    async fn account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<AccountFacts>>, TokenError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let uid = self.uid.lock().expect("uid").clone();
        Ok(match (namespace, name) {
            ("team", "builder") => Some(Arc::new(AccountFacts {
                uid,
                annotations: BTreeMap::from([
                    ("example.com/role".to_string(), "puller".to_string()),
                    ("example.com/tenant".to_string(), "t1".to_string()),
                    ("example.com/unnamed".to_string(), "not handed".to_string()),
                ]),
            })),
            ("team", "bare") => Some(Arc::new(AccountFacts {
                uid: "u2".to_string(),
                annotations: BTreeMap::new(),
            })),
            // an apiserver that never answers the read
            ("team", "stalled") => std::future::pending().await,
            ("team", "no-token") => Some(Arc::new(AccountFacts {
                uid: "u3".to_string(),
                annotations: BTreeMap::new(),
            })),
            ("team", "forbidden") => {
                return Err(TokenError::Account {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    reason: "forbidden (403)".to_string(),
                })
            }
            _ => None,
        })
    }

    async fn token(
        &self,
        _namespace: &str,
        name: &str,
        _uid: &str,
        audience: &str,
    ) -> Result<MintedToken, TokenError> {
        if name == "no-token" {
            // an apiserver that never answers the TokenRequest
            std::future::pending::<()>().await;
        }
        let n = match self.same_token {
            true => 0,
            false => self.tokens.fetch_add(1, Ordering::SeqCst),
        };
        Ok(MintedToken {
            token: Arc::from(format!("tok-{name}-{audience}-{n}")),
            use_for: Duration::from_secs(480),
        })
    }
}

/// A provider handed tokens for audience `registry.example`: its script keeps each request
/// (one JSON line) in `<name>.requests` and answers `body`.
fn token_provider(dir: &Path, name: &str, body: &str, attributes: TokenAttributes) -> ProviderSpec {
    let mut spec = provider(dir, name, body, Duration::from_secs(3600));
    let requests = dir.join(format!("{name}.requests"));
    let script = std::fs::read_to_string(&spec.path).expect("read plugin");
    let script = script.replace(
        "cat >/dev/null;",
        // (one write per request: concurrent runs append whole lines)
        &format!(
            "request=$(cat); printf '%s\\n' \"$request\" >> '{}';",
            requests.display()
        ),
    );
    std::fs::write(&spec.path, script).expect("write plugin");
    spec.token = Some(attributes);
    spec
}

/// One [`token_provider`] answering `Image`-keyed credentials, with the default settings.
fn token_providers(dir: &Path, name: &str, attributes: TokenAttributes) -> CredentialProviders {
    let spec = token_provider(dir, name, &answer("Image", None), attributes);
    CredentialProviders::new(vec![spec], Settings::default(), None)
}

fn attributes(cache_type: TokenCacheType, require: bool) -> TokenAttributes {
    TokenAttributes {
        audience: "registry.example".to_string(),
        cache_type,
        require_service_account: require,
        required_annotation_keys: match require {
            true => vec!["example.com/role".to_string()],
            false => Vec::new(),
        },
        optional_annotation_keys: vec![
            "example.com/tenant".to_string(),
            "example.com/absent".to_string(),
        ],
    }
}

fn requests(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.requests")))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON request"))
        .collect()
}

fn puller<'a>(account: Option<&'a str>, accounts: &'a FakeAccounts) -> Puller<'a> {
    Puller {
        namespace: "team",
        service_account: account,
        accounts: Some(accounts),
    }
}

#[tokio::test]
async fn the_plugin_is_handed_the_accounts_token_and_the_annotations_it_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let providers = token_providers(
        dir.path(),
        "sa",
        attributes(TokenCacheType::ServiceAccount, true),
    );
    let accounts = FakeAccounts::new(false);
    let provided = providers
        .provide_for("a.example/one", &puller(Some("builder"), &accounts))
        .await;
    assert_eq!(provided.entries.len(), 1, "{:?}", provided.warnings);
    let [request] = requests(dir.path(), "sa").try_into().expect("one run");
    assert_eq!(
        request,
        serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest",
            "image": "a.example/one",
            "serviceAccountToken": "tok-builder-registry.example-0",
            "serviceAccountAnnotations": {"example.com/role": "puller", "example.com/tenant": "t1"}})
    );
}

#[tokio::test]
async fn cached_per_service_account_the_answer_outlives_the_token_but_not_the_account() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = token_provider(
        dir.path(),
        "sa",
        &answer("Registry", None),
        attributes(TokenCacheType::ServiceAccount, false),
    );
    let providers = CredentialProviders::new(vec![spec], Settings::default(), None);
    let accounts = FakeAccounts::new(false);
    for image in ["a.example/one", "a.example/two"] {
        let provided = providers
            .provide_for(image, &puller(Some("builder"), &accounts))
            .await;
        assert_eq!(provided.entries.len(), 1, "{:?}", provided.warnings);
    }
    assert_eq!(execs(dir.path(), "sa"), 1, "the same account: cached");
    assert_eq!(
        accounts.tokens.load(Ordering::SeqCst),
        1,
        "a cached answer per account needs no token"
    );
    providers
        .provide_for("a.example/one", &puller(Some("bare"), &accounts))
        .await;
    assert_eq!(execs(dir.path(), "sa"), 2, "another account: run");
    *accounts.uid.lock().expect("uid") = "u1-again".to_string();
    providers
        .provide_for("a.example/one", &puller(Some("builder"), &accounts))
        .await;
    assert_eq!(
        execs(dir.path(), "sa"),
        3,
        "the account made again (a new UID): run"
    );
    providers.provide_for("a.example/one", &Puller::NONE).await;
    assert_eq!(
        execs(dir.path(), "sa"),
        4,
        "no account, none required: run with no token, under a key of its own"
    );
    let last = requests(dir.path(), "sa").pop().expect("a request");
    assert!(last.get("serviceAccountToken").is_none(), "{last}");
}

#[tokio::test]
async fn cached_per_token_a_new_token_runs_the_plugin_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let providers = token_providers(dir.path(), "tok", attributes(TokenCacheType::Token, true));
    let kept = FakeAccounts::new(true);
    for _ in 0..2 {
        providers
            .provide_for("a.example/one", &puller(Some("builder"), &kept))
            .await;
    }
    assert_eq!(execs(dir.path(), "tok"), 1, "the same token: cached");
    let fresh = FakeAccounts::new(false);
    fresh.tokens.store(7, Ordering::SeqCst);
    providers
        .provide_for("a.example/one", &puller(Some("builder"), &fresh))
        .await;
    assert_eq!(execs(dir.path(), "tok"), 2, "another token: run");
}

#[tokio::test]
async fn without_what_it_requires_the_plugin_is_not_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let providers = token_providers(
        dir.path(),
        "req",
        attributes(TokenCacheType::ServiceAccount, true),
    );
    let accounts = FakeAccounts::new(false);
    // No ServiceAccount, one required, or a required annotation missing: not run, as kubelet
    // (silently: an unannotated account is most Pods', and another credential may serve).
    for account in [None, Some("bare")] {
        let provided = providers
            .provide_for("a.example/one", &puller(account, &accounts))
            .await;
        assert!(
            provided.entries.is_empty() && provided.warnings.is_empty(),
            "{account:?}: {provided:?}"
        );
    }
    assert_eq!(
        accounts.tokens.load(Ordering::SeqCst),
        0,
        "no token asked for"
    );
    let cases = [
        (
            puller(Some("ghost"), &accounts),
            "serviceaccount team/ghost not found",
        ),
        (puller(Some("forbidden"), &accounts), "forbidden (403)"),
        (
            Puller {
                namespace: "team",
                service_account: Some("builder"),
                accounts: None,
            },
            "no cluster",
        ),
    ];
    for (puller, says) in cases {
        let provided = providers.provide_for("a.example/one", &puller).await;
        assert!(provided.entries.is_empty());
        let [warning] = provided.warnings.as_slice() else {
            panic!("{says}: {:?}", provided.warnings)
        };
        assert!(
            warning.contains("credential provider req") && warning.contains(says),
            "{warning}"
        );
    }
    assert_eq!(execs(dir.path(), "req"), 0);
}

#[tokio::test]
async fn an_answer_giving_the_token_back_is_refused_unless_cached_per_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = |cache_key: &str| {
        format!("{{\"apiVersion\":\"{V1}\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"{cache_key}\",\"auth\":{{\"*.example\":{{\"username\":\"<token>\",\"password\":\"tok-builder-registry.example-0\"}}}}}}")
    };
    let specs = vec![
        token_provider(
            dir.path(),
            "per-account",
            &echo("Image"),
            attributes(TokenCacheType::ServiceAccount, true),
        ),
        token_provider(
            dir.path(),
            "per-token",
            &echo("Image"),
            attributes(TokenCacheType::Token, true),
        ),
    ];
    let providers = CredentialProviders::new(specs, Settings::default(), None);
    let accounts = FakeAccounts::new(true);
    let provided = providers
        .provide_for("a.example/one", &puller(Some("builder"), &accounts))
        .await;
    assert_eq!(
        provided.entries.len(),
        1,
        "only the per-token plugin's answer"
    );
    let [warning] = provided.warnings.as_slice() else {
        panic!("{:?}", provided.warnings)
    };
    assert!(
        warning.contains("credential provider per-account")
            && warning.contains("gives the ServiceAccount token back")
            && !warning.contains("tok-"),
        "{warning}"
    );
}

#[tokio::test]
async fn a_failure_stands_for_the_same_account_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spec = failing(dir.path(), "down");
    spec.token = Some(attributes(TokenCacheType::ServiceAccount, false));
    let providers = CredentialProviders::new(vec![spec], Settings::default(), None);
    let accounts = FakeAccounts::new(false);
    for account in ["builder", "builder", "bare"] {
        crate::tenant::scope(
            "team",
            providers.provide_for("a.example/one", &puller(Some(account), &accounts)),
        )
        .await;
    }
    assert_eq!(execs(dir.path(), "down"), 2, "once per account");
}

/// An account that cannot be read (or whose token cannot be had) is not asked about again for
/// `failure_ttl`, for its own images only: without the chart's token RBAC every admission
/// would otherwise send the apiserver a request bound to fail.
#[tokio::test]
async fn an_account_that_cannot_be_had_is_not_asked_again_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = token_provider(
        dir.path(),
        "acct",
        &answer("Image", None),
        attributes(TokenCacheType::ServiceAccount, false),
    );
    let metrics = Arc::new(Metrics::new());
    let providers =
        CredentialProviders::new(vec![spec], Settings::default(), Some(metrics.clone()));
    let accounts = FakeAccounts::new(false);
    for _ in 0..3 {
        let provided = crate::tenant::scope(
            "team",
            providers.provide_for("a.example/one", &puller(Some("forbidden"), &accounts)),
        )
        .await;
        assert!(
            provided
                .warnings
                .iter()
                .any(|w| w.contains("forbidden (403)")),
            "{provided:?}"
        );
    }
    assert_eq!(
        accounts.asked.load(Ordering::SeqCst),
        1,
        "read once, remembered after"
    );
    let exposed = metrics.encode().expect("metrics encode");
    let line =
        "pinhook_credential_provider_errors_total{provider=\"acct\",reason=\"service_account\"} 1";
    assert!(exposed.contains(line), "{line} in {exposed}");
    crate::tenant::scope(
        "team",
        providers.provide_for("a.example/one", &puller(Some("builder"), &accounts)),
    )
    .await;
    assert_eq!(
        execs(dir.path(), "acct"),
        1,
        "another account of the tenant: run"
    );
}

/// Two Pods of different accounts asking about one image at once: two runs, each handed its
/// own token (a shared run would give one account's answer to the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_for_different_accounts_are_never_shared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = token_provider(
        dir.path(),
        "slow",
        &answer("Image", None),
        attributes(TokenCacheType::ServiceAccount, false),
    );
    let script = std::fs::read_to_string(&spec.path).expect("read plugin");
    std::fs::write(
        &spec.path,
        script.replacen("request=$(cat);", "request=$(cat); sleep 0.5;", 1),
    )
    .expect("write plugin");
    let providers = CredentialProviders::new(vec![spec], Settings::default(), None);
    let accounts = FakeAccounts::new(false);
    let (builder, bare) = (
        puller(Some("builder"), &accounts),
        puller(Some("bare"), &accounts),
    );
    let (a, b) = tokio::join!(
        providers.provide_for("a.example/one", &builder),
        providers.provide_for("a.example/one", &bare),
    );
    assert_eq!((a.entries.len(), b.entries.len()), (1, 1), "{a:?} {b:?}");
    assert_eq!(execs(dir.path(), "slow"), 2);
    let mut tokens: Vec<String> = requests(dir.path(), "slow")
        .iter()
        .map(|r| {
            r["serviceAccountToken"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    tokens.sort();
    assert!(
        tokens.len() == 2
            && tokens[0].starts_with("tok-bare-")
            && tokens[1].starts_with("tok-builder-"),
        "{tokens:?}"
    );
}

/// An apiserver that does not answer the account's read or its TokenRequest costs the review
/// (or the watch) the plugin's `wait`, not a kube client's timeout of minutes, and is
/// remembered for that account: the next ask does not wait again.
#[tokio::test(start_paused = true)]
async fn an_apiserver_that_does_not_answer_costs_the_wait_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let providers = token_providers(
        dir.path(),
        "slow",
        attributes(TokenCacheType::ServiceAccount, false),
    );
    let wait = Settings::default().wait;
    let accounts = FakeAccounts::new(false);
    for (account, says) in [
        (
            "stalled",
            "did not answer the read of serviceaccount team/stalled",
        ),
        (
            "no-token",
            "did not answer the TokenRequest of serviceaccount team/no-token",
        ),
    ] {
        for round in 0..2 {
            let started = tokio::time::Instant::now();
            let puller = puller(Some(account), &accounts);
            let asked =
                crate::tenant::scope("team", providers.provide_for("a.example/one", &puller));
            let provided = tokio::time::timeout(wait * 4, asked)
                .await
                .unwrap_or_else(|_| panic!("{account}: no answer within {:?}", wait * 4));
            let took = started.elapsed();
            assert!(provided.entries.is_empty(), "{provided:?}");
            let [warning] = provided.warnings.as_slice() else {
                panic!("{account}: {:?}", provided.warnings)
            };
            assert!(warning.contains(says), "{warning}");
            match round {
                0 => assert!(took >= wait && took < wait * 2, "{account}: {took:?}"),
                _ => assert!(took < Duration::from_millis(10), "remembered: {took:?}"),
            }
        }
    }
    assert_eq!(accounts.asked.load(Ordering::SeqCst), 2, "each read once");
    assert_eq!(execs(dir.path(), "slow"), 0);
}
