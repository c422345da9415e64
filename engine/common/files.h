// Atomic, durable file writes shared by the CLI, the client and the server.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln {

/// Writes `bytes` to `path` so that readers see the old file or the whole new one, never a part:
/// a temp file with a unique name in the same folder, created exclusively with `mode` (less the
/// umask), written in full and fsync'd, then renamed over `path`. On any failure the temp file
/// is removed and `path` is untouched; the error names the file and the system's reason.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, mode_t mode = 0666);

/// As WriteFileAtomic, the file being `parts` one after the other (a header and a payload written
/// from where they are, without first joining them into one buffer).
absl::Status WriteFilePartsAtomic(const std::string& path,
                                  absl::Span<const absl::string_view> parts, mode_t mode = 0666);

/// Copies `from` to `to` the same way, in 1 MiB blocks (never holding the whole file).
absl::Status CopyFileAtomic(const std::string& from, const std::string& to, mode_t mode = 0666);

}  // namespace kiln
