// kiln: the local command line (DESIGN.md §10): build, run, inspect.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/common/status.h"
#include "engine/kernels/device.h"
#include "engine/plan/engine_blob.h"
#include "engine/precision/assign.h"
#include "engine/runtime/session.h"
#include "engine/runtime/threads.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tools/bench_cmd.h"
#include "tools/cli_args.h"
#include "tools/cli_io.h"
#include "tools/cli_paths.h"
#include "tools/report_cmd.h"

namespace kiln::tools {
namespace {

constexpr char kUsage[] = R"(usage:
  kiln build MODEL.onnx [--policy PRESET|FILE] [--rule 'SEL=PREC']... [--constraints obey|prefer]
             [--typing auto|strong|weak] [--fusion on|off] [--no-fuse SEL]... -o ENGINE [--quiet]
             [--device cpu|opencl[:PLATFORM[:DEVICE]] [--no-fallback]]
             [--inputs DIR | --seed N [--samples N] [--input-range NAME=LO,HI]... [--shape NAME=DIMS]...]
             [--report R.json] [--html R.html] [--suggest-policy OUT] [--atol A] [--rtol R]
             [--no-suggest]
  kiln run ENGINE --inputs DIR --outputs DIR [--repeat N] [--threads N]
  kiln bench ENGINE [--inputs DIR | --seed N ...] [--runs N] [--warmup N]
             [--threads N] [--profile]
  kiln inspect ENGINE [--json]
  kiln devices
  kiln explain MODEL.onnx [--policy ...] [--rule ...] [--constraints ...] [--typing ...]
             [--device ...] --node NAME
  kiln compare ENGINE_A ENGINE_B [--inputs DIR | --seed N ...] [--atol A] [--rtol R]
             [--report R.json] [--html R.html]

  build    import MODEL.onnx, check it, and write an engine blob to ENGINE
  run      run ENGINE on DIR/input_<i>.pb (ONNX TensorProto, graph input order) and write
           DIR/output_<i>.pb
  inspect  print the engine's kernels, tensors, memory plan and provenance (with its device:
           where each node runs and, for a node kept on the CPU, why)
  devices  list the build targets this machine has: the CPU and each OpenCL device, with its
           --device name, driver and capabilities
  build --device opencl[:P[:D]]: kernels on that OpenCL device where it has them, the rest on
           the CPU (each such node says why); --no-fallback fails the build instead
  build with --inputs/--seed/--report/--html: also the accuracy report, every ONNX tensor
           against the fp32 reference (default atol 1e-2, rtol 1e-2), and with an output out
           of tolerance a searched policy raising the fewest nodes (--suggest-policy OUT)
  compare  per-tensor comparison of two engines of the same model (A against B)
  bench    engine latency (min, median, p90) over N runs after warm-up, and its load time;
           --profile: then each kernel's median time over N more runs, by op and the slowest
  explain  why a node gets its precision: every rule that matched, the winner, the assigned and
           the effective precision (with --device: where it runs, and why when on the CPU)

  presets: fp32, fp16, bf16, fp32-layernorm, bf16-layernorm, fp16-safe
  selectors: op:TYPE  name:GLOB  re:REGEX  scope:PREFIX  pattern:layernorm|rmsnorm|gelu|softmax|attention
)";

