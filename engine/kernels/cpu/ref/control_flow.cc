// If, Loop and Scan: each runs its compiled subgraphs through the runners the runtime gives the
// context (KernelContext::subgraph), one subgraph run per branch taken, iteration or scan step.
// Loop-carried and Scan state values pass from one iteration to the next as the tensors the body
// returned (shared buffers, no copy); the node's outputs are copied out once at the end.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/subgraphs.h"

namespace kiln::kernels::cpu::ref {
namespace {

/// The most iterations a Loop may run (and the largest trip count it accepts without a
/// condition): far past what exported decoders and while-loops run (thousands), and low enough
/// that a runaway loop ends in an error in minutes rather than hanging a build or a server.
constexpr int64_t kMaxLoopIterations = 10'000'000;

// A single-element tensor's value as bool / int64.
absl::StatusOr<bool> ScalarBool(const ir::Node& n, const ir::Tensor& t, const char* what) {
  if (t.dtype() != DataType::kBool || t.num_elements() != 1) {
    return InvalidNode(n, what, " must be one bool, got ", DataTypeOnnxName(t.dtype()), " ",
                       ir::DimsToString(t.dims()));
  }
  return t.data<bool>()[0];
}

absl::StatusOr<int64_t> ScalarInt64(const ir::Node& n, const ir::Tensor& t, const char* what) {
  if (t.dtype() != DataType::kI64 || t.num_elements() != 1) {
    return InvalidNode(n, what, " must be one int64, got ", DataTypeOnnxName(t.dtype()), " ",
                       ir::DimsToString(t.dims()));
  }
  return t.data<int64_t>()[0];
}

// Copies `t` into output `k` (when requested); a sequence or an empty optional is passed on.
absl::Status Emit(KernelContext& ctx, int k, const ir::Tensor& t) {
  if (!ctx.output_requested(k)) return absl::OkStatus();
  if (t.kind() != ir::TensorKind::kDense) return ctx.set_output(k, t);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(k, t.dtype(), t.dims()));
  if (t.byte_size() > 0) std::memcpy(out->raw_data(), t.raw_data(), t.byte_size());
  return absl::OkStatus();
}

// The outer and inner element counts around `axis` of `dims`.
void Around(const std::vector<int64_t>& dims, int axis, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int i = 0; i < axis; ++i) outer *= dims[i];
  for (int i = axis + 1; i < static_cast<int>(dims.size()); ++i) inner *= dims[i];
}

// Position `t` of `x` along `axis` (that dim removed).
absl::StatusOr<ir::Tensor> SliceAt(const ir::Tensor& x, int axis, int64_t t) {
  std::vector<int64_t> dims = x.dims();
  const int64_t len = dims[axis];
  int64_t outer, inner;
  Around(dims, axis, outer, inner);
  dims.erase(dims.begin() + axis);
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(x.dtype(), dims));
  const size_t row = static_cast<size_t>(inner) * DataTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * row, src + (o * len + t) * row, row);
  }
  return out;
}

// Writes `parts` (same dtype and dims, in order; reversed with `reverse`) stacked along `axis`
// into output `k`. No parts: the stacked dim is 0, the others as inferred where static.
absl::Status EmitStacked(const ir::Node& n, KernelContext& ctx, int k,
                         const std::vector<ir::Tensor>& parts, int64_t axis, bool reverse) {
  if (!ctx.output_requested(k)) return absl::OkStatus();
  if (parts.empty()) {
    std::vector<int64_t> dims = {0};
    const ir::Value* v = n.outputs[k];
    if (v->shape.rank_known && v->shape.rank() > 0) {
      dims.assign(v->shape.rank(), 0);
      for (int i = 0; i < v->shape.rank(); ++i) {
        dims[i] = v->shape.dims[i].is_static() ? v->shape.dims[i].value : 0;
      }
      dims[std::clamp<int64_t>(axis, 0, v->shape.rank() - 1)] = 0;
    }
    return ctx.output(k, v->dtype, dims).status();
  }
  const std::vector<int64_t>& part_dims = parts[0].dims();
  const int rank = static_cast<int>(part_dims.size()) + 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return InvalidNode(n, "scan output ", k, " axis is outside rank ", rank);
  }
  std::vector<int64_t> dims = part_dims;
  const int64_t steps = static_cast<int64_t>(parts.size());
  dims.insert(dims.begin() + axis, steps);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= part_dims[i];
  for (int i = static_cast<int>(axis); i < static_cast<int>(part_dims.size()); ++i) {
    inner *= part_dims[i];
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(k, parts[0].dtype(), dims));
  const size_t row = static_cast<size_t>(inner) * DataTypeSize(parts[0].dtype());
  char* dst = static_cast<char*>(out->raw_data());
  for (int64_t s = 0; s < steps; ++s) {
    const ir::Tensor& p = parts[reverse ? steps - 1 - s : s];
    const char* src = static_cast<const char*>(p.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + (o * steps + s) * row, src + o * row, row);
    }
  }
  return absl::OkStatus();
}

