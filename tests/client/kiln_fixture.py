"""Helpers shared by the client tests: a kiln-server on a free loopback port, stopped for sure.

Run with Debian's /usr/bin/python3 (python3-grpcio / python3-grpc-tools live there).
"""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time


class Server:
    """A kiln-server child process listening on 127.0.0.1:<port>."""

    def __init__(self, proc, port, log_path):
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def rss_kib(self):
        """Resident set size of the server process (VmRSS, KiB)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS in /proc status")

    def private_kib(self):
        """Private memory of the server (RssAnon: heap, stacks, anonymous maps; KiB), without
        the shared-library pages that make up most of its RSS."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        raise RuntimeError("no RssAnon in /proc status")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=30):
        """SIGTERM (drain), then SIGKILL after `timeout` seconds. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(server_bin, work_dir, extra_args=(), startup_timeout=30):
    """Starts kiln-server on 127.0.0.1 with a free port (--listen 127.0.0.1:0 --port-file)."""
    port_file = os.path.join(work_dir, "port")
    log_path = os.path.join(work_dir, "server.log")
    args = [server_bin, "--listen", "127.0.0.1:0", "--port-file", port_file, *extra_args]
    log = open(log_path, "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(f"kiln-server exited with {proc.returncode}:\n{f.read()}")
        try:
            with open(port_file) as f:
                text = f.read().strip()
            if text:
                return Server(proc, int(text), log_path)
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"kiln-server wrote no port file in {startup_timeout}s")


@contextlib.contextmanager
def running_server(server_bin, extra_args=(), keep_log_on_failure=True):
    """Yields (Server, work_dir); the server is stopped and the folder removed on any exit."""
    with tempfile.TemporaryDirectory(prefix="kiln_client_") as work:
        server = start_server(server_bin, work, ["--cache-dir", os.path.join(work, "cache"),
                                                 *extra_args])
        ok = False
        try:
            yield server, work
            ok = True
        finally:
            code = server.stop()
            if not ok and keep_log_on_failure:
                sys.stderr.write(f"--- kiln-server log (exit {code}) ---\n{server.log()}\n")


def generate_stubs(proto_dir, out_dir):
    """Generates the kiln.v1 and grpc.health.v1 Python stubs into out_dir; returns out_dir.

    Import them as `kiln.v1.service_pb2(_grpc)` and `kiln_health.health_pb2(_grpc)`.

    Debian's python3-grpc-tools ships no health.proto, so the standard one (grpc/grpc
    src/proto/grpc/health/v1/health.proto, the part servers implement) is written here.
    """
    from grpc_tools import protoc

    # The file lives at kiln_health/health.proto (module kiln_health.health_pb2): a generated
    # `grpc/health/v1` package would be shadowed by the installed `grpc` package. The proto
    # package, hence the wire name grpc.health.v1.Health, is unchanged.
    health_dir = os.path.join(out_dir, "_health_src", "kiln_health")
    os.makedirs(health_dir, exist_ok=True)
    with open(os.path.join(health_dir, "health.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    protos = [("kiln/v1/report.proto", proto_dir), ("kiln/v1/service.proto", proto_dir),
              ("kiln_health/health.proto", os.path.join(out_dir, "_health_src"))]
    for proto, include in protos:
        rc = protoc.main(["grpc_tools.protoc", f"-I{include}", f"-I{proto_dir}",
                          f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", proto])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {proto} ({rc})")
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return out_dir


HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""
