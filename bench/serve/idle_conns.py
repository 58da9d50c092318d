#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Opens N keep-alive connections to HOST:PORT, makes one GET on each (so the proxy has parsed a
request and holds a keep-alive connection, as after real traffic), then keeps them all open and
idle. Prints "open N" once every connection has its answer, then waits until stdin closes.

  idle_conns.py HOST PORT N [PATH]

Bounded: N <= 100000; every connect and read has a 10 s timeout."""
import resource
import select
import socket
import sys


def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    path = sys.argv[4] if len(sys.argv) > 4 else "/"
    if not 0 < n <= 100000:
        sys.exit("idle_conns.py: N must be 1..100000")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    req = ("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode()
    socks = []
    batch = 200  # connect a batch, then collect the batch's answers: bounded accept queues
    for start in range(0, n, batch):
        group = []
        for _ in range(min(batch, n - start)):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(req)
            group.append(s)
        for s in group:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(65536)
                if not chunk:
                    sys.exit("idle_conns.py: connection closed before an answer")
                got += chunk
            head, _, rest = got.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            while len(rest) < length:
                chunk = s.recv(65536)
                if not chunk:
                    sys.exit("idle_conns.py: body cut short")
                rest += chunk
        socks.extend(group)
    print("open %d" % len(socks), flush=True)
    # Hold until told (stdin closes), noticing a proxy that closes connections meanwhile.
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 1.0)
        if r and not sys.stdin.readline():
            break
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
