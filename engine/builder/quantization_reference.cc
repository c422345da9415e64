// Detection of a model's quantization form, the rewrite that recovers the float computation of
// a QDQ graph (its Q->DQ pairs bypassed), and the report's QuantizationSummary built from them.
#include "engine/builder/quantization_reference.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/op_schemas.h"
#include "engine/runtime/session.h"

namespace kiln::builder {
namespace {

using ir::OpType;

bool IsConstant(const ir::Value* v) {
  return v != nullptr && (v->constant.has_value() ||
                          (v->producer != nullptr && v->producer->op == OpType::kConstant));
}

// Same tensor: the same value, or two constants of equal dtype, dims and bytes.
bool SameValue(const ir::Value* a, const ir::Value* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr || !a->constant || !b->constant) return false;
  const ir::Tensor& x = *a->constant;
  const ir::Tensor& y = *b->constant;
  return x.dtype() == y.dtype() && x.dims() == y.dims() && x.byte_size() == y.byte_size() &&
         (x.byte_size() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.byte_size()) == 0);
}

// A missing zero point and a constant zero one mean the same (the dtype aside, which the
// quantizer's output carries): compared as values only when both are present.
bool SameZeroPoint(const ir::Value* q_zp, const ir::Value* dq_zp) {
  auto all_zero = [](const ir::Value* v) {
    if (v == nullptr) return true;
    if (!v->constant) return false;
    const auto* p = static_cast<const unsigned char*>(v->constant->raw_data());
    return std::all_of(p, p + v->constant->byte_size(), [](unsigned char c) { return c == 0; });
  };
  if (q_zp == nullptr || dq_zp == nullptr) return all_zero(q_zp) && all_zero(dq_zp);
  return SameValue(q_zp, dq_zp);
}

enum class DqKind { kNotQuantized, kPair, kWeightPair, kWeight, kMismatched, kOther };

// What the DequantizeLinear `dq` reads.
DqKind ClassifyDequantize(const ir::Node& dq) {
  const ir::Value* x = dq.input(0);
  if (x == nullptr) return DqKind::kOther;
  if (IsConstant(x)) return DqKind::kWeight;
  const ir::Node* q = x->producer;
  if (q == nullptr) return DqKind::kOther;
  if (q->op == OpType::kDynamicQuantizeLinear) {
    // y, y_scale, y_zero_point of the same node: a pair by construction.
    if (x->producer_output != 0) return DqKind::kOther;
    const ir::Value* s = dq.input(1);
    const ir::Value* z = dq.input(2);
    const bool same = s != nullptr && s->producer == q && s->producer_output == 1 &&
                      (z == nullptr || (z->producer == q && z->producer_output == 2));
    return same ? DqKind::kPair : DqKind::kMismatched;
  }
  if (q->op != OpType::kQuantizeLinear || q->input(0) == nullptr) return DqKind::kOther;
  const ir::Value* scale = q->input(1);
  const bool per_tensor = scale != nullptr && scale->constant && scale->constant->rank() == 0;
  const bool same = SameValue(q->input(1), dq.input(1)) &&
                    SameZeroPoint(q->input(2), dq.input(2)) &&
                    (per_tensor || (q->GetInt("axis", 1) == dq.GetInt("axis", 1) &&
                                    q->GetInt("block_size", 0) == dq.GetInt("block_size", 0)));
  if (!same) return DqKind::kMismatched;
  return IsConstant(q->input(0)) ? DqKind::kWeightPair : DqKind::kPair;
}

bool IsIntegerOp(OpType op) {
  return op == OpType::kMatMulInteger || op == OpType::kConvInteger || op == OpType::kQLinearConv ||
         op == OpType::kQLinearMatMul;
}

// True when an output of the DynamicQuantizeLinear `n` feeds anything but the DequantizeLinear
// of a pair (integer ops, as dynamic quantization writes it).
bool FeedsIntegerArithmetic(const ir::Node& n) {
  for (const ir::Value* out : n.outputs) {
    if (out == nullptr) continue;
    if (out->is_graph_output) return true;
    for (const ir::Node* c : out->consumers) {
      if (c->op != OpType::kDequantizeLinear || ClassifyDequantize(*c) != DqKind::kPair) {
        return true;
      }
    }
  }
  return false;
}

