// Every model the repository and ../shared hold, built under every preset and run: a build that
// succeeds gives an engine that runs (issue 28). Models: tests/models/*/ (and one folder deeper),
// ../shared/trained-models/*/, the ONNX 1.22 conformance models (simple, pytorch-converted,
// pytorch-operator, light) and node cases. Presets: fp32, fp16, bf16, fp32-layernorm,
// bf16-layernorm, fp16-safe; authored mixed-precision models (any fp16/bf16 tensor) build with
// --constraints prefer, as their types are kept by design (DESIGN.md §5).
//
// A case fails on any build error but Unimplemented (an op, dtype, opset or precision Kiln does
// not implement; under `obey`, an op without a kernel at the preset's precision is built again
// under `prefer`, so the engine still runs), on any error loading or running the engine, and on
// outputs of another dtype or shape than the model's test data. Values are the conformance
// tests' business. Inputs: the model's test_data_set_0, else generated from its declared inputs
// (report/sample_inputs.h; symbolic dims bound to 2).
//
// Two binaries from this file: the quick one (KILN_EVERY_MODEL_QUICK, for `make test`: every
// model but the light ones, ~1,900 cases x 6 presets; each conformance set, and the node cases
// of each initial letter, is one ctest test) and the slow one (the nine full-size light models,
// label `slow`). Known failures, each with its reason, are listed in
// every_model_preset_known.txt: a listed failure is reported, not failed; a listed case that
// passes fails, so the list stays true. Inputs a model needs that the generic rules get wrong
// are given in every_model_preset_inputs.txt.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/sample_inputs.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tools/cli_io.h"

