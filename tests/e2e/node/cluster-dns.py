#!/usr/bin/env python3
"""The node's cluster DNS, a stand-in for CoreDNS's `kubernetes` plugin (python3 standard library).

Usage: cluster-dns.py LISTEN_IP APISERVER_URL CA_FILE TOKEN_FILE [DOMAIN]

Answers UDP queries on LISTEN_IP:53 for `<service>.<namespace>.svc.<DOMAIN>` (DOMAIN
cluster.local): type A with the Service's ClusterIP, read from the apiserver at each query
(GET /api/v1/namespaces/<namespace>/services/<service>, bearer TOKEN_FILE, CA_FILE); AAAA and
other types of such a name: no answer (NOERROR). Every other name, and a Service without a
ClusterIP: NXDOMAIN. It never forwards a query: nothing leaves this machine. One log line a query
on stderr. Pods reach it as the kubelet's clusterDNS (node.sh, NODE_POD_NETWORK=1), so that
`pinhook check --server https://<service>.<namespace>.svc:443` (the chart's helm test) resolves
through the Pod's search list (`<ns>.svc.cluster.local svc.cluster.local cluster.local`).
"""

import json
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request

A, AAAA = 1, 28


def parse_question(msg):
    """(id, flags, qname, qtype, end of the question) of a query."""
    qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
    if qdcount != 1:
        raise ValueError("one question expected")
    labels, i = [], 12
    while True:
        n = msg[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:
            raise ValueError("compressed question")
        labels.append(msg[i + 1 : i + 1 + n].decode("ascii").lower())
        i += 1 + n
    qtype, _qclass = struct.unpack("!HH", msg[i : i + 4])
    return qid, flags, ".".join(labels), qtype, i + 4


def answer(msg, qid, flags, end, rcode, ip=None):
    """A response: the question echoed, RA off, AA on, and one A record when ip is given."""
    rd = flags & 0x0100
    head = struct.pack("!HHHHHH", qid, 0x8400 | rd | rcode, 1, 1 if ip else 0, 0, 0)
    out = head + msg[12:end]
    if ip:
        out += struct.pack("!HHHIH", 0xC00C, A, 1, 5, 4) + socket.inet_aton(ip)
    return out


def main():
    listen, api, ca, token_file = sys.argv[1:5]
    domain = sys.argv[5] if len(sys.argv) > 5 else "cluster.local"
    suffix = ".svc." + domain
    with open(token_file) as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=ca)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((listen, 53))
    print(f"cluster-dns: listening on {listen}:53 for *{suffix}", file=sys.stderr, flush=True)

    def cluster_ip(name, ns):
        req = urllib.request.Request(
            f"{api}/api/v1/namespaces/{ns}/services/{name}",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=3) as r:
                ip = json.load(r).get("spec", {}).get("clusterIP", "")
        except urllib.error.HTTPError:
            return None
        return ip if ip and ip != "None" else None

    while True:
        msg, peer = sock.recvfrom(4096)
        try:
            qid, flags, qname, qtype, end = parse_question(msg)
        except (ValueError, IndexError, UnicodeDecodeError, struct.error):
            continue
        rcode, ip = 3, None  # NXDOMAIN
        if qname.endswith(suffix):
            parts = qname[: -len(suffix)].split(".")
            if len(parts) == 2:
                try:
                    found = cluster_ip(parts[0], parts[1])
                except OSError as e:
                    print(f"cluster-dns: apiserver: {e}", file=sys.stderr, flush=True)
                    found = None
                if found:
                    rcode = 0
                    ip = found if qtype == A else None
        print(f"cluster-dns: {peer[0]} {qname} type {qtype}: rcode {rcode} {ip or ''}", file=sys.stderr, flush=True)
        sock.sendto(answer(msg, qid, flags, end, rcode, ip), peer)


if __name__ == "__main__":
    main()
