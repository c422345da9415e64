#!/usr/bin/python3
"""A second, independent client in Python (label `server`): proof the API is usable from another
language. Generates the stubs from proto/ at test time (Debian's python3-grpc-tools), starts a
kiln-server, checks grpc.health.v1, lists the presets, and performs a full Build: spec, 1 MiB
chunks, end_of_upload, events read until the result, the engine's size and SHA-256 verified.

usage: python_client_test.py --server-bin B --source-dir S [--model NAME]
"""
import argparse
import hashlib
import os
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_fixture  # noqa: E402

CHUNK = 1 << 20
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def build_requests(pb, model_bytes, model_name, policy):
    """The Build request stream: spec, model chunks, end_of_upload."""
    spec = pb.BuildSpec(model_name=model_name, model_size=len(model_bytes),
                        model_sha256=hashlib.sha256(model_bytes).hexdigest(), policy=policy,
                        request_id=f"py-{uuid.uuid4().hex}")
    yield pb.BuildRequest(spec=spec)
    for off in range(0, len(model_bytes), CHUNK):
        yield pb.BuildRequest(model_chunk=model_bytes[off:off + CHUNK])
    yield pb.BuildRequest(end_of_upload=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--model", default="bert_layernorm_decomposed")
    a = ap.parse_args()
    import grpc

    stubs = tempfile.mkdtemp(prefix="kiln_pystubs_")
    kiln_fixture.generate_stubs(os.path.join(a.source_dir, "proto"), stubs)
    from kiln_health import health_pb2, health_pb2_grpc  # noqa: E402 (generated)
    from kiln.v1 import service_pb2 as pb, service_pb2_grpc as pb_grpc  # noqa: E402

    with open(os.path.join(a.source_dir, "tests/models", a.model, "model.onnx"), "rb") as f:
        model = f.read()

    with kiln_fixture.running_server(a.server_bin) as (server, _):
        with grpc.insecure_channel(server.address) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            health = health_pb2_grpc.HealthStub(channel)
            resp = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            check(resp.status == health_pb2.HealthCheckResponse.SERVING,
                  f"health: SERVING (got {resp.status})")

            stub = pb_grpc.ConverterStub(channel)
            presets = stub.ListPresets(pb.ListPresetsRequest(), timeout=10)
            names = [p.name for p in presets.presets]
            check("fp32-layernorm" in names, f"ListPresets has fp32-layernorm ({names})")

            accepted, result, engine, kinds = None, None, bytearray(), set()
            for ev in stub.Build(build_requests(pb, model, a.model + ".onnx", "fp32-layernorm"),
                                 timeout=300):
                kind = ev.WhichOneof("event")
                kinds.add(kind)
                if kind == "accepted":
                    accepted = ev.accepted
                elif kind == "engine_chunk":
                    check(ev.engine_chunk.offset == len(engine),
                          f"engine chunk at offset {ev.engine_chunk.offset} is in order")
                    check(len(ev.engine_chunk.data) <= CHUNK, "engine chunk <= 1 MiB")
                    engine += ev.engine_chunk.data
                elif kind == "result":
                    result = ev.result
            check(accepted is not None and accepted.build_id != "", "an Accepted event with an id")
            check(result is not None, "a BuildResult event ends the stream")
            check("stage" in kinds and "log" in kinds, f"stage and log events streamed ({kinds})")
            if result is not None:
                check(result.engine_size == len(engine) and len(engine) > 0,
                      f"engine size {len(engine)} == announced {result.engine_size}")
                check(hashlib.sha256(engine).hexdigest() == result.engine_sha256,
                      "engine SHA-256 matches BuildResult.engine_sha256")
                check(result.model_sha256 == hashlib.sha256(model).hexdigest(),
                      "BuildResult.model_sha256 is the uploaded model's digest")

            # A digest mismatch is refused with INVALID_ARGUMENT, the server keeps serving.
            def bad_digest():
                yield pb.BuildRequest(spec=pb.BuildSpec(model_name="x.onnx",
                                                        model_size=len(model),
                                                        model_sha256="0" * 64,
                                                        policy="fp32-layernorm"))
                for off in range(0, len(model), CHUNK):
                    yield pb.BuildRequest(model_chunk=model[off:off + CHUNK])
                yield pb.BuildRequest(end_of_upload=True)
            code = None
            try:
                for _ in stub.Build(bad_digest(), timeout=60):
                    pass
            except grpc.RpcError as e:
                code = e.code()
            check(code == grpc.StatusCode.INVALID_ARGUMENT,
                  f"digest mismatch: INVALID_ARGUMENT (got {code})")
            resp = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            check(resp.status == health_pb2.HealthCheckResponse.SERVING, "still SERVING after")

    if failures:
        print(f"\n{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
