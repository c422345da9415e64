#include "client/client_options.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::client {
namespace {

constexpr char kUsage[] = R"(usage:
  convert-client --server HOST:PORT [--server HOST:PORT]... --model MODEL.onnx -o ENGINE
                 [--policy PRESET | --policy-file FILE] [--rule 'SEL=PREC']...
                 [--constraints obey|prefer] [--fusion on|off]
                 [--device cpu|opencl[:PLATFORM[:DEVICE]] [--no-fallback]]
                 [--report R.json] [--html R.html] [--inputs DIR] [--seed N] [--samples N]
                 [--atol A] [--rtol R] [--fail-on-accuracy]
                 [--timeout 10m] [--token T] [--tls-ca CA.pem] [--request-id ID] [--retries N]
                 [--quiet]

  Uploads MODEL.onnx to a kiln-server, streams the build's log, and writes the engine (digest
  verified) and the accuracy report. --server may repeat, or be a dns:/// target: requests are
  spread with round_robin and an UNAVAILABLE replica is retried on another one (same request
  id). --token defaults to $KILN_TOKEN. --timeout is the deadline of the whole call (30s, 10m,
  1h; default 1h). --device builds for one of the server's devices (ListPresets lists them);
  the build's log says which nodes stay on the CPU and why, and the report where each ran.

  exit codes: 0 success, 1 local file error, 2 usage, 3 build failed (server status),
              4 accuracy gate failed (--fail-on-accuracy), 5 server unreachable
)";

// Flags and whether they take a value.
const std::map<std::string, bool>& KnownFlags() {
  static const auto* known = new std::map<std::string, bool>{{"--server", true},
                                                             {"--model", true},
                                                             {"-o", true},
                                                             {"--output", true},
                                                             {"--policy", true},
                                                             {"--policy-file", true},
                                                             {"--rule", true},
                                                             {"--constraints", true},
                                                             {"--fusion", true},
                                                             {"--report", true},
                                                             {"--html", true},
                                                             {"--inputs", true},
                                                             {"--seed", true},
                                                             {"--samples", true},
                                                             {"--atol", true},
                                                             {"--rtol", true},
                                                             {"--timeout", true},
                                                             {"--token", true},
                                                             {"--tls-ca", true},
                                                             {"--request-id", true},
                                                             {"--retries", true},
                                                             {"--fail-on-accuracy", false},
                                                             {"--quiet", false},
                                                             {"--help", false},
                                                             {"-h", false},
                                                             {"--device", true},
                                                             {"--no-fallback", false}};
  return *known;
}

absl::Status CheckTolerance(const std::string& flag, const std::string& value, double* out) {
  if (!absl::SimpleAtod(value, out) || !(*out >= 0) || *out > 1e30) {
    return UsageError(absl::StrCat(flag, " takes a non-negative number, got '", value, "'"));
  }
  return absl::OkStatus();
}

// Splits "host:port" or "[v6]:port"; the port must be a number in 1..65535.
absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  std::string rest;
  if (absl::StartsWith(address, "[")) {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return UsageError(absl::StrCat("--server '", address, "': expected [IPV6]:PORT"));
    }
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return UsageError(absl::StrCat("--server '", address, "': expected HOST:PORT"));
    }
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  int port_number = 0;
  if (!absl::SimpleAtoi(*port, &port_number) || port_number < 1 || port_number > 65535) {
    return UsageError(absl::StrCat("--server '", address, "': port must be 1..65535"));
  }
  return absl::OkStatus();
}

// A gRPC URI target ("dns:///host:port", "ipv4:1.2.3.4:5", "unix:/path") rather than HOST:PORT.
bool HasScheme(const std::string& target) {
  for (const char* scheme : {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(target, scheme)) return true;
  }
  return false;
}

}  // namespace

