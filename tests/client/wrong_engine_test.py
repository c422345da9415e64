#!/usr/bin/python3
"""convert-client against a server that answers with another model's engine (label `server`).

A reused request id once made kiln-server return the engine of an earlier build of another
model, and convert-client wrote it with exit 0: the client never compared the result's model
digest with the digest of what it uploaded. This test serves kiln.v1.Converter from Python with
a well-formed answer (a valid engine blob digest, in order chunks) whose result names another
model, and checks that convert-client exits 3, says why, and writes nothing; and that the same
server answering with the right model digest is accepted (so the check is the digest, not the
fake server).

usage: wrong_engine_test.py --client-bin C --source-dir S
"""
import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_fixture  # noqa: E402

failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not detail else f"\n{detail}"),
          flush=True)
    if not cond:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client-bin", required=True)
    ap.add_argument("--source-dir", required=True)
    a = ap.parse_args()
    import grpc

    stubs = tempfile.mkdtemp(prefix="kiln_pystubs_")
    kiln_fixture.generate_stubs(os.path.join(a.source_dir, "proto"), stubs)
    from kiln.v1 import service_pb2 as pb, service_pb2_grpc as pb_grpc  # noqa: E402

    engine = b"KILNENG\0" + bytes(range(256)) * 8  # the client checks size and digest only
    answer = {"model_sha256": ""}

    class Converter(pb_grpc.ConverterServicer):
        def Build(self, request_iterator, context):
            for req in request_iterator:  # the spec, the chunks, end_of_upload
                if req.WhichOneof("msg") == "end_of_upload":
                    break
            yield pb.BuildEvent(accepted=pb.Accepted(build_id="b-fake"))
            yield pb.BuildEvent(engine_chunk=pb.EngineChunk(offset=0, data=engine))
            yield pb.BuildEvent(result=pb.BuildResult(
                build_id="b-fake", engine_size=len(engine),
                engine_sha256=hashlib.sha256(engine).hexdigest(),
                model_sha256=answer["model_sha256"], accuracy_pass=True))

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ConverterServicer_to_server(Converter(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        model_path = os.path.join(a.source_dir, "tests/models/mobilenet_tiny/model.onnx")
        with open(model_path, "rb") as f:
            model_digest = hashlib.sha256(f.read()).hexdigest()
        work = tempfile.mkdtemp(prefix="kiln_wrong_engine_")
        out = os.path.join(work, "e.kiln")
        args = [a.client_bin, "--server", f"127.0.0.1:{port}", "--model", model_path,
                "--policy", "fp16", "-o", out, "--request-id", "ci-job-7", "--timeout", "30s"]

        answer["model_sha256"] = hashlib.sha256(b"another model").hexdigest()
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        check(p.returncode == 3, f"another model's engine: exit 3 (got {p.returncode})", p.stderr)
        check("built from another model" in p.stderr, "the error says why", p.stderr)
        check(not os.path.exists(out), "nothing written to -o")
        check(not [f for f in os.listdir(work)], f"no temporary file left ({os.listdir(work)})")

        answer["model_sha256"] = model_digest
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"the uploaded model's engine: exit 0 (got {p.returncode})",
              p.stderr)
        check(os.path.exists(out) and open(out, "rb").read() == engine, "the engine is written")
    finally:
        server.stop(None)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
