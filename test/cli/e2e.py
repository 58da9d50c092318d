#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end tests of the linkd command line: the real binary, run as a process against faultd
(test/support) and a small recording HTTP server, all on 127.0.0.1 with ephemeral ports.

    e2e.py --linkd PATH --faultd PATH --source-dir DIR CASE     run one case (one ctest test)
    e2e.py --list                                               print the case names
"""

import argparse
import http.server
import json
import os
import re
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema_lite  # noqa: E402

CASES = {}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def case(fn):
    CASES[fn.__name__] = fn
    return fn


class Fail(Exception):
    pass


def check(cond, msg, *context):
    if not cond:
        extra = "".join("\n--- context ---\n%s" % (c,) for c in context)
        raise Fail(msg + extra)


class Ctx:
    """Paths and a scratch directory for one case."""

    def __init__(self, args):
        self.linkd = args.linkd
        self.faultd = args.faultd
        self.src = args.source_dir
        self.tmp = tempfile.mkdtemp(prefix="linkd-cli-e2e-")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        with open(os.path.join(self.src, "docs", "linkd-result.schema.json")) as f:
            self.schema = json.load(f)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return p


class Run:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    def json(self):
        check(self.out.endswith(b"\n") and self.out.count(b"\n") == 1,
              "--json must print exactly one line", self)
        return json.loads(self.out)

    def __str__(self):
        return "rc=%s (%.2fs)\nstdout=%r\nstderr=\n%s" % (self.rc, self.seconds, self.out[:2000],
                                                         self.err)


def base_env(ctx):
    env = dict(os.environ)
    for k in ("LINKD_CONFIG", "XDG_CONFIG_HOME"):
        env.pop(k, None)
    env["HOME"] = ctx.home  # an empty home: no ~/.config/linkd/linkd.conf unless a case writes one
    return env


def linkd(ctx, *args, stdin=None, env=None, timeout=60, cwd=None):
    e = base_env(ctx)
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([ctx.linkd] + list(args), input=stdin, capture_output=True, env=e,
                       timeout=timeout, cwd=cwd)
    return Run(p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"),
               time.monotonic() - t0)


class Faultd:
    """faultd in a process of its own; exits with us (--parent-pid) or on stop()."""

    def __init__(self, ctx, mode, *args):
        d = tempfile.mkdtemp(dir=ctx.tmp, prefix="faultd-")
        self.port_file = os.path.join(d, "port")
        self.log = os.path.join(d, "log")
        self.errlog = open(os.path.join(d, "stderr"), "wb")
        cmd = [ctx.faultd, "--port-file", self.port_file, "--log", self.log, "--mode", mode,
               "--max-seconds", "90", "--parent-pid", str(os.getpid())] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.errlog)
        end = time.monotonic() + 20
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise Fail("faultd %s did not start (rc %s)" % (cmd, self.proc.poll()))
            time.sleep(0.02)
        with open(self.port_file) as f:
            self.port = int(f.read().strip())

    def url(self, path="/x"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def requests(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def wait_requests(self, n, seconds=15):
        end = time.monotonic() + seconds
        while len(self.requests()) < n and time.monotonic() < end:
            time.sleep(0.02)
        return self.requests()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errlog.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Recorder:
    """An HTTP/1.1 server that records every request (method, path, headers, body) and answers
    each with the next status of `statuses` (the last repeats)."""

    def __init__(self, statuses=(200,), body=b'{"echo":true}', locations=None):
        self.records = []
        self.statuses = list(statuses)
        self.locations = locations or {}  # path -> Location: that path answers 3xx
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.records.append({"method": self.command, "path": self.path,
                                      "headers": list(self.headers.items()), "body": body})
                k = len(outer.records) - 1
                status = outer.statuses[min(k, len(outer.statuses) - 1)]
                loc = outer.locations.get(self.path)
                if loc:
                    status = loc[0]
                self.send_response(status)
                if loc:
                    self.send_header("Location", loc[1])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body_out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body_out)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_one
            do_PROPFIND = handle_one

        body_out = body

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path="/r"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def headers(self, i=0):
        return self.records[i]["headers"]

    def header(self, name, i=0):
        vals = [v for k, v in self.records[i]["headers"] if k.lower() == name.lower()]
        return vals

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def delays(doc):
    return [a["delay_ms"] for a in doc["result"]["timeline"] if a["retry"]]


def schema_errors(ctx, doc):
    return schema_lite.validate(doc, ctx.schema)


def valid_json(ctx, run):
    doc = run.json()
    errs = schema_errors(ctx, doc)
    check(not errs, "JSON does not match docs/linkd-result.schema.json:\n" + "\n".join(errs), run)
    check(doc["exit_code"] == run.rc, "exit_code %s but the process exited %s" %
          (doc["exit_code"], run.rc), run)
    check(doc["result"]["attempts"] == len(doc["result"]["timeline"]),
          "attempts != timeline length", run)
    return doc


FAST = ["--base", "1ms", "--jitter", "none"]

# ------------------------------------------------------------------------------------------------
# Output: body, -i, -o, -s, head
# ------------------------------------------------------------------------------------------------


@case
def ok_body(ctx):
    with Faultd(ctx, "ok") as fd:
        r = linkd(ctx, "get", fd.url())
        check(r.rc == 0, "a 200 must exit 0", r)
        check(r.out == b'{"ok":true}', "stdout is the body, as is", r)
        check(r.err == "", "nothing on stderr without -v", r)
        reqs = fd.requests()
        check(len(reqs) == 1, "one request", reqs)
        q = reqs[0]
        check(q["method"] == "GET" and q["path"] == "/x", "method and path", q)
        check(q["attempt"] == "1", "Linkd-Attempt: 1 on the first attempt", q)
        check(q["deadline"] is not None and 0 < int(q["deadline"]) <= 3000,
              "Linkd-Deadline within the default 3s", q)
        check(q["idempotency_key"] is None, "no key for a GET by default", q)


@case
def include_and_head(ctx):
    with Faultd(ctx, "ok") as fd:
        r = linkd(ctx, "get", "-i", fd.url())
        check(r.rc == 0, "exit 0", r)
        check(r.out.startswith(b"HTTP/1.1 200 OK\r\n"), "-i starts with the status line", r)
        check(b"\r\nContent-Type: application/json\r\n" in r.out, "-i prints headers", r)
        check(r.out.endswith(b"\r\n\r\n" + b'{"ok":true}'), "headers, empty line, body", r)
        r = linkd(ctx, "head", fd.url(), "--include")
        check(r.rc == 0, "head exits 0", r)
        check(r.out.startswith(b"HTTP/1.1 200 OK\r\n") and r.out.endswith(b"\r\n\r\n"),
              "head -i prints the head and no body", r)
        r = linkd(ctx, "head", fd.url())
        check(r.rc == 0 and r.out == b"", "head alone prints nothing", r)
        methods = [q["method"] for q in fd.requests()]
        check(methods == ["GET", "HEAD", "HEAD"], "methods sent", methods)
    # The status line as the server sent it: version and reason phrase of an error too.
    with Faultd(ctx, "status", "--status", "503") as fd:
        r = linkd(ctx, "get", "-i", "--max-attempts", "1", fd.url())
        check(r.rc == 4 and r.out.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"),
              "-i prints the 503's status line", r)


@case
def output_file(ctx):
    with Faultd(ctx, "ok") as fd:
        out = ctx.path("body.out")
        r = linkd(ctx, "get", "-o", out, fd.url())
        check(r.rc == 0 and r.out == b"", "-o: nothing on stdout", r)
        check(open(out, "rb").read() == b'{"ok":true}', "-o writes the body")
        # An existing, longer file is replaced, not overwritten in place.
        ctx.write("body.out", "x" * 100)
        r = linkd(ctx, "get", "--output", out, "-i", fd.url())
        data = open(out, "rb").read()
        check(r.rc == 0 and data.startswith(b"HTTP/1.1 200 OK\r\n")
              and data.endswith(b'{"ok":true}'),
              "-o with -i: head and body in the file, old content gone", data)
        r = linkd(ctx, "get", "-o", "-", fd.url())
        check(r.rc == 0 and r.out == b'{"ok":true}', "-o - is stdout", r)
        # Devices and pipes are written, not truncated (ftruncate fails on them).
        r = linkd(ctx, "get", "-o", "/dev/null", fd.url())
        check(r.rc == 0 and r.out == b"" and r.err == "", "-o /dev/null exits 0", r)
        r = linkd(ctx, "get", "-i", "-o", "/dev/stdout", fd.url())
        check(r.rc == 0 and r.out.startswith(b"HTTP/1.1 200 OK\r\n")
              and r.out.endswith(b'{"ok":true}'),
              "-o /dev/stdout on a pipe exits 0 with the output", r)
        # --json keeps stdout for the JSON; the body goes to -o only.
        r = linkd(ctx, "get", "--json", "-o", ctx.path("j.out"), fd.url())
        check(r.rc == 0 and r.json()["exit"] == "ok", "--json on stdout", r)
        check(open(ctx.path("j.out"), "rb").read() == b'{"ok":true}', "--json -o: body in file")
        before = len(fd.requests())
        r = linkd(ctx, "get", "-o", "/nonexistent-dir/x/body", fd.url())
        check(r.rc == 73, "an unwritable -o exits 73 (EX_CANTCREAT)", r)
        check("-o /nonexistent-dir/x/body: cannot write" in r.err, "message names -o", r)
        check(len(fd.requests()) == before, "nothing is sent when -o cannot be written")
        # A failed write, to -o or stdout, is said (unless -s) and exits 73.
        if os.path.exists("/dev/full"):
            for args in (["-o", "/dev/full"], ["-w", "%{http_code}", "-o", "/dev/null"], []):
                with open("/dev/full", "wb") as full:
                    p = subprocess.run([ctx.linkd, "get"] + args + [fd.url()], stdout=full,
                                       stderr=subprocess.PIPE, env=base_env(ctx), timeout=60)
                    q = subprocess.run([ctx.linkd, "get", "-s"] + args + [fd.url()],
                                       stdout=full, stderr=subprocess.PIPE, env=base_env(ctx),
                                       timeout=60)
                where = b"-o /dev/full" if args[:2] == ["-o", "/dev/full"] else b"stdout"
                check(p.returncode == 73 and where + b": write failed" in p.stderr,
                      "a failed write to %s exits 73 with a message" % where.decode(), args,
                      p.stderr)
                check(q.returncode == 73 and q.stderr == b"", "-s: silent, still 73", args,
                      q.stderr)
    with Faultd(ctx, "refuse") as fd:
        out = ctx.path("never.out")
        r = linkd(ctx, "get", "-o", out, "--max-attempts", "2", *FAST, fd.url())
        check(r.rc == 4, "refused connects are retried until exhausted", r)
        check(not os.path.exists(out), "no response: -o leaves no file behind")


def to_full(ctx, *args):
    """linkd with stdout on /dev/full (every write to it fails with ENOSPC)."""
    with open("/dev/full", "wb") as full:
        t0 = time.monotonic()
        p = subprocess.run([ctx.linkd] + list(args), stdout=full, stderr=subprocess.PIPE,
                           env=base_env(ctx), timeout=60)
    return Run(p.returncode, b"", p.stderr.decode("utf-8", "replace"), time.monotonic() - t0)


@case
def write_failures(ctx):
    """A body that cannot be written exits 73, and what reports the call says so: --json's
    exit_code and output_error, -w's %{exitcode} and %{errormsg}, the summary line."""
    check(os.path.exists("/dev/full"), "/dev/full is needed to make writes fail")
    full = "-o /dev/full: write failed: No space left on device"
    with Faultd(ctx, "ok") as fd:
        r = linkd(ctx, "get", "--json", "-o", "/dev/full", fd.url())
        doc = valid_json(ctx, r)  # exit_code == the process's
        check(r.rc == 73 and doc["exit"] == "cannot-create" and doc["output_error"] == full,
              "--json -o /dev/full: exit_code 73 and the reason", r)
        check(doc["result"]["ok"] and doc["response"]["status"] == 200,
              "the call itself succeeded", doc)
        check(full in r.err and "output not written" in r.err and "[exit 73]" in r.err,
              "the message and the summary on stderr", r)
        r = linkd(ctx, "get", "--json", "-o", ctx.path("fine.out"), fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 0 and doc["output_error"] is None, "no failure: output_error null", r)
        r = linkd(ctx, "get", "--json", "-s", "-o", "/dev/full", fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 73 and doc["output_error"] == full and r.err == "",
              "-s: nothing on stderr, the JSON still tells", r)
        for flags in ([], ["-s"], ["-sS"]):
            r = linkd(ctx, "get", *flags, "-w", "%{exitcode} [%{errormsg}]", "-o", "/dev/full",
                      fd.url())
            check(r.rc == 73 and r.out == ("73 [%s]" % full).encode(),
                  "-w %s: %%{exitcode} and %%{errormsg} of the failed write" % flags, r)
            check((full in r.err) == (flags != ["-s"]), "message unless -s", r)
        r = linkd(ctx, "get", "-v", "-o", "/dev/full", fd.url())
        check(r.rc == 73 and "[exit 73]" in r.err and "[exit 0]" not in r.err,
              "-v: the summary gives the exit code returned", r)
        # stdout itself full: no JSON can be read, the exit code and stderr tell.
        r = to_full(ctx, "get", "--json", fd.url())
        check(r.rc == 73 and "stdout: write failed: No space left on device" in r.err and
              "[exit 73]" in r.err, "--json to a full stdout", r)
        r = to_full(ctx, "get", "-w", "%{exitcode}", fd.url())
        check(r.rc == 73 and r.err.count("stdout: write failed") == 1, "told once", r)
    # A failed call keeps its exit code; the failed write is still reported.
    with Faultd(ctx, "status", "--status", "404") as fd:
        r = linkd(ctx, "get", "--json", "-o", "/dev/full", fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 2 and doc["exit"] == "http-error" and doc["output_error"] == full,
              "a 404 to -o /dev/full: exit 2, output_error set", r)
        r = linkd(ctx, "get", "-w", "%{exitcode}", "-o", "/dev/full", fd.url())
        check(r.rc == 2 and r.out == b"2", "-w: the call's code", r)
    # A body larger than stdio's buffer fails in fwrite, not in the final fflush: still 73.
    with Recorder(body=b"x" * 300000) as rec:
        r = linkd(ctx, "get", "-o", "/dev/full", rec.url())
        check(r.rc == 73 and full in r.err, "a large body to -o /dev/full exits 73", r)
        r = linkd(ctx, "get", "--json", "-o", "/dev/full", rec.url())
        doc = valid_json(ctx, r)
        check(r.rc == 73 and doc["output_error"] == full, "and --json says so", r)
        r = to_full(ctx, "get", rec.url())
        check(r.rc == 73 and "stdout: write failed: No space left on device" in r.err,
              "a large body to a full stdout", r)