// Checks that a scan output keeps the dtype and dims of its first step.
absl::Status SameAsFirst(const ir::Node& n, const std::vector<ir::Tensor>& parts,
                         const ir::Tensor& t, int j, int64_t step) {
  if (parts.empty()) return absl::OkStatus();
  if (t.dtype() != parts[0].dtype() || t.dims() != parts[0].dims()) {
    return InvalidNode(n, "scan output ", j, " is ", ir::DimsToString(t.dims()), " at step ", step,
                       " but ", ir::DimsToString(parts[0].dims()), " at step 0");
  }
  return absl::OkStatus();
}

// ---- If ----------------------------------------------------------------------------------

absl::Status CheckIf(const ir::Node& n) {
  return CheckSubgraphs(n, {"then_branch", "else_branch"});
}

absl::Status RunIf(const ir::Node& n, KernelContext& ctx) {
  const ir::Tensor* c = ctx.input(0);
  if (c == nullptr) return InvalidNode(n, "cond (input 0) is missing");
  ASSIGN_OR_RETURN(bool cond, ScalarBool(n, *c, "cond (input 0)"));
  ASSIGN_OR_RETURN(SubgraphRunner * branch, Runner(n, ctx, cond ? "then_branch" : "else_branch"));
  std::vector<const ir::Tensor*> inputs;
  for (int i = n.num_inputs() - Captured(n); i < n.num_inputs(); ++i) {
    inputs.push_back(ctx.input(i));
  }
  ASSIGN_OR_RETURN(std::vector<ir::Tensor> outs, branch->Run(inputs));
  if (static_cast<int>(outs.size()) != n.num_outputs()) {
    return absl::InternalError(
        absl::StrCat(n.Label(), " branch gave ", outs.size(), " outputs for ", n.num_outputs()));
  }
  for (int k = 0; k < n.num_outputs(); ++k) RETURN_IF_ERROR(Emit(ctx, k, outs[k]));
  return absl::OkStatus();
}

// ---- Loop --------------------------------------------------------------------------------

absl::Status CheckLoop(const ir::Node& n) { return CheckSubgraphs(n, {"body"}); }

