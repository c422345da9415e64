#include "engine/runtime/session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/device_record.h"

namespace kiln::runtime {

// A subgraph's engine run by a session of its own, kept from run to run (a Loop's body runs
// once per iteration with the same buffers). Before each run of its node, the node's step tells
// it who observes (Begin); an observed run tells the observer where it happens and runs its
// nodes one by one under that path, so deeper subgraphs extend it.
class SessionRunner final : public kernels::SubgraphRunner {
 public:
  explicit SessionRunner(std::unique_ptr<Session> session) : session_(std::move(session)) {}

  // The runs that follow belong to one run of `node` (its attribute `attr`) at `parent`,
  // observed by `observer` (null: unobserved); their occurrences count from 0.
  void Begin(SubgraphObserver* observer, const SubgraphPath& parent, const ir::Node* node,
             const std::string* attr) {
    observer_ = observer;
    occurrence_ = 0;
    if (observer_ == nullptr) return;
    path_ = parent;
    path_.push_back({node, attr, 0});
  }

  absl::StatusOr<std::vector<ir::Tensor>> Run(
      const std::vector<const ir::Tensor*>& inputs) override {
    std::vector<ir::Tensor> in;
    in.reserve(inputs.size());
    for (const ir::Tensor* t : inputs) {
      if (t == nullptr) return absl::InternalError("a subgraph input is missing");
      in.push_back(*t);  // shares the buffer
    }
    const int64_t occurrence = occurrence_++;
    if (observer_ == nullptr) return session_->Run(in);
    path_.back().occurrence = occurrence;
    observer_->RunStarts(path_);
    ASSIGN_OR_RETURN(std::unique_ptr<Execution> x, session_->Start(in));
    x->path_ = path_;
    while (!x->done()) RETURN_IF_ERROR(x->Step(nullptr, nullptr, observer_));
    return x->Outputs();
  }

  const Session& session() const { return *session_; }

 private:
  std::unique_ptr<Session> session_;
  SubgraphObserver* observer_ = nullptr;
  SubgraphPath path_;
  int64_t occurrence_ = 0;
};

namespace {

// Whether run-time `t` may be the value of `v` (output `k` of `n`): its kind fits v's (a dense
// tensor an optional tensor or a tensor, a sequence an optional sequence or a sequence, an
// empty optional an optional) and its dtype is v's.
absl::Status FitsValue(const ir::Node& n, int k, const ir::Value& v, const ir::Tensor& t) {
  const ir::ValueKind elem = ir::ElementKind(v.kind);
  const bool fits = t.is_none() ? ir::IsOptionalKind(v.kind)
                                : (t.is_sequence() == (elem == ir::ValueKind::kSequence));
  const char* got = t.is_none() ? "an empty optional" : t.is_sequence() ? "a sequence" : "a tensor";
  if (!fits) {
    return absl::InternalError(absl::StrCat(n.Label(), " output ", k, " '", v.name, "' is ",
                                            ir::ValueTypeName(v.kind, v.dtype), ", got ", got));
  }
  if (t.dtype() != v.dtype && !(t.is_none() && t.dtype() == DataType::kUndefined)) {
    return absl::InternalError(absl::StrCat(n.Label(), " output ", k, " '", v.name, "' is ",
                                            ir::ValueTypeName(v.kind, v.dtype), ", got ", got,
                                            " of ", DataTypeOnnxName(t.dtype())));
  }
  return absl::OkStatus();
}

// The context a kernel sees for one node in one run.
class NodeContext final : public kernels::KernelContext {
 public:
  // `inputs`: the tensor each input reads (in the kernel's memory), null when omitted;
  // `device`: where outputs go when the node runs on a device (else null).
  NodeContext(const ir::Node& node, std::vector<ir::Tensor>& values,
              const std::vector<const ir::Tensor*>& inputs, kernels::DeviceRuntime* device,
              char* arena, const std::vector<int64_t>& slot_offset,
              const std::vector<uint64_t>& slot_bytes, BufferPool& pool, const InteriorTap& tap,
              const std::vector<std::pair<std::string, std::unique_ptr<SessionRunner>>>& subgraphs)
      : subgraphs_(subgraphs),
        node_(node),
        values_(values),
        inputs_(inputs),
        device_(device),
        arena_(arena),
        slot_offset_(slot_offset),
        slot_bytes_(slot_bytes),
        pool_(pool),
        tap_(tap) {}