// The build options shared by `build` and `explain`.
absl::StatusOr<builder::BuildOptions> BuildOptionsFrom(Args& args) {
  builder::BuildOptions opts;
  if (args.flags.count("--policy")) opts.policy = args.flags["--policy"];
  opts.rules = args.all["--rule"];
  if (args.flags.count("--constraints")) {
    auto c = precision::ParseConstraints(args.flags["--constraints"]);
    if (!c) return UsageError("--constraints takes obey or prefer");
    opts.constraints = *c;
  }
  if (args.flags.count("--typing")) {
    auto t = precision::ParseTyping(args.flags["--typing"]);
    if (!t) return UsageError("--typing takes auto, strong or weak");
    opts.typing = *t;
  }
  if (args.flags.count("--fusion")) {
    const std::string& f = args.flags["--fusion"];
    if (f != "on" && f != "off") return UsageError("--fusion takes on or off");
    opts.fusion.enabled = f == "on";
  }
  opts.fusion.no_fuse = args.all["--no-fuse"];
  if (args.flags.count("--device")) opts.device = args.flags["--device"];
  opts.no_fallback = args.flags.count("--no-fallback") > 0;
  if (opts.no_fallback && opts.device == "cpu") {
    return UsageError("--no-fallback needs --device opencl[...]");
  }
  return opts;
}

std::map<std::string, bool> BuildFlags() {
  std::map<std::string, bool> known = {
      {"--policy", true}, {"--rule", true},        {"--constraints", true}, {"--typing", true},
      {"--fusion", true}, {"--no-fuse", true},     {"--quiet", false},      {"--threads", true},
      {"--device", true}, {"--no-fallback", false}};
  return known;
}

std::shared_ptr<spdlog::logger> StderrLogger(bool quiet) {
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  logger->set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  return logger;
}

// Before a build runs: no output is a folder, an input (the model, a policy file, a sample
// input) or another output.
absl::Status CheckBuildPaths(const Args& args) {
  std::vector<NamedPath> inputs = {{"MODEL", args.positional[0]}};
  if (args.flags.count("--policy")) inputs.push_back({"--policy", args.flags.at("--policy")});
  std::vector<NamedPath> input_dirs;
  if (args.flags.count("--inputs")) input_dirs.push_back({"--inputs", args.flags.at("--inputs")});
  std::vector<NamedPath> outputs;
  for (const char* flag : {"-o", "--report", "--html", "--suggest-policy"}) {
    if (args.flags.count(flag)) outputs.push_back({flag, args.flags.at(flag)});
  }
  return CheckOutputPaths(inputs, input_dirs, outputs);
}

absl::Status Build(int argc, char** argv) {
  std::map<std::string, bool> known = BuildFlags();
  known["-o"] = true;
  AddReportFlags(known);
  auto args = Parse(argc, argv, 2, known);
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  if (args->positional.size() != 1) return UsageError("build takes exactly one MODEL.onnx");
  if (!args->flags.count("-o")) return UsageError("build needs -o ENGINE");
  ASSIGN_OR_RETURN(builder::BuildOptions opts, BuildOptionsFrom(*args));
  RETURN_IF_ERROR(CheckReportFlags(*args));
  RETURN_IF_ERROR(CheckBuildPaths(*args));
  opts.keep_reference = WantsReport(*args);
  RETURN_IF_ERROR(ApplyThreads(*args));
  auto logger = StderrLogger(args->flags.count("--quiet") > 0);
  ASSIGN_OR_RETURN(auto result, builder::BuildEngineFromFile(args->positional[0], opts, logger));
  RETURN_IF_ERROR(WriteFileAtomic(args->flags["-o"], result.blob));
  std::cout << "built " << args->positional[0] << " -> " << args->flags["-o"] << "\n"
            << builder::SummaryText(result.summary);
  if (WantsReport(*args)) {
    return RunReport(*args, args->positional[0], opts, result, logger);
  }
  return absl::OkStatus();
}

