#!/usr/bin/env bash
# Static checks of the Helm chart (charts/pinhook), no cluster needed. One line per check
# (`ok   ...` or `FAIL ...` with the output indented below), then, as the last line,
# `chart: N passed, M failed`; exits 1 if any check failed.
#
#   - helm lint --strict, with Helm 3 and Helm 4, of every charts/pinhook/ci/*-values.yaml;
#   - each value set rendered twice by each Helm: byte-identical, and Helm 3 = Helm 4; no
#     template calls a function whose result changes between renders (now, rand*, gen*, uuidv4,
#     lookup);
#   - the rendered objects validated strictly (kubernetes-validate --strict, unknown fields
#     refused) against Kubernetes 1.20 (rendered with --kube-version 1.20.2: the e2e tier's
#     apiserver) and every later minor to 1.37, each rendered with its --kube-version; custom
#     resources (ServiceMonitor, cert-manager) are skipped
#     with a note;
#   - values.yaml and the ci value sets pass values.schema.json (check-jsonschema); every file
#     of charts/pinhook/tests-invalid/ is refused by check-jsonschema and by helm;
#   - settings templates/validate.yaml must stop (kube-system, existingSecret without its
#     Secret, webhook.url not https, ...) fail with their message;
#   - helm package builds the archive, without tests-invalid/;
#   - the alerts and the dashboard: promtool check rules and promtool test rules
#     (tests/prometheus/), the dashboard's JSON and queries, every metric, label and label value
#     they use exported by pinhook (scripts/observability-check.py, against src/metrics.rs and
#     a scrape of target/debug/pinhook serve when built), docs/ copies identical, and what the
#     chart renders for them;
#   - manifests/base is what the chart renders (scripts/render-base.sh --check), every overlay
#     still renders, components/watch-openreports renders what watch.reportApi=openreports
#     does, and the README's values table is current (scripts/chart-values-table.py --check).
#
# Tools: scripts/install-helm.sh (helm3, helm4, and the Python tools under PINHOOK_TOOLS,
# default /usr/local/lib/pinhook-tools); kubectl for the overlays; promtool, curl, openssl
# and jq (scripts/install-test-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

readonly CHART=charts/pinhook
readonly TOOLS=${PINHOOK_TOOLS:-/usr/local/lib/pinhook-tools}
readonly KV_NEW=$TOOLS/py/bin/kubernetes-validate
readonly KV_OLD=$TOOLS/py-k8s-1.20/bin/kubernetes-validate
readonly PY=$TOOLS/py/bin/python
readonly CHECK_JSONSCHEMA=$TOOLS/py/bin/check-jsonschema
readonly HELMS=(helm3 helm4)
readonly RELEASE=pinhook NS=pinhook-system

passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check NAME CMD...: one line for CMD's verdict; its output, indented, when it failed
check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        printf '%s\n' "$out" | tail -n 25 | sed 's/^/       /'
        failed=$((failed + 1))
    fi
}

# expect_fail MESSAGE CMD...: CMD must fail, and say MESSAGE
expect_fail() {
    local want=$1 out
    shift
    if out=$("$@" 2>&1); then
        echo "succeeded, but should have failed with: $want"
        return 1
    fi
    if [[ $out != *"$want"* ]]; then
        printf 'failed, but without %q:\n%s\n' "$want" "$out"
        return 1
    fi
}

