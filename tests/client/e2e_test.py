#!/usr/bin/python3
"""End to end on loopback (label `server`): kiln-server up, convert-client converts a model with
fp32-layernorm, and the returned engine is byte-identical to a local `kiln build` of the same
model and runs (`kiln run`) to bit-identical outputs. Also: the report files, a cache hit, the
client's exit codes for a bad policy (3), usage (2) and an unreachable server (5), TLS with a
bearer token, and a draining replica retried on another one with the same request id.

usage: e2e_test.py --server-bin B --client-bin C --kiln-bin K --source-dir S [--model NAME]
"""
import argparse
import filecmp
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_fixture  # noqa: E402

failures = []


def check(cond, what, detail=""):
    """Records one check; `detail` (e.g. a process's stderr) is printed only on failure."""
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not detail else f"\n{detail}"),
          flush=True)
    if not cond:
        failures.append(what)


def run(args, timeout=600):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def closed_port():
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_log(server, text, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in server.log():
            return True
        time.sleep(0.05)
    return False


def check_draining_retry(a, model):
    """Replica A drains (SIGTERM during a slow build, a --enable-test-hooks model name) and
    answers UNAVAILABLE; a client given A and B retries on B with the same request id, while a
    client given A alone exits 5 after its retries; A's running build still completes."""
    with kiln_fixture.running_server(a.server_bin, ["--enable-test-hooks"]) as (srv_a, work_a), \
            kiln_fixture.running_server(a.server_bin) as (srv_b, _):
        slow_model = os.path.join(work_a, "__kiln_test_slow_10000__")
        shutil.copyfile(model, slow_model)
        slow = subprocess.Popen([a.client_bin, "--server", srv_a.address, "--model", slow_model,
                                 "--policy", "fp32", "-o", os.path.join(work_a, "slow.kiln"),
                                 "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            check(wait_for_log(srv_a, "worker pid"), "slow build started on replica A")
            srv_a.proc.send_signal(signal.SIGTERM)
            check(wait_for_log(srv_a, "draining"), "replica A is draining")
            # round_robin may start on either replica, so conversions repeat until one lands on
            # A first (even odds each: all of 8 missing A is a 1-in-256 event).
            retried, runs = 0, 0
            while runs < 8 and retried == 0:
                i = runs
                runs += 1
                rc, so, se = run([a.client_bin, "--server", srv_a.address, "--server",
                                  srv_b.address, "--model", model, "--policy", "fp32-layernorm",
                                  "-o", os.path.join(work_a, f"rr{i}.kiln"), "--request-id",
                                  f"e2e-drain-{i}", "--quiet"])
                check(rc == 0, f"A draining, B up: conversion {i} exits 0 (got {rc})", se)
                retried += "retrying" in se and f"request id e2e-drain-{i}" in se
            check(retried > 0, f"UNAVAILABLE from A retried on B with the same request id "
                  f"(after {runs} run(s))")
            rc, so, se = run([a.client_bin, "--server", srv_a.address, "--model", model,
                              "--policy", "fp32-layernorm", "-o", os.path.join(work_a, "x.kiln"),
                              "--retries", "1"])
            check(rc == 5 and "draining" in se, f"A alone while draining: exit 5 (got {rc})", se)
            so, se = slow.communicate(timeout=120)
            check(slow.returncode == 0, "the build running on A when it drained completes", se)
            check(srv_a.proc.wait(timeout=60) == 0, "replica A exits 0 after draining")
        finally:
            if slow.poll() is None:
                slow.kill()
                slow.wait()


def check_tls_and_token(a, model):
    """A server with TLS (self-signed for 127.0.0.1) and a bearer token: the client converts with
    --tls-ca and --token (or $KILN_TOKEN), and fails with UNAUTHENTICATED (exit 3) without it."""
    if shutil.which("openssl") is None:
        print("skip TLS checks: no openssl command")
        return
    with tempfile.TemporaryDirectory(prefix="kiln_tls_") as certs:
        cert, key = os.path.join(certs, "cert.pem"), os.path.join(certs, "key.pem")
        rc, _, se = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                         "-subj", "/CN=localhost", "-addext",
                         "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out",
                         cert])
        check(rc == 0, "self-signed certificate made", se)
        if rc != 0:
            return
        token = "e2e-" + os.urandom(8).hex()
        with kiln_fixture.running_server(
                a.server_bin, ["--tls-cert", cert, "--tls-key", key, "--token", token]) as (
                server, work):
            base = [a.client_bin, "--server", server.address, "--model", model, "--policy",
                    "fp32-layernorm", "--tls-ca", cert]
            rc, so, se = run([*base, "--token", token, "-o", os.path.join(work, "tls.kiln")])
            check(rc == 0 and "verified" in so, f"TLS + token: exit 0 (got {rc})", se)
            env = dict(os.environ, KILN_TOKEN=token)
            p = subprocess.run([*base, "-o", os.path.join(work, "env.kiln"), "--quiet"],
                               capture_output=True, text=True, timeout=600, env=env)
            check(p.returncode == 0, f"token from $KILN_TOKEN: exit 0 (got {p.returncode})",
                  p.stderr)
            env.pop("KILN_TOKEN")
            p = subprocess.run([*base, "-o", os.path.join(work, "none.kiln")],
                               capture_output=True, text=True, timeout=600, env=env)
            check(p.returncode == 3 and "UNAUTHENTICATED" in p.stderr,
                  f"no token: exit 3 with UNAUTHENTICATED (got {p.returncode})", p.stderr)
            rc, _, se = run([*base, "--token", "wrong", "-o", os.path.join(work, "w.kiln")])
            check(rc == 3 and "UNAUTHENTICATED" in se,
                  f"wrong token: exit 3 with UNAUTHENTICATED (got {rc})", se)
            rc, _, se = run([a.client_bin, "--server", server.address, "--model", model,
                             "--token", token, "-o", os.path.join(work, "p.kiln"), "--retries",
                             "0"])
            check(rc != 0, f"plaintext client against a TLS server fails (got {rc})", se)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--client-bin", required=True)
    ap.add_argument("--kiln-bin", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--model", default="bert_layernorm_decomposed")
    a = ap.parse_args()
    model_dir = os.path.join(a.source_dir, "tests/models", a.model)
    model = os.path.join(model_dir, "model.onnx")
    data = os.path.join(model_dir, "test_data_set_0")
    client = a.client_bin

    with kiln_fixture.running_server(a.server_bin, ["--workers", "2"]) as (server, work):
        out = lambda name: os.path.join(work, name)  # noqa: E731
        common = ["--server", server.address, "--model", model, "--policy", "fp32-layernorm",
                  "--timeout", "5m"]

        # 1. Remote build, then the same build locally.
        rc, so, se = run([client, *common, "-o", out("remote.kiln")])
        print(se + so)  # the streamed log and the summary, for the test log
        check(rc == 0, f"convert-client exits 0 (got {rc})")
        check("engine: " in so and "verified" in so, "client prints the verified engine line")
        rc, so, se = run([a.kiln_bin, "build", model, "--policy", "fp32-layernorm",
                          "-o", out("local.kiln")])
        check(rc == 0, f"local kiln build exits 0 (got {rc})", se[-2000:])
        check(os.path.exists(out("remote.kiln")) and
              filecmp.cmp(out("remote.kiln"), out("local.kiln"), shallow=False),
              "remote engine bytes == local engine bytes")

        # 2. Both engines run to bit-identical outputs.
        for name in ("remote", "local"):
            rc, so, se = run([a.kiln_bin, "run", out(f"{name}.kiln"), "--inputs", data,
                              "--outputs", out(f"out_{name}")])
            check(rc == 0, f"kiln run {name} engine exits 0 (got {rc})", se[-2000:])
        outputs = sorted(f for f in os.listdir(data) if f.startswith("output_"))
        check(len(outputs) > 0, "the data set has outputs")
        for f in outputs:
            check(filecmp.cmp(out(f"out_remote/{f}"), out(f"out_local/{f}"), shallow=False),
                  f"{f}: remote engine output == local engine output, bit for bit")

        # 3. Same request again: answered from the cache, same bytes.
        rc, so, se = run([client, *common, "-o", out("again.kiln")])
        check(rc == 0, f"second conversion exits 0 (got {rc})")
        check("cache hit" in se or "from the cache" in so, "second conversion is a cache hit")
        check(filecmp.cmp(out("again.kiln"), out("local.kiln"), shallow=False),
              "cached engine bytes == local engine bytes")

        # 4. With the accuracy report: JSON, HTML and the summary table.
        rc, so, se = run([client, *common, "-o", out("rep.kiln"), "--inputs", data,
                          "--report", out("r.json"), "--html", out("r.html"),
                          "--fail-on-accuracy"])
        check(rc == 0, f"conversion with report exits 0 (got {rc})", se[-2000:])
        check("accuracy report: PASS" in so, "summary table printed with a PASS verdict")
        try:
            with open(out("r.json")) as f:
                rep = json.load(f)
            check(rep.get("pass") is True and len(rep.get("outputs", [])) > 0,
                  "report JSON has outputs and pass=true")
        except (OSError, ValueError) as e:
            check(False, f"report JSON readable ({e})")
        with open(out("r.html"), errors="replace") as f:
            html = f.read()
        check(html.lstrip().lower().startswith("<!doctype html") and "</html>" in html,
              "report HTML is a whole page")

        # 5. Exit codes: build failure (bad policy), usage, unreachable.
        rc, so, se = run([client, "--server", server.address, "--model", model,
                          "--policy", "no-such-preset", "-o", out("bad.kiln")])
        check(rc == 3 and "INVALID_ARGUMENT" in se,
              f"unknown preset: exit 3 with INVALID_ARGUMENT (got {rc})", se)
        check(not os.path.exists(out("bad.kiln")), "no engine file after a failed build")
        rc, so, se = run([client, "--server", server.address, "-o", out("x.kiln")])
        check(rc == 2 and "--model" in se, f"missing --model: exit 2 (got {rc})")
        rc, so, se = run([client, "--server", f"127.0.0.1:{closed_port()}", "--model", model,
                          "--policy", "fp32-layernorm", "-o", out("x.kiln"), "--retries", "1"])
        check(rc == 5 and "unreachable" in se, f"closed port: exit 5 (got {rc})", se)

        # 6. Two replicas as one round_robin target (the second is down): still converts, with
        # the same request id retried when the dead replica is picked.
        rc, so, se = run([client, "--server", server.address, "--server",
                          f"127.0.0.1:{closed_port()}", "--model", model, "--policy",
                          "fp32-layernorm", "-o", out("rr.kiln"), "--request-id", "e2e-rr-1"])
        check(rc == 0, f"round_robin over a live and a dead replica exits 0 (got {rc})", se)
        check(server.proc.poll() is None, "server still running")

    check_tls_and_token(a, model)
    check_draining_retry(a, model)

    if failures:
        print(f"\n{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