absl::Status Explain(int argc, char** argv) {
  std::map<std::string, bool> known = BuildFlags();
  known["--node"] = true;
  auto args = Parse(argc, argv, 2, known);
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  if (args->positional.size() != 1) return UsageError("explain takes exactly one MODEL.onnx");
  if (!args->flags.count("--node")) return UsageError("explain needs --node NAME");
  ASSIGN_OR_RETURN(builder::BuildOptions opts, BuildOptionsFrom(*args));
  auto logger = StderrLogger(/*quiet=*/true);
  ASSIGN_OR_RETURN(auto result, builder::BuildEngineFromFile(args->positional[0], opts, logger));
  const std::string& want = args->flags["--node"];
  const v1::NodeProvenance* p = nullptr;
  for (const auto& n : result.nodes) {
    if (n.node_name() == want) p = &n;
  }
  for (const auto& n : result.subgraph_nodes) {  // "If_0/then_branch/..."
    if (p == nullptr && n.node_name() == want) p = &n;
  }
  if (!p) {
    return absl::NotFoundError(absl::StrCat("no node named '", want, "' in ", args->positional[0]));
  }
  std::cout << absl::StrFormat("node '%s' (%s) #%d\n", p->node_name(), p->op_type(),
                               p->node_index());
  std::cout << "  rules that matched, in policy order:\n";
  if (p->matched_rules().empty()) std::cout << "    (none: the policy's base applies)\n";
  for (const auto& m : p->matched_rules()) std::cout << "    " << m << "\n";
  std::cout << "  decided by:  " << p->rule() << "\n";
  std::cout << "  assigned:    "
            << (p->assigned_precision().empty() ? "- (not floating)" : p->assigned_precision())
            << "\n";
  std::cout << "  effective:   "
            << (p->effective_precision().empty() ? "-" : p->effective_precision()) << "\n";
  std::cout << "  fusion:      "
            << (p->fusion().empty() ? "none (runs as its own kernel)" : p->fusion()) << "\n";
  if (!p->device().empty()) {
    std::cout << "  device:      " << p->device()
              << (p->fallback_reason().empty() ? "" : absl::StrCat(" (", p->fallback_reason(), ")"))
              << "\n";
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  auto args =
      Parse(argc, argv, 2,
            {{"--inputs", true}, {"--outputs", true}, {"--repeat", true}, {"--threads", true}});
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  if (args->positional.size() != 1) return UsageError("run takes exactly one ENGINE");
  RETURN_IF_ERROR(ApplyThreads(*args));
  int repeat = 1;
  if (args->flags.count("--repeat") &&
      (!absl::SimpleAtoi(args->flags["--repeat"], &repeat) || repeat < 1 || repeat > 100000)) {
    return UsageError("--repeat takes a count from 1 to 100000");
  }
  if (!args->flags.count("--inputs") || !args->flags.count("--outputs")) {
    return UsageError("run needs --inputs DIR and --outputs DIR");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<plan::Engine> engine, plan::LoadEngineFile(args->positional[0]));
  ASSIGN_OR_RETURN(auto session, runtime::Session::Create(engine));
  ASSIGN_OR_RETURN(auto inputs,
                   ReadTensorDir(args->flags["--inputs"], "input", &engine->graph->inputs()));
  ASSIGN_OR_RETURN(auto outputs, session->Run(inputs));
  if (repeat > 1) {
    // Latency of the loaded engine (the first run above is the warm-up), not of process start.
    std::vector<double> ms;
    for (int i = 0; i < repeat; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(outputs, session->Run(inputs));
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::cout << absl::StrFormat("latency over %d runs: min %.3f ms, median %.3f ms\n", repeat,
                                 ms.front(), ms[ms.size() / 2]);
  }
  std::vector<std::string> names;
  for (const ir::Value* v : engine->graph->outputs()) names.push_back(v->name);
  RETURN_IF_ERROR(WriteTensorDir(args->flags["--outputs"], "output", outputs, names));
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::cout << absl::StrFormat("output_%d.pb  %s %s %s\n", i, names[i],
                                 DataTypeOnnxName(outputs[i].dtype()),
                                 ir::DimsToString(outputs[i].dims()));
  }
  return absl::OkStatus();
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string ShapeString(const v1::TensorInfo& t) {
  if (!t.rank_known()) return "[?]";
  std::vector<std::string> parts;
  for (const auto& d : t.dims()) {
    parts.push_back(d.value() >= 0 ? absl::StrCat(d.value())
                                   : (d.symbol().empty() ? "?" : d.symbol()));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

// "name:dtype[dims]" of tensor `i` of `m` ("name:seq(dtype[dims])" for a sequence,
// "name:optional(...)" for an optional: the dims of the elements); "-" for an omitted one.
std::string TensorText(const v1::EngineMetadata& m, int i) {
  if (i < 0 || i >= m.tensors_size()) return "-";
  const auto& t = m.tensors(i);
  std::string type = absl::StrCat(DataTypeName(DataTypeFromOnnx(t.dtype())), ShapeString(t));
  if (t.kind() == v1::TensorInfo::SEQUENCE || t.kind() == v1::TensorInfo::OPTIONAL_SEQUENCE) {
    type = absl::StrCat("seq(", type, ")");
  }
  if (t.kind() == v1::TensorInfo::OPTIONAL_TENSOR ||
      t.kind() == v1::TensorInfo::OPTIONAL_SEQUENCE) {
    type = absl::StrCat("optional(", type, ")");
  }
  return absl::StrCat(t.name(), ":", type);
}

// The kernels of `m` with the nodes each implements; a kernel with subgraphs (If, Loop, Scan)
// is followed by each subgraph's engine, indented, its nodes named as in the model
// ("If_0/then_branch/...").
absl::Status PrintKernels(const v1::EngineMetadata& m, const std::string& indent, int depth = 0) {
  for (const auto& k : m.kernels()) {
    std::vector<std::string> ins, outs;
    for (int i : k.inputs()) ins.push_back(TensorText(m, i));
    for (int i : k.outputs()) outs.push_back(TensorText(m, i));
    std::cout << absl::StrFormat("%s  %-5s %-20s %s/%s/%s  (%s) -> (%s)\n", indent, k.id(),
                                 k.op_type(), k.backend(), k.isa(), k.dtype(),
                                 absl::StrJoin(ins, ", "), absl::StrJoin(outs, ", "));
    for (const auto& p : k.nodes()) {
      std::cout << absl::StrFormat(
          "%s        node '%s' (%s) #%d  assigned %s, effective %s, rule: %s%s\n", indent,
          p.node_name(), p.op_type(), p.node_index(), OrDash(p.assigned_precision()),
          OrDash(p.effective_precision()), p.rule(),
          p.fusion().empty() ? "" : absl::StrCat(", fusion: ", p.fusion()));
      if (!p.fallback_reason().empty()) {
        std::cout << absl::StrFormat("%s          on the CPU: %s\n", indent, p.fallback_reason());
      }
    }
    for (const auto& a : k.attributes()) {
      if (a.type() != v1::AttributeValue::GRAPH) continue;
      if (depth >= ir::kMaxSubgraphDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel ", k.id(), " subgraph '", a.name(), "' nests too deep"));
      }
      auto sub = plan::LoadEngineFromBytes(std::make_shared<const std::string>(a.s()));
      if (!sub.ok()) {
        return absl::Status(sub.status().code(),
                            absl::StrCat("kernel ", k.id(), " subgraph '", a.name(),
                                         "': ", sub.status().message()));
      }
      const v1::EngineMetadata& sm = (*sub)->metadata;
      std::cout << absl::StrFormat("%s        subgraph '%s': %d kernels for %d source nodes\n",
                                   indent, a.name(), sm.kernels_size(), sm.source_node_count());
      RETURN_IF_ERROR(PrintKernels(sm, absl::StrCat(indent, "        "), depth + 1));
    }
  }
  return absl::OkStatus();
}

// Replaces each subgraph attribute's engine blob in `m` by its engine's metadata (recursively),
// for `kiln inspect --json`.
absl::Status ExpandSubgraphs(v1::EngineMetadata& m, int depth) {
  for (auto& k : *m.mutable_kernels()) {
    for (auto& a : *k.mutable_attributes()) {
      if (a.type() != v1::AttributeValue::GRAPH) continue;
      if (depth >= ir::kMaxSubgraphDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel ", k.id(), " subgraph '", a.name(), "' nests too deep"));
      }
      auto sub = plan::LoadEngineFromBytes(std::make_shared<const std::string>(a.s()));
      if (!sub.ok()) {
        return absl::Status(sub.status().code(),
                            absl::StrCat("kernel ", k.id(), " subgraph '", a.name(),
                                         "': ", sub.status().message()));
      }
      *a.mutable_subgraph() = (*sub)->metadata;
      a.clear_s();
      RETURN_IF_ERROR(ExpandSubgraphs(*a.mutable_subgraph(), depth + 1));
    }
  }
  return absl::OkStatus();
}

absl::Status Inspect(int argc, char** argv) {
  auto args = Parse(argc, argv, 2, {{"--json", false}});
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  if (args->positional.size() != 1) return UsageError("inspect takes exactly one ENGINE");
  ASSIGN_OR_RETURN(std::unique_ptr<plan::Engine> engine, plan::LoadEngineFile(args->positional[0]));
  const v1::EngineMetadata& m = engine->metadata;
  if (args->flags.count("--json")) {
    v1::EngineMetadata shown = m;
    RETURN_IF_ERROR(ExpandSubgraphs(shown, 0));
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    o.preserve_proto_field_names = true;
    std::string json;
    auto st = google::protobuf::util::MessageToJsonString(shown, &json, o);
    if (!st.ok()) return absl::InternalError(std::string(st.message()));
    std::cout << json;
    return absl::OkStatus();
  }
  auto tensor = [&](int i) { return TensorText(m, i); };
  std::cout << absl::StrFormat(
      "engine %s\n  format v%d, builder %s, model sha256 %s\n  model '%s', opset %d, ir_version "
      "%d\n  policy: %s\n  constraints %s, typing %s\n  requires CPU features: %s\n",
      args->positional[0], plan::kFormatVersion, m.builder_version(), m.model_sha256(),
      m.model_name(), m.opset(), m.ir_version(), absl::StrReplaceAll(m.policy(), {{"\n", "; "}}),
      m.constraints(), m.typing(),
      m.required_cpu_features().empty() ? "none" : absl::StrJoin(m.required_cpu_features(), ","));
  if (m.device().kind() == "opencl") {
    const v1::Device& d = m.device();
    std::cout << absl::StrFormat(
        "device: OpenCL %s, platform '%s' (%s), driver %s, %s, %s; capabilities: %s\n"
        "  %d kernel(s) on the device (%.1f%% of the estimated FLOPs), %d on the CPU, %d "
        "tensor(s) copied between them per run\n",
        d.name(), d.platform_name(), d.platform_version(), d.driver_version(), d.version(),
        d.opencl_c_version(),
        d.capabilities().empty() ? "none" : absl::StrJoin(d.capabilities(), " "),
        d.device_kernels(), d.flops() > 0 ? 100.0 * d.device_flops() / d.flops() : 100.0,
        d.cpu_kernels(), d.transfers());
  }
  std::cout << "inputs:\n";
  for (int i : m.graph_inputs()) std::cout << "  " << tensor(i) << "\n";
  std::cout << "outputs:\n";
  for (int i : m.graph_outputs()) std::cout << "  " << tensor(i) << "\n";
  const auto& mp = m.memory_plan();
  std::cout << absl::StrFormat(
      "memory plan: arena %d bytes for %d bytes of activations (%.1f%%), %d sized at run time\n",
      mp.arena_bytes(), mp.total_activation_bytes(),
      mp.total_activation_bytes() ? 100.0 * mp.arena_bytes() / mp.total_activation_bytes() : 100.0,
      mp.dynamic_tensors());
  std::cout << absl::StrFormat("kernels: %d for %d source nodes\n", m.kernels_size(),
                               m.source_node_count());
  RETURN_IF_ERROR(PrintKernels(m, ""));
  if (m.dtype_changes_size() > 0) {
    std::cout << absl::StrFormat("dtype changes against the authored model: %d\n",
                                 m.dtype_changes_size());
    for (const auto& c : m.dtype_changes()) {
      std::cout << absl::StrFormat("        %s: %s -> %s (%s)\n", c.value(),
                                   DataTypeName(DataTypeFromOnnx(c.from_dtype())),
                                   DataTypeName(DataTypeFromOnnx(c.to_dtype())), c.reason());
    }
  }
  for (const auto& w : m.warnings()) std::cout << "warning: " << w << "\n";
  if (m.removed_nodes_size() > 0) {
    std::cout << absl::StrFormat("removed at build time: %d node(s)\n", m.removed_nodes_size());
    for (const auto& p : m.removed_nodes()) {
      std::cout << absl::StrFormat("        node '%s' (%s) #%d  %s\n", p.node_name(), p.op_type(),
                                   p.node_index(), p.fusion());
    }
  }
  return absl::OkStatus();
}

// `kiln devices`: the CPU and every OpenCL device, as --device names them.
absl::Status Devices(int argc, char** argv) {
  auto args = Parse(argc, argv, 2, {});
  if (!args.ok()) return UsageError(std::string(args.status().message()));
  if (!args->positional.empty()) return UsageError("devices takes no argument");
  std::cout << "cpu            this machine's CPU (the default)\n";
  if (!kernels::OpenClBuilt()) {
    std::cout << "(this Kiln was built without the OpenCL backend)\n";
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<kernels::DeviceDescription>> devices = kernels::ListOpenClDevices();
  if (!devices.ok()) {
    std::cout << "no OpenCL device: " << devices.status().message() << "\n";
    return absl::OkStatus();
  }
  if (devices->empty()) std::cout << "no OpenCL device: the ICD loader found no platform\n";
  for (const kernels::DeviceDescription& d : *devices) {
    std::cout << absl::StrFormat(
        "%-14s %s %s: platform '%s' (%s), %s, driver %s, %s, %d compute units, %d MiB; "
        "capabilities: %s\n",
        d.Spec(), d.type, d.name, d.platform_name, d.platform_version, d.version, d.driver_version,
        d.opencl_c_version, d.compute_units, d.global_mem_bytes >> 20,
        d.capabilities.empty() ? "none" : absl::StrJoin(d.capabilities, " "));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  absl::Status st;
  // The engine returns statuses, but the standard library and protobuf report running out of
  // memory (an address-space limit, a huge output) by throwing: the boundary turns that into an
  // error instead of an abort.
  try {
    if (cmd == "build")
      st = Build(argc, argv);
    else if (cmd == "run")
      st = Run(argc, argv);
    else if (cmd == "inspect")
      st = Inspect(argc, argv);
    else if (cmd == "explain")
      st = Explain(argc, argv);
    else if (cmd == "devices")
      st = Devices(argc, argv);
    else if (cmd == "compare")
      st = Compare(argc, argv);
    else if (cmd == "bench")
      st = Bench(argc, argv);
    else
      st = UsageError(absl::StrCat("unknown command '", cmd, "'"));
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError(
        "out of memory (an allocation failed: the inputs, outputs or model need more memory than "
        "this process may use; see ulimit -v)");
  }
  if (st.GetPayload(kUsagePayload).has_value()) {
    std::cerr << "kiln: " << st.message() << "\n\n" << kUsage;
    return 2;
  }
  if (!st.ok()) {
    std::cerr << "kiln " << cmd << ": error: " << absl::StatusCodeToString(st.code()) << ": "
              << st.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) {
  kiln::runtime::UseBoundedOmpWait(argv);  // may execute kiln again, before any thread starts
  // Big buffers (weights, activations) are mapped and unmapped on their own: a fixed threshold
  // stops glibc from raising it after the first free and then keeping hundreds of MB of freed
  // weights in the heap, which a build followed by the accuracy report would carry to its peak.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return kiln::tools::Main(argc, argv);
}