@case
def silent(ctx):
    with Faultd(ctx, "status", "--status", "404") as fd:
        r = linkd(ctx, "get", fd.url())
        check(r.rc == 2, "404 is an HTTP error, not retried: exit 2", r)
        check(r.out == b'{"status":404}', "the error body is still printed", r)
        check("linkd: GET %s: HTTP error status (EHTTP, CLIENT_4XX)" % fd.url() in r.err and
              "status 404" in r.err and "[exit 2]" in r.err, "summary on stderr", r)
        r = linkd(ctx, "get", "-s", fd.url())
        check(r.rc == 2 and r.err == "", "-s: same exit code, silent stderr", r)
        r = linkd(ctx, "get", "--silent", "--deadline", "3", fd.url())
        check(r.rc == 64 and "needs a unit" in r.err, "usage errors still print under -s", r)
        check(len(fd.requests()) == 2, "two calls were made", fd.requests())

# ------------------------------------------------------------------------------------------------
# Request: -H, -d
# ------------------------------------------------------------------------------------------------


@case
def headers(ctx):
    with Recorder() as rec:
        r = linkd(ctx, "get", "-H", "X-A: 1", "--header", "X-B:  two words ", "-H", "X-Empty;",
                  rec.url())
        check(r.rc == 0, "exit 0", r)
        check(rec.header("X-A") == ["1"], "-H sends the header", rec.headers())
        check(rec.header("X-B") == ["two words"], "value trimmed", rec.headers())
        check(rec.header("X-Empty") == [""], "'Name;' sends an empty header", rec.headers())
        ua = rec.header("User-Agent")
        check(len(ua) == 1 and ua[0].startswith("linkd/"), "linkd's User-Agent", ua)
        check(rec.header("Linkd-Attempt") == ["1"], "the driver's own headers", rec.headers())
        r = linkd(ctx, "get", "-H", "User-Agent: mine/1", rec.url())
        check(r.rc == 0 and rec.header("User-Agent", 1) == ["mine/1"],
              "-H User-Agent replaces linkd's", rec.headers(1))
        # Config headers, overridden and removed by flags.
        cfg = ctx.write("h.conf", "[defaults]\nheader = X-Team: core\nheader = X-Drop: d\n"
                        "header = X-Keep: k\n")
        r = linkd(ctx, "get", "--config", cfg, "-H", "x-team: cli", "-H", "X-Drop:", rec.url())
        check(r.rc == 0, "exit 0", r)
        check(rec.header("X-Team", 2) == ["cli"], "a flag replaces the config's header",
              rec.headers(2))
        check(rec.header("X-Drop", 2) == [], "'Name:' removes the config's header",
              rec.headers(2))
        check(rec.header("X-Keep", 2) == ["k"], "other config headers stay", rec.headers(2))
        # As curl: 'Name:' also removes what linkd and libcurl add by default.
        n = len(rec.records)
        r = linkd(ctx, "get", "-H", "Accept:", "-H", "User-Agent:", rec.url())
        check(r.rc == 0 and rec.header("Accept", n) == [] and rec.header("User-Agent", n) == [],
              "-H 'Accept:' and -H 'User-Agent:' send neither", rec.headers(n))
        # -d sends libcurl's (and curl's) default Content-Type; -H gives another or removes it.
        r = linkd(ctx, "post", "-d", "a=b", rec.url())
        check(r.rc == 0 and rec.header("Content-Type", n + 1) ==
              ["application/x-www-form-urlencoded"] and rec.header("Accept", n + 1) == ["*/*"],
              "-d: application/x-www-form-urlencoded, as curl", rec.headers(n + 1))
        r = linkd(ctx, "post", "-d", "{}", "-H", "Content-Type: application/json", rec.url())
        check(r.rc == 0 and rec.header("Content-Type", n + 2) == ["application/json"],
              "-H Content-Type replaces it", rec.headers(n + 2))
        r = linkd(ctx, "put", "-d", "x", "-H", "Content-Type:", rec.url())
        check(r.rc == 0 and rec.header("Content-Type", n + 3) == [] and
              rec.header("Accept", n + 3) == ["*/*"], "-H 'Content-Type:' removes it",
              rec.headers(n + 3))
        r = linkd(ctx, "post", "-d", "x", "-H", "Accept:", rec.url())
        check(r.rc == 0 and rec.header("Accept", n + 4) == [] and
              rec.header("Content-Type", n + 4) == ["application/x-www-form-urlencoded"],
              "removing Accept keeps the body's Content-Type", rec.headers(n + 4))
    # An Idempotency-Key given as a header is the call's key: same on every attempt.
    with Faultd(ctx, "status", "--script", "503,200") as fd:
        r = linkd(ctx, "post", "-H", "Idempotency-Key: k-9", *FAST, fd.url())
        check(r.rc == 0, "a keyed POST is retried after a 503", r)
        keys = [q["idempotency_key"] for q in fd.requests()]
        check(keys == ["k-9", "k-9"], "the header's key on every attempt", keys)


@case
def data(ctx):
    with Recorder() as rec:
        r = linkd(ctx, "post", "-d", "hello world", rec.url())
        check(r.rc == 0 and rec.records[0]["body"] == b"hello world", "-d text", rec.records)
        blob = bytes(range(256)) * 3 + b"\n\r\n\x00end"
        f = ctx.write("blob.bin", blob)
        r = linkd(ctx, "put", "--data", "@" + f, rec.url())
        check(r.rc == 0 and rec.records[1]["body"] == blob, "-d @FILE sends the bytes as is")
        r = linkd(ctx, "patch", "-d", "@-", rec.url(), stdin=b"from stdin\n")
        check(r.rc == 0 and rec.records[2]["body"] == b"from stdin\n", "-d @- reads stdin")
        r = linkd(ctx, "delete", "-d", "", rec.url())
        check(r.rc == 0 and rec.records[3]["body"] == b"" and
              rec.header("Content-Length", 3) == ["0"], "-d '' sends an empty body",
              rec.headers(3))
        methods = [x["method"] for x in rec.records]
        check(methods == ["POST", "PUT", "PATCH", "DELETE"], "methods", methods)
        r = linkd(ctx, "post", "-d", "@" + ctx.path("missing.json"), rec.url())
        check(r.rc == 66, "an unreadable -d @FILE exits 66 (EX_NOINPUT)", r)
        check("missing.json: cannot read" in r.err, "message names the file", r)
        # Bounded: -d @/dev/zero ends at once with the limit named (it read 2 GB and more).
        r = linkd(ctx, "post", "-d", "@/dev/zero", rec.url(), timeout=20)
        check(r.rc == 66 and "-d @/dev/zero: larger than 64 MiB, the body limit" in r.err,
              "an endless body is refused", r)
        exact = ctx.path("exact.bin")
        with open(exact, "wb") as f:
            f.truncate(64 << 20)
        with open(ctx.path("over.bin"), "wb") as f:
            f.truncate((64 << 20) + 1)
        r = linkd(ctx, "put", "-d", "@" + ctx.path("over.bin"), rec.url())
        check(r.rc == 66 and "larger than 64 MiB" in r.err, "one byte over the limit", r)
        check(len(rec.records) == 4, "nothing sent when the body cannot be read")
        r = linkd(ctx, "put", "--deadline", "20s", "--attempt-timeout", "20s", "-d", "@" + exact,
                  rec.url())
        check(r.rc == 0 and len(rec.records[4]["body"]) == 64 << 20, "exactly 64 MiB is sent", r)

# ------------------------------------------------------------------------------------------------
# curl's habits: linkd URL, -X, -I, -f, -S, -w, -m, -L, exact long options
# ------------------------------------------------------------------------------------------------


@case
def curl_habits(ctx):
    with Recorder() as rec:
        host = "127.0.0.1:%d" % rec.port
        r = linkd(ctx, rec.url("/plain"))
        check(r.rc == 0 and r.out == b'{"echo":true}', "linkd URL is a GET", r)
        r = linkd(ctx, host + "/noscheme", "-X", "PUT", "-d", "b")
        check(r.rc == 0, "a URL without a scheme is http://; -X PUT", r)
        r = linkd(ctx, "get", host + "/q?r=http://y")
        check(r.rc == 0 and rec.records[-1]["path"] == "/q?r=http://y",
              "'://' in the query is no scheme: http:// is added", r)
        rec.records.pop()
        r = linkd(ctx, "-d", "x", host + "/post")
        check(r.rc == 0, "-d without -X is a POST, as curl", r)
        r = linkd(ctx, "-X", "PROPFIND", "--json", rec.url("/dav"))
        doc = valid_json(ctx, r)
        check(r.rc == 0 and doc["command"] == "request" and doc["method"] == "PROPFIND",
              "-X with a method of no command", doc)
        r = linkd(ctx, "-I", rec.url("/head"))
        check(r.rc == 0 and r.out.startswith(b"HTTP/1.1 200 OK\r\n")
              and r.out.endswith(b"\r\n\r\n"),
              "-I: HEAD, headers printed", r)
        got = [(x["method"], x["path"]) for x in rec.records]
        check(got == [("GET", "/plain"), ("PUT", "/noscheme"), ("POST", "/post"),
                      ("PROPFIND", "/dav"), ("HEAD", "/head")], "methods and paths", got)
        check(rec.records[1]["body"] == b"b", "-d with -X PUT", rec.records[1])
        r = linkd(ctx, "get", "-w", "code=%{http_code} n=%{num_attempts} exit=%{exitcode} "
                  "url=%{url_effective} err=[%{errormsg}] t=%{time_total}\\n", rec.url("/w"))
        m = re.search(rb'\{"echo":true\}code=200 n=1 exit=0 url=(\S+) err=\[\] t=(\d+\.\d{6})\n$',
                      r.out)
        check(r.rc == 0 and m and m.group(1).decode() == rec.url("/w") and
              0 < float(m.group(2)) < 10, "-w after the body", r)
        r = linkd(ctx, "get", "-m", "3", "--json", rec.url("/m"))
        check(r.rc == 0 and r.json()["policy"]["deadline_ms"] == 3000, "-m takes seconds", r)
        for bad, needle in ((["--retry", "5xx"], "unknown option '--retry' (did you mean "
                             "--retry-on?"), (["--verb"], "unknown option '--verb'")):
            n = len(rec.records)
            r = linkd(ctx, "get", *bad, rec.url("/abbrev"))
            check(r.rc == 64 and needle in r.err and len(rec.records) == n,
                  "abbreviated long options are refused", r)
        r = linkd(ctx, "frobnicate")
        check(r.rc == 64 and "unknown command 'frobnicate'" in r.err, "a bare word", r)
    with Faultd(ctx, "status", "--status", "404") as fd:
        r = linkd(ctx, "get", "-f", fd.url())
        check(r.rc == 22 and r.out == b"" and "[exit 22]" in r.err,
              "-f: a 404 exits 22, no body", r)
        r = linkd(ctx, "get", "-fs", fd.url())
        check(r.rc == 22 and r.err == "", "-fs: silent", r)
        r = linkd(ctx, "get", "-fsS", "-w", "%{http_code} %{exitcode}", fd.url())
        check(r.rc == 22 and "[exit 22]" in r.err and r.out == b"404 22",
              "-S shows the error under -s; -w still written", r)
        r = linkd(ctx, "get", "--fail", "--json", "-o", ctx.path("f.out"), fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 22 and doc["exit"] == "http-fail", "-f in JSON", doc)
    with Faultd(ctx, "status", "--status", "503") as fd:
        r = linkd(ctx, "get", "-f", "--max-attempts", "2", *FAST, fd.url())
        check(r.rc == 22 and r.out == b"", "-f: a 503 after the retries exits 22 too", r)


@case
def write_out_file(ctx):
    """-w @FILE and -w @- read the format, as curl's: line ends dropped, \\n still a newline."""
    with Recorder() as rec:
        fmt = ctx.write("fmt.txt", b"code=%{http_code}\\n\nexit=%{exitcode}\\t%%\r\n")
        r = linkd(ctx, "get", "-w", "@" + fmt, rec.url("/w"))
        check(r.rc == 0 and r.out == b'{"echo":true}code=200\nexit=0\t%', "-w @FILE", r)
        r = linkd(ctx, "get", "-o", "/dev/null", "--write-out", "@-", rec.url("/w"),
                  stdin=b"url=%{url_effective}\n")
        check(r.rc == 0 and r.out == ("url=%s" % rec.url("/w")).encode(), "-w @- reads stdin", r)
        r = linkd(ctx, "get", "-o", "/dev/null", "-w", "@" + ctx.write("empty.txt", ""),
                  rec.url("/w"))
        check(r.rc == 0 and r.out == b"", "an empty file: an empty format", r)
        exact = ctx.write("exact.txt", b"a" * (64 << 10))
        r = linkd(ctx, "get", "-o", "/dev/null", "-w", "@" + exact, rec.url("/w"))
        check(r.rc == 0 and r.out == b"a" * (64 << 10), "64 KiB is the limit, and is read", r)
        n = len(rec.records)
        missing = ctx.path("missing.fmt")
        bad = ctx.write("bad.fmt", "%{http_code} %{speed}\n")
        over = ctx.write("over.txt", b"a" * ((64 << 10) + 1))
        nul = ctx.write("nul.txt", b"%{http_code}\x00x")
        for arg, rc, needle in (
                ("@" + missing, 66, "-w @%s: cannot read: No such file or directory" % missing),
                ("@" + ctx.tmp, 66, "-w @%s: cannot read: Is a directory" % ctx.tmp),
                ("@" + over, 66, "-w @%s: larger than 64 KiB, the format limit" % over),
                ("@/dev/zero", 66, "-w @/dev/zero: larger than 64 KiB"),
                ("@" + bad, 64, "-w @%s: unknown variable '%%{speed}'" % bad),
                ("@" + nul, 64, "-w @%s: a NUL byte at byte 13" % nul),
                ("@", 64, "-w @: a file name must follow '@'")):
            r = linkd(ctx, "get", "-w", arg, rec.url("/w"), timeout=20)
            check(r.rc == rc and needle in r.err and r.out == b"",
                  "-w %s: exit %d, %r" % (arg, rc, needle), r)
        r = linkd(ctx, "post", "-d", "@-", "-w", "@-", rec.url("/w"), stdin=b"x")
        check(r.rc == 64 and "-d @- and -w @- do not mix" in r.err, "stdin is read once", r)
        check(len(rec.records) == n, "nothing is sent when the format cannot be had",
              rec.records[n:])