  float* interior(int member, int64_t n) override {
    return tap_ ? tap_(node_, member, n) : nullptr;
  }
  kernels::SubgraphRunner* subgraph(const std::string& attr) override {
    for (const auto& [name, runner] : subgraphs_) {
      if (name == attr) return runner.get();
    }
    return nullptr;
  }

  int num_inputs() const override { return node_.num_inputs(); }
  const ir::Tensor* input(int i) const override {
    return i >= 0 && i < static_cast<int>(inputs_.size()) ? inputs_[i] : nullptr;
  }
  int num_outputs() const override { return node_.num_outputs(); }
  bool output_requested(int i) const override {
    return i < node_.num_outputs() && node_.outputs[i] != nullptr;
  }
  absl::Status set_output(int i, ir::Tensor value) override {
    if (i < 0 || i >= node_.num_outputs()) {
      return absl::InternalError(
          absl::StrCat(node_.Label(), " kernel set output ", i, " of ", node_.num_outputs()));
    }
    const ir::Value* v = node_.outputs[i];
    if (v == nullptr) return absl::OkStatus();  // omitted: nobody reads it
    RETURN_IF_ERROR(FitsValue(node_, i, *v, value));
    values_[v->id] = std::move(value);
    return absl::OkStatus();
  }

  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i < 0 || i >= node_.num_outputs()) {
      return absl::InternalError(
          absl::StrCat(node_.Label(), " kernel asked for output ", i, " of ", node_.num_outputs()));
    }
    const ir::Value* v = node_.outputs[i];
    if (v == nullptr) {
      // Omitted output: give the kernel scratch space it may ignore.
      scratch_.emplace_back();
      ASSIGN_OR_RETURN(scratch_.back(), FromPool(dtype, std::move(dims)));
      return &scratch_.back();
    }
    if (v->dtype != DataType::kUndefined && dtype != v->dtype) {
      return absl::InternalError(absl::StrCat(node_.Label(), " output ", i, " '", v->name, "' is ",
                                              DataTypeOnnxName(dtype), " but the graph ", "says ",
                                              DataTypeOnnxName(v->dtype)));
    }
    int64_t n = ir::NumElementsOf(dims);
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Label(), " output ", i, " dims ",
                                                     ir::DimsToString(dims), " are invalid"));
    }
    if (device_ != nullptr) {
      ASSIGN_OR_RETURN(values_[v->id], device_->Allocate(dtype, std::move(dims)));
      return &values_[v->id];
    }
    int64_t off = slot_offset_[v->id];
    // Compare element counts, not byte products, so a huge shape cannot wrap into a small slot.
    size_t esize = DataTypeSize(dtype);
    if (off >= 0 && esize > 0 && static_cast<uint64_t>(n) <= slot_bytes_[v->id] / esize) {
      values_[v->id] = ir::Tensor::Borrow(dtype, std::move(dims), arena_ + off, nullptr);
    } else {
      // Kernels write every element of their outputs (kernel.h), as arena slots require.
      ASSIGN_OR_RETURN(values_[v->id], FromPool(dtype, std::move(dims)));
    }
    return &values_[v->id];
  }

 private:
  // A tensor of `dims` (checked: n >= 0) over a buffer of the pool (on the device for a device
  // node).
  absl::StatusOr<ir::Tensor> FromPool(DataType dtype, std::vector<int64_t> dims) {
    if (device_ != nullptr) return device_->Allocate(dtype, std::move(dims));
    const size_t esize = DataTypeSize(dtype);
    const int64_t n = ir::NumElementsOf(dims);
    if (esize == 0 || n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / esize) {
      // The checks and errors of a tensor allocated on its own.
      return ir::Tensor::AllocateUninitialized(dtype, std::move(dims));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<void> p, pool_.Take(static_cast<size_t>(n) * esize));
    void* data = p.get();
    return ir::Tensor::Borrow(dtype, std::move(dims), data, std::move(p));
  }

  const std::vector<std::pair<std::string, std::unique_ptr<SessionRunner>>>& subgraphs_;
  const ir::Node& node_;
  std::vector<ir::Tensor>& values_;
  const std::vector<const ir::Tensor*>& inputs_;
  kernels::DeviceRuntime* device_;
  char* arena_;
  const std::vector<int64_t>& slot_offset_;
  const std::vector<uint64_t>& slot_bytes_;
  BufferPool& pool_;
  const InteriorTap& tap_;
  std::deque<ir::Tensor> scratch_;  // deque: pointers handed out stay valid as it grows
};

}  // namespace

