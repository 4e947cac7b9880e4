#!/usr/bin/env python3
"""Regenerates fuzz/seeds/<target>/ from the project's own fixtures and tests plus the small
hand-written inputs below. Run from anywhere: `python3 fuzz/tools/make_seeds.py`.

Sources:
- tests/fixtures/admissionreview/**.json (real AdmissionReviews, compacted): admission_review;
  their `request.object`s: mirror_objects and check_manifests;
- tests/fixtures/crds/*.yaml and manifests/**/*.yaml: check_manifests;
- string literals of the mirror guard's and the keyring's unit tests that look like the file
  each target reads (registries.conf, hosts.toml, docker config JSON, references);
- hand-written inputs: case-folded registries.conf keys, prefix rewrites, drop-ins, v1/v2
  mixtures, hosts.toml shapes, policies, pull secrets, timeouts.

Seeds are named by content hash, so running it twice changes nothing.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SEEDS = os.path.join(ROOT, "fuzz", "seeds")
MAX_SEED = 16 * 1024

seeds = {}


def add(target, text):
    data = text.encode() if isinstance(text, str) else text
    if not data or len(data) > MAX_SEED:
        return
    seeds.setdefault(target, {})[hashlib.sha1(data).hexdigest()[:16]] = data


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


# --- Rust string literals of the unit tests ---------------------------------------------------

LITERAL = re.compile(r'r(#*)"(.*?)"\1|"((?:[^"\\]|\\.)*)"', re.S)


def unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        if n == "\n":  # line continuation: skip the newline and leading whitespace
            i += 2
            while i < len(body) and body[i] in " \t\n":
                i += 1
            continue
        if n == "u":
            end = body.index("}", i)
            out.append(chr(int(body[i + 3:end], 16)))
            i = end + 1
            continue
        if n == "x":
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
            continue
        out.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(n, n))
        i += 2
    return "".join(out)


def literals(path):
    text = read(path)
    for m in LITERAL.finditer(text):
        if m.group(2) is not None:
            yield m.group(2)
        else:
            yield unescape(m.group(3))


def rust_files(*patterns):
    for pattern in patterns:
        yield from sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))


def rel(path):
    return os.path.relpath(path, ROOT)


for path in rust_files("src/mirror_guard/**/*.rs", "tests/integration/admission/mirrors_https.rs"):
    for lit in literals(rel(path)):
        shaped = "=" in lit and ("\n" in lit or lit.startswith("["))
        if not shaped or "serve tag pulls" in lit or "CANNOT_LOAD" in lit:
            continue
        if re.search(r"\bserver\b|\[host", lit):
            add("hosts_toml", lit)
        if re.search(r"(?i)regi|location|prefix|mirror|unqualified|short-name|aliases", lit):
            add("registries_conf", lit)

for path in rust_files("src/registry/keyring/**/*.rs", "src/registry/docker_helpers.rs",
                       "tests/integration/registry/credentials.rs",
                       "tests/integration/registry/credential_helpers.rs"):
    for lit in literals(rel(path)):
        if lit.lstrip().startswith("{") and ('"auths"' in lit or '"auth"' in lit
                                             or "credHelpers" in lit or "credsStore" in lit):
            add("docker_config", lit.replace("{{", "{").replace("}}", "}"))

for lit in literals("src/reference.rs"):
    if 0 < len(lit) < 400 and "\n" not in lit and " " not in lit:
        add("image_reference", lit)

for lit in literals("src/policy/tests.rs"):
    if ":" in lit and ("\n" in lit or lit.split(":")[0].isidentifier()):
        add("policy_yaml", lit)

# --- AdmissionReview fixtures ------------------------------------------------------------------

for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/admissionreview/v1.*/*.json"))):
    with open(path, encoding="utf-8") as f:
        review = json.load(f)
    add("admission_review", json.dumps(review, separators=(",", ":")))
    request = review.get("request", {})
    for field in ("object", "oldObject"):
        obj = request.get(field)
        if not isinstance(obj, dict):
            continue
        compact = json.dumps(obj, separators=(",", ":"))
        kind = obj.get("kind", "")
        if kind in ("ImageTagMirrorSet", "ImageDigestMirrorSet", "ImageContentSourcePolicy",
                    "ImageContentPolicy", "ConfigMap"):
            add("mirror_objects", compact)
        if field == "object":
            add("check_manifests", compact)
        if kind == "ConfigMap":
            for key, value in obj.get("data", {}).items():
                if "registries" in key or "hosts" in key:
                    add("registries_conf", value)
        for container in (obj.get("spec", {}) or {}).get("containers", []) or []:
            if isinstance(container, dict) and isinstance(container.get("image"), str):
                add("image_reference", container["image"])

for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/crds/*.yaml"))):
    add("check_manifests", read(rel(path)))
for path in sorted(glob.glob(os.path.join(ROOT, "manifests/**/*.yaml"), recursive=True)):
    add("check_manifests", read(rel(path)))

# --- hand-written --------------------------------------------------------------------------

# registries.conf: `#=== <key>` starts another ConfigMap key (a drop-in, or binaryData when it
# ends in .b64); see fuzz/src/lib.rs `split_files`.
REGISTRIES_CONF = [
    # the plain shapes
    'unqualified-search-registries = ["registry.example", "docker.io"]\n'
    'short-name-mode = "enforcing"\n\n'
    '[[registry]]\nprefix = "registry.example/team"\nlocation = "registry.example/team"\n\n'
    '[[registry.mirror]]\nlocation = "mirror.example/team"\npull-from-mirror = "digest-only"\n\n'
    '[[registry.mirror]]\nlocation = "tags.example/team"\n',
    '[[registry]]\nlocation = "registry.example"\nmirror-by-digest-only = true\n'
    '[[registry.mirror]]\nlocation = "mirror.example"\ninsecure = true\n',
    # key case: BurntSushi/toml's EqualFold matching
    '[[Registry]]\nLocation = "registry.example/team"\n[[Registry.Mirror]]\nLocation = "mirror.example/team"\n',
    '[[registry]]\nPrefix = "docker.io/library"\nlocation = "docker.io/library"\n'
    '[[registry.MIRROR]]\nLOCATION = "mirror.example/library"\nPull-From-Mirror = "DIGEST-ONLY"\n',
    '[["regi\u017ftry"]]\nlocation = "registry.example"\n[["regi\u017ftry".mirror]]\n'
    'location = "mirror.example"\n',
    '[[registry]]\nlocation = "registry.example"\nbloc\u212aed = true\n'
    '[[registry.mirror]]\nlocation = "mirror.example"\nmirror-by-digeſt-only = true\n',
    '[[registry]]\nlocation = "registry.example"\n[[registry]]\nLocation = "other.example"\n'
    '[[Registry]]\nlocation = "evil.example"\n',
    'Unqualified-Search-Registries = ["registry.example"]\n[Aliases]\n"app" = "registry.example/app"\n',
    # prefix -> location rewrites
    '[[registry]]\nprefix = "docker.io/library"\nlocation = "evil.example/x"\n',
    '[[registry]]\nprefix = "*.example.com"\nlocation = "mirror.example"\n',
    '[[registry]]\nprefix = "*.example.com/team"\nlocation = "mirror.example"\n',
    '[[registry]]\nprefix = "registry.example/a"\nlocation = "registry.example/b"\n'
    '[[registry]]\nprefix = "registry.example/a"\nlocation = "registry.example/a"\n',
    '[[registry]]\nprefix = "https://registry.example"\nlocation = "registry.example"\n',
    '[[registry]]\nprefix = "registry.example:5000/x"\nlocation = "[::1]:5000/x"\n',
    # drop-ins (CRI-O's registries.conf.d), in key order, replacing by prefix
    '[[registry]]\nlocation = "registry.example"\n'
    '#=== 10-mirror.conf\n[[registry]]\nlocation = "registry.example"\n'
    '[[registry.mirror]]\nlocation = "mirror.example"\n'
    '#=== 20-digest.conf\n[[registry]]\nlocation = "registry.example"\n'
    '[[registry.mirror]]\nlocation = "mirror.example"\npull-from-mirror = "digest-only"\n',
    '#=== 01-prefix.conf\n[[Registry]]\nprefix = "docker.io"\nlocation = "evil.example"\n',
    'unqualified-search-registries = []\n'
    '#=== crio.conf.b64\n[[registry]]\nlocation = "registry.example"\n[[registry.mirror]]\n'
    'location = "mirror.example"\n',
    '#=== registries.conf.b64\n[[registry]]\nlocation = "registry.example"\n'
    '#=== other.conf\n[registries.search]\nregistries = ["docker.io"]\n',
    '[[registry]]\nlocation = "a.example"\n#=== Cargo.toml\n[registry]\ndefault = "x"\n'
    '#=== nginx.conf\nserver { listen 80; }\n#=== hosts.toml\nserver = "https://mirror.example"\n',
    # v1 and v1/v2 mixtures
    '[registries.search]\nregistries = ["docker.io", "quay.io"]\n[registries.insecure]\n'
    'registries = ["plain.example"]\n[registries.block]\nregistries = ["evil.example"]\n',
    '[[registry]]\nlocation = "registry.example"\n\n[registries.insecure]\nregistries = ["registry.example"]\n',
    'unqualified-search-registries = []\n[Registries.Search]\nregistries = []\n',
    '#=== 99-v1.conf\n[registries.search]\nregistries = ["docker.io"]\n',
    # syntax and type errors
    '[[registry]\nlocation = "x"\n',
    '[[registry]]\nlocation = 5\n[[registry.mirror]]\nlocation = ["a"]\n',
    'registry = "not an array"\n',
    '[[registry]]\nlocation = "registry.example"\nblocked = "yes"\n',
    'credential-helpers = ["secretservice"]\nadditional-layer-store-auth-helper = "x"\n',
]
for text in REGISTRIES_CONF:
    add("registries_conf", text)

HOSTS_TOML = [
    'server = "https://registry.example"\n\n[host."https://mirror.example"]\n'
    '  capabilities = ["pull", "resolve"]\n',
    'server = "https://mirror.example"\n',
    '[host."https://mirror.example"]\n  capabilities = ["pull"]\n'
    '[host."https://tags.example"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n',
    '[host."mirror.example:5000"]\n[host."mirror.example:5000".header]\n  x-custom = ["a"]\n',
    'server = 5\n',
    '[host]\n"https://mirror.example" = { capabilities = "resolve" }\n',
    'Server = "https://MIRROR.example:443"\n[Host."http://plain.example"]\nCapabilities = ["RESOLVE"]\n',
    '#=== docker.io_hosts.toml\nserver = "https://registry-1.docker.io"\n'
    '[host."https://mirror.example/v2/library"]\n  capabilities = ["pull", "resolve"]\n  override_path = true\n'
    '#=== quay.io_hosts.toml.b64\n[host."https://mirror.example"]\n',
]
for text in HOSTS_TOML:
    add("hosts_toml", text)

MIRROR_OBJECTS = [
    {"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
     "metadata": {"name": "t"},
     "spec": {"imageTagMirrors": [
         {"source": "registry.example/team", "mirrors": ["mirror.example/team", "registry.example/team"],
          "mirrorSourcePolicy": "NeverContactSource"}]}},
    {"apiVersion": "config.openshift.io/v1", "kind": "ImageDigestMirrorSet",
     "metadata": {"name": "d"},
     "spec": {"imageDigestMirrors": [
         {"source": "registry.example/team/app", "mirrors": ["mirror.example/app"],
          "mirrorSourcePolicy": "NeverContactSource"},
         {"source": "*.example.com", "mirrors": ["mirror.example"]}]}},
    {"apiVersion": "config.openshift.io/v1", "kind": "ImageContentPolicy",
     "metadata": {"name": "c"},
     "spec": {"repositoryDigestMirrors": [
         {"source": "registry.example", "mirrors": ["mirror.example"], "allowMirrorByTags": True}]}},
    {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "ImageContentSourcePolicy",
     "metadata": {"name": "s"},
     "spec": {"repositoryDigestMirrors": [{"source": "registry.example", "mirrors": ["mirror.example"]}]}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registries", "namespace": "ns"},
     "data": {"registries.conf": REGISTRIES_CONF[2], "10-x.conf": REGISTRIES_CONF[8]},
     "binaryData": {"hosts.toml": "c2VydmVyID0gImh0dHBzOi8vbWlycm9yLmV4YW1wbGUiCg=="}},
]
for obj in MIRROR_OBJECTS:
    add("mirror_objects", json.dumps(obj, indent=1))

POLICIES = [
    "",
    "mode: audit\n",
    "mode: enforce\nresolve: Never\n",
    "registries:\n  deny: [\"bad.corp.example\", \"*.evil.example:5000\"]\n  allow: [\"*\"]\n",
    "mirrors:\n  windowsNodes: true\n  configMaps: [\"*/registries\"]\n  configMapKeys: [\"*.conf\"]\n"
    "  allow:\n    - {source: a.example/x, mirror: m.example/x}\n",
    "kinds:\n  - group: argoproj.io\n    kind: Rollout\n    podSpec: /spec/template/spec\n"
    "    resource: rollouts\n  - kind: Odd\n    podSpec: /spec/a~1b/~0c\n",
    "kinds:\n  - kind: Rollout\n    podSpec: spec.template\n",
    "mode: [\n",
    "exempt:\n  images: &i [\"*\"]\n  namespaces: *i\n",
    "form: digest\ntarget: pods\nonResolutionFailure: allow\n",
    # registries.resolveThrough (issue 28): a full entry, Docker Hub, and hostile values.
    "registries:\n  allowPrivate: [\"127.0.0.1:5001\"]\n  resolveThrough:\n"
    "    - source: registry.corp.example/team\n      verifySource: true\n      mirrors:\n"
    "        - location: mirror.corp.example:5000/copy/team\n          ca: /etc/pinhook/ca.pem\n"
    "          credentials: /etc/pinhook/mirror/config.json\n        - location: 127.0.0.1:5001\n"
    "          insecure: true\n    - source: docker.io/library\n"
    "      mirrors: [{location: hub-cache.corp.example/library}]\n",
    "registries:\n  resolveThrough:\n    - {source: \"*.example\", mirrors: [{location: m.example}]}\n"
    "    - {source: a.example/../b, mirrors: [{location: \"https://m.example\"}]}\n"
    "    - {source: \"\", mirrors: []}\n",
    "registries:\n  deny: [\"*.evil.example\"]\n  resolveThrough:\n"
    "    - {source: a.example, mirrors: [{location: m.evil.example}, {location: m.evil.example}]}\n"
    "    - {source: A.EXAMPLE, mirrors: [{location: localhost:5000, credentials: rel/path}]}\n",
]
for text in POLICIES:
    add("policy_yaml", text)

DOCKER_CONFIGS = [
    {"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"}}},
    {"auths": {"quay.io/org": {"username": "u", "password": "p"},
               "*.example.com:5000": {"auth": "dTpw"},
               "registry.example": {"identitytoken": "tok"}}},
    {"auths": {"registry.example": {}}, "credsStore": "desktop",
     "credHelpers": {"gcr.io": "gcloud", "*.ecr.example": "ecr-login"}},
    {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz", "email": "a@b"}},
    {"auths": {"registry.example": {"auth": "not base64!"}}},
    {"auths": {"registry.example": {"auth": "bm9jb2xvbg=="}}},
    {"auths": {"http://[::1]:5000/v2/": {"auth": "dTpw"}, "%zz": {"auth": "dTpw"}}},
    {"auths": []},
]
for cfg in DOCKER_CONFIGS:
    add("docker_config", json.dumps(cfg))

KEYRING = [
    "quay.io/org\nquay.io/org/app:1\nquay.io/other/app",
    "*.example.com:5000/team\nregistry.example.com:5000/team/app\nexample.com:5000/team/app",
    "https://index.docker.io/v1/\nnginx\ndocker.io/library/nginx:1",
    "http://registry.example/v2/\nregistry.example/x",
    "[::1]:5000\n[::1]:5000/app",
    "*.*.example\na.b.example/x\na.example/x",
    "reg[a-c].example\nregb.example/x",
    "registry.example/a\\\nregistry.example/a",
]
for text in KEYRING:
    add("keyring_match", text)

REFERENCES = [
    "nginx", "nginx:1.27", "docker.io/library/nginx:latest", "index.docker.io/nginx",
    "localhost:5000/app:v1", "[::1]:5000/app@sha256:" + "a" * 64,
    "registry.example/team/app:1@sha512:" + "b" * 128,
    "quay.io/org/app@sha384:" + "c" * 96, "Upper/case", "a" * 64, "a/b:" + "t" * 129,
    "registry.example:443/x", "BAD.corp.example/x:1", "metadata.google.internal/x",
]
for text in REFERENCES:
    add("image_reference", text)

for text in ["10s", "1m0s", "500ms", "1h2m3.5s", "1.5µs", "30s", "999999999h", "", "-1s",
             "1e3s", "0.0000000001ns", ".5s", "10", "1s1"]:
    add("apiserver_timeout", text or " ")

add("check_manifests",
    "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n"
    "  spec:\n    containers: [{name: c, image: nginx}]\n---\n---\n"
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: x}\nspec:\n  template:\n"
    "    spec:\n      initContainers: [{name: i, image: 'busybox:1'}]\n"
    "      containers: [{name: c, image: 'quay.io/a/b:1'}]\n"
    "      volumes: [{name: v, image: {reference: 'quay.io/a/data:1'}}]\n")
add("check_manifests",
    '[{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"c"},"spec":{"jobTemplate":'
    '{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:1"}]}}}}}}, 3, "x"]')
add("check_manifests", "\ufeffkind: Pod\napiVersion: v1\nmetadata:\n  name: &n x\n  generateName: *n\n")

# registry_answers: raw HTTP/1.1 answers, in the order pinhook's requests get them, separated
# by `\n=====\n`; `@HOST@` is the fake registry's own host:port (fuzz_targets/registry_answers.rs).
DIGEST = "sha256:" + hashlib.sha256(b"{}").hexdigest()
SEP = "\n=====\n"


def answer(status, headers=(), body=""):
    head = [f"HTTP/1.1 {status}"] + list(headers)
    if body is not None:
        head.append(f"content-length: {len(body.encode())}")
    return "\r\n".join(head) + "\r\n\r\n" + (body or "")


CHALLENGE = 'www-authenticate: Bearer realm="http://@HOST@/token",service="@HOST@",scope="repository:team/app:pull"'
REGISTRY_ANSWERS = [
    [answer("200 OK", [f"docker-content-digest: {DIGEST}", "content-type: application/vnd.oci.image.index.v1+json"], None).replace("\r\n\r\n", "\r\ncontent-length: 2\r\n\r\n")],
    [answer("401 Unauthorized", [CHALLENGE]), answer("200 OK", [], '{"token":"t0k"}'),
     answer("200 OK", [f"docker-content-digest: {DIGEST}", "content-length: 2"], None)],
    [answer("401 Unauthorized", [CHALLENGE]), answer("200 OK", [], '{"access_token":"t0k","expires_in":60}'),
     answer("405 Method Not Allowed"), answer("200 OK", [f"docker-content-digest: {DIGEST}"], "{}")],
    [answer("200 OK", ["content-type: application/json"]), answer("200 OK", [f"docker-content-digest: sha256:{'0' * 64}"], "{}")],
    [answer("405 Method Not Allowed"), answer("404 Not Found", [], '{"errors":[{"code":"MANIFEST_UNKNOWN","message":"no such tag"}]}')],
    [answer("405 Method Not Allowed"), answer("500 Internal Server Error", [], "oops\n\tmultiline\r\nbody " * 20)],
    [answer("405 Method Not Allowed"), answer("403 Forbidden", [], '{"errors":[{"code":"DENIED"},{"code":"X","message":"y"}]}')],
    [answer("429 Too Many Requests", ["retry-after: 1"])],
    [answer("401 Unauthorized", ['www-authenticate: Basic realm="registry"'])],
    [answer("401 Unauthorized", ['WWW-Authenticate: bearer  realm = "http://@HOST@/t?a=\\"b\\"" , service=reg']),
     answer("200 OK", [], "not json"), answer("401 Unauthorized", [CHALLENGE])],
    [answer("401 Unauthorized", ['www-authenticate: Bearer realm="https://@HOST@/token"'])],
    [answer("401 Unauthorized", ['www-authenticate: Bearer realm="file:///etc/passwd"'])],
    [answer("307 Temporary Redirect", ["location: http://@HOST@/elsewhere"]), answer("302 Found", ["location: http://127.0.0.1:1/x"])],
    [answer("200 OK", [f"docker-content-digest: {DIGEST}", "content-length: 99999999"], None)],
    [answer("405 Method Not Allowed"), answer("200 OK", ["content-length: 99999999"], None)],
    [answer("405 Method Not Allowed"), answer("200 OK", [f"docker-content-digest: sha512:{'a' * 128}"], "{}")],
    [answer("405 Method Not Allowed"), "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
    ["HTTP/1.1 200 OK\n\n", "garbage", ""],
]
for answers in REGISTRY_ANSWERS:
    add("registry_answers", SEP.join(answers))

# --- www_authenticate: challenges as registries write them --------------------------------------

for challenge in [
    'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"',
    "bearer realm=https://r.example/token",
    'Bearer service="x", realm="https://a.example/t", scope="repository:a/b:pull,push"',
    'Basic realm="Registry Realm"',
    'Bearer realm=""',
    'Bearer realm="http://127.0.0.1:1/token",error="invalid_token"',
    'BEARER   realm = "https://a.example/t" , service = "s"',
    'Bearer realm="a\\"b",service="c"',
]:
    add("www_authenticate", challenge)

# --- provider_response: what credential provider plugins print ----------------------------------

V1 = "credentialprovider.kubelet.k8s.io/v1"
for answer_text in [
    '{"apiVersion":"%s","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"5m","auth":{"registry.example":{"username":"u","password":"AbCdEfGhIjKlMnOp"}}}' % V1,
    '{"apiVersion":"%s","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"*.dkr.ecr.*.amazonaws.com":{"username":"AWS","password":"x"}}}' % V1,
    '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Global","cacheDuration":"0s","auth":{}}',
    '{"apiVersion":"%s","kind":"CredentialProviderResponse","cacheKeyType":"Nope","auth":null}' % V1,
    '{"apiVersion":"v1","kind":"Pod"}',
    '{"apiVersion":"%s","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"-1h","auth":{}}' % V1,
    "not json at all SECRETSECRETSECRET",
]:
    add("provider_response", answer_text)

# --- write ---------------------------------------------------------------------------------

if __name__ == "__main__":
    shutil.rmtree(SEEDS, ignore_errors=True)
    total = 0
    for target, files in sorted(seeds.items()):
        directory = os.path.join(SEEDS, target)
        os.makedirs(directory)
        for name, data in sorted(files.items()):
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
            total += len(data)
        print(f"{target}: {len(files)} seeds, {sum(map(len, files.values()))} bytes")
    print(f"total: {total} bytes")
    sys.exit(0)
