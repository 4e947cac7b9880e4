#!/usr/bin/env python3
"""The client side of benches/watch-scale.sh (stdlib only).

  watch-scale.py create --server URL --ca CA --token-file F --registry HOST --digests ENV
                        --pods N --namespaces M --images K [--workers W]
      Creates M namespaces (e2e-z-0000...), each with its `default` ServiceAccount
      (automountServiceAccountToken: false: no serviceaccount controller runs), then N bare Pods
      (N / M per namespace, named p00000...; with --from J, Pods J.. of each namespace only,
      for a run that grows in steps), Pod j of namespace n running
      HOST/team/scale:K'@DIGEST_scale_K' with K' = (a * n + b * j) % K + 1, a and b primes
      that do not divide K (37 and 41 for K = 2000): a namespace's Pods run distinct images
      (up to K of them), and every step of a stepped run uses nearly every image (the
      distinct keys the watch logs are what counts). W (16) threads, each on its own keep-alive HTTPS connection, POST
      straight to the apiserver (no kubectl, no scheduler: the Pods stay Pending). An existing
      object (409) counts as created; 429/5xx and connection errors are retried (at most 8
      times, backing off). Prints one JSON line: created, seconds, per second.

  watch-scale.py apiserver-metrics --server URL --ca CA --token-file F
      The apiserver's /metrics reduced to what a recheck costs, as one JSON line:
      apiserver_request_total by "VERB resource" and apiserver_response_sizes_sum (bytes of GET
      and LIST responses) by "VERB resource". Non-resource requests (/metrics itself) left out.

  watch-scale.py delete-reports --server URL --ca CA --token-file F --namespaces M
      Deletes pinhook's PolicyReport of each namespace and its ClusterPolicyReport, W threads
      (kubectl deletes one at a time at 5 requests/s: 200 s for 1,000).

  watch-scale.py diff BEFORE.json AFTER.json
      AFTER - BEFORE of two apiserver-metrics lines: requests and response bytes, per
      "VERB resource" (nonzero only) and in total, as one JSON line.
"""

import argparse
import http.client
import json
import queue
import ssl
import sys
import threading
import time
import urllib.parse


# Resources the watch never reads or writes: the apiserver's own loops (the Service IP and port
# repair, the `kubernetes` Service, API priority and fairness) touch them every few seconds.
NOT_THE_WATCHS = {
    "services",
    "endpoints",
    "endpointslices",
    "apiservices",
    "flowschemas",
    "prioritylevelconfigurations",
}


def connect(server, ca):
    url = urllib.parse.urlparse(server)
    context = ssl.create_default_context(cafile=ca)
    return http.client.HTTPSConnection(url.hostname, url.port or 443, context=context, timeout=60)


class Client:
    """One keep-alive connection, reopened after an error."""

    def __init__(self, server, ca, token):
        self.server, self.ca, self.token = server, ca, token
        self.conn = None

    def request(self, method, path, body=None):
        if self.conn is None:
            self.conn = connect(self.server, self.ca)
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            payload = response.read()
            return response.status, payload
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


def create(client, path, body, attempts=8):
    """POSTs body; True when created or already there."""
    delay = 0.1
    last = None
    for _ in range(attempts):
        try:
            status, payload = client.request("POST", path, body)
        except (OSError, http.client.HTTPException) as error:
            last = repr(error)
        else:
            if status in (200, 201, 202, 409):
                return True
            last = f"HTTP {status}: {payload[:300]!r}"
            if status != 429 and status < 500:
                break
        time.sleep(delay)
        delay = min(delay * 2, 5)
    print(f"watch-scale.py: POST {path} failed: {last}", file=sys.stderr)
    return False


def coprime_prime(n, at_least):
    """The smallest prime >= at_least that does not divide n."""
    p = at_least
    while any(p % d == 0 for d in range(2, int(p**0.5) + 1)) or n % p == 0:
        p += 1
    return p


def read_digests(path):
    digests = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key.startswith("DIGEST_scale_"):
                digests[int(key[len("DIGEST_scale_"):])] = value
    return digests


def run_parallel(jobs, workers, make_client, work):
    """Runs work(client, job) for every job on `workers` threads; returns the failures."""
    todo = queue.Queue()
    for job in jobs:
        todo.put(job)
    failures = [0]
    lock = threading.Lock()

    def worker():
        client = make_client()
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            if not work(client, job):
                with lock:
                    failures[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures[0]


def cmd_create(args):
    with open(args.token_file, encoding="utf-8") as f:
        token = f.read().strip()
    digests = read_digests(args.digests)
    missing = [k for k in range(1, args.images + 1) if k not in digests]
    if missing:
        sys.exit(f"watch-scale.py: no digest for team/scale:{missing[0]} in {args.digests}")
    per = args.pods // args.namespaces
    a = coprime_prime(args.images, 37)
    b = coprime_prime(args.images, a + 1)
    names = [f"e2e-z-{n:04d}" for n in range(args.namespaces)]

    def make_client():
        return Client(args.server, args.ca, token)

    started = time.monotonic()

    def namespace(client, ns):
        return create(
            client,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        ) and create(
            client,
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": ns},
                "automountServiceAccountToken": False,
            },
        )

    failed = 0 if args.start else run_parallel(names, args.workers, make_client, namespace)
    if failed:
        sys.exit(f"watch-scale.py: {failed} namespaces not created")
    namespaces_done = time.monotonic()

    def pods():
        for n, ns in enumerate(names):
            for j in range(args.start, per):
                k = (a * n + b * j) % args.images + 1
                yield ns, f"p{j:05d}", f"{args.registry}/team/scale:{k}@{digests[k]}"

    def pod(client, job):
        ns, name, image = job
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "app", "image": image}]},
        }
        return create(client, f"/api/v1/namespaces/{ns}/pods", body)

    failed = run_parallel(pods(), args.workers, make_client, pod)
    done = time.monotonic()
    created = max(per - args.start, 0) * args.namespaces - failed
    print(
        json.dumps(
            {
                "namespaces": args.namespaces,
                "pods": created,
                "failed": failed,
                "namespaces_seconds": round(namespaces_done - started, 1),
                "pods_seconds": round(done - namespaces_done, 1),
                "pods_per_second": round(created / max(done - namespaces_done, 1e-9)),
            }
        )
    )
    if failed:
        sys.exit(1)


