#!/usr/bin/python3
"""Load check (run by hand, not in ctest): 10 clients x 5 concurrent builds = 50 small builds
against one kiln-server with few workers and a small queue. Every request must end as a success
(engine digest verified) or RESOURCE_EXHAUSTED: none lost, none hanging. Prints the server's RSS
idle before, at peak, and idle after (VmRSS from /proc/PID/status), which mappings grew
(/proc/PID/smaps), and the RSS before any client and after every client closed. With
KILN_LOAD_GDB=1 it also has gdb print the server's malloc_stats() into its log and shows it.

usage: /usr/bin/python3 tests/client/load_test.py --server-bin build/server/kiln-server
       [--source-dir .] [--clients 10] [--builds 5] [--workers 2] [--queue 4] [--cache]
       [--rounds N] [--server-arg=--keep-builds=8]...
"""
import argparse
import collections
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_fixture  # noqa: E402

CHUNK = 1 << 20
MODELS = ["mobilenet_tiny", "squeezenet_tiny", "bert_layernorm_op", "ln_overflow_classifier",
          "vit_tiny"]
PRESETS = ["fp32", "fp16", "bf16", "fp32-layernorm", "bf16-layernorm", "fp16-safe"]


def one_build(grpc, pb, stub, model, name, preset, timeout):
    """Runs one Build; returns (outcome, seconds). Outcome: 'ok' or a status code name."""
    def requests():
        yield pb.BuildRequest(spec=pb.BuildSpec(
            model_name=name, model_size=len(model), model_sha256=hashlib.sha256(model).hexdigest(),
            policy=preset, request_id=f"load-{uuid.uuid4().hex}"))
        for off in range(0, len(model), CHUNK):
            yield pb.BuildRequest(model_chunk=model[off:off + CHUNK])
        yield pb.BuildRequest(end_of_upload=True)

    start = time.monotonic()
    engine, result = bytearray(), None
    try:
        for ev in stub.Build(requests(), timeout=timeout):
            kind = ev.WhichOneof("event")
            if kind == "engine_chunk":
                engine += ev.engine_chunk.data
            elif kind == "result":
                result = ev.result
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            print(f"  {name} {preset}: {e.code().name}: {e.details()}", flush=True)
        return e.code().name, time.monotonic() - start
    if result is None:
        return "NO_RESULT", time.monotonic() - start
    if hashlib.sha256(engine).hexdigest() != result.engine_sha256:
        return "BAD_DIGEST", time.monotonic() - start
    return "ok", time.monotonic() - start


def settle_rss(server, seconds=3.0):
    """RSS after `seconds` of quiet (allocator trims and finished-build cleanup)."""
    time.sleep(seconds)
    try:
        with open(f"/proc/{server.proc.pid}/status") as f:
            threads = [l.split()[1] for l in f if l.startswith("Threads:")]
        print(f"  (server threads: {threads[0] if threads else '?'})")
    except OSError:
        pass
    return server.rss_kib()


def smaps(pid):
    """Rss KiB of each mapping of `pid`, keyed by (address range, what is mapped)."""
    out, key = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):
                key = (parts[0], parts[5] if len(parts) > 5 else "[anon]")
            elif parts[0] == "Rss:":
                out[key] = int(parts[1])
    return out


def print_smaps_growth(before, after, top=12):
    """Where the server's resident memory grew: the mappings whose Rss changed most."""
    keys = set(before) | set(after)
    delta = sorted(((after.get(k, 0) - before.get(k, 0), k) for k in keys), reverse=True)
    kinds = collections.Counter()
    for d, (_, what) in delta:
        kinds["stacks and arenas" if what == "[anon]" else what] += d
    print("Rss change by kind (KiB): " +
          ", ".join(f"{k} {v:+d}" for k, v in kinds.most_common() if v))
    print("largest Rss changes by mapping (KiB):")
    for d, (addr, what) in delta[:top]:
        if d:
            print(f"  {d:+7d}  {what}  {addr}{'  (new)' if (addr, what) not in before else ''}")