absl::Status RunLoop(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(SubgraphRunner * body, Runner(n, ctx, "body"));
  const int captured = Captured(n);
  const int own = n.num_inputs() - captured;
  const int carried = std::max(0, own - 2);
  const int scanned = n.num_outputs() - carried;
  std::optional<int64_t> trips;
  if (const ir::Tensor* m = ctx.input(0)) {
    ASSIGN_OR_RETURN(trips, ScalarInt64(n, *m, "M (input 0, the trip count)"));
    if (*trips < 0) return InvalidNode(n, "trip count M (input 0) is negative: ", *trips);
  }
  bool cond = true;
  const ir::Tensor* c = own > 1 ? ctx.input(1) : nullptr;
  if (c != nullptr) {
    ASSIGN_OR_RETURN(cond, ScalarBool(n, *c, "cond (input 1)"));
  }
  if (c == nullptr && !trips) {
    return InvalidNode(n, "has neither a trip count nor a condition: it would never end");
  }
  if (c == nullptr && *trips > kMaxLoopIterations) {
    return InvalidNode(n, "trip count M (input 0) is ", *trips, ", over the limit of ",
                       kMaxLoopIterations, " iterations");
  }
  std::vector<ir::Tensor> state(carried);
  for (int j = 0; j < carried; ++j) {
    const ir::Tensor* v = ctx.input(2 + j);
    if (v == nullptr) return InvalidNode(n, "loop-carried input ", 2 + j, " is missing");
    state[j] = *v;
  }
  std::vector<const ir::Tensor*> captures;
  for (int i = own; i < n.num_inputs(); ++i) captures.push_back(ctx.input(i));
  std::vector<std::vector<ir::Tensor>> scans(std::max(0, scanned));
  ASSIGN_OR_RETURN(ir::Tensor iter, ir::Tensor::Allocate(DataType::kI64, {}));
  ASSIGN_OR_RETURN(ir::Tensor cond_in, ir::Tensor::Allocate(DataType::kBool, {}));
  std::vector<const ir::Tensor*> inputs;
  int64_t i = 0;
  for (; cond && (!trips || i < *trips); ++i) {
    if (i >= kMaxLoopIterations) {
      return InvalidNode(n, "ran ", i, " iterations, the limit, without its condition ending it");
    }
    iter.data<int64_t>()[0] = i;
    cond_in.data<bool>()[0] = cond;
    inputs.assign({&iter, &cond_in});
    for (const ir::Tensor& t : state) inputs.push_back(&t);
    inputs.insert(inputs.end(), captures.begin(), captures.end());
    auto outs = body->Run(inputs);
    if (!outs.ok()) {
      return absl::Status(outs.status().code(),
                          absl::StrCat(n.Label(), " iteration ", i, ": ", outs.status().message()));
    }
    if (static_cast<int>(outs->size()) != 1 + carried + scanned) {
      return absl::InternalError(absl::StrCat(n.Label(), " body gave ", outs->size(),
                                              " outputs for ", 1 + carried + scanned));
    }
    ASSIGN_OR_RETURN(cond, ScalarBool(n, (*outs)[0], "the body's cond (output 0)"));
    for (int j = 0; j < carried; ++j) {
      const ir::Tensor& t = (*outs)[1 + j];
      if (t.dtype() != state[j].dtype()) {
        return InvalidNode(n, "loop-carried value ", j, " changes dtype in iteration ", i);
      }
      state[j] = t;
    }
    for (int j = 0; j < scanned; ++j) {
      const ir::Tensor& t = (*outs)[1 + carried + j];
      RETURN_IF_ERROR(SameAsFirst(n, scans[j], t, j, i));
      scans[j].push_back(t);
    }
  }
  for (int j = 0; j < carried; ++j) RETURN_IF_ERROR(Emit(ctx, j, state[j]));
  for (int j = 0; j < scanned; ++j) {
    RETURN_IF_ERROR(EmitStacked(n, ctx, carried + j, scans[j], 0, false));
  }
  return absl::OkStatus();
}

// ---- Scan --------------------------------------------------------------------------------

absl::Status CheckScan(const ir::Node& n) {
  RETURN_IF_ERROR(CheckSubgraphs(n, {"body"}));
  if (n.GetInt("num_scan_inputs", 0) < 1) {
    return InvalidNode(n, "attribute 'num_scan_inputs' must be at least 1");
  }
  return absl::OkStatus();
}

// One Scan over `states` and `scan_inputs` (Scan-9+ semantics; Scan-8 calls it per batch
// element with axes 0 and `length` from sequence_lens). Appends the final states and the stacked
// scan outputs' parts to `final_states` / `scans`.
absl::Status ScanOnce(const ir::Node& n, SubgraphRunner& body, std::vector<ir::Tensor> states,
                      const std::vector<ir::Tensor>& scan_inputs,
                      const std::vector<const ir::Tensor*>& captures,
                      const std::vector<int>& in_axes, const std::vector<int64_t>& in_dirs,
                      int64_t length, std::vector<ir::Tensor>& final_states,
                      std::vector<std::vector<ir::Tensor>>& scans) {
  const int n_states = static_cast<int>(states.size());
  std::vector<ir::Tensor> slices(scan_inputs.size());
  std::vector<const ir::Tensor*> inputs;
  for (int64_t t = 0; t < length; ++t) {
    for (size_t j = 0; j < scan_inputs.size(); ++j) {
      const bool reverse = j < in_dirs.size() && in_dirs[j] == 1;
      ASSIGN_OR_RETURN(slices[j],
                       SliceAt(scan_inputs[j], in_axes[j], reverse ? length - 1 - t : t));
    }
    inputs.clear();
    for (const ir::Tensor& s : states) inputs.push_back(&s);
    for (const ir::Tensor& s : slices) inputs.push_back(&s);
    inputs.insert(inputs.end(), captures.begin(), captures.end());
    auto outs = body.Run(inputs);
    if (!outs.ok()) {
      return absl::Status(outs.status().code(),
                          absl::StrCat(n.Label(), " step ", t, ": ", outs.status().message()));
    }
    if (outs->size() != states.size() + scans.size()) {
      return absl::InternalError(absl::StrCat(n.Label(), " body gave ", outs->size(),
                                              " outputs for ", states.size() + scans.size()));
    }
    for (int j = 0; j < n_states; ++j) {
      if ((*outs)[j].dtype() != states[j].dtype()) {
        return InvalidNode(n, "state ", j, " changes dtype at step ", t);
      }
      states[j] = (*outs)[j];
    }
    for (size_t j = 0; j < scans.size(); ++j) {
      const ir::Tensor& o = (*outs)[n_states + j];
      RETURN_IF_ERROR(SameAsFirst(n, scans[j], o, static_cast<int>(j), t));
      scans[j].push_back(o);
    }
  }
  for (ir::Tensor& s : states) final_states.push_back(std::move(s));
  return absl::OkStatus();
}