# ------------------------------------------------------------------------------------------------
# curl's options: -D, --fail-with-body, the data options and -G, -u, -A, -O
# ------------------------------------------------------------------------------------------------


@case
def dump_header(ctx):
    """-D FILE: the heads received, as curl writes them: every hop's with -L, also on errors."""
    with Recorder(body=b"final") as rec:
        rec.locations.update({"/a": (302, "/b"), "/b": (301, "/c")})
        hd = ctx.path("heads.txt")
        r = linkd(ctx, "get", "-D", hd, rec.url("/c"))
        hs, rest = heads(open(hd, "rb").read())
        check(r.rc == 0 and r.out == b"final", "-D: the body still goes to stdout", r)
        check([h[0] for h in hs] == [b"HTTP/1.1 200 OK"] and rest == b"" and
              b"Content-Type: application/json" in hs[0], "-D FILE: status line, headers", hs)
        # An existing, longer file is replaced; -L: every response's head, in order.
        ctx.write("heads.txt", "x" * 5000)
        r = linkd(ctx, "-L", "--dump-header", hd, rec.url("/a"))
        hs, rest = heads(open(hd, "rb").read())
        check(r.rc == 0 and r.out == b"final" and rest == b"" and [h[0] for h in hs] ==
              [b"HTTP/1.1 302 Found", b"HTTP/1.1 301 Moved Permanently", b"HTTP/1.1 200 OK"],
              "-L -D: each hop's head, the old content gone", r, hs)
        # -D -: the heads on stdout, before the body (with -o FILE, the body goes there).
        r = linkd(ctx, "get", "-D", "-", rec.url("/c"))
        hs, body = heads(r.out)
        check(r.rc == 0 and [h[0] for h in hs] == [b"HTTP/1.1 200 OK"] and body == b"final",
              "-D -: head then body on stdout", r)
        out = ctx.path("body.out")
        r = linkd(ctx, "-L", "-D", "-", "-o", out, rec.url("/b"))
        hs, body = heads(r.out)
        check(r.rc == 0 and len(hs) == 2 and body == b"" and open(out, "rb").read() == b"final",
              "-D - -o FILE: heads on stdout, body in the file", r)
        r = linkd(ctx, "-I", "-D", hd, rec.url("/c"))
        check(r.rc == 0 and heads(r.out)[0][0][0] == b"HTTP/1.1 200 OK" and
              heads(open(hd, "rb").read())[0][0][0] == b"HTTP/1.1 200 OK",
              "-I -D: the head printed and in the file", r)
        r = linkd(ctx, "get", "--json", "-D", hd, "-o", out, rec.url("/c"))
        doc = valid_json(ctx, r)
        check(r.rc == 0 and doc["exit"] == "ok" and heads(open(hd, "rb").read())[0],
              "--json -D FILE", r)
        # Bad input: nothing is sent.
        n = len(rec.records)
        for args, rc, needle in (
                (["-D", ctx.path("no/such/dir")], 73,
                 "-D %s: cannot write: No such file or directory" % ctx.path("no/such/dir")),
                (["-D", ctx.tmp], 73, "-D %s: cannot write: Is a directory" % ctx.tmp),
                (["-D", hd, "-o", hd], 64, "-D %s and -o %s are the same file" % (hd, hd)),
                (["--json", "-D", "-"], 64, "--json and -D - do not mix"),
                (["-D"], 64, "needs a URL")):
            r = linkd(ctx, "get", *args, rec.url("/c"))
            check(r.rc == rc and needle in r.err and r.out == b"",
                  "-D %s: exit %d, %r" % (args, rc, needle), r)
        check(len(rec.records) == n, "nothing sent for a -D that cannot be had", rec.records[n:])
        check(os.path.exists(hd), "the same-file refusal leaves an existing file")
        # A write that fails exits 73 and is reported as -o's is.
        full = "-D /dev/full: write failed: No space left on device"
        r = linkd(ctx, "get", "-D", "/dev/full", "-w", "%{exitcode} [%{errormsg}]", rec.url("/c"))
        check(r.rc == 73 and r.out == ("final73 [%s]" % full).encode() and full in r.err,
              "-D /dev/full: exit 73, -w and stderr say why", r)
        r = linkd(ctx, "get", "--json", "-s", "-D", "/dev/full", "-o", out, rec.url("/c"))
        doc = valid_json(ctx, r)
        check(r.rc == 73 and doc["output_error"] == full and r.err == "",
              "--json: output_error; -s: silent", r)
        r = to_full(ctx, "get", "-D", "-", "-o", out, rec.url("/c"))
        check(r.rc == 73 and r.err.count("stdout: write failed: No space left on device") == 1,
              "-D - to a full stdout: told once", r)
    # Also on HTTP errors, -f included (which prints no body).
    with Faultd(ctx, "status", "--status", "404") as fd:
        hd = ctx.path("err.txt")
        r = linkd(ctx, "get", "-f", "-D", hd, fd.url())
        hs, _ = heads(open(hd, "rb").read())
        check(r.rc == 22 and r.out == b"" and hs[0][0] == b"HTTP/1.1 404 Not Found",
              "-f -D: exit 22, no body, the head in the file", r)
        r = linkd(ctx, "get", "-D", "-", fd.url())
        check(r.rc == 2 and r.out.startswith(b"HTTP/1.1 404 Not Found\r\n") and
              r.out.endswith(b'\r\n\r\n{"status":404}'), "a 404: exit 2, head and body", r)
    # Retries: the head of the response the call ended with (-v shows the others).
    with Faultd(ctx, "status", "--script", "503,200") as fd:
        r = linkd(ctx, "get", "-D", "-", *FAST, fd.url())
        hs, body = heads(r.out)
        check(r.rc == 0 and [h[0] for h in hs] == [b"HTTP/1.1 200 OK"] and body == b'{"ok":true}',
              "a retried 503's head is not written", r)
    # No response at all: a file this run created is removed, as -o's.
    with Faultd(ctx, "refuse") as fd:
        hd = ctx.path("never.txt")
        r = linkd(ctx, "get", "-D", hd, "--max-attempts", "1", fd.url())
        check(r.rc == 3 or r.rc == 4, "refused", r)
        check(not os.path.exists(hd), "no response: -D leaves no file behind")


@case
def fail_with_body(ctx):
    with Faultd(ctx, "status", "--status", "404") as fd:
        r = linkd(ctx, "get", "--fail-with-body", "-w", "[%{exitcode} %{errormsg}]", fd.url())
        check(r.rc == 22 and
              r.out == b'{"status":404}[22 HTTP status >= 400 (--fail-with-body)]' and
              "[exit 22]" in r.err, "--fail-with-body: exit 22, the body printed", r)
        r = linkd(ctx, "get", "--fail-with-body", "-i", "-s", fd.url())
        check(r.rc == 22 and r.out.startswith(b"HTTP/1.1 404") and r.err == "",
              "with -i the head too; -s silent", r)
        r = linkd(ctx, "get", "--fail-with-body", "--json", "-o", ctx.path("b"), fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 22 and doc["exit"] == "http-fail" and
              open(ctx.path("b"), "rb").read() == b'{"status":404}', "--json: http-fail", r)
        n = len(fd.requests())
        r = linkd(ctx, "get", "-f", "--fail-with-body", fd.url())
        check(r.rc == 64 and "-f/--fail and --fail-with-body do not mix" in r.err and
              len(fd.requests()) == n, "not with -f", r)
    with Faultd(ctx, "ok") as fd:
        r = linkd(ctx, "get", "--fail-with-body", fd.url())
        check(r.rc == 0 and r.out == b'{"ok":true}', "a 200 is not a failure", r)


@case
def data_options(ctx):
    """curl's data options add up (joined with '&'); --data-urlencode encodes as curl does; -G
    puts the data in the query."""
    with Recorder() as rec:
        f = ctx.write("part.txt", b"a b\r\n")
        r = linkd(ctx, "post", "-d", "a=1", "--data-binary", "@" + f, "--data-raw", "@x",
                  "--data", "b=2", rec.url("/p"))
        check(r.rc == 0 and rec.records[-1]["body"] == b"a=1&a b\r\n&@x&b=2",
              "parts joined with '&', @FILE as is, --data-raw's '@' is text", rec.records[-1])
        check(rec.header("Content-Type", len(rec.records) - 1) ==
              ["application/x-www-form-urlencoded"], "the form type", rec.records[-1])
        every = ctx.write("every.bin", bytes(range(1, 256)))
        r = linkd(ctx, "post", "--data-urlencode", "q=a b&c=d", "--data-urlencode", "=é",
                  "--data-urlencode", "n@" + f, "--data-urlencode", "plain text",
                  "--data-urlencode", "m=x@y", "--data-urlencode", "@" + every, rec.url("/u"))
        # The encoding of curl 7.88 (checked against it): unreserved as is, a space as '+'.
        enc = "".join(chr(c) if chr(c).isalnum() and c < 128 or chr(c) in "-._~" else
                      "+" if c == 32 else "%%%02X" % c for c in range(1, 256))
        want = "q=a+b%26c%3Dd&%C3%A9&n=a+b%0D%0A&plain+text&m=x%40y&" + enc
        check(r.rc == 0 and rec.records[-1]["body"] == want.encode(),
              "--data-urlencode's forms", rec.records[-1]["body"][:300], want[:300])
        r = linkd(ctx, "put", "--data-urlencode", "s@-", rec.url("/s"), stdin=b"x y")
        check(r.rc == 0 and rec.records[-1]["body"] == b"s=x+y", "NAME@- reads stdin", r)
        # -G: the query instead of a body; GET (HEAD with -I), appended to a query given.
        r = linkd(ctx, "-G", "-d", "a=1", "--data-urlencode", "q=x y", rec.url("/g?k=v#frag"))
        q = rec.records[-1]
        check(r.rc == 0 and q["method"] == "GET" and q["path"] == "/g?k=v&a=1&q=x+y" and
              q["body"] == b"" and rec.header("Content-Type", len(rec.records) - 1) == [],
              "-G: data in the query", q)
        r = linkd(ctx, "get", "--get", "-d", "z=1", "-w", "%{url_effective}", rec.url("/g"))
        check(r.rc == 0 and rec.records[-1]["path"] == "/g?z=1" and
              r.out.endswith(rec.url("/g?z=1").encode()), "linkd get -G; url_effective", r)
        r = linkd(ctx, "-G", "-I", "-d", "h=1", rec.url("/h"))
        check(r.rc == 0 and rec.records[-1]["method"] == "HEAD" and
              rec.records[-1]["path"] == "/h?h=1", "-G -I: HEAD", rec.records[-1])
        r = linkd(ctx, "-G", "--json", "-d", "j=1", rec.url("/j"))
        doc = valid_json(ctx, r)
        check(doc["url"] == rec.url("/j?j=1") and doc["method"] == "GET", "--json's url", doc)
        # Bad input: a clear error, nothing sent.
        n = len(rec.records)
        missing = ctx.path("missing.txt")
        for args, rc, needle in (
                (["post", "--data-urlencode", "n@" + missing], 66,
                 "--data-urlencode n@%s: cannot read: No such file or directory" % missing),
                (["post", "--data-binary", "@" + missing], 66,
                 "--data-binary @%s: cannot read" % missing),
                (["post", "--data-urlencode", "n@"], 64, "a file name must follow '@'"),
                (["post", "-d", "@-", "--data-urlencode", "@-"], 64,
                 "-d @- and --data-urlencode @- do not mix: stdin is read once"),
                (["get", "-G", "-d", "a b"], 64,
                 "-G/--get: the data 'a b' makes no valid URL of"),
                (["get", "--data-raw", "x"], 64, "get sends no body"),
                (["post", "-G", "-d", "x"], 64, "-G/--get sends GET")):
            r = linkd(ctx, *args, rec.url("/bad"))
            check(r.rc == rc and needle in r.err, "%s: exit %d, %r" % (args, rc, needle), r)
        check(len(rec.records) == n, "nothing sent for bad data", rec.records[n:])
    # At most 64 MiB in all, whatever the parts.
    with Recorder() as rec:
        half = ctx.path("half.bin")
        with open(half, "wb") as fh:
            fh.truncate(33 << 20)
        r = linkd(ctx, "post", "-d", "@" + half, "--data-binary", "@" + half, rec.url("/big"))
        check(r.rc == 66 and "the data options make a body larger than 64 MiB" in r.err and
              rec.records == [], "two 33 MiB parts are over the limit", r)


