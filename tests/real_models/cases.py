"""The test cases of real_models_test.py: for each real model, the realistic input its package
would feed it, how to run it (one call, or a stream of calls carrying state), the task result
its package derives from the outputs, a check that ONNX Runtime's result on that input means
what we claim (the input is realistic, not noise), and the fp32 tolerances; for each committed
PyTorch export, its stored data sets.

A case's evaluate(infer) runs the model through `infer(feeds: {input name: array}) -> {output
name: array}` (ONNX Runtime or a Kiln engine) and returns a Result."""
import ast
import glob
import json
import os

import numpy as np
import onnx
from onnx import numpy_helper

import synth


class Result:
    """What one evaluation produced: the outputs compared numerically at fp32 (by name), the task
    result compared under every policy, and that result in words for the report."""

    def __init__(self, outputs, task, text):
        self.outputs, self.task, self.text = outputs, task, text


def compare_arrays(got, ref, atol, rtol):
    """(ok, summary) for |got - ref| <= atol + rtol * |ref| elementwise (exact for integers)."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return False, f"shape {list(got.shape)}, expected {list(ref.shape)}"
    if got.dtype != ref.dtype:
        return False, f"dtype {got.dtype}, expected {ref.dtype}"
    if not np.issubdtype(ref.dtype, np.floating):
        bad = int((got != ref).sum())
        return bad == 0, f"{bad} of {ref.size} differ"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.isfinite(g).all() and np.isfinite(r).all():
        return False, f"{int((~np.isfinite(g)).sum())} non-finite value(s)"
    err = np.abs(g - r)
    bound = atol + rtol * np.abs(r)
    out = int((err > bound).sum())
    i = int(np.argmax(err - bound)) if err.size else 0
    summary = (f"max_abs {err.max() if err.size else 0:.3g} (ref scale "
               f"{np.abs(r).max() if r.size else 0:.3g}), {out} of {r.size} outside "
               f"atol {atol:g} + rtol {rtol:g}")
    if out:
        summary += f"; worst at flat index {i}: {g.flat[i]:.6g} vs {r.flat[i]:.6g}"
    return out == 0, summary


class Case:
    """Base: a model file, inputs, a task. Subclasses set name, group and tolerances."""
    group = "pypi"
    # fp32 tolerance (atol, rtol) per output name, "*" for the others.
    tolerance = {"*": (1e-4, 1e-4)}
    # The reference: ONNX Runtime with its graph optimisations (False: the graph as written).
    reference_optimized = True
    # Why Kiln cannot build or run this model yet, per policy ("*": every policy; empty: it must
    # pass). A known failure's FAIL row is reported as KNOWN, not failed; a policy listed here
    # that passes fails the test (a stale entry).
    known_failure = {}

    def __init__(self, name):
        self.name = name
        self.path = None
        self.aux = None

    def prepare(self, path):
        """Called once with the model's path (its aux files lie beside it)."""
        self.path = path
        self.aux = os.path.dirname(path)

    def evaluate(self, infer):
        raise NotImplementedError

    def reference(self, ort_infer):
        """The reference result: ONNX Runtime's on the same input (stored for torch exports)."""
        return self.evaluate(ort_infer)

    def sanity(self, ref):
        """Problems with ONNX Runtime's result on our input (it must mean what we claim)."""
        return []

    def compare_fp32(self, got, ref):
        """[(ok, message)] for each output at fp32."""
        checks = []
        for name, r in ref.outputs.items():
            if name not in got.outputs:
                checks.append((False, f"{name}: missing"))
                continue
            atol, rtol = self.tolerance.get(name, self.tolerance["*"])
            ok, msg = compare_arrays(got.outputs[name], r, atol, rtol)
            checks.append((ok, f"{name}: {msg}"))
        return checks

    def compare_task(self, got, ref, policy):
        """(ok, message): the task result under `policy` is the reference's."""
        ok = got.task == ref.task
        return ok, (f"task {got.text}" if ok else f"task {got.text}, expected {ref.text}")


# ---- voice activity ------------------------------------------------------------------------