def run_round(grpc, pb, stubs, models, server, a):
    """One burst: clients x builds calls started together; waits for every one to end."""
    outcomes = collections.Counter()
    durations = []
    lock = threading.Lock()
    total = a.clients * a.builds
    barrier = threading.Barrier(total)
    peak = [server.rss_kib()]
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.is_set():
            try:
                peak[0] = max(peak[0], server.rss_kib())
            except (OSError, RuntimeError):
                pass
            time.sleep(0.05)

    def worker(client, k):
        i = client * a.builds + k
        name = MODELS[i % len(MODELS)]
        preset = PRESETS[(i // len(MODELS)) % len(PRESETS)]
        barrier.wait()
        outcome, secs = one_build(grpc, pb, stubs[client], models[name], name + ".onnx", preset,
                                  a.timeout)
        with lock:
            outcomes[outcome] += 1
            durations.append(secs)

    sampler_thread = threading.Thread(target=sampler, daemon=True)
    sampler_thread.start()
    threads = [threading.Thread(target=worker, args=(c, k), daemon=True)
               for c in range(a.clients) for k in range(a.builds)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    hung = 0
    for t in threads:
        t.join(timeout=max(1.0, a.timeout + 30 - (time.monotonic() - t0)))
        hung += t.is_alive()
    wall = time.monotonic() - t0
    stop_sampling.set()
    sampler_thread.join()
    return {"outcomes": outcomes, "durations": durations, "hung": hung, "wall": wall,
            "peak": peak[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "../.."))
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--builds", type=int, default=5, help="concurrent builds per client")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--cache", action="store_true", help="keep the server's engine cache on")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra kiln-server flag, e.g. --server-arg=--keep-builds=8")
    ap.add_argument("--rounds", type=int, default=1,
                    help="bursts in a row (RSS after each shows a plateau or a leak)")
    a = ap.parse_args()
    import grpc

    stubs = tempfile.mkdtemp(prefix="kiln_pystubs_")
    kiln_fixture.generate_stubs(os.path.join(a.source_dir, "proto"), stubs)
    from kiln.v1 import service_pb2 as pb, service_pb2_grpc as pb_grpc  # noqa: E402

    models = {}
    for m in MODELS:
        with open(os.path.join(a.source_dir, "tests/models", m, "model.onnx"), "rb") as f:
            models[m] = f.read()

    extra = ["--workers", str(a.workers), "--queue", str(a.queue), *a.server_arg]
    with tempfile.TemporaryDirectory(prefix="kiln_load_") as work:
        if a.cache:
            extra += ["--cache-dir", os.path.join(work, "cache")]
        server = kiln_fixture.start_server(a.server_bin, work, extra)
        try:
            rss_fresh = settle_rss(server)  # no client yet
            channels = [grpc.insecure_channel(server.address) for _ in range(a.clients)]
            stubs_ = [pb_grpc.ConverterStub(c) for c in channels]
            # A warm-up build on every connection, so lazily created state is part of the idle
            # level: the server's thread pools and allocator, and what each HTTP/2 connection
            # sets up on its first call (its header tables, stream maps and read buffer belong to
            # the connection, not to builds).
            for i, stub in enumerate(stubs_):
                warm = one_build(grpc, pb, stub, models["mobilenet_tiny"], f"warm{i}.onnx",
                                 "fp32", a.timeout)
                if warm[0] != "ok":
                    print(f"warm-up build {i}: {warm[0]}")
            rss_idle = settle_rss(server)
            anon_idle = server.private_kib()
            maps_idle = smaps(server.proc.pid)
            if os.environ.get("KILN_LOAD_GDB"):
                subprocess.run(["gdb", "-p", str(server.proc.pid), "-batch", "-ex",
                                "call (void)malloc_stats()"], capture_output=True)

            rounds = []
            for r in range(a.rounds):
                result = run_round(grpc, pb, stubs_, models, server, a)
                result["rss_after"] = settle_rss(server, 5.0)
                result["anon_after"] = server.private_kib()
                rounds.append(result)
                print(f"round {r + 1}: {dict(result['outcomes'])}; hanging {result['hung']}; "
                      f"wall {result['wall']:.2f}s; RSS peak {result['peak']} KiB, idle after "
                      f"{result['rss_after']} KiB", flush=True)
            print_smaps_growth(maps_idle, smaps(server.proc.pid))
            if os.environ.get("KILN_LOAD_GDB"):
                subprocess.run(["gdb", "-p", str(server.proc.pid), "-batch", "-ex",
                                "call (void)malloc_stats()"], capture_output=True)
                print(open(server.log_path).read()[-6000:])
            for c in channels:
                c.close()
            # With every client gone, what is left is the server's own: compared with the level
            # before any client came, connection state does not count either way.
            rss_closed = settle_rss(server, 5.0)
            alive = server.proc.poll() is None
        finally:
            code = server.stop()

    total = a.clients * a.builds
    last = rounds[-1]
    rss_after = last["rss_after"]
    growth = 100.0 * (rss_after - rss_idle) / rss_idle
    ok = alive and code == 0 and growth <= 10.0
    print(f"requests per round: {total} ({a.clients} clients x {a.builds} concurrent builds); "
          f"server --workers {a.workers} --queue {a.queue}{' with cache' if a.cache else ''}")
    for i, r in enumerate(rounds):
        ended = sum(r["outcomes"].values())
        bad = {k: v for k, v in r["outcomes"].items() if k not in ("ok", "RESOURCE_EXHAUSTED")}
        d = sorted(r["durations"])
        print(f"round {i + 1}: outcomes {dict(r['outcomes'])}; ended {ended}/{total}; hanging "
              f"{r['hung']}; per request min {d[0]:.2f}s median {d[len(d) // 2]:.2f}s max "
              f"{d[-1]:.2f}s")
        ok = ok and ended == total and r["hung"] == 0 and not bad
    print(f"server RSS: idle {rss_idle} KiB; peak {max(r['peak'] for r in rounds)} KiB; idle "
          f"after each round {[r['rss_after'] for r in rounds]} KiB; after the last "
          f"{growth:+.1f}% vs idle; server alive after load: {alive}; exit code {code}")
    print(f"server private memory (RssAnon: heap, stacks, anonymous maps): idle {anon_idle} KiB; "
          f"after each round {[r['anon_after'] for r in rounds]} KiB")
    closed_growth = 100.0 * (rss_closed - rss_fresh) / rss_fresh
    print(f"server RSS without clients: before any client {rss_fresh} KiB; after the load and "
          f"every client closed {rss_closed} KiB ({closed_growth:+.1f}%)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