namespace kiln {
namespace {

const char* const kPresets[] = {"fp32",           "fp16",           "bf16",
                                "fp32-layernorm", "bf16-layernorm", "fp16-safe"};

// A symbolic or unknown input dim is bound to this: small, and unlike 1 it does not hide a
// broadcast that should not happen.
constexpr int64_t kSymbolicDim = 2;

struct ModelCase {
  std::string id;            // "tests/models/vit_tiny", "onnx-conformance/node/test_abs", ...
  std::string model;         // path of the .onnx file
  std::string data;          // test_data_set_0 folder, or empty
  std::string light_output;  // light models: the expected output_0.pb (no inputs given)
};

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool IsFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n[0] != '.') out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string SharedDir() { return absl::StrCat(KILN_SOURCE_DIR, "/../shared"); }

// The model folders under `root` (a folder with model.onnx; `depth` levels down), as `label/..`.
void AddModelFolders(const std::string& root, const std::string& label, int depth,
                     std::vector<ModelCase>& out) {
  for (const std::string& n : ListDir(root)) {
    const std::string path = absl::StrCat(root, "/", n);
    if (!IsDir(path)) continue;
    const std::string id = absl::StrCat(label, "/", n);
    if (IsFile(path + "/model.onnx")) {
      const std::string data = path + "/test_data_set_0";
      out.push_back({id, path + "/model.onnx", IsFile(data + "/input_0.pb") ? data : "", ""});
    } else if (depth > 0) {
      AddModelFolders(path, id, depth - 1, out);
    }
  }
}

// A ctest test: one model of tests/models or trained-models, one light model, or a group of
// conformance cases (a set, or the node cases of one initial letter) so that the process a ctest
// test starts is paid for once per group rather than once per tiny model.
struct Group {
  std::string name;
  std::vector<ModelCase> cases;
};

std::vector<Group> Groups() {
  std::vector<Group> out;
  auto singles = [&](const std::vector<ModelCase>& cases) {
    for (const ModelCase& c : cases) out.push_back({c.id, {c}});
  };
  const std::string conformance = SharedDir() + "/onnx-conformance";
#ifdef KILN_EVERY_MODEL_QUICK
  std::vector<ModelCase> models;
  AddModelFolders(absl::StrCat(KILN_SOURCE_DIR, "/tests/models"), "tests/models", 1, models);
  AddModelFolders(SharedDir() + "/trained-models", "trained-models", 0, models);
  singles(models);
  for (const char* set : {"simple", "pytorch-converted", "pytorch-operator"}) {
    Group g{absl::StrCat("onnx-conformance/", set), {}};
    AddModelFolders(absl::StrCat(conformance, "/", set), g.name, 0, g.cases);
    if (!g.cases.empty()) out.push_back(std::move(g));
  }
  std::vector<ModelCase> node;
  AddModelFolders(conformance + "/node", "onnx-conformance/node", 0, node);
  const size_t prefix = std::string("onnx-conformance/node/test_").size();
  for (const ModelCase& c : node) {
    const std::string letter = c.id.size() > prefix ? c.id.substr(prefix, 1) : "_";
    const std::string name = absl::StrCat("onnx-conformance/node/", letter);
    if (out.empty() || out.back().name != name) out.push_back({name, {}});
    out.back().cases.push_back(c);
  }
#else
  std::vector<ModelCase> light;
  for (const std::string& n : ListDir(conformance + "/light")) {
    if (!absl::EndsWith(n, ".onnx")) continue;
    const std::string stem = n.substr(0, n.size() - 5);
    light.push_back({absl::StrCat("onnx-conformance/light/", stem),
                     absl::StrCat(conformance, "/light/", n), "",
                     absl::StrCat(conformance, "/light/", stem, "_output_0.pb")});
  }
  singles(light);
#endif
  return out;
}

// every_model_preset_known.txt: `<case id> <preset or *> <reason>` per line, `#` comments.
std::map<std::pair<std::string, std::string>, std::string> KnownFailures() {
  std::map<std::pair<std::string, std::string>, std::string> known;
  std::ifstream f(absl::StrCat(KILN_SOURCE_DIR, "/tests/e2e/every_model_preset_known.txt"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string id, preset, reason;
    s >> id >> preset;
    std::getline(s, reason);
    known[{id, preset}] = std::string(absl::StripLeadingAsciiWhitespace(reason));
  }
  return known;
}

// every_model_preset_inputs.txt: `<case id> [--shape NAME=DIMS] [--input-range NAME=LO,HI]...`
// per line, `#` comments: how to generate valid inputs for a model without test data whose inputs
// the generic rules get wrong (a sample rate, a minimum length).
absl::StatusOr<std::map<std::string, report::SampleOptions>> InputOptions() {
  std::map<std::string, report::SampleOptions> out;
  std::ifstream f(absl::StrCat(KILN_SOURCE_DIR, "/tests/e2e/every_model_preset_inputs.txt"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string id, flag, value;
    s >> id;
    report::SampleOptions& o = out[id];
    while (s >> flag >> value) {
      if (flag == "--shape") {
        RETURN_IF_ERROR(report::ParseShape(value, o));
      } else if (flag == "--input-range") {
        RETURN_IF_ERROR(report::ParseInputRange(value, o));
      } else {
        return absl::InvalidArgumentError(absl::StrCat("every_model_preset_inputs.txt: ", line));
      }
    }
  }
  return out;
}

// Whether a build error is Kiln saying it does not implement something.
bool Unsupported(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kUnimplemented) return true;
  // TEMPORARY (issue 28): If/Loop/Scan/LSTM/GRU/RNN are on the op list while their kernels are
  // being written; until they land the build says "ops of the op list without a kernel"
  // (Internal). Remove this once they have kernels.
  return s.code() == absl::StatusCode::kInternal &&
         absl::StartsWith(s.message(), "ops of the op list without a kernel");
}

// The ONNX 1.12-style bfloat16 data stored as uint16 bits, read as bfloat16.
ir::Tensor AsBFloat16IfBits(const ir::Tensor& t, DataType want) {
  if (want != DataType::kBF16 || t.dtype() != DataType::kU16) return t;
  ir::Tensor out = *ir::Tensor::Allocate(DataType::kBF16, t.dims());
  std::memcpy(out.raw_data(), t.raw_data(), t.byte_size());
  return out;
}

// The inputs of one run and the expected outputs (dtype and dims only; may be empty).
struct Data {
  std::vector<ir::Tensor> inputs;
  std::vector<ir::Tensor> outputs;
};

absl::StatusOr<Data> DataOf(const ModelCase& c, const ir::Graph& imported) {
  Data d;
  if (!c.data.empty()) {
    ASSIGN_OR_RETURN(d.inputs, tools::ReadTensorDir(c.data, "input", &imported.inputs()));
    ASSIGN_OR_RETURN(d.outputs, tools::ReadTensorDir(c.data, "output", &imported.outputs()));
    for (size_t i = 0; i < d.inputs.size() && i < imported.inputs().size(); ++i) {
      d.inputs[i] = AsBFloat16IfBits(d.inputs[i], imported.inputs()[i]->dtype);
    }
    return d;
  }
  static const auto* options = new auto(InputOptions());
  RETURN_IF_ERROR(options->status());
  auto given = (*options)->find(c.id);
  report::SampleOptions o = given != (*options)->end() ? given->second : report::SampleOptions{};
  // Symbols take their value from a given --shape, else kSymbolicDim.
  std::map<std::string, int64_t> symbols;
  for (const ir::Value* v : imported.inputs()) {
    auto it = o.shapes.find(v->name);
    if (it == o.shapes.end() || !v->shape.rank_known) continue;
    for (int i = 0; i < v->shape.rank() && i < static_cast<int>(it->second.size()); ++i) {
      const ir::Dim& dim = v->shape.dims[i];
      if (!dim.is_static() && !dim.symbol.empty()) symbols[dim.symbol] = it->second[i];
    }
  }
  for (const ir::Value* v : imported.inputs()) {
    if (!v->shape.rank_known || v->shape.is_static() || o.shapes.contains(v->name)) continue;
    std::vector<int64_t> dims;
    for (const ir::Dim& dim : v->shape.dims) {
      auto bound = symbols.find(dim.symbol);
      dims.push_back(dim.is_static()          ? dim.value
                     : bound != symbols.end() ? bound->second
                                              : kSymbolicDim);
    }
    o.shapes[v->name] = dims;
  }
  ASSIGN_OR_RETURN(report::Samples s, report::GenerateSamples(imported, o));
  d.inputs = std::move(s.sets[0]);
  if (!c.light_output.empty()) {
    ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(c.light_output, int64_t{1} << 32));
    ASSIGN_OR_RETURN(ir::Tensor t, import::ParseTensorProto(bytes, c.light_output));
    d.outputs.push_back(std::move(t));
  }
  return d;
}

bool Authored(const ir::Graph& g) {
  for (const auto& v : g.values()) {
    if (v->dtype == DataType::kF16 || v->dtype == DataType::kBF16) return true;
  }
  return false;
}

// Builds `imported` under `preset` and runs it on `data`; "" when it ran as it should,
// "unsupported: ..." when Kiln says it does not implement the model, else what went wrong.
std::string BuildAndRun(const ir::Graph& imported, const Data& data, const std::string& preset,
                        bool authored) {
  builder::BuildOptions o;
  o.policy = preset;
  o.constraints = authored ? precision::Constraints::kPrefer : precision::Constraints::kObey;
  auto built = builder::BuildEngineFromImport(imported, "", o, nullptr);
  if (!built.ok() && built.status().code() == absl::StatusCode::kUnimplemented &&
      o.constraints == precision::Constraints::kObey) {
    // A node without a kernel at the preset's precision: `prefer` runs it higher.
    o.constraints = precision::Constraints::kPrefer;
    built = builder::BuildEngineFromImport(imported, "", o, nullptr);
  }
  if (!built.ok()) {
    return absl::StrCat(Unsupported(built.status()) ? "unsupported: " : "build: ",
                        built.status().ToString());
  }
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(std::move(built->blob)));
  if (!engine.ok()) return absl::StrCat("load: ", engine.status().ToString());
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  if (!session.ok()) return absl::StrCat("session: ", session.status().ToString());
  auto got = (*session)->Run(data.inputs);
  if (!got.ok()) return absl::StrCat("run: ", got.status().ToString());
  if (got->size() < data.outputs.size()) {
    return absl::StrCat("run: ", got->size(), " outputs, the test data has ", data.outputs.size());
  }
  for (size_t k = 0; k < data.outputs.size(); ++k) {
    const ir::Tensor& g = (*got)[k];
    const ir::Tensor w = AsBFloat16IfBits(data.outputs[k], g.dtype());
    if (g.kind() != w.kind() || g.dtype() != w.dtype() || g.dims() != w.dims()) {
      return absl::StrCat("run: output ", k, " is ", DataTypeOnnxName(g.dtype()),
                          ir::DimsToString(g.dims()), ", the test data's ",
                          DataTypeOnnxName(w.dtype()), ir::DimsToString(w.dims()));
    }
  }
  return "";
}