@case
def user_and_agent(ctx):
    import base64
    with Recorder() as other:
        with Recorder() as rec:
            rec.locations["/away"] = (302, other.url("/landed"))
            r = linkd(ctx, "get", "-u", "ann:s3cr:t é", "-A", "tool/2", rec.url("/u"))
            auth = rec.header("Authorization")
            check(r.rc == 0 and len(auth) == 1 and auth[0].startswith("Basic ") and
                  base64.b64decode(auth[0][6:]) == "ann:s3cr:t é".encode(),
                  "-u: Basic, split at the first ':'", auth)
            check(rec.header("User-Agent") == ["tool/2"], "-A sets the User-Agent",
                  rec.headers())
            r = linkd(ctx, "get", "--user", "bob:", "--user-agent", "", rec.url("/u"))
            check(r.rc == 0 and rec.header("Authorization", 1) == ["Basic Ym9iOg=="] and
                  rec.header("User-Agent", 1) == [], "an empty password; -A '' sends none",
                  rec.headers(1))
            r = linkd(ctx, "get", "-u", "a:b", "-H", "Authorization: Bearer t", "-A", "x/1",
                      "-H", "User-Agent: h/1", rec.url("/u"))
            check(r.rc == 0 and rec.header("Authorization", 2) == ["Bearer t"] and
                  rec.header("User-Agent", 2) == ["h/1"], "-H wins over -u and -A, as curl",
                  rec.headers(2))
            cfg = ctx.write("ua.conf", "[defaults]\nheader = User-Agent: team/1\n"
                            "header = Authorization: Bearer cfg\n")
            r = linkd(ctx, "get", "--config", cfg, "-A", "flag/1", "-u", "c:d", rec.url("/u"))
            check(r.rc == 0 and rec.header("User-Agent", 3) == ["flag/1"] and
                  rec.header("Authorization", 3) == ["Basic Yzpk"],
                  "flags override the config's headers", rec.headers(3))
            r = linkd(ctx, "get", "-L", "-u", "a:b", rec.url("/away"))
            check(r.rc == 0 and other.header("Authorization") == [] and
                  rec.header("Authorization", 4) == ["Basic YTpi"],
                  "-u's credentials stay with their host on a redirect", other.records)
            n = len(rec.records)
            for args, needle in ((["-u", "ann"], "-u/--user 'ann' has no password"),
                                 (["-A", "a\x01b"], "-A/--user-agent: "),
                                 (["-u"], "needs a URL")):
                r = linkd(ctx, "get", *args, rec.url("/u"))
                check(r.rc == 64 and needle in r.err, "%s: exit 64, %r" % (args, needle), r)
            check(len(rec.records) == n, "nothing sent", rec.records[n:])
    # As curl: the password does not stay in the arguments other processes can read.
    with Faultd(ctx, "slow", "--delay-ms", "20000") as fd:
        p = subprocess.Popen([ctx.linkd, "get", "-u", "ann:hunter2", "--deadline", "20s",
                              "--attempt-timeout", "20s", fd.url()], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=base_env(ctx))
        try:
            check(len(fd.wait_requests(1)) == 1, "the request reached faultd")
            with open("/proc/%d/cmdline" % p.pid, "rb") as fh:
                cmdline = fh.read()
        finally:
            p.kill()
            p.communicate()
        check(b"hunter2" not in cmdline and b"ann:" not in cmdline and b"*" * 11 in cmdline,
              "-u's value is blanked in /proc/PID/cmdline", cmdline)


@case
def remote_name(ctx):
    work = ctx.path("work")
    os.makedirs(work)
    with Recorder(body=b"payload") as rec:
        r = linkd(ctx, "get", "-O", rec.url("/dir/file.json?x=1#f"), cwd=work)
        check(r.rc == 0 and r.out == b"" and os.listdir(work) == ["file.json"] and
              open(os.path.join(work, "file.json"), "rb").read() == b"payload",
              "-O: the path's last segment, in the working directory", r, os.listdir(work))
        r = linkd(ctx, "--remote-name", "-i", "--json", rec.url("/a%20b"), cwd=work)
        check(r.rc != 0, "--json -i still refused", r)
        r = linkd(ctx, "--remote-name", "--json", rec.url("/a%20b"), cwd=work)
        doc = valid_json(ctx, r)
        check(r.rc == 0 and open(os.path.join(work, "a%20b"), "rb").read() == b"payload",
              "--json -O: the body in the file, the name not decoded", doc)
        n = len(rec.records)
        for args, needle in (
                (["-O", rec.url("/")], "-O/--remote-name: '%s' has no file name" % rec.url("/")),
                (["-O", rec.url("/d/..")], "has no file name"),
                (["-O", "-o", "x", rec.url("/f")], "-o/--output and -O/--remote-name do not mix")):
            r = linkd(ctx, "get", *args, cwd=work)
            check(r.rc == 64 and needle in r.err, "%s: exit 64, %r" % (args, needle), r)
        check(len(rec.records) == n, "nothing sent", rec.records[n:])
    with Faultd(ctx, "refuse") as fd:
        r = linkd(ctx, "get", "-O", "--max-attempts", "1", fd.url("/gone.bin"), cwd=work)
        check(r.rc != 0 and not os.path.exists(os.path.join(work, "gone.bin")),
              "no response: no file left", r)


@case
def redirects(ctx):
    with Recorder() as other:
        with Recorder() as rec:
            rec.locations.update({
                "/a": (302, "/b"), "/b": (301, "http://127.0.0.1:%d/c" % rec.port),
                "/c": (307, "d"), "/loop": (302, "/loop"), "/see": (303, "/b"),
                "/away": (302, other.url("/landed")), "/ftp": (302, "ftp://x/"),
                "/file": (302, "file:///etc/passwd")})
            r = linkd(ctx, "get", rec.url("/a"))
            check(r.rc == 0 and r.out == b'{"echo":true}', "without -L: the 302 is the answer",
                  r)
            check(len(rec.records) == 1, "one request without -L", rec.records)
            r = linkd(ctx, "-L", "--json", rec.url("/a"))
            doc = valid_json(ctx, r)
            check(r.rc == 0 and doc["redirects"] == 3 and doc["url_effective"] == rec.url("/d")
                  and doc["url"] == rec.url("/a"), "-L follows 302, 301, 307 (relative)", doc)
            check([x["path"] for x in rec.records[1:]] == ["/a", "/b", "/c", "/d"], "paths",
                  rec.records)
            n = len(rec.records)
            r = linkd(ctx, "post", "-L", "-d", "body", "-w", "%{url_effective} %{num_attempts}",
                      rec.url("/c"))
            check(r.rc == 0 and r.out.endswith(("%s 2" % rec.url("/d")).encode()), "-w", r)
            check([(x["method"], x["body"]) for x in rec.records[n:]] ==
                  [("POST", b"body"), ("POST", b"body")], "307 keeps the method and body",
                  rec.records[n:])
            n = len(rec.records)
            r = linkd(ctx, "post", "-L", "-d", "body", rec.url("/see"))
            check(r.rc == 0 and [x["method"] for x in rec.records[n:]] ==
                  ["POST", "GET", "GET", "GET"] and rec.records[-1]["body"] == b"",
                  "303 makes a POST a GET, without the body", rec.records[n:])
            n = len(rec.records)
            r = linkd(ctx, "post", "-L", "-d", "body", rec.url("/b"))
            check(r.rc == 0 and [x["method"] for x in rec.records[n:]] == ["POST", "GET", "GET"],
                  "so does 301 (curl's rule)", rec.records[n:])
            n = len(rec.records)
            r = linkd(ctx, "get", "-L", "--max-redirs", "3", rec.url("/loop"))
            check(r.rc == 1 and "more than 3 redirects (--max-redirs)" in r.err and
                  len(rec.records) - n == 4, "--max-redirs bounds a loop", r)
            check(r.out == b"" and "[exit 1]" in r.err, "the summary, no redirect body", r)
            # A redirect not followed is reported as any failed call: JSON, -w (curl's 47).
            r = linkd(ctx, "get", "-L", "--max-redirs", "1", "--json", rec.url("/loop"))
            doc = valid_json(ctx, r)
            check(r.rc == 1 and doc["exit"] == "failure" and doc["redirects"] == 1 and
                  doc["result"]["stop"] == "more than 1 redirects (--max-redirs)" and
                  doc["response"]["status"] == 302, "--json after --max-redirs", doc)
            r = linkd(ctx, "get", "-L", "--max-redirs", "1", "-w",
                      "%{http_code} %{exitcode} %{num_attempts} [%{errormsg}]", rec.url("/loop"))
            check(r.rc == 1 and r.out == b"302 1 2 [more than 1 redirects (--max-redirs)]",
                  "-w after --max-redirs", r)
            # -s silences it, -S shows it again.
            r = linkd(ctx, "get", "-L", "-s", "--max-redirs", "0", rec.url("/loop"))
            check(r.rc == 1 and r.err == "", "-s: no redirect message", r)
            r = linkd(ctx, "get", "-L", "-sS", "--max-redirs", "0", rec.url("/loop"))
            check(r.rc == 1 and "more than 0 redirects" in r.err, "-sS shows it", r)
            n = len(rec.records)
            r = linkd(ctx, "get", "-L", rec.url("/loop"))
            check(r.rc == 1 and "more than 50 redirects" in r.err and len(rec.records) - n == 51,
                  "50 redirects by default, as curl", r)
            r = linkd(ctx, "get", "-L", "-v", "-H", "Authorization: Bearer s", "-H", "X-K: k",
                      rec.url("/away"))
            check(r.rc == 0 and other.header("X-K") == ["k"] and
                  other.header("Authorization") == [] and
                  rec.header("Authorization", len(rec.records) - 1) == ["Bearer s"],
                  "credentials stay with their host", r, other.records)
            check("* redirect 1: 302 to GET %s (another host" % other.url("/landed") in r.err,
                  "-v tells the redirect", r)
            r = linkd(ctx, "get", "-L", rec.url("/ftp"))
            check(r.rc == 1 and "not an http:// or https:// URL" in r.err, "no ftp", r)
            for path, loc in (("/ftp", "ftp://x/"), ("/file", "file:///etc/passwd")):
                r = linkd(ctx, "get", "-L", "--json", rec.url(path))
                doc = valid_json(ctx, r)
                check(r.rc == 1 and doc["result"]["stop"] ==
                      "redirect to '%s': not an http:// or https:// URL" % loc, "no %s" % loc, doc)
                r = linkd(ctx, "get", "-L", "-s", rec.url(path))
                check(r.rc == 1 and r.err == "" and r.out == b"", "-s: silent", r)


def heads(out):
    """-i output: the blocks of status line and headers, and what follows the last."""
    parts = out.split(b"\r\n\r\n")
    return [p.split(b"\r\n") for p in parts[:-1]], parts[-1]


@case
def redirect_heads(ctx):
    """-L -i prints every response's head, as curl: each hop's status line and headers, an
    empty line after each, then the last body."""
    with Recorder(body=b"final") as rec:
        rec.locations.update({"/a": (302, "/b"), "/b": (301, "/c"), "/c": (307, "d"),
                              "/loop": (302, "/loop")})
        r = linkd(ctx, "get", "-L", "-i", rec.url("/a"))
        hs, body = heads(r.out)
        check(r.rc == 0 and [h[0] for h in hs] ==
              [b"HTTP/1.1 302 Found", b"HTTP/1.1 301 Moved Permanently",
               b"HTTP/1.1 307 Temporary Redirect", b"HTTP/1.1 200 OK"] and body == b"final",
              "four heads in order, then the last body only", r)
        check([[x for x in h if x.startswith(b"Location: ")] for h in hs] ==
              [[b"Location: /b"], [b"Location: /c"], [b"Location: d"], []],
              "each head with its own headers", r)
        out = ctx.path("heads.out")
        r = linkd(ctx, "-L", "-i", "-o", out, rec.url("/b"))
        hs, body = heads(open(out, "rb").read())
        check(r.rc == 0 and r.out == b"" and len(hs) == 3 and body == b"final",
              "-o FILE gets them all too", r)
        r = linkd(ctx, "-L", "-I", rec.url("/c"))
        hs, body = heads(r.out)
        check(r.rc == 0 and [h[0] for h in hs] == [b"HTTP/1.1 307 Temporary Redirect",
                                                    b"HTTP/1.1 200 OK"] and body == b"",
              "-I -L: every head, no body", r)
        r = linkd(ctx, "get", "-i", rec.url("/a"))
        hs, body = heads(r.out)
        check(r.rc == 0 and [h[0] for h in hs] == [b"HTTP/1.1 302 Found"] and body == b"final",
              "without -L: the one response", r)
        r = linkd(ctx, "get", "-L", "-i", "--max-redirs", "2", rec.url("/loop"))
        hs, body = heads(r.out)
        check(r.rc == 1 and [h[0] for h in hs] == [b"HTTP/1.1 302 Found"] * 3 and body == b"",
              "a redirect not followed: the heads of all three, no body", r)
        r = linkd(ctx, "get", "-L", "--json", rec.url("/a"))
        doc = valid_json(ctx, r)
        check(doc["redirects"] == 3 and doc["response"]["status"] == 200, "--json: the last", r)
        r = linkd(ctx, "get", "-L", rec.url("/a"))
        check(r.rc == 0 and r.out == b"final", "-L without -i: the body only", r)


@case
def insecure(ctx):
    """-k and --cacert against an HTTPS server with a self-signed certificate (made by openssl
    here, with the address as subjectAltName so that verification can succeed)."""
    import ssl
    openssl = shutil.which("openssl")
    check(openssl is not None, "openssl is needed to make a test certificate")

    def make_cert(name):
        key, crt = ctx.path(name + "-k.pem"), ctx.path(name + "-c.pem")
        p = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            key, "-out", crt, "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"],
                           capture_output=True, timeout=60)
        check(p.returncode == 0, "openssl req failed", p.stderr.decode())
        return key, crt

    key, crt = make_cert("server")
    _, other_crt = make_cert("other")
    with Recorder() as rec:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(crt, key)
        rec.server.socket = tls.wrap_socket(rec.server.socket, server_side=True)
        url = "https://127.0.0.1:%d/tls" % rec.port
        r = linkd(ctx, "get", "--max-attempts", "1", "--json", url)
        doc = valid_json(ctx, r)
        check(r.rc != 0 and doc["result"]["timeline"][0]["failure"] == "TLS_FAILED",
              "an unknown certificate fails the TLS handshake", doc)
        check(rec.records == [], "nothing reached the server", rec.records)
        r = linkd(ctx, "-k", url)
        check(r.rc == 0 and r.out == b'{"echo":true}', "-k: the call goes through", r)
        r = linkd(ctx, "get", "--insecure", url)
        check(r.rc == 0 and len(rec.records) == 2, "--insecure too", r)
        # --cacert: the server's own certificate as the CA bundle verifies it, without -k.
        r = linkd(ctx, "get", "--cacert", crt, url)
        check(r.rc == 0 and r.out == b'{"echo":true}' and len(rec.records) == 3,
              "--cacert with the server's certificate: verified, the call goes through", r)
        # Another CA does not: the handshake fails (libcurl's 60, peer certificate not verified),
        # which is not retried (exit 3); nothing is sent.
        r = linkd(ctx, "get", "--cacert", other_crt, "--max-attempts", "2", "--json", url)
        doc = valid_json(ctx, r)
        tl = doc["result"]["timeline"]
        check(r.rc == 3 and [(a["failure"], a["curl_code"]) for a in tl] == [("TLS_FAILED", 60)],
              "a certificate the CA did not sign fails TLS and is not retried (exit 3)", r)
        check(len(rec.records) == 3, "nothing more reached the server", rec.records)
        # The config key does the same, and -v names where the setting came from.
        conf = ctx.write("ca.conf", "[defaults]\ncacert = %s\n" % crt)
        r = linkd(ctx, "get", "--config", conf, "-v", url)
        check(r.rc == 0 and len(rec.records) == 4, "cacert in the config file", r)
        check(re.search(r"\* cacert +%s +\(%s:2\)" % (re.escape(crt), re.escape(conf)), r.err),
              "-v shows the CA file and its config line", r)
        r = linkd(ctx, "get", "--config", conf, "--cacert", other_crt, "--max-attempts", "1", url)
        check(r.rc == 3 and len(rec.records) == 4, "--cacert overrides the config's cacert", r)
        r = linkd(ctx, "get", "--cacert", "", url)
        check(r.rc == 64 and "--cacert: a CA file must be a non-empty path" in r.err,
              "an empty --cacert is a usage error", r)