absl::StatusOr<std::shared_ptr<void>> BufferPool::Take(size_t bytes) {
  const size_t need = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  Block* best = nullptr;
  for (Block& b : blocks_) {
    // use_count 1: only the pool holds it. Another thread can only drop its last copy of a
    // buffer meanwhile, never make one, so a stale count just passes over a free buffer.
    if (b.p.use_count() == 1 && b.bytes >= need && b.bytes / 2 <= need &&
        (best == nullptr || b.bytes < best->bytes)) {
      best = &b;
    }
  }
  if (best == nullptr) {
    void* p = std::aligned_alloc(64, need);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", need, " bytes"));
    }
    blocks_.push_back({std::shared_ptr<void>(p, [](void* q) { std::free(q); }), need, run_});
    best = &blocks_.back();
  }
  best->run = run_;
  return best->p;
}

void BufferPool::NextRun() {
  ++run_;
  // Kept: taken in one of the last two runs (a caller holding the previous run's outputs while
  // this run makes new ones alternates between two sets), or still held.
  std::erase_if(blocks_,
                [this](const Block& b) { return b.run + 2 < run_ && b.p.use_count() == 1; });
}

size_t BufferPool::bytes() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.bytes;
  return total;
}

Session::~Session() = default;

std::vector<std::pair<std::string, const Session*>> Session::subgraph_sessions(size_t index) const {
  std::vector<std::pair<std::string, const Session*>> out;
  if (index >= subgraphs_.size()) return out;
  for (const auto& [name, runner] : subgraphs_[index]) out.emplace_back(name, &runner->session());
  // By name: the same order in every process (attributes are a hash map).
  std::sort(out.begin(), out.end());
  return out;
}

kernels::SubgraphRunner* Session::subgraph_runner(size_t index, const std::string& attr) {
  if (index >= subgraphs_.size()) return nullptr;
  for (const auto& [name, runner] : subgraphs_[index]) {
    if (name != attr) continue;
    runner->Begin(nullptr, {}, engine_->order[index], &name);
    return runner.get();
  }
  return nullptr;
}