void Detect(const ir::Graph& g, QuantizationForm& f, std::map<std::string, int>& integer) {
  for (const auto& n : g.nodes()) {
    for (const auto& [key, a] : n->attrs) {
      if (a.g) Detect(*a.g, f, integer);
    }
    if (IsIntegerOp(n->op) ||
        (n->op == OpType::kDynamicQuantizeLinear && FeedsIntegerArithmetic(*n))) {
      ++integer[std::string(ir::OpName(n->op))];
    }
    if (n->op != OpType::kDequantizeLinear) continue;
    switch (ClassifyDequantize(*n)) {
      case DqKind::kPair:
        ++f.activation_pairs;
        break;
      case DqKind::kWeightPair:
        ++f.weight_pairs;
        break;
      case DqKind::kWeight:
        ++f.weight_dequantize;
        break;
      case DqKind::kMismatched:
        ++f.mismatched_pairs;
        break;
      default:
        break;
    }
  }
}

// Bypasses the pairs of `g` and of its subgraphs (each its own copy already).
absl::Status Bypass(ir::Graph& g, int* bypassed) {
  std::vector<ir::Node*> pairs;
  for (const auto& n : g.nodes()) {
    for (auto& [key, a] : n->attrs) {
      if (a.g) RETURN_IF_ERROR(Bypass(*a.g, bypassed));
    }
    if (n->op != OpType::kDequantizeLinear) continue;
    const DqKind k = ClassifyDequantize(*n);
    if (k == DqKind::kPair || k == DqKind::kWeightPair) pairs.push_back(n.get());
  }
  // Classified first, rewritten after: a rewrite changes no other node's inputs.
  const int opset = static_cast<int>(std::max<int64_t>(g.opset(), 1));
  for (ir::Node* dq : pairs) {
    ir::Value* x = dq->input(0)->producer->inputs[0];
    ir::Value* y = dq->outputs.empty() ? nullptr : dq->outputs[0];
    if (y == nullptr) continue;
    const bool cast = y->dtype != DataType::kUndefined && x->dtype != DataType::kUndefined &&
                      y->dtype != x->dtype;
    const OpType op = cast ? OpType::kCast : OpType::kIdentity;
    auto ver = import::ResolveOpVersion(op, opset);
    if (!ver) {
      return absl::InternalError(absl::StrCat(dq->Label(), ": no ", ir::OpName(op), " at opset ",
                                              opset, " to bypass the pair with"));
    }
    dq->op = op;
    dq->since_version = ver->since_version;
    dq->attrs.clear();
    if (cast) dq->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(y->dtype));
    dq->inputs = {x};
    dq->outputs = {y};
    ++*bypassed;
  }
  g.RebuildEdges();
  return absl::OkStatus();
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string QuantizationForm::Name() const {
  if (qdq() && integer()) return "qdq+integer";
  if (qdq()) return "qdq";
  if (integer()) return "integer";
  return "none";
}

std::string QuantizationForm::IntegerOpsText() const {
  std::vector<std::string> parts;
  for (const auto& [op, n] : integer_ops) parts.push_back(absl::StrCat(op, " x", n));
  return absl::StrJoin(parts, ", ");
}

QuantizationForm DetectQuantization(const ir::Graph& graph) {
  QuantizationForm f;
  std::map<std::string, int> integer;
  Detect(graph, f, integer);
  f.integer_ops.assign(integer.begin(), integer.end());
  return f;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> FloatComputationOf(const ir::Graph& graph,
                                                              int* bypassed) {
  std::unique_ptr<ir::Graph> g = graph.Clone();
  int n = 0;
  RETURN_IF_ERROR(Bypass(*g, &n));
  if (bypassed != nullptr) *bypassed = n;
  return g;
}

absl::StatusOr<SampleOutputs> RunOutputsF32(std::shared_ptr<const plan::Engine> engine,
                                            const std::vector<std::vector<ir::Tensor>>& samples) {
  ASSIGN_OR_RETURN(auto session, runtime::Session::Create(std::move(engine)));
  SampleOutputs all;
  for (const auto& in : samples) {
    ASSIGN_OR_RETURN(std::vector<ir::Tensor> out, session->Run(in));
    std::vector<ir::Tensor> f32(out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!IsFloating(out[i].dtype())) continue;
      if (out[i].dtype() == DataType::kF32) {
        f32[i] = out[i].Clone();
      } else {
        ASSIGN_OR_RETURN(f32[i], report::ToF32(out[i]));
      }
    }
    all.push_back(std::move(f32));
  }
  return all;
}