@case
def client_cert(ctx):
    """-E/--cert, --key and --pass against an HTTPS server that requires a client certificate
    signed by its CA (mutual TLS); the certificates are made by openssl here."""
    import ssl
    openssl = shutil.which("openssl")
    check(openssl is not None, "openssl is needed to make test certificates")

    def run_openssl(*args):
        p = subprocess.run([openssl, *args], capture_output=True, timeout=60)
        check(p.returncode == 0, "openssl %s failed" % args[0], p.stderr.decode())

    def make_cert(name):
        key, crt = ctx.path(name + "-k.pem"), ctx.path(name + "-c.pem")
        run_openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1")
        return key, crt

    skey, scrt = make_cert("server")
    ckey, ccrt = make_cert("client")
    okey, ocrt = make_cert("other")
    enc = ctx.path("enc-k.pem")
    run_openssl("pkey", "-in", ckey, "-aes256", "-passout", "pass:s3cret", "-out", enc)
    with open(ccrt, "rb") as a, open(ckey, "rb") as b:
        both = ctx.write("both.pem", a.read() + b.read())
    colon = ctx.write("cli:ent.pem", open(ccrt, "rb").read())
    with Recorder() as rec:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(scrt, skey)
        tls.verify_mode = ssl.CERT_REQUIRED
        tls.load_verify_locations(ccrt)
        rec.server.socket = tls.wrap_socket(rec.server.socket, server_side=True)
        url = "https://127.0.0.1:%d/mtls" % rec.port
        base = ("get", "--cacert", scrt, "--max-attempts", "3")

        def refused(r, what):
            # A TLS 1.3 server refuses a certificate after the client's side of the handshake:
            # its alert, read where the answer would be, is TLS_FAILED and not retried (exit
            # 3). This server closes at once, so the request's write or read may meet the
            # reset instead, and the kernel drops the unread alert: a reset, retried. Each
            # attempt races on its own, so resets may come before a final TLS_FAILED (exit 3)
            # or fill every attempt (exit 4). Either way nothing reached the server.
            doc = valid_json(ctx, r)
            kinds = [a["failure"] for a in doc["result"]["timeline"]]
            resets = {"RESET_BEFORE_SEND", "RESET_AFTER_SEND"}
            check(len(kinds) >= 1 and set(kinds[:-1]) <= resets and
                  ((r.rc == 3 and kinds[-1] == "TLS_FAILED") or
                   (r.rc == 4 and kinds[-1] in resets and len(kinds) == 3)),
                  what + ": resets, then TLS_FAILED or the last attempt", r)
            check(len(rec.records) == n_ok, what + ": nothing reached the server", rec.records)

        n_ok = 0
        refused(linkd(ctx, *base, "--json", url), "no client certificate")
        r = linkd(ctx, *base, "-E", ccrt, "--key", ckey, url)
        check(r.rc == 0 and r.out == b'{"echo":true}' and len(rec.records) == 1,
              "-E and --key: the server takes the certificate", r)
        r = linkd(ctx, *base, "--cert", both, url)
        check(r.rc == 0 and len(rec.records) == 2, "the key in the certificate's file", r)
        n_ok = 2
        refused(linkd(ctx, *base, "--cert", ocrt, "--key", okey, "--json", url),
                "a certificate the server's CA did not sign")
        # An encrypted key: its pass phrase after the file name (curl's FILE:PASS) or --pass;
        # without one the handshake fails, with no prompt.
        r = linkd(ctx, *base, "-E", ccrt + ":s3cret", "--key", enc, url)
        check(r.rc == 0 and len(rec.records) == 3, "-E FILE:PASS decrypts the key", r)
        r = linkd(ctx, *base, "-E", ccrt, "--key", enc, "--pass", "s3cret", "-v", "--json", url)
        doc = valid_json(ctx, r)
        pol = doc["policy"]
        check(r.rc == 0 and len(rec.records) == 4, "--pass decrypts the key", r)
        check(pol["client_cert"] == ccrt and pol["client_key"] == enc and pol["key_password"],
              "--json names the files and says a pass phrase is set", pol)
        check(re.search(r"\* cert +%s +\(command line\)" % re.escape(ccrt), r.err) and
              re.search(r"\* pass +\(set\)", r.err), "-v shows the certificate and (set)", r)
        check(b"s3cret" not in r.out and "s3cret" not in r.err, "the pass phrase is never shown", r)
        # (libcurl cannot load the key: its own error, before any connection)
        r = linkd(ctx, *base, "-E", ccrt, "--key", enc, "--json", url, timeout=30)
        doc = valid_json(ctx, r)
        check(r.rc == 3 and [(a["failure"], a["curl_code"]) for a in doc["result"]["timeline"]]
              == [("TLS_FAILED", 58)], "an encrypted key without its pass phrase: TLS_FAILED", r)
        # curl's escape: "\:" is a colon of the file name (whose key is then --key's).
        r = linkd(ctx, *base, "-E", colon.replace(":", "\\:"), "--key", ckey, url)
        check(r.rc == 0 and len(rec.records) == 5, "-E with an escaped colon in the name", r)
        # The config keys do the same; flags win.
        conf = ctx.write("mtls.conf", "[defaults]\ncert = %s\nkey = %s\n" % (ccrt, ckey))
        r = linkd(ctx, *base, "--config", conf, "-v", url)
        check(r.rc == 0 and len(rec.records) == 6, "cert and key in the config file", r)
        check(re.search(r"\* key +%s +\(%s:3\)" % (re.escape(ckey), re.escape(conf)), r.err),
              "-v shows the key file and its config line", r)
        n_ok = 6
        refused(linkd(ctx, *base, "--config", conf, "-E", ocrt, "--key", okey, "--json", url),
                "--cert and --key override the config's")
    r = linkd(ctx, "get", "--key", ckey, "http://127.0.0.1:1/")
    check(r.rc == 64 and "key is given without cert" in r.err, "--key alone: a usage error", r)
    r = linkd(ctx, "get", "--cert", "", "http://127.0.0.1:1/")
    check(r.rc == 64 and "--cert: a certificate file must be a non-empty path" in r.err,
          "an empty --cert: a usage error", r)


@case
def phase_timeouts(ctx):
    with Faultd(ctx, "slow", "--delay-ms", "20000") as fd:
        r = linkd(ctx, "get", "--first-byte-timeout", "150ms", "--attempt-timeout", "5s",
                  "--deadline", "20s", "--max-attempts", "1", "--json", fd.url())
        doc = valid_json(ctx, r)
        t = doc["result"]["timeline"]
        check(t[0]["failure"] == "FIRST_BYTE_TIMEOUT" and t[0]["duration_ms"] < 2500,
              "--first-byte-timeout ends the wait for the reply", doc)
        check(doc["policy"]["first_byte_timeout_ms"] == 150, "policy", doc["policy"])
        cfg = ctx.write("p.conf", "[defaults]\nidle-timeout = 1s\ndns-timeout = 2s\n"
                        "tls-timeout = 3s\nwrite-timeout = 4s\n")
        r = linkd(ctx, "get", "--config", cfg, "-v", "--max-time", "300ms", fd.url())
        for needle in ["* idle-timeout       1s", "(%s:2)" % cfg, "* dns-timeout        2s",
                       "* tls-timeout        3s", "* write-timeout      4s",
                       "* first-byte-timeout attempt timeout", "* deadline         300ms"]:
            check(needle in r.err, "-v lacks %r" % needle, r)
        r = linkd(ctx, "get", "--connect-timeout", "2s", "--attempt-timeout", "1s", fd.url())
        check(r.rc == 64 and "connect-timeout 2s is longer than attempt-timeout 1s" in r.err,
              "a connect timeout above the attempt's is refused", r)
        r = linkd(ctx, "get", "--config", ctx.write("c.conf", "[defaults]\nconnect-timeout = 1s\n"),
                  fd.url())
        check(r.rc == 78 and "connect-timeout 1s is longer than attempt-timeout 800ms" in r.err,
              "the same from the file is a config error", r)

# ------------------------------------------------------------------------------------------------
# Time: --deadline, --attempt-timeout, --connect-timeout
# ------------------------------------------------------------------------------------------------


@case
def deadline(ctx):
    with Faultd(ctx, "slow", "--delay-ms", "20000") as fd:
        r = linkd(ctx, "get", "--deadline", "400ms", "--attempt-timeout", "10s", "--json",
                  fd.url())
        check(r.rc == 5, "the deadline ends the call: exit 5", r)
        doc = valid_json(ctx, r)
        check(doc["exit"] == "deadline-exceeded" and doc["result"]["error"] == "EDEADLINE",
              "EDEADLINE", doc)
        check(doc["policy"]["deadline_ms"] == 400, "policy shows the flag", doc["policy"])
        t = doc["result"]["timeline"]
        check(len(t) == 1 and t[0]["timeout_ms"] <= 400,
              "the attempt gets min(10s, time left)", t)
        check(300 <= doc["result"]["elapsed_ms"] < 5000, "ends near 400ms, not 10s or 20s", doc)
        check(r.seconds < 8, "the process ends near the deadline", r)
        q = fd.wait_requests(1)[0]
        check(0 < int(q["deadline"]) <= 400, "Linkd-Deadline tells the server", q)


@case
def attempt_timeout(ctx):
    with Faultd(ctx, "slow", "--delay-ms", "20000") as fd:
        r = linkd(ctx, "get", "--attempt-timeout", "200ms", "--deadline", "20s",
                  "--max-attempts", "3", "--backoff", "fixed", *FAST, "--json", fd.url())
        check(r.rc == 4, "every attempt times out: retries exhausted, exit 4", r)
        doc = valid_json(ctx, r)
        t = doc["result"]["timeline"]
        check(len(t) == 3, "three attempts", t)
        for a in t:
            check(a["timeout_ms"] == 200, "each attempt capped at 200ms", a)
            check(a["failure"] == "READ_TIMEOUT" and a["request_sent"], "read timeout", a)
            check(150 <= a["duration_ms"] < 3000, "ends near 200ms", a)
        check(r.seconds < 12, "three short attempts, not 20s", r)
        check(len(fd.wait_requests(3)) == 3, "three requests reached faultd", fd.requests())


@case
def connect_timeout(ctx):
    with Faultd(ctx, "blackhole") as fd:
        r = linkd(ctx, "get", "--connect-timeout", "150ms", "--attempt-timeout", "5s",
                  "--deadline", "20s", "--max-attempts", "2", *FAST, "--json", fd.url())
        check(r.rc == 4, "connects time out, retried, exhausted", r)
        doc = valid_json(ctx, r)
        for a in doc["result"]["timeline"]:
            check(a["failure"] == "CONNECT_TIMEOUT" and not a["request_sent"],
                  "a connect timeout (not sent)", a)
            check(a["connect_timeout_ms"] == 150, "the flag's value was used", a)
            check(a["duration_ms"] < 2500, "ended by the connect timeout, not the 5s cap", a)
        check(doc["policy"]["connect_timeout_ms"] == 150, "policy", doc["policy"])

# ------------------------------------------------------------------------------------------------
# Retries: --max-attempts, --backoff, --base, --max-delay, --jitter, --retry-on, --budget
# ------------------------------------------------------------------------------------------------


@case
def max_attempts(ctx):
    with Faultd(ctx, "status", "--status", "503") as fd:
        r = linkd(ctx, "get", "--max-attempts", "3", *FAST, fd.url())
        check(r.rc == 4, "503 until attempts run out: exit 4", r)
        check(r.out == b'{"status":503}', "the last real response is printed", r)
        attempts = [q["attempt"] for q in fd.requests()]
        check(attempts == ["1", "2", "3"], "three attempts, numbered", attempts)
        r = linkd(ctx, "get", "--max-attempts", "1", fd.url())
        check(r.rc == 4 and len(fd.requests()) == 4, "one attempt only", r)


@case
def backoff(ctx):
    want = {"fixed": [20, 20, 20], "linear": [20, 40, 60], "exponential": [20, 40, 80],
            "exponential:3": [20, 60, 180]}
    with Faultd(ctx, "status", "--status", "503") as fd:
        for kind, expect in want.items():
            r = linkd(ctx, "get", "--backoff", kind, "--base", "20ms", "--max-delay", "10s",
                      "--jitter", "none", "--max-attempts", "4", "--json", fd.url())
            doc = valid_json(ctx, r)
            check(r.rc == 4 and delays(doc) == expect, "--backoff %s delays" % kind, doc)
            t = doc["result"]["timeline"]
            for prev, nxt, d in zip(t, t[1:], expect):
                gap = nxt["start_ms"] - prev["start_ms"] - prev["duration_ms"]
                check(gap >= d - 1, "the wait really happened (%s)" % kind, t)
        # --base and --max-delay shape the same curve.
        r = linkd(ctx, "get", "--base", "35ms", "--backoff", "fixed", "--jitter", "none",
                  "--max-attempts", "3", "--json", fd.url())
        check(delays(valid_json(ctx, r)) == [35, 35], "--base", r)
        r = linkd(ctx, "get", "--base", "20ms", "--max-delay", "50ms", "--jitter", "none",
                  "--max-attempts", "4", "--json", fd.url())
        check(delays(valid_json(ctx, r)) == [20, 40, 50], "--max-delay caps the delay", r)


@case
def jitter(ctx):
    common = ["--backoff", "fixed", "--base", "100ms", "--max-delay", "1s", "--max-attempts",
              "6", "--deadline", "30s", "--json"]
    with Faultd(ctx, "status", "--status", "503") as fd:
        def run(j):
            r = linkd(ctx, "get", "--jitter", j, *common, fd.url())
            d = delays(valid_json(ctx, r))
            check(r.rc == 4 and len(d) == 5, "five delays", r)
            return d
        d = run("none")
        check(d == [100] * 5, "none: exactly the base", d)
        d = run("full")
        check(all(0 <= x <= 100 for x in d) and d != [100] * 5, "full: [0, 100]", d)
        d = run("equal")
        check(all(50 <= x <= 100 for x in d) and d != [100] * 5, "equal: [50, 100]", d)
        d = run("symmetric:0.2")
        check(all(80 <= x <= 120 for x in d) and d != [100] * 5, "symmetric:0.2: [80, 120]", d)
        d = run("decorrelated")
        prev = 100
        for x in d:
            check(100 <= x <= min(1000, 3 * prev), "decorrelated: [base, 3 * previous]", d)
            prev = x
        check(d != [100] * 5, "decorrelated varies", d)


