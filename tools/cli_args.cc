#include "tools/cli_args.h"

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kiln::tools {

absl::Status UsageError(const std::string& message) {
  absl::Status st = absl::InvalidArgumentError(message);
  st.SetPayload(kUsagePayload, absl::Cord("1"));
  return st;
}

// Flags each command takes; `true` means the flag takes a value.
absl::StatusOr<Args> Parse(int argc, char** argv, int first,
                           const std::map<std::string, bool>& known) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.size() > 1 && s[0] == '-') {
      auto it = known.find(s);
      if (it == known.end()) return absl::InvalidArgumentError(absl::StrCat("unknown option ", s));
      if (it->second) {
        if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(s, " needs a value"));
        a.flags[s] = argv[++i];
        a.all[s].push_back(a.flags[s]);
      } else {
        a.flags[s] = "";
      }
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

}  // namespace kiln::tools