std::string Session::LoopThreads() const {
  if (kernels::cpu::ThreadPoolDisabled()) return "OpenMP's threads (KILN_THREAD_POOL=openmp)";
  if (openmp_loops_) return "OpenMP's threads (oneDNN or recurrent kernels, spinning waits)";
  return "the thread pool";
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const plan::Engine> engine,
                                                         bool use_arena, int depth) {
  auto s = std::unique_ptr<Session>(new Session());
  s->engine_ = std::move(engine);
  const plan::Engine& e = *s->engine_;
  const kernels::Registry& reg = kernels::Registry::Default();
  for (const ir::Node* n : e.order) {
    ASSIGN_OR_RETURN(const kernels::KernelDef* def, reg.Find(*n));
    s->openmp_loops_ |= def->openmp_regions;
    ASSIGN_OR_RETURN(auto k, def->factory(*n));
    s->kernels_.push_back(std::move(k));
    auto& runners = s->subgraphs_.emplace_back();
    for (const auto& [name, a] : n->attrs) {
      if (a.type != ir::Attribute::Type::kGraph) continue;
      const std::string where = absl::StrCat(n->Label(), " subgraph '", name, "'");
      if (depth + 1 > ir::kMaxSubgraphDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " nests subgraphs deeper than ", ir::kMaxSubgraphDepth, " levels"));
      }
      auto sub = plan::LoadEngineFromBytes(std::make_shared<const std::string>(a.s));
      if (!sub.ok()) {
        return absl::Status(sub.status().code(), absl::StrCat(where, ": ", sub.status().message()));
      }
      auto session =
          Create(std::shared_ptr<const plan::Engine>(*std::move(sub)), use_arena, depth + 1);
      if (!session.ok()) {
        return absl::Status(session.status().code(),
                            absl::StrCat(where, ": ", session.status().message()));
      }
      runners.emplace_back(name, std::make_unique<SessionRunner>(*std::move(session)));
    }
  }
  s->openmp_loops_ = s->openmp_loops_ && kernels::cpu::OpenMpThreadsSpin();
  size_t nv = e.graph->values().size();
  RETURN_IF_ERROR(s->OpenDevice());
  s->last_use_.assign(nv, -1);
  for (int i = 0; i < static_cast<int>(e.order.size()); ++i) {
    for (const ir::Value* v : e.order[i]->inputs) {
      if (v) s->last_use_[v->id] = i;
    }
  }
  s->slot_offset_.assign(nv, -1);
  s->slot_bytes_.assign(nv, 0);
  const auto& mp = e.metadata.memory_plan();
  // Slots in the metadata use blob tensor indices, which equal value ids of the rebuilt graph;
  // the blob reader has checked every slot lies inside the arena.
  for (const auto& slot : mp.slots()) {
    if (!use_arena) break;
    s->slot_offset_[slot.tensor()] = static_cast<int64_t>(slot.offset());
    s->slot_bytes_[slot.tensor()] = slot.bytes();
  }
  s->arena_bytes_ = use_arena ? mp.arena_bytes() : 0;
  if (s->arena_bytes_ > 0) {
    void* p = std::aligned_alloc(64, (s->arena_bytes_ + 63) / 64 * 64);
    if (!p) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate the ", s->arena_bytes_, "-byte activation arena"));
    }
    s->arena_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  return s;
}

absl::Status Session::OpenDevice() {
  const plan::Engine& e = *engine_;
  on_device_.assign(e.order.size(), false);
  bool any = false;
  for (size_t i = 0; i < e.order.size(); ++i) {
    on_device_[i] = kernels::BackendOf(*e.order[i]) == kernels::Backend::kOpenCl;
    any |= on_device_[i];
  }
  if (!any) return absl::OkStatus();
  const v1::Device& d = e.metadata.device();
  if (d.kind() != "opencl") {
    return absl::InvalidArgumentError(
        "the engine places kernels on OpenCL but records no OpenCL device");
  }
  ASSIGN_OR_RETURN(device_, kernels::OpenDeviceRuntime(DeviceOfRecord(d)));
  device_constants_.resize(e.graph->values().size());
  return absl::OkStatus();
}

