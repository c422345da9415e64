// Conformance runner: builds and runs ONNX backend-test cases through the full Kiln path
// (import -> build -> engine blob -> load -> run) and compares with the expected outputs.
//
//   kiln_conformance [--filter REGEX] [--exclude REGEX] [--verbose] [--timeout SEC]
//                    [--known-divergent FILE] [--policy P] [--rtol X] [--atol X]
//                    [--mismatch-is-not-failure] [--device D] DIR...
//
// With --device opencl[...] every case is built for that device (nodes it cannot run stay on
// the CPU, as a build does) and the summary also counts the cases that ran entirely on it.
//
// DIR is a folder of cases (`<case>/model.onnx` + `<case>/test_data_set_N/`) or a folder of
// `light_*.onnx` full models with `light_*_output_0.pb` (their inputs are generated the way the
// ONNX backend test does: arange(n)/n). Each case runs in a forked child so a crash or hang is
// reported as that case's failure. Prints `N passed, N failed, N skipped` with skip reasons
// grouped; exits 1 if any case failed.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "tools/cli_io.h"

namespace kiln::conformance {
namespace {

// Run settings (one process, set once from the command line before any case runs).
struct Settings {
  std::string policy;  // empty: the implicit default (fp32 / authored types)
  // ONNX backend-test default tolerances, for the default policy.
  double rtol = 1e-3;
  double atol = 1e-7;
  std::string device = "cpu";  // --device
};
Settings g_settings;

struct Case {
  std::string name;                    // e.g. "node/test_abs"
  std::string model;                   // model path
  std::vector<std::string> data_sets;  // test_data_set_N folders (node cases)
  std::string light_expected;          // light models: expected output_0 path
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
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string BaseName(std::string p) {
  while (!p.empty() && p.back() == '/') p.pop_back();
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::vector<Case> FindCases(const std::string& root) {
  std::vector<Case> cases;
  // Cases are named by the last two folders of the root and the case, e.g.
  // "onnx-conformance/node/test_abs" or "data/node/test_abs" (Debian's ONNX 1.12 data).
  std::string trimmed = root;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  auto slash = trimmed.rfind('/');
  std::string parent = slash == std::string::npos ? "" : BaseName(trimmed.substr(0, slash));
  std::string label = parent.empty() ? BaseName(trimmed) : parent + "/" + BaseName(trimmed);
  for (const std::string& n : ListDir(root)) {
    std::string path = absl::StrCat(root, "/", n);
    if (IsDir(path) && IsFile(path + "/model.onnx")) {
      Case c{absl::StrCat(label, "/", n), path + "/model.onnx", {}, ""};
      for (const std::string& d : ListDir(path)) {
        if (absl::StartsWith(d, "test_data_set_")) c.data_sets.push_back(path + "/" + d);
      }
      cases.push_back(std::move(c));
    } else if (absl::EndsWith(n, ".onnx") && IsFile(path)) {
      std::string stem = path.substr(0, path.size() - 5);
      if (IsFile(stem + "_output_0.pb")) {
        cases.push_back(Case{
            absl::StrCat(label, "/", n.substr(0, n.size() - 5)), path, {}, stem + "_output_0.pb"});
      }
    }
  }
  return cases;
}

std::string Compare(const ir::Tensor& got, const ir::Tensor& want, const std::string& what) {
  // Sequences element by element; an empty optional equals only an empty optional.
  if (got.kind() != want.kind()) {
    auto name = [](const ir::Tensor& t) {
      return t.is_none() ? "an empty optional" : t.is_sequence() ? "a sequence" : "a tensor";
    };
    return absl::StrCat(what, ": got ", name(got), ", expected ", name(want));
  }
  if (want.is_none()) return "";
  if (want.is_sequence()) {
    if (got.elements().size() != want.elements().size()) {
      return absl::StrCat(what, ": a sequence of ", got.elements().size(), " tensors, expected ",
                          want.elements().size());
    }
    for (size_t e = 0; e < want.elements().size(); ++e) {
      std::string d =
          Compare(got.elements()[e], want.elements()[e], absl::StrCat(what, " element ", e));
      if (!d.empty()) return d;
    }
    return "";
  }
  if (got.dtype() != want.dtype()) {
    return absl::StrCat(what, ": dtype ", DataTypeOnnxName(got.dtype()), " != expected ",
                        DataTypeOnnxName(want.dtype()));
  }
  if (got.dims() != want.dims()) {
    return absl::StrCat(what, ": shape ", ir::DimsToString(got.dims()), " != expected ",
                        ir::DimsToString(want.dims()));
  }
  // float8/float4 compare by decoded value (ElementAsDouble), NaN equal to NaN; int4/int2 exactly.
  bool exact = !IsFloating(want.dtype()) && !IsLowBitFloat(want.dtype());
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double g = ir::ElementAsDouble(got, i), w = ir::ElementAsDouble(want, i);
    bool ok;
    if (exact) {
      ok = ir::ElementAsInt64(got, i) == ir::ElementAsInt64(want, i) &&
           (want.dtype() != DataType::kU64 || got.data<uint64_t>()[i] == want.data<uint64_t>()[i]);
    } else if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      ok = std::fabs(g - w) <= g_settings.atol + g_settings.rtol * std::fabs(w);
      worst = std::max(worst, std::fabs(g - w));
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return "";
  return absl::StrFormat(
      "%s: %d of %d elements differ (first at %d: got %.9g, expected %.9g; "
      "max abs diff %.3g)",
      what, bad, want.num_elements(), first, ir::ElementAsDouble(got, first),
      ir::ElementAsDouble(want, first), worst);
}

// Inputs of a light model: every graph input that is not an initializer, as arange(n)/n floats
// (unknown dims taken as 1), exactly as the ONNX backend test generates them.
absl::StatusOr<std::vector<ir::Tensor>> LightInputs(const plan::Engine& engine) {
  std::vector<ir::Tensor> out;
  for (const ir::Value* v : engine.graph->inputs()) {
    if (v->dtype != DataType::kF32) {
      return absl::UnimplementedError("light model input is not float");
    }
    std::vector<int64_t> dims;
    for (const ir::Dim& d : v->shape.dims) dims.push_back(d.is_static() ? d.value : 1);
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(DataType::kF32, dims));
    int64_t n = t.num_elements();
    for (int64_t i = 0; i < n; ++i) {
      t.data<float>()[i] = static_cast<float>(static_cast<double>(i) / static_cast<double>(n));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// ONNX 1.12's test data stored bfloat16 tensors as uint16 bit patterns (numpy had no bfloat16):
// when the other side is bfloat16, read the uint16 bits as bfloat16.
ir::Tensor AsBFloat16IfBits(const ir::Tensor& t, DataType want) {
  if (want != DataType::kBF16 || t.dtype() != DataType::kU16) return t;
  ir::Tensor out = *ir::Tensor::Allocate(DataType::kBF16, t.dims());
  std::memcpy(out.raw_data(), t.raw_data(), t.byte_size());
  return out;
}

// Runs one case; returns "PASS", "SKIP <reason>" or "FAIL <message>".
std::string RunCase(const Case& c) {
  builder::BuildOptions opts;
  opts.policy = g_settings.policy;
  opts.device = g_settings.device;
  if (!opts.policy.empty()) {
    // Reduced-precision runs keep authored types (the node cases that carry fp16/bf16 tensors)
    // instead of failing on the conflict.
    opts.constraints = precision::Constraints::kPrefer;
  }
  auto built = builder::BuildEngineFromFile(c.model, opts, nullptr);
  if (!built.ok()) {
    std::string msg(built.status().message());
    if (built.status().code() == absl::StatusCode::kUnimplemented) {
      if (absl::StartsWith(msg, "unsupported opset")) return "SKIP unsupported opset: " + msg;
      if (absl::StartsWith(msg, "unsupported ir_version")) {
        return "SKIP unsupported ir_version: " + msg;
      }
      if (absl::StrContains(msg, "unsupported op:")) return "SKIP unsupported op: " + msg;
      if (absl::StrContains(msg, "unsupported dtype")) return "SKIP unsupported dtype: " + msg;
    }
    return absl::StrCat("FAIL build: ", absl::StatusCodeToString(built.status().code()), ": ", msg);
  }
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(std::move(built->blob)));
  if (!engine.ok()) return absl::StrCat("FAIL load: ", engine.status().message());
  std::shared_ptr<plan::Engine> eng = std::move(engine).value();
  // A pass of a device build says where it ran: "PASS device" (every kernel on the device),
  // "PASS mixed", "PASS cpu" (none there).
  const v1::Device& dev = eng->metadata.device();
  const std::string pass = g_settings.device == "cpu"                           ? "PASS"
                           : dev.cpu_kernels() == 0 && dev.device_kernels() > 0 ? "PASS device"
                           : dev.device_kernels() > 0                           ? "PASS mixed"
                                                                                : "PASS cpu";
  auto session = runtime::Session::Create(eng);
  if (!session.ok() && session.status().code() == absl::StatusCode::kUnimplemented) {
    return absl::StrCat("SKIP unsupported mode: ", session.status().message());
  }
  if (!session.ok()) return absl::StrCat("FAIL session: ", session.status().message());

  std::vector<std::pair<std::vector<ir::Tensor>, std::vector<ir::Tensor>>> sets;
  if (!c.light_expected.empty()) {
    auto in = LightInputs(*eng);
    if (!in.ok()) return absl::StrCat("SKIP unsupported dtype: ", in.status().message());
    auto bytes = import::ReadFile(c.light_expected, int64_t{1} << 32);
    if (!bytes.ok()) return absl::StrCat("FAIL ", bytes.status().message());
    auto want = import::ParseTensorProto(*bytes, c.light_expected);
    if (!want.ok()) return absl::StrCat("FAIL ", want.status().message());
    sets.push_back({std::move(*in), {std::move(*want)}});
  } else {
    for (const std::string& ds : c.data_sets) {
      auto ins = tools::ReadTensorDir(ds, "input", &eng->graph->inputs());
      auto outs = ins.ok() ? tools::ReadTensorDir(ds, "output", &eng->graph->outputs()) : ins;
      for (const auto* r : {&ins, &outs}) {
        if (r->ok()) continue;
        if (r->status().code() == absl::StatusCode::kUnimplemented) {
          return absl::StrCat("SKIP unsupported dtype: ", r->status().message());
        }
        return absl::StrCat("FAIL ", r->status().message());
      }
      sets.push_back({std::move(*ins), std::move(*outs)});
    }
  }
  for (size_t s = 0; s < sets.size(); ++s) {
    const auto& gin = eng->graph->inputs();
    for (size_t i = 0; i < sets[s].first.size() && i < gin.size(); ++i) {
      sets[s].first[i] = AsBFloat16IfBits(sets[s].first[i], gin[i]->dtype);
    }
    auto got = (*session)->Run(sets[s].first);
    if (!got.ok() && got.status().code() == absl::StatusCode::kUnimplemented) {
      // A mode the kernel refuses by design (e.g. random training-mode Dropout).
      return absl::StrCat("SKIP unsupported mode: ", got.status().message());
    }
    if (!got.ok()) {
      return absl::StrCat("FAIL run (data set ", s,
                          "): ", absl::StatusCodeToString(got.status().code()), ": ",
                          got.status().message());
    }
    if (got->size() < sets[s].second.size()) {
      return absl::StrCat("FAIL data set ", s, ": ", got->size(), " outputs, expected ",
                          sets[s].second.size());
    }
    for (size_t o = 0; o < sets[s].second.size(); ++o) {
      std::string diff = Compare((*got)[o], AsBFloat16IfBits(sets[s].second[o], (*got)[o].dtype()),
                                 absl::StrCat("data set ", s, " output ", o));
      if (!diff.empty()) return "FAIL " + diff;
    }
  }
  return pass;
}

// Forks, runs the case in the child, and returns its verdict line (crash/timeout -> FAIL).
std::string RunIsolated(const Case& c, int timeout_sec) {
  int fds[2];
  if (pipe(fds) != 0) return "FAIL cannot create pipe";
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return "FAIL cannot fork";
  if (pid == 0) {
    close(fds[0]);
    std::string r = RunCase(c);
    size_t off = 0;
    while (off < r.size()) {
      ssize_t w = write(fds[1], r.data() + off, r.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_sec);
  bool timed_out = false;
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = poll(&p, 1, left);
    if (r <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return absl::StrCat("FAIL timed out after ", timeout_sec, " s");
  if (WIFSIGNALED(status)) return absl::StrCat("FAIL crashed with signal ", WTERMSIG(status));
  if (out.empty()) return "FAIL child produced no verdict";
  return out;
}

int Main(int argc, char** argv) {
  std::string filter, exclude, known_file;
  bool mismatch_ok = false;  // reduced-precision runs: only crashes and errors fail
  int mismatched = 0;
  bool verbose = false;
  int timeout = 300;
  std::vector<std::string> roots;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--exclude" && i + 1 < argc)
      exclude = argv[++i];
    else if (a == "--timeout" && i + 1 < argc)
      timeout = std::atoi(argv[++i]);
    else if (a == "--known-divergent" && i + 1 < argc)
      known_file = argv[++i];
    else if (a == "--policy" && i + 1 < argc)
      g_settings.policy = argv[++i];
    else if (a == "--rtol" && i + 1 < argc)
      g_settings.rtol = std::atof(argv[++i]);
    else if (a == "--atol" && i + 1 < argc)
      g_settings.atol = std::atof(argv[++i]);
    else if (a == "--device" && i + 1 < argc)
      g_settings.device = argv[++i];
    else if (a == "--mismatch-is-not-failure")
      mismatch_ok = true;
    else if (a == "--verbose" || a == "-v")
      verbose = true;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: kiln_conformance [--policy P] [--rtol X] [--atol X] "
                   "[--mismatch-is-not-failure] [--device D] [--filter REGEX] [--exclude REGEX] "
                   "[--verbose] "
                   "[--timeout SEC] [--known-divergent FILE] DIR...\n";
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "kiln_conformance: unknown option " << a << "\n";
      return 2;
    } else {
      roots.push_back(a);
    }
  }
  if (roots.empty()) {
    std::cerr << "kiln_conformance: give at least one DIR\n";
    return 2;
  }
  // Cases whose expected data contradicts the ONNX 1.22 specification (one per line:
  // `<dir>/<case>  <reason>`): a failure there is reported as a skip with the reason.
  std::map<std::string, std::string> known;
  if (!known_file.empty()) {
    std::ifstream f(known_file);
    if (!f) {
      std::cerr << "kiln_conformance: cannot read " << known_file << "\n";
      return 2;
    }
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      auto sp = line.find_first_of(" \t");
      if (sp == std::string::npos) continue;
      known[line.substr(0, sp)] = line.substr(line.find_first_not_of(" \t", sp));
    }
  }
  std::regex fre(filter.empty() ? ".*" : filter), xre(exclude.empty() ? "$^" : exclude);
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> where;  // a device run's passes by where they ran
  std::map<std::string, int> skip_groups;
  std::vector<std::string> failures;
  for (const std::string& root : roots) {
    if (!IsDir(root)) {
      std::cerr << "kiln_conformance: '" << root << "' is not a folder\n";
      return 2;
    }
    for (const Case& c : FindCases(root)) {
      std::string base = BaseName(c.name);
      if (!std::regex_search(base, fre) || std::regex_search(base, xre)) continue;
      std::string r = RunIsolated(c, timeout);
      auto k = known.find(c.name);
      if (k != known.end()) {
        if (absl::StartsWith(r, "PASS")) {
          std::cout << "NOTE " << c.name << " passes: remove it from the known-divergent list\n";
        } else if (absl::StartsWith(r, "FAIL ")) {
          r = absl::StrCat("SKIP expected data contradicts the spec: ", k->second, " (", r, ")");
        }
      }
      if (absl::StartsWith(r, "PASS")) {
        ++passed;
        if (r.size() > 5) ++where[r.substr(5)];
        if (verbose) std::cout << r << " " << c.name << "\n";
      } else if (absl::StartsWith(r, "SKIP ")) {
        ++skipped;
        // Group by reason and the first offending op/dtype, e.g. "unsupported op: LSTM".
        std::string reason = r.substr(5, r.find(':') - 5);
        std::string detail;
        std::smatch m;
        static const std::regex op2_re(R"(op '?([\w.]+)'?)");
        static const std::regex dt_re(R"(unsupported dtype (?:number )?(\w+))");
        if (reason == "unsupported op" && std::regex_search(r, m, op2_re)) detail = m[1];
        static const std::regex dom_re(R"(domain '([^']+)')");
        if (reason == "unsupported op" && std::regex_search(r, m, dom_re)) {
          detail = "domain " + m[1].str();
        }
        if (reason == "unsupported dtype" && std::regex_search(r, m, dt_re)) detail = m[1];
        static const std::regex node_re(R"(\((\w+)\) #\d+\])");
        if (reason == "unsupported mode" && std::regex_search(r, m, node_re)) detail = m[1];
        // "unsupported ir_version: model ir_version 13 is newer ...": group by the version.
        static const std::regex ver_re(R"((ir_version \d+|opset \d+) is)");
        if ((reason == "unsupported ir_version" || reason == "unsupported opset") &&
            std::regex_search(r, m, ver_re)) {
          detail = m[1];
        }
        if (absl::StartsWith(reason, "expected data")) {
          size_t from = r.find(": ") + 2;
          detail = r.substr(from, r.find(" (", from) - from);
        }
        skip_groups[absl::StrCat(reason, ": ", detail)]++;
        if (verbose) std::cout << "SKIP " << c.name << ": " << r.substr(5) << "\n";
      } else if (mismatch_ok && absl::StrContains(r, " elements differ (")) {
        ++mismatched;
        ++passed;
        if (verbose) std::cout << "DIFF " << c.name << ": " << r.substr(5) << "\n";
      } else {
        ++failed;
        failures.push_back(absl::StrCat(c.name, ": ", r.substr(std::min<size_t>(5, r.size()))));
        std::cout << "FAIL " << c.name << ": " << r.substr(std::min<size_t>(5, r.size())) << "\n";
      }
      std::cout.flush();
    }
  }
  if (!skip_groups.empty()) {
    std::cout << "skipped, by reason:\n";
    std::vector<std::pair<int, std::string>> groups;
    for (const auto& [k, v] : skip_groups) groups.push_back({v, k});
    std::sort(groups.rbegin(), groups.rend());
    for (const auto& [count, reason] : groups) {
      std::cout << absl::StrFormat("  %5d  %s\n", count, reason);
    }
  }
  if (mismatch_ok) {
    std::cout << absl::StrFormat(
        "policy %s: %d case(s) ran outside rtol %g / atol %g (counted as passed: this run checks "
        "that reduced precision builds and runs without crash or error)\n",
        g_settings.policy, mismatched, g_settings.rtol, g_settings.atol);
  }
  if (g_settings.device != "cpu") {
    std::cout << absl::StrFormat(
        "device %s: of the %d passed, %d ran entirely on the device, %d partly (the rest of "
        "their nodes on the CPU), %d on the CPU alone\n",
        g_settings.device, passed, where["device"], where["mixed"], where["cpu"]);
  }
  std::cout << absl::StrFormat("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace kiln::conformance

int main(int argc, char** argv) { return kiln::conformance::Main(argc, argv); }
