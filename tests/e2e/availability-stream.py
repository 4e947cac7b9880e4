#!/usr/bin/env python3
"""A steady stream of admissions through the apiserver, for the node-availability-* scenarios.

Creates Pods and Deployments (one Deployment every --deployment-every attempts, replicas 0, so
that no Pod comes of it) in one namespace at a fixed rate, for at most --count attempts and
--duration seconds, with the admin token over HTTPS (python3's standard library only: a kubectl
per request would cost more CPU than the apiserver and pinhook together on a 2-core machine).
The Pods name a scheduler that does not exist, so they stay Pending, are never bound, and go at
once when their namespace is deleted.

Every attempt is sent on time, whatever the earlier ones are doing (a pool of workers, each with
its own kept-alive connection), and never retried: each line of --out is one attempt, as the
apiserver answered it:

    SEQ<TAB>START (unix s)<TAB>LATENCY_MS<TAB>KIND<TAB>HTTP CODE (0: no answer)<TAB>OUTCOME<TAB>ERROR

OUTCOME: ok (created, every image has a digest), unpinned (created without a digest: a webhook
that did not run), refused (with --refusal TEXT: an attempt with --uncached-image refused with a
message containing TEXT, the documented answer when pinhook cannot resolve an image), failed
(any other answer: the apiserver's message), unanswered (no HTTP answer at all: the client's
error; the apiserver was not there to admit anything).

The last line of stdout is a JSON summary: attempted, answered, unanswered (with the attempts
still running at the end), ok, unpinned, refused, failed, p50_ms, p99_ms, max_ms (over the
answered attempts), started, ended.
"""

import argparse
import http.client
import json
import os
import queue
import ssl
import sys
import threading
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="https://127.0.0.1:PORT")
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca", required=True, help="the apiserver's CA certificate (PEM)")
    p.add_argument("--namespace", required=True)
    p.add_argument("--image", required=True, help="a tag-only image pinhook can resolve")
    p.add_argument("--rate", type=float, default=5.0, help="attempts per second")
    p.add_argument("--count", type=int, default=300, help="at most this many attempts")
    p.add_argument("--duration", type=float, default=60.0, help="at most this many seconds")
    p.add_argument("--deployment-every", type=int, default=5)
    p.add_argument("--uncached-image", default="", help="an image pinhook has never resolved")
    p.add_argument("--uncached-every", type=int, default=0, help="every Nth Pod uses it (0: never)")
    p.add_argument("--refusal", default="", help="text of the expected refusal of the uncached image")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--timeout", type=float, default=35.0, help="client timeout of one attempt")
    p.add_argument("--out", required=True, help="one line per attempt")
    p.add_argument("--stop-file", default="", help="stop early once this file exists")
    return p.parse_args()


def pod_spec(image):
    return {
        # no such scheduler: the Pod stays Pending and unbound
        "schedulerName": "e2e-availability-none",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "web", "image": image}],
    }


def body_for(seq, args):
    """(kind, path, body, uncached) of attempt SEQ."""
    ns = args.namespace
    if args.deployment_every > 0 and seq % args.deployment_every == args.deployment_every - 1:
        name = "avail-d-%d" % seq
        return "Deployment", "/apis/apps/v1/namespaces/%s/deployments" % ns, {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(args.image)},
            },
        }, False
    uncached = bool(args.uncached_image) and args.uncached_every > 0 and seq % args.uncached_every == 0
    image = args.uncached_image if uncached else args.image
    return "Pod", "/api/v1/namespaces/%s/pods" % ns, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "avail-p-%d" % seq, "labels": {"app": "avail"}},
        "spec": pod_spec(image),
    }, uncached


def one_line(text):
    return " ".join(str(text).split())[:400]


