#!/usr/bin/env python3
"""The body flood of issue 44, against one pinhook on 127.0.0.1: N connections (40) each
announce a body of SIZE bytes (7 MiB) to PATH (/mutate, or /v1/dry-run with no token) and send
it slowly (64 KiB every 50 ms), as a caller with no credentials can. pinhook's peak resident
memory (VmHWM) is read from /proc before and after, and the answers counted by status.

Usage: benches/body-flood.py BINARY [PATH] [N] [SIZE]
Prints one line: `flood PATH: N bodies of SIZE: statuses {...}; RSS before X MiB, peak Y MiB`.
With PATH `idle`: N TLS connections opened (handshake done), each then sending the first bytes
of a request's headers and nothing more, held 5 s: `idle: N connections (K held): RSS before X
MiB, held Y MiB`, the cost of an idle connection (the memory model of docs/security.md).
Bounded: every connection stops after its body or 60 s; the script stops pinhook at the end.
Loopback only."""

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


def main():
    binary = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else "/mutate"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 7 * 1024 * 1024
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
    try:
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
                raise SystemExit("pinhook did not become ready")
            time.sleep(0.2)
        time.sleep(0.5)
        before = kib(server.pid, "VmRSS")
        statuses = {}
        lock = threading.Lock()
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], kib(server.pid, "VmRSS"))
                time.sleep(0.05)

        def flood():
            status = "none"
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=60)
                tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
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

        if path == "idle":
            held = []
            for _ in range(n):
                try:
                    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
                    tls.sendall(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
                    held.append(tls)
                except OSError:
                    pass
            time.sleep(5)
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
            during = kib(server.pid, "VmRSS")
            for tls in held:
                tls.close()
            print(f"idle: {n} connections ({alive} held): RSS before {before / 1024:.1f} MiB, "
                  f"held {during / 1024:.1f} MiB, {(during - before) / max(alive, 1):.1f} KiB each")
            return
        sampler = threading.Thread(target=sample)
        sampler.start()
        threads = [threading.Thread(target=flood) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        done.set()
        sampler.join()
        hwm = kib(server.pid, "VmHWM")
        print(f"flood {path}: {n} bodies of {size} bytes: statuses {dict(sorted(statuses.items()))}; "
              f"RSS before {before / 1024:.0f} MiB, peak {max(peak[0], hwm) / 1024:.0f} MiB")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