def _vad_audio():
    """0.5 s room noise, 1.5 s of synthetic voiced speech, 0.5 s room noise: 78 chunks of 512."""
    a = np.concatenate([synth.silence(0.5, seed=1), synth.voiced(1.5, seed=0),
                        synth.silence(0.5, seed=2)])
    return a[:len(a) // 512 * 512]


# Silero's own hysteresis: speech starts above 0.5 and ends below 0.35 (threshold - 0.15). A
# chunk whose reference probability lies in [0.35, 0.65] is one the VAD itself treats as
# undecided, so its decision is not compared; every other chunk must agree.
_VAD_BAND = (0.35, 0.65)


class VadCase(Case):
    """Silero VAD: speech probability per 32 ms chunk (512 samples + 64 of context at 16 kHz)."""
    # Probabilities in [0, 1] after 78 steps of an LSTM whose state is fed back (closed loop:
    # each engine carries its own state): fp32 reordering inside one chunk (~1e-6 relative over
    # ~12 convolutions and one LSTM step) is damped, not grown, by the LSTM's saturating gates
    # (ONNX Runtime optimised vs unoptimised: 3.6e-7 on the probabilities after 78 chunks).
    # 1e-4 absolute (and 1e-4 relative on the state, |h|, |c| up to ~5) leaves room for a
    # different GEMM blocking and exp/tanh approximations of a few ulps.
    tolerance = {"*": (1e-4, 1e-4)}
    chunk, context = 512, 64

    def decisions(self, ref_probs, probs):
        lo, hi = _VAD_BAND
        sure = (ref_probs < lo) | (ref_probs > hi)
        return sure, probs > 0.5

    def compare_task(self, got, ref, policy):
        sure, want = self.decisions(ref.task, ref.task)
        _, have = self.decisions(ref.task, got.task)
        bad = np.nonzero(sure & (have != want))[0]
        ok = len(bad) == 0
        msg = f"{int(sure.sum()) - len(bad)} of {int(sure.sum())} unambiguous chunks agree"
        if not ok:
            msg += (f"; chunk {int(bad[0])}: p {got.task[bad[0]]:.3f}, reference "
                    f"{ref.task[bad[0]]:.3f}")
        return ok, msg

    def sanity(self, ref):
        p = ref.task
        t = (np.arange(len(p)) + 1) * self.chunk / synth.SR  # chunk end times
        speech = p[(t > 0.75) & (t < 2.0)]
        noise = np.concatenate([p[(t > 0.2) & (t < 0.5)], p[t > 2.35]])
        problems = []
        if speech.mean() < 0.8:
            problems.append(f"voiced region mean p {speech.mean():.2f} < 0.8")
        if noise.max() > _VAD_BAND[0]:
            problems.append(f"silence region max p {noise.max():.2f} > {_VAD_BAND[0]}")
        return problems

    @staticmethod
    def _text(p):
        return "".join("S" if x > 0.5 else "." for x in p)


class SileroStreamCase(VadCase):
    """Silero's OnnxWrapper: one call per chunk, (input [1, 576], state [2, 1, 128], sr) ->
    (output [1, 1], stateN), the state and the 64-sample context carried across calls."""

    def evaluate(self, infer):
        audio = _vad_audio()
        state = np.zeros((2, 1, 128), np.float32)
        ctx = np.zeros((1, self.context), np.float32)
        sr = np.array(synth.SR, np.int64)
        probs = []
        for i in range(0, len(audio), self.chunk):
            x = audio[None, i:i + self.chunk]
            out = infer({"input": np.concatenate([ctx, x], 1), "state": state, "sr": sr})
            ctx = x[:, -self.context:]
            probs.append(float(out["output"].reshape(-1)[0]))
            state = out["stateN"]
        p = np.array(probs, np.float32)
        return Result({"probs": p, "final_state": state}, p, self._text(p))


class SileroSequenceCase(VadCase):
    """faster-whisper's SileroVADModel: all chunks in one call, (input [N, 576], h, c) ->
    (speech_probs [N], hn, cn); chunk i's context is the end of chunk i-1 (zeros for the first)."""

    def evaluate(self, infer):
        chunks = _vad_audio().reshape(-1, self.chunk)
        ctx = np.roll(chunks[:, -self.context:], 1, 0)
        ctx[0] = 0
        zeros = np.zeros((1, 1, 128), np.float32)
        out = infer({"input": np.concatenate([ctx, chunks], 1), "h": zeros, "c": zeros})
        p = out["speech_probs"].reshape(-1)
        return Result({"speech_probs": out["speech_probs"], "hn": out["hn"], "cn": out["cn"]},
                      p, self._text(p))


# ---- OCR -----------------------------------------------------------------------------------

def _norm_half(gray):
    """PaddleOCR's rec/cls normalisation of a grayscale image as 3 channels: (x/255 - .5)/.5."""
    return ((np.repeat(gray[None], 3, 0) / 255.0 - 0.5) / 0.5).astype(np.float32)


REC_TEXTS = ["HELLO WORLD", "OCR TEST 42"]


class PaddleRecCase(Case):
    """PP-OCRv4 rec: a batch of two rendered text lines at height 48, the narrower padded with
    zeros (RapidOCR's batching) -> [2, T, 6625] CTC probabilities; the task is the decoded text."""
    # Softmax probabilities after ~15 conv blocks and two SVTR attention blocks (decomposed
    # LayerNorms): fp32 reordering of the ~1e3-term sums grows to ~1e-5 relative through the
    # depth (ONNX Runtime optimised vs unoptimised: 2.3e-6); 1e-4 absolute on probabilities.
    tolerance = {"*": (1e-4, 1e-4)}

    def prepare(self, path):
        super().prepare(path)
        meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
        self.charset = [""] + meta["character"].splitlines() + [" "]

    def evaluate(self, infer):
        lines = [synth.resize(synth.render_text(t), 48) for t in REC_TEXTS]
        width = max(l.shape[1] for l in lines)
        x = np.zeros((len(lines), 3, 48, width), np.float32)
        for i, l in enumerate(lines):
            x[i, :, :, :l.shape[1]] = _norm_half(l)
        out = infer({"x": x})
        probs = next(iter(out.values()))
        texts = tuple("".join(self.charset[i] for i in synth.ctc_decode(p.argmax(-1)))
                      for p in probs)
        return Result({"probs": probs}, texts, repr(list(texts)))

    # A CTC frame whose reference top-two probabilities lie within this margin is one a reduced
    # precision may tip either way (as Silero's undecided band below): there either of the two
    # is accepted, every other frame must agree. bf16 keeps 8 significant bits: its engines
    # move this model's probabilities by up to 0.05-0.08 (measured against ONNX Runtime fp32
    # with fusion on and off), so 0.1; fp16's 11 bits move them 8x less: 0.02. ONNX Runtime
    # reads the S of 'OCR TEST 42' at 0.519 against 0.475 for 5: such a frame is undecided.
    def _margin(self, policy):
        return 0.0 if policy == "fp32" else 0.1 if "bf16" in policy else 0.02

    def compare_task(self, got, ref, policy):
        margin = self._margin(policy)
        if margin == 0.0:
            return super().compare_task(got, ref, policy)
        texts, undecided = [], 0
        for g, r in zip(got.outputs["probs"], ref.outputs["probs"]):
            want = r.argmax(-1)
            top2 = np.argsort(r, axis=-1)[:, -2:]
            near = np.take_along_axis(r, top2, -1)
            close = (near[:, 1] - near[:, 0]) < margin
            have = g.argmax(-1)
            take = close & (have == top2[:, 0])  # the runner-up where the reference is unsure
            undecided += int(close.sum())
            have = np.where(take, want, have)
            texts.append("".join(self.charset[i] for i in synth.ctc_decode(have)))
        ok = tuple(texts) == tuple(ref.task)
        msg = (f"task {got.text} ({undecided} undecided frame(s) of the reference, margin "
               f"{margin})")
        return ok, msg if ok else f"{msg}, expected {ref.text}"

    def sanity(self, ref):
        return [] if list(ref.task) == REC_TEXTS else [f"reads {ref.task}, not {REC_TEXTS}"]


class PaddleClsCase(Case):
    """PP-OCR mobile v2 direction classifier: a text line upright and rotated 180 degrees,
    resized to height 48 (at most 192 wide), zero-padded to 192 -> [2, 2] softmax over
    ('0', '180'); the task is the argmax."""
    # Softmax probabilities of a 2-class MobileNetV3 head: fp32 reordering ~1e-6 relative per
    # layer over ~50 layers (ONNX Runtime optimised vs unoptimised: 1.2e-7); 1e-4 absolute.
    tolerance = {"*": (1e-4, 1e-4)}
    labels = ("0", "180")

    def evaluate(self, infer):
        line = synth.render_text("HELLO WORLD")
        x = np.zeros((2, 3, 48, 192), np.float32)
        for i, img in enumerate((line, line[::-1, ::-1])):
            w = min(192, int(np.ceil(48 * img.shape[1] / img.shape[0])))
            x[i, :, :, :w] = _norm_half(synth.resize(img, 48, w))
        probs = next(iter(infer({"x": x}).values()))
        task = tuple(self.labels[i] for i in probs.argmax(-1))
        return Result({"probs": probs}, task, repr(list(task)))

    def sanity(self, ref):
        p = ref.outputs["probs"]
        if ref.task != ("0", "180"):
            return [f"orientation {ref.task}, expected ('0', '180')"]
        return [] if (p.max(-1) > 0.7).all() else [f"margins too small: {p.tolist()}"]


DET_LINES = [(30, 20, "INVOICE 2024", 4), (120, 60, "TOTAL 42", 5), (230, 200, "KILN OCR", 3)]


class PaddleDetCase(Case):
    """PP-OCRv4 DB text detector on a 320x480 page with three text lines (ImageNet mean/std
    normalisation) -> probability map [1, 1, 320, 480]; the task is the boxes of the map's
    connected regions above 0.3 whose mean score is above 0.5 (RapidOCR's thresh/box_thresh),
    matched by IoU."""
    # A sigmoid map in [0, 1] after ~60 convolutions, 2 transposed convolutions and 6 resizes,
    # whose logits reach |z| ~ 20 where the map is steepest at its region borders: fp32
    # reordering moves the map by up to 1.35e-4 (ONNX Runtime optimised vs unoptimised,
    # measured); 1e-3 absolute keeps ~7x room.
    tolerance = {"*": (1e-3, 0)}
    # Region boxes may move by a pixel where the map crosses 0.3 between two pixels' values;
    # on boxes at least 14 px tall and 120 px wide one pixel on each side costs < 0.25 IoU.
    min_iou = 0.75

    def evaluate(self, infer):
        page = synth.text_page(DET_LINES)
        rgb = np.repeat(page[..., None], 3, -1) / 255.0
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        x = ((rgb - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)
        prob = next(iter(infer({"x": x}).values()))
        m = prob[0, 0]
        boxes = []
        for y0, x0, y1, x1, n in synth.components(m > 0.3):
            if n >= 16 and m[y0:y1, x0:x1].mean() > 0.5:
                boxes.append((y0, x0, y1, x1))
        return Result({"map": prob}, boxes, f"{len(boxes)} box(es) {boxes}")

    def compare_task(self, got, ref, policy):
        return _match_boxes(got.task, ref.task, self.min_iou)

    def sanity(self, ref):
        return [] if len(ref.task) == len(DET_LINES) else [
            f"{len(ref.task)} text region(s), expected {len(DET_LINES)}"]


def _match_boxes(got, ref, min_iou):
    if len(got) != len(ref):
        return False, f"{len(got)} box(es), expected {len(ref)}: {got} vs {ref}"
    worst = 1.0
    for r in ref:
        best = max((synth.iou(g, r) for g in got), default=0.0)
        worst = min(worst, best)
        if best < min_iou:
            return False, f"box {r}: best IoU {best:.2f} < {min_iou}; got {got}"
    return True, f"{len(ref)} box(es) matched, worst IoU {worst:.3f}"


DDDD_TEXTS = ["A7K9X", "3PQ8"]


class DdddOcrCase(Case):
    """ddddocr's beta model (common.onnx, `DdddOcr(beta=True)`): each captcha (text rendered
    with grain noise) at height 64, gray /255, one call each -> [T, 1, 8210] scores; the task is
    the CTC-decoded text (CHARSET_BETA of the same wheel)."""
    # Raw scores (|s| up to ~36) after 21 convolutions and a bidirectional LSTM over ~25 steps:
    # fp32 reordering of ~1e3-term sums ~1e-5 relative (ONNX Runtime optimised vs
    # unoptimised: 1.1e-5 absolute); 1e-3 absolute (3e-5 of the scale) + 1e-4 relative.
    tolerance = {"*": (1e-3, 1e-4)}
    texts = DDDD_TEXTS
    charset_name = "CHARSET_BETA"
    px = 5

    def prepare(self, path):
        super().prepare(path)
        with open(os.path.join(self.aux, "charsets.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        self.charset = next(ast.literal_eval(n.value) for n in tree.body
                            if isinstance(n, ast.Assign) and n.targets[0].id == self.charset_name)

    def evaluate(self, infer):
        rng = np.random.default_rng(3)
        outputs, texts = {}, []
        for k, text in enumerate(self.texts):
            img = synth.render_text(text, px=self.px).astype(np.float32)
            img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255)
            x = (synth.resize(img, 64) / 255.0)[None, None].astype(np.float32)
            scores = next(iter(infer({"input1": x}).values()))
            outputs[f"scores_{k}"] = scores
            flat = scores.reshape(scores.shape[0], -1) if scores.ndim == 3 else scores
            texts.append("".join(self.charset[i] for i in synth.ctc_decode(flat.argmax(-1))))
        return Result(outputs, tuple(texts), repr(texts))

    def sanity(self, ref):
        # The captcha model reads case-insensitively (its charset's Latin letters are lower).
        want = [t.lower() for t in self.texts]
        got = [t.lower() for t in ref.task]
        return [] if got == want else [f"reads {ref.task}, not {self.texts}"]


class DdddOcrQuantCase(DdddOcrCase):
    """ddddocr's default OCR model (common_old.onnx, which `ddddocr.DdddOcr()` loads), dynamically
    quantized by ONNX Runtime's tool: ConvInteger x21, MatMulInteger, DynamicQuantizeLinear x22,
    com.microsoft DynamicQuantizeLSTM. Same preprocessing (height 64, gray /255) -> [T, 1, 8210];
    the task is the CTC-decoded text over CHARSET_OLD."""
    # Ill-conditioned at fp32, like every dynamically quantized model: each DynamicQuantizeLinear
    # rounds to a uint8 step, so an fp32 difference of an ulp flips the roundings of values on a
    # step's edge and the flips cascade through 21 convolutions and the LSTM. Measured with ONNX
    # Runtime as written on five captchas: perturbing the input by 1e-7 / 1e-6 / 1e-5 relative
    # (what reordering a sum does) moves the scores (scale ~34) by up to 0.41 / 0.83 / 0.58.
    # 1.5 absolute covers that; the texts are compared exactly on top (these two captchas were
    # chosen for their top-1 vs top-2 score margins, >= 2.1 at every step, above 2 x 0.83).
    tolerance = {"*": (1.5, 0)}
    texts = ["7K9X", "2024"]
    charset_name = "CHARSET_OLD"
    px = 6
    # Its ConvInteger sums reach 1.8e5, past fp16: their Cast to float and the Mul by the scales
    # stay fp32 under every policy (precision/assign.cc, IsIntegerSums).


DDDD_CHARS = [(20, 20, "K", 4, (20, 20, 200)), (60, 150, "7", 4, (200, 30, 30)),
              (30, 280, "Q", 4, (30, 120, 30)), (110, 60, "B", 4, (10, 10, 10)),
              (120, 250, "X", 4, (90, 20, 90))]


class DdddDetCase(Case):
    """ddddocr's YOLOX character detector on a 200x400 click-captcha scene with five characters,
    letterboxed into 416x416 (pad 114, nearest resize, no normalisation) -> [1, 3549, 6]; the
    task is the boxes scoring above 0.5 after ddddocr's NMS (IoU 0.45), matched by IoU."""
    # Raw head outputs (box offsets, log sizes, scores after sigmoid; |x| up to ~3) after 83
    # convolutions: fp32 reordering ~1e-6 relative (ONNX Runtime optimised vs unoptimised:
    # 4.2e-6 absolute); 1e-4 absolute + 1e-4 relative.
    tolerance = {"*": (1e-4, 1e-4)}
    # Boxes decoded from the same anchor move by exp(d log size) * stride: a 1e-2 change of a
    # log size moves a 30 px box by 0.3 px; 0.9 IoU allows ~1.5 px on 30 px boxes.
    min_iou = 0.9

    def evaluate(self, infer):
        img = synth.captcha_scene(DDDD_CHARS, seed=1)
        h, w = img.shape[:2]
        r = min(416 / h, 416 / w)
        nh, nw = int(h * r), int(w * r)
        ys = np.clip(((np.arange(nh) + 0.5) / r - 0.5).round().astype(int), 0, h - 1)
        xs = np.clip(((np.arange(nw) + 0.5) / r - 0.5).round().astype(int), 0, w - 1)
        pad = np.full((416, 416, 3), 114, np.uint8)
        pad[:nh, :nw] = img[ys][:, xs]
        raw = next(iter(infer({"images": pad.transpose(2, 0, 1)[None].astype(np.float32)}).values()))
        boxes, scores = synth.yolox_boxes(raw)
        keep = synth.nms(boxes, scores, 0.5)
        found = [tuple(float(v) for v in (boxes[i] / r).round(1)) for i in keep]
        return Result({"raw": raw}, found, f"{len(found)} box(es)")

    def compare_task(self, got, ref, policy):
        return _match_boxes(got.task, ref.task, self.min_iou)

    def sanity(self, ref):
        return [] if len(ref.task) == len(DDDD_CHARS) else [
            f"{len(ref.task)} character(s) found, expected {len(DDDD_CHARS)}"]


# ---- file type, end of turn ----------------------------------------------------------------

class MagikaCase(Case):
    """Magika standard_v3_3 (a JAX model, through jax2tf and tf2onnx): a batch of six files (Python, C++, JSON, HTML, shell, PNG) as
    int32 byte features [6, 2048] -> [6, 214] probabilities; the task is each argmax label."""
    # Softmax probabilities of a small model (byte embedding, one Conv, dense layers,
    # LayerNorms decomposed by jax2tf/tf2onnx): fp32 reordering ~1e-6 relative (ONNX Runtime
    # optimised vs unoptimised: 1.8e-7); 1e-4 absolute.
    tolerance = {"*": (1e-4, 1e-4)}

    def prepare(self, path):
        super().prepare(path)
        with open(os.path.join(self.aux, "config.min.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.labels = cfg["target_labels_space"]

    def evaluate(self, infer):
        c = self.cfg
        x = np.stack([synth.magika_features(d, c["beg_size"], c["end_size"], c["block_size"],
                                            c["padding_token"])
                      for d in synth.SAMPLE_FILES.values()])
        probs = next(iter(infer({"bytes": x}).values()))
        task = tuple(self.labels[i] for i in probs.argmax(-1))
        return Result({"probs": probs}, task, repr(list(task)))

    def sanity(self, ref):
        want = tuple(synth.SAMPLE_FILES)
        return [] if ref.task == want else [f"labels {ref.task}, expected {want}"]


class SmartTurnCase(Case):
    """Pipecat's Smart Turn v3.2 (Whisper-tiny encoder, int8 QDQ): Whisper log-mel features of
    four 8 s windows [4, 80, 800] -> end-of-turn probability [4, 1]; the task is each decision at
    0.5 (pipecat's). Speech followed by seconds of silence is a finished turn; speech running to
    the end of the window is not."""
    # The reference is the graph as written (ONNX Runtime without graph optimisations): its
    # optimiser fuses Q/DQ pairs into integer kernels whose roundings differ from the ONNX
    # semantics (the fused path moves these probabilities by up to 0.12).
    reference_optimized = False
    # fp32 is ill-conditioned here: each QuantizeLinear rounds to an int8 step, so an fp32
    # difference of one ulp flips the roundings of values that lie on a step's edge, and those
    # flips cascade through 4 layers. Measured on these inputs with ONNX Runtime as written:
    # perturbing the features by 1e-7 / 1e-6 / 1e-5 relative (what reordering a sum does) moves
    # the probabilities by up to 0.011 / 0.035 / 0.071. 0.1 absolute covers that; the decisions
    # (margins >= 0.39 from 0.5) are compared exactly on top.
    tolerance = {"*": (0.1, 0)}
    expected = (True, False, False, True)

    def evaluate(self, infer):
        clips = [synth.voiced(2.0),  # then 6 s of (zero-padded) silence
                 np.concatenate([synth.silence(7.0), synth.voiced(1.0, seed=7)]),
                 synth.voiced(8.0),
                 synth.voiced(4.0)]
        x = np.stack([synth.whisper_features(c) for c in clips])
        p = next(iter(infer({"input_features": x}).values()))
        task = tuple(bool(v > 0.5) for v in p.reshape(-1))
        return Result({"probability": p}, task, repr([round(float(v), 3) for v in p.reshape(-1)]))

    def sanity(self, ref):
        p = ref.outputs["probability"].reshape(-1)
        problems = [] if ref.task == self.expected else [
            f"decisions {ref.task}, expected {self.expected}"]
        if not (np.abs(p - 0.5) > 0.3).all():
            problems.append(f"probabilities within 0.3 of 0.5: {p}")
        return problems


def pypi_cases():
    return [SileroStreamCase("silero_vad"), SileroStreamCase("silero_vad_ifless"),
            SileroSequenceCase("silero_vad_seq"), PaddleDetCase("ppocr_det"),
            PaddleRecCase("ppocr_rec"), PaddleClsCase("ppocr_cls"), DdddOcrCase("ddddocr_ocr"),
            DdddOcrQuantCase("ddddocr_ocr_quant"), DdddDetCase("ddddocr_det"), MagikaCase("magika"),
            SmartTurnCase("smart_turn")]


# ---- committed PyTorch exports -------------------------------------------------------------

def _read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


class TorchExportCase(Case):
    """A model of tests/models/torch_exports/: every test_data_set_<k>, inputs by name, outputs
    against the stored ONNX Runtime outputs."""
    group = "torch"
    # fp32: outputs of RNN/LSTM/GRU cells are bounded by tanh (|y| < 1) and the models are
    # small (hidden 16-32, 2 layers, <= 12 steps): reordering the <= 64-term dot products costs
    # a few float32 ulps (~1e-7) per step, compounded over <= 24 cell evaluations; 1e-5 is ~10x
    # that.
    tolerance = {"*": (1e-5, 1e-5)}
    # Reduced precision (the task check: the recurrent state tracks the fp32 one). Each cell
    # step rounds its inputs, weights and output to the assigned type (unit roundoff u = 2^-11
    # fp16, 2^-8 bf16); the gates' sensitivity is <= 1 and PyTorch's default weights
    # (U(+-1/sqrt(H))) keep the recurrence contractive, so the error stays within a few
    # roundings of each step's own: 5u absolute on tanh-bounded outputs (Kiln's first LSTM,
    # GRU and RNN kernels measured ~1.1u on all of these models), 5u times the output's scale
    # where that exceeds 1 (cond's ReLU branch doubles values up to ~3).
    reduced_atol = {"fp32-layernorm": 5 * 2.0 ** -11, "bf16-layernorm": 5 * 2.0 ** -8}

    def __init__(self, folder):
        super().__init__(os.path.basename(folder))
        self.folder = folder
        self.path = os.path.join(folder, "model.onnx")
        self.sets = sorted(glob.glob(os.path.join(folder, "test_data_set_*")))

    def prepare(self, path):
        pass

    def _inputs(self, ds):
        return dict(_read_pb(p) for p in sorted(glob.glob(os.path.join(ds, "input_*.pb")),
                                                 key=lambda s: int(s.rsplit("_", 1)[1][:-3])))

    def evaluate(self, infer):
        outputs = {}
        for k, ds in enumerate(self.sets):
            for name, arr in infer(self._inputs(ds)).items():
                outputs[f"set{k}/{name}"] = arr
        return Result(outputs, None, f"{len(self.sets)} data set(s)")

    def reference(self, ort_infer):
        outputs = {}
        for k, ds in enumerate(self.sets):
            for p in glob.glob(os.path.join(ds, "output_*.pb")):
                name, arr = _read_pb(p)
                outputs[f"set{k}/{name}"] = arr
        return Result(outputs, None, f"{len(self.sets)} data set(s)")

    def compare_task(self, got, ref, policy):
        atol = self.reduced_atol.get(policy)
        if atol is None:
            return True, "no reduced-precision bound for this policy"
        worst, msgs = 0.0, []
        for name, r in ref.outputs.items():
            bound = atol * max(1.0, float(np.abs(r).max()))
            ok, msg = compare_arrays(got.outputs.get(name, np.zeros(0)), r, bound, 0)
            if not ok:
                msgs.append(f"{name}: {msg}")
            else:
                worst = max(worst, float(np.abs(got.outputs[name].astype(np.float64) - r).max()))
        if msgs:
            return False, "; ".join(msgs)
        return True, f"all outputs within {atol:.3g} x max(1, scale) (max_abs {worst:.3g})"


def torch_cases(root):
    folders = sorted(glob.glob(os.path.join(root, "tests", "models", "torch_exports", "*", "")))
    return [TorchExportCase(f.rstrip("/")) for f in folders if os.path.isfile(f + "model.onnx")]