absl::Status UsageError(const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

const char* UsageText() { return kUsage; }

absl::StatusOr<absl::Duration> ParseDuration(const std::string& text) {
  std::string s(absl::StripAsciiWhitespace(text));
  absl::Duration d;
  double seconds = 0;
  if (s.empty()) return UsageError("empty duration");
  if (absl::SimpleAtod(s, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (s == "inf" || s == "-inf" || !absl::ParseDuration(s, &d)) {
    return UsageError(absl::StrCat("bad duration '", text, "' (examples: 30s, 10m, 1h30m, 500ms)"));
  }
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return UsageError(absl::StrCat("duration '", text, "' must be positive and finite"));
  }
  return d;
}

absl::StatusOr<ClientOptions> ParseArgs(int argc, const char* const* argv) {
  ClientOptions o;
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> switches;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool has_inline_value = false;
    if (absl::StartsWith(arg, "--") && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      has_inline_value = true;
    }
    auto it = KnownFlags().find(name);
    if (it == KnownFlags().end()) {
      if (!absl::StartsWith(arg, "-")) {
        return UsageError(
            absl::StrCat("unexpected argument '", arg, "' (the model goes in --model)"));
      }
      return UsageError(absl::StrCat("unknown flag ", name));
    }
    if (!it->second) {
      if (has_inline_value) return UsageError(absl::StrCat(name, " takes no value"));
      switches.insert(name);
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= argc) return UsageError(absl::StrCat(name, " needs a value"));
      value = argv[++i];
    }
    values[name == "--output" ? "-o" : name].push_back(value);
  }
  if (switches.count("--help") || switches.count("-h")) {
    o.help = true;
    return o;
  }
  // Every flag but --server and --rule may appear once: a repeated scalar flag is a typo.
  for (const auto& [name, list] : values) {
    if (list.size() > 1 && name != "--server" && name != "--rule") {
      return UsageError(absl::StrCat(name, " given ", list.size(), " times"));
    }
  }
  auto one = [&](const std::string& name) -> std::string {
    auto it = values.find(name);
    return it == values.end() ? std::string() : it->second.front();
  };
  auto has = [&](const std::string& name) { return values.count(name) > 0; };

  if (has("--server")) o.servers = values["--server"];
  for (const std::string& s : o.servers) {
    if (s.empty()) return UsageError("--server is empty");
  }
  if (o.servers.empty()) return UsageError("--server HOST:PORT is required");
  o.model_path = one("--model");
  if (o.model_path.empty()) return UsageError("--model MODEL.onnx is required");
  o.output_path = one("-o");
  if (o.output_path.empty()) return UsageError("-o ENGINE is required");
  o.policy = one("--policy");
  o.policy_file = one("--policy-file");
  if (has("--policy") && o.policy.empty()) return UsageError("--policy is empty");
  if (!o.policy.empty() && !o.policy_file.empty()) {
    return UsageError("--policy and --policy-file are exclusive");
  }
  if (has("--rule")) o.rules = values["--rule"];
  for (const std::string& r : o.rules) {
    if (r.find('=') == std::string::npos) {
      return UsageError(absl::StrCat("--rule '", r, "': expected SELECTOR=PRECISION"));
    }
  }
  o.constraints = one("--constraints");
  if (has("--constraints") && o.constraints != "obey" && o.constraints != "prefer") {
    return UsageError("--constraints takes obey or prefer");
  }
  o.fusion = one("--fusion");
  if (has("--fusion") && o.fusion != "on" && o.fusion != "off") {
    return UsageError("--fusion takes on or off");
  }
  o.device = one("--device");
  if (has("--device") && o.device.empty()) return UsageError("--device is empty");
  o.no_fallback = switches.count("--no-fallback") > 0;
  if (o.no_fallback && (o.device.empty() || o.device == "cpu")) {
    return UsageError("--no-fallback needs --device opencl[...]");
  }
  o.report_path = one("--report");
  o.html_path = one("--html");
  o.inputs_dir = one("--inputs");
  if (has("--seed")) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(one("--seed"), &seed)) {
      return UsageError(
          absl::StrCat("--seed takes a non-negative integer, got '", one("--seed"), "'"));
    }
    o.seed = seed;
  }
  if (has("--samples")) {
    if (!absl::SimpleAtoi(one("--samples"), &o.samples) || o.samples < 1 || o.samples > 10000) {
      return UsageError(
          absl::StrCat("--samples takes an integer in 1..10000, got '", one("--samples"), "'"));
    }
    if (!o.inputs_dir.empty())
      return UsageError("--samples applies to generated samples, not --inputs");
  }
  if (has("--seed") && !o.inputs_dir.empty())
    return UsageError("--seed and --inputs are exclusive");
  if (has("--atol")) {
    if (auto s = CheckTolerance("--atol", one("--atol"), &o.atol); !s.ok()) return s;
  }
  if (has("--rtol")) {
    if (auto s = CheckTolerance("--rtol", one("--rtol"), &o.rtol); !s.ok()) return s;
  }
  if (has("--timeout")) {
    auto d = ParseDuration(one("--timeout"));
    if (!d.ok()) return UsageError(absl::StrCat("--timeout: ", d.status().message()));
    o.timeout = *d;
  }
  o.token = has("--token") ? one("--token") : "";
  if (!has("--token")) {
    if (const char* env = std::getenv("KILN_TOKEN"); env != nullptr) o.token = env;
  } else if (o.token.empty()) {
    return UsageError("--token is empty");
  }
  o.tls_ca = one("--tls-ca");
  if (has("--tls-ca") && o.tls_ca.empty()) return UsageError("--tls-ca is empty");
  o.request_id = one("--request-id");
  if (has("--request-id") && (o.request_id.empty() || o.request_id.size() > 128)) {
    return UsageError("--request-id must be 1..128 characters");
  }
  if (has("--retries")) {
    int retries = 0;
    if (!absl::SimpleAtoi(one("--retries"), &retries) || retries < 0 || retries > 20) {
      return UsageError(
          absl::StrCat("--retries takes an integer in 0..20, got '", one("--retries"), "'"));
    }
    o.max_attempts = retries + 1;
  }
  o.fail_on_accuracy = switches.count("--fail-on-accuracy") > 0;
  o.quiet = switches.count("--quiet") > 0;
  if (o.servers.size() > 1) {
    for (const std::string& s : o.servers) {
      if (HasScheme(s)) {
        return UsageError(absl::StrCat("--server '", s,
                                       "': a URI target (dns:///...) cannot be combined with "
                                       "other --server addresses"));
      }
    }
  }
  return o;
}