@case
def idempotency_key(ctx):
    def call(method, *flags):
        with Faultd(ctx, "status", "--script", "503,503,200") as fd:
            r = linkd(ctx, method, *flags, *FAST, "--json", fd.url())
            return r, valid_json(ctx, r), [q["idempotency_key"] for q in fd.requests()]
    r, doc, keys = call("post", "--idempotency-key", "auto")
    check(r.rc == 0 and len(keys) == 3, "a POST with a key is retried after 503s", r)
    check(len(set(keys)) == 1 and UUID_RE.match(keys[0]), "one UUIDv4, same on every attempt",
          keys)
    check(doc["result"]["idempotency_key"] == keys[0], "the result reports the key", doc)
    r, doc, keys = call("post", "--idempotency-key", "order-7")
    check(r.rc == 0 and keys == ["order-7"] * 3, "a given key on every attempt", keys)
    check(doc["policy"]["idempotency_key"] == "key", "policy mode", doc)
    r, doc, keys = call("post", "--idempotency-key", "none")
    check(r.rc == 2 and keys == [None], "no key: a POST is not retried after a 503", r)
    r, doc, keys = call("post")
    check(r.rc == 2 and keys == [None], "the default is none", r)
    r, doc, keys = call("get", "--idempotency-key", "auto")
    check(r.rc == 0 and keys == [None] * 3, "auto: no key for an idempotent GET", keys)
    r, doc, keys = call("get", "--idempotency-key", "always")
    check(r.rc == 0 and len(set(keys)) == 1 and keys[0] and len(keys) == 3,
          "always: a key even on GET", keys)


@case
def retry_on(ctx):
    def attempts(mode_args, *flags, method="get"):
        with Faultd(ctx, *mode_args) as fd:
            r = linkd(ctx, method, "--max-attempts", "2", *FAST, *flags, fd.url())
            return r, len(fd.requests())
    r, n = attempts(["status", "--status", "503"], "--retry-on", "429")
    check(r.rc == 2 and n == 1, "503 not in '429': not retried, exit 2", r)
    r, n = attempts(["status", "--status", "503"], "--retry-on", "-503")
    check(r.rc == 2 and n == 1, "'-503' removes it", r)
    r, n = attempts(["status", "--status", "503"], "--retry-on", "503,read-timeout")
    check(r.rc == 4 and n == 2, "'503,...' retries it", r)
    r, n = attempts(["status", "--status", "408"])
    check(r.rc == 4 and n == 2, "408 is retried by default", r)
    r, n = attempts(["status", "--status", "408"], "--retry-on=-408")
    check(r.rc == 2 and n == 1, "'-408' turns that off", r)
    r, n = attempts(["status", "--status", "404"], "--retry-on", "+client-4xx")
    check(r.rc == 4 and n == 2, "'+client-4xx' makes a 404 retryable", r)
    r, n = attempts(["read_then_close"], "--retry-on", "503")
    check(r.rc == 3 and n == 1, "an empty response outside the set: not retryable, exit 3", r)
    r, n = attempts(["read_then_close"], "--retry-on", "503,empty-response")
    check(r.rc == 4 and n == 2, "kinds by name", r)


@case
def budget(ctx):
    def call(spec):
        with Faultd(ctx, "status", "--status", "503") as fd:
            r = linkd(ctx, "get", "--max-attempts", "5", *FAST, "--budget", spec, "--json",
                      fd.url())
            return r, valid_json(ctx, r), len(fd.requests())
    r, doc, n = call("tokens:2")
    check(r.rc == 6 and n == 1, "tokens:2: the first failure leaves too few tokens, exit 6", r)
    check(doc["result"]["error"] == "EBUDGET" and doc["exit"] == "refused", "EBUDGET", doc)
    check(doc["result"]["timeline"][-1]["decision"] == "BUDGET", "decision BUDGET", doc)
    check(doc["policy"]["budget"] == "tokens:2:0.1", "policy shows the budget", doc["policy"])
    r, doc, n = call("quota:10")
    check(r.rc == 6 and n == 3, "quota:10 pays for two retries of cost 5", r)
    r, doc, n = call("ratio:20%:min=0")
    check(r.rc == 6 and n == 1, "ratio 20% of one request is less than one retry", r)
    r, doc, n = call("ratio:20%")
    check(r.rc == 4 and n == 5, "the ratio's floor (10/s) allows these retries", r)
    r, doc, n = call("none")
    check(r.rc == 4 and n == 5 and doc["policy"]["budget"] == "none", "no budget", r)

# ------------------------------------------------------------------------------------------------
# Reports: --json and its schema, -v
# ------------------------------------------------------------------------------------------------


@case
def json_schema(ctx):
    docs = []
    with Faultd(ctx, "status", "--script", "503,429:ra=1,200") as fd:
        r = linkd(ctx, "post", "--idempotency-key", "auto", *FAST, "--json", fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 0 and doc["result"]["ok"] and doc["response"]["status"] == 200, "ok", doc)
        t = doc["result"]["timeline"]
        check([a["failure"] for a in t] == ["HTTP_503", "TOO_MANY_REQUESTS", "NONE"], "kinds", t)
        check(t[1]["retry_after_ms"] == 1000 and t[1]["delay_ms"] == 1000,
              "Retry-After honoured", t)
        check([a["decision"] for a in t] == ["RETRY", "RETRY", "SUCCESS"], "decisions", t)
        check(any(h["name"].lower() == "content-type" for h in doc["response"]["headers"]),
              "response headers", doc["response"])
        check(doc["response"]["version"] == "1.1" and doc["response"]["reason"] == "OK",
              "the status line's version and reason", doc["response"])
        check(doc["policy"]["verify_tls"] is True and doc["policy"]["ca_file"] is None,
              "TLS settings", doc["policy"])
        docs.append(doc)
    with Faultd(ctx, "refuse") as fd:
        r = linkd(ctx, "delete", "--max-attempts", "2", *FAST, "--json", fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 4 and doc["response"] is None and doc["result"]["status"] == 0,
              "no response: null", doc)
        check(doc["result"]["timeline"][0]["failure"] == "CONNECT_REFUSED", "refused", doc)
        docs.append(doc)
    with Faultd(ctx, "read_then_reset") as fd:
        cfg = ctx.write("j.conf", '[defaults]\ndeadline = 2500ms\n[host "127.0.0.1"]\n'
                        'jitter = full\n')
        r = linkd(ctx, "post", "--config", cfg, "-d", "x", "--json", fd.url())
        doc = valid_json(ctx, r)
        check(r.rc == 3 and doc["exit"] == "not-retryable", "reset after send, POST", doc)
        check(doc["config"] == {"path": cfg, "sections": ["defaults", 'host "127.0.0.1"']},
              "config and sections", doc["config"])
        check(doc["policy"]["deadline_ms"] == 2500 and doc["policy"]["jitter"] == "full",
              "policy from the file", doc["policy"])
        docs.append(doc)
    with ctx_schema_roundtrip(ctx, docs):
        pass


class ctx_schema_roundtrip:
    """Checks that the validator and schema reject broken documents (the schema test must be
    able to fail)."""

    def __init__(self, ctx, docs):
        self.ctx, self.docs = ctx, docs

    def __enter__(self):
        import copy
        base = self.docs[0]
        mutations = [
            ("timeline entry without phase", lambda d: d["result"]["timeline"][0].pop("phase")),
            ("exit_code as a string", lambda d: d.__setitem__("exit_code", "0")),
            ("unknown backoff", lambda d: d["policy"].__setitem__("backoff", "random")),
            ("extra top-level key", lambda d: d.__setitem__("extra", 1)),
            ("bad decision", lambda d: d["result"]["timeline"][0].__setitem__("decision", "MAYBE")),
            ("header without value", lambda d: d["response"]["headers"][0].pop("value")),
            ("version as a number", lambda d: d["response"].__setitem__("version", 1.1)),
            ("negative duration", lambda d: d["result"]["timeline"][0].__setitem__("duration_ms",
                                                                                 -1)),
            ("bool as a number", lambda d: d["result"].__setitem__("attempts", True)),
            ("missing result", lambda d: d.pop("result")),
            ("bad budget", lambda d: d["policy"].__setitem__("budget", "lots")),
            ("output_error as a number", lambda d: d.__setitem__("output_error", 73)),
            ("exit_code 64 in a result", lambda d: d.__setitem__("exit_code", 64)),
        ]
        for name, mutate in mutations:
            d = copy.deepcopy(base)
            mutate(d)
            check(schema_errors(self.ctx, d), "the schema accepts a broken document: " + name)
        try:
            schema_lite.validate(1, {"type": "integer", "multipleOf": 2})
            raise Fail("the validator ignored an unknown keyword")
        except ValueError:
            pass
        return self

    def __exit__(self, *exc):
        return False


