#!/usr/bin/env python3
"""A webhook that records the AdmissionReviews a kube-apiserver sends it and allows everything.

Used by capture-fixtures.sh to record tests/fixtures/admissionreview/ bodies: it never patches
or denies, so what it records is exactly what the apiserver (and, for controller-made objects,
the controller) wrote. Standard library only.

Usage: capture-webhook.py PORT CERT KEY OUT_DIR

Serves HTTPS on 127.0.0.1:PORT. Every POST body is written, byte for byte, to
OUT_DIR/NNNN-<path>-<kind>-<operation>.json (NNNN counts from 0001, <path> is the URL path
without slashes, e.g. `mutate`), then answered `allowed: true` with the request's uid.
GET /healthz answers `ok`. Stops on SIGTERM.
"""

import http.server
import json
import os
import signal
import ssl
import sys
import threading


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: capture-webhook.py PORT CERT KEY OUT_DIR")
    port, cert, key, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    os.makedirs(out_dir, exist_ok=True)
    lock = threading.Lock()
    counter = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self._reply(200, b"ok", "text/plain")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                request = json.loads(body)["request"]
            except (ValueError, KeyError, TypeError):
                self._reply(400, b"not an AdmissionReview", "text/plain")
                return
            path = self.path.split("?", 1)[0].strip("/").replace("/", "_") or "root"
            with lock:
                counter[0] += 1
                name = "%04d-%s-%s-%s.json" % (
                    counter[0],
                    path,
                    request.get("kind", {}).get("kind", "unknown"),
                    request.get("operation", "unknown"),
                )
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(body)
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request.get("uid", ""), "allowed": True},
            }
            self._reply(200, json.dumps(answer).encode(), "application/json")

        def _reply(self, status, data, content_type):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):
            sys.stderr.write("capture-webhook: %s\n" % (fmt % args))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    sys.stderr.write("capture-webhook: listening on https://127.0.0.1:%d, writing to %s\n" % (port, out_dir))
    server.serve_forever()


if __name__ == "__main__":
    main()
