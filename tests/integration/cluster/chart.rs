//! The Helm chart (charts/pinhook) as `helm template` renders it: what must always be there
//! (the namespace exclusions, the three webhooks), what each TLS mode renders and must never
//! render (a caBundle or Secret data pinhook writes at run time), the image reference, the
//! availability defaults, `webhook.url` mode and the install the fail template refuses, and who
//! may call: the NetworkPolicies, the client CA and the metrics port.
//!
//! Helm is `$PINHOOK_HELM`, else `helm3` (scripts/install-helm.sh installs it). A missing Helm
//! fails every test with that message: it never skips. scripts/chart-check.sh covers the rest
//! (lint, schemas, reproducible renders, Kubernetes validation).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const NAMESPACE: &str = "pinhook-system";

/// `helm template pinhook charts/pinhook -n NAMESPACE ARGS...`: stdout on success, stderr on
/// failure.
pub(crate) fn helm_template(namespace: &str, args: &[&str]) -> Result<String, String> {
    let helm = std::env::var("PINHOOK_HELM").unwrap_or_else(|_| "helm3".to_string());
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/pinhook");
    let output = Command::new(&helm)
        .args(["template", "pinhook"])
        .arg(chart)
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run Helm '{helm}' ({e}): run scripts/install-helm.sh, or set PINHOOK_HELM \
                 to a helm binary"
            )
        });
    if output.status.success() {
        Ok(String::from_utf8(output.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The objects of a render, one per YAML document (documents split on `\n---`).
pub(crate) fn render(args: &[&str]) -> Vec<Value> {
    let text = helm_template(NAMESPACE, args).unwrap_or_else(|e| panic!("helm template: {e}"));
    format!("\n{text}")
        .split("\n---")
        .map(|doc| {
            serde_saphyr::from_str::<Value>(doc)
                .unwrap_or_else(|e| panic!("rendered YAML does not parse ({e}):\n{doc}"))
        })
        .filter(|object| !object.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

pub(crate) fn get<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(objects, kind, name).unwrap_or_else(|| {
        let all: Vec<String> = objects
            .iter()
            .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
            .collect();
        panic!("no {kind}/{name} among {all:?}")
    })
}

/// Every webhook of both configurations, as (name, webhook).
fn webhooks(objects: &[Value]) -> Vec<(String, Value)> {
    [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    .iter()
    .flat_map(|kind| {
        get(objects, kind, "pinhook")["webhooks"]
            .as_array()
            .expect("webhooks is a list")
            .clone()
    })
    .map(|w| (w["name"].as_str().expect("webhook name").to_string(), w))
    .collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect()
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()
        .expect("env is a list")
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn the_clusters_namespaces_and_the_release_namespace_are_always_excluded() {
    let objects = render(&[
        "--set",
        "webhook.excludeNamespaces={monitoring,kube-system}",
    ]);
    let hooks = webhooks(&objects);
    let names: Vec<&str> = hooks.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "pin.pinhook.dev",
            "validate.pinhook.dev",
            "mirrors.pinhook.dev"
        ]
    );
    for (name, hook) in &hooks {
        let expressions = &hook["namespaceSelector"]["matchExpressions"];
        assert_eq!(
            expressions[0]["key"], "kubernetes.io/metadata.name",
            "{name}"
        );
        assert_eq!(expressions[0]["operator"], "NotIn", "{name}");
        assert_eq!(
            strings(&expressions[0]["values"]),
            [
                "kube-system",
                "kube-public",
                "kube-node-lease",
                NAMESPACE,
                "monitoring"
            ],
            "{name}: the fixed four first, then excludeNamespaces, without duplicates"
        );
        assert_eq!(expressions[1]["key"], "pinhook.dev/ignore", "{name}");
        assert_eq!(expressions[1]["operator"], "NotIn", "{name}");
        assert_eq!(strings(&expressions[1]["values"]), ["true"], "{name}");
    }
}

#[test]
fn managed_tls_renders_no_ca_bundle_and_an_empty_secret() {
    let objects = render(&[]);
    for (name, hook) in webhooks(&objects) {
        let client = hook["clientConfig"].as_object().expect("clientConfig");
        assert!(
            !client.contains_key("caBundle"),
            "{name}: caBundle rendered in managed mode"
        );
    }
    let secret = get(&objects, "Secret", "pinhook-tls");
    assert_eq!(secret["type"], "Opaque");
    let fields: Vec<&String> = secret.as_object().expect("Secret").keys().collect();
    assert_eq!(fields, ["apiVersion", "kind", "metadata", "type"]);
    let lease = get(&objects, "Lease", "pinhook-tls");
    assert_eq!(
        lease["spec"],
        serde_json::json!({}),
        "the Lease is pinhook's to fill"
    );

    let pod = &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    for (var, want) in [
        ("PINHOOK_TLS_SECRET", "pinhook-tls"),
        ("PINHOOK_TLS_SERVICE", "pinhook"),
        (
            "PINHOOK_TLS_WEBHOOKS",
            "mutating/pinhook,validating/pinhook",
        ),
        ("PINHOOK_TLS_LEASE", "pinhook-tls"),
        ("PINHOOK_TLS_CA_LIFETIME", "730d"),
        ("PINHOOK_TLS_CERT_LIFETIME", "90d"),
    ] {
        let env = env_value(container, var).unwrap_or_else(|| panic!("no {var}"));
        assert_eq!(env["value"], want, "{var}");
    }
    assert_eq!(
        env_value(container, "PINHOOK_TLS_NAMESPACE").expect("PINHOOK_TLS_NAMESPACE")["valueFrom"]
            ["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert!(env_value(container, "PINHOOK_TLS_SANS").is_none());
    assert!(env_value(container, "PINHOOK_TLS_CERT").is_none());
    assert!(
        !pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "tls"),
        "managed mode mounts no TLS volume"
    );
}

#[test]
fn existing_secret_mode_renders_the_given_ca_bundle_on_every_webhook() {
    let bundle = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("charts/pinhook/ci/existing-secret-values.yaml"),
    )
    .expect("ci/existing-secret-values.yaml");
    let bundle = bundle
        .lines()
        .find_map(|l| l.trim().strip_prefix("caBundle: "))
        .expect("a caBundle line")
        .to_string();
    let objects = render(&[
        "--set",
        "tls.mode=existingSecret,tls.existingSecret.name=my-tls",
        "--set",
        &format!("tls.existingSecret.caBundle={bundle}"),
    ]);
    for (name, hook) in webhooks(&objects) {
        assert_eq!(hook["clientConfig"]["caBundle"], bundle.as_str(), "{name}");
    }
    assert!(find(&objects, "Secret", "pinhook-tls").is_none());
    let pod = &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "my-tls");
    assert_eq!(
        env_value(&pod["containers"][0], "PINHOOK_TLS_CERT").expect("PINHOOK_TLS_CERT")["value"],
        "/etc/pinhook/tls/tls.crt"
    );
}

#[test]
fn a_digest_renders_repository_tag_at_digest() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let objects = render(&[
        "--set",
        "image.registry=registry.example,image.repository=platform/pinhook,image.tag=1.2.3",
        "--set",
        &format!("image.digest={digest}"),
    ]);
    let container =
        &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("registry.example/platform/pinhook:1.2.3@{digest}").as_str()
    );
    // the tag alone defaults to the chart's appVersion
    let objects = render(&[]);
    let container =
        &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/pinhook/pinhook:0.1.0");
}

#[test]
fn two_replicas_and_a_pdb_that_lets_one_go() {
    let objects = render(&[]);
    assert_eq!(
        get(&objects, "Deployment", "pinhook")["spec"]["replicas"],
        2
    );
    let pdb = get(&objects, "PodDisruptionBudget", "pinhook");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"].get("minAvailable").is_none());
}

#[test]
fn kubernetes_1_20_gets_policy_v1beta1_and_batch_v1beta1() {
    let objects = render(&["--kube-version", "1.20.2"]);
    assert_eq!(
        get(&objects, "PodDisruptionBudget", "pinhook")["apiVersion"],
        "policy/v1beta1"
    );
    for (name, hook) in webhooks(&objects) {
        if name == "mirrors.pinhook.dev" {
            continue;
        }
        let batch = hook["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| strings(&r["apiGroups"]) == ["batch"])
            .unwrap_or_else(|| panic!("{name}: no batch rule"));
        assert_eq!(strings(&batch["apiVersions"]), ["v1", "v1beta1"], "{name}");
    }
}

#[test]
fn kubernetes_1_20_starts_every_webhook_at_ignore_and_lets_pinhook_raise_it() {
    let objects = render(&["--kube-version", "1.20.2"]);
    for (name, hook) in webhooks(&objects) {
        assert_eq!(hook["failurePolicy"], "Ignore", "{name}");
    }
    let annotation = |kind| {
        get(&objects, kind, "pinhook")["metadata"]["annotations"]["pinhook.dev/failure-policy"]
            .clone()
    };
    assert_eq!(
        annotation("MutatingWebhookConfiguration"),
        "pin.pinhook.dev=Fail"
    );
    assert_eq!(
        annotation("ValidatingWebhookConfiguration"),
        "validate.pinhook.dev=Fail,mirrors.pinhook.dev=Fail"
    );
    let container =
        &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_value(container, "PINHOOK_RAISE_FAILURE_POLICY").expect("raise env")["value"],
        "mutating/pinhook,validating/pinhook"
    );
    assert_eq!(
        env_value(container, "PINHOOK_OWN_NAMESPACE").expect("own namespace env")["valueFrom"]
            ["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let role = get(&objects, "ClusterRole", "pinhook-own-namespace");
    assert_eq!(strings(&role["rules"][0]["resourceNames"]), [NAMESPACE]);
    assert_eq!(strings(&role["rules"][1]["resourceNames"]), ["pinhook"]);

    // 1.21 names the namespace in the selector: the configured policy, nothing to raise.
    let objects = render(&["--kube-version", "1.21.0"]);
    for (name, hook) in webhooks(&objects) {
        assert_eq!(hook["failurePolicy"], "Fail", "{name}");
    }
    assert!(find(&objects, "ClusterRole", "pinhook-own-namespace").is_none());
}

#[test]
fn url_mode_renders_no_deployment_and_calls_the_url() {
    let objects = render(&[
        "--set",
        "webhook.url=https://127.0.0.1:8443",
        "--set",
        "tls.managed.extraSANs={127.0.0.1}",
    ]);
    for kind in [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "NetworkPolicy",
        "Pod",
    ] {
        assert!(
            !objects.iter().any(|o| o["kind"] == kind),
            "{kind} rendered in url mode"
        );
    }
    for (kind, name) in [
        ("ServiceAccount", "pinhook"),
        ("ClusterRole", "pinhook"),
        ("ConfigMap", "pinhook-policy"),
        ("Secret", "pinhook-tls"),
    ] {
        get(&objects, kind, name);
    }
    let urls: Vec<String> = webhooks(&objects)
        .iter()
        .map(|(name, hook)| {
            assert!(
                hook["clientConfig"].get("service").is_none(),
                "{name}: service"
            );
            format!(
                "{name} {}",
                hook["clientConfig"]["url"].as_str().expect("url")
            )
        })
        .collect();
    assert_eq!(
        urls,
        [
            "pin.pinhook.dev https://127.0.0.1:8443/mutate",
            "validate.pinhook.dev https://127.0.0.1:8443/validate",
            "mirrors.pinhook.dev https://127.0.0.1:8443/validate",
        ]
    );
}

#[test]
fn the_fail_template_refuses_kube_system() {
    let error = helm_template("kube-system", &[]).expect_err("installing into kube-system");
    assert!(
        error.contains("pinhook must not be installed into kube-system"),
        "{error}"
    );
}

/// The webhook container's environment as (name, value) pairs (valueFrom ones as "").
fn webhook_env(objects: &[Value]) -> Vec<(String, String)> {
    get(objects, "Deployment", "pinhook")["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env is a list")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn by_default_no_network_policy_no_client_ca_and_metrics_on_their_own_port() {
    let objects = render(&[]);
    assert!(objects.iter().all(|o| o["kind"] != "NetworkPolicy"));
    let env = webhook_env(&objects);
    assert!(env.contains(&("PINHOOK_METRICS_LISTEN".into(), "0.0.0.0:9090".into())));
    assert!(env.iter().all(|(name, _)| name != "PINHOOK_CLIENT_CA_FILE"));
    let ports = &get(&objects, "Service", "pinhook")["spec"]["ports"];
    assert_eq!(ports[1]["name"], "metrics");
    assert_eq!(ports[1]["port"], 9090);
}

#[test]
fn the_network_policy_admits_8443_only_from_the_control_plane() {
    let objects = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.controlPlaneCIDRs={10.0.0.0/24,fd00::/64}",
    ]);
    let ingress = &get(&objects, "NetworkPolicy", "pinhook")["spec"]["ingress"];
    assert_eq!(ingress.as_array().map(Vec::len), Some(2), "{ingress}");
    assert_eq!(ingress[0]["ports"][0]["port"], 8443);
    assert_eq!(
        ingress[0]["from"],
        serde_json::json!([
            {"ipBlock": {"cidr": "10.0.0.0/24"}},
            {"ipBlock": {"cidr": "fd00::/64"}},
            {"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "pinhook",
                "app.kubernetes.io/component": "test"
            }}}
        ])
    );
    assert_eq!(ingress[1]["ports"][0]["port"], 9090);
    assert!(
        ingress[1].get("from").is_none(),
        "metrics from anyone: {ingress}"
    );
    let watch = &get(&objects, "NetworkPolicy", "pinhook-watch")["spec"];
    assert_eq!(
        watch["ingress"],
        serde_json::json!([]),
        "watch: no pod admitted"
    );
    assert_eq!(
        watch["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "watch"
    );

    let refused = helm_template(NAMESPACE, &["--set", "networkPolicy.enabled=true"])
        .expect_err("a NetworkPolicy admitting anyone is refused");
    assert!(
        refused.contains("networkPolicy.enabled needs networkPolicy.controlPlaneCIDRs"),
        "{refused}"
    );
}

#[test]
fn a_client_ca_bundle_is_mounted_and_named_to_pinhook() {
    let pem = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/client-ca.pem"),
    )
    .expect("fixture");
    let objects = render(&[
        "--set-file",
        "webhook.clientAuth.caBundle=tests/fixtures/client-ca.pem",
    ]);
    let config_map = get(&objects, "ConfigMap", "pinhook-client-ca");
    assert_eq!(
        config_map["data"]["ca.crt"].as_str().map(str::trim),
        Some(pem.trim())
    );
    let env = webhook_env(&objects);
    assert!(env.contains(&(
        "PINHOOK_CLIENT_CA_FILE".into(),
        "/etc/pinhook/client-ca/ca.crt".into()
    )));
    let spec = &get(&objects, "Deployment", "pinhook")["spec"]["template"]["spec"];
    let volumes = spec["volumes"].as_array().expect("volumes");
    assert!(volumes
        .iter()
        .any(|v| v["name"] == "client-ca" && v["configMap"]["name"] == "pinhook-client-ca"));
}

