#include "server/config.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/common/status.h"

namespace kiln::server {
namespace {

constexpr char kUsage[] = R"(usage: kiln-server [--listen HOST:PORT] [--port-file F] [--workers N]
                   [--queue M] [--cache-dir DIR] [--work-dir DIR] [--max-model-bytes B]
                   [--max-sample-bytes B] [--max-samples N] [--worker-memory-mb MB]
                   [--worker-cpu-seconds S] [--drain-seconds S] [--keep-builds N]
                   [--max-uploads N] [--upload-idle-seconds S] [--upload-seconds S]
                   [--event-buffer N] [--token T | --token-file F] [--tls-cert PEM --tls-key PEM
                   [--tls-client-ca PEM]] [--reflection] [--enable-test-hooks] [--config FILE]

Serves kiln.v1.Converter (and grpc.health.v1.Health) on 127.0.0.1:50051 by default. Builds run
in child worker processes with memory and CPU limits. SIGTERM or SIGINT drains: new builds are
refused (UNAVAILABLE), running ones may finish for --drain-seconds, then the server exits 0.
--config FILE holds `name = value` lines with the flag names (no dashes); `#` starts a comment.
)";

// Applies one setting; `where` names it in errors ("--workers" or "server.conf:3").
absl::Status Apply(ServerConfig& c, const std::string& name, const std::string& value,
                   bool has_value, const std::string& where) {
  auto need = [&]() -> absl::Status {
    if (!has_value) return absl::InvalidArgumentError(absl::StrCat(where, ": needs a value"));
    return absl::OkStatus();
  };
  auto integer = [&](auto& out, int64_t lo, int64_t hi) -> absl::Status {
    RETURN_IF_ERROR(need());
    int64_t v;
    if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": takes an integer from ", lo, " to ",
                                                     hi, ", got '", Excerpt(value), "'"));
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return absl::OkStatus();
  };
  auto text = [&](std::string& out) -> absl::Status {
    RETURN_IF_ERROR(need());
    out = value;
    return absl::OkStatus();
  };
  auto flag = [&](bool& out) -> absl::Status {
    if (!has_value || value == "true" || value == "1" || value == "on") {
      out = true;
    } else if (value == "false" || value == "0" || value == "off") {
      out = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": takes true or false"));
    }
    return absl::OkStatus();
  };
  if (name == "listen") return text(c.listen);
  if (name == "port-file") return text(c.port_file);
  if (name == "workers") return integer(c.workers, 1, 1024);
  if (name == "queue") return integer(c.queue, 0, 100000);
  if (name == "cache-dir") return text(c.cache_dir);
  if (name == "work-dir") return text(c.work_dir);
  if (name == "max-model-bytes") return integer(c.max_model_bytes, 1, (int64_t{2} << 30) - 1);
  if (name == "max-sample-bytes") return integer(c.max_sample_bytes, 1024, int64_t{1} << 30);
  if (name == "max-samples") return integer(c.max_samples, 0, 100000);
  if (name == "worker-memory-mb") return integer(c.worker_memory_mb, 64, int64_t{1} << 22);
  if (name == "worker-cpu-seconds") return integer(c.worker_cpu_seconds, 1, 1 << 30);
  if (name == "drain-seconds") return integer(c.drain_seconds, 0, 1 << 20);
  if (name == "max-uploads") return integer(c.max_uploads, 1, 100000);
  if (name == "upload-idle-seconds") return integer(c.upload_idle_seconds, 1, 1 << 20);
  if (name == "upload-seconds") return integer(c.upload_seconds, 1, 1 << 24);
  if (name == "keep-builds") return integer(c.keep_builds, 0, 1 << 20);
  if (name == "event-buffer") return integer(c.event_buffer, 16, 1 << 24);
  if (name == "token") return text(c.token);
  if (name == "token-file") return text(c.token_file);
  if (name == "tls-cert") return text(c.tls_cert);
  if (name == "tls-key") return text(c.tls_key);
  if (name == "tls-client-ca") return text(c.tls_client_ca);
  if (name == "reflection") return flag(c.reflection);
  if (name == "enable-test-hooks") return flag(c.enable_test_hooks);
  if (name == "worker-binary") return text(c.worker_binary);
  return absl::InvalidArgumentError(absl::StrCat(where, ": unknown setting '", Excerpt(name), "'"));
}

bool IsBoolFlag(const std::string& name) {
  return name == "reflection" || name == "enable-test-hooks";
}

absl::Status ReadConfigFile(ServerConfig& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--config: cannot read '", path, "'"));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string where = absl::StrCat(path, ":", n);
    absl::string_view l = line;
    if (size_t hash = l.find('#'); hash != absl::string_view::npos) l = l.substr(0, hash);
    l = absl::StripAsciiWhitespace(l);
    if (l.empty()) continue;
    size_t eq = l.find('=');
    std::string name(absl::StripAsciiWhitespace(l.substr(0, eq)));
    if (name == "config") return absl::InvalidArgumentError(absl::StrCat(where, ": nested config"));
    if (eq == absl::string_view::npos) {
      RETURN_IF_ERROR(Apply(c, name, "", false, where));
    } else {
      RETURN_IF_ERROR(
          Apply(c, name, std::string(absl::StripAsciiWhitespace(l.substr(eq + 1))), true, where));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* ServerUsage() { return kUsage; }

absl::StatusOr<ServerConfig> ParseServerFlags(int argc, char** argv) {
  // Pass 1: split into (name, value) pairs; --name=value and --name value both work.
  struct Flag {
    std::string name, value;
    bool has_value;
  };
  std::vector<Flag> flags;
  std::string config_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    }
    a = a.substr(2);
    Flag f{a, "", false};
    if (size_t eq = a.find('='); eq != std::string::npos) {
      f = {a.substr(0, eq), a.substr(eq + 1), true};
    } else if (!IsBoolFlag(a)) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", a, ": needs a value"));
      f = {a, argv[++i], true};
    }
    if (f.name == "config") {
      config_file = f.value;
    } else {
      flags.push_back(std::move(f));
    }
  }
  ServerConfig c;
  if (!config_file.empty()) RETURN_IF_ERROR(ReadConfigFile(c, config_file));
  for (const Flag& f : flags) {
    RETURN_IF_ERROR(Apply(c, f.name, f.value, f.has_value, absl::StrCat("--", f.name)));
  }
  if (!c.token_file.empty()) {
    std::ifstream in(c.token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: cannot read '", c.token_file, "'"));
    }
    c.token = std::string(absl::StripAsciiWhitespace(ss.str()));
    if (c.token.empty()) return absl::InvalidArgumentError("--token-file: the file is empty");
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  return c;
}

}  // namespace kiln::server