absl::Status Session::CheckInputs(const std::vector<ir::Tensor>& inputs) const {
  const auto& gin = engine_->graph->inputs();
  if (inputs.size() != gin.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine takes ", gin.size(), " inputs, got ", inputs.size()));
  }
  absl::flat_hash_map<std::string, int64_t> bound;  // symbolic dim -> value in this run
  for (size_t i = 0; i < gin.size(); ++i) {
    const ir::Value* v = gin[i];
    const ir::Tensor& t = inputs[i];
    std::string what = absl::StrCat("input ", i, " '", v->name, "'");
    const bool kind_fits =
        t.is_none() ? ir::IsOptionalKind(v->kind)
                    : t.is_sequence() == (ir::ElementKind(v->kind) == ir::ValueKind::kSequence);
    if (!kind_fits) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be ",
                                                     ir::ValueTypeName(v->kind, v->dtype), ", got ",
                                                     t.is_none()       ? "an empty optional"
                                                     : t.is_sequence() ? "a sequence"
                                                                       : "a tensor"));
    }
    if (t.is_sequence()) {
      for (size_t e = 0; e < t.elements().size(); ++e) {
        if (t.elements()[e].is_sequence() || t.elements()[e].is_none() ||
            t.elements()[e].dtype() != v->dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " element ", e, " must be a tensor of ", DataTypeOnnxName(v->dtype)));
        }
      }
    }
    if (t.is_none() && t.dtype() == DataType::kUndefined) continue;
    if (t.dtype() != v->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must be ", DataTypeOnnxName(v->dtype),
                                                     ", got ", DataTypeOnnxName(t.dtype())));
    }
    // A sequence's shape is its elements', which may differ from one another: not checked.
    if (!v->shape.rank_known || t.kind() != ir::TensorKind::kDense) continue;
    if (t.rank() != v->shape.rank()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " must have shape ", v->shape.ToString(),
                                                     ", got ", ir::DimsToString(t.dims())));
    }
    for (int d = 0; d < t.rank(); ++d) {
      const ir::Dim& dim = v->shape.dims[d];
      if (dim.is_static() && dim.value != t.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat(what, " dim ", d, " must be ", dim.value,
                                                       ", got ", t.dim(d), " (shape ",
                                                       ir::DimsToString(t.dims()), ")"));
      }
      // "?" (engines built before each "?" became its own unknown) binds nothing.
      if (!dim.is_static() && !dim.symbol.empty() && dim.symbol != "?") {
        auto [it, inserted] = bound.emplace(dim.symbol, t.dim(d));
        if (!inserted && it->second != t.dim(d)) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, " dim ", d, " ('", dim.symbol, "') is ", t.dim(d),
                           " but another input bound '", dim.symbol, "' to ", it->second));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Execution>> Session::Start(const std::vector<ir::Tensor>& inputs) {
  RETURN_IF_ERROR(CheckInputs(inputs));
  const ir::Graph& g = *engine_->graph;
  pool_.NextRun();
  auto x = std::unique_ptr<Execution>(new Execution(*this));
  x->values_.resize(g.values().size());
  x->copies_.resize(g.values().size());
  for (const auto& v : g.values()) {
    if (v->constant) x->values_[v->id] = *v->constant;
  }
  for (size_t i = 0; i < inputs.size(); ++i) x->values_[g.inputs()[i]->id] = inputs[i];
  return x;
}

bool Execution::done() const { return next_ >= session_.engine_->order.size(); }