absl::Status RunScan(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(SubgraphRunner * body, Runner(n, ctx, "body"));
  const bool v8 = n.since_version < 9;
  const int first = v8 ? 1 : 0;
  const int captured = Captured(n);
  const int own = n.num_inputs() - captured - first;
  const int m = static_cast<int>(n.GetInt("num_scan_inputs", 0));
  const int n_states = own - m;
  const int n_scans = n.num_outputs() - n_states;
  if (m < 1 || n_states < 0 || n_scans < 0) {
    return InvalidNode(n, "has ", own, " state and scan inputs, ", m, " scan inputs and ",
                       n.num_outputs(), " outputs");
  }
  std::vector<const ir::Tensor*> captures;
  for (int i = n.num_inputs() - captured; i < n.num_inputs(); ++i) captures.push_back(ctx.input(i));
  std::vector<const ir::Tensor*> states(n_states), scan_in(m);
  for (int j = 0; j < n_states; ++j) {
    states[j] = ctx.input(first + j);
    if (states[j] == nullptr) return InvalidNode(n, "state input ", j, " is missing");
  }
  for (int j = 0; j < m; ++j) {
    scan_in[j] = ctx.input(first + n_states + j);
    if (scan_in[j] == nullptr) return InvalidNode(n, "scan input ", j, " is missing");
  }
  const std::vector<int64_t> in_dirs = n.GetInts(v8 ? "directions" : "scan_input_directions");
  const std::vector<int64_t> out_dirs = n.GetInts("scan_output_directions");
  const std::vector<int64_t> out_axes = n.GetInts("scan_output_axes");
  if (!v8) {
    std::vector<int> axes(m);
    const std::vector<int64_t> in_axes = n.GetInts("scan_input_axes");
    int64_t length = -1;
    std::vector<ir::Tensor> xs;
    for (int j = 0; j < m; ++j) {
      const int rank = scan_in[j]->rank();
      if (rank < 1) return InvalidNode(n, "scan input ", j, " is a scalar");
      ASSIGN_OR_RETURN(
          axes[j], NormalizeAxis(n, j < static_cast<int>(in_axes.size()) ? in_axes[j] : 0, rank));
      const int64_t len = scan_in[j]->dim(axes[j]);
      if (length >= 0 && len != length) {
        return InvalidNode(n, "scan input ", j, " has ", len, " steps along axis ", axes[j],
                           " but scan input 0 has ", length, ": scan inputs must be as long");
      }
      length = len;
      xs.push_back(*scan_in[j]);
    }
    std::vector<ir::Tensor> init;
    for (const ir::Tensor* s : states) init.push_back(*s);
    std::vector<ir::Tensor> final_states;
    std::vector<std::vector<ir::Tensor>> scans(n_scans);
    RETURN_IF_ERROR(ScanOnce(n, *body, std::move(init), xs, captures, axes, in_dirs, length,
                             final_states, scans));
    for (int j = 0; j < n_states; ++j) RETURN_IF_ERROR(Emit(ctx, j, final_states[j]));
    for (int j = 0; j < n_scans; ++j) {
      const int64_t axis = j < static_cast<int>(out_axes.size()) ? out_axes[j] : 0;
      const bool reverse = j < static_cast<int>(out_dirs.size()) && out_dirs[j] == 1;
      RETURN_IF_ERROR(EmitStacked(n, ctx, n_states + j, scans[j], axis, reverse));
    }
    return absl::OkStatus();
  }
  // Scan-8: axis 0 of every input and output is the batch; the scan runs per batch element,
  // over sequence_lens[b] steps (all of axis 1 without it); shorter sequences' outputs are
  // zero past their length.
  int64_t batch = -1, max_len = -1;
  for (int j = 0; j < own; ++j) {
    const ir::Tensor* t = j < n_states ? states[j] : scan_in[j - n_states];
    if (t->rank() < (j < n_states ? 1 : 2)) {
      return InvalidNode(n, "input ", first + j, " lacks the batch (and sequence) axes");
    }
    if (batch >= 0 && t->dim(0) != batch) {
      return InvalidNode(n, "input ", first + j, " has batch ", t->dim(0), ", not ", batch);
    }
    batch = t->dim(0);
    if (j >= n_states) {
      if (max_len >= 0 && t->dim(1) != max_len) {
        return InvalidNode(n, "scan input ", j - n_states, " has ", t->dim(1),
                           " steps but scan input 0 has ", max_len,
                           ": scan inputs must be as long");
      }
      max_len = t->dim(1);
    }
  }
  std::vector<int64_t> lens(batch, max_len);
  if (const ir::Tensor* sl = ctx.input(0)) {
    ASSIGN_OR_RETURN(lens, ReadInts(n, *sl, "sequence_lens"));
    if (static_cast<int64_t>(lens.size()) != batch) {
      return InvalidNode(n, "sequence_lens has ", lens.size(), " entries for batch ", batch);
    }
    for (int64_t l : lens) {
      if (l < 0 || l > max_len) {
        return InvalidNode(n, "sequence_lens entry ", l, " is outside 0..", max_len);
      }
    }
  }
  std::vector<std::vector<ir::Tensor>> batch_states(n_states), batch_scans(n_scans);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<ir::Tensor> init, xs;
    for (const ir::Tensor* s : states) {
      ASSIGN_OR_RETURN(ir::Tensor sb, SliceAt(*s, 0, b));
      init.push_back(std::move(sb));
    }
    for (const ir::Tensor* x : scan_in) {
      ASSIGN_OR_RETURN(ir::Tensor xb, SliceAt(*x, 0, b));
      xs.push_back(std::move(xb));
    }
    std::vector<ir::Tensor> final_states;
    std::vector<std::vector<ir::Tensor>> scans(n_scans);
    RETURN_IF_ERROR(ScanOnce(n, *body, std::move(init), xs, captures, std::vector<int>(m, 0),
                             in_dirs, lens[b], final_states, scans));
    for (int j = 0; j < n_states; ++j) batch_states[j].push_back(std::move(final_states[j]));
    for (int j = 0; j < n_scans; ++j) {
      if (scans[j].empty() && max_len > 0) {
        return InvalidNode(n, "batch element ", b,
                           " has no steps: its scan outputs' shape is "
                           "unknown");
      }
      // Zero steps past the sequence's length.
      while (static_cast<int64_t>(scans[j].size()) < max_len) {
        ASSIGN_OR_RETURN(ir::Tensor z,
                         ir::Tensor::Allocate(scans[j][0].dtype(), scans[j][0].dims()));
        scans[j].push_back(std::move(z));
      }
      // This element's [max_len, ...] output, kept as one part of the batch stack.
      const bool reverse = j < static_cast<int>(out_dirs.size()) && out_dirs[j] == 1;
      std::vector<int64_t> dims = scans[j][0].dims();
      dims.insert(dims.begin(), max_len);
      ASSIGN_OR_RETURN(ir::Tensor stacked,
                       ir::Tensor::AllocateUninitialized(scans[j][0].dtype(), dims));
      const size_t row = scans[j][0].byte_size();
      for (int64_t s = 0; s < max_len; ++s) {
        const ir::Tensor& p = scans[j][reverse ? max_len - 1 - s : s];
        std::memcpy(static_cast<char*>(stacked.raw_data()) + s * row, p.raw_data(), row);
      }
      batch_scans[j].push_back(std::move(stacked));
    }
  }
  for (int j = 0; j < n_states; ++j) {
    RETURN_IF_ERROR(EmitStacked(n, ctx, j, batch_states[j], 0, false));
  }
  for (int j = 0; j < n_scans; ++j) {
    RETURN_IF_ERROR(EmitStacked(n, ctx, n_states + j, batch_scans[j], 0, false));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlow(Registry& r) {
  r.AddRef(ir::OpType::kIf, AllTypes(), &CheckedFactory<CheckIf, RunIf>, kOutputType);
  r.AddRef(ir::OpType::kLoop, AllTypes(), &CheckedFactory<CheckLoop, RunLoop>, kOutputType);
  r.AddRef(ir::OpType::kScan, AllTypes(), &CheckedFactory<CheckScan, RunScan>, kOutputType);
}

}  // namespace kiln::kernels::cpu::ref
