// The folders of sample sets in the ONNX backend-test layout, shared by the kiln CLI (which
// parses them) and convert-client (which uploads their raw bytes).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

/// Folders holding a sample set (`input_0.pb`, `input_1.pb`, ...) for `--inputs DIR`: DIR itself
/// when it holds input_0.pb, else every DIR/test_data_set_<N> (N decimal, in numeric order, so
/// 10 comes after 9) that holds input_0.pb. NotFound naming DIR when it is not a folder or holds
/// no set; PermissionDenied when it cannot be listed.
absl::StatusOr<std::vector<std::string>> SampleSetFolders(const std::string& dir);

}  // namespace kiln