void PrintTo(const Group& g, std::ostream* os) { *os << g.name; }

// Checks one case under every preset: ADD_FAILURE for each failure not listed as known.
void CheckCase(const ModelCase& c) {
  static const auto* known = new auto(KnownFailures());
  // Printed first: a crash shows which case it was in (ctest --output-on-failure).
  std::cout << c.id << "\n" << std::flush;
  auto check = [&](const std::string& preset, const std::string& result) {
    const std::string* why = nullptr;
    for (const std::string& p : {preset, std::string("*")}) {
      auto it = known->find({c.id, p});
      if (it != known->end() && why == nullptr) why = &it->second;
    }
    const bool unsupported = absl::StartsWith(result, "unsupported: ");
    const bool failed = !result.empty() && !unsupported;
    if (unsupported) std::cout << "  " << preset << " " << result << "\n";
    if (failed && why) {
      std::cout << "  " << preset << " known failure (" << *why << "): " << result << "\n";
    } else if (failed) {
      ADD_FAILURE() << c.id << " under " << preset << ": " << result;
    } else if (why) {
      ADD_FAILURE() << c.id << " under " << preset << " is listed in "
                    << "every_model_preset_known.txt (" << *why << ") but "
                    << (result.empty() ? "passes" : result) << ": remove the line";
    }
  };
  import::ImportOptions io;
  io.model_dir = c.model.substr(0, c.model.rfind('/'));
  auto imported = import::ImportModelFile(c.model, io);
  if (!imported.ok()) {
    check("*", absl::StrCat(Unsupported(imported.status()) ? "unsupported: " : "import: ",
                            imported.status().ToString()));
    return;
  }
  auto data = DataOf(c, **imported);
  if (!data.ok()) {
    check("*", absl::StrCat(Unsupported(data.status()) ? "unsupported: " : "inputs: ",
                            data.status().ToString()));
    return;
  }
  const bool authored = Authored(**imported);
  for (const char* preset : kPresets) {
    check(preset, BuildAndRun(**imported, *data, preset, authored));
  }
}

class EveryModelPresetTest : public ::testing::TestWithParam<Group> {};

TEST_P(EveryModelPresetTest, BuildsAndRunsUnderEveryPreset) {
  for (const ModelCase& c : GetParam().cases) CheckCase(c);
}

std::string TestName(const ::testing::TestParamInfo<Group>& info) {
  std::string s = info.param.name;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModelPresetTest, ::testing::ValuesIn(Groups()), TestName);

}  // namespace
}  // namespace kiln