absl::StatusOr<v1::QuantizationSummary> SummarizeQuantization(
    const QuantizationForm& form, const ir::Graph& imported, const std::string& model_sha256,
    const BuildOptions& options, const std::vector<std::vector<ir::Tensor>>& samples,
    const SampleOutputs* reference_outputs, const std::vector<std::string>& output_names,
    const report::Tolerance& tolerance) {
  v1::QuantizationSummary q;
  q.set_form(form.Name());
  q.set_weight_dequantize_kept(form.weight_dequantize);
  q.set_mismatched_pairs_kept(form.mismatched_pairs);
  for (const auto& [op, n] : form.integer_ops) {
    v1::OpCount* c = q.add_integer_ops();
    c->set_op_type(op);
    c->set_count(n);
  }
  std::vector<std::string> notes;
  if (form.integer()) {
    notes.push_back(absl::StrCat(
        "the model's integer arithmetic (", form.IntegerOpsText(),
        ") has no float computation in the model: it runs as written in the engine and in the "
        "fp32 reference",
        form.qdq() ? ""
                   : ", so the model is compared against itself at fp32 and its "
                     "quantization error is not measured"));
  }
  if (form.weight_dequantize > 0) {
    notes.push_back(absl::StrCat(
        form.weight_dequantize,
        " weight(s) stored quantized (DequantizeLinear on a constant): their float values are "
        "not in the model, so their rounding is not part of any error measured"));
  }
  if (form.mismatched_pairs > 0) {
    notes.push_back(absl::StrCat(form.mismatched_pairs,
                                 " DequantizeLinear(s) read a quantizer of another scale, zero "
                                 "point or axis (a requantization): kept"));
  }
  if (!form.qdq()) {
    if (!form.integer() && form.weight_dequantize == 0 && form.mismatched_pairs == 0) {
      notes.push_back("the model is not quantized");
    }
    q.set_note(absl::StrJoin(notes, "; "));
    return q;
  }
  if (reference_outputs == nullptr) {
    return absl::InternalError(
        "the quantization summary of a QDQ model needs the reference's "
        "outputs");
  }
  auto t0 = std::chrono::steady_clock::now();
  int bypassed = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> float_graph, FloatComputationOf(imported, &bypassed));
  if (bypassed != form.activation_pairs + form.weight_pairs) {
    return absl::InternalError(absl::StrCat("the float reference bypassed ", bypassed,
                                            " Q->DQ pair(s) of the ",
                                            form.activation_pairs + form.weight_pairs, " found"));
  }
  q.set_activation_pairs_bypassed(form.activation_pairs);
  q.set_weight_pairs_bypassed(form.weight_pairs);
  BuildOptions fo = ReferenceBuildOptions(options);
  fo.in_memory = true;  // only run
  auto built = BuildEngineFromImport(*float_graph, model_sha256, fo, nullptr);
  if (!built.ok()) {
    return absl::Status(built.status().code(),
                        absl::StrCat("the float reference of the accuracy report (the model with "
                                     "its Q->DQ pairs bypassed): ",
                                     built.status().message()));
  }
  float_graph.reset();
  ASSIGN_OR_RETURN(SampleOutputs float_out, RunOutputsF32(std::move(built->engine), samples));
  for (size_t o = 0; o < output_names.size(); ++o) {
    report::ErrorAccumulator acc;
    bool any = false;
    for (size_t s = 0; s < samples.size() && s < reference_outputs->size(); ++s) {
      const auto& ref_s = (*reference_outputs)[s];
      if (o >= ref_s.size() || o >= float_out[s].size()) continue;
      const ir::Tensor& x = ref_s[o];
      const ir::Tensor& f = float_out[s][o];
      if (!x.defined() || !f.defined()) continue;
      if (x.num_elements() != f.num_elements()) {
        return absl::InternalError(
            absl::StrCat("output '", output_names[o], "' has ", x.num_elements(),
                         " element(s) in the fp32 "
                         "reference and ",
                         f.num_elements(), " in the float reference (sample ", s, ")"));
      }
      acc.Add(x.data<float>(), f.data<float>(), x.num_elements(), tolerance);
      any = true;
    }
    if (!any) continue;  // not floating
    v1::QuantizationError* e = q.add_outputs();
    e->set_tensor(output_names[o]);
    *e->mutable_error() = acc.Finish();
  }
  q.set_error_measured(true);
  std::string pairs = absl::StrCat(form.activation_pairs, " activation Q->DQ pair(s)");
  if (form.weight_pairs > 0) {
    absl::StrAppend(&pairs, " and ", form.weight_pairs, " on float weights");
  }
  notes.insert(notes.begin(),
               absl::StrCat("quantization error measured: the model at fp32 against its float "
                            "computation (the same graph with ",
                            pairs, " bypassed), on the same samples",
                            form.integer() ? "; it covers those pairs only" : ""));
  q.set_note(absl::StrJoin(notes, "; "));
  q.set_float_reference_ms(MsSince(t0));
  return q;
}

}  // namespace kiln::builder
