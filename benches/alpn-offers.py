#!/usr/bin/env python3
"""What each client offered in ALPN when it connected to a port, and how much it sent.

    benches/alpn-offers.py CAPTURE.pcap PORT

Reads a classic pcap of loopback traffic (e.g. `tcpdump -i lo -s 800 -w CAPTURE.pcap
'tcp[tcpflags] & tcp-push != 0'` while `benches/e2e-admission.sh 1 20` runs; PORT is pinhook's,
from the bench's log) and prints, per client port that sent a TLS ClientHello to PORT, the
protocols it offered (`h2`, `http/1.1`) and the bytes it sent over the capture: the
apiserver's webhook connection is the one that carried the reviews. Used for
docs/availability.md (the apiserver speaks HTTP/1.1 to webhooks).
"""
import collections
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        header = f.read(24)
        if len(header) < 24 or header[:4] not in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            sys.exit(f"{path}: not a little-endian classic pcap")
        while True:
            record = f.read(16)
            if len(record) < 16:
                return
            _, _, included, original = struct.unpack("<IIII", record)
            yield f.read(included), original


def alpn_offered(hello):
    """The ALPN protocols of a ClientHello record (None when it offers none)."""
    p = 5 + 4 + 2 + 32  # record header, handshake header, version, random
    p += 1 + hello[p]  # session id
    p += 2 + struct.unpack(">H", hello[p : p + 2])[0]  # cipher suites
    p += 1 + hello[p]  # compression methods
    end = p + 2 + struct.unpack(">H", hello[p : p + 2])[0]
    p += 2
    while p + 4 <= min(end, len(hello)):
        kind, length = struct.unpack(">HH", hello[p : p + 4])
        if kind == 16:
            body, q, names = hello[p + 6 : p + 4 + length], 0, []
            while q < len(body):
                names.append(body[q + 1 : q + 1 + body[q]].decode(errors="replace"))
                q += 1 + body[q]
            return names
        p += 4 + length
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, port = sys.argv[1], int(sys.argv[2])
    offers, sent = {}, collections.Counter()
    for frame, length in packets(path):
        ip = frame[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        tcp = ip[(ip[0] & 15) * 4 :]
        source, destination = struct.unpack(">HH", tcp[:4])
        if destination != port:
            continue
        sent[source] += length
        data = tcp[(tcp[12] >> 4) * 4 :]
        if len(data) > 5 and data[0] == 0x16 and data[5] == 1:
            try:
                offers[source] = alpn_offered(data)
            except (IndexError, struct.error):
                offers[source] = "unreadable (cut by the snapshot length?)"
    for source in sorted(offers, key=lambda s: -sent[s]):
        print(f"client port {source}: offered {offers[source]}, sent {sent[source]} bytes")
    if not offers:
        sys.exit(f"no ClientHello to port {port} in {path}")


if __name__ == "__main__":
    main()