absl::Status Execution::Step(const NodeObserver& observer, const InteriorTap& tap,
                             SubgraphObserver* subgraphs) {
  const Session& s = session_;
  if (done()) return absl::FailedPreconditionError("the run has no kernel left to run");
  const size_t i = next_++;
  const ir::Node& n = *s.engine_->order[i];
  // Every run of the node's subgraphs in this step is observed (or not) as this step.
  for (const auto& [name, runner] : s.subgraphs_[i]) runner->Begin(subgraphs, path_, &n, &name);
  const bool on_device = s.on_device_[i];
  const auto fail = [&](const absl::Status& st) {
    next_ = s.engine_->order.size();  // a failed run goes no further
    std::string msg(st.message());
    if (msg.rfind("[node", 0) != 0) msg = absl::StrCat(n.Label(), " ", msg);
    return absl::Status(st.code(), msg);
  };
  // Each input in the memory of the node's kernel: a tensor of the other memory is copied once
  // per run (a constant once per session).
  kernel_ins_.clear();
  for (const ir::Value* v : n.inputs) {
    ir::Tensor* t = v != nullptr && values_[v->id].defined() ? &values_[v->id] : nullptr;
    if (t == nullptr || t->kind() != ir::TensorKind::kDense || t->on_device() == on_device) {
      kernel_ins_.push_back(t);
      continue;
    }
    ir::Tensor& copy =
        on_device && v->constant ? session_.device_constants_[v->id] : copies_[v->id];
    if (!copy.defined()) {
      absl::StatusOr<ir::Tensor> c = on_device ? s.device_->Upload(*t) : HostCopy(*t);
      if (!c.ok()) return fail(c.status());
      copy = *std::move(c);
    }
    kernel_ins_.push_back(&copy);
  }
  NodeContext ctx(n, values_, kernel_ins_, on_device ? s.device_.get() : nullptr,
                  static_cast<char*>(s.arena_.get()), s.slot_offset_, s.slot_bytes_, session_.pool_,
                  tap, s.subgraphs_[i]);
  absl::Status st;
  // Kernels return statuses, but their scratch (std::vector) reports running out of memory by
  // throwing: an address-space limit or a huge output becomes this node's error, not an abort.
  try {
    const kernels::cpu::ScopedOpenMpLoops loops(s.openmp_loops_);
    st = s.kernels_[i]->Run(ctx);
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("out of memory running the kernel");
  }
  if (!st.ok()) return fail(st);
  for (int k = 0; k < n.num_outputs(); ++k) {
    const ir::Value* v = n.outputs[k];
    if (v && !values_[v->id].defined()) {
      next_ = s.engine_->order.size();
      return absl::InternalError(
          absl::StrCat(n.Label(), " did not produce output ", k, " '", v->name, "'"));
    }
  }
  const bool nested = subgraphs != nullptr && !path_.empty();
  if (observer || nested) {
    // Observers read host memory: a device tensor is shown through its host copy.
    std::deque<ir::Tensor> shown;
    const auto host = [&](const ir::Value* v) -> absl::StatusOr<const ir::Tensor*> {
      if (v == nullptr || !values_[v->id].defined()) return nullptr;
      const ir::Tensor& t = values_[v->id];
      if (!t.on_device()) return &t;
      if (copies_[v->id].defined() && !copies_[v->id].on_device()) return &copies_[v->id];
      ASSIGN_OR_RETURN(shown.emplace_back(), HostCopy(t));
      return &shown.back();
    };
    ins_.clear();
    outs_.clear();
    for (const ir::Value* v : n.inputs) {
      absl::StatusOr<const ir::Tensor*> t = host(v);
      if (!t.ok()) return fail(t.status());
      ins_.push_back(*t);
    }
    for (const ir::Value* v : n.outputs) {
      absl::StatusOr<const ir::Tensor*> t = host(v);
      if (!t.ok()) return fail(t.status());
      outs_.push_back(*t);
    }
    if (observer) observer(n, ins_, outs_);
    if (nested) subgraphs->NodeRan(path_, n, ins_, outs_);
  }
  // Release activations after their last use (arena slots are simply forgotten).
  for (const ir::Value* v : n.inputs) {
    if (v && s.last_use_[v->id] == static_cast<int>(i) && !v->is_graph_output && !v->constant &&
        !v->is_graph_input) {
      values_[v->id] = ir::Tensor();
    }
    if (v && s.last_use_[v->id] == static_cast<int>(i)) copies_[v->id] = ir::Tensor();
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Tensor> Execution::HostCopy(const ir::Tensor& device) const {
  const size_t bytes = device.byte_size();
  ASSIGN_OR_RETURN(std::shared_ptr<void> p, session_.pool_.Take(bytes));
  void* data = p.get();
  ir::Tensor host = ir::Tensor::Borrow(device.dtype(), device.dims(), data, std::move(p));
  RETURN_IF_ERROR(session_.device_->Download(device, host));
  return host;
}

absl::StatusOr<std::vector<ir::Tensor>> Execution::Outputs() const {
  if (!done()) return absl::FailedPreconditionError("the run has kernels left to run");
  std::vector<ir::Tensor> result;
  result.reserve(session_.engine_->graph->outputs().size());
  for (const ir::Value* v : session_.engine_->graph->outputs()) {
    const ir::Tensor& t = values_[v->id];
    if (!t.defined()) {
      return absl::InternalError(absl::StrCat("graph output '", v->name, "' was not computed"));
    }
    // Graph outputs are never arena slots (the planner skips them), so handing out the tensor
    // itself is safe: the caller shares its storage. A device tensor comes back to the host.
    if (t.on_device()) {
      ASSIGN_OR_RETURN(ir::Tensor host, HostCopy(t));
      result.push_back(std::move(host));
      continue;
    }
    result.push_back(t);
  }
  return result;
}

absl::StatusOr<std::vector<ir::Tensor>> Session::Run(const std::vector<ir::Tensor>& inputs,
                                                     const NodeObserver& observer,
                                                     const InteriorTap& tap,
                                                     SubgraphObserver* subgraphs) {
  ASSIGN_OR_RETURN(std::unique_ptr<Execution> x, Start(inputs));
  while (!x->done()) RETURN_IF_ERROR(x->Step(observer, tap, subgraphs));
  return x->Outputs();
}

}  // namespace kiln::runtime