def cmd_delete_reports(args):
    """Deletes pinhook's PolicyReport in each namespace, and the mirror ClusterPolicyReport."""
    with open(args.token_file, encoding="utf-8") as f:
        token = f.read().strip()
    base = "/apis/wgpolicyk8s.io/v1alpha2"
    paths = [f"{base}/namespaces/e2e-z-{n:04d}/policyreports/pinhook" for n in range(args.namespaces)]
    paths.append(f"{base}/clusterpolicyreports/pinhook-mirrors")

    def delete(client, path):
        for _ in range(8):
            try:
                status, _ = client.request("DELETE", path)
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)
                continue
            if status in (200, 202, 404):
                return True
            time.sleep(0.2)
        return False

    failed = run_parallel(paths, args.workers, lambda: Client(args.server, args.ca, token), delete)
    if failed:
        sys.exit(f"watch-scale.py: {failed} reports not deleted")


def labels_of(text):
    """`{a="b",c="d"}` -> dict (label values here hold no escaped quotes that matter)."""
    labels = {}
    for part in text.strip("{}").split('",'):
        key, _, value = part.partition("=")
        if key:
            labels[key.strip()] = value.strip('"')
    return labels


def cmd_apiserver_metrics(args):
    with open(args.token_file, encoding="utf-8") as f:
        token = f.read().strip()
    status, payload = Client(args.server, args.ca, token).request("GET", "/metrics")
    if status != 200:
        sys.exit(f"watch-scale.py: GET /metrics: HTTP {status}")
    requests, sizes = {}, {}
    for line in payload.decode().splitlines():
        for name, into in (
            ("apiserver_request_total{", requests),
            ("apiserver_response_sizes_sum{", sizes),
        ):
            if line.startswith(name):
                labels_text, _, value = line[len(name) - 1 :].rpartition("} ")
                labels = labels_of(labels_text + "}")
                resource = labels.get("resource", "")
                if not resource:
                    continue
                key = f"{labels.get('verb', '?')} {resource}"
                if labels.get("subresource"):
                    key += "/" + labels["subresource"]
                into[key] = into.get(key, 0) + float(value)
    print(json.dumps({"requests": requests, "bytes": sizes}))


def cmd_diff(args):
    with open(args.before, encoding="utf-8") as f:
        before = json.load(f)
    with open(args.after, encoding="utf-8") as f:
        after = json.load(f)
    out = {"other": {}}
    for part in ("requests", "bytes"):
        delta = {
            k: int(v - before[part].get(k, 0))
            for k, v in after[part].items()
            if int(v - before[part].get(k, 0))
        }
        for k in [k for k in delta if k.split(" ")[1].split("/")[0] in NOT_THE_WATCHS]:
            out["other"][f"{part} {k}"] = delta.pop(k)
        out[part] = dict(sorted(delta.items()))
        out[part + "_total"] = sum(delta.values())
    out["report_and_event_writes"] = sum(
        v
        for k, v in out["requests"].items()
        if k.split(" ")[0] in ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE")
        and k.split(" ")[1].split("/")[0] in ("policyreports", "clusterpolicyreports", "events")
    )
    print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    for flag in ("--server", "--ca", "--token-file", "--registry", "--digests"):
        c.add_argument(flag, required=True)
    c.add_argument("--pods", type=int, default=50000)
    c.add_argument("--namespaces", type=int, default=1000)
    c.add_argument("--images", type=int, default=2000)
    c.add_argument("--workers", type=int, default=16)
    c.add_argument("--from", dest="start", type=int, default=0, help="first Pod index per namespace (namespaces exist)")
    r = sub.add_parser("delete-reports")
    for flag in ("--server", "--ca", "--token-file"):
        r.add_argument(flag, required=True)
    r.add_argument("--namespaces", type=int, default=1000)
    r.add_argument("--workers", type=int, default=16)
    m = sub.add_parser("apiserver-metrics")
    for flag in ("--server", "--ca", "--token-file"):
        m.add_argument(flag, required=True)
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    args = parser.parse_args()
    {
        "create": cmd_create,
        "delete-reports": cmd_delete_reports,
        "apiserver-metrics": cmd_apiserver_metrics,
        "diff": cmd_diff,
    }[args.command](args)


if __name__ == "__main__":
    main()