tools_present() {
    local missing=() t
    for t in "${HELMS[@]}" kubectl promtool; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
    for t in "$KV_NEW" "$KV_OLD" "$CHECK_JSONSCHEMA" "$PY"; do [[ -x $t ]] || missing+=("$t"); done
    ((${#missing[@]} == 0)) || { echo "missing: ${missing[*]} (run scripts/install-test-deps.sh)"; return 1; }
}
check "tools: helm3, helm4, kubectl, promtool, kubernetes-validate (1.20 and 1.25-1.37), check-jsonschema" tools_present

values_sets=()
for f in "$CHART"/ci/*-values.yaml; do values_sets+=("$f"); done
name_of() { basename "$1" -values.yaml; }

# --- lint ------------------------------------------------------------------------------------
for helm in "${HELMS[@]}"; do
    for v in "${values_sets[@]}"; do
        check "$helm lint --strict ($(name_of "$v"))" \
            "$helm" lint --strict "$CHART" --namespace "$NS" --values "$v"
    done
done

# --- reproducible renders --------------------------------------------------------------------
render() { # render HELM VALUES OUT [helm args...]
    local helm=$1 v=$2 out=$3
    shift 3
    "$helm" template "$RELEASE" "$CHART" --namespace "$NS" --values "$v" "$@" >"$out"
}
identical() { # identical A B: byte-identical files, else the start of their diff
    cmp -s "$1" "$2" || { diff "$1" "$2" | head -n 20; return 1; }
}
same_documents() { # same_documents A B: the same YAML documents, byte for byte, in any order
    # (Helm 4 sorts kinds it has no install order for, the custom resources, after the webhook
    # configurations; Helm 3 before them)
    python3 - "$1" "$2" <<'PY'
import sys
docs = [sorted(d.strip() for d in open(f).read().split("\n---\n")) for f in sys.argv[1:]]
if docs[0] != docs[1]:
    only = lambda a, b: [d.splitlines()[0:2] for d in a if d not in b]
    print("only in helm3:", only(docs[0], docs[1]), "only in helm4:", only(docs[1], docs[0]))
    sys.exit(1)
PY
}
twice() { # twice HELM VALUES NAME: two renders, byte-identical
    render "$1" "$2" "$tmp/$3.1.yaml" && render "$1" "$2" "$tmp/$3.2.yaml" &&
        identical "$tmp/$3.1.yaml" "$tmp/$3.2.yaml"
}
for v in "${values_sets[@]}"; do
    n=$(name_of "$v")
    for helm in "${HELMS[@]}"; do
        check "$helm template twice, byte-identical ($n)" twice "$helm" "$v" "$n.$helm"
    done
    check "helm3 and helm4 render the same documents ($n)" \
        same_documents "$tmp/$n.helm3.1.yaml" "$tmp/$n.helm4.1.yaml"
done
no_unstable_functions() {
    # now/date, rand*, uuidv4, gen* (keys and certificates) and lookup make renders differ
    # (or depend on the cluster); pinhook writes what must be generated at run time.
    ! grep -rnE '\{\{[^}]*\b(now|date|dateInZone|randAlpha|randAlphaNum|randNumeric|randAscii|randBytes|randInt|uuidv4|genCA|genCAWithKey|genPrivateKey|genSelfSignedCert|genSelfSignedCertWithKey|genSignedCert|genSignedCertWithKey|lookup)\b' \
        "$CHART/templates"
}
check "templates call none of now, rand*, uuidv4, gen*, lookup" no_unstable_functions

# --- Kubernetes schemas ----------------------------------------------------------------------
# split_builtin IN OUT: the objects of built-in kinds into OUT; custom resources are named on
# stdout (kubernetes-validate knows only the built-in API)
split_builtin() {
    "$PY" - "$1" "$2" <<'PY'
import sys, yaml
builtin = ("v1", "apps/", "policy/", "rbac.authorization.k8s.io/", "admissionregistration.k8s.io/",
           "networking.k8s.io/", "batch/", "coordination.k8s.io/")
keep, skipped = [], []
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if not doc:
        continue
    api = doc.get("apiVersion", "")
    (keep if api == "v1" or api.startswith(builtin[1:]) else skipped).append(doc)
with open(sys.argv[2], "w") as out:
    yaml.safe_dump_all(keep, out, sort_keys=False)
for doc in skipped:
    print(f"{doc['apiVersion']} {doc['kind']}/{doc['metadata']['name']}")
PY
}
validate() { # validate KV K8S_VERSION FILE
    local out
    out=$("$1" --strict --quiet -k "$2" "$3" 2>&1) || { printf '%s\n' "$out"; return 1; }
    # kubernetes-validate only warns (exit 0) about a kind or apiVersion it has no schema for:
    # for a built-in kind that means the version does not serve it (policy/v1beta1 on 1.25).
    if grep -q "Couldn't find schema" <<<"$out"; then
        printf '%s\n' "$out"
        return 1
    fi
    [[ $(grep -c . "$3") -gt 0 ]] || { echo "nothing to validate"; return 1; }
}
# every_minor SET NAME: rendered for each Kubernetes minor the chart supports (kubeVersion
# >=1.20; --kube-version 1.MINOR.0, 1.20.2 for 1.20, the e2e tier's apiserver), each rendering
# validated against that minor's schemas (the 1.28.3 package for 1.20-1.24, 1.37.0 after)
every_minor() {
    local v=$1 n=$2 minor k kv out
    for minor in $(seq 20 37); do
        k="1.$minor.0"
        kv=$KV_NEW
        ((minor < 25)) && kv=$KV_OLD
        local kube=$k
        ((minor == 20)) && kube=1.20.2
        render helm3 "$v" "$tmp/$n.k$minor.yaml" --kube-version "$kube" || { echo "render --kube-version $kube failed"; return 1; }
        split_builtin "$tmp/$n.k$minor.yaml" "$tmp/$n.k$minor.builtin.yaml" >/dev/null
        out=$(validate "$kv" "$k" "$tmp/$n.k$minor.builtin.yaml") || { echo "Kubernetes $k: $out"; return 1; }
    done
}
for v in "${values_sets[@]}"; do
    n=$(name_of "$v")
    skipped=$(split_builtin "$tmp/$n.helm3.1.yaml" "$tmp/$n.builtin.yaml")
    [[ -z $skipped ]] || echo "note: not validated (custom resources, $n): $(tr '\n' ' ' <<<"$skipped")"
    check "kubernetes-validate --strict, every minor 1.20-1.37, each rendered with its --kube-version ($n)" \
        every_minor "$v" "$n"
done

# --- values.schema.json ----------------------------------------------------------------------
schema_ok() { "$CHECK_JSONSCHEMA" --schemafile "$CHART/values.schema.json" "$@"; }
check "check-jsonschema: values.yaml and ci/*-values.yaml pass" schema_ok "$CHART/values.yaml" "${values_sets[@]}"
refused() { # refused FILE: check-jsonschema and helm both refuse FILE
    local out
    if out=$(schema_ok "$1" 2>&1); then echo "check-jsonschema accepted it"; return 1; fi
    expect_fail "values don't meet the specifications of the schema" \
        helm3 template "$RELEASE" "$CHART" --namespace "$NS" --values "$1"
}
for f in "$CHART"/tests-invalid/*.yaml; do
    check "refused by check-jsonschema and helm3: tests-invalid/$(basename "$f")" refused "$f"
done

# --- templates/validate.yaml -----------------------------------------------------------------
refuse() { # refuse MESSAGE NAMESPACE HELM-ARGS...: helm template refuses with MESSAGE
    local want=$1 ns=$2
    shift 2
    expect_fail "$want" helm3 template "$RELEASE" "$CHART" --namespace "$ns" "$@"
}
for ns in kube-system kube-public kube-node-lease; do
    check "fail: installing into $ns" refuse "pinhook must not be installed into $ns" "$ns"
done
check "fail: existingSecret without a name" \
    refuse "tls.mode=existingSecret needs tls.existingSecret.name" "$NS" --set tls.mode=existingSecret
check "fail: existingSecret without a caBundle" \
    refuse "tls.mode=existingSecret needs tls.existingSecret.caBundle" "$NS" \
    --set tls.mode=existingSecret,tls.existingSecret.name=tls
check "fail: existingSecret caBundle that is no PEM certificate" \
    refuse "is not base64 of a PEM certificate" "$NS" \
    --set tls.mode=existingSecret,tls.existingSecret.name=tls,tls.existingSecret.caBundle=bm90IGEgY2VydA==
check "fail: tls.existingSecret.name while tls.mode is managed" \
    refuse "set tls.mode=existingSecret to use it" "$NS" --set tls.existingSecret.name=tls
check "fail: webhook.url not https (--set, past the schema's own check)" \
    refuse "webhook.url must be an https:// URL" "$NS" --skip-schema-validation --set webhook.url=http://127.0.0.1:8443
check "fail: webhook.url with a trailing slash" \
    refuse "no trailing slash" "$NS" --skip-schema-validation --set webhook.url=https://127.0.0.1:8443/ \
    --set 'tls.managed.extraSANs={127.0.0.1}'
check "fail: managed TLS with webhook.url whose host no SAN covers" \
    refuse "tls.managed.extraSANs does not hold its host 127.0.0.1" "$NS" --set webhook.url=https://127.0.0.1:8443
check "fail: webhook.url with tls.mode certManager" \
    refuse "webhook.url does not work with tls.mode=certManager" "$NS" \
    --set webhook.url=https://pinhook.example,tls.mode=certManager
check "fail: a managed-mode lifetime longer than pinhook accepts" \
    refuse "tls.managed.caLifetime=3661d is longer than pinhook accepts" "$NS" --set tls.managed.caLifetime=3661d
check "fail: a certificate lifetime not shorter than the CA's (pinhook serve refuses it)" \
    refuse "tls.managed.certLifetime=800d must be shorter than tls.managed.caLifetime=730d" "$NS" \
    --set tls.managed.certLifetime=800d
check "fail: a CA lifetime too short for the 60 s grace (pinhook serve refuses it)" \
    refuse "tls.managed.caLifetime=2m must be longer than 180s" "$NS" \
    --set tls.managed.caLifetime=2m,tls.managed.certLifetime=1m
check "fail: replicaCount 1 with PDB maxUnavailable 0" \
    refuse "podDisruptionBudget.maxUnavailable=0 with replicaCount=1" "$NS" \
    --set replicaCount=1,podDisruptionBudget.maxUnavailable=0
check "fail: PDB minAvailable equal to replicaCount" \
    refuse "podDisruptionBudget.minAvailable=2 with replicaCount=2" "$NS" --set podDisruptionBudget.minAvailable=2
check "fail: networkPolicy.enabled with neither controlPlaneCIDRs nor from (it would admit anyone)" \
    refuse "networkPolicy.enabled needs networkPolicy.controlPlaneCIDRs" "$NS" --set networkPolicy.enabled=true
check "fail: webhook.clientAuth with both caBundle and existingSecret" \
    refuse "webhook.clientAuth: set caBundle or existingSecret, not both" "$NS" \
    --set-file webhook.clientAuth.caBundle=tests/fixtures/client-ca.pem --set webhook.clientAuth.existingSecret=ca
check "fail: webhook.clientAuth.caBundle that is no PEM certificate" \
    refuse "webhook.clientAuth.caBundle is not a PEM certificate" "$NS" --set webhook.clientAuth.caBundle=not-a-cert

check "fail: registryCAs naming one host twice" \
    refuse "registryCAs: host reg.example is listed twice" "$NS" \
    --set 'registryCAs[0].host=reg.example,registryCAs[0].configMap=a,registryCAs[1].host=reg.example,registryCAs[1].secret=b'
check "fail: registryCAs and policy.registries.hosts.<host>.ca for the same host" \
    refuse "has a CA in registryCAs and policy.registries.hosts" "$NS" \
    --set 'registryCAs[0].host=reg.example,registryCAs[0].configMap=a,policy.registries.hosts.reg\.example.ca=/x.pem'

# --- what registryCAs and nodeCredentialProviders render --------------------------------------
# registry_mounts: ci/registry-cas-values.yaml gives both Deployments (webhook and watch) each
# CA read-only under /etc/pinhook/registry-ca/<i>/, each cosign key under
# /etc/pinhook/signature-keys/<name>/, the per-host ones in the policy's
# registries.hosts.<host>.ca (a host's other settings kept), the host-less one in
# PINHOOK_REGISTRY_CA, and the credential provider config (ConfigMap) and plugin dir (hostPath)
# with their two env vars; values.yaml's defaults add none of it.
registry_mounts() {
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --values "$CHART/ci/registry-cas-values.yaml" >"$tmp/rca.yaml" || return 1
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" >"$tmp/rca-default.yaml" || return 1
    "$PY" - "$tmp/rca.yaml" "$tmp/rca-default.yaml" <<'PY'
import sys, yaml
def docs(f):
    return [d for d in yaml.safe_load_all(open(f)) if d]
def fail(msg):
    print(msg); sys.exit(1)
got = docs(sys.argv[1])
deps = {d["metadata"]["name"]: d for d in got if d["kind"] == "Deployment"}
if sorted(deps) != ["pinhook", "pinhook-watch"]:
    fail(f"deployments: {sorted(deps)}")
want_mounts = {
    "registry-ca-0": "/etc/pinhook/registry-ca/0", "registry-ca-1": "/etc/pinhook/registry-ca/1",
    "registry-ca-2": "/etc/pinhook/registry-ca/2",
    "node-credential-provider-config": "/etc/pinhook/node/credential-provider-config",
    "node-credential-provider-bin": "/etc/pinhook/node/credential-provider-bin",
    "signature-key-team": "/etc/pinhook/signature-keys/team",
    "signature-key-vendor": "/etc/pinhook/signature-keys/vendor",
}
want_env = {
    "PINHOOK_REGISTRY_CA": "/etc/pinhook/registry-ca/2/root.crt",
    "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG": "/etc/pinhook/node/credential-provider-config/config.yaml",
    "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR": "/etc/pinhook/node/credential-provider-bin",
}
for name, d in deps.items():
    spec = d["spec"]["template"]["spec"]
    c = spec["containers"][0]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    for v, path in want_mounts.items():
        m = mounts.get(v)
        if not m or m["mountPath"] != path or m.get("readOnly") is not True:
            fail(f"{name}: mount {v}: {m}")
    env = {e["name"]: e.get("value") for e in c["env"]}
    for k, v in want_env.items():
        if env.get(k) != v:
            fail(f"{name}: env {k}={env.get(k)!r}, want {v!r}")
    vols = {v["name"]: v for v in spec["volumes"]}
    checks = [
        vols["registry-ca-0"].get("configMap") == {"name": "corp-registry-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
        vols["registry-ca-1"].get("secret", {}).get("secretName") == "harbor-ca",
        vols["registry-ca-1"]["secret"].get("items") == [{"key": "ca.pem", "path": "ca.pem"}],
        vols["registry-ca-2"].get("configMap", {}).get("name") == "corp-root-ca",
        vols["node-credential-provider-config"].get("configMap", {}).get("name") == "ecr-credential-provider",
        vols["node-credential-provider-bin"].get("hostPath") == {"path": "/etc/eks/image-credential-provider", "type": "Directory"},
        vols["signature-key-team"].get("secret") == {"secretName": "team-cosign", "defaultMode": 0o444, "items": [{"key": "cosign.pub", "path": "cosign.pub"}]},
        vols["signature-key-vendor"].get("configMap") == {"name": "vendor-keys", "items": [{"key": "vendor.pub", "path": "vendor.pub"}]},
    ]
    if not all(checks):
        fail(f"{name}: volumes {checks}: {vols}")
policy = next(d for d in got if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "pinhook-policy")
hosts = yaml.safe_load(policy["data"]["policy.yaml"])["registries"]["hosts"]
if hosts != {"registry.corp.example:5000": {"ca": "/etc/pinhook/registry-ca/0/ca.crt"},
             "harbor.corp.example": {"ca": "/etc/pinhook/registry-ca/1/ca.pem", "insecure": False}}:
    fail(f"policy registries.hosts: {hosts}")
text = open(sys.argv[2]).read()
for needle in ("registry-ca", "credential-provider", "PINHOOK_REGISTRY_CA", "hostPath", "signature-key"):
    if needle in text:
        fail(f"defaults render {needle}")
PY
}
check "registryCAs, signatureKeys and nodeCredentialProviders: mounted read-only in webhook and watch, wired to the policy and env" registry_mounts
node_config_from_host() { # configMap.name empty: the node's own file, hostPath type File
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --set nodeCredentialProviders.enabled=true \
        --set nodeCredentialProviders.configHostPath=/home/kubernetes/cri-auth-config.yaml \
        --set nodeCredentialProviders.binDirHostPath=/home/kubernetes/bin >"$tmp/ncp.yaml" || return 1
    "$PY" - "$tmp/ncp.yaml" <<'PY'
import sys, yaml
n = 0
for d in yaml.safe_load_all(open(sys.argv[1])):
    if not d or d["kind"] != "Deployment":
        continue
    spec = d["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert vols["node-credential-provider-config"]["hostPath"] == {"path": "/home/kubernetes/cri-auth-config.yaml", "type": "File"}, vols
    assert vols["node-credential-provider-bin"]["hostPath"]["path"] == "/home/kubernetes/bin", vols
    assert env["PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG"] == "/etc/pinhook/node/credential-provider-config", env
    n += 1
assert n == 2, n
PY
}
check "nodeCredentialProviders from the node: config and plugin dir by hostPath (GKE's paths)" node_config_from_host

# --- pinhook's own namespace before 1.21 (pinhook serve --raise-failure-policy) -------------
# own_namespace KUBE MODE: rendered with --kube-version KUBE (and webhook.url in MODE url), with
# validate.pinhook.dev set to Ignore: on 1.20 in the cluster every webhook is Ignore, the
# configured policies are in the annotation pinhook.dev/failure-policy, the Deployment passes
# the own namespace and both configurations, and a ClusterRole grants get/patch of exactly that
# namespace and those configurations; on 1.21 (or in url mode) the configured policies, and
# none of the rest.
own_namespace() {
    local kube=$1 mode=$2 args=()
    [[ $mode == url ]] && args=(--set webhook.url=https://127.0.0.1:8443 --set 'tls.managed.extraSANs={127.0.0.1}')
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$kube" \
        --set webhook.validate.failurePolicy=Ignore "${args[@]}" >"$tmp/own-$kube-$mode.yaml" || return 1
    "$PY" - "$tmp/own-$kube-$mode.yaml" "$kube" "$mode" "$NS" "$RELEASE" <<'PY'
import sys, yaml
path, kube, mode, ns, full = sys.argv[1:]
raise_ = kube.startswith("1.20") and mode != "url"
docs = [d for d in yaml.safe_load_all(open(path)) if d]
def one(kind, name=full):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found[0] if found else None
def fail(msg):
    print(msg); sys.exit(1)
m, v = one("MutatingWebhookConfiguration"), one("ValidatingWebhookConfiguration")
got = [w["failurePolicy"] for w in m["webhooks"] + v["webhooks"]]
want = ["Ignore"] * 3 if raise_ else ["Fail", "Ignore", "Fail"]
if got != want:
    fail(f"failurePolicy {got}, want {want}")
ann = lambda c: (c["metadata"].get("annotations") or {}).get("pinhook.dev/failure-policy")
want_ann = ("pin.pinhook.dev=Fail", "validate.pinhook.dev=Ignore,mirrors.pinhook.dev=Fail") if raise_ else (None, None)
if (ann(m), ann(v)) != want_ann:
    fail(f"annotations {(ann(m), ann(v))}, want {want_ann}")
role = one("ClusterRole", f"{full}-own-namespace")
binding = one("ClusterRoleBinding", f"{full}-own-namespace")
if not raise_:
    if role or binding:
        fail("own-namespace RBAC rendered")
    dep = one("Deployment")
    if dep and "PINHOOK_RAISE_FAILURE_POLICY" in str(dep):
        fail("PINHOOK_RAISE_FAILURE_POLICY rendered")
    sys.exit(0)
want_rules = [
    {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [ns], "verbs": ["get", "patch"]},
    {"apiGroups": ["admissionregistration.k8s.io"],
     "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
     "resourceNames": [full], "verbs": ["get", "patch"]},
]
if not role or role["rules"] != want_rules:
    fail(f"ClusterRole rules: {role and role['rules']}")
if not binding or binding["subjects"] != [{"kind": "ServiceAccount", "name": full, "namespace": ns}]:
    fail(f"ClusterRoleBinding: {binding}")
env = {e["name"]: e for e in one("Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
if env.get("PINHOOK_RAISE_FAILURE_POLICY", {}).get("value") != f"mutating/{full},validating/{full}":
    fail(f"PINHOOK_RAISE_FAILURE_POLICY: {env.get('PINHOOK_RAISE_FAILURE_POLICY')}")
if env.get("PINHOOK_OWN_NAMESPACE", {}).get("valueFrom") != {"fieldRef": {"fieldPath": "metadata.namespace"}}:
    fail(f"PINHOOK_OWN_NAMESPACE: {env.get('PINHOOK_OWN_NAMESPACE')}")
PY
}
check "1.20: webhooks rendered Ignore, configured policies in pinhook.dev/failure-policy, pinhook raises them (env, RBAC by name)" \
    own_namespace 1.20.2 service
check "1.21: webhooks rendered with the configured failurePolicy, no annotation, no own-namespace RBAC" \
    own_namespace 1.21.0 service
check "1.20 with webhook.url (no pinhook Pod in the cluster): the configured failurePolicy" \
    own_namespace 1.20.2 url

# --- the dashboard and the alerts (docs/observability.md) ------------------------------------
# files/pinhook-rules.yaml and files/pinhook-dashboard.json are the one source; docs/ holds
# copies. promtool: scripts/install-test-deps.sh (Debian's prometheus package).
readonly RULES=$CHART/files/pinhook-rules.yaml DASHBOARD=$CHART/files/pinhook-dashboard.json
copies_identical() {
    identical "$RULES" docs/prometheus/pinhook-rules.yaml && identical "$DASHBOARD" docs/grafana/pinhook-dashboard.json
}
check "docs/prometheus/pinhook-rules.yaml and docs/grafana/pinhook-dashboard.json are the chart's files" copies_identical
check "promtool check rules: files/pinhook-rules.yaml" promtool check rules "$RULES"
check "promtool test rules: each alert firing and not firing (tests/prometheus/pinhook-rules.test.yaml)" \
    promtool test rules tests/prometheus/pinhook-rules.test.yaml
dashboard_json() { # valid JSON, schemaVersion 39, the variables, every query parsed by promtool
    jq -e '.schemaVersion == 39 and .uid == "pinhook"
        and ([.templating.list[].name] == ["datasource", "namespace", "job"])
        and ([.panels[] | select(.type != "row") | .datasource.uid] | unique == ["${datasource}"])
        and ([.panels[].id] | length == (unique | length))' "$DASHBOARD" >/dev/null ||
        { echo "schemaVersion, uid, variables, datasources or panel ids not as expected"; return 1; }
    "$PY" scripts/observability-check.py promql "$tmp/dashboard-queries.yaml" &&
        promtool check rules "$tmp/dashboard-queries.yaml"
}
check "dashboard JSON: jq, schemaVersion 39, datasource/namespace/job variables, every query parses (promtool)" dashboard_json
# scrape_pinhook OUT: /metrics of a real `pinhook serve` (no cluster: KUBECONFIG unset) after a
# malformed review and six Pods whose registry refuses connections: result="error", a denial
# for resolution_failed, registry outcome unreachable, cache misses, then the breaker open.
scrape_pinhook() {
    local bin=$1 out=$2 dir=$tmp/scrape pid port hport i
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null || return 1
    printf 'mode: enforce\nregistries:\n  allowPrivate: ["127.0.0.1:1"]\n' >"$dir/policy.yaml"
    env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT KUBECONFIG="$dir/no-kubeconfig" \
        "$bin" serve --policy "$dir/policy.yaml" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
        --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem" >"$dir/log" 2>&1 &
    pid=$!
    for ((i = 0; i < 100; i++)); do
        port=$(sed -n 's/.*serving \/metrics[^=]* over plain HTTP addr=127.0.0.1:\([0-9]*\).*/\1/p' "$dir/log")
        hport=$(sed -n 's/.*listening addr=127.0.0.1:\([0-9]*\).*/\1/p' "$dir/log")
        [[ -n $port && -n $hport ]] && break
        sleep 0.1
    done
    if [[ -z $port || -z $hport ]]; then
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        echo "pinhook serve did not start:"; cat "$dir/log"; return 1
    fi
    curl -sk -o /dev/null -X POST -H 'Content-Type: application/json' -d '{}' "https://127.0.0.1:$hport/mutate"
    for i in 1 2 3 4 5 6; do
        jq ".request.object.spec.containers[0].image = \"127.0.0.1:1/team/app:$i\"" \
            tests/fixtures/admissionreview/v1.26/pod-create-basic-mutate.json |
            curl -sk -o /dev/null -X POST -H 'Content-Type: application/json' --data @- \
                "https://127.0.0.1:$hport/mutate"
    done
    curl -sf "http://127.0.0.1:$port/metrics" >"$out"
    local rc=$?
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return $rc
}
metric_names() {
    local bin=${PINHOOK_BIN:-target/debug/pinhook}
    if [[ -x $bin ]]; then
        scrape_pinhook "$bin" "$tmp/scrape.txt" || return 1
        "$PY" scripts/observability-check.py names --scrape "$tmp/scrape.txt"
    else
        echo "note: no $bin (cargo build): src/metrics.rs alone"
        "$PY" scripts/observability-check.py names
    fi
}
check "dashboard and rules use only metrics, labels and values pinhook exports (src/metrics.rs, a scrape of pinhook serve)" \
    metric_names
# monitoring_objects: values.yaml renders none of the new objects; everything-on renders the
# PrometheusRule (spec passes promtool; the file's groups with additionalRuleLabels, then
# pinhook-extra), the dashboard ConfigMap (the file byte for byte, the sidecar's label, its
# namespace), the ServiceMonitor that puts pinhook's endpoint label back, the watch's PodMonitor.
monitoring_objects() {
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" >"$tmp/mon-default.yaml" || return 1
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --values "$CHART/ci/everything-on-values.yaml" \
        >"$tmp/mon-all.yaml" || return 1
    "$PY" - "$tmp/mon-default.yaml" "$tmp/mon-all.yaml" "$RULES" "$DASHBOARD" "$tmp/mon-rules.yaml" <<'PY' || return 1
import sys, yaml
default, everything, rules, dashboard, out = sys.argv[1:]
def docs(f):
    return [d for d in yaml.safe_load_all(open(f)) if d]
def fail(msg):
    print(msg); sys.exit(1)
kinds = [d["kind"] for d in docs(default)]
for kind in ("PrometheusRule", "PodMonitor", "ServiceMonitor"):
    if kind in kinds:
        fail(f"values.yaml renders a {kind}")
if any(d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard") for d in docs(default)):
    fail("values.yaml renders the dashboard ConfigMap")
got = {(d["kind"], d["metadata"]["name"]): d for d in docs(everything)}
rule = got[("PrometheusRule", "pinhook-all")]
want = yaml.safe_load(open(rules))["groups"]
for g in want:
    for r in g["rules"]:
        r["labels"] = {"team": "platform", **r.get("labels", {})}
groups = rule["spec"]["groups"]
if groups[:-1] != want or groups[-1]["name"] != "pinhook-extra" or len(groups[-1]["rules"]) != 1:
    fail(f"PrometheusRule groups: {[g['name'] for g in groups]}, not the file's with team: platform, then pinhook-extra")
if rule["metadata"]["labels"].get("release") != "prometheus":
    fail(f"PrometheusRule labels: {rule['metadata']['labels']}")
yaml.safe_dump(rule["spec"], open(out, "w"))
cm = got[("ConfigMap", "pinhook-all-dashboard")]
if cm["data"]["pinhook-dashboard.json"] != open(dashboard).read():
    fail("the ConfigMap's pinhook-dashboard.json is not files/pinhook-dashboard.json")
if cm["metadata"]["namespace"] != "monitoring" or cm["metadata"]["labels"].get("grafana_dashboard") != "1":
    fail(f"dashboard ConfigMap metadata: {cm['metadata']}")
if cm["metadata"]["annotations"] != {"owner": "platform@example.com", "grafana_folder": "pinhook"}:
    fail(f"dashboard ConfigMap annotations: {cm['metadata']['annotations']}")
relabel = got[("ServiceMonitor", "pinhook-all")]["spec"]["endpoints"][0]["metricRelabelings"]
if relabel[0].get("sourceLabels") != ["exported_endpoint"] or relabel[0].get("targetLabel") != "endpoint":
    fail(f"ServiceMonitor metricRelabelings: {relabel}")
pm = got[("PodMonitor", "pinhook-all-watch")]["spec"]
if pm["selector"]["matchLabels"].get("app.kubernetes.io/component") != "watch" or pm["podMetricsEndpoints"][0]["port"] != "http":
    fail(f"PodMonitor: {pm}")
PY
    promtool check rules "$tmp/mon-rules.yaml"
}
check "values.yaml: no PrometheusRule, dashboard or monitors; everything-on: PrometheusRule (promtool check rules), dashboard ConfigMap, ServiceMonitor endpoint relabeling, watch PodMonitor" \
    monitoring_objects

# --- package ---------------------------------------------------------------------------------
packaged() {
    local out="$tmp/package" tgz files
    mkdir -p "$out"
    helm3 package "$CHART" --destination "$out" >/dev/null || return 1
    tgz=$out/pinhook-$(awk '$1 == "version:" { print $2 }' "$CHART/Chart.yaml").tgz
    [[ -s $tgz ]] || { echo "no $tgz"; ls "$out"; return 1; }
    files=$(tar -tzf "$tgz") || return 1
    grep -qx 'pinhook/values.schema.json' <<<"$files" || { echo "values.schema.json missing from $tgz"; return 1; }
    for f in files/pinhook-rules.yaml files/pinhook-dashboard.json; do
        grep -qx "pinhook/$f" <<<"$files" || { echo "$f missing from $tgz"; return 1; }
    done
    ! grep '^pinhook/tests-invalid/' <<<"$files" || { echo "tests-invalid/ packaged (.helmignore)"; return 1; }
    helm4 template "$RELEASE" "$tgz" --namespace "$NS" >/dev/null &&
        helm4 template "$RELEASE" "$tgz" --namespace "$NS" --set grafanaDashboard.enabled=true \
            --set prometheusRule.enabled=true >/dev/null
}
check "helm package: the archive, with values.schema.json and files/, without tests-invalid/, renders" packaged

# --- one source of truth: manifests/base, the overlays, the README's values table ------------
check "manifests/base is what the chart renders (scripts/render-base.sh --check)" scripts/render-base.sh --check
for o in base overlays/cert-manager overlays/local-url overlays/node-credential-providers; do
    check "kubectl kustomize manifests/$o" kubectl kustomize "manifests/$o"
done
# components/operator-kinds: the base with it gains the Rollout and Cluster rules, once in
# pin.pinhook.dev and once in validate.pinhook.dev (none in mirrors.pinhook.dev, rendered last).
operator_kinds() {
    local dir rendered
    dir=$(mktemp -d)
    cp -r manifests "$dir/" && mkdir -p "$dir/manifests/overlays/operator-kinds-check"
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/operator-kinds]\n' \
        >"$dir/manifests/overlays/operator-kinds-check/kustomization.yaml"
    rendered=$(kubectl kustomize "$dir/manifests/overlays/operator-kinds-check") || { rm -rf "$dir"; return 1; }
    rm -rf "$dir"
    local group
    for group in argoproj.io postgresql.cnpg.io; do
        [[ $(grep -c -- "- $group\$" <<<"$rendered") == 2 ]] || { echo "$group: not in exactly 2 webhooks"; return 1; }
        # Everything after mirrors.pinhook.dev's name is that webhook's: the group is not there.
        ! sed -n '/name: mirrors.pinhook.dev/,$p' <<<"$rendered" | grep -q -- "- $group\$" \
            || { echo "$group: in mirrors.pinhook.dev"; return 1; }
    done
}
check "manifests/components/operator-kinds adds the Rollout and Cluster rules to pin and validate" operator_kinds
# components/apiserver-policy: the base with it gains the ValidatingAdmissionPolicy and its
# binding, mirroring the base's policy (mode audit, no exemptions); the base alone has neither.
apiserver_policy_component() {
    local dir rendered
    dir=$(mktemp -d)
    cp -r manifests "$dir/" && mkdir -p "$dir/manifests/overlays/vap-check"
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/apiserver-policy]\n' \
        >"$dir/manifests/overlays/vap-check/kustomization.yaml"
    rendered=$(kubectl kustomize "$dir/manifests/overlays/vap-check") || { rm -rf "$dir"; return 1; }
    rm -rf "$dir"
    [[ $(grep -c -e '^kind: ValidatingAdmissionPolicy$' -e '^kind: ValidatingAdmissionPolicyBinding$' <<<"$rendered") == 2 ]] ||
        { echo "not one policy and one binding"; return 1; }
    grep -q 'expression: .\"audit\".' <<<"$rendered" || { echo "policyMode is not the base's audit"; return 1; }
    ! kubectl kustomize manifests/base | grep -q '^kind: ValidatingAdmissionPolicy' || { echo "in the base"; return 1; }
}
check "manifests/components/apiserver-policy adds the ValidatingAdmissionPolicy and binding (audit, as the base's policy); the base has none" apiserver_policy_component
# service_account_tokens: `serviceaccounts/token` create (KEP-4412 providers) is in no rendering
# without nodeCredentialProviders.serviceAccountTokenAudiences, nor in the kustomize base; with
# it (1.30+ only, templates/validate.yaml), one ClusterRole grants exactly that to the webhook's
# ServiceAccount and the watch's (when it runs), and a ValidatingAdmissionPolicy with its
# binding names the audience and those users.
service_account_tokens() {
    local kube watch out kinds users
    for kube in 1.20.2 1.29.0 1.30.0 1.32.0; do
        out=$(helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$kube" --set watch.enabled=true) || return 1
        ! grep -q 'serviceaccounts/token' <<<"$out" || { echo "$kube: serviceaccounts/token without the value"; return 1; }
    done
    for kube in 1.30.0 1.32.0; do
        for watch in true false; do
            out=$(helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$kube" --set watch.enabled=$watch \
                --set nodeCredentialProviders.enabled=true \
                --set 'nodeCredentialProviders.serviceAccountTokenAudiences={sts.amazonaws.com}' -s templates/serviceaccount-tokens.yaml) || return 1
            kinds=$(grep -E '^kind: ' <<<"$out" | tr '\n' ' ')
            [[ $kinds == "kind: ClusterRole kind: ClusterRoleBinding kind: ValidatingAdmissionPolicy kind: ValidatingAdmissionPolicyBinding " ]] ||
                { echo "$kube: rendered $kinds"; return 1; }
            [[ $(grep -c 'resources: \["serviceaccounts/token"\]' <<<"$out") == 2 ]] || { echo "$kube: the rule or the policy's match"; return 1; }
            grep -q 'a in \[\\"sts.amazonaws.com\\"\]' <<<"$out" || { echo "$kube: the audience is not in the policy"; return 1; }
            users='\[\\"system:serviceaccount:'$NS:$RELEASE'\\"'
            [[ $watch == true ]] && users+=',\\"system:serviceaccount:'$NS:$RELEASE-watch'\\"'
            grep -q "username in $users\\]" <<<"$out" || { echo "$kube, watch $watch: the policy's users"; return 1; }
            [[ $(grep -c "name: $RELEASE-watch" <<<"$out") == $([[ $watch == true ]] && echo 1 || echo 0) ]] ||
                { echo "$kube, watch $watch: the watch's account in the binding"; return 1; }
        done
    done
    ! kubectl kustomize manifests/base | grep -q 'serviceaccounts/token' || { echo "in the base"; return 1; }
}
check "nodeCredentialProviders.serviceAccountTokenAudiences: serviceaccounts/token create only with it (ClusterRole, binding to the webhook's and, when it runs, the watch's accounts) and always with the audience policy" service_account_tokens
check "fail: serviceAccountTokenAudiences before 1.30 (no audience policy there)" \
    refuse "needs Kubernetes 1.30+" "$NS" --kube-version 1.29.0 \
    --set nodeCredentialProviders.enabled=true --set 'nodeCredentialProviders.serviceAccountTokenAudiences={sts.amazonaws.com}'
check "fail: serviceAccountTokenAudiences without nodeCredentialProviders.enabled" \
    refuse "set nodeCredentialProviders.enabled=true" "$NS" --kube-version 1.32.0 \
    --set 'nodeCredentialProviders.serviceAccountTokenAudiences={sts.amazonaws.com}'
# pods_get: pinhook may `get pods` only where it reads a stored Pod, before 1.22 (the
# pods/ephemeralcontainers object carries no imagePullSecrets there); `list pods` everywhere.
# The chart by --kube-version; the kustomize base (rendered for 1.22+) without get, and with
# components/kube-1.20-1.21 (which overlays/local-url, the 1.20 e2e tier's, includes) with it.
pods_get() {
    local kube verbs want
    pods_verbs() { "$PY" -c '
import sys, yaml
rules = [r for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == sys.argv[1]
         for r in d["rules"] if r.get("resources") == ["pods"] and r.get("apiGroups") == [""]]
print(",".join(sorted(v for r in rules for v in r["verbs"])))' "$1"; }
    for kube in 1.20.2 1.21.0 1.22.0 1.32.0 1.35.0; do
        verbs=$(helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$kube" | pods_verbs "$RELEASE") || return 1
        want=list; [[ $kube == 1.2[01].* ]] && want=get,list
        [[ $verbs == "$want" ]] || { echo "chart on $kube: pods verbs '$verbs', want '$want'"; return 1; }
    done
    verbs=$(kubectl kustomize manifests/base | pods_verbs pinhook) || return 1
    [[ $verbs == list ]] || { echo "manifests/base: pods verbs '$verbs', want 'list'"; return 1; }
    verbs=$(kubectl kustomize manifests/overlays/local-url | pods_verbs pinhook) || return 1
    [[ $verbs == get,list ]] || { echo "overlays/local-url: pods verbs '$verbs', want 'get,list'"; return 1; }
}
check "pods get only before 1.22 (chart by --kube-version; base without, components/kube-1.20-1.21 with)" pods_get
# match_conditions: pin.pinhook.dev and validate.pinhook.dev carry exactly the expression of
# cel/call-unless-pinned-pod.cel (tests/integration/admission/match_conditions.rs evaluates it
# against pinhook), from 1.28 on; never before, never in mirrors.pinhook.dev, never under
# policy.resolve Always or with policy.verify, nor with webhook.skipPinnedPods false, nor in
# manifests/base; never naming namespaceObject (null in webhook matchConditions).
match_conditions() {
    local kube want got
    want=$(tr -d '\n' <"$CHART/cel/call-unless-pinned-pod.cel")
    grep -q namespaceObject "$CHART/cel/call-unless-pinned-pod.cel" && { echo "the expression names namespaceObject"; return 1; }
    conditions() { "$PY" -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in d["webhooks"]:
            for c in w.get("matchConditions", []):
                print(w["name"], c["name"], c["expression"])'; }
    for kube in 1.20.2 1.27.0 1.28.0 1.32.0 1.35.0; do
        got=$(helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$kube" | conditions) || return 1
        case $kube in
            1.2[0-7].*) [[ -z $got ]] || { echo "$kube: matchConditions rendered: $got"; return 1; } ;;
            *) [[ $got == "pin.pinhook.dev not-a-pinned-pod $want"$'\n'"validate.pinhook.dev not-a-pinned-pod $want" ]] ||
                { echo "$kube: want the .cel file's expression on pin and validate only, got: $got"; return 1; } ;;
        esac
    done
    local args
    for args in "--set policy.resolve=Always" "--set policy.verify[0].images[0]=x" "--set webhook.skipPinnedPods=false"; do
        # shellcheck disable=SC2086 # (word splitting of the --set pair is wanted)
        got=$(helm3 template "$RELEASE" "$CHART" --namespace "$NS" --kube-version 1.32.0 $args | conditions) || return 1
        [[ -z $got ]] || { echo "1.32 $args: matchConditions rendered"; return 1; }
    done
    got=$(kubectl kustomize manifests/base | conditions) || return 1
    [[ -z $got ]] || { echo "manifests/base: matchConditions rendered"; return 1; }
}
check "matchConditions: the .cel file's expression on pin and validate from 1.28, not under resolve Always, verify, skipPinnedPods false or in the base" match_conditions
# report_api: watch.reportApi picks the API of the watch's reports. wgpolicyk8s (the default):
# the watch's ClusterRole may write policyreports / clusterpolicyreports and nothing of
# openreports.io, and the watch gets no PINHOOK_REPORT_API; openreports: the same rights on
# reports / clusterreports in their place, none on wgpolicyk8s.io, and
# PINHOOK_REPORT_API=openreports. The kustomize base with components/watch-openreports renders
# the same ClusterRole rules and watch env as the chart with openreports (and
# components/openreports the two CRDs).
report_api() {
    local dir
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" >"$tmp/ra-default.yaml" || return 1
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --set watch.reportApi=openreports \
        >"$tmp/ra-openreports.yaml" || return 1
    helm3 template "$RELEASE" "$CHART" --namespace "$NS" --skip-tests \
        --values scripts/render-base-values.yaml --set watch.reportApi=openreports \
        >"$tmp/ra-base-values.yaml" || return 1
    dir=$(mktemp -d)
    cp -r manifests "$dir/" && mkdir -p "$dir/manifests/overlays/report-api-check"
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/openreports, ../../components/watch-openreports]\n' \
        >"$dir/manifests/overlays/report-api-check/kustomization.yaml"
    kubectl kustomize "$dir/manifests/overlays/report-api-check" >"$tmp/ra-kustomize.yaml" || { rm -rf "$dir"; return 1; }
    rm -rf "$dir"
    "$PY" - "$tmp/ra-default.yaml" "$tmp/ra-openreports.yaml" "$tmp/ra-base-values.yaml" "$tmp/ra-kustomize.yaml" <<'PY'
import sys, yaml
def docs(f):
    return [d for d in yaml.safe_load_all(open(f)) if d]
def fail(msg):
    print(msg); sys.exit(1)
def watch(f, name="pinhook-watch"):
    got = docs(f)
    role = next(d for d in got if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name)
    dep = next(d for d in got if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    reports = [r for r in role["rules"] if set(r["apiGroups"]) & {"wgpolicyk8s.io", "openreports.io"}]
    return got, role["rules"], reports, env
def rule(group, resource, name, verbs):
    return {"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": verbs}
WG = [rule("wgpolicyk8s.io", "policyreports", "pinhook", ["get", "list", "create", "patch", "delete"]),
      rule("wgpolicyk8s.io", "clusterpolicyreports", "pinhook-mirrors", ["get", "create", "patch", "delete"])]
OR = [rule("openreports.io", "reports", "pinhook", ["get", "list", "create", "patch", "delete"]),
      rule("openreports.io", "clusterreports", "pinhook-mirrors", ["get", "create", "patch", "delete"])]
_, _, reports, env = watch(sys.argv[1])
if reports != WG:
    fail(f"default: report rules {reports}")
if "PINHOOK_REPORT_API" in env:
    fail(f"default: PINHOOK_REPORT_API={env['PINHOOK_REPORT_API']!r}")
_, _, reports, env = watch(sys.argv[2])
if reports != OR:
    fail(f"openreports: report rules {reports}")
if env.get("PINHOOK_REPORT_API") != "openreports":
    fail(f"openreports: PINHOOK_REPORT_API={env.get('PINHOOK_REPORT_API')!r}")
_, chart_rules, _, chart_env = watch(sys.argv[3])
got, kust_rules, _, kust_env = watch(sys.argv[4])
if kust_rules != chart_rules:
    fail(f"components/watch-openreports rules differ from the chart's:\n{kust_rules}\n{chart_rules}")
if kust_env != chart_env:
    fail(f"components/watch-openreports env differs from the chart's:\n{kust_env}\n{chart_env}")
crds = sorted(d["metadata"]["name"] for d in got if d["kind"] == "CustomResourceDefinition")
if crds != ["clusterreports.openreports.io", "reports.openreports.io"]:
    fail(f"components/openreports CRDs: {crds}")
PY
}
check "watch.reportApi: wgpolicyk8s or openreports rights and env only; components/watch-openreports = the chart's openreports" report_api
check "charts/pinhook/README.md values table is current (scripts/chart-values-table.py --check)" \
    python3 scripts/chart-values-table.py --check

echo "chart: $passed passed, $failed failed"
((failed == 0))