@case
def verbose(ctx):
    with Faultd(ctx, "status", "--script", "503,429:ra=1,200") as fd:
        r = linkd(ctx, "get", "-v", "--base", "10ms", "--jitter", "none", fd.url())
        check(r.rc == 0 and r.out == b'{"ok":true}', "stdout is only the body", r)
        e = r.err
        for needle in ["* linkd ", "GET %s\n" % fd.url(), "* config: none",
                       "* deadline         3s", "(default)",
                       "* base             10ms", "(command line)",
                       "* retry-on         default",
                       "* attempt 1 at +",
                       "phase DONE, status 503, outcome HTTP_503 (may have been processed)",
                       "*   decision RETRY, delay 10ms: retry HTTP_503",
                       "* attempt 2 at +",
                       "status 429, outcome TOO_MANY_REQUESTS (refused by the server)",
                       "Retry-After 1s",
                       "*   decision RETRY, delay 1s (from Retry-After): retry TOO_MANY_REQUESTS",
                       "reused connection",
                       "* attempt 3 at +",
                       "*   decision SUCCESS: success",
                       "linkd: GET %s: ok (OK, NONE), 3 attempts in" % fd.url(), "[exit 0]"]:
            check(needle in e, "-v output lacks %r" % needle, r)
        check(e.index("* attempt 1") < e.index("* attempt 2") < e.index("* attempt 3"),
              "attempts in order", r)
    # -v streams: attempt 1 is on stderr while the call still waits out a 2 s Retry-After
    with Faultd(ctx, "status", "--script", "429:ra=2,200") as fd:
        p = subprocess.Popen([ctx.linkd, "get", "-v", "--jitter", "none", fd.url()],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(ctx))
        try:
            seen, t0 = b"", time.monotonic()
            while b"*   decision RETRY" not in seen and time.monotonic() - t0 < 10:
                line = p.stderr.readline()
                if not line:
                    break
                seen += line
            running = p.poll() is None
            check(b"*   decision RETRY, delay 2s (from Retry-After)" in seen,
                  "attempt 1 and its decision printed", seen)
            check(running and time.monotonic() - t0 < 1.5,
                  "printed while the call was still waiting, not after it", seen)
            out, err = p.communicate(timeout=20)
            check(p.returncode == 0 and b"* attempt 2 at +" in err, "then attempt 2", err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    with Faultd(ctx, "refuse") as fd:
        r = linkd(ctx, "post", "--verbose", "--max-attempts", "2", *FAST, fd.url())
        check(r.rc == 4, "exhausted", r)
        for needle in ["outcome CONNECT_REFUSED (not sent)", "request not fully sent",
                       "*   decision RETRY, delay 1ms: retry CONNECT_REFUSED",
                       "*   decision ATTEMPTS: attempts exhausted", "[exit 4]"]:
            check(needle in r.err, "-v output lacks %r" % needle, r)

# ------------------------------------------------------------------------------------------------
# Exit codes and cancellation
# ------------------------------------------------------------------------------------------------


@case
def exit_codes(ctx):
    table = [
        (0, ["ok"], ["get"]),
        (2, ["status", "--status", "404"], ["get"]),
        (3, ["read_then_reset"], ["post", "-d", "x"]),
        (4, ["status", "--status", "503"], ["get", "--max-attempts", "2"] + FAST),
        (5, ["slow", "--delay-ms", "20000"], ["get", "--deadline", "300ms"]),
        (6, ["status", "--status", "503"], ["get", "--budget", "tokens:2"] + FAST),
    ]
    for code, mode, args in table:
        with Faultd(ctx, *mode) as fd:
            r = linkd(ctx, *args, "--json", fd.url())
            check(r.rc == code, "expected exit %d for %s %s" % (code, mode, args), r)
            valid_json(ctx, r)
    # 3 is also a kind --retry-on leaves out: by default dns-failed (an empty host here).
    r = linkd(ctx, "get", "--json", "http:///x")
    doc = valid_json(ctx, r)
    check(r.rc == 3 and doc["result"]["timeline"][-1]["failure"] == "DNS_FAILED",
          "a DNS failure is not retried: exit 3", r)
    with Faultd(ctx, "ok") as fd:
        r = linkd(ctx, "get", "--deadline", "soon", fd.url())
        check(r.rc == 64, "usage error: 64", r)
        r = linkd(ctx, "post", "-d", "@" + ctx.path("nope"), fd.url())
        check(r.rc == 66, "unreadable body: 66", r)
        r = linkd(ctx, "get", "-o", ctx.path("no/such/dir"), fd.url())
        check(r.rc == 73, "unwritable output: 73", r)
        r = linkd(ctx, "get", "--config", ctx.write("bad.conf", "[defaults]\nnope = 1\n"),
                  fd.url())
        check(r.rc == 78, "config error: 78", r)
        check(fd.requests() == [], "no call made for any of these", fd.requests())


def cancel_with(ctx, sig):
    with Faultd(ctx, "slow", "--delay-ms", "30000") as fd:
        e = base_env(ctx)
        p = subprocess.Popen([ctx.linkd, "get", "--deadline", "60s", "--attempt-timeout", "50s",
                              "--json", fd.url()], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=e)
        try:
            check(len(fd.wait_requests(1)) == 1, "the request reached faultd")
            t0 = time.monotonic()
            p.send_signal(sig)
            out, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        r = Run(p.returncode, out, err.decode(), time.monotonic() - t0)
        check(r.rc == 130, "a cancelled call exits 130", r)
        check(r.seconds < 10, "cancellation is prompt", r)
        doc = valid_json(ctx, r)
        check(doc["exit"] == "cancelled" and doc["result"]["error"] == "ECANCELED", "ECANCELED",
              doc)
        check(doc["result"]["timeline"][-1]["failure"] == "CANCELLED", "last attempt CANCELLED",
              doc)
        check("operation cancelled" in r.err, "summary says cancelled", r)


@case
def sigint_cancels(ctx):
    cancel_with(ctx, signal.SIGINT)


@case
def sigterm_cancels(ctx):
    cancel_with(ctx, signal.SIGTERM)

# ------------------------------------------------------------------------------------------------
# Config file
# ------------------------------------------------------------------------------------------------

CFG2 = "[defaults]\nmax-attempts = 2\nbase = 1ms\njitter = none\n"


@case
def config_sources(ctx):
    with Faultd(ctx, "status", "--status", "503") as fd:
        def n_attempts(*args, env=None):
            before = len(fd.requests())
            r = linkd(ctx, "get", *args, fd.url(), env=env)
            check(r.rc == 4, "exhausted", r)
            return len(fd.requests()) - before
        cfg = ctx.write("a.conf", CFG2)
        check(n_attempts("--config", cfg) == 2, "--config FILE")
        check(n_attempts(env={"LINKD_CONFIG": cfg}) == 2, "$LINKD_CONFIG")
        os.makedirs(os.path.join(ctx.home, ".config", "linkd"))
        shutil.copy(cfg, os.path.join(ctx.home, ".config", "linkd", "linkd.conf"))
        check(n_attempts() == 2, "~/.config/linkd/linkd.conf")
        xdg = ctx.path("xdg")
        os.makedirs(os.path.join(xdg, "linkd"))
        with open(os.path.join(xdg, "linkd", "linkd.conf"), "w") as f:
            f.write(CFG2.replace("max-attempts = 2", "max-attempts = 3"))
        check(n_attempts(env={"XDG_CONFIG_HOME": xdg}) == 3, "$XDG_CONFIG_HOME/linkd/linkd.conf")
        check(n_attempts("--config", cfg, env={"LINKD_CONFIG": ctx.path("missing")}) == 2,
              "--config wins over $LINKD_CONFIG")
        bad = ctx.write("bad.conf", "[defaults]\nmax-attempts = lots\n")
        check(n_attempts("--no-config", *FAST, env={"LINKD_CONFIG": bad}) == 4,
              "--no-config reads nothing (library default: 4 attempts)")


@case
def config_host_override(ctx):
    with Faultd(ctx, "status", "--status", "503") as fd:
        text = (CFG2 + '[host "localhost"]\nmax-attempts = 5\n'
                '[host "127.0.0.1"]\nmax-attempts = 3\ndeadline = 9s\n')
        cfg = ctx.write("h.conf", text)
        r = linkd(ctx, "get", "--config", cfg, "-v", fd.url())
        check(r.rc == 4 and len(fd.requests()) == 3, "the host section overrides [defaults]", r)
        check("* max-attempts     3" in r.err and "(%s:8)" % cfg in r.err,
              "-v names the file and line", r)
        check('sections: [defaults] [host "127.0.0.1"]' in r.err, "-v lists the sections", r)
        cfg = ctx.write("hp.conf", text + '[host "127.0.0.1:%d"]\nmax-attempts = 4\n' % fd.port)
        r = linkd(ctx, "get", "--config", cfg, "--json", fd.url())
        doc = valid_json(ctx, r)
        check(len(fd.requests()) == 7, "host:port is applied last", fd.requests())
        check(doc["config"]["sections"] == ["defaults", 'host "127.0.0.1"',
                                            'host "127.0.0.1:%d"' % fd.port], "sections", doc)
        check(doc["policy"]["deadline_ms"] == 9000, "host values the port section keeps", doc)
        cfg = ctx.write("other.conf", text.replace("127.0.0.1", "127.0.0.2"))
        r = linkd(ctx, "get", "--config", cfg, fd.url())
        check(len(fd.requests()) == 9, "another host's section does not apply", fd.requests())


@case
def flags_override_config(ctx):
    with Faultd(ctx, "status", "--status", "503") as fd:
        cfg = ctx.write("f.conf", CFG2 + "retry-on = 429\n")
        r = linkd(ctx, "get", "--config", cfg, "--max-attempts", "3", "--retry-on", "+503", "-v",
                  fd.url())
        check(r.rc == 4 and len(fd.requests()) == 3, "--max-attempts beats the file", r)
        check("* max-attempts     3" in r.err and "(command line)" in r.err, "-v origin", r)
        check("* base             1ms" in r.err and "(%s:3)" % cfg in r.err, "file origin", r)
        r = linkd(ctx, "get", "--config", cfg, fd.url())
        check(r.rc == 2 and len(fd.requests()) == 4, "the file's retry-on alone: 503 not retried",
              r)


@case
def config_errors(ctx):
    cases = [
        ("[defaults]\ndeadline = 3s\ndedline = 4s\n", 3, "unknown key 'dedline'"),
        ("[defaults]\ndeadline = soon\n", 2, "deadline: 'soon' is not a duration"),
        ("[defaults]\nretry-on = 404\n", 2, "status 404 has no kind of its own"),
        ("[defaults]\n\nthis is not ini\n", 3, "syntax error"),
        ("[defaults]\nbase = 1ms\nbase = 2ms\n", 3, "already set in this section on line 2"),
        ("[defaults]\nidempotency-key = abc\n", 2, "a fixed key in a config file"),
        ('[host "127.0.0.1"]\nheader = Idempotency-Key: fixed\n', 2,
         "header: a fixed Idempotency-Key in a config file"),
        ("[defaults]\n[host \"example.com\"]\njitter = sometimes\n", 3,
         "jitter: 'sometimes' is not a jitter"),
        ("[server]\nbase = 1ms\n", 2, "unknown section [server]"),
        ("base = 1ms\n", 1, "must follow a section header"),
        ("[defaults]\nheader = X: " + "y" * 300 + "\n", 2, "line too long"),
    ]
    with Faultd(ctx, "ok") as fd:
        for i, (text, line, needle) in enumerate(cases):
            cfg = ctx.write("e%d.conf" % i, text)
            r = linkd(ctx, "get", "-s", "--config", cfg, fd.url())
            check(r.rc == 78, "a bad config exits 78 (EX_CONFIG)", text, r)
            prefix = "linkd: config error: %s:%d: " % (cfg, line)
            check(r.err.startswith(prefix) and needle in r.err,
                  "expected %r ... %r" % (prefix, needle), r)
        r = linkd(ctx, "get", "--config", ctx.path("absent.conf"), fd.url())
        check(r.rc == 78 and "absent.conf: cannot open" in r.err, "a missing --config", r)
        r = linkd(ctx, "get", fd.url(), env={"LINKD_CONFIG": ctx.path("absent.conf")})
        check(r.rc == 78, "a missing $LINKD_CONFIG is an error too", r)
        r = linkd(ctx, "get", "--config", ctx.write("m.conf", "[defaults]\nbase = 5s\n"
                                                   "max-delay = 1s\n"), fd.url())
        check(r.rc == 78 and "max-delay 1s is less than base 5s" in r.err, "combination", r)
        r = linkd(ctx, "get", "--config", ctx.write("m2.conf", "[defaults]\nbase = 5s\n"),
                  "--max-delay", "1s", fd.url())
        check(r.rc == 64, "the same with a flag involved is a usage error", r)
        os.makedirs(os.path.join(ctx.home, ".config", "linkd"))
        with open(os.path.join(ctx.home, ".config", "linkd", "linkd.conf"), "w") as f:
            f.write("[defaults]\nmax_attempts = 2\n")
        r = linkd(ctx, "get", fd.url())
        check(r.rc == 78 and "linkd.conf:2: unknown key 'max_attempts'" in r.err,
              "the default file is checked as strictly", r)
        check(fd.requests() == [], "no call with a bad config", fd.requests())


# ------------------------------------------------------------------------------------------------
# --compressed, --resolve, --connect-to
# ------------------------------------------------------------------------------------------------


class RawServer:
    """Answers the n-th request with the n-th of `responses` (the last repeats), exact bytes,
    then closes the connection; keeps each request head."""

    def __init__(self, responses):
        import socket
        self.responses = list(responses)
        self.heads = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            c.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if b"\r\n\r\n" in data:
                    self.heads.append(data.split(b"\r\n\r\n")[0].decode("latin-1"))
                    k = len(self.heads) - 1
                    c.sendall(self.responses[min(k, len(self.responses) - 1)])
                c.shutdown(1)
                c.recv(65536)
            except OSError:
                pass
            c.close()

    def url(self, path="/z"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()
        self.sock.close()


def gz_response(body, coding="gzip", length=None, extra=b""):
    length = len(body) if length is None else length
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (coding.encode(), length)) + body + extra


@case
def compressed(ctx):
    import gzip
    text = b"hello linkd, " * 2000
    z = gzip.compress(text)
    with RawServer([gz_response(z)]) as srv:
        r = linkd(ctx, "get", "--compressed", srv.url())
        check(r.rc == 0 and r.out == text, "--compressed prints the decoded body", r)
        check("\r\nAccept-Encoding: gzip, deflate" in srv.heads[-1], "it asks for gzip, deflate",
              srv.heads)
        r = linkd(ctx, "--compressed", "-i", "-v", srv.url())
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n" \
            b"Content-Length: %d\r\n\r\n" % len(z)
        check(r.rc == 0 and r.out == head + text, "-i: the head as received, the body decoded", r)
        check(re.search(r"^\* compressed +gzip, deflate", r.err, re.M), "-v says so", r)
        dump = ctx.path("heads.txt")
        r = linkd(ctx, "get", "--compressed", "-D", dump, srv.url())
        check(r.rc == 0 and open(dump, "rb").read() == head and r.out == text, "-D as well", r)
        # Without --compressed nothing is decoded, even with one's own Accept-Encoding.
        r = linkd(ctx, "get", "-H", "Accept-Encoding: gzip", srv.url())
        check(r.rc == 0 and r.out == z, "-H 'Accept-Encoding: gzip' alone: the gzip bytes", r)
        check("Accept-Encoding: gzip\r\n" in srv.heads[-1] + "\r\n", "its header went", srv.heads)
        r = linkd(ctx, "get", srv.url())
        check(r.rc == 0 and r.out == z and "Accept-Encoding" not in srv.heads[-1],
              "no --compressed: no Accept-Encoding, nothing decoded", r)
    # A gzip bomb: 80 MiB of zeros in 80 KiB. The 64 MiB limit counts decoded bytes.
    bomb = gzip.compress(b"\0" * (80 << 20), compresslevel=9)
    with RawServer([gz_response(bomb)]) as srv:
        r = linkd(ctx, "get", "--compressed", "--json", "-o", ctx.path("bomb.out"), srv.url())
        doc = valid_json(ctx, r)
        check(r.rc == 1 and doc["result"]["error"] == "ETOOBIG" and len(srv.heads) == 1,
              "a gzip bomb ends at the limit, exit 1, not retried", r)
        check(r.seconds < 10, "quickly", r)
        check(doc["policy"]["compressed"] is True, "--json's policy says compressed", r)
    # Broken bodies: retried as broken responses are, then exit 4 (a GET) or 3 (a POST).
    cases = [("corrupt", gz_response(b"\x1f\x8b\x08\x00" + b"X" * 20), "JUNK_RESPONSE"),
             ("cut short", gz_response(z[:len(z) // 2]), "PARTIAL_BODY"),
             ("no trailer", gz_response(z[:-8]), "PARTIAL_BODY"),
             ("bad checksum", gz_response(z[:-8] + b"\0\0\0\0" + z[-4:]), "JUNK_RESPONSE"),
             ("not asked for", gz_response(b"hello", coding="br"), "JUNK_RESPONSE")]
    for what, resp, kind in cases:
        with RawServer([resp]) as srv:
            r = linkd(ctx, "get", "--compressed", "--json", "--max-attempts", "2", *FAST,
                      srv.url())
            doc = valid_json(ctx, r)
            tl = doc["result"]["timeline"]
            check(r.rc == 4 and [(a["failure"], a["phase"]) for a in tl] == [(kind, "RECEIVE")] * 2,
                  "%s: %s in RECEIVE, retried, exit 4" % (what, kind), r)
            check(doc["response"]["complete"] is False, "%s: the body is not complete" % what, r)
            r = linkd(ctx, "post", "--compressed", "-d", "x", "--json", srv.url())
            doc = valid_json(ctx, r)
            check(r.rc == 3 and doc["result"]["attempts"] == 1,
                  "%s: a POST without a key is not retried (exit 3)" % what, r)


@case
def resolve_connect_to(ctx):
    with Recorder(statuses=(503, 503, 200)) as rec:
        p = rec.port
        r = linkd(ctx, "get", "--resolve", "books.test:%d:127.0.0.1" % p, *FAST,
                  "http://books.test:%d/r" % p)
        check(r.rc == 0 and r.out == b'{"echo":true}', "--resolve: a made-up name reaches it", r)
        check(len(rec.records) == 3, "every attempt went there (503, 503, 200)", rec.records)
        check(all(rec.header("Host", i) == ["books.test:%d" % p] for i in range(3)),
              "with the URL's Host", rec.records)
        rec.records.clear()
        rec.statuses = [503, 200]
        r = linkd(ctx, "get", "--connect-to", "books.test:80:127.0.0.1:%d" % p, *FAST,
                  "http://books.test/r")
        check(r.rc == 0 and len(rec.records) == 2, "--connect-to, on every attempt", r)
        check(rec.header("Host", 1) == ["books.test"], "Host is the URL's", rec.records)
        # Repeatable: the first connect-to that matches wins; a resolve for another name is idle.
        rec.records.clear()
        r = linkd(ctx, "get", "--connect-to", "other.test:80:127.0.0.1:1", "--connect-to",
                  "::127.0.0.1:%d" % p, "--resolve", "x.test:1:10.0.0.1", *FAST,
                  "http://books.test/r", "-v")
        check(r.rc == 0 and len(rec.records) >= 1, "entries that do not match are skipped", r)
        check(re.search(r"^\* connect-to +::127\.0\.0\.1:%d +\(command line\)" % p, r.err, re.M) and
              re.search(r"^\* resolve +x\.test:1:10\.0\.0\.1 +\(command line\)", r.err, re.M),
              "-v lists them", r)
        # The config file: keys of the same names, per host too; the flags' entries come first.
        rec.records.clear()
        conf = ctx.write("net.conf", "[defaults]\nresolve = books.test:%d:127.0.0.1\n"
                         "[host \"shelf.test\"]\nconnect-to = shelf.test:80:127.0.0.1:1\n" % p)
        r = linkd(ctx, "get", "--config", conf, "-v", *FAST, "http://books.test:%d/r" % p)
        check(r.rc == 0 and rec.header("Host", 0) == ["books.test:%d" % p], "resolve in config", r)
        check(re.search(r"^\* resolve +books\.test:%d:127\.0\.0\.1 +\(%s:2\)" % (p, re.escape(conf)),
                        r.err, re.M), "-v names the config line", r)
        # --json's policy lists what the call ran with, in libcurl's order: resolve entries the
        # config's first (a later one wins), connect-to entries the flags' first (the first that
        # matches wins); the config's for the URL's host only.
        r = linkd(ctx, "get", "--config", conf, "--json", "--resolve", "x.test:1:10.0.0.1",
                  "--connect-to", "::127.0.0.1:%d" % p, *FAST, "http://books.test:%d/r" % p)
        doc = valid_json(ctx, r)
        check(r.rc == 0 and doc["policy"]["resolve"] ==
              ["books.test:%d:127.0.0.1" % p, "x.test:1:10.0.0.1"] and
              doc["policy"]["connect_to"] == ["::127.0.0.1:%d" % p] and
              doc["policy"]["compressed"] is False, "--json's policy lists the entries", r)
        r = linkd(ctx, "get", "--json", *FAST, "http://127.0.0.1:%d/r" % p)
        doc = valid_json(ctx, r)
        check(doc["policy"]["resolve"] == [] and doc["policy"]["connect_to"] == [],
              "none: empty lists", r)
        r = linkd(ctx, "get", "--config", conf, "--max-attempts", "1", "http://shelf.test/r")
        check(r.rc == 3 or r.rc == 4, "the config's connect-to goes to port 1: refused", r)
        r = linkd(ctx, "get", "--config", conf, "--connect-to", "shelf.test:80:127.0.0.1:%d" % p,
                  *FAST, "http://shelf.test/r")
        check(r.rc == 0, "a flag's connect-to is tried before the config's", r)
        for key, value, msg in (("resolve", "books.test:80", "expected HOST:PORT:ADDR"),
                                ("connect-to", "a:80:b", "HOST2 must be"),
                                ("resolve", "books.test:80:nowhere", "each ADDR must be")):
            bad = ctx.write("bad.conf", "[defaults]\n%s = %s\n" % (key, value))
            r = linkd(ctx, "get", "--config", bad, "http://books.test/r")
            check(r.rc == 78 and "bad.conf:2: %s: '%s'" % (key, value) in r.err and msg in r.err,
                  "a bad %s in the config: exit 78 with the line" % key, r)
    for args, needle in ((["--resolve", "books.test:80"], "--resolve 'books.test:80': expected"),
                         (["--resolve", "books.test:0:127.0.0.1"], "PORT must be"),
                         (["--resolve", "-books.test:80"], "prefixes are not taken"),
                         (["--connect-to", "a:b:c:d"], "--connect-to 'a:b:c:d': PORT1"),
                         (["--connect-to", "books.test:80:127.0.0.1"], "then ':'")):
        r = linkd(ctx, "get", *args, "http://books.test/")
        check(r.rc == 64 and needle in r.err and "Try 'linkd get --help'." in r.err,
              "usage error for %s" % args, r)

# ------------------------------------------------------------------------------------------------
# Usage errors, help, docs
# ------------------------------------------------------------------------------------------------


@case
def usage_errors(ctx):
    with Faultd(ctx, "ok") as fd:
        u = fd.url()
        table = [
            (["get", "--deadline", "3", u], "--deadline: '3' needs a unit"),
            (["get", "--attempt-timeout", "3x", u], "unknown unit 'x'"),
            (["get", "--connect-timeout", "fast", u], "--connect-timeout: 'fast'"),
            (["get", "--max-attempts", "0", u], "--max-attempts: '0'"),
            (["get", "--backoff", "random", u], "--backoff: 'random' is not a backoff"),
            (["get", "--base", "100us", u], "--base: '100us' is too short"),
            (["get", "--max-delay", "-1s", u], "--max-delay:"),
            (["get", "--jitter", "lots", u], "--jitter: 'lots' is not a jitter"),
            (["post", "--idempotency-key", "has space", u], "is not a valid key"),
            (["get", "--retry-on", "418", u], "status 418 has no kind of its own"),
            (["get", "--budget", "infinite", u], "--budget: 'infinite' is not a budget"),
            (["get", "--bogus", u], "unknown option '--bogus'"),
            (["get"], "get needs a URL"),
            (["get", u, u], "one URL per call"),
            (["get", "ftp://127.0.0.1/"], "not an http:// or https:// URL"),
            (["get", "http://exa mple.com/"], "is not a valid URL"),
            (["get", "-d", "x", u], "get sends no body"),
            (["get", "--json", "-i", u], "do not mix"),
            (["get", "-H", "Linkd-Attempt: 9", u], "Linkd-Attempt is set by linkd"),
            (["get", "-H", "X-Bell: a\x07b", u], "control character 0x07"),
            (["post", "-H", "Content-Length: 5", u], "Content-Length is set by linkd"),
            (["post", "-H", "Transfer-Encoding: chunked", u], "Transfer-Encoding is set by linkd"),
            (["post", "-H", "Idempotency-Key;", u], "'Idempotency-Key': the key is empty"),
            (["post", "-H", "Idempotency-Key: a b", u], "the key holds a space at byte 2"),
            (["post", "-H", "Idempotency-Key: " + "k" * 300, u],
             "the key is 300 characters long"),
            (["post", "-H", "Idempotency-Key: K1", "--idempotency-key", "K2", u],
             "-H 'Idempotency-Key: K1' and --idempotency-key K2 do not mix"),
            (["post", "--idempotency-key", "none", "-H", "Idempotency-Key: K1", u],
             "and --idempotency-key none do not mix"),
            (["get", "--deadline", "2562047h", u], "--deadline: '2562047h' is too long"),
            (["get", "--backoff", "exponential:0", u],
             "--backoff: 'exponential:0': the multiplier must be a number from 1 to 1000"),
            (["get", "--deadline"], "--deadline needs a value"),
        ]
        for args, needle in table:
            r = linkd(ctx, *args)
            check(r.rc == 64, "usage error: exit 64 for %s" % args, r)
            check(needle in r.err and "Try 'linkd %s --help'." % args[0] in r.err,
                  "message %r for %s" % (needle, args), r)
        for args in (["frobnicate"], [], ["version", "extra"], ["seed-example", "x"]):
            r = linkd(ctx, *args)
            check(r.rc == 64, "usage error for %s" % args, r)
        check(fd.requests() == [], "no call was made", fd.requests())


# curl's options that docs/cli.md names as missing from linkd ("Differences from curl").
CURL_ONLY = ("cookie", "cookie-jar", "referer", "upload-file", "form", "proxy",
             "retry", "retry-delay", "retry-max-time", "retry-all-errors", "remote-header-name",
             "create-dirs", "continue-at", "limit-rate", "cert-type", "key-type",
             "netrc", "digest", "url-query", "location-trusted", "no-clobber")


def long_options(text):
    return sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z-]+)", text)))


@case
def help_and_docs(ctx):
    opts = None
    for cmd in ("get", "head", "put", "post", "patch", "delete"):
        r = linkd(ctx, cmd, "--help")
        check(r.rc == 0 and r.out.startswith(b"usage: linkd %s URL" % cmd.encode()), "help", r)
        o = long_options(r.out.decode())
        check(opts is None or o == opts, "every request command has the same options", o, opts)
        opts = o
        r2 = linkd(ctx, "help", cmd)
        check(r2.rc == 0 and r2.out == r.out, "'linkd help CMD' = 'linkd CMD --help'", r2)
    r = linkd(ctx, "help", "nosuch")
    check(r.rc == 64 and r.out == b"" and "linkd: help: unknown command 'nosuch'" in r.err,
          "help of an unknown command is a usage error", r)
    for o in ("header", "data", "output", "include", "silent", "verbose", "json", "deadline",
              "attempt-timeout", "connect-timeout", "max-attempts", "backoff", "base", "max-delay",
              "jitter", "idempotency-key", "retry-on", "budget", "config", "no-config", "help",
              "request", "head", "location", "max-redirs", "insecure", "cacert", "fail", "show-error",
              "write-out", "max-time", "dns-timeout", "tls-timeout", "write-timeout",
              "first-byte-timeout", "idle-timeout", "dump-header", "fail-with-body", "data-binary",
              "data-raw", "data-urlencode", "get", "user", "user-agent", "remote-name",
              "compressed", "resolve", "connect-to"):
        check(o in opts, "--help lists --%s" % o, opts)
    r = linkd(ctx, "--help")
    check(r.rc == 0 and all(c in r.out.decode() for c in
                            ("get URL", "post URL", "seed-example", "version")), "main help", r)
    r = linkd(ctx, "version")
    check(r.rc == 0 and re.match(rb"^linkd \d+\.\d+\.\d+\n$", r.out), "version", r)
    check(linkd(ctx, "--version").out == r.out, "--version", r)
    r = linkd(ctx, "seed-example", "--help")
    check(r.rc == 0 and b"seed" in r.out, "seed-example --help", r)
    man = open(os.path.join(ctx.src, "docs", "linkd.1")).read()
    md = open(os.path.join(ctx.src, "docs", "cli.md")).read()
    th = re.search(r'^\.TH LINKD 1 "(\d{4}-\d{2}-\d{2})"', man, re.M)
    check(th is not None, "docs/linkd.1 has a real date (YYYY-MM-DD) in .TH")
    commands = man[man.index(".SH COMMANDS"):man.index(".SH OPTIONS")].replace("\\-", "-")
    for cmd in ("get", "head", "put", "post", "patch", "delete", "demo", "outbox", "sim",
                "seed-example", "version", "help"):
        check(re.search(r"^\.B[IR]? %s\b" % cmd, commands, re.M),
              "docs/linkd.1 COMMANDS lists %s" % cmd)
    check(re.search(r"^\.B[IR]? serve\b", commands, re.M), "docs/linkd.1 COMMANDS lists serve")
    man_opts = set(long_options(man.replace("\\-", "-")))
    md_opts = set(long_options(md))
    for o in opts:
        check(o in man_opts, "docs/linkd.1 documents --%s" % o)
        check(o in md_opts, "docs/cli.md documents --%s" % o)
    demo = linkd(ctx, "demo", "--help")
    demo_opts = set(long_options(demo.out.decode()))
    check(demo.rc == 0 and "scenario" in demo_opts, "demo --help lists its options", demo)
    for o in demo_opts:
        check(o in man_opts, "docs/linkd.1 documents demo's --%s" % o)
    outbox = linkd(ctx, "outbox", "--help")
    outbox_opts = set(long_options(outbox.out.decode()))
    check(outbox.rc == 0 and "db" in outbox_opts, "outbox --help lists its options", outbox)
    for o in outbox_opts:
        check(o in man_opts, "docs/linkd.1 documents outbox's --%s" % o)
    sim = linkd(ctx, "sim", "--help")
    sim_opts = set(long_options(sim.out.decode()))
    check(sim.rc == 0 and "compare" in sim_opts, "sim --help lists its options", sim)
    for o in sim_opts - {"help", "quiet"}:
        check(o in man_opts, "docs/linkd.1 documents sim's --%s" % o)
    serve = linkd(ctx, "serve", "--help")
    serve_opts = set(long_options(serve.out.decode()))
    check(serve.rc == 0 and "config" in serve_opts, "serve --help lists its options", serve)
    for o in serve_opts - {"help", "config"}:
        check(o in man_opts, "docs/linkd.1 documents serve's --%s" % o)
    for cmd, r in (("demo", demo), ("outbox", outbox), ("sim", sim), ("serve", serve)):
        r2 = linkd(ctx, "help", cmd)
        check(r2.rc == 0 and r2.out == r.out, "'linkd help %s' = 'linkd %s --help'" % (cmd, cmd),
              r2)
    # curl's options linkd lacks are named in docs/cli.md's list of differences from curl, and
    # only there: one implemented leaves the list (and the docs must then describe it).
    diff = md[md.index("### Differences from curl"):]
    diff = diff[:diff.index("\n## ")]
    for o in CURL_ONLY:
        check(o not in opts, "--%s is implemented: take it out of CURL_ONLY and the list" % o)
        check("`--%s" % o in diff, "docs/cli.md's differences from curl name --%s" % o)
    for o in man_opts | md_opts:
        check(o in opts or o in demo_opts or o in outbox_opts or o in sim_opts or o in serve_opts
              or o == "version" or o in CURL_ONLY, "the docs mention --%s, which linkd lacks" % o)
    helptext = linkd(ctx, "get", "--help").out.decode()
    for code in ("0", "1", "2", "3", "4", "5", "6", "64", "66", "73", "78", "130"):
        check(re.search(r"\b%s\b" % code, helptext), "help lists exit code %s" % code)
        check(re.search(r"^\.(?:TP|IP)\s*\n?\\?f?B?%s\b" % code, man, re.M) or
              re.search(r"\.B %s\b" % code, man) or re.search(r"\\fB%s\\fR" % code, man),
              "docs/linkd.1 lists exit code %s" % code)
        check(re.search(r"^\| *`?%s`? *\|" % code, md, re.M), "docs/cli.md lists exit code %s" %
              code)
    groff = shutil.which("groff")
    check(groff is not None, "groff is needed to check the man page")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z",
                        os.path.join(ctx.src, "docs", "linkd.1")], capture_output=True)
    check(p.returncode == 0 and p.stderr == b"", "the man page renders without warnings",
          p.stderr.decode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--linkd")
    ap.add_argument("--faultd")
    ap.add_argument("--source-dir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    args = ap.parse_args()
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.case not in CASES:
        print("unknown case %r; cases: %s" % (args.case, ", ".join(CASES)), file=sys.stderr)
        return 2
    ctx = Ctx(args)
    try:
        CASES[args.case](ctx)
    except Fail as e:
        print("FAIL %s: %s" % (args.case, e), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    print("ok %s" % args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