bool WantsRoundRobin(const std::vector<std::string>& servers) {
  return servers.size() > 1 || (servers.size() == 1 && absl::StartsWith(servers[0], "dns:"));
}

absl::StatusOr<std::string> ChannelTarget(const std::vector<std::string>& servers) {
  if (servers.empty()) return UsageError("--server HOST:PORT is required");
  if (servers.size() == 1) {
    const std::string& s = servers[0];
    if (HasScheme(s)) return s;
    std::string host, port;
    if (auto st = SplitHostPort(s, &host, &port); !st.ok()) return st;
    return s;
  }
  // Several addresses: one static list of IP literals for the round_robin policy; hostnames are
  // resolved once here (all their IPv4 addresses become backends).
  std::vector<std::string> v4, v6;
  for (const std::string& s : servers) {
    std::string host, port;
    if (auto st = SplitHostPort(s, &host, &port); !st.ok()) return st;
    in_addr a4;
    in6_addr a6;
    if (inet_pton(AF_INET, host.c_str(), &a4) == 1) {
      v4.push_back(absl::StrCat(host, ":", port));
    } else if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
      v6.push_back(absl::StrCat("[", host, "]:", port));
    } else {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
        return UsageError(
            absl::StrCat("--server '", s, "': cannot resolve '", host, "' to an IPv4 address"));
      }
      std::set<std::string> seen;
      for (addrinfo* p = found; p != nullptr; p = p->ai_next) {
        char buf[INET_ADDRSTRLEN];
        auto* sin = reinterpret_cast<sockaddr_in*>(p->ai_addr);
        if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr &&
            seen.insert(buf).second) {
          v4.push_back(absl::StrCat(buf, ":", port));
        }
      }
      freeaddrinfo(found);
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return UsageError("--server: IPv4 and IPv6 addresses cannot be mixed; use a dns:/// target");
  }
  return v4.empty() ? absl::StrCat("ipv6:", absl::StrJoin(v6, ","))
                    : absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
}

}  // namespace kiln::client
