// Status helpers shared by the whole engine. Engine code returns absl::Status / StatusOr and
// never throws; these macros are the only early-return helpers.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define KILN_STATUS_CONCAT_INNER(a, b) a##b
#define KILN_STATUS_CONCAT(a, b) KILN_STATUS_CONCAT_INNER(a, b)

/// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

/// `ASSIGN_OR_RETURN(auto x, Foo())`: assigns the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_STATUS_CONCAT(kiln_statusor_, __LINE__), lhs, expr)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

namespace kiln {

/// `text` for an error message: as is up to `max_bytes`, else its first `max_bytes` bytes and
/// "... (N bytes)". An error that quotes what a user or a client sent (a rule, an id, a name)
/// stays short however large that input is: through gRPC the message travels in metadata,
/// whose size is limited.
inline std::string Excerpt(absl::string_view text, size_t max_bytes = 120) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;  // not inside a UTF-8 sequence
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), "... (", text.size(), " bytes)");
}

}  // namespace kiln
