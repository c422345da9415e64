#!/usr/bin/env python3
"""Fetches the real models of tests/real_models: trained ONNX models shipped unchanged inside
popular PyPI wheels. Nothing large is committed: each wheel is downloaded with
`pip download --no-deps NAME==VERSION` (pinned, its sha256 checked) into a cache folder, and only
the listed members (the .onnx files, plus a few small label/charset files used to decode
results) are extracted and their sha256 checked. Idempotent: a member already extracted with the
right digest is not downloaded again.

usage: fetch.py [--cache DIR] [--only NAME]... [--list]
  cache: --cache, else $KILN_REAL_MODELS_CACHE, else <repo>/build/real-models
  exit 0: all fetched; 1: a digest or archive is wrong; 2: PyPI cannot be reached

As a module: fetch(cache_dir, names) -> {name: path of model.onnx}; raises Unreachable (PyPI
cannot be reached) or FetchError (anything else).
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# One entry per pinned wheel. `platform`: the wheel is platform-specific, so the same file (and
# digest) is asked for whatever machine fetches it (its models are platform-independent).
WHEELS = {
    "silero-vad": dict(
        version="6.2.3", file="silero_vad-6.2.3-py3-none-any.whl",
        sha256="7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
        licence="MIT (code and models)"),
    "faster-whisper": dict(
        version="1.2.1", file="faster_whisper-1.2.1-py3-none-any.whl",
        sha256="79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7",
        licence="MIT (the bundled Silero VAD model: MIT)"),
    "rapidocr-onnxruntime": dict(
        version="1.4.4", file="rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
        sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
        licence="Apache-2.0 (PaddleOCR models: Apache-2.0)"),
    "ddddocr": dict(
        version="1.6.1", file="ddddocr-1.6.1-py3-none-any.whl",
        sha256="c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
        licence="MIT"),
    "magika": dict(
        version="1.0.3", file="magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
        sha256="3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529",
        platform="manylinux_2_28_x86_64", licence="Apache-2.0"),
    "pipecat-ai": dict(
        version="1.14.0", file="pipecat_ai-1.14.0-py3-none-any.whl",
        sha256="0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44",
        licence="BSD-2-Clause (Smart Turn v3 model: BSD-2-Clause)"),
}

# One entry per model: the wheel it comes from, its member, digest, and what it is. `aux`: small
# files of the same wheel (member, sha256, name in the cache) that decode the model's results.
# producer / opset / ops as read with onnx 1.23 (ops with their node count, subgraphs included).
MODELS = {
    "silero_vad": dict(
        wheel="silero-vad", member="silero_vad/data/silero_vad.onnx",
        sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        producer="spox", opset=16, ir=8,
        ops="If x25 (the 8k/16k branches), LSTM x4 inside If branches, Conv x12, Pad, ReduceMean",
        task="voice activity: speech probability per 32 ms chunk, state carried across chunks"),
    "silero_vad_ifless": dict(
        wheel="silero-vad", member="silero_vad/data/silero_vad_op18_ifless.onnx",
        sha256="7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
        producer="pytorch 2.9.0", opset=18, ir=10,
        ops="If x1 (sample rate), LSTM cells as Gemm/Sigmoid/Tanh/Split, Conv x12",
        task="voice activity, as silero_vad"),
    "silero_vad_seq": dict(
        wheel="faster-whisper", member="faster_whisper/assets/silero_vad_v6.onnx",
        sha256="4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
        producer="pytorch 2.8.0", opset=18, ir=8,
        ops="LSTM x1 over the whole sequence of chunks (h, c inputs), Conv x6, Pad, Pow/Sqrt",
        task="voice activity, all chunks in one run (faster-whisper's VAD filter)"),
    "ppocr_det": dict(
        wheel="rapidocr-onnxruntime", member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        producer="paddle2onnx (empty producer_name)", opset=12, ir=8,
        ops="Conv x62, ConvTranspose x2, Resize x6, HardSigmoid, GlobalAveragePool (DB text detector)",
        task="text detection: probability map, boxes of its connected regions above 0.3"),
    "ppocr_rec": dict(
        wheel="rapidocr-onnxruntime", member="rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        producer="paddle2onnx (empty producer_name)", opset=12, ir=8,
        ops="SVTR neck: decomposed LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) x5, MatMul attention + "
            "Softmax, Conv x38; CTC head (6625 classes, charset in metadata_props)",
        task="text recognition: CTC-decoded text"),
    "ppocr_cls": dict(
        wheel="rapidocr-onnxruntime",
        member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        producer="PaddlePaddle", opset=11, ir=7,
        ops="Conv x53, BatchNormalization x35, HardSigmoid, input dim -1 (batch)",
        task="text-line orientation classifier (0 / 180 degrees): argmax"),
    "ddddocr_ocr": dict(
        wheel="ddddocr", member="ddddocr/common.onnx",
        sha256="33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
        producer="pytorch 1.9", opset=12, ir=6,
        ops="Conv x21, LSTM x1 (bidirectional), Gemm; declared output shape [1, seqlen] while it "
            "computes [T, 1, classes]",
        task="captcha reading: CTC-decoded text",
        aux=[("ddddocr/charsets.py",
              "ae99cf71e1dd738d50d2c2d2bf8544c16a7d23452e9b64346d3ac4dbff83510f", "charsets.py")]),
    "ddddocr_ocr_quant": dict(
        wheel="ddddocr", member="ddddocr/common_old.onnx",
        sha256="b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
        producer="onnx.quantize 0.1.0 (ONNX Runtime's quantizer, dynamic format)", opset=12, ir=6,
        ops="ConvInteger x21, DynamicQuantizeLinear x22, MatMulInteger x1, "
            "com.microsoft.DynamicQuantizeLSTM x1 (bidirectional, hidden 512, int8 W/R)",
        task="captcha reading with ddddocr's default model (DdddOcr() loads it): CTC-decoded "
             "text (CHARSET_OLD)",
        aux=[("ddddocr/charsets.py",
              "ae99cf71e1dd738d50d2c2d2bf8544c16a7d23452e9b64346d3ac4dbff83510f", "charsets.py")]),
    "ddddocr_det": dict(
        wheel="ddddocr", member="ddddocr/common_det.onnx",
        sha256="6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        producer="pytorch 1.9", opset=11, ir=6,
        ops="YOLOX: Conv x83, Sigmoid x80, Resize x2, Slice x8 (Focus), MaxPool x3",
        task="character detection: boxes with score above 0.5 after NMS"),
    "magika": dict(
        wheel="magika", member="magika/models/standard_v3_3/model.onnx",
        sha256="fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
        producer="tf2onnx 1.16.1 (a JAX model through jax2tf: nodes 'jax2tf_get_logits_/...')",
        opset=15, ir=8,
        ops="int32 byte input, LayerNorms decomposed by jax2tf/tf2onnx (ReduceSum/Mul/Sub/Sqrt/"
            "Reciprocal), Conv x1, GlobalMaxPool, MatMul x2, Softmax as Exp/ReduceSum/Div",
        task="file content type classifier (214 labels): argmax",
        aux=[("magika/models/standard_v3_3/config.min.json",
              "ae24c742205358f6ff6dfd5facb6743fb69743dbba8373e73da58ff0cbd695db", "config.min.json")]),
    "smart_turn": dict(
        wheel="pipecat-ai", member="pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
        sha256="2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
        producer="onnx.quantize 0.1.0 (from a PyTorch export)", opset=18, ir=10,
        ops="Whisper-tiny encoder transformer: LayerNormalization x10, MatMul attention + Softmax, "
            "Erf GELU; int8 QDQ (QuantizeLinear x78, DequantizeLinear x114)",
        task="end-of-turn detector: probability, decision at 0.5"),
}


class FetchError(Exception):
    """A download, archive or digest problem (not a network one)."""


class Unreachable(FetchError):
    """PyPI cannot be reached (offline, DNS, proxy)."""


# pip's messages when the index cannot be reached at all.
_NETWORK_SIGNS = ("NewConnectionError", "Failed to establish a new connection",
                  "Temporary failure in name resolution", "Name or service not known",
                  "Network is unreachable", "Max retries exceeded", "ConnectTimeout",
                  "ReadTimeout", "timed out", "ProxyError", "Connection refused",
                  "No route to host", "Could not fetch URL")


def default_cache():
    return os.environ.get("KILN_REAL_MODELS_CACHE") or os.path.join(REPO, "build", "real-models")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(path, digest):
    return os.path.isfile(path) and sha256_of(path) == digest


def _download_wheel(package, cache, log):
    """The pinned wheel of `package` in cache/wheels, downloaded unless already verified."""
    w = WHEELS[package]
    wheels = os.path.join(cache, "wheels")
    path = os.path.join(wheels, w["file"])
    if _verified(path, w["sha256"]):
        return path
    os.makedirs(wheels, exist_ok=True)
    log(f"fetch: downloading {package}=={w['version']} from PyPI")
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--no-cache-dir", "--timeout", "15", "--retries", "1", "-q", "-d", tmp,
               f"{package}=={w['version']}"]
        if "platform" in w:
            cmd[-1:-1] = ["--only-binary=:all:", "--platform", w["platform"]]
        p = subprocess.run(cmd, capture_output=True, text=True)
        out = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            tail = "\n".join(out.splitlines()[-4:])
            if any(s in out for s in _NETWORK_SIGNS):
                raise Unreachable(f"cannot reach PyPI to download {package}=={w['version']} "
                                  f"(offline?): {tail}")
            raise FetchError(f"pip download {package}=={w['version']} failed: {tail}")
        got = os.path.join(tmp, w["file"])
        if not os.path.isfile(got):
            raise FetchError(f"pip download {package}=={w['version']} gave {os.listdir(tmp)}, "
                             f"not {w['file']}")
        digest = sha256_of(got)
        if digest != w["sha256"]:
            raise FetchError(f"{w['file']}: sha256 {digest}, expected {w['sha256']}")
        os.replace(got, path)
    return path


def _extract(wheel_path, member, digest, dest):
    """Extracts one member of the wheel to dest (through a temp file) and checks its digest."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        with zipfile.ZipFile(wheel_path) as z, z.open(member) as src, \
                tempfile.NamedTemporaryFile(dir=os.path.dirname(dest), delete=False) as out:
            shutil.copyfileobj(src, out, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as e:
        raise FetchError(f"{os.path.basename(wheel_path)}: cannot extract {member}: {e}")
    got = sha256_of(out.name)
    if got != digest:
        os.unlink(out.name)
        raise FetchError(f"{member} in {os.path.basename(wheel_path)}: sha256 {got}, "
                         f"expected {digest}")
    os.replace(out.name, dest)


def fetch(cache=None, names=None, log=print, download=True):
    """Makes cache/<name>/model.onnx (and its aux files) for each name; returns their paths.
    download=False: the cache alone (Unreachable for what it lacks)."""
    cache = cache or default_cache()
    names = list(names or MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise FetchError(f"unknown model(s) {unknown}; known: {sorted(MODELS)}")
    paths = {}
    for name in names:
        m = MODELS[name]
        folder = os.path.join(cache, name)
        files = [(m["member"], m["sha256"], "model.onnx")] + list(m.get("aux", []))
        for member, digest, local in files:
            dest = os.path.join(folder, local)
            if _verified(dest, digest):
                continue
            if not download and not _verified(
                    os.path.join(cache, "wheels", WHEELS[m["wheel"]]["file"]),
                    WHEELS[m["wheel"]]["sha256"]):
                raise Unreachable(f"{name} is not in {cache} and PyPI was found unreachable")
            wheel = _download_wheel(m["wheel"], cache, log)
            _extract(wheel, member, digest, dest)
            log(f"fetch: {name}/{local} extracted from {os.path.basename(wheel)}")
        paths[name] = os.path.join(folder, "model.onnx")
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=None)
    ap.add_argument("--only", action="append", default=[], help="model name (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the models and exit")
    a = ap.parse_args()
    if a.list:
        for n, m in MODELS.items():
            w = WHEELS[m["wheel"]]
            print(f"{n:18} {m['wheel']}=={w['version']} {m['member']} ({w['licence']})")
        return 0
    try:
        for n, p in fetch(a.cache, a.only or None).items():
            print(f"{n:18} {p}")
    except Unreachable as e:
        print(f"fetch: error: {e}", file=sys.stderr)
        return 2
    except FetchError as e:
        print(f"fetch: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
