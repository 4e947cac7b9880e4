#!/usr/bin/env python3
"""The floods of issue 44, as a caller with no credentials sends them.

  benches/body-flood.py BINARY [PATH] [N] [SIZE]
      starts pinhook (BINARY) on 127.0.0.1 and floods it; reads its resident memory from /proc.
  benches/body-flood.py --target HOST:PORT [PATH] [N] [SIZE]
      floods a pinhook already running (the e2e node's flood, from a Pod's network namespace);
      no memory reading (the caller reads the target's own). --plain-target: a plain-HTTP port
      (the metrics port, the watch's), `idle` only.

PATH `/mutate` or `/v1/dry-run` (no token): N connections (40) each announce a body of SIZE
bytes (7 MiB) and send it slowly (64 KiB every 50 ms). Prints `flood PATH: N bodies of SIZE:
statuses {...}` (and `; RSS before X MiB, peak Y MiB` when it started pinhook).
PATH `idle`: N TLS connections (handshake done, then the first bytes of a request head and
nothing more), held 5 s (HOLD seconds with --target, SIZE's place): `idle: N connections (K
held)`, K counted 1 s after the last one was opened (and the RSS, and KiB per held connection, when it started pinhook): the cost of an idle
connection in the memory model of docs/security.md.

Bounded: every connection stops after its body or 60 s; a pinhook it started is stopped at the
end. Loopback or the e2e bridge only."""

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def start_pinhook(binary):
    """pinhook serve on a free loopback port: (process, port, TLS context)."""
    work = tempfile.mkdtemp(prefix="pinhook-flood-")
    subprocess.run([binary, "certs", "--san", "127.0.0.1", "--out", f"{work}/tls"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(f"{work}/policy.yaml", "w") as f:
        f.write("mode: enforce\n")
    port = free_port()
    env = dict(os.environ, HOME=work, KUBECONFIG="", PINHOOK_LOG="warn")
    server = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--tls-cert", f"{work}/tls/tls.crt",
         "--tls-key", f"{work}/tls/tls.key", "--policy", f"{work}/policy.yaml"],
        env=env, stdout=open(f"{work}/pinhook.log", "w"), stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=f"{work}/tls/ca.crt")
    deadline = time.time() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    if b"ok" in tls.recv(256):
                        break
        except OSError:
            pass
        if time.time() > deadline:
            server.terminate()
            raise SystemExit("pinhook did not become ready")
        time.sleep(0.2)
    time.sleep(0.5)
    return server, port, context


def hold_idle(host, port, context, n, hold):
    """N connections opened and held HOLD s: how many were still open at the end."""
    held = []
    for _ in range(n):
        try:
            raw = socket.create_connection((host, port), timeout=5)
            tls = context.wrap_socket(raw, server_hostname=host) if context else raw
            tls.sendall(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
            held.append(tls)
        except OSError:
            pass
    # Counted 1 s after the last was opened (the server closes what it refuses at once), then
    # held the rest of HOLD s.
    time.sleep(min(1, hold))
    alive = 0
    for tls in held:
        try:
            tls.settimeout(0.001)
            if tls.recv(1) == b"":
                continue
        except (ssl.SSLWantReadError, socket.timeout, TimeoutError):
            pass
        except OSError:
            continue
        alive += 1
    time.sleep(max(0, hold - 1))
    return held, alive


def flood_bodies(host, port, context, path, n, size):
    """N slow bodies of SIZE to PATH at once: {status: count}."""
    statuses = {}
    lock = threading.Lock()

    def flood():
        status = "none"
        try:
            raw = socket.create_connection((host, port), timeout=60)
            tls = context.wrap_socket(raw, server_hostname=host)
            tls.settimeout(0.001)
            tls.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                        f"content-length: {size}\r\n\r\n".encode())
            chunk = b" " * 65536
            sent = 0
            answer = b""
            stop = time.time() + 60
            while sent < size and time.time() < stop:
                try:
                    answer += tls.recv(256)
                    if answer:
                        break
                except (ssl.SSLWantReadError, socket.timeout, TimeoutError):
                    pass
                part = chunk[: min(len(chunk), size - sent)]
                tls.sendall(part)
                sent += len(part)
                time.sleep(0.05)
            tls.settimeout(30)
            while not answer and time.time() < stop:
                answer += tls.recv(256)
            status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "none"
            tls.close()
        except OSError as e:
            status = type(e).__name__
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=flood) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return dict(sorted(statuses.items()))


def main():
    args = sys.argv[1:]
    target = None
    plain = False
    if args and args[0] in ("--target", "--plain-target"):
        plain = args[0] == "--plain-target"
        target, args = args[1], args[2:]
    else:
        binary, args = args[0], args[1:]
    path = args[0] if len(args) > 0 else "/mutate"
    n = int(args[1]) if len(args) > 1 else 40
    size = int(args[2]) if len(args) > 2 else (5 if path == "idle" else 7 * 1024 * 1024)

    if target:
        host, port = target.rsplit(":", 1)
        context = None
        if not plain:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if path == "idle":
            held, alive = hold_idle(host, int(port), context, n, size)
            print(f"idle {target}: {n} connections ({alive} held)", flush=True)
            for tls in held:
                tls.close()
        else:
            statuses = flood_bodies(host, int(port), context, path, n, size)
            print(f"flood {target}{path}: {n} bodies of {size} bytes: statuses {statuses}",
                  flush=True)
        return

    server, port, context = start_pinhook(binary)
    try:
        before = kib(server.pid, "VmRSS")
        if path == "idle":
            held, alive = hold_idle("127.0.0.1", port, context, n, 5)
            during = kib(server.pid, "VmRSS")
            for tls in held:
                tls.close()
            print(f"idle: {n} connections ({alive} held): RSS before {before / 1024:.1f} MiB, "
                  f"held {during / 1024:.1f} MiB, {(during - before) / max(alive, 1):.1f} KiB each")
            return
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], kib(server.pid, "VmRSS"))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        statuses = flood_bodies("127.0.0.1", port, context, path, n, size)
        done.set()
        sampler.join()
        hwm = kib(server.pid, "VmHWM")
        print(f"flood {path}: {n} bodies of {size} bytes: statuses {statuses}; "
              f"RSS before {before / 1024:.0f} MiB, peak {max(peak[0], hwm) / 1024:.0f} MiB")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