class Client:
    """One kept-alive HTTPS connection per worker thread."""

    def __init__(self, args):
        u = args.server
        if not u.startswith("https://"):
            raise SystemExit("--server must be https://HOST:PORT")
        host, _, port = u[len("https://"):].rstrip("/").rpartition(":")
        self.host, self.port = host, int(port)
        self.ctx = ssl.create_default_context(cafile=args.ca)
        with open(args.token_file) as f:
            self.token = f.read().strip()
        self.timeout = args.timeout
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "conn", None)
        # (a connection idle for long may have been closed by the apiserver: not the
        # disruption's doing, so it is not given the chance to fail an attempt)
        if c is not None and time.monotonic() - self.local.used > 20:
            c.close()
            c = None
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)
            self.local.conn = c
        return c

    def post(self, path, body):
        """(code, parsed body or None, error text)."""
        c = self.conn()
        data = json.dumps(body).encode()
        try:
            c.request("POST", path, body=data, headers={
                "Authorization": "Bearer " + self.token,
                "Content-Type": "application/json",
                "Accept": "application/json",
            })
            resp = c.getresponse()
            raw = resp.read()
            self.local.used = time.monotonic()
        except (OSError, http.client.HTTPException) as e:
            c.close()
            self.local.conn = None
            return 0, None, "%s: %s" % (type(e).__name__, e)
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        return resp.status, parsed, "" if parsed is not None else raw[:300].decode("utf-8", "replace")


def images_of(kind, obj):
    spec = obj.get("spec", {})
    if kind == "Deployment":
        spec = spec.get("template", {}).get("spec", {})
    return [c.get("image", "") for c in spec.get("containers", [])]


def attempt(seq, client, args, out, lock, results):
    kind, path, body, uncached = body_for(seq, args)
    start = time.time()
    t0 = time.monotonic()
    code, parsed, err = client.post(path, body)
    ms = (time.monotonic() - t0) * 1000.0
    if code == 201 and parsed is not None:
        imgs = images_of(kind, parsed)
        if imgs and all("@sha256:" in i for i in imgs):
            outcome, err = "ok", ""
        else:
            outcome, err = "unpinned", "stored as " + " ".join(imgs)
    elif code == 0:
        # no HTTP answer: the apiserver itself was not there (node-availability-apiserver-restart)
        outcome = "unanswered"
    else:
        if parsed is not None:
            err = parsed.get("message", json.dumps(parsed))
        if uncached and args.refusal and args.refusal in err:
            outcome = "refused"
        else:
            outcome = "failed"
    line = "%d\t%.3f\t%.1f\t%s\t%d\t%s\t%s\n" % (seq, start, ms, kind, code, outcome, one_line(err))
    with lock:
        out.write(line)
        out.flush()
        results.append((outcome, ms))


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def main():
    args = parse_args()
    client = Client(args)
    lock = threading.Lock()
    results = []
    jobs = queue.Queue()

    def worker():
        while True:
            seq = jobs.get()
            if seq is None:
                return
            try:
                attempt(seq, client, args, out, lock, results)
            except Exception as e:  # a bug here must not stop the stream silently
                with lock:
                    out.write("%d\t%.3f\t0\t?\t0\tfailed\tclient error: %s\n" % (seq, time.time(), one_line(e)))
                    results.append(("failed", 0.0))

    with open(args.out, "w") as out:
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.workers)]
        for t in threads:
            t.start()
        started = time.time()
        t0 = time.monotonic()
        seq = 0
        while seq < args.count:
            due = t0 + seq / args.rate
            if due - t0 > args.duration:
                break
            if args.stop_file and os.path.exists(args.stop_file):
                break
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            jobs.put(seq)
            seq += 1
        for _ in threads:
            jobs.put(None)
        for t in threads:
            t.join(args.timeout + 5)
        ended = time.time()
    with lock:
        done = list(results)
    # latency of what the apiserver answered: an attempt it never answered admitted nothing
    lat = sorted(ms for o, ms in done if o != "unanswered")
    summary = {
        "attempted": seq,
        "answered": sum(1 for o, _ in done if o != "unanswered"),
        "unanswered": sum(1 for o, _ in done if o == "unanswered") + (seq - len(done)),
        "ok": sum(1 for o, _ in done if o == "ok"),
        "unpinned": sum(1 for o, _ in done if o == "unpinned"),
        "refused": sum(1 for o, _ in done if o == "refused"),
        "failed": sum(1 for o, _ in done if o == "failed"),
        "p50_ms": round(percentile(lat, 50), 1),
        "p99_ms": round(percentile(lat, 99), 1),
        "max_ms": round(lat[-1], 1) if lat else 0.0,
        "started": round(started, 3),
        "ended": round(ended, 3),
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