#[test]
fn the_helm_test_may_create_pods_only_in_a_namespace_of_its_own() {
    let objects = render(&[]);
    let test_ns = "pinhook-system-pinhook-test";
    let namespace = get(&objects, "Namespace", test_ns);
    assert_eq!(namespace["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // Every Role that grants anything to the test lives in the test namespace.
    for kind in ["Role", "RoleBinding"] {
        for object in objects.iter().filter(|o| o["kind"] == kind) {
            if object["metadata"]["name"] == "pinhook-test" {
                assert_eq!(object["metadata"]["namespace"], test_ns, "{object}");
            }
        }
    }
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "pinhook-test")
        .expect("the test's Role");
    assert_eq!(role["rules"][0]["resources"], serde_json::json!(["pods"]));
    let pod = get(&objects, "Pod", "pinhook-test");
    assert_eq!(pod["metadata"]["namespace"], NAMESPACE);
    let args: Vec<&str> = pod["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let at = args
        .iter()
        .position(|a| *a == "--namespace")
        .expect("--namespace");
    assert_eq!(args[at + 1], test_ns);
    let manifest = get(&objects, "ConfigMap", "pinhook-test")["data"]["pod.yaml"]
        .as_str()
        .expect("pod.yaml");
    assert!(
        manifest.contains(&format!("namespace: {test_ns}")),
        "{manifest}"
    );
}
